"""Ctrl-C that stops at once. A read of a large export cannot be stopped midway: the SQLite
driver has no cancel, so a bulk read runs to its end on its thread. Before this module, an
interrupted ``report`` of a 1 GiB export said "interrupted" only 1-6 s after Ctrl-C (2-core
machine), and then exited: on the way out, every ``with ThreadPoolExecutor`` waited for its
reads, and the interpreter joined the readers' threads once more at its exit.

- ``thread_pool``: a thread pool that, left by Ctrl-C, waits for none of its tasks (those not
  started are cancelled, those under way finish on their own).
- ``ctrl_c_held``, ``ignore_ctrl_c``, ``stop_worker_processes``: worker processes leave
  Ctrl-C to their parent, which stops them rather than waiting for them.
- ``exit_now``: the ``tracerecon`` program, interrupted (or quit from ``view`` while it
  loads: ``WorkAbandoned``), exits once it has said so, without joining the threads still
  reading. Nothing is left half-written: the input is only read,
  and what the load writes (its cache entry, its workers' hand-off files) is removed on the
  way out by the ``finally`` clauses that write it; what a ``finally`` cannot reach (a read
  still under way on another thread, worker processes stopped mid-file) is registered with
  ``undone_at_exit_now`` and undone by ``exit_now`` itself: worker processes stopped, the
  decompressed copies of ``.xz`` exports removed.
- ``stop_on_signals``: SIGTERM (``kill``, a job scheduler's stop) ends the program as Ctrl-C
  does, said as "terminated" (``Terminated``), with the same clean-up, not with the work's
  temporary files left behind; each signal taken is noted (``signalled``), so that one whose
  exception was swallowed where it landed is still what the program says.

Standard library only.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module: the pools' modules load when first used
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken where Ctrl-C is (``stop_on_signals``): every path that stops work on
    Ctrl-C stops it on this too."""


# The interrupt each signal taken by ``stop_on_signals``'s handlers raised in this process, in
# order: one raised inside the import machinery can be swallowed there ("Exception ignored
# in ..."), and the work then fails some other way (its worker processes, stopped by the same
# signal, break the pool): ``signalled`` lets the program say the signal, not that failure.
_SIGNALLED: list[KeyboardInterrupt] = []


def stop_on_signals() -> None:
    """In the program's main thread: SIGTERM raises ``Terminated`` there, as SIGINT raises
    KeyboardInterrupt (both noted for ``signalled``). Worker processes put SIGTERM back to the
    default (``default_sigterm``): their parent stops them and removes what they leave."""

    def _raise(signum, frame):
        exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        _SIGNALLED.append(exc)
        raise exc

    signal.signal(signal.SIGTERM, _raise)
    if _default_or_starting(signal.getsignal(signal.SIGINT)):  # (not where Ctrl-C is ignored: nohup, &)
        signal.signal(signal.SIGINT, _raise)
    # Such an interrupt swallowed inside the import machinery is printed by the interpreter as
    # a traceback ("Exception ignored in: <function _get_module_lock...>"): it is noted above
    # and said as the program ends, so it is not printed.
    printed = sys.unraisablehook

    def _quiet_interrupts(unraisable) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            printed(unraisable)

    sys.unraisablehook = _quiet_interrupts


def _default_or_starting(handler) -> bool:
    """Whether ``handler`` is Python's own for SIGINT, or the program's while it starts
    (``tracerecon.program``: one line and exit 130), which the command's own replaces."""
    return handler is signal.default_int_handler or bool(getattr(handler, "tracerecon_starting", False))


