"""What engines import: NVTX phase and cycle ranges that tracerecon reads back.

    from tracerecon.instrument import cycle, phase

    for i in range(n):
        with cycle(i):
            with phase("draft"):
                ...
            with phase("verify"):
                ...

An engine a cycle ahead (cycle N's output step runs after cycle N+1's first steps) opens
cycles with ``c = start_cycle(i)`` and closes them with ``end_cycle(c)`` after their last step,
and says which cycle each phase is for: ``with phase("output", cycle=c):``. Cycles opened so
and never ended are named on stderr when the process exits (the report reads them as incomplete).

Ranges are NVTX ranges in the ``tracerecon`` domain (push/pop; ``start_cycle``'s start/end); the
payload is the cycle index (a phase's: the cycle it said, else the innermost ``cycle`` around it).
At the first range a process marks its rank (``tracerecon.rank=N``, from ``RANK`` in the
environment, as torchrun sets it), so a single report of a whole process tree maps processes
to ranks. With no profiler attached NVTX calls return at once (see benchmarks/instrument_overhead.py
for the measured cost).

Entering a phase also says which CUDA stream is current, where the engine's torch has CUDA
initialised, the thread's current device has a context and the stream is not capturing a
graph: a ``cudaEventRecord`` on
``torch.cuda.current_stream()`` and then an NVTX mark ``tracerecon.stream`` (no timing, nothing waits for it; one
event per thread and device, recorded again each time). Events at the phase's boundaries go on
that stream, and nsys keeps the stream of every event record: without it the trace shows only
where kernels ran, and a phase running all its kernels on stream S reads the same whether its
range runs inside ``with torch.cuda.stream(S)`` or forks S off the caller's stream and joins it
back later. ``TRACERECON_STREAM_MARKS=0`` (or ``declare_streams(False)``) turns it off.

Optional naive CPU timers (the ``perf_counter`` numbers engines log): set
``TRACERECON_CPU_TIMERS=/path/prefix`` or call ``enable_cpu_timers(path)``; each phase then
appends ``{"rank", "pid", "cycle", "cycle_id", "phase", "cpu_ms"}`` as one JSON line to ``<prefix>.rank<R>.jsonl``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import nvtx

from tracerecon.analysis.config import INSTRUMENT_DOMAIN
from tracerecon.run_dir import ACCEPTED_MARK_FORMAT, CPU_TIMERS_ENV, RANK_MARK_FORMAT, STREAM_MARK, STREAM_MARKS_ENV

DOMAIN = INSTRUMENT_DOMAIN

F = TypeVar("F", bound=Callable)

_state = threading.local()
_lock = threading.Lock()
_marked = False
_rank: int | None = None  # the rank this process's mark said (``mark_rank``)
_timer_prefix: str | None = None  # CPU timers on: their files' prefix
_timer_file = None
_timer_rank: int | None = None  # the rank _timer_file is named for
_timer_path_env = CPU_TIMERS_ENV
_declaring = os.environ.get(STREAM_MARKS_ENV, "1").strip() != "0"


def current_rank() -> int:
    """The rank this process's ``tracerecon.rank`` mark said (``mark_rank(N)``), else RANK from
    the environment (torchrun), else 0."""
    if _rank is not None:
        return _rank
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def mark_rank(rank: int | None = None) -> None:
    """Emit the ``tracerecon.rank=N`` NVTX mark once per process (the first call's rank, or
    RANK's; the CPU timers' rows and files then say the same rank)."""
    global _marked, _rank
    with _lock:
        if _marked:
            return
        _marked = True
        if rank is not None:
            _rank = int(rank)
    nvtx.mark(message=RANK_MARK_FORMAT.format(current_rank()), domain=DOMAIN)


def enable_cpu_timers(path_prefix: str | None) -> None:
    """Log each phase's naive perf_counter time to ``<prefix>.rank<R>.jsonl`` (None: stop), R the
    process's rank when the phase ends (``current_rank``). A phase open when they are turned on
    logs nothing."""
    global _timer_prefix, _timer_file, _timer_rank
    with _lock:
        if _timer_file is not None:
            _timer_file.close()
        _timer_file = _timer_rank = None
        _timer_prefix = path_prefix or None


def _log_timer(row: dict) -> None:
    """Append one phase's timer row to its rank's file (opened on first use, and again where the
    rank was marked after the timers were turned on). A file that cannot be written (no such
    folder, no room) turns the timers off with one line on stderr: an instrument never breaks
    the engine."""
    global _timer_file, _timer_rank, _timer_prefix
    with _lock:
        if _timer_prefix is None:
            return
        rank = row["rank"]
        path = f"{_timer_prefix}.rank{rank}.jsonl"
        try:
            if _timer_file is None or _timer_rank != rank:
                if _timer_file is not None:
                    _timer_file.close()
                    _timer_file = None
                # Readable by all, writable by the owner (0644 less the umask): nsys runs the program with
                # umask 0, and a plain open made the file writable by everyone.
                _timer_file = open(path, "a", buffering=1, opener=lambda path, flags: os.open(path, flags, 0o644))
                _timer_rank = rank
            _timer_file.write(json.dumps(row) + "\n")
        except OSError as exc:
            _timer_prefix = None
            if _timer_file is not None:
                with contextlib.suppress(OSError):
                    _timer_file.close()
                _timer_file = None
            print(f"tracerecon.instrument: CPU timers off: cannot write {path} ({exc.strerror or exc})", file=sys.stderr)


def declare_streams(enabled: bool) -> None:
    """Whether entering a phase says which CUDA stream is current (module doc; default on,
    off where ``TRACERECON_STREAM_MARKS=0``)."""
    global _declaring
    _declaring = bool(enabled)


def mark_current_stream() -> None:
    """A CUDA event recorded on the current stream, then the ``tracerecon.stream`` mark (what
    ``phase`` does as it begins; a range pushed otherwise calls it right after the push), where
    torch is imported by the engine, has CUDA initialised, the thread's current device has a
    context (``_current_stream_and_event``) and the stream captures no graph (a record there
    would belong to the capture, not to this instant)."""
    global _declaring
    torch = sys.modules.get("torch")  # never imported here: an engine without torch launches nothing through it
    if torch is None:
        return
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():
            return
        said = _current_stream_and_event(torch)  # (asks nothing of a device with no context)
        if said is None or cuda.is_current_stream_capturing():
            return
        stream, event = said
        event.record(stream)
        # After the record: a mark stands for a record made (the analysis takes the thread's
        # last CUDA call before the mark), never for one that failed.
        nvtx.mark(message=STREAM_MARK, domain=DOMAIN)
    except Exception:  # an instrument never breaks the engine: no more declarations
        _declaring = False


def _current_stream_and_event(torch):
    """``torch.cuda.current_stream()`` and this thread's event for its device, or None where the
    thread's current device has no CUDA context yet (a helper thread of a rank that set its
    device elsewhere is on device 0: recording there would open a context on a GPU the rank
    does not use). The stream objects are kept per (stream, device) as ``current_stream``
    would build them: building one took 4.6-7.0 us a call on the H200 host, more than the
    rest of the declaration."""
    cached = getattr(_state, "streams_events", None)
    if cached is None:
        cached = _state.streams_events = ({}, {})
    streams, events = cached
    c = torch._C
    device = c._cuda_getDevice() if hasattr(c, "_cuda_getDevice") else torch.cuda.current_device()
    if hasattr(c, "_cuda_hasPrimaryContext") and not c._cuda_hasPrimaryContext(device):
        return None
    key = c._cuda_getCurrentStream(device) if hasattr(c, "_cuda_getCurrentStream") else None
    if isinstance(key, tuple) and len(key) == 3:  # (stream id, device index, device type)
        stream = streams.get(key)
        if stream is None:
            stream = streams[key] = torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])
    else:  # a torch whose (private) call says otherwise
        stream = torch.cuda.current_stream()
    event = events.get(stream.device_index)
    if event is None:
        event = events[stream.device_index] = torch.cuda.Event()
    return stream, event


def _cycle_index() -> int | None:
    return getattr(_state, "cycle", None)


# Each cycle range this process opens gets the next number: the timer log tells a warm-up loop's
# cycle 0 from the main loop's, and one thread's cycle from another's (``run_dir.read_engine_timers``).
_cycles_opened = itertools.count(1)


class phase:
    """``with phase("verify"):`` or ``@phase("draft")``: one NVTX range per call, whose payload is
    the cycle it belongs to: the innermost ``with cycle(i)`` around it, or ``cycle=`` (an index or
    what ``start_cycle`` returned) for an engine a cycle ahead, whose step for an older cycle
    (sample, output) runs while a newer cycle's range is open too."""

    __slots__ = ("name", "cycle")

    def __init__(self, name: str, cycle: "int | OpenCycle | cycle | None" = None) -> None:
        self.name = name
        if isinstance(cycle, _CycleRange):  # (a ``with cycle(i)`` object: its index)
            cycle = cycle.index
        self.cycle = cycle if cycle is None or isinstance(cycle, OpenCycle) else int(cycle)

    def _cycle(self) -> tuple[int | None, int | None]:
        """(the cycle's index, the instrument's number for that cycle's opening) this phase is in."""
        if self.cycle is None:
            return _cycle_index(), getattr(_state, "cycle_id", None)
        if isinstance(self.cycle, OpenCycle):
            return self.cycle.index, self.cycle.id
        with _lock:  # (this thread's latest opening of that index, else the process's)
            return self.cycle, _thread_started().get(self.cycle, _started.get(self.cycle))

    def __enter__(self) -> "phase":
        if not _marked:
            mark_rank()
        if self.cycle is None:
            c = _cycle_index()
        else:
            c = self.cycle.index if isinstance(self.cycle, OpenCycle) else self.cycle
        nvtx.push_range(message=self.name, domain=DOMAIN, payload=c)
        if self.cycle is not None:
            _forget_once(None)  # (a payload per cycle, cached with the name by nvtx 0.2.11-0.2.12)
        if _declaring:
            mark_current_stream()
        if _timer_prefix is not None:
            # (per thread, as a stack: one phase object may be open on several threads, or
            # nested in itself)
            starts = getattr(_state, "timer_starts", None)
            if starts is None:
                starts = _state.timer_starts = []
            starts.append((self, time.perf_counter()))
        return self

    def __exit__(self, *exc) -> None:
        try:
            starts = getattr(_state, "timer_starts", None) if _timer_prefix is not None else None
            if starts and starts[-1][0] is self:
                # The naive timer, exactly as engines take it: no synchronize.
                ms = (time.perf_counter() - starts.pop()[1]) * 1e3
                index, cycle_id = self._cycle()
                _log_timer({"rank": current_rank(), "pid": os.getpid(), "cycle": index, "cycle_id": cycle_id, "phase": self.name, "cpu_ms": ms})
        finally:
            nvtx.pop_range(domain=DOMAIN)

    def __call__(self, func: F) -> F:
        name, said = self.name, self.cycle

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with phase(name, said):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class cycle:
    """``with cycle(i):``: the NVTX range ``cycle i`` enclosing one cycle's phases.
    ``with cycle(i, accepted=n):`` also says that the cycle accepted ``n`` tokens, as
    ``accepted(n)`` inside it would (use ``accepted`` where the count is learnt later)."""

    __slots__ = ("index", "tokens", "_prev", "_prev_id")

    def __init__(self, index: int, accepted: int | None = None) -> None:
        self.index = int(index)
        self.tokens = None if accepted is None else int(accepted)
        self._prev = self._prev_id = None

    def __enter__(self) -> "cycle":
        if not _marked:
            mark_rank()
        self._prev, self._prev_id = _cycle_index(), getattr(_state, "cycle_id", None)
        _state.cycle, _state.cycle_id = self.index, next(_cycles_opened)
        push_once(f"cycle {self.index}", self.index)
        if self.tokens is not None:
            accepted(self.tokens, self.index)
        return self

    def __exit__(self, *exc) -> None:
        nvtx.pop_range(domain=DOMAIN)
        _state.cycle, _state.cycle_id = self._prev, self._prev_id


