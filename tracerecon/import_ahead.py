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

import importlib
import sys
import threading
from typing import Sequence


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

    def __exit__(self, *exc) -> None:
        self.join()
