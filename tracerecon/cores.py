"""How many CPU cores this process may use: what its worker processes, reader threads and the
analysis's own threads are sized by. No imports beyond the standard library, so every layer
(``nsys``, ``analysis``, the pipeline) may ask."""

from __future__ import annotations

import os

_WORKER_SHARE: int | None = None  # set in a --jobs worker: its share of the parent's cores


def usable_cores() -> int:
    """In a ``--jobs`` worker, its share of the parent's cores (``set_worker_share``); else the
    process's affinity set where the system has one (a container or ``taskset`` may allow fewer
    cores than the machine has), else the machine's count."""
    if _WORKER_SHARE is not None:
        return _WORKER_SHARE
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def set_worker_share(cores: int) -> None:
    """This process is a worker that may use ``cores`` of its parent's cores."""
    global _WORKER_SHARE
    _WORKER_SHARE = max(1, cores)


def share_unset() -> bool:
    """Whether this process has no worker share yet (it is no worker, or not told so yet)."""
    return _WORKER_SHARE is None