_CycleRange = cycle  # (``phase``'s ``cycle=`` parameter hides the class's name)


@dataclass(frozen=True)
class OpenCycle:
    """A cycle range ``start_cycle`` opened: its index, the instrument's number for this opening
    (``cycle_id`` in the CPU timer rows), the thread that opened it, and nvtx's handle that
    ``end_cycle`` closes."""

    index: int
    id: int
    opener_started: dict = field(compare=False, repr=False)  # (the opening thread's ``_thread_started()``)
    handle: object = field(compare=False, repr=False)


# The latest opening by start_cycle of each cycle index, in the process (``_started``, key: the
# index) and in each thread (``_thread_started()``, kept with the thread, so a thread that reuses
# a dead one's ident starts with none): ``phase(name, cycle=i)`` logs its id, the thread's own
# first (threads each running a loop of their own number their cycles alike).
_started: dict = {}
# Every opening not ended yet (id -> index), said at the process's exit (``_say_unended``).
_unended: dict = {}


def _thread_started() -> dict:
    started = getattr(_state, "started", None)
    if started is None:
        started = _state.started = {}
    return started


def start_cycle(index: int, accepted: int | None = None) -> OpenCycle:
    """Open the range ``cycle i`` without closing the one before: for an engine a cycle (or
    more) ahead, whose cycle N is closed by ``end_cycle`` after its last step (its output),
    which runs after cycle N+1's first steps. Cycle ranges so opened may overlap (an
    ``nvtxRangeStart/End`` range, which may be closed on another thread); say which cycle
    each phase is for with ``phase(name, cycle=...)`` (the returned value or its index), and
    tracerecon puts it in that cycle, not by the time it ran. ``accepted``: as ``cycle``'s."""
    if not _marked:
        mark_rank()
    index = int(index)
    opened = OpenCycle(index, next(_cycles_opened), _thread_started(), _start_once(f"cycle {index}", index))
    with _lock:
        _started[index] = opened.opener_started[index] = opened.id
        _unended[opened.id] = index
    if accepted is not None:
        _mark_accepted(int(accepted), index)
    return opened


