"""What every command shares: the phase options, loading with progress, warnings, width."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, Sequence

from tracerecon.analysis.config import DEFAULT_CYCLE, DEFAULT_PHASES, PhaseConfig
from tracerecon.errors import UsageError
from tracerecon.json_text import one_line, shown_message, valid_text

BUNDLED_SAMPLE = Path(__file__).resolve().parent.parent.parent / "sample_traces" / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"
TRACE_HELP = "nsys .sqlite export(s) (or .sqlite.xz), a directory of them, a `tracerecon run` directory, or a `tracerecon export` directory"


def add_analysis_command(sub, name: str, help: str, description: str, traces_required: bool = True) -> argparse.ArgumentParser:
    """A subcommand that analyses traces: the traces and the shared phase options."""
    p = sub.add_parser(name, help=help, description=description)
    add_traces_arg(p, traces_required)
    add_phase_args(p)
    return p


def add_traces_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("traces", nargs="+" if required else "*", metavar="TRACE", help=TRACE_HELP)
    add_load_args(p)


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of worker processes, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more worker processes, got {n}")
    return n


def output_path(value: str) -> str:
    """An ``-o`` value: a path, not nothing (an empty one would be the current directory), nor
    ``-``, which reads as standard output but would be a file of that name (``./-`` is one)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a path, got nothing")
    if value == "-":
        raise argparse.ArgumentTypeError("'-' (standard output) is not written to: give a file's path (./- names a file '-')")
    return value


