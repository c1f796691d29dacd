"""Phase ranges for engines you cannot edit: wrap named callables when their module is imported.

``tracerecon run --wrap module:Class.method=phase`` (and ``--preset``) writes a
``sitecustomize.py`` that calls ``install(spec)`` in every Python process of the run (torchrun
workers and multiprocessing children too): each target is wrapped as soon as its module has
been imported. A spec is ``module:Qual=ACTION``; one callable may carry several actions:

- ``NAME``: an NVTX range ``NAME`` (tracerecon domain) around each call: a phase;
- ``NAME:begin`` / ``NAME:end`` / ``NAME:stop``: a range ``NAME`` that opens when the call starts
  and closes when another call ends (``end``) or starts (``stop``): a phase spanning calls;
- ``@cycle``: a ``cycle N`` range around each call; ``@cycle:begin`` / ``@cycle:end``: one
  spanning calls (N counts per process; phase ranges carry it as payload);
- ``@tag``: the returned object remembers the current cycle (for output read later);
- ``@queue``: the current cycle joins a first-in first-out queue (for results reported later);
- ``@accepted:EXTRACTOR``: after the call, ``tracerecon.presets.EXTRACTORS[EXTRACTOR]`` reads the
  accepted tokens from values already on the CPU and emits ``tracerecon.instrument.accepted``.

Before the run, ``probe`` answers from the launch environment's sources (``tracerecon.resolve``,
no engine import) whether each target exists, so a target that does not is an error naming it
and the version found, before nsys starts.
"""

from __future__ import annotations

# Imported by sitecustomize in every Python process of a run: the standard library modules
# that only the launch-time functions need are imported there.
import collections
import functools
import importlib.abc
import importlib.util
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any, Sequence

ENV_SPEC = "TRACERECON_WRAP"
SPEC_SEPARATOR = ";"

PHASE, SPAN_BEGIN, SPAN_END, SPAN_STOP = "phase", "begin", "end", "stop"
CYCLE, CYCLE_BEGIN, CYCLE_END = "@cycle", "@cycle:begin", "@cycle:end"
TAG, QUEUE, ACCEPTED = "@tag", "@queue", "@accepted"
_SPAN_SUFFIX = {":begin": SPAN_BEGIN, ":end": SPAN_END, ":stop": SPAN_STOP}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Cycles whose results are reported later wait here; bounded so that a queue nobody reads stays small.
QUEUE_LIMIT = 256


@dataclass(frozen=True)
class WrapTarget:
    """One action on one callable: ``module:qualname=action[:label]``."""

    module: str
    qualname: str  # "Class.method" or "function"
    action: str  # PHASE, SPAN_*, CYCLE*, TAG, QUEUE, ACCEPTED
    label: str = ""  # the phase name, or the extractor of ACCEPTED

    @classmethod
    def parse(cls, spec: str) -> "WrapTarget":
        """``module:Qual.name=ACTION`` (ACTION defaults to a phase named after the last name part).
        Raises ValueError on a malformed spec."""
        target, _, action = spec.partition("=")
        module, sep, qual = target.strip().partition(":")
        module, qual, action = module.strip(), qual.strip(), action.strip()
        if not sep or not _NAME.match(module) or not _NAME.match(qual):
            raise ValueError(f"bad --wrap {spec!r}: expected module:Class.method=phase")
        if not action:
            return cls(module, qual, PHASE, qual.rsplit(".", 1)[-1])
        if action in (CYCLE, CYCLE_BEGIN, CYCLE_END, TAG, QUEUE):
            return cls(module, qual, action)
        if action.startswith(ACCEPTED + ":") and action[len(ACCEPTED) + 1:]:
            return cls(module, qual, ACCEPTED, action[len(ACCEPTED) + 1:])
        if action.startswith("@"):
            raise ValueError(f"bad --wrap {spec!r}: unknown action {action!r} (@cycle, @cycle:begin, @cycle:end, @tag, @queue, @accepted:NAME)")
        for suffix, kind in _SPAN_SUFFIX.items():
            if action.endswith(suffix) and len(action) > len(suffix):
                return cls(module, qual, kind, action[: -len(suffix)])
        return cls(module, qual, PHASE, action)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.qualname}"

    def spec(self) -> str:
        if self.action == PHASE:
            return f"{self.target}={self.label}"
        if self.action in (SPAN_BEGIN, SPAN_END, SPAN_STOP):
            return f"{self.target}={self.label}:{self.action}"
        if self.action == ACCEPTED:
            return f"{self.target}={ACCEPTED}:{self.label}"
        return f"{self.target}={self.action}"