def end_cycle(opened: OpenCycle) -> None:
    """Close a range ``start_cycle`` opened (on any thread)."""
    nvtx.end_range(opened.handle)
    with _lock:
        _unended.pop(opened.id, None)
        for started in (_started, opened.opener_started):
            if started.get(opened.index) == opened.id:
                del started[opened.index]


def _forget_parents_cycles() -> None:
    """In a forked child: the parent's open cycles are the parent's to end (and to name), and
    the lock, which another thread of the parent may have held at the fork, is new."""
    global _lock
    _lock = threading.Lock()
    _unended.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_cycles)


@atexit.register
def _say_unended() -> None:
    """At the process's exit, one line on stderr naming the cycles ``start_cycle`` opened that no
    ``end_cycle`` closed: their ranges end with the capture (or not at all), and the report
    reads them as incomplete. (An engine stopped mid-loop leaves its cycle in flight so.)"""
    held = _lock.acquire(timeout=1.0)  # (a daemon thread stopped mid-write may never let it go)
    try:
        left = sorted(_unended.values())
    finally:
        if held:
            _lock.release()
    if left:
        shown = ", ".join(map(str, left[:8])) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        print(f"tracerecon.instrument: cycle{'s' if len(left) > 1 else ''} {shown} opened by start_cycle "
              f"{'were' if len(left) > 1 else 'was'} never ended by end_cycle: the report reads "
              f"{'them' if len(left) > 1 else 'it'} as incomplete", file=sys.stderr)


