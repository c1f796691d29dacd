"""Small column rules every table builder shares, each written once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracerecon.analysis.projection import equals, string_mask
from tracerecon.analysis.syncs import base_api_name

GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch")


def quantile_ms(values, q: float = 0.5) -> float | None:
    """The ``q`` quantile (default: median) of int ns values in ms, rounded to the ns; None
    when there are no values (nulls are skipped)."""
    v = values if isinstance(values, np.ndarray) else [x for x in values if x is not None]
    if len(v) == 0:
        return None
    v = np.asarray(v, dtype=np.float64)
    if q == 0.5 and not np.isnan(v).any():
        # The median as np.quantile's linear rule computes it (b - (b - a) * 0.5 of the two
        # middle values a <= b), from a partition instead of its general path: a report
        # takes hundreds of medians.
        n = len(v)
        part = np.partition(v, [(n - 1) // 2, n // 2])
        a, b = part[(n - 1) // 2], part[n // 2]
        return round(float(b - (b - a) * 0.5) / 1e6, 6)
    return round(float(np.quantile(v, q)) / 1e6, 6)


def median_ms(values) -> float | None:
    return quantile_ms(values, 0.5)


def is_graph_launch(gpu_ops: pa.Table) -> np.ndarray:
    """GPU ops that are (part of) a CUDA-graph launch: a graph-trace row, or a node kernel whose
    launching call is ``cudaGraphLaunch`` (node mode: every node kernel shares that call)."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return equals(gpu_ops["kind"], "graph") | string_mask(gpu_ops["launch_api"], lambda a: base_api_name(a) in GRAPH_LAUNCH_APIS)


def computes(gpu_ops: pa.Table) -> np.ndarray:
    """GPU ops that run code: kernels and graph launches, not copies or memsets."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return equals(gpu_ops["kind"], "kernel") | equals(gpu_ops["kind"], "graph")


def thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (process, thread): thread ids are 32-bit."""
    return (np.asarray(pid, np.int64) << 32) | (np.asarray(tid, np.int64) & 0xFFFFFFFF)

