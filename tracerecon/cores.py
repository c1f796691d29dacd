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
    or less where a cgroup it is in (a container, a Slurm job, a systemd slice: its own or an
    ancestor, cgroup v2 or v1) has a limit with less room left; None where none of them can be
    read (not Linux). A group's inactive page cache counts as room (the kernel gives it back
    first: the exports just read sit there)."""
    room = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    room.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    room.extend(_cgroup_rooms())
    return min(room) if room else None


def _cgroup_rooms() -> list[int]:
    """The room left under each memory limit of this process's cgroups and their ancestors."""
    v2 = v1 = None
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                if hierarchy == "0" and controllers == "":
                    v2 = path
                elif "memory" in controllers.split(","):
                    v1 = path
    except (OSError, ValueError):
        return []
    rooms = []
    if v2 is not None:
        rooms += _rooms("/sys/fs/cgroup", v2, "memory.max", "memory.current", "inactive_file")
    if v1 is not None:
        rooms += _rooms("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    return rooms


def _rooms(mount: str, path: str, limit_file: str, usage_file: str, inactive_key: str) -> list[int]:
    """Limit minus use (its inactive page cache left out) of the group at ``path`` under
    ``mount`` and of each ancestor; a group the mount does not show is skipped (in a container
    the mount is the container's own group: its root, which is walked too)."""
    out = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        group = os.path.join(mount, *parts[:depth])
        try:
            with open(os.path.join(group, limit_file)) as fh:
                text = fh.read().strip()
            if text == "max" or int(text) >= 1 << 60:  # (no limit: v2 says max, v1 about 2**63)
                continue
            with open(os.path.join(group, usage_file)) as fh:
                used = int(fh.read().strip())
            inactive = 0
            with open(os.path.join(group, "memory.stat")) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == inactive_key:
                        inactive = int(value)
                        break
            out.append(max(0, int(text) - max(0, used - inactive)))
        except (OSError, ValueError):
            continue
    return out
