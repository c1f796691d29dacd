"""What each blocking CPU call (a stream, event or device synchronize, a synchronous copy)
waits for on the GPU: the stream and the launch instant up to which its work is waited for
(``wait_targets``), and when that work was done (``awaited_work``), read on the stream clock."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.projection import I64_MIN, int64s
from tracerecon.analysis.stream_clock import StreamClock, on_working_device
from tracerecon.analysis.stream_keys import device_of_keys, gpu_keys, stream_of_keys, unpack_keys


# Blocking calls by what they wait for (base API names).
STREAM_SYNC_APIS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize"})
EVENT_SYNC_APIS = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
DEVICE_SYNC_APIS = frozenset({"cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize"})
MAX_BOUND_CELLS = 2_000_000  # calls x streams (16 MB) held at once; more calls are bounded in turns


@dataclass(frozen=True)
class WaitTargets:
    """What each blocking call (``syncs.find_blocking_calls``) waits on, one entry per call.

    ``row``, ``until``: the stream (a row of the stream clock; -1 where not known, or the call
    waits for a whole device) and the launch instant up to which its work is waited for. A
    stream synchronize waits for its stream's work launched before the call began, an event
    synchronize for the work before the event's record (its record found by the rule a stream
    wait's is: ``EventRecords``), a synchronous copy for its own stream's work up to the copy.
    ``whole_device``: a device synchronize, which waits for every stream of ``device``.
    ``device``, ``stream``: the ids of what is waited on (-1: not known; a device synchronize
    has no stream). A synchronization record naming a device on which the process ran no work
    (nsys 2026.2 writes device 0 in every one) is taken for the device that ran the process's
    stream of that id, or, naming no stream, for the one device the process ran work on."""

    row: np.ndarray
    until: np.ndarray
    whole_device: np.ndarray
    device: np.ndarray
    stream: np.ndarray

    def calls(self, lo: int, hi: int) -> "WaitTargets":
        """The targets of calls ``lo`` to ``hi`` (excluded)."""
        return WaitTargets(self.row[lo:hi], self.until[lo:hi], self.whole_device[lo:hi], self.device[lo:hi], self.stream[lo:hi])


def wait_targets(clock: StreamClock, blocking: pa.Table) -> WaitTargets:
    """Per blocking call, what it waits on (``WaitTargets``)."""
    n = blocking.num_rows

    def calls_to(apis: frozenset) -> np.ndarray:
        if n == 0:
            return np.zeros(0, dtype=bool)
        return pc.is_in(blocking["api"], value_set=pa.array(sorted(apis), pa.string())).to_numpy(zero_copy_only=False)

    pid = int64s(blocking["pid"])
    start = int64s(blocking["start_ns"])
    end = int64s(blocking["end_ns"])
    strm = int64s(blocking["sync_stream_id"], -1).copy()  # filled in below where the call names no stream
    has_ops = np.array([len(t) > 0 for t in clock.op_launch], dtype=bool)
    work_keys = clock.keys[has_ops] if len(has_ops) else clock.keys
    dev = _working_device(work_keys, pid, int64s(blocking["sync_device_id"], -1), strm)
    row = np.full(n, -1, dtype=np.int64)
    until = np.full(n, I64_MIN, dtype=np.int64)
    is_stream = calls_to(STREAM_SYNC_APIS) & (strm >= 0)
    row[is_stream] = clock.stream_index(pid[is_stream], dev[is_stream], strm[is_stream])
    until[is_stream] = start[is_stream]
    copy_strm = int64s(blocking["own_copy_stream_id"], -1)
    is_copy = ~is_stream & (copy_strm >= 0)
    dev[is_copy], strm[is_copy] = int64s(blocking["own_copy_device_id"], -1)[is_copy], copy_strm[is_copy]
    row[is_copy] = clock.stream_index(pid[is_copy], dev[is_copy], strm[is_copy])
    until[is_copy] = end[is_copy]
    is_event = calls_to(EVENT_SYNC_APIS)
    if is_event.any() and clock.records is not None:
        ask = np.flatnonzero(is_event)
        named_row, named_cpu = clock.records.named_by(pid[ask], int64s(blocking["sync_event_id"], -1)[ask], int64s(blocking["sync_event_sync_id"], -1)[ask], start[ask])
        hit = ask[named_row >= 0]
        row[hit], until[hit] = named_row[named_row >= 0], named_cpu[named_row >= 0]
        dev[hit], strm[hit] = device_of_keys(clock.keys, row[hit]), stream_of_keys(clock.keys, row[hit])
    whole_device = calls_to(DEVICE_SYNC_APIS)
    strm[whole_device] = -1
    return WaitTargets(row=row, until=until, whole_device=whole_device, device=dev, stream=strm)


def _working_device(work_keys: np.ndarray, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """``on_working_device`` for the records that name a stream; for those that name none, the
    one device the process ran work on where the device named ran none of it."""
    dev = on_working_device(work_keys, pid, dev, stream)
    no_stream = np.flatnonzero(np.asarray(stream) < 0)
    if len(no_stream) == 0 or len(work_keys) == 0:
        return dev
    pairs = np.unique(gpu_keys(work_keys))  # (pid, device) with work: pid << 8 | device
    p_pid, n_dev = np.unique(pairs >> 8, return_counts=True)
    only = pairs[np.searchsorted(pairs >> 8, p_pid)] & 0xFF  # each process's first (with n_dev 1: only) device
    k = np.minimum(np.searchsorted(p_pid, np.asarray(pid, np.int64)[no_stream]), len(p_pid) - 1)
    one = (p_pid[k] == np.asarray(pid, np.int64)[no_stream]) & (n_dev[k] == 1)
    dev[no_stream[one]] = only[k[one]]
    return dev


def wait_steps(clock: StreamClock) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """The event waits of ``clock`` by (waiting stream row, recording stream row): each pair's
    waits' CPU instants and the latest record behind each (a running maximum), for
    ``awaited_work`` to follow back."""
    into, from_, w_cpu, rec_cpu = clock.join_into, clock.join_from, clock.join_cpu, clock.join_record_cpu
    steps = []
    for s_row, r_row in sorted(set(zip(into.tolist(), from_.tolist()))):
        if s_row != r_row:
            sel = (into == s_row) & (from_ == r_row)
            steps.append((s_row, r_row, w_cpu[sel], np.maximum.accumulate(rec_cpu[sel])))
    return steps


def awaited_work(clock: StreamClock, blocking: pa.Table, targets: WaitTargets,
                 steps: list[tuple[int, int, np.ndarray, np.ndarray]] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """What each blocking call (``syncs.find_blocking_calls``) waits for, given what it waits
    on (``wait_targets``): (known, bounds): per call, whether that is known, and per call and
    stream row of ``clock`` the latest launch instant of the work on that stream the call waits
    for (int64 min: none of it). Where it is not known, all work counts (as a context-wide wait
    would). Each call waits also for what its streams were made to wait for (event waits,
    followed back through their records, each bounding its record's stream at the record's
    time). Returns None when the trace has no blocking call or no stream. Holds calls x streams
    int64s: ``calls_in_turns`` cuts the calls so that no turn holds more than MAX_BOUND_CELLS.
    ``steps``: ``wait_steps(clock)``, where already worked out (each turn's are the same)."""
    n_calls, n_rows = blocking.num_rows, len(clock.keys)
    if n_calls == 0 or n_rows == 0:
        return None
    pid = int64s(blocking["pid"])
    start = int64s(blocking["start_ns"])
    bounds = np.full((n_calls, n_rows), I64_MIN, dtype=np.int64)
    known = targets.row >= 0
    bounds[np.flatnonzero(known), targets.row[known]] = targets.until[known]
    if targets.whole_device.any():
        key_pid, key_dev, _ = unpack_keys(clock.keys)
        dev = targets.device
        for i in np.flatnonzero(targets.whole_device).tolist():
            on = (key_pid == pid[i]) & ((dev[i] < 0) | (key_dev == dev[i]))
            if on.any():
                bounds[i] = np.where(on, start[i], I64_MIN)
                known[i] = True
    # Follow the event waits back: stream s bounded at B waits for stream r's work up to the
    # latest record behind a wait of s made by B. For all calls at once, until nothing moves (a
    # chain of waits is at most as long as there are streams).
    if len(clock.join_cpu) and known.any():
        steps = wait_steps(clock) if steps is None else steps
        calls = np.flatnonzero(known)
        b = bounds[calls]
        for _ in range(n_rows):
            moved = False
            for s_row, r_row, cpus, recs in steps:
                k = np.searchsorted(cpus, b[:, s_row], side="right")
                reach = np.where(k > 0, recs[np.maximum(k - 1, 0)], I64_MIN)
                up = reach > b[:, r_row]
                if up.any():
                    b[up, r_row] = reach[up]
                    moved = True
            if not moved:
                break
        bounds[calls] = b
    return known, bounds


def calls_in_turns(n_calls: int, n_streams: int) -> range:
    """The first call of each turn of ``awaited_work`` (each turn ``MAX_BOUND_CELLS // n_streams``
    calls, at least one): a long capture's every blocking call is bounded, a turn at a time."""
    return range(0, n_calls, max(1, MAX_BOUND_CELLS // max(n_streams, 1)))
