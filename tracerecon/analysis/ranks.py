"""Which process or file is which rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class RankSource:
    """One rank: its number, the file it comes from, its processes, and how the number was found."""

    rank: int
    path: str
    pids: tuple[int, ...]
    how: str  # "file name" | "file order" | "nvtx mark" | "device/pid order" | "single process"


def processes_in_file(gpu_ops: pa.Table, nvtx_ranges: pa.Table, named_ranks: dict[int, int]) -> tuple[list[tuple[int, list[int]]], str]:
    """Split one export into ranks: [(rank, [pid])] and how they were numbered.

    A rank is a process that did GPU work (launchers such as torchrun's parent did none), ordered
    by CUDA device then pid, unless ``named_ranks`` ({pid: rank}, from the processes' own rank
    marks) names every one of them. A trace without GPU work (CPU-only run) falls back to the
    processes that have NVTX ranges.
    """
    if gpu_ops.num_rows:
        pid = gpu_ops["pid"].to_numpy()
        dev = gpu_ops["device_id"].to_numpy()
        pids = np.unique(pid)
        first_dev = {int(p): int(dev[pid == p].min()) for p in pids}
    else:
        pids = np.unique(nvtx_ranges["pid"].to_numpy()) if nvtx_ranges.num_rows else np.array([], dtype=np.int64)
        first_dev = {int(p): 0 for p in pids}
    named = {p: r for p, r in named_ranks.items() if p in first_dev}
    if named and len(named) == len(first_dev) and len(set(named.values())) == len(named):
        return sorted(((r, [p]) for p, r in named.items())), "nvtx mark"
    ordered = sorted(first_dev, key=lambda p: (first_dev[p], p))
    how = "single process" if len(ordered) <= 1 else "device/pid order"
    return [(i, [p]) for i, p in enumerate(ordered)], how


def select_pids(table: pa.Table, pids: list[int]) -> pa.Table:
    """Rows of ``table`` whose pid is in ``pids``."""
    if table.num_rows == 0:
        return table
    present = pc.unique(table["pid"]).to_pylist()
    if set(present) <= set(pids):
        return table  # the common case (one process per rank file): no copy
    return table.filter(pc.is_in(table["pid"], value_set=pa.array(pids, pa.int64())))