def parse_all(specs: Sequence[str]) -> list[WrapTarget]:
    """Specs -> targets, each once, in order. Raises ValueError on the first bad one."""
    return list(dict.fromkeys(WrapTarget.parse(s) for s in specs))


# --------------------------------------------------------------------------------------------
# In the engine's processes.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A finished call, as accepted-token extractors see it."""

    instance: Any  # the object a method was called on (None for a function)
    args: tuple  # the arguments after the instance
    kwargs: dict
    result: Any
    cycle: int | None  # the cycle open on the calling thread when the call started


class CycleBook:
    """A process's cycles and open spans: the cycle counter, the ranges one call opens and
    another closes, and the queue of cycles whose results come later.

    Spans are NVTX push/pop ranges (tracerecon reads nesting, hence cycles, from push/pop
    ranges), so each thread keeps its own stack: closing a span closes the spans opened after it
    on that thread first, and a span is closed only by the thread that opened it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._local = threading.local()
        self._queue: collections.deque = collections.deque(maxlen=QUEUE_LIMIT)

    def next_index(self) -> int:
        with self._lock:
            i = self._next
            self._next += 1
            return i

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def open_span(self, label: str, message: str, payload: int | None) -> None:
        """Open range ``label`` on this thread (closing one already open under that label: the
        call that should have closed it did not run)."""
        import nvtx

        from tracerecon import instrument

        instrument.mark_rank()
        self.close_span(label)
        if label == CYCLE:  # "cycle N": a message used once
            instrument.push_once(message, payload)
        else:
            nvtx.push_range(message=message, domain=instrument.DOMAIN, payload=payload)
            if instrument._declaring:  # a phase spanning calls says its stream as one in a `with` does
                instrument.mark_current_stream()
        self._stack().append(label)

    def close_span(self, label: str) -> bool:
        """Close range ``label`` if this thread has it open (and the spans opened after it)."""
        import nvtx

        from tracerecon.instrument import DOMAIN

        stack = self._stack()
        if label not in stack:
            return False
        while stack:
            top = stack.pop()
            nvtx.pop_range(domain=DOMAIN)
            if top == label:
                break
        return True

    def push_queued(self, cycle: int | None) -> None:
        with self._lock:
            self._queue.append(cycle)

    def pop_queued(self) -> int | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None


BOOK = CycleBook()


def _current_cycle() -> int | None:
    from tracerecon import instrument

    return getattr(instrument._state, "cycle", None)


def _set_current_cycle(index: int | None) -> None:
    # instrument.phase reads the calling thread's cycle for its payload; a cycle spanning two
    # calls is not a `with` block, so it is set here on the thread that opens it.
    from tracerecon import instrument

    instrument._state.cycle = index


def _begin_cycle() -> None:
    BOOK.close_span(CYCLE)
    i = BOOK.next_index()
    BOOK.open_span(CYCLE, f"cycle {i}", i)
    _set_current_cycle(i)


def _end_cycle() -> None:
    if BOOK.close_span(CYCLE):
        _set_current_cycle(None)


def _after(actions: list[WrapTarget], call: Call) -> None:
    """Exit actions, in the order: close spans, tag, queue, accepted, end the cycle."""
    from tracerecon.presets import EXTRACTORS, TAG_ATTRIBUTE

    for t in actions:
        if t.action == SPAN_END:
            BOOK.close_span(t.label)
    for t in actions:
        if t.action == TAG and call.result is not None:
            try:
                setattr(call.result, TAG_ATTRIBUTE, call.cycle)
            except (AttributeError, TypeError):
                pass  # immutable or slotted result: nothing to remember it by
        elif t.action == QUEUE:
            BOOK.push_queued(call.cycle)
        elif t.action == ACCEPTED and t.label in EXTRACTORS:
            try:
                got = EXTRACTORS[t.label](call, BOOK)
            except Exception as exc:  # an engine changed shape: say so, never break it
                _warn_once(("extract", t.spec()), f"--wrap {t.spec()}: accepted tokens not read ({type(exc).__name__}: {exc})")
                got = None
            if got is not None:
                from tracerecon.instrument import accepted

                accepted(got[0], got[1])
    if any(t.action == CYCLE_END for t in actions):
        _end_cycle()


def make_wrapper(func, actions: list[WrapTarget], is_method: bool):
    """``func`` with ``actions`` around each call (``is_method``: the first argument is the instance)."""
    from tracerecon.instrument import cycle as cycle_range
    from tracerecon.instrument import phase as phase_range

    kinds = {t.action for t in actions}
    stops = [t.label for t in actions if t.action == SPAN_STOP]
    begins = [t.label for t in actions if t.action == SPAN_BEGIN]
    phases = [t.label for t in actions if t.action == PHASE]
    around_cycle = CYCLE in kinds
    has_exit = bool(kinds & {SPAN_END, TAG, QUEUE, ACCEPTED, CYCLE_END})
    inner = func
    for label in reversed(phases):
        inner = phase_range(label)(inner)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        for label in stops:
            BOOK.close_span(label)
        if CYCLE_BEGIN in kinds:
            _begin_cycle()
        for label in begins:
            BOOK.open_span(label, label, _current_cycle())
        ctx = cycle_range(BOOK.next_index()) if around_cycle else None
        if ctx is not None:
            ctx.__enter__()
        try:
            current = _current_cycle()
            result = inner(*args, **kwargs)
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
        if has_exit:
            instance, rest = (args[0], args[1:]) if is_method and args else (None, args)
            _after(actions, Call(instance, rest, kwargs, result, current))
        return result

    wrapper.__tracerecon_wrapped__ = True
    return wrapper


_warned: set = set()


def _warn_once(key, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    print(f"tracerecon: warning: {message}", file=sys.stderr, flush=True)


def _installed_version(module: str) -> str:
    try:
        from importlib.metadata import version

        return f"{module.split('.')[0]} {version(module.split('.')[0])}"
    except Exception:
        return f"{module.split('.')[0]} (version unknown)"


def apply(module, targets: list[WrapTarget]) -> list[WrapTarget]:
    """Wrap ``targets`` (all of one module) inside the imported ``module``, one wrapper per
    callable carrying all its actions; returns the targets whose callable is not there."""
    missing = []
    by_qual: dict[str, list[WrapTarget]] = {}
    for t in targets:
        by_qual.setdefault(t.qualname, []).append(t)
    for qual, actions in by_qual.items():
        parts = qual.split(".")
        owner = module
        for p in parts[:-1]:
            owner = getattr(owner, p, None)
            if owner is None:
                break
        name = parts[-1]
        raw = owner.__dict__.get(name) if owner is not None and isinstance(owner, type) else None
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:
            missing.extend(actions)
            continue
        if getattr(original, "__tracerecon_wrapped__", False) and (raw is not None or not isinstance(owner, type)):
            continue  # wrapped here already (a module run twice); one inherited from a wrapped base gets its own
        if isinstance(raw, (staticmethod, classmethod)):
            wrapped = type(raw)(make_wrapper(raw.__func__, actions, isinstance(raw, classmethod)))
        else:
            wrapped = make_wrapper(original, actions, isinstance(owner, type))
        setattr(owner, name, wrapped)
    return missing


def _report_missing(module_name: str, missing: list[WrapTarget]) -> None:
    for t in missing:
        _warn_once(("missing", t.target), f"--wrap {t.target}: {module_name} has no {t.qualname} ({_installed_version(module_name)}); not wrapped")


class _Finder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a target module, then wraps its callables."""

    def __init__(self, targets: list[WrapTarget]) -> None:
        self.by_module: dict[str, list[WrapTarget]] = {}
        for t in targets:
            self.by_module.setdefault(t.module, []).append(t)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.by_module:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        targets = self.by_module[fullname]

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                loader.exec_module(module)
                _report_missing(fullname, apply(module, targets))

        spec.loader = _Loader()
        return spec


