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
  way out by the ``finally`` clauses that write it.

Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module: the pools' modules load when first used
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor


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
    """Hold off Ctrl-C (SIGINT) in this thread while the block runs, as around starting worker
    processes: a worker inherits the held signal, and one that arrived in between is taken
    here when the block ends. A worker started while SIGINT could reach it would be
    interrupted before it could ignore the signal (``ignore_ctrl_c``): a traceback from the
    pool's start-up code, and a broken pool in this process instead of "interrupted"."""
    held = hasattr(signal, "pthread_sigmask")
    if held:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
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
    threads (a read started cannot be stopped; see the module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
