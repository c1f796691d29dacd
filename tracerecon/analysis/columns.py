"""Small column rules every table builder shares, each written once."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from tracerecon.analysis.intervals import distinct_few
from tracerecon.analysis.nccl import comm_mask
from tracerecon.analysis.projection import I64_MIN, equals, int64s, process_correlation_keys, string_mask
from tracerecon.analysis.syncs import SYNCHRONOUS_COPIES, LEGACY_STREAM_WITHOUT_WAIT, base_api_name

GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch")
# API calls that launch a kernel or a graph (runtime and driver, every version suffix); not a
# host function (cudaLaunchHostFunc, cuLaunchHostFunc: no GPU op in any trace).
_LAUNCH_CALL = re.compile(r"Launch(Cooperative)?Kernel|GraphLaunch|^cuLaunch(Grid(Async)?)?(_v\d+)?$")


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


# A median "reads near" a cycle within this much of it (or this share of the median, if more).
NEAR_MEDIAN_NS = 20_000
NEAR_MEDIAN_SHARE = 0.1


def groups_apart_ms(values: np.ndarray, least: int = 6) -> tuple[tuple[float, float, int], tuple[float, float, int]] | None:
    """Where no value (int ns) lies within max(20 us, 10 %) of their median, and there are
    ``least`` or more: the values below the median and those above it, each as (smallest ms,
    largest ms, how many), the smaller first; else None. A phase slow every other cycle (a
    straggler on even cycles) has a median between its two kinds of cycle that no cycle reads."""
    v = np.sort(np.asarray(values, dtype=np.int64))
    if len(v) < least:
        return None
    m = median_ms(v) * 1e6
    if (np.abs(v - m) <= max(NEAR_MEDIAN_NS, NEAR_MEDIAN_SHARE * abs(m))).any():
        return None
    cut = int(np.searchsorted(v, m))
    lo, hi = v[:cut], v[cut:]
    return ((round(lo[0] / 1e6, 6), round(lo[-1] / 1e6, 6), len(lo)), (round(hi[0] / 1e6, 6), round(hi[-1] / 1e6, 6), len(hi)))


def median_ms(values) -> float | None:
    return quantile_ms(values, 0.5)


def is_graph_launch(gpu_ops: pa.Table) -> np.ndarray:
    """GPU ops that are (part of) a CUDA-graph launch: a graph-trace row, or a node kernel whose
    launching call is ``cudaGraphLaunch`` (node mode: every node kernel shares that call)."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return equals(gpu_ops["kind"], "graph") | string_mask(gpu_ops["launch_api"], lambda a: base_api_name(a) in GRAPH_LAUNCH_APIS)