# nvtx registers each distinct message once and keeps it for the life of the process (about 360
# bytes each: 363 MB over a million cycles, each ``cycle N`` a new message): messages used once
# are forgotten again (nvtx 0.2.10 and older: that one message; newer nvtx keeps them in an
# unbounded cache it only clears whole: cleared every ONCE_MESSAGES_KEPT of them, the phases'
# few names registered again after).
ONCE_MESSAGES_KEPT = 4096
_once_pushed = itertools.count(1)
_forget = None  # how the installed nvtx forgets a message (``_forgetting``), found at the first push


def push_once(message: str, payload: int | None) -> None:
    """Push an NVTX range in tracerecon's domain whose message is used once (a cycle's), without
    nvtx keeping the message for the life of the process."""
    nvtx.push_range(message=message, domain=DOMAIN, payload=payload)
    _forget_once(message)


def _start_once(message: str, payload: int | None) -> object:
    """``push_once`` for an ``nvtxRangeStart`` range: its handle for ``nvtx.end_range``."""
    handle = nvtx.start_range(message=message, domain=DOMAIN, payload=payload)
    _forget_once(message)
    return handle


def _forget_once(message: str | None) -> None:
    """Forget a message used once (``push_once``); None: only count a range made with a payload
    of its own (a phase's ``cycle=``), which newer nvtx caches with its message."""
    global _forget
    try:
        if _forget is None:
            _forget = _forgetting()
        _forget(message, next(_once_pushed))
    except Exception:  # another nvtx's internals: the message stays kept, the range is made
        _forget = lambda message, n: None  # noqa: E731


