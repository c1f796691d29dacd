"""NVTX ranges of one rank: ids, nesting, and their GPU projection."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracerecon import schema
from tracerecon.analysis.intervals import last_reaching
from tracerecon.analysis.projection import LaunchIndex, int64s, project


def nest(raw: pa.Table) -> pa.Table:
    """Sort ranges by (pid, tid, start, longest first) and add range_id, parent_id, depth.

    Nesting is computed per thread among push/pop ranges (start/end ranges may overlap
    anything and get depth 0 and no parent). A range is a child of the innermost open
    range that fully contains it: in that order, the nearest earlier push/pop range of its
    thread that ends no earlier (the one a stack of open ranges would have on top). Its depth
    is its parent's plus one.
    """
    n = raw.num_rows
    if n == 0:
        return raw.append_column("range_id", pa.array([], pa.int64())).append_column(
            "parent_id", pa.array([], pa.int64())).append_column("depth", pa.array([], pa.int32()))
    pid, tid = int64s(raw["pid"]), int64s(raw["tid"])
    s, e = int64s(raw["start_ns"]), int64s(raw["end_ns"])
    order = np.lexsort((-e, s, tid, pid))
    t = raw.take(pa.array(order))
    pid, tid, e = pid[order], tid[order], e[order]
    # Only push/pop ranges nest: the search runs over them alone, each thread's from its first.
    pp = np.flatnonzero(_style_is(t["style"], "push_pop"))
    new_thread = np.ones(len(pp), dtype=bool)
    new_thread[1:] = (pid[pp][1:] != pid[pp][:-1]) | (tid[pp][1:] != tid[pp][:-1])
    thread_start = np.maximum.accumulate(np.where(new_thread, np.arange(len(pp)), 0))
    parent_pp = _previous_at_least(e[pp], thread_start)
    parent = np.full(n, -1, dtype=np.int64)
    parent[pp] = np.where(parent_pp >= 0, pp[np.maximum(parent_pp, 0)], -1)
    return (
        t.append_column("range_id", pa.array(np.arange(n, dtype=np.int64)))
        .append_column("parent_id", pa.array(parent, mask=parent < 0))
        .append_column("depth", pa.array(_depth(parent).astype(np.int32)))
    )


def _style_is(col: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)


def _previous_at_least(values: np.ndarray, lowest: np.ndarray) -> np.ndarray:
    """For each row i: the largest j < i, j >= ``lowest[i]``, with ``values[j] >= values[i]``;
    -1 where there is none (``intervals.last_reaching``)."""
    return last_reaching(values, np.arange(len(values)) - 1, values, lowest)


def _depth(parent: np.ndarray) -> np.ndarray:
    """How many ancestors each row has (``parent``: -1 at the top), by pointer doubling."""
    up = parent.copy()
    depth = (parent >= 0).astype(np.int64)
    while (up >= 0).any():
        live = up >= 0
        depth = depth + np.where(live, depth[np.where(live, up, 0)], 0)
        up = np.where(live, up[np.where(live, up, 0)], -1)
    return depth


def build_ranges(nested: pa.Table, linked_ops: pa.Table, rank: int, index: LaunchIndex | None = None,
                 cross_owned: tuple[np.ndarray, np.ndarray] | None = None, cross_rows: np.ndarray | None = None) -> pa.Table:
    """Ranges of one rank (from ``nest``) in the ``schema.RANGES`` layout, projected onto ``linked_ops``.

    ``cross_owned``: (op rows, range rows) attributed across threads (``analysis.attribution``);
    ``cross_rows``: the range rows that take such work (their ``attribution`` is ``cross_thread``).
    """
    if "range_id" not in nested.column_names:
        nested = nest(nested)
    projected = project(nested, linked_ops, index, cross_owned)
    n = projected.num_rows
    cross = np.zeros(n, dtype=bool)
    if cross_rows is not None and len(cross_rows):
        cross[np.asarray(cross_rows, np.int64)] = True
    projected = projected.append_column("rank", pa.array(np.full(n, rank, dtype=np.int32)))
    projected = projected.append_column("attribution", pa.array(np.where(cross, "cross_thread", "same_thread").tolist() if n else [], pa.string()))
    return projected.select(schema.RANGES.names).cast(schema.RANGES)
