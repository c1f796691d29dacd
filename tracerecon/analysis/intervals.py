"""Interval algebra on int64 ns arrays, vectorised with numpy.

Intervals are half-open ``[start, end)``; an interval with ``end <= start`` is empty and
contributes nothing. Groups are given as a non-decreasing int array of group numbers
(``0..n_groups-1``); results are per group, length ``n_groups``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_I64_LIMIT = 2**62  # headroom under 2**63 for the offset trick in segmented_union_length
_PRESENCE_CELLS = 1 << 24  # count_distinct_per_group's (group, key) table: at most 16 MB of booleans


def segmented_union_length(start: np.ndarray, end: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the length of the union of that group's intervals.

    ``group`` need not be sorted. Groups with no intervals get 0.
    """
    return segmented_union_lengths(start, end, group, n_groups, (None,))[0]


def segmented_union_lengths(start: np.ndarray, end: np.ndarray, group: np.ndarray, n_groups: int,
                            subsets: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """``segmented_union_length`` of each subset of the intervals (a boolean mask over them;
    None: all of them), in the order given, with one sort for all: a subset of intervals
    sorted by (group, start) is sorted too."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    masks = [None if m is None else np.asarray(m, dtype=bool) for m in subsets]
    if any(m is not None and m.shape != start.shape for m in masks):
        raise ValueError("subsets: one boolean per interval")
    outs = [np.zeros(n_groups, dtype=np.int64) for _ in masks]
    keep = end > start
    if not keep.any():
        return outs
    if not keep.all():
        start, end, group = start[keep], end[keep], group[keep]
        masks = [None if m is None else m[keep] for m in masks]
    del keep
    # A subset holding every interval is the whole set, whose union is worked out once (a phase
    # split into communication and compute where nothing communicates), and last: it works in
    # place on the sorted arrays the other subsets are taken from.
    masks = [None if m is None or m.all() else m for m in masks]
    wholes = [i for i, m in enumerate(masks) if m is None]
    parts = [i for i, m in enumerate(masks) if m is not None and m.any()]
    # Temporaries are reused in place: on a 1 GB trace this runs over tens of millions of
    # (range, op) pairs, and each array of that length is hundreds of MB.
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    if span * (n_groups + 1) < _I64_LIMIT:
        # Offset each group into its own band of the number line: one sort of the shifted
        # starts orders by (group, start) (cheaper than a two-key lexsort), and a running
        # maximum over all groups then restarts at every group boundary by itself.
        off = group * span
        off -= t0
        s = start + off
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = end[order]
        e += off[order]
        g = group[order]
        del off
        add = _add_banded_union
    else:
        order = np.lexsort((start, group))
        s, e, g = start[order], end[order], group[order]
        add = _add_union_group_by_group
    # The subsets' masks in sorted order first, so that the sort order is freed before their
    # intervals are copied out (on a 1 GB trace each array of them is tens of MB).
    sorted_masks = [masks[i][order] for i in parts]
    del order, masks
    for i, m in zip(parts, sorted_masks):
        add(outs[i], s[m], e[m], g[m])
    del sorted_masks
    if wholes:
        add(outs[wholes[0]], s, e, g)
        for i in wholes[1:]:
            outs[i][:] = outs[wholes[0]]
    return outs


def _add_banded_union(out: np.ndarray, s: np.ndarray, e: np.ndarray, g: np.ndarray) -> None:
    """Into ``out[group]``: the union length of intervals ``[s, e)`` sorted by start, each group
    in a band of the number line of its own (``segmented_union_lengths``). Works in place on
    ``s`` and ``e``."""
    if len(s) == 0:
        return
    run_max = np.maximum.accumulate(e)
    # Each interval adds what reaches past everything before it: e - max(s, run_max before it).
    np.maximum(s[1:], run_max[:-1], out=s[1:])
    del run_max
    e -= s
    np.clip(e, 0, None, out=e)
    # g is sorted: one exact int64 sum per run of equal groups.
    firsts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    out[g[firsts]] = np.add.reduceat(e, firsts)


def _add_union_group_by_group(out: np.ndarray, s: np.ndarray, e: np.ndarray, g: np.ndarray) -> None:
    """``_add_banded_union`` for intervals sorted by (group, start) that do not fit in bands:
    very long traces with very many groups, one group at a time (still vectorised inside)."""
    bounds = np.flatnonzero(np.diff(g)) + 1
    for gs, ge in zip(np.r_[0, bounds], np.r_[bounds, len(g)]):
        if ge <= gs:
            continue
        ss, ee = s[gs:ge], e[gs:ge]
        run_max = np.maximum.accumulate(ee)
        prev = np.r_[np.iinfo(np.int64).min, run_max[:-1]]
        out[g[gs]] = int(np.clip(ee - np.maximum(ss, prev), 0, None).sum())


def explode_slices(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For slices ``[lo[i], hi[i])`` return (positions, slice number) of every element, slice
    by slice in order (the slice numbers never decrease).

    Total output length is ``sum(hi - lo)``; empty slices contribute nothing.
    """
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    n = np.clip(hi - lo, 0, None)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    which = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    first = np.cumsum(n) - n  # output index where each slice begins
    pos = np.arange(total, dtype=np.int64) - first[which] + lo[which]
    return pos, which


def last_covering_slice(lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """For each position ``p`` in ``range(n)``, the largest ``i`` with ``lo[i] <= p < hi[i]``, or
    -1 where no slice covers ``p`` (int32: at most 2**31 - 1 slices). Slices may nest, overlap
    or reach past ``n`` (clipped).

    The answer ``explode_slices`` and a per-position maximum give, without making a pair per
    (slice, position): each slice is cut into the O(log n) nodes of a binary tree over the
    positions (node ``i`` holds nodes ``2i`` and ``2i + 1``; position ``p`` is node ``n + p``)
    that cover it exactly, each node keeps the largest slice number put on it, and the nodes'
    maxima are then pushed down to the positions. Work O(slices * log n + n), where the pairs
    are the slices' total length (every op under a cycle, a phase and its sub-ranges).
    """
    lo = np.clip(np.asarray(lo, dtype=np.int64), 0, n)
    hi = np.clip(np.asarray(hi, dtype=np.int64), 0, n)
    which = np.flatnonzero(hi > lo)
    if len(which) == 0:
        return np.full(n, -1, dtype=np.int32)
    if len(lo) >= 2**31:
        raise ValueError("last_covering_slice takes fewer than 2**31 slices")
    tree = np.full(2 * n, -1, dtype=np.int32)
    which = which.astype(np.int32)
    left, right = lo[which] + n, hi[which] + n  # [left, right) among the positions' nodes
    while len(which):
        # A left end that is a right child, or a right end past a left child, is a whole node:
        # marked here, then the ends step in and both climb to their parents.
        at = (left & 1) == 1
        np.maximum.at(tree, left[at], which[at])
        left = left + at
        at = (right & 1) == 1
        right = right - at
        np.maximum.at(tree, right[at], which[at])
        left >>= 1
        right >>= 1
        live = left < right
        which, left, right = which[live], left[live], right[live]
    row = 1
    while row < n:  # each node's maximum into its two children, parents before children
        parents = tree[row:min(2 * row, n)]
        children = tree[2 * row:2 * row + 2 * len(parents)].reshape(-1, 2)
        np.maximum(children, parents[:, None], out=children)
        row *= 2
    return tree[n:].copy()


def segmented_min_max(values_lo: np.ndarray, values_hi: np.ndarray, which: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: min of ``values_lo`` and max of ``values_hi`` (int64 min/max sentinels if empty)."""
    mn = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    mx = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    if len(which):
        np.minimum.at(mn, which, values_lo)
        np.maximum.at(mx, which, values_hi)
    return mn, mx


def count_distinct_per_group(keys: np.ndarray, which: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the number of distinct ``keys`` values among its members (``which``: each
    member's group, ``0..n_groups-1``)."""
    out = np.zeros(n_groups, dtype=np.int64)
    if len(which) == 0:
        return out
    keys = np.asarray(keys, dtype=np.int64)
    which = np.asarray(which, dtype=np.int64)
    # The distinct keys without a sort of them all: the members are a projection chunk's
    # 100,000 (range, op) pairs over a few streams or devices, and np.unique's sort of them
    # took 4-11 ms a chunk, 18 chunks for the 76 MB trace (2-core machine).
    codes = distinct_few(keys)
    k = len(codes)
    if k == 1:
        out[np.bincount(which, minlength=n_groups) > 0] = 1
        return out
    dense = np.searchsorted(codes, keys)
    if n_groups * k <= _PRESENCE_CELLS:
        # A (group, key) table of booleans, set once per member: no sort at all.
        present = np.zeros(n_groups * k, dtype=bool)
        present[which * k + dense] = True
        return np.count_nonzero(present.reshape(n_groups, k), axis=1).astype(np.int64)
    packed = np.unique(which * k + dense)
    return np.bincount(packed // k, minlength=n_groups).astype(np.int64)


def distinct_few(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a column that holds few distinct values (the processes, streams
    or threads of a rank's ops): the distinct values of a sample, checked against every value
    (``isin_few``), then those of the values the sample missed (a rarely used stream): a sort of
    the 422,638 ops of the 76 MB trace takes 8-15 ms, this about 1 ms."""
    values = np.asarray(values)
    if len(values) <= 4096:
        return np.unique(values)
    uniq = np.unique(values[:: len(values) // 4096])
    if len(uniq) > _FEW:
        return np.unique(values)
    missed = values[~isin_few(values, uniq)]
    return np.union1d(uniq, missed) if len(missed) else uniq


# Up to this many values, ``isin_few`` compares each in turn (0.05 ms per value for 422,638
# rows, where np.isin sorts: 5-7 ms whatever the number of values).
_FEW = 16


def isin_few(values: np.ndarray, few: np.ndarray) -> np.ndarray:
    """``np.isin(values, few)``, one comparison per value of ``few`` where it holds few."""
    values, few = np.asarray(values), np.asarray(few)
    if len(few) > _FEW:
        return np.isin(values, few)
    out = np.zeros(len(values), dtype=bool)
    for v in few.tolist():
        out |= values == v
    return out


def last_reaching(values: np.ndarray, pos: np.ndarray, threshold: np.ndarray, lowest: np.ndarray | None = None,
                  strict: bool = False) -> np.ndarray:
    """For each query q: the largest j <= ``pos[q]`` (and >= ``lowest[q]``) with ``values[j] >=
    threshold[q]`` (``>`` where ``strict``); -1 where there is none. A table of range maxima
    (2**k rows ending at each j) lets every query skip back over rows below its threshold in
    log2(n) steps at once; it is only as deep as the longest span a query may search."""
    n = len(values)
    pos = np.asarray(pos, dtype=np.int64).copy()
    if n == 0 or len(pos) == 0:
        return np.full(len(pos), -1, dtype=np.int64)
    low = np.zeros(len(pos), dtype=np.int64) if lowest is None else np.asarray(lowest, dtype=np.int64)
    span = int((pos - low).max()) + 1
    maxima = [np.asarray(values)]
    width = 1
    while width < span:
        prev = maxima[-1]
        cur = prev.copy()
        np.maximum(prev[width:], prev[:-width], out=cur[width:])  # rows j-2w+1 .. j (from 0 near the top)
        maxima.append(cur)
        width *= 2
    for k in range(len(maxima) - 1, -1, -1):
        live = pos >= 0
        short = np.zeros(len(pos), dtype=bool)
        m = maxima[k][pos[live]]
        short[live] = (m <= threshold[live]) if strict else (m < threshold[live])
        pos[short] -= 1 << k
    found = (pos >= 0) & (pos >= low)
    hit = values[pos[found]]
    found[found] = (hit > threshold[found]) if strict else (hit >= threshold[found])
    return np.where(found, pos, -1)


def inside_another_thread(start: np.ndarray, end: np.ndarray, thread: np.ndarray, holders: np.ndarray) -> np.ndarray:
    """Per phase instance (in start order): whether an instance among ``holders`` (those that
    can hold others: in ``boundaries.in_sequence``, those in a cycle) of another thread began
    no later and ends no earlier: the two are not one after the other, so that one is running
    all through this one (a helper thread's range inside the loop thread's phase)."""
    out = np.zeros(len(start), dtype=bool)
    threads = np.unique(thread[holders])
    if len(np.unique(thread)) < 2:
        return out
    for th in threads.tolist():
        reach = np.maximum.accumulate(np.where((thread == th) & holders, end, np.iinfo(np.int64).min))  # the latest end of th's ranges begun so far
        out |= (thread != th) & (reach >= end)
    return out


def covered_length(start: np.ndarray, end: np.ndarray, by_start: np.ndarray, by_end: np.ndarray) -> np.ndarray:
    """Per interval [start, end), how much of it the union of the intervals [by_start, by_end)
    covers."""
    out = np.zeros(len(start), dtype=np.int64)
    keep = by_end > by_start
    if len(start) == 0 or not keep.any():
        return out
    s, e = by_start[keep], by_end[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    # The union as disjoint runs: a run starts where an interval begins past all before it.
    new = np.r_[True, s[1:] > e[:-1]]
    run_s = s[new]
    run_e = e[np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]]
    before = np.r_[0, np.cumsum(run_e - run_s)]  # union length of the runs before each run

    def upto(x: np.ndarray) -> np.ndarray:  # union length below x
        k = np.searchsorted(run_s, x, side="right")  # runs starting at or before x
        last = np.maximum(k - 1, 0)
        inside = np.where(k > 0, np.minimum(x, run_e[last]) - run_s[last], 0)
        return before[last] * (k > 0) + np.maximum(inside, 0)

    return np.maximum(upto(end) - upto(start), 0)


# The share of a thread's phase time above which it runs beside the loop (``running_beside``):
# threads taking turns overlap the loop's later phases only where one hands the step back; an
# output thread beside the loop on an H100 (vLLM-like async output, ``.tolist()`` in its own
# range), 42-95 % (a review's probe, 12 traces).
BESIDE_SHARE = 0.25


def running_beside(start: np.ndarray, end: np.ndarray, thread: np.ndarray, loop: int, quiet: np.ndarray) -> np.ndarray:
    """Per phase instance (those of one timeline): whether it is of a thread that
    runs its phases beside the loop, not in turn with it: a thread other than ``loop`` (the
    thread that opens the cycles) whose phases ran no kernel (``quiet``, per instance: it reads
    results, it queues no step of the cycle) and during whose phase ranges the loop
    thread has phases open that it began after the range opened, for more than
    ``BESIDE_SHARE`` of their time (an output thread whose range for one step is open while the
    loop runs the next ones). Threads taking turns overlap only at the edges where one hands the
    step to the other: the loop's phase open as the range opens (a draft thread's phase opened
    before the loop's closed) does not count."""
    out = np.zeros(len(start), dtype=bool)
    on_loop = np.flatnonzero(thread == loop)
    others = np.flatnonzero(thread != loop)
    if len(on_loop) == 0 or len(others) == 0:
        return out
    s, e = start[others], end[others]
    loop_starts = np.sort(start[on_loop])
    k = np.searchsorted(loop_starts, s, side="right")  # the loop's first phase begun after each opened
    after = np.where(k < len(loop_starts), loop_starts[np.minimum(k, len(loop_starts) - 1)], e)
    covered = covered_length(np.clip(after, s, e), e, start[on_loop], end[on_loop])
    mine, which = np.unique(thread[others], return_inverse=True)
    share = np.bincount(which, covered, len(mine)) / np.maximum(np.bincount(which, np.maximum(e - s, 0), len(mine)), 1)
    all_quiet = np.bincount(which, ~quiet[others], len(mine)) == 0
    out[others] = (share > BESIDE_SHARE)[which] & all_quiet[which]
    return out
