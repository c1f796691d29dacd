"""NVTX -> GPU projection: which GPU work each CPU range launched, and when it really ran.

Definition (nsys ``nvtx_gpu_proj_trace``): a GPU op belongs to a range when the API call that
launched it starts and ends inside the range, on the range's own thread. The projected GPU
start / end are the first op start / last op end. tracerecon counts every op: kernels, memcpy,
memset, every node kernel of a CUDA-graph launch in node mode (they share one correlation id),
and whole graph launches in graph mode (which nsys's own report leaves out).

Speed: ops are sorted once per thread by launch time; a range's ops are then one contiguous
slice found by binary search, and per-range statistics are segmented numpy reductions over
the concatenated slices (total work = sum of slice lengths, no per-range Python loop).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.intervals import count_distinct_per_group, explode_slices, last_covering_slice, segmented_min_max, segmented_union_length

I64_MIN = np.iinfo(np.int64).min
I64_MAX = np.iinfo(np.int64).max


def int64s(col: pa.ChunkedArray | pa.Array, fill: int = I64_MIN) -> np.ndarray:
    """int64 column -> numpy, nulls as ``fill``."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _dense(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def distinct_values(col: pa.ChunkedArray | pa.Array, rows: np.ndarray | None = None, null: str | None = None) -> tuple[list, np.ndarray]:
    """The distinct values of a (dictionary-)string column (of its ``rows``, where given), in
    order of first appearance, and each row's code among them; a null read as ``null`` (None:
    a value of its own). A dictionary column's codes are taken as they are, never a string per
    row (DeepEP's demangled names run to kilobytes: 300,000 of them cast to strings took 2 GB),
    and one value is one code (a dictionary may hold a text twice: two StringIds of one text)."""
    if rows is not None:
        col = col.take(pa.array(rows, pa.int64()))
    if isinstance(col, pa.ChunkedArray):
        col = col.unify_dictionaries() if pa.types.is_dictionary(col.type) else col
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if len(col) == 0:
        return [], np.zeros(0, np.int64)
    if pa.types.is_null(col.type):  # (a column of nulls only, typed as such)
        return [null], np.zeros(len(col), np.int64)
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    raw = col.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    used, first, code = np.unique(raw, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    place = np.empty(len(order), np.int64)
    place[order] = np.arange(len(order))
    picked = used[order]
    texts = col.dictionary.take(pa.array(np.maximum(picked, 0))).to_pylist() if len(col.dictionary) else [None] * len(picked)
    first_of: dict = {}
    same = np.array([first_of.setdefault(null if u < 0 else v, len(first_of)) for u, v in zip(picked.tolist(), texts)], dtype=np.int64)
    return list(first_of), same[place[code.reshape(-1)]]


def string_mask(col: pa.ChunkedArray | pa.Array, test) -> np.ndarray:
    """Boolean numpy mask: ``test(value)`` for each string of a (dictionary-)string column; nulls False.

    ``test`` runs once per distinct value, not per row.
    """
    col = _dense(col)
    if len(col) == 0:
        return np.zeros(0, dtype=bool)
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    hits = np.array([bool(v is not None and test(v)) for v in col.dictionary.to_pylist()] + [False], dtype=bool)
    idx = col.indices.to_numpy(zero_copy_only=False) if col.indices.null_count == 0 else pc.fill_null(col.indices, -1).to_numpy(zero_copy_only=False)
    # A few codes are compared against instead of gathered from (0.1 ms a code, against 1.6 ms
    # for the gather, on the 76 MB trace's 422,638 ops; a rank asks a dozen such masks).
    passing, failing = np.flatnonzero(hits[:-1]), np.flatnonzero(~hits[:-1])
    if len(passing) <= _FEW_CODES:
        out = np.zeros(len(idx), dtype=bool)
        for code in passing.tolist():
            out |= idx == code
        return out
    if len(failing) < _FEW_CODES:
        out = np.ones(len(idx), dtype=bool)
        for code in failing.tolist() + [-1]:  # -1: null
            out &= idx != code
        return out
    return hits[idx]


# Up to this many codes a mask is made by comparisons (``string_mask``).
_FEW_CODES = 6


def equals(col: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    return string_mask(col, lambda v: v == value)


def match_correlation(a_proc: np.ndarray, a_corr: np.ndarray, b_proc: np.ndarray, b_corr: np.ndarray) -> np.ndarray:
    """For each (b_proc, b_corr), the row of ``a`` with the same process and correlation id, else -1.

    Correlation ids < 0 mean "none". Where ``a`` repeats a key, the first row wins.
    """
    out = np.full(len(b_corr), -1, dtype=np.int64)
    a_ok = a_corr >= 0
    every = bool(a_ok.all())  # the usual case: no copies of a's columns
    a_idx = None if every else np.flatnonzero(a_ok)
    if (len(a_corr) if every else len(a_idx)) == 0 or len(b_corr) == 0:
        return out
    a_key, b_key = process_correlation_keys(a_proc if every else a_proc[a_idx], a_corr if every else a_corr[a_idx], b_proc, b_corr)
    if len(b_key) > 2 * len(a_key) and bool((b_key[1:] > b_key[:-1]).all()):
        # b's keys rise (an export's API calls, one process, in call order) and a is the
        # smaller side (sync records, a rank's copies): one search per row of a (the 76 MB
        # trace's 25k sync records among 398k calls: 5 ms against 17 ms the other way).
        pos = np.searchsorted(b_key, a_key)
        np.minimum(pos, len(b_key) - 1, out=pos)
        hit = np.flatnonzero((b_key[pos] == a_key) & (b_corr[pos] >= 0))
        # Where a repeats a key, its first row: the first of each position among the hits.
        at, first = np.unique(pos[hit], return_index=True)
        out[at] = hit[first] if every else a_idx[hit[first]]
        return out
    if bool((a_key[1:] > a_key[:-1]).all()):  # a's keys rise already: no sort, no copy
        order, sk = None, a_key
    else:
        order = np.argsort(a_key, kind="stable")
        sk = a_key[order]
    pos = np.searchsorted(sk, b_key)
    np.minimum(pos, len(sk) - 1, out=pos)
    found = (sk[pos] == b_key) & (b_corr >= 0)
    rows = pos[found] if order is None else order[pos[found]]
    out[found] = rows if every else a_idx[rows]
    return out


def launching_calls(ops: pa.Table, api_calls: pa.Table) -> np.ndarray:
    """Per GPU op, the row of ``api_calls`` that launched it, else -1. The join is on (process,
    correlation id): correlation ids are per process, and two processes on one GPU share
    thousands of them. Several ops may share one call (node-mode CUDA graphs)."""
    if ops.num_rows == 0 or api_calls.num_rows == 0:
        return np.full(ops.num_rows, -1, np.int64)
    return match_correlation(int64s(api_calls["global_pid"]), int64s(api_calls["correlation_id"], -1), int64s(ops["global_pid"]), int64s(ops["correlation_id"], -1))


def link_launches(ops: pa.Table, api_calls: pa.Table, call: np.ndarray | None = None) -> pa.Table:
    """Add the launching API call of every GPU op (``call``, where worked out already, else
    ``launching_calls``): launch_tid, launch_start_ns, launch_end_ns, launch_api. Ops with no
    matching call get nulls.
    """
    n = ops.num_rows
    if n == 0 or api_calls.num_rows == 0:
        return ops.append_column("launch_tid", pa.nulls(n, pa.int64())).append_column(
            "launch_start_ns", pa.nulls(n, pa.int64())).append_column(
            "launch_end_ns", pa.nulls(n, pa.int64())).append_column("launch_api", pa.nulls(n, pa.dictionary(pa.int32(), pa.string())))
    call = launching_calls(ops, api_calls) if call is None else call
    found = call >= 0
    call = np.where(found, call, 0)
    mask = ~found
    tid = int64s(api_calls["tid"])[call]
    st = int64s(api_calls["start_ns"])[call]
    en = int64s(api_calls["end_ns"])[call]
    api_names = _dense(api_calls["name"])
    names = pa.DictionaryArray.from_arrays(pa.array(api_names.indices.to_numpy(zero_copy_only=False)[call], mask=mask), api_names.dictionary)
    return (
        ops.append_column("launch_tid", pa.array(tid, mask=mask))
        .append_column("launch_start_ns", pa.array(st, mask=mask))
        .append_column("launch_end_ns", pa.array(en, mask=mask))
        .append_column("launch_api", names)
    )


def process_correlation_keys(a_proc: np.ndarray, a_corr: np.ndarray, b_proc: np.ndarray, b_corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(process, correlation id) packed into one sortable int64 per row, for both sides alike.

    Where every process id shares its bits above the pid (one host: the usual export), the
    24-bit pid itself is the process number (elementwise, no sort); otherwise processes are
    numbered densely. The correlation id takes the low 39 bits (CUPTI's ids are 32-bit); where
    an id does not fit there, the ids are numbered densely in their order instead, so that no
    two ids share a key and keys still rise with the ids."""
    mask39 = (1 << 39) - 1
    pid_bits = 0xFFFFFF << 24
    a_proc = np.asarray(a_proc, np.int64)
    b_proc = np.asarray(b_proc, np.int64)
    a_corr = np.asarray(a_corr, np.int64)
    b_corr = np.asarray(b_corr, np.int64)
    if max(int(a_corr.max()) if len(a_corr) else 0, int(b_corr.max()) if len(b_corr) else 0) > mask39:
        _, dense = np.unique(np.concatenate([a_corr, b_corr]), return_inverse=True)
        dense = dense.ravel().astype(np.int64)
        a_corr, b_corr = dense[: len(a_corr)], dense[len(a_corr):]
    rest = int(a_proc[0]) & ~pid_bits if len(a_proc) else 0

    def one_host(proc: np.ndarray) -> bool:
        if len(proc) == 0:
            return True
        high = proc & ~pid_bits
        return int(high.min()) == rest == int(high.max())

    if one_host(a_proc) and one_host(b_proc):
        a_num, b_num = a_proc >> 24, b_proc >> 24
        a_num &= 0xFFFFFF
        b_num &= 0xFFFFFF
    else:
        _, inv = np.unique(np.concatenate([a_proc, b_proc]), return_inverse=True)
        inv = inv.ravel().astype(np.int64)
        a_num, b_num = inv[: len(a_proc)], inv[len(a_proc):].copy()
    # In place: these arrays are as long as the trace's API calls (a few temporaries of a
    # 1 GiB export's 13 M rows cost more than the arithmetic).
    for num, corr in ((a_num, a_corr), (b_num, b_corr)):
        num <<= 39
        num |= corr & mask39
    return a_num, b_num


@dataclass(frozen=True)
class LaunchIndex:
    """Ops sorted once by (pid, launch thread, launch start), for any number of range lookups."""

    order: np.ndarray  # row order of ops
    spans: dict  # (pid, tid) -> (first, end) positions in ``order``
    launch_start: np.ndarray  # in ``order``
    launch_end: np.ndarray  # in ``order``: the latest launch end so far on its thread (a running maximum per span)


def index_launches(ops: pa.Table) -> LaunchIndex:
    """Sort ops by (pid, launch thread, launch start); ops without a launching call go last and
    belong to no thread."""
    pid = int64s(ops["pid"])
    tid = int64s(ops["launch_tid"], -1)
    ls = int64s(ops["launch_start_ns"], I64_MAX)
    le = int64s(ops["launch_end_ns"], I64_MAX)
    order = np.lexsort((le, ls, tid, pid))
    p, t = pid[order], tid[order]
    spans: dict[tuple[int, int], tuple[int, int]] = {}
    reach = le[order]
    if len(order):
        change = np.flatnonzero((np.diff(p) != 0) | (np.diff(t) != 0)) + 1
        for s0, e0 in zip(np.r_[0, change].tolist(), np.r_[change, len(order)].tolist()):
            if t[s0] >= 0:
                spans[(int(p[s0]), int(t[s0]))] = (s0, e0)
                # Calls on one thread do not overlap, so ends are sorted with starts; the
                # running maximum keeps the searches by end correct even if a trace breaks that.
                np.maximum.accumulate(reach[s0:e0], out=reach[s0:e0])
    return LaunchIndex(order, spans, ls[order], reach)


# The (range, op) pairs are worked through in chunks of whole ranges, about this many pairs
# each, on up to PROJECTION_THREADS threads (numpy sorts and searches with the GIL released):
# the pair arrays held at once stay a few chunks' worth however large the trace (tracemalloc's
# peak for the 76 MB trace's 845k pairs: 65 MB in one piece, 19 MB in chunks; a 1 GiB export
# has 12M pairs). On the H200 host: 0.14 -> 0.045 s for the 76 MB trace, 1.8 -> 0.53 s for 1 GiB.
PAIRS_PER_CHUNK = 100_000
PROJECTION_THREADS = 4


def project(ranges: pa.Table, ops: pa.Table, index: LaunchIndex | None = None, extra: tuple[np.ndarray, np.ndarray] | None = None) -> pa.Table:
    """Project every range onto the GPU.

    Inputs: ``ranges`` with pid, tid, start_ns, end_ns, style; ``ops`` from ``link_launches``.
    Output: ``ranges`` plus gpu_start_ns, gpu_end_ns (null when no op), gpu_busy_ns, n_gpu_ops,
    n_kernels, n_streams, n_devices. Ranges that start and end on different threads get no
    GPU work, as in nsys. ``index``: ``index_launches(ops)`` if the caller already has it.
    ``extra``: (op rows, range rows) of work a range owns beyond its own thread's launches
    (``analysis.attribution``); None keeps nsys's same-thread rule exactly.
    """
    lo, hi, order = range_op_slices(ranges, ops, index)
    n_r = ranges.num_rows
    op = _OpColumns.of(ops)
    ex_ops = ex_ranges = np.zeros(0, np.int64)
    if extra is not None and (len(extra[0]) != len(extra[1]) or (len(extra[1]) and not (0 <= np.min(extra[1]) and np.max(extra[1]) < n_r))):
        raise ValueError("extra: one range row per op row, each a row of ranges")
    if extra is not None and len(extra[0]):
        by_range = np.argsort(np.asarray(extra[1], np.int64), kind="stable")
        ex_ops, ex_ranges = np.asarray(extra[0], np.int64)[by_range], np.asarray(extra[1], np.int64)[by_range]
    # Chunks of consecutive ranges, cut where the running count of pairs passes each multiple
    # of PAIRS_PER_CHUNK (a range's pairs stay in one chunk: the statistics are per range).
    pairs = np.cumsum(np.clip(hi - lo, 0, None)) + np.searchsorted(ex_ranges, np.arange(1, n_r + 1))
    cuts = np.unique(np.r_[0, np.searchsorted(pairs, np.arange(PAIRS_PER_CHUNK, int(pairs[-1]) if n_r else 0, PAIRS_PER_CHUNK), side="right"), n_r])

    def chunk(r0: int, r1: int) -> tuple[np.ndarray, ...]:
        pos, which = explode_slices(lo[r0:r1], hi[r0:r1])
        rows = order[pos]
        del pos
        e0, e1 = np.searchsorted(ex_ranges, [r0, r1])
        if e1 > e0:
            rows = np.concatenate([rows, ex_ops[e0:e1]])
            which = np.concatenate([which, ex_ranges[e0:e1] - r0])
        return op.range_statistics(rows, which, r1 - r0)

    spans = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    if len(spans) > 1:
        from concurrent.futures import ThreadPoolExecutor

        from tracerecon.cores import usable_cores

        with ThreadPoolExecutor(min(len(spans), PROJECTION_THREADS, usable_cores())) as pool:
            parts = list(pool.map(lambda span: chunk(*span), spans))
    else:
        parts = [chunk(*spans[0])] if spans else [op.range_statistics(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)]
    mn, mx, busy, n_ops, n_kernels, n_devices, n_streams = (np.concatenate(col) for col in zip(*parts))
    has = n_ops > 0
    return (
        ranges.append_column("gpu_start_ns", pa.array(mn, mask=~has))
        .append_column("gpu_end_ns", pa.array(mx, mask=~has))
        .append_column("gpu_busy_ns", pa.array(busy))
        .append_column("n_gpu_ops", pa.array(n_ops))
        .append_column("n_kernels", pa.array(n_kernels))
        .append_column("n_streams", pa.array(n_streams))
        .append_column("n_devices", pa.array(n_devices))
    )


@dataclass(frozen=True)
class _OpColumns:
    """The op columns a projection reads, as numpy arrays, taken once for all chunks."""

    start: np.ndarray
    end: np.ndarray
    is_kernel: np.ndarray
    device: np.ndarray
    device_stream: np.ndarray  # device << 32 | stream: one key per stream

    @staticmethod
    def of(ops: pa.Table) -> _OpColumns:
        if ops.num_rows == 0:
            empty = np.zeros(0, np.int64)
            return _OpColumns(empty, empty, np.zeros(0, bool), empty, empty)
        device = int64s(ops["device_id"], -1)  # (NULL: a device of its own, not device 0's streams)
        return _OpColumns(int64s(ops["start_ns"]), int64s(ops["end_ns"]), equals(ops["kind"], "kernel"), device,
                          device << 32 | (int64s(ops["stream_id"]) & 0xFFFFFFFF))

    def range_statistics(self, rows: np.ndarray, which: np.ndarray, n_r: int) -> tuple[np.ndarray, ...]:
        """For ``n_r`` ranges owning ops ``rows`` (pairs: op ``rows[i]`` in range ``which[i]``):
        first op start, last op end (int64 min/max sentinels where none), busy time (union
        of the ops' intervals), ops, kernels, devices, streams."""
        o_start, o_end = self.start[rows], self.end[rows]
        mn, mx = segmented_min_max(o_start, o_end, which, n_r)
        busy = segmented_union_length(o_start, o_end, which, n_r)
        del o_start, o_end
        n_ops = np.bincount(which, minlength=n_r).astype(np.int64) if len(which) else np.zeros(n_r, np.int64)
        if len(self.start) == 0:
            zeros = np.zeros(n_r, np.int64)
            return mn, mx, busy, n_ops, zeros, zeros, zeros.copy()
        n_kernels = np.bincount(which[self.is_kernel[rows]], minlength=n_r).astype(np.int64)
        n_devices = count_distinct_per_group(self.device[rows], which, n_r)
        n_streams = count_distinct_per_group(self.device_stream[rows], which, n_r)
        return mn, mx, busy, n_ops, n_kernels, n_devices, n_streams


def range_op_slices(ranges: pa.Table, ops: pa.Table, index: LaunchIndex | None = None,
                    start_thread_too: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each range, the slice ``[lo, hi)`` of ``order`` holding the ops it launched.

    Returns (lo, hi, order) where ``order`` sorts ``ops`` by thread and launch time. A start/end
    range ended on another thread launched nothing (nsys's projection), unless
    ``start_thread_too``: then what its starting thread launched inside it.
    """
    n_r = ranges.num_rows
    lo = np.zeros(n_r, dtype=np.int64)
    hi = np.zeros(n_r, dtype=np.int64)
    if ops.num_rows == 0 or n_r == 0:
        return lo, hi, np.zeros(ops.num_rows, dtype=np.int64)
    index = index or index_launches(ops)
    order, spans, ls, le = index.order, index.spans, index.launch_start, index.launch_end
    r_pid = int64s(ranges["pid"])
    r_tid = int64s(ranges["tid"])
    r_s = int64s(ranges["start_ns"])
    r_e = int64s(ranges["end_ns"])
    same_thread = np.ones(n_r, dtype=bool) if start_thread_too else pc.not_equal(ranges["style"], "start_end_cross_thread").to_numpy(zero_copy_only=False)
    keys = r_pid << 24 | r_tid
    for key in np.unique(keys):
        span = spans.get((int(key >> 24), int(key & 0xFFFFFF)))
        if span is None:
            continue
        s0, s1 = span
        sel = np.flatnonzero((keys == key) & same_thread)
        lo[sel] = s0 + np.searchsorted(ls[s0:s1], r_s[sel], side="left")
        hi[sel] = s0 + np.searchsorted(le[s0:s1], r_e[sel], side="right")
    hi = np.maximum(hi, lo)
    return lo, hi, order


def innermost_owner(
    ops: pa.Table, ranges: pa.Table, candidate_mask: np.ndarray, depth: np.ndarray | None = None, index: LaunchIndex | None = None,
    start_thread_too: bool = False,
) -> np.ndarray:
    """For each op, the row of the innermost candidate range holding its launch call, or -1.

    ``ops`` needs pid, launch_tid, launch_start_ns, launch_end_ns (any table of CPU calls
    works). ``candidate_mask`` selects ranges; where candidates nest, the deepest (by
    ``depth``, else the later row) wins. ``start_thread_too``: see ``range_op_slices``.
    """
    out = np.full(ops.num_rows, -1, dtype=np.int64)
    if ops.num_rows == 0 or not candidate_mask.any():
        return out
    cand = np.flatnonzero(candidate_mask)
    if depth is not None:
        cand = cand[np.argsort(depth[cand], kind="stable")]
    sub = ranges.take(pa.array(cand))
    lo, hi, order = range_op_slices(sub, ops, index, start_thread_too)
    # The deepest candidate is the one latest in ``cand`` (depth order): per op, the largest
    # slice holding it; -1 (none) picks the -1 appended to ``cand``.
    out[order] = np.append(cand, -1)[last_covering_slice(lo, hi, ops.num_rows)]
    return out