def _scheduler(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a scheduler address (tcp://host:8786) or scheduler file, got nothing")
    # Said here, before any cache is looked at: a report found in the cache ignored the flag
    # (exit 0) where the same command without one said this (exit 2).
    import importlib.util

    try:
        missing = importlib.util.find_spec("distributed") is None
    except (ImportError, ValueError):  # (a broken install, or one set to None in sys.modules)
        missing = True
    if missing:
        from tracerecon.errors import install_hint

        raise argparse.ArgumentTypeError(f"needs Dask distributed: {install_hint('dask')}")
    return value


def add_load_args(p: argparse.ArgumentParser) -> None:
    """How exports are read: worker processes, the cache, a Dask cluster."""
    p.add_argument("-j", "--jobs", type=_positive_int, metavar="N", help="worker processes for several exports (default: one per file, at most one per core and as many as fit in the memory available)")
    p.add_argument("--no-cache", action="store_true", help="read and analyse the exports again instead of using the cache ($TRACERECON_CACHE_DIR, else $XDG_CACHE_HOME/tracerecon, else ~/.cache/tracerecon)")
    p.add_argument("--dask", type=_scheduler, metavar="ADDRESS", help="read and analyse the exports on a Dask distributed cluster: its scheduler address "
                   "(tcp://host:8786) or scheduler file; the exports must be at the same paths on its workers (needs tracerecon[dask])")


def add_phase_args(p: argparse.ArgumentParser, presets: bool = True) -> None:
    """The options that say what a phase is: every analysing command takes the same ones
    (``run`` its own ``--preset``, which also wraps and switches the engine's ranges on)."""
    if presets:
        from tracerecon.presets import PRESETS

        p.add_argument("--preset", action="append", metavar="ENGINE",
                       help=f"read with an engine preset's phases ({', '.join(sorted(PRESETS))}), as `tracerecon run --preset` records them "
                            "(its ranges: the engine's own NVTX scopes, switched on, and those `run` wraps); with --phase, both")
    p.add_argument("--phase", action="append", metavar="NAME|LABEL=PATTERN",
                   help=f"an engine phase: its NVTX range name, or LABEL=re:REGEX / LABEL=glob:GLOB / LABEL=NAME mapping the engine's own range names "
                        f"to a phase (repeatable; default: {', '.join(DEFAULT_PHASES)})")
    p.add_argument("--skip-cycles", type=int, metavar="N", help="leave the first N cycles out of the medians (default: the leading warm-up outliers; 0 keeps all)")
    p.add_argument("--cycle", metavar="PREFIX", help=f"name prefix of the range enclosing one cycle (default: {DEFAULT_CYCLE}, or what run.json recorded; \"\" "
                   "reads no range as a cycle); without such ranges a cycle starts where the first --phase given (that occurs) begins again after other phases")
    p.add_argument("--phase-thread", metavar="TID|auto|same",
                   help="GPU work launched by threads with no phase open goes to the phase open on the thread holding the phases: "
                        "auto = for phases that launch nothing themselves (default), same = never (nsys's rule), TID = every phase on that thread")


def inputs_of(args: argparse.Namespace) -> list[str]:
    """The traces a command was given, whatever its arguments are called."""
    out = list(getattr(args, "traces", None) or [])
    out += [x for x in (getattr(args, "a", None), getattr(args, "b", None), getattr(args, "diff", None)) if isinstance(x, str)]
    return out


def config_from(args: argparse.Namespace, inputs: Sequence[str] | None = None) -> PhaseConfig:
    """The phase options given on the command line, resolved by the core (``api.phase_config``:
    without ``--phase`` or ``--preset``, those the run directories among the inputs recorded)."""
    if getattr(args, "no_cache", False):
        os.environ["TRACERECON_NO_CACHE"] = "1"  # tracerecon.cache reads it; worker processes inherit it
    from tracerecon.api import phase_config

    for flag, values in (("--phase", args.phase or ()), ("--cycle", [args.cycle] if args.cycle is not None else [])):
        for value in values:
            if valid_text(value) != value:  # bytes the shell passed that are no UTF-8: no name in a trace can match them
                raise UsageError(f"{flag} {one_line(value)}: not UTF-8 text (a trace's names are)")
    return phase_config(inputs_of(args) if inputs is None else inputs, phases=args.phase or (),
                        presets=preset_phases(getattr(args, "preset", None) or ()), cycle=args.cycle,
                        skip_cycles=args.skip_cycles, phase_thread=args.phase_thread)


def preset_phases(names: Sequence[str]) -> tuple[str, ...]:
    """The phase specs of the presets ``names``, in order, each once (UsageError: one unknown)."""
    if not names:
        return ()
    from tracerecon import presets

    return tuple(dict.fromkeys(spec for name in names for spec in presets.get(name).phases))


def say(msg: str) -> None:
    print(f"tracerecon: {shown_message(msg)}", file=sys.stderr, flush=True)


def warn_all(warnings: Sequence[str]) -> None:
    for w in warnings:
        say(f"warning: {w}")


def output_width() -> int | None:
    """The terminal's width; when not a terminal (piped, redirected), $COLUMNS or 80, the width
    reports are laid out for ($COLUMNS that is no positive number counts as unset, as a
    terminal's shell never sets it so)."""
    if sys.stdout.isatty():
        return None
    try:
        columns = int(os.environ.get("COLUMNS", "80"))
    except ValueError:
        return 80
    return max(40, columns) if columns > 0 else 80


def console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # `tracerecon report ... | head`: the reader left; that is no error (rich exits 1).
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0)

        def render_str(self, text: str, **kwargs):
            # A table's cells: names from the trace, shown with their control characters as
            # escapes (a range named with ESC sequences recoloured the terminal; a newline split
            # its row in two), as on stderr.
            return super().render_str(one_line(text), **kwargs)

        def _render_buffer(self, buffer) -> str:
            # Tables pad their lines to the width: piped or redirected, no trailing spaces.
            text = super()._render_buffer(buffer)
            return text if self.is_terminal else "\n".join(line.rstrip(" ") for line in text.split("\n"))

    # No markup, no emoji codes: range, kernel and file names are the trace's text ('[rank0]
    # verify', '[/x]', 'step:a:forward', whose ':a:' rich would print as an emoji).
    return _Console(highlight=False, markup=False, emoji=False, soft_wrap=False, width=output_width())


@contextlib.contextmanager
def progress_reporter() -> Iterator:
    """A rich spinner on stderr when it is a terminal; silent otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("starting")
        # (a message's lines kept, each with its control characters as escapes)
        yield lambda msg: prog.update(task, description="\n".join(map(one_line, msg.split("\n"))))


def load(inputs: Sequence[str], config: PhaseConfig, jobs: int | None = None, scheduler: str | None = None, side: str = "",
         phases_unused: bool = False):
    """``api.load`` with a progress spinner; warnings go to stderr, each led by ``side`` where
    given (``diff``'s and ``plot --diff``'s "A", "B": a warning that names no file is either's),
    but for those of the phases where the command uses none (``phases_unused``: ``ranges``):
    that they matched no range, that GPU work was queued outside them."""
    from tracerecon import api

    with progress_reporter() as progress:
        analysis = api.load(inputs, config, progress, jobs, scheduler)
    said = said_warnings(analysis, phases_unused)
    warn_all([f"{side}: {w}" for w in said] if side else said)
    return analysis


def said_warnings(analysis, phases_unused: bool = False) -> list[str]:
    """The warnings of ``analysis`` a command says (``load``), those of the phases left out where
    it uses none (``phases_unused``)."""
    from tracerecon.analysis.rank import QUEUED_OUTSIDE_PHASES
    from tracerecon.pipeline import RANGES_HINT

    return [w for w in analysis.warnings if not (phases_unused and (RANGES_HINT in w or QUEUED_OUTSIDE_PHASES in w))]


def load_report(inputs: Sequence[str], config: PhaseConfig, jobs: int | None = None, scheduler: str | None = None):
    """``api.report`` with a progress spinner; warnings go to stderr."""
    from tracerecon import api

    with progress_reporter() as progress:
        report = api.report(inputs, config, progress, jobs, scheduler)
    warn_all(report.warnings)
    return report