def install(spec: str | None = None) -> None:
    """Install wrappers from ``spec`` (``;``-separated specs; default: $TRACERECON_WRAP)."""
    spec = os.environ.get(ENV_SPEC, "") if spec is None else spec
    targets = parse_all([s for s in spec.split(SPEC_SEPARATOR) if s.strip()])
    if not targets:
        return
    # The wrappers' own modules first: a target in a module they import (json, time, nvtx)
    # would otherwise be wrapped while they are half imported, and the program die of it.
    importlib.import_module("tracerecon.instrument")

    pending = []
    for t in targets:  # already imported (rare in sitecustomize): wrap now
        if t.module in sys.modules:
            _report_missing(t.module, apply(sys.modules[t.module], [t]))
        else:
            pending.append(t)
    if pending:
        sys.meta_path.insert(0, _Finder(pending))


SITECUSTOMIZE = '''# written by tracerecon run --wrap / --preset: wraps engine callables in NVTX ranges
try:
    from tracerecon.wrap import install as _tracerecon_install
    _tracerecon_install()
except Exception as _exc:  # never break the user's program
    import sys as _sys
    print(f"tracerecon: warning: --wrap not installed: {_exc}", file=_sys.stderr)
# This file is first on PYTHONPATH, so Python found it instead of the program's own
# sitecustomize: that one runs too, as it would without tracerecon (an error in it is said,
# as Python's site module says it, and the program goes on).
try:
    import importlib.machinery as _machinery, importlib.util as _util, os as _os, sys as _sys
    _here = _os.path.dirname(_os.path.abspath(__file__))
    _spec = _machinery.PathFinder.find_spec("sitecustomize", [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _here])
    if _spec is not None and _spec.loader is not None:
        _own = _util.module_from_spec(_spec)
        _sys.modules["sitecustomize"] = _own
        _spec.loader.exec_module(_own)
except Exception as _exc:
    import sys as _sys
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\\n{type(_exc).__name__}: {_exc}", file=_sys.stderr)
'''