def graph_node_launches(gpu_ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The node-mode CUDA-graph nodes of ``gpu_ops`` (every node kernel of one launch shares its
    launch call's correlation id, within its process): (their rows, sorted; each one's launch,
    an int64 shared by the nodes of one launch; a node without a correlation id is a launch of
    its own)."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.flatnonzero(is_graph_launch(gpu_ops) & ~equals(gpu_ops["kind"], "graph"))
    corr = int64s(gpu_ops["correlation_id"], -1)[rows]
    none = np.zeros(0, np.int64)
    launch = np.where(corr >= 0, process_correlation_keys(int64s(gpu_ops["pid"])[rows], corr, none, none)[0], -1 - rows)
    return rows, launch


def eager_launches(gpu_ops: pa.Table, op_phase: np.ndarray, n_phases: int) -> np.ndarray:
    """Per phase id (``op_phase``: each op's, -1 none): its eager launch calls, the distinct
    correlation ids of its ops that are no CUDA-graph launch (a call whose ops the trace links to
    none, correlation unknown, is not counted)."""
    out = np.zeros(n_phases, dtype=np.int64)
    if gpu_ops.num_rows == 0 or n_phases == 0:
        return out
    corr = int64s(gpu_ops["correlation_id"], -1)
    sel = np.flatnonzero((op_phase >= 0) & ~is_graph_launch(gpu_ops) & (corr >= 0))
    if len(sel):
        pairs = np.unique(np.stack([op_phase[sel], corr[sel]], axis=1), axis=0)
        out += np.bincount(pairs[:, 0], minlength=n_phases)[:n_phases]
    return out


def runs_model(gpu_ops: pa.Table) -> np.ndarray:
    """Per op: a kernel or graph that is no collective (``computes`` and not ``comm_mask``): what
    a thread's own current stream runs, where collectives run on NCCL's stream."""
    return computes(gpu_ops) & ~comm_mask(gpu_ops) if gpu_ops.num_rows else np.zeros(0, dtype=bool)


def computes(gpu_ops: pa.Table) -> np.ndarray:
    """GPU ops that run code: kernels and graph launches, not copies or memsets."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return equals(gpu_ops["kind"], "kernel") | equals(gpu_ops["kind"], "graph")


def thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (process, thread): thread ids are 32-bit."""
    return (np.asarray(pid, np.int64) << 32) | (np.asarray(tid, np.int64) & 0xFFFFFFFF)


def is_launch_call(api_calls: pa.Table) -> np.ndarray:
    """API calls that launch a kernel or a graph."""
    if api_calls.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return string_mask(api_calls["name"], lambda n: _LAUNCH_CALL.search(n) is not None)


# API calls that put a copy or a memset on the GPU (runtime and driver, any version suffix).
_COPY_CALL = {"memcpy": re.compile(r"^cu(?:da)?Memcpy"), "memset": re.compile(r"^cu(?:da)?Memset")}


def copy_calls_without_ops(api_calls: pa.Table, gpu_ops: pa.Table) -> dict[str, int]:
    """Per kind of op (``memcpy``, ``memset``) that the trace holds none of: how many API calls
    made one (its table missing or emptied: those phases' GPU times leave that work out). A
    kind some op of which is in the trace is not listed, nor any where graphs were traced whole
    (a call made while a stream was captured puts no op of its own in the trace: its work runs
    inside the graph's records)."""
    if api_calls.num_rows == 0:
        return {}
    kinds = set(gpu_ops["kind"].unique().to_pylist()) if gpu_ops.num_rows else set()
    if "graph" in kinds:
        return {}
    out = {}
    for kind, pattern in _COPY_CALL.items():
        if kind not in kinds:
            calls = int(string_mask(api_calls["name"], lambda n, p=pattern: p.search(n) is not None).sum())
            if calls:
                out[kind] = calls
    return out


def launches_never_run(api_calls: pa.Table, linked_ops: pa.Table) -> np.ndarray:
    """Rows of ``api_calls``: kernel and graph launches made after the last API call of their
    process that put any GPU op in the trace (``linked_ops``: ops with their launching calls,
    ``projection.link_launches``), so none of them has one. The capture ended before their work
    ran or its records were written (a timed capture, a process killed, a profiler range
    closed), and the phases that launched them read short. (Launches inside a stream capture
    run nothing too, but come before the graph's replays.) A process none of whose calls put an
    op in the trace is not counted (no kernel table at all is its own warning). (An op whose
    launching call is missing cannot be told apart from one of these launches' work: the GPU may
    run far behind the CPU, so its start says nothing.)"""
    if api_calls.num_rows == 0 or linked_ops.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    op_pid = int64s(linked_ops["pid"])
    op_call = int64s(linked_ops["launch_start_ns"], I64_MIN)
    # Each process's last call with an op (one process, the usual case, needs no sort).
    pids = op_pid[:1] if op_pid.min() == op_pid.max() else np.unique(op_pid)
    last = np.array([op_call[op_pid == p].max() if len(pids) > 1 else op_call.max() for p in pids.tolist()], dtype=np.int64)
    a_pid, a_start = int64s(api_calls["pid"]), int64s(api_calls["start_ns"])
    # Calls after their process's last call with an op, then those of them that launch.
    slot = np.minimum(np.searchsorted(pids, a_pid), len(pids) - 1)
    late = np.flatnonzero((pids[slot] == a_pid) & (a_start > last[slot]) & (last[slot] != I64_MIN))
    if len(late) == 0:
        return late.astype(np.int64)
    return late[is_launch_call(api_calls.take(pa.array(late)))]


_CAPTURE_BEGIN = re.compile(r"^cu(?:da)?StreamBeginCapture")
_CAPTURE_END = re.compile(r"^cu(?:da)?StreamEndCapture")


def launches_lost(api_calls: pa.Table, gpu_ops: pa.Table, call: np.ndarray) -> np.ndarray:
    """Rows of ``api_calls``: kernel and graph launches none of whose work is in the trace
    (``call``: per op of ``gpu_ops``, the row of its launching call, ``projection.launching_calls``), made
    no later than their process's last call that put an op in it (after it: ``launches_never_run``),
    while no stream capture of their process was open (a launch between ``cudaStreamBeginCapture``
    and ``cudaStreamEndCapture`` runs nothing: its work runs in the graph's replays), and before
    the last call of their thread whose op ran (a launch, a copy) on each stream the thread put
    work on (a stream running behind when the capture ended leaves its last launches unrun, not
    lost; which stream a call without an op went to, the trace does not say). CUPTI dropped their records (its
    buffers overflowed mid-run), the export was trimmed, or the launches failed: the phases that
    made them read short."""
    if api_calls.num_rows == 0 or gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    launch = is_launch_call(api_calls)
    if not launch.any():
        return np.zeros(0, dtype=np.int64)
    linked = call >= 0
    has_op = np.zeros(api_calls.num_rows, dtype=bool)
    has_op[call[linked]] = True
    if not (launch & ~has_op).any():
        return np.zeros(0, dtype=np.int64)
    pid, start = int64s(api_calls["pid"]), int64s(api_calls["start_ns"])
    # No later than their process's last call with an op (any kind: a copy's too).
    pids = np.unique(pid)
    slot = np.searchsorted(pids, pid)
    last = np.full(len(pids), I64_MIN, np.int64)
    np.maximum.at(last, slot[has_op], start[has_op])
    lost = np.flatnonzero(launch & ~has_op & (start <= last[slot]))
    if len(lost) == 0:
        return lost.astype(np.int64)
    # Outside every stream capture of their process (any thread may launch into a captured
    # stream; captures may nest): one open where more began than ended by the launch. (First:
    # in a trace that dropped nothing, every launch without an op is a capture's.)
    names = api_calls["name"]
    begin = string_mask(names, lambda n: _CAPTURE_BEGIN.search(n) is not None)
    end = string_mask(names, lambda n: _CAPTURE_END.search(n) is not None)
    if begin.any():
        ends = int64s(api_calls["end_ns"])
        inside = np.zeros(len(lost), dtype=bool)
        for p in np.unique(pid[lost]).tolist():
            b, e = np.sort(start[begin & (pid == p)]), np.sort(ends[end & (pid == p)])
            mine = np.flatnonzero(pid[lost] == p)
            at = start[lost[mine]]
            inside[mine] = np.searchsorted(b, at, side="right") > np.searchsorted(e, at, side="right")
        lost = lost[~inside]
    if len(lost) == 0:
        return lost.astype(np.int64)
    # Before the last call with an op (a launch, a copy) of their thread on each of its streams:
    # per thread, the earliest of its streams' last such calls.
    thread = thread_keys(pid, int64s(api_calls["tid"]))
    ran = np.flatnonzero(has_op)
    ran_thread = thread[ran]
    # (each call's stream: that of an op it launched)
    op_stream = int64s(gpu_ops["device_id"], -1) * (1 << 32) + int64s(gpu_ops["stream_id"], -1)
    call_stream = np.zeros(api_calls.num_rows, np.int64)
    call_stream[call[linked]] = op_stream[linked]
    stream_key = call_stream[ran]
    earliest: dict[int, int] = {}
    for t in np.unique(thread[lost]).tolist():
        mine = ran_thread == t
        if not mine.any():
            continue
        keys, at = np.unique(stream_key[mine], return_inverse=True)
        last_on = np.full(len(keys), I64_MIN, np.int64)
        np.maximum.at(last_on, at.reshape(-1), start[ran[mine]])
        earliest[t] = int(last_on.min())
    lost = lost[np.array([start[i] < earliest.get(int(thread[i]), I64_MIN) for i in lost.tolist()], dtype=bool)]
    return lost.astype(np.int64)


# Copies and memsets made on the legacy default stream whatever stream the thread works on.
SYNCHRONOUS_COPY_APIS = SYNCHRONOUS_COPIES | LEGACY_STREAM_WITHOUT_WAIT


def synchronous_copies(ops: pa.Table) -> np.ndarray:
    """Per GPU op linked to its launch call: whether a synchronous copy or memset call made it
    (``SYNCHRONOUS_COPY_APIS``): its stream is the legacy default one, not the thread's."""
    if ops.num_rows == 0 or "launch_api" not in ops.column_names:
        return np.zeros(ops.num_rows, dtype=bool)
    return string_mask(ops["launch_api"], lambda name: base_api_name(name) in SYNCHRONOUS_COPY_APIS)


def read_backs(ops: pa.Table) -> np.ndarray:
    """Per GPU op: whether it is an asynchronous copy to the host (`.item()`, `.tolist()`,
    `.cpu()`), which runs on its thread's current stream (not a synchronous copy: those land on
    the legacy default stream whatever stream is current)."""
    if ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return equals(ops["name"], "memcpy DtoH") & ~synchronous_copies(ops)


def repeated_rows(table: pa.Table, columns: tuple[str, ...]) -> np.ndarray:
    """Rows of ``table`` equal in every one of ``columns`` to an earlier row (a row the export
    holds twice: no two GPU ops run on one stream from the same instant to the same instant
    under one correlation id, nor two calls on one thread). The first column is a start time,
    in nearly sorted order in an export's tables, so the usual answer (none) costs a sort of
    sorted runs and one pass."""
    if table.num_rows < 2:
        return np.zeros(0, dtype=np.int64)
    first = int64s(table[columns[0]], I64_MIN)
    order = None if bool((first[1:] >= first[:-1]).all()) else np.argsort(first, kind="stable")
    s = first if order is None else first[order]
    tied = np.flatnonzero(s[1:] == s[:-1])
    if len(tied) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.unique(np.concatenate([tied, tied + 1]))
    rows = rows if order is None else order[rows]  # the rows that share a start with another
    keys = [int64s(table[c].take(pa.array(rows)), I64_MIN) for c in reversed(columns)]
    by = np.lexsort([rows] + keys)  # each group of equal rows together, in row order
    same = np.ones(len(rows), dtype=bool)
    same[0] = False
    for k in keys:
        same[1:] &= k[by][1:] == k[by][:-1]
    return np.sort(rows[by][same])



# Tolerances of the stream-order rule (``ops_out_of_time``). A later-launched op on a stream
# never starts before an earlier one (programmatic dependent launch lets it start before the
# earlier one ends, never before it starts). The one launched right after it may end first
# (a dependent kernel that does not wait for it), so an op counts as ending out of order only
# where two or more ops launched after it ended first. No op starts before its launch call;
# 10 us spares a drift between the CPU and GPU clocks (none in any sample or public trace).
STREAM_ORDER_START_NS = 1_000
STREAM_ORDER_END_NS = 1_000
BEFORE_LAUNCH_NS = 10_000


def ops_out_of_time(ops: pa.Table) -> np.ndarray:
    """Rows of GPU ops linked to their launch calls (``link_launches``) whose times cannot be:
    an op that starts before its launch call began, or that breaks its stream's order. On one
    stream (of one process and device) an op launched by a call that returned before another
    op's call began is queued first, so it starts no later and ends no later (within
    STREAM_ORDER_*_NS) than that one. Where two ops break that order one of them is corrupt:
    the side with fewer such ops is (one op moved seconds later breaks the order with every op
    launched after it; those all agree with each other). A CUDA graph's nodes count as ops of
    its launch call (one call's ops are never held against each other: a graph's branches run
    at once) on its launch stream, where the graph as a whole waits for the work queued before it
    and the work queued after it waits for the whole graph: a stream where the process also ran
    ops of its own, or where more launches ran all their nodes than some (a graph-only stream; a
    branch's stream holds launches that ran elsewhere too). Nodes on the streams the driver picks
    for a graph's other branches count on the launch stream of their launch (the one launch
    stream among its nodes' streams); the nodes of a launch with none or several are left out
    (its branches on a stream nothing else runs on, whose launch stream the trace does not say),
    as are ops with no launch call."""
    n = ops.num_rows
    if n == 0 or "launch_start_ns" not in ops.column_names:
        return np.zeros(0, dtype=np.int64)
    ls, le = int64s(ops["launch_start_ns"], I64_MIN), int64s(ops["launch_end_ns"], I64_MIN)
    st, en = int64s(ops["start_ns"]), int64s(ops["end_ns"])
    known = ls != I64_MIN
    early = np.flatnonzero(known & (st < ls - BEFORE_LAUNCH_NS))
    node = ops["graph_node_id"].is_valid().to_numpy(zero_copy_only=False)
    codes = None
    sel = known.copy()
    if node.any():
        # (a corrupt node end on a launch stream held every later boundary there: all phases 0 ms)
        codes = _stream_codes(int64s(ops["global_pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))
        codes, on_launch_stream = _graph_nodes_on_launch_streams(int64s(ops["global_pid"]), int64s(ops["correlation_id"], -1), codes,
                                                                 known & ~node, known & node)
        sel &= ~node | on_launch_stream
    sel[early] = False
    every = bool(sel.all())  # the usual export: every op linked, no graph node off its launch stream
    rows = np.arange(n) if every else np.flatnonzero(sel)
    if len(rows) < 2:
        return early
    take = (lambda col: col) if every else (lambda col: col[rows])  # noqa: E731
    if codes is not None:
        group = take(codes)
    else:
        group = _stream_codes(take(int64s(ops["global_pid"])), take(int64s(ops["device_id"], -1)), take(int64s(ops["stream_id"], -1)))
    order = np.lexsort((take(ls), group))
    rows, group = rows[order], group[order]
    st, en = st[rows], en[rows]
    # In launch order, a stream's starts rise and no op ends before the one two before it: then
    # nothing breaks it (the usual case, one pass over sorted columns; the launch times are
    # gathered in that order only where it does not hold).
    same = group[1:] == group[:-1]
    same2 = same[1:] & same[:-1]
    if not ((same & (st[1:] < st[:-1] - STREAM_ORDER_START_NS)).any() or (same2 & (en[2:] < en[:-2] - STREAM_ORDER_END_NS)).any()):
        return early
    bad = []
    ls, le = ls[rows], le[rows]
    bounds = np.flatnonzero(np.r_[True, ~same, True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        bad.append(rows[a:b][_out_of_order(ls[a:b], le[a:b], st[a:b], en[a:b])])
    return np.sort(np.concatenate([early, *bad]))


def _graph_nodes_on_launch_streams(pid: np.ndarray, corr: np.ndarray, codes: np.ndarray, own: np.ndarray,
                                   nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stream codes with each graph node's moved to its launch's launch stream, whether each
    node has one). Launch streams: the codes of the process's own ops (``own``), and those where
    more launches (``nodes``' rows, by process and correlation id) ran all their nodes than ran
    some there and some elsewhere; a launch's launch stream is the one launch stream among its
    nodes' codes."""
    rows = np.flatnonzero(nodes)
    if len(rows) == 0:
        return codes, np.ones(len(codes), bool)
    order = np.lexsort((codes[rows], corr[rows], pid[rows]))  # by launch, then stream code
    rows = rows[order]
    code = codes[rows]
    new_launch = np.r_[True, (pid[rows][1:] != pid[rows][:-1]) | (corr[rows][1:] != corr[rows][:-1])]
    launch = np.cumsum(new_launch) - 1
    n_launches = int(launch[-1]) + 1
    distinct = new_launch | np.r_[True, code[1:] != code[:-1]]  # one row per (launch, stream)
    n_streams = np.bincount(launch[distinct], minlength=n_launches)
    spread = n_streams[launch] > 1
    # Launches that ran all their nodes on a stream, against those that ran some there and some
    # elsewhere: more of the first on a graph's launch stream; on a branch's stream, only a launch
    # the capture cut off (the last on its stream) ran nowhere else.
    pair_code = code[distinct]
    streams, at = np.unique(pair_code, return_inverse=True)
    n_whole = np.bincount(at, weights=~spread[distinct], minlength=len(streams))
    n_spread = np.bincount(at, weights=spread[distinct], minlength=len(streams))
    whole = streams[n_whole > n_spread]
    launch_streams = np.union1d(distinct_few(codes[own]), whole)
    # Per launch: how many of its streams are launch streams, and which.
    is_ls = distinct & np.isin(code, launch_streams)
    count = np.bincount(launch[is_ls], minlength=n_launches)
    which = np.full(n_launches, -1, np.int64)
    which[launch[is_ls]] = code[is_ls]
    one = count[launch] == 1
    out = codes.copy()
    out[rows[one]] = which[launch[one]]
    ok = np.ones(len(codes), bool)
    ok[rows[~one]] = False
    return out, ok


def _stream_codes(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """One int64 per (process, device, stream), equal for equal triples: device and stream ids
    packed below the process's place among the trace's processes (a sort of the pids only where
    there are several), where they fit (devices under 2**10, streams under 2**21: every export
    seen); otherwise dense codes from a sort of the triples."""
    if len(pid) == 0:
        return np.zeros(0, np.int64)
    if dev.min() >= -1 and dev.max() < (1 << 10) - 1 and stream.min() >= -1 and stream.max() < (1 << 21) - 1:
        proc = np.zeros(len(pid), np.int64) if pid.min() == pid.max() else _codes_of_few(pid)
        return (proc << 31) | ((dev + 1) << 21) | (stream + 1)
    return np.unique(np.stack([pid, dev, stream]), axis=1, return_inverse=True)[1].ravel().astype(np.int64)


def _codes_of_few(values: np.ndarray) -> np.ndarray:
    """Dense int64 codes of ``values`` that hold few distinct ones (the processes of a trace),
    looked up among their distinct values (``distinct_few``: no sort of them all)."""
    return np.searchsorted(distinct_few(values), values).astype(np.int64)


def _out_of_order(ls: np.ndarray, le: np.ndarray, st: np.ndarray, en: np.ndarray) -> np.ndarray:
    """Positions (of one stream's ops, sorted by launch start) that break the stream's order:
    the late ones (starting after an op launched after their call returned, or ending after two
    such ops: the first one after it may be a dependent kernel that does not wait for it) or the
    early ones (starting before an op whose call returned before theirs began, or ending before
    two such), whichever are fewer."""
    n = len(ls)
    # late: against the ops launched after this op's call returned (a suffix in launch order);
    # for ends, the suffix past the first of them
    later = np.searchsorted(ls, le, side="right")
    min_st = np.minimum.accumulate(st[::-1])[::-1]
    min_en = np.r_[np.minimum.accumulate(en[::-1])[::-1], np.iinfo(np.int64).max]
    has = later < n
    at = np.minimum(later, n - 1)
    late = has & (st > min_st[at] + STREAM_ORDER_START_NS)
    late |= en - STREAM_ORDER_END_NS > min_en[np.minimum(later + 1, n)]  # (the sentinels stay unshifted: no overflow)
    # early: against the ops whose calls returned before this op's call began (a prefix by call
    # end); for ends, the prefix short of the last of them
    by_end = np.argsort(le, kind="stable")
    le_sorted = le[by_end]
    max_st = np.maximum.accumulate(st[by_end])
    max_en = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(en[by_end])]
    before = np.searchsorted(le_sorted, ls, side="left")
    has = before > 0
    early = has & (st < max_st[np.maximum(before - 1, 0)] - STREAM_ORDER_START_NS)
    early |= en + STREAM_ORDER_END_NS < max_en[np.maximum(before - 1, 0)]
    return np.flatnonzero(late if late.sum() <= early.sum() else early)
