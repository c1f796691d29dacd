"""``ranges.nest`` as it was before it worked on whole columns (a Python loop over ranges with a
stack): the oracle ``tests/test_nest.py`` checks the library's against. Kept as it was."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracerecon.analysis.projection import int64s


def nest(raw: pa.Table) -> pa.Table:
    """Sort ranges by (pid, tid, start, longest first) and add range_id, parent_id, depth.

    Nesting is computed per thread among push/pop ranges (start/end ranges may overlap
    anything and get depth 0 and no parent). A range is a child of the innermost open
    range that fully contains it.
    """
    n = raw.num_rows
    if n == 0:
        return raw.append_column("range_id", pa.array([], pa.int64())).append_column(
            "parent_id", pa.array([], pa.int64())).append_column("depth", pa.array([], pa.int32()))
    pid, tid = int64s(raw["pid"]), int64s(raw["tid"])
    s, e = int64s(raw["start_ns"]), int64s(raw["end_ns"])
    order = np.lexsort((-e, s, tid, pid))
    t = raw.take(pa.array(order))
    # Python ints and lists for the loop below (numpy scalars make it 3-4x slower).
    pid, tid, s, e = pid[order].tolist(), tid[order].tolist(), s[order].tolist(), e[order].tolist()
    push_pop = [x == "push_pop" for x in t["style"].to_pylist()]
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    stack: list[int] = []
    cur_thread = None
    for i in range(n):  # NVTX tables are small (10k ranges in a 420k-kernel trace)
        if not push_pop[i]:
            continue
        th = (pid[i], tid[i])
        if th != cur_thread:
            stack, cur_thread = [], th
        while stack and not (s[i] >= s[stack[-1]] and e[i] <= e[stack[-1]]):
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            depth[i] = len(stack)
        stack.append(i)
    return (
        t.append_column("range_id", pa.array(np.arange(n, dtype=np.int64)))
        .append_column("parent_id", pa.array(parent, mask=parent < 0))
        .append_column("depth", pa.array(depth))
    )