def _forgetting() -> Callable[[str, int], None]:
    """``forget(message, n)`` for the installed nvtx (``n``: how many once-messages so far)."""
    from nvtx._lib import Domain

    cached = getattr(sys.modules.get("nvtx.utils.cached"), "CachedInstanceMeta", None)
    instances = getattr(cached, "_CachedInstanceMeta__instances", None)
    if isinstance(instances, dict):  # nvtx <= 0.2.10: RegisteredString(domain handle, message), one dict
        handle = Domain(DOMAIN).handle
        return lambda message, n: instances.pop((handle, message), None) if message is not None else None
    # newer nvtx: Domain.get_registered_string is an lru_cache, cleared whole; 0.2.11 and 0.2.12
    # also keep each (message, color, category, payload)'s attributes, holding the message, in
    # the lru_cache Domain.get_event_attributes (about 1 kB a cycle range kept): cleared with it
    clears = [c for c in (getattr(getattr(Domain, name, None), "cache_clear", None) for name in ("get_registered_string", "get_event_attributes"))
              if c is not None]
    if not clears:
        return lambda message, n: None

    def forget(message: str | None, n: int) -> None:
        if n % ONCE_MESSAGES_KEPT == 0:
            for clear in clears:
                clear()

    return forget


def accepted(tokens: int, cycle_index: int | None = None) -> None:
    """Say how many tokens a cycle accepted (an NVTX mark ``tracerecon.accepted=N`` whose payload
    is the cycle): the current cycle by default (the innermost ``with cycle(i)``), or an earlier
    one when the engine learns it later (an engine one cycle ahead reads cycle N-1's acceptance
    during cycle N). With ``start_cycle`` cycles, which overlap, say which: ``cycle_index``."""
    _mark_accepted(int(tokens), _cycle_index() if cycle_index is None else int(cycle_index))


def _mark_accepted(tokens: int, cycle_index: int | None) -> None:
    nvtx.mark(message=ACCEPTED_MARK_FORMAT.format(tokens), domain=DOMAIN, payload=cycle_index)


if os.environ.get(_timer_path_env):
    enable_cpu_timers(os.environ[_timer_path_env])
