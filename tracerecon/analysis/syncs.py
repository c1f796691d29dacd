"""Blocking CPU waits (synchronize calls, synchronous copies) and whose GPU work they waited for.

A wait that absorbs GPU work launched by *other* phases is how a naive CPU timer over-reports:
``.item()`` in draft_re_extend blocks until verify's kernels are done, and the timer charges
verify's GPU time to draft_re_extend.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.intervals import explode_slices, segmented_union_lengths
from tracerecon.analysis.projection import equals, int64s, match_correlation, string_mask

# Copies the CPU waits for, on the legacy default stream whatever stream the thread works on (not
# cudaMemcpyAsync, which runs on the stream it is given even when it blocks): the runtime's and the
# driver's, to and from the host and arrays (cudaMemcpyPeer and cuMemcpyDtoD, device to device,
# kept from before: not seen to return at once in a trace here, nor seen to wait).
SYNCHRONOUS_COPIES = frozenset({
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cudaMemcpyToArray", "cudaMemcpyFromArray", "cudaMemcpy2DToArray", "cudaMemcpy2DFromArray",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpy2D", "cuMemcpy2DUnaligned", "cuMemcpy3D",
    "cuMemcpyAtoH", "cuMemcpyHtoA", "cuMemcpyDtoA", "cuMemcpyAtoD",
})
# Copies and memsets made on the legacy default stream that need not block the CPU (other copies
# device to device, which CUDA may return from at once; memsets, synchronous with that stream only).
LEGACY_STREAM_WITHOUT_WAIT = frozenset({
    "cudaMemcpy3DPeer", "cudaMemcpyArrayToArray", "cudaMemcpy2DArrayToArray", "cuMemcpyPeer", "cuMemcpy3DPeer", "cuMemcpyAtoA",
    "cudaMemset", "cudaMemset2D", "cudaMemset3D", "cuMemsetD8", "cuMemsetD16", "cuMemsetD32", "cuMemsetD2D8", "cuMemsetD2D16", "cuMemsetD2D32",
})
# API calls that block the calling CPU thread until GPU work completes (version suffix stripped).
BLOCKING_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
    }
) | SYNCHRONOUS_COPIES
# APIs that may get a CUPTI synchronization record but do not block the CPU: stream waits order
# GPU work; queries poll and return at once (a record pointing at one must not turn a poll loop
# of microsecond calls into waits). Decided by the call's name, not the record's syncType: nsys
# 2025.3 writes type 2 ("Stream wait sync") for cudaStreamSynchronize records too (seen in the
# H200 sample traces).
NON_BLOCKING_SYNC_APIS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaEventQuery", "cuEventQuery", "cudaStreamQuery", "cuStreamQuery"})

def base_api_name(name: str) -> str:
    r"""The name without its version and per-thread-stream suffixes (``_v<digits>``, ``_ptds``,
    ``_ptsz``, any number of them): ``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize``,
    ``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``. Peeled from the end, not by a regex
    anchored there (``(_v\d+|_ptds|_ptsz)+$``), whose backtracking is quadratic in the name's
    length (a crafted 15,000-character name: 0.8 s)."""
    end = len(name)
    while True:
        if name.endswith(("_ptds", "_ptsz"), 0, end):
            end -= len("_ptds")
            continue
        digits = end
        while digits > 0 and name[digits - 1].isdecimal():
            digits -= 1
        if digits < end and name.endswith("_v", 0, digits):
            end = digits - len("_v")
            continue
        return name[:end]


# Copies with no host side: their calls never wait for them (``find_blocking_calls``).
DEVICE_SIDE_COPIES = frozenset({"DtoD", "DtoA", "AtoD", "AtoA", "PtoP"})


def find_blocking_calls(api_calls: pa.Table, sync_records: pa.Table, linked_ops: pa.Table | None = None) -> pa.Table:
    """Rows of ``api_calls`` that block the CPU, with api (base name), sync_type, sync_device_id,
    sync_stream_id, sync_event_id, sync_event_sync_id (from the call's CUPTI synchronization
    record) and own_copy_device_id, own_copy_stream_id (a synchronous copy's own stream).

    A call blocks if its name is a known blocking API, or a CUPTI synchronization record points
    at it (same process and correlation id) and it is not a stream-wait-event, or (with
    ``linked_ops`` from projection.link_launches) it is a copy call that returned only after its
    own GPU copy to or from the host finished: ``cudaMemcpyAsync`` into pageable memory is
    synchronous (torch's ``.tolist()`` / ``.item()`` on the H200 traces), whatever its name says
    (not memsets, device-to-device copies or a graph launch's nodes, which end before their call
    returns only by running early; a memset of pinned or managed memory, which blocks, is not
    told apart).
    """
    names = api_calls["name"].combine_chunks() if api_calls.num_rows else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    if api_calls.num_rows == 0:
        idx = np.zeros(0, dtype=np.int64)
    else:
        dict_names = [base_api_name(x) for x in names.dictionary.to_pylist()]
        is_blocking_name = np.array([x in BLOCKING_APIS for x in dict_names] + [False], dtype=bool)
        codes = names.indices.to_numpy(zero_copy_only=False)
        by_name = is_blocking_name[codes]
        by_record = np.zeros(api_calls.num_rows, dtype=bool)
        # Sync type per call as a code into type_names (-1: none): no Python object per call.
        type_names: list[str] = []
        rec_type = np.full(api_calls.num_rows, -1, dtype=np.int64)
        rec_dev = np.full(api_calls.num_rows, -1, dtype=np.int64)
        rec_stream = np.full(api_calls.num_rows, -1, dtype=np.int64)
        rec_event = np.full(api_calls.num_rows, -1, dtype=np.int64)
        rec_event_sync = np.full(api_calls.num_rows, -1, dtype=np.int64)
        copy_dev = np.full(api_calls.num_rows, -1, dtype=np.int64)
        copy_stream = np.full(api_calls.num_rows, -1, dtype=np.int64)
        if sync_records.num_rows:
            # Each record points at its API call by (process, correlation id).
            # For each call, the synchronization record pointing at it (same process and correlation id).
            rec_of_call = match_correlation(int64s(sync_records["pid"]), int64s(sync_records["correlation_id"], -1), int64s(api_calls["pid"]), int64s(api_calls["correlation_id"], -1))
            hit = np.flatnonzero(rec_of_call >= 0)
            r = rec_of_call[hit]
            types = sync_records["sync_type"].cast(pa.string())  # (a table built elsewhere may type an all-null column null)
            type_names = sorted(t for t in pc.unique(types).to_pylist() if t is not None)
            type_codes = pc.fill_null(pc.index_in(types, value_set=pa.array(type_names, pa.string())), -1)
            rec_type[hit] = type_codes.to_numpy().astype(np.int64)[r]
            rec_dev[hit] = int64s(sync_records["device_id"])[r]
            rec_stream[hit] = int64s(sync_records["stream_id"])[r]
            rec_event[hit] = int64s(sync_records["event_id"], -1)[r]
            rec_event_sync[hit] = int64s(sync_records["event_sync_id"], -1)[r]
            non_blocking = np.array([x in NON_BLOCKING_SYNC_APIS for x in dict_names] + [True], dtype=bool)
            by_record[hit] = ~non_blocking[codes[hit]]
        by_copy = np.zeros(api_calls.num_rows, dtype=bool)
        if linked_ops is not None and linked_ops.num_rows:
            # Only a copy to or from the host (pageable memory) can hold its call: a memset (of
            # device memory: one of pinned or managed memory, which blocks, is not told apart, the
            # export's memory kinds not being read), a device-to-device copy, or a graph's memset
            # or copy node (its launch call 127-196 us on a real H200 trace, the node ended 68 us
            # into it) that ended before its call returned ran early on an idle GPU.
            copy_kind = linked_ops["copy_kind"] if "copy_kind" in linked_ops.column_names else pa.nulls(linked_ops.num_rows, pa.string())
            waited_own = (equals(linked_ops["kind"], "memcpy") & ~string_mask(copy_kind, lambda k: k in DEVICE_SIDE_COPIES)
                          & (int64s(linked_ops["launch_end_ns"], -1) >= int64s(linked_ops["end_ns"])))
            sel = np.flatnonzero(waited_own)
            if len(sel):
                own = match_correlation(int64s(linked_ops["pid"])[sel], int64s(linked_ops["correlation_id"], -1)[sel], int64s(api_calls["pid"]), int64s(api_calls["correlation_id"], -1))
                is_copy_call = np.array(["Memcpy" in x for x in dict_names] + [False], dtype=bool)
                by_copy = (own >= 0) & is_copy_call[codes]
                copy_dev[by_copy] = int64s(linked_ops["device_id"], -1)[sel][own[by_copy]]
                copy_stream[by_copy] = int64s(linked_ops["stream_id"], -1)[sel][own[by_copy]]
                rec_type[by_copy & (rec_type < 0)] = len(type_names)
                type_names = type_names + ["synchronous copy"]
        idx = np.flatnonzero(by_name | by_record | by_copy)
        out = api_calls.take(pa.array(idx))
        api = pa.array([dict_names[c] for c in codes[idx]], pa.string())
        return (
            out.append_column("api", api)
            .append_column("sync_type", pa.array(type_names or [""], pa.string()).take(pa.array(np.maximum(rec_type[idx], 0), mask=rec_type[idx] < 0)))
            .append_column("sync_device_id", pa.array(rec_dev[idx], mask=rec_dev[idx] < 0))
            .append_column("sync_stream_id", pa.array(rec_stream[idx], mask=rec_stream[idx] < 0))
            .append_column("sync_event_id", pa.array(rec_event[idx], mask=rec_event[idx] < 0))
            .append_column("sync_event_sync_id", pa.array(rec_event_sync[idx], mask=rec_event_sync[idx] < 0))
            .append_column("own_copy_device_id", pa.array(copy_dev[idx], mask=copy_dev[idx] < 0))
            .append_column("own_copy_stream_id", pa.array(copy_stream[idx], mask=copy_stream[idx] < 0))
        )
    out = api_calls.take(pa.array(idx)).append_column("api", pa.array([], pa.string())).append_column("sync_type", pa.array([], pa.string()))
    for name in ("sync_device_id", "sync_stream_id", "sync_event_id", "sync_event_sync_id", "own_copy_device_id", "own_copy_stream_id"):
        out = out.append_column(name, pa.array([], pa.int64()))
    return out


def attribute_waits(blocking: pa.Table, ops: pa.Table, op_phase: np.ndarray, call_phase: np.ndarray,
                    awaited: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                    in_phase: tuple[np.ndarray, np.ndarray, int] | None = None) -> dict[str, np.ndarray]:
    """For each blocking call: the GPU work of its process that finished while it waited, of
    the work it waited for where ``awaited`` (ops, calls) says per pair whether the call waited
    for the op (``rank._awaited``); other streams' work that merely ended meanwhile does not count.

    ``op_phase[i]`` is the phase instance that launched op i (-1: none); ``call_phase[j]`` the
    phase instance holding blocking call j. Returns numpy arrays: waited_gpu_ns (union of the
    awaited ops' time inside the wait), waited_other_phase_ns (the same for ops launched by
    other phase instances), waited_for_phase_id (the other phase instance whose work filled most
    of the wait; else the phase of the op that finished last; -1: none).

    ``in_phase``: per call, the part of the wait its phase's timer ran through (start, end: the
    call clipped to its phase's CPU span; end <= start: none of it, as for a worker thread's
    wait charged to a scheduler's phase that had ended by then), and how many phases there are.
    With it, also per phase: blocked_by_phase (the union of those parts of its calls: two
    threads' waits at once count once) and absorbed_by_phase (the union of the awaited ops of
    other phases inside them: what the phase's CPU timer can have absorbed).
    """
    n = blocking.num_rows
    waited = np.zeros(n, dtype=np.int64)
    other = np.zeros(n, dtype=np.int64)
    last_phase = np.full(n, -1, dtype=np.int64)
    by_phase = {}
    if in_phase is not None:
        part_s, part_e, n_phases = np.asarray(in_phase[0], np.int64), np.asarray(in_phase[1], np.int64), in_phase[2]
        cp = np.asarray(call_phase, np.int64)
        mine = np.flatnonzero(cp >= 0)
        (by_phase["blocked_by_phase"],) = segmented_union_lengths(part_s[mine], part_e[mine], cp[mine], n_phases, (None,))
        by_phase["absorbed_by_phase"] = np.zeros(n_phases, dtype=np.int64)
    if n == 0 or ops.num_rows == 0:
        return {"waited_gpu_ns": waited, "waited_other_phase_ns": other, "waited_for_phase_id": last_phase, **by_phase}
    o_pid = int64s(ops["pid"])
    o_end = int64s(ops["end_ns"])
    o_start = int64s(ops["start_ns"])
    order = np.lexsort((o_end, o_pid))
    sp, se = o_pid[order], o_end[order]
    b_pid = int64s(blocking["pid"])
    b_s = int64s(blocking["start_ns"])
    b_e = int64s(blocking["end_ns"])
    # Ops of the same process whose end falls inside the wait: (start, end].
    lo = np.zeros(n, dtype=np.int64)
    hi = np.zeros(n, dtype=np.int64)
    for p in np.unique(b_pid):
        a, b = np.searchsorted(sp, p, "left"), np.searchsorted(sp, p, "right")
        sel = b_pid == p
        lo[sel] = a + np.searchsorted(se[a:b], b_s[sel], "right")
        hi[sel] = a + np.searchsorted(se[a:b], b_e[sel], "right")
    pos, which = explode_slices(lo, hi)
    rows = order[pos]
    if awaited is not None and len(rows):
        waited_for = awaited(rows, which)
        rows, which = rows[waited_for], which[waited_for]
    clipped_start = np.maximum(o_start[rows], b_s[which])
    is_other = (op_phase[rows] != call_phase[which]) & (op_phase[rows] >= 0)
    waited, other = segmented_union_lengths(clipped_start, o_end[rows], which, n, (None, is_other))
    if in_phase is not None:
        o = np.flatnonzero(is_other & (cp[which] >= 0))
        (by_phase["absorbed_by_phase"],) = segmented_union_lengths(np.maximum(o_start[rows[o]], part_s[which[o]]), np.minimum(o_end[rows[o]], part_e[which[o]]),
                                                                   cp[which[o]], n_phases, (None,))
    if len(which):  # the phase of the last awaited op to end in each wait
        last = len(which) - 1 - np.unique(which[::-1], return_index=True)[1]
        last_phase[which[last]] = op_phase[rows[last]]
    # Name the other phase whose GPU work filled most of the wait (not merely the last op,
    # which is often the waiting phase's own copy).
    if is_other.any():
        w, ph = which[is_other], op_phase[rows][is_other]
        dur = np.clip(o_end[rows][is_other] - clipped_start[is_other], 0, None)
        key_phase = np.unique(ph)
        dense = np.searchsorted(key_phase, ph)
        packed = w * len(key_phase) + dense
        keys, inv = np.unique(packed, return_inverse=True)
        total = np.bincount(inv.ravel(), weights=dur)
        kw, kp = keys // len(key_phase), keys % len(key_phase)
        pick = np.lexsort((-total, kw))  # per call, the largest total first
        first = np.r_[True, kw[pick][1:] != kw[pick][:-1]]
        chosen = pick[first]
        good = total[chosen] > 0
        last_phase[kw[chosen][good]] = key_phase[kp[chosen][good]]
    return {"waited_gpu_ns": waited, "waited_other_phase_ns": other, "waited_for_phase_id": last_phase, **by_phase}
