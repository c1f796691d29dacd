"""How many CPU cores this process may use: what its worker processes, reader threads and the
analysis's own threads are sized by; and how much memory it may still take, which bounds its
worker processes too. No imports beyond the standard library, so every layer (``nsys``,
``analysis``, the pipeline) may ask."""

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


def available_memory_bytes() -> int | None:
    """Memory this process may still take: the system's available memory (``MemAvailable``),
    or less where its cgroup (a container, a Slurm job) has a limit with less room left; None
    where neither can be read (not Linux)."""
    room = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    room.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        # cgroup v2: this process's group (/proc/self/cgroup: "0::/path"), its limit and use
        with open("/proc/self/cgroup") as fh:
            group = next((ln.strip().split("::", 1)[1] for ln in fh if ln.startswith("0::")), None)
        if group is not None:
            base = "/sys/fs/cgroup" + group.rstrip("/")
            with open(base + "/memory.max") as fh:
                limit = fh.read().strip()
            if limit != "max":
                with open(base + "/memory.current") as fh:
                    room.append(max(0, int(limit) - int(fh.read().strip())))
    except (OSError, ValueError, StopIteration):
        pass
    try:
        # cgroup v1 (its memory controller mounted as the process's own group, as in a container)
        with open("/sys/fs/cgroup/memory/memory.limit_in_bytes") as fh:
            limit = int(fh.read().strip())
        if limit < 1 << 60:  # (no limit reads as about 2**63)
            with open("/sys/fs/cgroup/memory/memory.usage_in_bytes") as fh:
                room.append(max(0, limit - int(fh.read().strip())))
    except (OSError, ValueError):
        pass
    return min(room) if room else None
