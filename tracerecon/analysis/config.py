"""What a phase is, as the user says it: the phase range names, the cycle prefix, and which
phases take work launched by other threads. Light on purpose: the command line reads it
before any heavy module is imported."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

DEFAULT_PHASES = ("draft", "verify", "draft_re_extend", "draft_extend", "target_verify")
DEFAULT_CYCLE = "cycle"
# The NVTX domain of tracerecon.instrument's ranges and marks: there a range's integer payload is
# a cycle's index (a cycle range's own, a phase's the cycle it belongs to).
INSTRUMENT_DOMAIN = "tracerecon"
AUTO = "auto"
SAME = "same"


@dataclass(frozen=True)
class PhaseConfig:
    """Which NVTX ranges are phases, which enclose a cycle (prefix match), which phases take
    work launched by other threads, and how many leading cycles are warm-up.

    A phase spec is a range name (``verify``), or ``LABEL=PATTERN`` mapping an engine's own range
    names to a phase: ``verify=re:^gpu_model_runner: (sample|rejection)`` (a regular expression
    searched in the name, or in ``domain:name`` when it contains a colon-free domain prefix is
    wanted, write ``re:^mydomain:...``), ``draft=glob:*draft*`` or ``draft=exact name``.
    ``skip_cycles``: leading cycles left out of the medians (None: the leading outliers, see
    ``analysis.phases.warmup_cycles``).
    """

    phases: tuple[str, ...] = DEFAULT_PHASES
    cycle_prefix: str = DEFAULT_CYCLE
    # Which phases take GPU work launched by other threads: "auto" | "same" | a thread id
    # (analysis.attribution).
    phase_thread: str | int = AUTO
    skip_cycles: int | None = None
    # The phases came from a run directory's run.json (a preset's list, some of whose names an
    # engine version lacks): a phase no range matched is not said (it is, for phases asked for).
    phases_recorded: bool = False
    # The phase specs that came from a preset (``--preset`` on an analysing command): as a
    # recorded list, its names a trace lacks are not said, nor its patterns' several names.
    preset_phases: tuple[str, ...] = ()
    # The phase options given (their flags, as ``--phase``): an export directory, which holds the
    # analysis made when it was written, says it ignores them (``api.load``).
    # (Neither compared nor in the repr, so in no cache key: it changes no number.)
    given: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def labels(self) -> tuple[str, ...]:
        """The phase names the specs give, in order (each once)."""
        return tuple(dict.fromkeys(parse_phase_spec(s)[0] for s in self.phases))

    def matchers(self) -> tuple[tuple[str, "re.Pattern[str]"], ...]:
        """(phase label, compiled pattern over ``domain:name`` or ``name``), in spec order."""
        return _matchers(self.phases)

    def label_of(self, name: str, domain: str = "") -> str | None:
        """The phase a range is, or None."""
        at = self._taker(name, domain)
        return None if at is None else self.matchers()[at][0]

    def spec_of(self, name: str, domain: str = "") -> str | None:
        """The phase spec that takes a range: the first that matches it; None where none does."""
        at = self._taker(name, domain)
        return None if at is None else self.phases[at]

    def _taker(self, name: str, domain: str) -> int | None:
        """The index of the first spec whose pattern matches the range (its name, or
        ``domain:name``), or None."""
        for at, (_, pat) in enumerate(self.matchers()):
            if pat.search(name) or (domain and pat.search(f"{domain}:{name}")):
                return at
        return None


# A run of digits in a range's name: names that differ only in these are one kind (cycle ranges,
# ``cycle_kind``) or one family (``summary.summarize_ranges``).
NUMBERS = re.compile(r"\d+")


def cycle_kind(name: str | None) -> str:
    """A cycle range's name without its numbers: ``cycle 3`` and ``cycle 4`` are one kind of
    cycle (so are ``cycle 3 bs=8`` and ``cycle 4 bs=16``), ``cycle_draft_loop`` another."""
    return NUMBERS.sub("", name or "")


def is_cycle_name(name: str | None, prefix: str) -> bool:
    """Whether a range named ``name`` encloses a cycle: its name starts with the cycle prefix
    (``--cycle``; ``cycle 3``, ``cycle_prefill 0``, ``iteration 5`` with ``--cycle iter``). No
    name with no prefix (``--cycle ""``: no cycle ranges). A range of another role whose name
    starts so (``cycle_draft_loop``) is one too: where such ranges lie inside others, a phase
    takes the innermost as its cycle, and a warning says so (``analysis.rank``)."""
    return bool(prefix) and bool(name) and name.startswith(prefix)


@functools.lru_cache(maxsize=32)
def _matchers(specs: tuple[str, ...]) -> tuple[tuple[str, "re.Pattern[str]"], ...]:
    return tuple(parse_phase_spec(s) for s in specs)


def _shown(spec: str) -> str:
    """A --phase value in a message, quoted as typed (a backslash stays one), its control and
    invisible characters as escapes."""
    from tracerecon.json_text import one_line

    return f"'{one_line(spec)}'" if "'" not in spec else repr(spec)


def parse_phase_spec(spec: str) -> tuple[str, "re.Pattern[str]"]:
    """``verify`` -> (verify, ^verify$); ``verify=re:REGEX`` -> (verify, REGEX);
    ``draft=glob:*draft*``; ``draft=some name`` (exact). Raises ValueError on a bad regex."""
    import fnmatch

    if "=" in spec:
        label, pattern = spec.split("=", 1)
        label = label.strip()
        if not label:
            raise ValueError(f"--phase {_shown(spec)}: the phase's name before '=' is empty")
        if not pattern.strip():
            raise ValueError(f"--phase {_shown(spec)}: the range name or pattern after '=' is empty")
        kind = next((k for k in ("re:", "glob:") if pattern.startswith(k)), None)
        if kind and not pattern[len(kind):].strip():  # an empty pattern matches every range, cycles included
            raise ValueError(f"--phase {_shown(spec)}: the pattern after '{kind}' is empty")
        if pattern.startswith("re:"):
            try:
                return label, re.compile(pattern[3:])
            except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}; thousands of nested groups
                raise ValueError(f"--phase {_shown(spec)}: bad regular expression ({exc})") from None
        if pattern.startswith("glob:"):
            return label, re.compile("^" + fnmatch.translate(pattern[5:]))  # the whole name, as a shell glob
        return label, re.compile("^" + re.escape(pattern) + "$")
    if not spec.strip():
        raise ValueError(f"--phase {_shown(spec)}: a phase needs a name (its NVTX range's)")
    return spec, re.compile("^" + re.escape(spec) + "$")


def patterns_of_several_names(config: PhaseConfig, named: set[tuple[str, str]], shown: int = 3) -> list[str]:
    """A warning per pattern phase spec (``LABEL=re:...``, ``LABEL=glob:...``) given that takes
    ranges of more than one kind of name, of the (range name, domain) pairs ``named``: all of
    them are one phase, which a pattern written for one name may not have meant (``draft=re:draft``
    also takes ``draft_re_extend``). Names that differ only in their numbers are one kind
    (``draft_0``, ``draft_1``: ``NUMBERS``); at most ``shown`` are named."""
    out = []
    for spec in dict.fromkeys(config.phases):
        if not spec.split("=", 1)[-1].startswith(("re:", "glob:")) or "=" not in spec or spec in config.preset_phases:
            continue
        label = parse_phase_spec(spec)[0]
        kinds: dict[str, str] = {}
        for name, domain in sorted(named):
            # (the ranges this spec itself takes: not those an earlier spec took, of its label too)
            if config.spec_of(name, domain) == spec:
                kinds.setdefault(NUMBERS.sub("#", name), name)
        if len(kinds) > 1:
            names = list(kinds.values())
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            out.append(f"--phase {_shown(spec)} takes ranges of {len(names)} names, all read as phase {label!r}: "
                       f"{', '.join(map(repr, names[:shown]))}{more} (`tracerecon ranges` lists the names)")
    return out


def pattern_hint(specs: tuple[str, ...] | list[str]) -> str:
    """A clause for a warning that phase specs matched nothing, where one reads as a pattern
    that is not one: ``re:...`` or ``glob:...`` with no ``NAME=`` before it is an exact range
    name; and a glob holding ``[``, where it opens a set of characters, so that
    ``glob:[Executor] *`` (TensorRT-LLM's ranges) matches no name that starts with a bracket.
    Empty where neither is."""
    out = ""
    if any("=" not in s and s.startswith(("re:", "glob:")) for s in specs):
        out += "; a pattern needs the phase's name first (draft=re:..., draft=glob:...): without one it is a range's exact name"
    if any("=" in s and s.split("=", 1)[1].startswith("glob:") and "[" in s.split("=", 1)[1] for s in specs):
        out += "; in a glob, [...] matches one character of a set: write [[] for a '[' itself (glob:[[]Executor] *) or use re:"
    return out


def parse_phase_thread(value: str | int | None) -> str | int:
    """``auto`` | ``same`` | a thread id (int). Raises ValueError for anything else."""
    if value is None:
        return AUTO
    if isinstance(value, int):
        return value
    v = str(value).strip().lower()
    if v in (AUTO, SAME):
        return v
    if v.isdecimal():
        return int(v)
    raise ValueError(f"--phase-thread {value!r}: expected auto, same or a thread id")