def default_interrupt() -> None:
    """Python's own SIGINT handler back where the program's while-starting one is set (a command
    that takes the signals its own way: ``view``, ``run``)."""
    if getattr(signal.getsignal(signal.SIGINT), "tracerecon_starting", False):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def end_on_signals() -> None:
    """From here the program only exits: Ctrl-C or SIGTERM (where not ignored) says so in one
    line and ends it at once (``exit_now``), with their exit statuses (130, 143), not with a
    traceback from wherever the interpreter was on its way out."""
    from tracerecon.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

    def _end(signum, frame) -> None:
        said, code = ("terminated", EXIT_TERMINATED) if signum == signal.SIGTERM else ("interrupted", EXIT_INTERRUPTED)
        try:
            sys.stderr.write(f"tracerecon: {said}\n")
        except (OSError, ValueError):
            pass
        exit_now(code)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _end)


def signalled() -> KeyboardInterrupt | None:
    """The interrupt the last signal taken by ``stop_on_signals``'s handlers raised, if any."""
    return _SIGNALLED[-1] if _SIGNALLED else None


def default_sigterm() -> None:
    """In a worker process: SIGTERM ends it at once (its parent's handler is inherited by a fork);
    one held since the worker was started (``ctrl_c_held``) ends it now."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


_UNDO: dict[int, Callable[[], None]] = {}
_UNDO_LOCK = threading.Lock()
_UNDO_NEXT = itertools.count()


@contextmanager
def undone_at_exit_now(undo: Callable[[], None]) -> Iterator[None]:
    """While the block runs, ``exit_now`` calls ``undo`` before the process ends (a block on a
    thread that ``exit_now`` does not wait for never reaches its own ``finally``). ``undo`` must
    be safe to call at any moment of the block, and need not be called again after it."""
    with _UNDO_LOCK:
        key = next(_UNDO_NEXT)
        _UNDO[key] = undo
    try:
        yield
    finally:
        with _UNDO_LOCK:
            _UNDO.pop(key, None)


class WorkAbandoned(Exception):
    """A command is done but leaves work under way that cannot be stopped (the user quit
    ``view`` while it loaded): the program ends without waiting for it (``exit_now``)."""


@contextmanager
def thread_pool(workers: int, name: str = "") -> Iterator[ThreadPoolExecutor]:
    """``with ThreadPoolExecutor(workers) as pool`` but for Ctrl-C: leaving by a
    KeyboardInterrupt cancels the tasks not yet started and waits for none, leaving by any
    other exception cancels them and waits for those under way, leaving normally waits for all."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        yield pool
    except BaseException as exc:
        pool.shutdown(wait=not isinstance(exc, KeyboardInterrupt), cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Hold off Ctrl-C (SIGINT) and SIGTERM in this thread while the block runs, as around
    starting worker processes: a worker inherits the held signals, and one that arrived in
    between is taken here when the block ends. A worker started while SIGINT could reach it would be
    interrupted before it could ignore the signal (``ignore_ctrl_c``): a traceback from the
    pool's start-up code, and a broken pool in this process instead of "interrupted"."""
    held = hasattr(signal, "pthread_sigmask")
    if held:  # (SIGTERM too: a worker's inherited handler would raise in its start-up code)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_ctrl_c() -> None:
    """In a worker process: Ctrl-C (which a terminal sends to the whole process group) is left
    to the parent, which stops its workers itself (``stop_worker_processes``); one held since
    the worker was started (``ctrl_c_held``) is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def stop_worker_processes(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s worker processes (SIGTERM) and wait for them to end: an interrupted
    load's workers would otherwise read their exports to the end first."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join()


def exit_now(code: int) -> None:
    """Flush what was printed and end the process with ``code`` at once, without waiting for
    threads (a read started cannot be stopped; see the module docstring), once what is
    registered with ``undone_at_exit_now`` is undone, latest first."""
    with _UNDO_LOCK:
        undo = [_UNDO.pop(k) for k in sorted(_UNDO, reverse=True)]
    for fn in undo:
        try:
            fn()
        except Exception:  # noqa: BLE001  (exiting: one failed clean-up must not stop the others)
            pass
    # Worker processes still alive (a pool closing as the program was interrupted) are stopped:
    # an idle one waits on a pipe its siblings hold open, and would outlive this process.
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            for child in mp.active_children():
                child.terminate()
        except Exception:  # noqa: BLE001
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