# --------------------------------------------------------------------------------------------
# Before the run: what the launch environment has.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What the launch environment's interpreter has: distribution versions, which targets exist."""

    python: str
    python_version: str
    versions: dict
    found: dict
    modules: dict  # module -> whether its source was found

    def exists(self, target: str) -> bool:
        return bool(self.found.get(target))


_PYTHON = re.compile(r"^python[0-9.]*$")


def launch_python(command: Sequence[str]) -> str:
    """The interpreter the profiled command runs its Python in: the command itself when it is a
    python, a script's ``#!`` interpreter (torchrun, vllm, console scripts), else this one."""
    return command_python(command) or sys.executable


def command_python(command: Sequence[str]) -> str | None:
    """The command's own Python interpreter, or None when the command does not say (``bash
    launch.sh``, ``env X=1 python``, ``uv run``): then what is installed cannot be known for sure."""
    import shutil

    exe = shutil.which(command[0]) if command else None
    if exe is None:
        return None
    if _PYTHON.match(os.path.basename(exe)):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "env" and len(words) > 1:
            words = [shutil.which(words[1]) or words[1]] + words[2:]
        if words and _PYTHON.match(os.path.basename(words[0])):
            return words[0]
    return None


def scripts_run(command: Sequence[str]) -> list[str]:
    """The script the command runs as ``__main__``: its first ``.py`` argument (``python run.py
    --config model.py``, ``torchrun --nproc_per_node 2 engine.py``: the later ones are the
    script's own arguments, modules it may import)."""
    for a in command[1:]:
        if a in ("-m", "-c", "--module"):  # a module or a command string runs as __main__: no script
            return []
        if a.endswith(".py") and os.path.isfile(a):
            return [a]
    return []


