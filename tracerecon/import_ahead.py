"""Import modules on a background thread while this one waits on something else.

A cold one-rank ``report`` spends 0.15-0.25 s of the H200 host's 0.8-0.9 s importing. numpy,
pyarrow and the reader must come first; the analysis and rendering modules (0.18 s on the
2-core machine) are not needed until the trace has been read, and the read runs in SQLite's C
code with the GIL released, so they are imported during the read instead of before it.

Safety: CPython takes one lock per module, so two threads importing the same module get one
module, imported once: one waits for the other. They can deadlock only through an import cycle
(each holding a module the other needs), and tracerecon's modules have none
(``tests/test_import_ahead.py`` checks the graph from the sources). Third-party packages do have
cycles inside (numpy's do), which CPython breaks by handing one thread a partly initialised
module: so numpy, pyarrow and pyarrow.compute are imported on the calling thread before an
import-ahead thread starts (``pipeline._read_tables`` imports the reader first; a test checks
it). Never fork while one runs (a
forked child would inherit a held import lock): ``join_all`` first, as the multi-process load
does before it starts its workers.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from typing import Iterator, Sequence


_RUNNING: set[threading.Thread] = set()
_RUNNING_LOCK = threading.Lock()


def join_all() -> None:
    """Wait for every import-ahead thread of this process (before a fork)."""
    with _RUNNING_LOCK:
        threads = list(_RUNNING)
    for t in threads:
        t.join()


class ImportAhead:
    """``modules`` imported on a daemon thread from construction until ``join``. An import that
    fails here is left for the caller's own import to raise, where the error belongs."""

    def __init__(self, modules: Sequence[str]):
        missing = tuple(m for m in modules if m not in sys.modules)
        self._thread: threading.Thread | None = None
        if not missing:  # all imported already (a second load in one process)
            return
        thread = threading.Thread(target=self._run, args=(missing,), name="tracerecon-import-ahead", daemon=True)
        # Registered and started under the lock, so that join_all never sees a thread not yet
        # started; one that cannot start (a thread limit) is not left registered.
        with _RUNNING_LOCK:
            try:
                thread.start()
            except RuntimeError:
                return  # no thread to spare: the caller's own imports will do
            _RUNNING.add(thread)
        self._thread = thread

    @staticmethod
    def _run(modules: tuple[str, ...]) -> None:
        try:
            for name in modules:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001  (the caller's import raises it again, in context)
                    pass
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(threading.current_thread())

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ImportAhead:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:  # (left by an exception: not waited for, see ``once_reading``)
            self.join()


class _Waiting:
    """One ``once_reading`` block: its modules, the process that opened it, its ImportAhead
    once a read started (compared by identity: two blocks may wait for the same modules)."""

    def __init__(self, modules: tuple[str, ...]):
        self.modules, self.pid, self.started = modules, os.getpid(), None


# The blocks waiting for a trace's read to start. (Its lock is taken before ``_RUNNING_LOCK``,
# never after.)
_WAITING: list[_Waiting] = []
_WAITING_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A child forked while another thread held a lock here would wait for it forever, and
    # its parent's blocks and import threads are not its own.
    global _WAITING_LOCK, _RUNNING_LOCK
    _WAITING_LOCK, _RUNNING_LOCK = threading.Lock(), threading.Lock()
    _WAITING.clear()
    _RUNNING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def once_reading(modules: Sequence[str]) -> Iterator[None]:
    """Import ``modules`` on a thread once the block's first trace read has started
    (``reading_started``), not at once: until the reads start, the main thread's own work (the
    command line, the cache check, the read's plan) is what they wait for, and an import beside
    it holds the GIL half the time (a report's renderer, rich: the reads started 0.02-0.05 s
    later on the 2-core machine). ``modules`` must not import numpy or pyarrow, which the main
    thread may be importing then. Joined at the block's end, unless the block is left by an
    exception: a KeyboardInterrupt raised inside the import machinery on the main thread can
    leave an import lock held that the thread then waits for forever (3 of 25 cold reports
    interrupted as their reads started hung so), also where the interrupt was swallowed there
    and the block is left by what then failed (SIGTERM: the stopped workers' broken pool, 4 of
    140); the thread is a daemon, and a fork waits for it first (``join_all``). Where no read
    started (a cached result) nothing is imported here and the caller's own import does it."""
    entry = _Waiting(tuple(modules))
    with _WAITING_LOCK:
        _WAITING.append(entry)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with _WAITING_LOCK:
            if any(e is entry for e in _WAITING):  # (gone in a child forked inside the block)
                _WAITING[:] = [e for e in _WAITING if e is not entry]
        if entry.started is not None and not failed:
            entry.started.join()


def reading_started() -> None:
    """A trace's reads have started: start importing what ``once_reading`` blocks of this
    process wait for (a worker process forked inside such a block imports none of it)."""
    with _WAITING_LOCK:
        for e in _WAITING:
            if e.started is None and e.pid == os.getpid():
                e.started = ImportAhead(e.modules)