def import_roots(command: Sequence[str]) -> list[str]:
    """Where the profiled program imports its own modules from, beyond its interpreter's
    site-packages: the working directory (``python -m``, ``-c``) and every ``.py`` script the
    command names (its directory is the script's ``sys.path[0]``)."""
    roots = [os.getcwd()]
    roots += [os.path.dirname(os.path.abspath(a)) for a in command[1:] if a.endswith(".py") and os.path.isfile(a)]
    return list(dict.fromkeys(roots))


def probe(python: str, env: dict, dists: Sequence[str], targets: Sequence[str], roots: Sequence[str] = ()) -> Probe:
    """Ask ``python`` (with ``env``, and ``roots`` first on its module path) for ``dists``'
    versions and which ``targets`` exist, from their sources. Raises LaunchError when the
    interpreter cannot answer."""
    import json
    import subprocess
    from pathlib import Path

    from tracerecon.errors import LaunchError

    script = Path(__file__).resolve().parent / "resolve.py"
    request = json.dumps({"dists": list(dists), "targets": list(targets), "path": list(roots)})
    try:
        res = subprocess.run([python, str(script), request], env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cannot inspect the launch environment with {python}: {exc}") from None
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise LaunchError(f"cannot inspect the launch environment with {python}: {last}") from None
    return Probe(python, doc.get("python", "?"), doc.get("versions", {}), doc.get("found", {}), doc.get("modules", {}))


def check_targets(targets: Sequence[WrapTarget], found: Probe, interpreter_known: bool = True, scripts: Sequence[str] = ()) -> list[str]:
    """UsageError for the first target that does not exist in the launch environment, naming it
    and the version of its package found there, or that is a script the command runs (its code
    runs as ``__main__``: its module of that name is never imported, so nothing is wrapped). A
    module that is not found at all is only a warning (returned) when the command's interpreter
    had to be guessed: it may live elsewhere."""
    from tracerecon.errors import UsageError

    warnings = []
    run_as_main = {os.path.splitext(os.path.basename(x))[0]: x for x in scripts}
    for t in targets:
        if t.module == "__main__" or t.module in run_as_main:
            script = run_as_main.get(t.module, "the program's script")
            raise UsageError(f"--wrap {t.spec()}: {script} runs as __main__, which cannot be wrapped (it runs before any wrapper): "
                             "move the functions into a module the script imports and wrap them there")
        if found.exists(t.target):
            continue
        if not found.modules.get(t.module):
            if not interpreter_known:
                warnings.append(f"--wrap {t.spec()}: no module {t.module} for {found.python} (the command's own Python could not be told; "
                                "it is wrapped if the program imports it)")
                continue
            raise UsageError(f"--wrap {t.spec()}: no module {t.module} for {found.python}")
        top = t.module.split(".")[0]
        ver = found.versions.get(top)
        where = f"{top} {ver}" if ver else f"{top}, version unknown (no dist-info)"
        raise UsageError(f"--wrap {t.spec()}: {t.module} has no {t.qualname} ({where}, {found.python})")
    return warnings
