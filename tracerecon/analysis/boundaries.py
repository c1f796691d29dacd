"""Stream-order phase boundaries: what a CUDA event recorded at each phase boundary would read.

A phase boundary is a CPU instant ``t``. An event recorded there on stream S completes at

    done(S, t) = max(t, end of every GPU op launched on S before t (by any thread of the
                 process), end of the work S was made to wait for before t)

where "made to wait for" follows ``cudaStreamWaitEvent`` back to the ``cudaEventRecord`` it
names (stream R at CPU time t_r): that contributes ``done(R, t_r)``, recursively. Work on one
stream runs in launch order, so the running maximum of op ends in launch order is exact.
NCCL's streams and graph launches need nothing special: their kernels are ops on their
streams, and the compute stream waits for them through the same event records.

Which stream: a phase whose thread said which stream was current as it began is read there
(``declared_streams``: ``tracerecon.instrument`` records an event there and marks it) unless all
its stream-deciding GPU work came from other threads. Otherwise a phase's stream is the one that received most of its kernel time (the sum of
its ops' durations; a graph's branch nodes count on the graph's launch stream, ``graph_branches``;
copies decide only in a phase that ran no kernel, and not on a stream that only copies where
the phase's thread launches kernels: there the stream those copies feed, else the one the
phase's thread forked them off (else any thread's fork: ``StreamClock.partner``), else the
thread's own, ``CopyStreams``; ties go to more ops, then the lower stream id), unless the phase forked that
stream off another one and joined it back, within the phase or in a later phase of its cycle
read on the caller's stream (``caller_streams``: a side stream, NCCL's stream under
ProcessGroupNCCL): then the caller's stream, where the engine's own events would be recorded. A phase that launched nothing
keeps the stream of the phase before it on its thread among the phases in sequence (else the
one after it there); where its thread launched nothing in sequence, of its thread's phases
outside the cycle ranges (a warm-up); where its thread launched nothing at all, of the phase
before it in the same process (else the first one after). The
boundary between two consecutive phases is evaluated on both their streams (the earlier
phase ends when its stream's work is done, the next begins when its stream is free), also
where one cycle ends and the next begins, and boundaries never run backwards: each is at
least the one before it in the same process. Only phases read on one GPU share boundaries:
where one thread drives two GPUs, each phase's boundaries are read on its own GPU's stream and
never run backwards along that GPU's phases (its events are recorded there, ordered after
nothing on the other GPU). The instant of a boundary is the later phase's
CPU start, or the earlier one's CPU end where the later phase runs on another thread (a
hand-off: see ``_read_boundaries``). GPU work queued between two phases of a cycle on either's
stream is in neither (the earlier one ends at its own CPU end, the later one begins on its own
stream alone, and the two share no boundary: the later one may then begin on the GPU before
its cycle's first phase, its own stream free). So phases tile their cycle but
for such work, cycles never overlap on the GPU, and a cycle starts where the GPU finished the
one before it, on one GPU (across two, phases and cycles may overlap). On one stream with nothing queued at a cycle's start this is the old rule:
``b_i = max(cpu_start_i, gpu_end of the work launched before)``.

Not modelled (documented in the README): the legacy default stream's implicit
synchronisation with other blocking streams, and the ~0.1 ms an event recorded on an idle GPU
takes to be submitted.
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.columns import computes, graph_node_launches, is_graph_launch, read_backs, runs_model, synchronous_copies, thread_keys
from tracerecon.analysis.intervals import distinct_few, explode_slices, inside_another_thread, isin_few
from tracerecon.analysis.projection import I64_MAX, I64_MIN, equals, int64s, match_correlation, string_mask


@dataclass(frozen=True)
class StreamClock:
    """For every stream of a rank: when the work queued on it before a CPU instant is done."""

    keys: np.ndarray  # per stream: (pid, device_id, stream_id) packed by ``_pack``, sorted
    op_launch: tuple  # per stream: launch times of its ops, sorted
    op_done: tuple  # per stream: running max of those ops' end times
    wait_time: tuple  # per stream: CPU times of its event waits, sorted
    wait_done: tuple  # per stream: running max of what those waits depend on
    wait_dep: tuple  # per stream: what each of those waits depends on (its record's work done)
    wait_from: tuple  # per stream: the stream (row of ``keys``) each of those waits' record was made on
    # Every event wait that found its record, in CPU order of the waits: when it was made, the
    # stream (row of ``keys``) that waited, and the stream the record was made on.
    join_cpu: np.ndarray
    join_into: np.ndarray
    join_from: np.ndarray
    # ... and when its record was made (the record call's return).
    join_record_cpu: np.ndarray
    # ... and the thread that made the wait (``thread_keys``; -1 where its call is not in the trace).
    join_thread: np.ndarray
    # ``launch_instants`` of every row of the ops the clock was built from (worked out once).
    op_instants: np.ndarray
    # Streams (rows of ``keys``) with an event wait whose record is not in the trace, though not
    # one made before the capture (``_unresolved_into``): what they waited for is unknown.
    unresolved_into: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Every event record that found its call (``EventRecords``), for the blocking waits on an event.
    records: EventRecords | None = None
    # The graph nodes that count on their launch's stream too (``graph_branches``): op rows, and
    # each one's launch stream row.
    branch_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    branch_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Work queued before the capture began (``queued_before_capture``), counted in op_launch /
    # op_done as launched before every instant of the trace.
    before_capture: BeforeCapture | None = None
    # Every event record that found its call: the call's thread (``thread_keys``) and start,
    # and the stream row recorded on (``declared_streams``).
    record_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    record_call_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    record_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Per stream, beside ``op_launch``: the thread (``thread_keys``) whose call put each op
    # there, -1 where the trace does not tell (a call not in it, work before the capture).
    op_thread: tuple = ()

    def stream_index(self, pid: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Row of ``keys`` for each (pid, device, stream); -1 where the stream has no work."""
        out = np.full(len(pid), -1, dtype=np.int64)
        if len(self.keys) == 0 or len(pid) == 0:
            return out
        want = _pack(pid, device, stream)
        pos = np.minimum(np.searchsorted(self.keys, want), len(self.keys) - 1)
        hit = (self.keys[pos] == want) & (np.asarray(stream) >= 0)
        out[hit] = pos[hit]
        return out

    def on_launch_streams(self, ops: pa.Table) -> pa.Table:
        """``ops`` (the table this clock was built from) with each graph branch node's device
        and stream replaced by its launch's (``graph_branches``): a graph launch is one
        operation on its launch stream, where the engine's events wait for all of it, so its
        branches' kernel time counts there when a phase's stream is chosen."""
        if len(self.branch_ops) == 0:
            return ops
        dev, stream = int64s(ops["device_id"], -1).copy(), int64s(ops["stream_id"], -1).copy()
        dev[self.branch_ops] = _unpack_device(self.keys, self.branch_rows)
        stream[self.branch_ops] = _unpack_stream(self.keys, self.branch_rows)
        for name, values in (("device_id", dev), ("stream_id", stream)):
            i = ops.column_names.index(name)
            ops = ops.set_column(i, ops.schema.field(i), pa.array(values, mask=~ops[name].is_valid().to_numpy(zero_copy_only=False)).cast(ops.schema.field(i).type))
        return ops

    def partner(self, row: np.ndarray, after: np.ndarray, until: np.ndarray | None = None,
                thread: np.ndarray | None = None, skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per stream row (-1: none) and CPU instant: (device, stream) of the stream that first
        waited, at or after ``after``, for an event recorded on it (its results' consumer: the
        forward stream an input stream feeds), else of the stream it was forked off (the stream
        that waited for it, here ``join_into`` the row): with ``until`` and ``thread`` (per
        asking phase: its end and its thread, ``thread_keys``), the first fork the phase's own
        thread made in ``[after, until)``, else that thread's last one before ``after`` (a
        thread forks the copy stream off its own current stream, and another thread, a KV
        offload helper, may fork the same copy stream off its own stream at any time); where
        that thread made none by the phase's end, any thread's last fork before ``after``, else the
        first after it; -1 where none. A wait whose call is not in the trace (thread -1) counts
        as the asking thread's own. ``skip`` (per stream row): streams never taken (NCCL's own)."""
        row, after = np.asarray(row, np.int64), np.asarray(after, np.int64)
        by_thread = until is not None and thread is not None
        if by_thread:
            until, thread = np.asarray(until, np.int64), np.asarray(thread, np.int64)
        out = np.full(len(row), -1, dtype=np.int64)
        # (joins from or into a skipped stream are not looked at; -1: an unknown stream)
        into_ok = np.ones(len(self.join_into), bool) if skip is None else ~skip[np.maximum(self.join_into, 0)] | (self.join_into < 0)
        from_ok = np.ones(len(self.join_from), bool) if skip is None else ~skip[np.maximum(self.join_from, 0)] | (self.join_from < 0)
        for r in np.unique(row[row >= 0]).tolist():
            asked = np.flatnonzero(row == r)
            fed = np.flatnonzero((self.join_from == r) & (self.join_into != r) & into_ok)  # waits are in CPU order
            at = np.searchsorted(self.join_cpu[fed], after[asked], side="left")
            has = at < len(fed)
            out[asked[has]] = self.join_into[fed[at[has]]]
            off = np.flatnonzero((self.join_into == r) & (self.join_from != r) & from_ok)
            if len(off) == 0:
                continue
            if by_thread:
                open_ = asked[~has]
                for th in np.unique(thread[open_]).tolist():
                    mine_ask = open_[thread[open_] == th]
                    mine = off[(self.join_thread[off] == th) | (self.join_thread[off] < 0)]  # (a wait whose call is lost may be its own)
                    if len(mine) == 0:
                        continue
                    at_or_after = np.searchsorted(self.join_cpu[mine], after[mine_ask], side="left")
                    inside = at_or_after < len(mine)
                    inside[inside] = self.join_cpu[mine[at_or_after[inside]]] < until[mine_ask[inside]]
                    pick = np.where(inside, at_or_after, at_or_after - 1)
                    use = pick >= 0
                    out[mine_ask[use]] = self.join_from[mine[pick[use]]]
                has = out[asked] >= 0
            before = np.searchsorted(self.join_cpu[off], after[asked], side="left") - 1
            use = ~has & (before >= 0)
            out[asked[use]] = self.join_from[off[before[use]]]
            first = ~has & (before < 0)
            out[asked[first]] = self.join_from[off[0]]
        found = out >= 0
        return (np.where(found, _unpack_device(self.keys, np.maximum(out, 0)), -1) if len(self.keys) else out,
                np.where(found, _unpack_stream(self.keys, np.maximum(out, 0)), -1) if len(self.keys) else out)

    def queued_between(self, stream: np.ndarray, lo: np.ndarray, hi: np.ndarray, read_by: np.ndarray | None = None) -> np.ndarray:
        """For each (stream row, CPU instants ``lo`` < ``hi``): whether an op was put on the
        stream after ``lo`` and by ``hi`` (``done``'s "before"), or the stream was made to wait then for another's
        work still running after ``lo`` (an event wait for work done by then holds nothing up).
        With ``read_by`` (per pair: what an event at ``lo`` on the earlier phase's stream reads),
        nor does a wait for work that was all queued on its record's stream by ``lo`` and is done
        by ``read_by``: it queues nothing new (a stream forked off the loop's stream for the next
        phase, waiting for what the loop's stream queued a cycle ago), where a wait for a copy
        queued on another stream after ``lo`` is work between them, done early or late.
        ``stream`` -1 gives False."""
        stream = np.asarray(stream, dtype=np.int64)
        out = np.zeros(len(stream), dtype=bool)
        for s in np.unique(stream[stream >= 0]).tolist():
            sel = np.flatnonzero((stream == s) & (np.asarray(lo) < np.asarray(hi)))
            launch = self.op_launch[s]
            out[sel] = np.searchsorted(launch, hi[sel], side="right") > np.searchsorted(launch, lo[sel], side="right")
            waits, dep = self.wait_time[s], self.wait_dep[s]
            if len(waits):
                a, b = np.searchsorted(waits, lo[sel], side="right"), np.searchsorted(waits, hi[sel], side="right")
                for j in np.flatnonzero((b > a) & ~out[sel]).tolist():
                    k, t = sel[j], int(lo[sel[j]])
                    held = dep[a[j]:b[j]] > t
                    if read_by is not None and held.any():
                        src = self.wait_from[s][a[j]:b[j]]
                        queued_by_lo = self.done(src, np.full(len(src), t, np.int64))
                        held &= (dep[a[j]:b[j]] > read_by[k]) | (dep[a[j]:b[j]] > queued_by_lo)
                    out[k] = bool(held.any())
        return out

    def launched_by(self, stream: np.ndarray, lo: np.ndarray, hi: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """For each (stream row, CPU instants ``lo`` < ``hi``, thread key): whether that thread
        put an op on the stream after ``lo`` and by ``hi`` (``queued_between``'s window; event
        waits, and other threads' launches, do not count). An op whose launching thread is not
        known counts as any thread's, as every op does where the clock keeps no threads or the
        asking thread is -1 (not known). ``stream`` -1 gives False."""
        stream = np.asarray(stream, dtype=np.int64)
        lo, hi, thread = np.asarray(lo, np.int64), np.asarray(hi, np.int64), np.asarray(thread, np.int64)
        out = np.zeros(len(stream), dtype=bool)
        for s in np.unique(stream[stream >= 0]).tolist():
            sel = np.flatnonzero((stream == s) & (lo < hi))
            launch = self.op_launch[s]
            a, b = np.searchsorted(launch, lo[sel], side="right"), np.searchsorted(launch, hi[sel], side="right")
            some = b > a
            if not len(self.op_thread):
                out[sel] = some
                continue
            for j in np.flatnonzero(some).tolist():  # (at most one per cycle: its last phase, begun apart)
                who = self.op_thread[s][a[j]:b[j]]
                out[sel[j]] = thread[sel[j]] == -1 or bool(((who == thread[sel[j]]) | (who == -1)).any())
        return out

    def queued_since(self, stream: int, until: np.ndarray) -> np.ndarray:
        """Per GPU instant of ``until``: the CPU instant the work on stream row ``stream`` that
        keeps it busy until then or later was queued (the first op or event wait whose
        completion, with all before it, reaches it); int64 max where none does."""
        until = np.asarray(until, dtype=np.int64)
        out = np.full(len(until), I64_MAX, dtype=np.int64)
        for times, running in ((self.op_launch[stream], self.op_done[stream]), (self.wait_time[stream], self.wait_done[stream])):
            if len(times):
                at = np.searchsorted(running, until, side="left")  # (running maxima: sorted)
                ok = at < len(times)
                out[ok] = np.minimum(out[ok], times[at[ok]])
        return out

    def done(self, stream: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each (stream row, CPU instant): completion of the work queued before it, or at
        that very nanosecond (a launch call that returned as a range closed was made inside
        it); int64 min when nothing was. ``stream`` -1 gives int64 min."""
        stream = np.asarray(stream, dtype=np.int64)
        t = np.asarray(t, dtype=np.int64)
        out = np.full(len(t), I64_MIN, dtype=np.int64)
        for s in np.unique(stream[stream >= 0]):
            sel = np.flatnonzero(stream == s)
            out[sel] = np.maximum(_before(self.op_launch[s], self.op_done[s], t[sel]), _before(self.wait_time[s], self.wait_done[s], t[sel]))
        return out


def _before(times: np.ndarray, running: np.ndarray, t: np.ndarray) -> np.ndarray:
    """running[last index with times <= t], int64 min when none."""
    if len(times) == 0:
        return np.full(len(t), I64_MIN, dtype=np.int64)
    pos = np.searchsorted(times, t, side="right") - 1
    return np.where(pos >= 0, running[np.maximum(pos, 0)], I64_MIN)


def launch_instants(ops: pa.Table) -> np.ndarray:
    """When each op was put on its stream, as far as the trace tells: no later than the end of
    the API call that launched it, nor than its own start on the GPU (a kernel often starts
    before its launch call returns). An op whose launching call is not in the trace (a dropped
    record, a capture begun mid-launch) was put there before its start, so its start stands in.
    (The call's start is no bound: a launch call held up 100 ms on a lock queues its op at its
    end, and taking its start made every boundary after it wait for that op.)"""
    start = int64s(ops["start_ns"])
    end = int64s(ops["launch_end_ns"], I64_MAX)
    instant = np.minimum(end, start)
    # A node-mode graph launch is one operation on its stream: all its nodes were put there
    # together, by the time the first of them started (a launch call still returning after its
    # first node ran had queued the whole graph, later nodes included).
    nodes, launch_id = graph_node_launches(ops)
    if len(nodes):
        ids, group = np.unique(launch_id, return_inverse=True)
        first = np.full(len(ids), I64_MAX, dtype=np.int64)
        np.minimum.at(first, group.ravel(), instant[nodes])
        instant[nodes] = first[group.ravel()]
    return instant


def stream_clock(ops: pa.Table, api_calls: pa.Table, event_records: pa.Table, sync_records: pa.Table) -> StreamClock:
    """Build the clock of one rank from its linked GPU ops (``projection.link_launches``), its
    API calls, ``cudaEventRecord`` records and ``cudaStreamWaitEvent`` sync records."""
    o_pid = int64s(ops["pid"]) if ops.num_rows else np.zeros(0, np.int64)
    o_dev = int64s(ops["device_id"], -1) if ops.num_rows else np.zeros(0, np.int64)
    o_str = int64s(ops["stream_id"], -1) if ops.num_rows else np.zeros(0, np.int64)
    o_launch = o_launch_raw = launch_instants(ops) if ops.num_rows else np.zeros(0, np.int64)
    o_end = int64s(ops["end_ns"]) if ops.num_rows else np.zeros(0, np.int64)
    placed = o_launch != I64_MIN

    # Event records: stream + CPU time of the cudaEventRecord call.
    rec = _event_record_times(event_records, api_calls)
    # Stream waits on a recorded event.
    w = _stream_waits(sync_records, api_calls)
    w_dev_written = w["dev"]

    op_key = _pack(o_pid[placed], o_dev[placed], o_str[placed])
    work_keys = distinct_few(op_key)
    # Work queued before the capture began (``queued_before_capture``) is done, for every
    # boundary the trace holds, when it is: a stand-in "op" launched before them all.
    rec["dev"] = on_working_device(work_keys, rec["pid"], rec["dev"], rec["stream"])
    w["dev"] = on_working_device(work_keys, w["pid"], w["dev"], w["stream"])
    rec_key, wait_key = _pack(rec["pid"], rec["dev"], rec["stream"]), _pack(w["pid"], w["dev"], w["stream"])
    head = queued_before_capture(ops, o_launch, wait_key, w["cpu"], FirstCalls.of(api_calls))
    o_launch = np.where(head.called_before, BEFORE_THE_TRACE, o_launch)
    # A graph launch's nodes that ran on the graph's own streams (a capture that forked) count
    # on its launch stream too: work queued there after the launch waits for the whole graph.
    b_rows, b_key = graph_branches(ops, np.concatenate([rec_key, wait_key]))
    b_placed = placed[b_rows]
    g_key = np.concatenate([b_key[b_placed], head.stream_key])
    g_launch = np.concatenate([o_launch[b_rows[b_placed]], np.full(len(head.stream_key), BEFORE_THE_TRACE, np.int64)])
    g_end = np.concatenate([o_end[b_rows[b_placed]], head.done])
    op_key_all = np.concatenate([op_key, g_key])
    keys = np.union1d(work_keys, np.concatenate([rec_key, wait_key]))
    n = len(keys)

    def index_of(pid, dev, stream):
        if n == 0 or len(pid) == 0:
            return np.zeros(len(pid), dtype=np.int64)
        return np.searchsorted(keys, _pack(pid, dev, stream))

    op_launch, op_done, op_thread = [], [], []
    oi = np.searchsorted(keys, op_key_all) if n and len(op_key_all) else np.zeros(len(op_key_all), dtype=np.int64)
    ol, oe = np.concatenate([o_launch[placed], g_launch]), np.concatenate([o_end[placed], g_end])
    # Who launched each: the launching call's thread (a graph branch: its launch's; -1 unknown).
    o_tid = int64s(ops["launch_tid"], -1) if ops.num_rows and "launch_tid" in ops.column_names else np.full(len(o_pid), -1, np.int64)
    o_thread = np.where((o_tid >= 0) & ~head.called_before, thread_keys(o_pid, o_tid), -1)
    ot = np.concatenate([o_thread[placed], o_thread[b_rows[b_placed]], np.full(len(head.stream_key), -1, np.int64)])
    order = np.lexsort((ol, oi))
    oi, ol, oe, ot = oi[order], ol[order], oe[order], ot[order]
    cuts = np.searchsorted(oi, np.arange(n + 1))
    for s in range(n):
        a, b = cuts[s], cuts[s + 1]
        op_launch.append(ol[a:b])
        op_done.append(np.maximum.accumulate(oe[a:b]) if b > a else oe[a:b])
        op_thread.append(ot[a:b])

    # Waits in CPU order: each depends on its record's stream as of the record's CPU time,
    # including the waits that stream had itself made by then.
    rec_stream = index_of(rec["pid"], rec["dev"], rec["stream"])
    wait_stream = index_of(w["pid"], w["dev"], w["stream"])
    records = EventRecords.of(rec["pid"], rec["event"], rec["sync"], rec_stream, rec["cpu"])
    # Each wait's record (stream row, CPU time); the waits that found theirs, in CPU order (a
    # wait whose record was made before the capture began, or inside a graph capture, has none).
    named_row, named_cpu = records.named_by(w["pid"], w["event"], w["sync"], w["cpu"])
    wait_stream = _waits_of_the_other_device(keys, work_keys, w["pid"], w_dev_written, w["stream"], wait_stream, named_row)
    by_cpu = np.argsort(w["cpu"], kind="stable")
    resolved = by_cpu[named_row[by_cpu] >= 0]
    rec_s, rec_t = named_row[resolved], named_cpu[resolved]
    # What each record waits for among GPU ops: one search per record stream, not per wait.
    from_ops = np.empty(len(resolved), dtype=np.int64)
    for s in np.unique(rec_s).tolist():
        sel = rec_s == s
        from_ops[sel] = _before(op_launch[s], op_done[s], rec_t[sel])
    # Then the waits' own chains, in CPU order: a record made after a wait on its stream
    # depends on what that wait waited for.
    times: list[list[int]] = [[] for _ in range(n)]
    running: list[list[int]] = [[] for _ in range(n)]
    deps: list[list[int]] = [[] for _ in range(n)]
    froms: list[list[int]] = [[] for _ in range(n)]
    w_cpu, w_stream = w["cpu"].tolist(), wait_stream.tolist()
    for i, rs, rt, dep in zip(resolved.tolist(), rec_s.tolist(), rec_t.tolist(), from_ops.tolist()):
        k = bisect.bisect_left(times[rs], rt) - 1
        if k >= 0:
            dep = max(dep, running[rs][k])
        s = w_stream[i]
        prev = running[s][-1] if running[s] else I64_MIN
        times[s].append(w_cpu[i])
        running[s].append(max(prev, dep))
        deps[s].append(dep)
        froms[s].append(rs)
    return StreamClock(
        keys=keys,
        op_launch=tuple(op_launch),
        op_done=tuple(op_done),
        wait_time=tuple(np.array(x, dtype=np.int64) for x in times),
        wait_done=tuple(np.array(x, dtype=np.int64) for x in running),
        wait_dep=tuple(np.array(x, dtype=np.int64) for x in deps),
        wait_from=tuple(np.array(x, dtype=np.int64) for x in froms),
        join_cpu=w["cpu"][resolved],
        join_into=np.asarray(wait_stream, np.int64)[resolved],
        join_from=rec_s,
        join_thread=w["thread"][resolved],
        unresolved_into=_unresolved_into(wait_stream, resolved, records.first_before(w["pid"], w["event"], w["cpu"])),
        join_record_cpu=rec_t,
        records=records,
        branch_ops=b_rows,
        branch_rows=np.searchsorted(keys, b_key) if n else np.zeros(len(b_key), np.int64),
        before_capture=head,
        op_instants=o_launch_raw,
        record_thread=rec["thread"],
        record_call_start=rec["call_start"],
        record_row=np.asarray(rec_stream, np.int64),
        op_thread=tuple(op_thread),
    )


# A launch instant before every CPU instant of a trace (int64 min means "not placed").
BEFORE_THE_TRACE = I64_MIN + 1
# CUPTI numbers a process's API calls from its start, whenever the capture begins: a trace
# whose first call of a process has a correlation id this high began mid-run (public
# captures taken with a delay: 1.4-2.6 million; captures from the start: 100-2,300 in 50
# sample and public traces).
MID_RUN_MIN_CORRELATION = 100_000


@dataclass(frozen=True)
class FirstCalls:
    """Per process of a trace, the correlation id of its first API call in the trace."""

    pid: np.ndarray
    corr: np.ndarray

    @classmethod
    def of(cls, api_calls: pa.Table) -> FirstCalls:
        if api_calls.num_rows == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        pids = sorted(pc.unique(api_calls["pid"]).to_pylist())  # a hash, not a sort of every call
        corr = int64s(api_calls["correlation_id"], I64_MAX)
        if len(pids) == 1:
            first = [int(corr.min())]
        else:
            pid = int64s(api_calls["pid"])
            first = [int(corr[pid == p].min()) for p in pids]
        return cls(np.array(pids, dtype=np.int64), np.array(first, dtype=np.int64))

    def launched_before(self, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Per op (its process, its correlation id, -1: none): numbered before every call of
        its process in the trace, so launched before the capture began (CUPTI numbers calls in
        order)."""
        if len(self.pid) == 0:
            return np.zeros(len(pid), dtype=bool)
        at = np.minimum(np.searchsorted(self.pid, pid), len(self.pid) - 1)
        return (self.pid[at] == pid) & (corr >= 0) & (corr < self.corr[at])

    def mid_run(self) -> np.ndarray:
        """The processes whose first call's number says the capture began while they ran
        (``MID_RUN_MIN_CORRELATION``)."""
        return self.pid[(self.corr >= MID_RUN_MIN_CORRELATION) & (self.corr < I64_MAX)]


# The first op of a stream that starts this long after its launch, with nothing in the trace
# before it on its stream or beside it on its device, waited for work the trace does not hold:
# queued before the capture began. An idle GPU starts an op within microseconds of its launch.
HIDDEN_QUEUE_MIN_NS = 50_000


@dataclass(frozen=True)
class BeforeCapture:
    """Work on a rank's streams that was queued before the capture began (``queued_before_capture``)."""

    called_before: np.ndarray  # per op: launched before the trace (its launching call is not in it)
    stream_key: np.ndarray  # streams (``_pack`` keys) whose first op waited for work the trace lacks
    done: np.ndarray  # ... and when that work was done: that op's start
    waited: np.ndarray  # ... and how long that op waited for it


def queued_before_capture(ops: pa.Table, launch: np.ndarray, wait_key: np.ndarray, wait_cpu: np.ndarray, first_calls: FirstCalls) -> BeforeCapture:
    """Work a capture begun mid-run (``--delay``, ``--capture-range``) holds without its launch,
    which an engine whose CPU runs ahead of the GPU had queued before it began: what the CUDA
    events of the first phases wait for. Only in processes captured mid-run: those with an op
    numbered before their first call in the trace, or whose first call's number is high
    (``FirstCalls.mid_run``); a process traced from its start queued nothing before (its first
    kernels start late for reasons of their own: 0.14-1.3 ms on the H200 samples, loading a
    module, a first stream).

    - Ops whose launching call is not in the trace, numbered before their process's first call
      in it, or (in a process captured mid-run) at the head of their stream (before its first
      op whose call is): they were launched before the trace, not when they started. Only on
      streams that have a launched op (a trace without launching calls is left as it is).
    - A stream whose first op (by launch) starts ``HIDDEN_QUEUE_MIN_NS`` or more after its
      launch, where no stream wait of the trace comes before it on its stream and no other op
      of its process runs on its device meanwhile (another stream's kernels holding the GPU,
      an op of the first kind): work the trace does not show held the stream until that op's
      start.
    ``launch``: ``launch_instants(ops)``; ``wait_key`` / ``wait_cpu``: the stream waits' streams
    (``_pack``) and CPU instants."""
    n = ops.num_rows
    none = BeforeCapture(np.zeros(n, bool), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if n == 0:
        return none
    pid, dev, stream = int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1)
    called = int64s(ops["launch_end_ns"], I64_MIN) != I64_MIN
    early = np.zeros(n, dtype=bool)
    if not called.all():
        early = ~called & first_calls.launched_before(pid, int64s(ops["correlation_id"], -1))
    mid_run = np.union1d(first_calls.mid_run(), pid[early])
    if len(mid_run) == 0 or not np.isin(pid, mid_run).any():
        return none
    start, end = int64s(ops["start_ns"]), int64s(ops["end_ns"])
    key = _pack(pid, dev, stream)
    # Per stream, the start of its first op that has its call: call-less ops before it came
    # first (a stream without any such op is left as it is).
    streams, stream_of = np.unique(key, return_inverse=True)
    first_called = np.full(len(streams), I64_MAX, dtype=np.int64)
    np.minimum.at(first_called, stream_of.ravel()[called], start[called])
    limit = first_called[stream_of.ravel()]
    before = ~called & (start < limit) & (limit < I64_MAX)
    in_mid_run = np.isin(pid, mid_run)
    before = (before & in_mid_run) | early
    # Per stream, its first op by launch, among those launched in the trace.
    placed = ~before & called & in_mid_run
    if not placed.any():
        return replace(none, called_before=before)
    rows = np.flatnonzero(placed)
    by_launch = rows[np.lexsort((launch[rows], key[rows]))]
    first = by_launch[np.r_[True, key[by_launch][1:] != key[by_launch][:-1]]]
    first = first[start[first] - launch[first] >= HIDDEN_QUEUE_MIN_NS]
    heads = []
    for i in first.tolist():
        lo, hi = launch[i], start[i]
        if len(wait_key) and bool(((wait_key == key[i]) & (wait_cpu < hi)).any()):
            continue
        # Another op of the process running meanwhile on its device (another stream's kernels
        # holding the GPU, one of its own stream's ops launched before the trace) explains it.
        beside = (pid == pid[i]) & (dev == dev[i]) & (start < hi) & (end > lo)
        beside[i] = False
        if beside.any():
            continue
        heads.append(i)
    h = np.array(heads, dtype=np.int64)
    return BeforeCapture(before, key[h], start[h], start[h] - launch[h])


def graph_branches(ops: pa.Table, named_keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of node-mode CUDA-graph launches (every node kernel shares its launch call's
    correlation id) that ran on another stream than their launch: (their rows of ``ops``,
    sorted; the packed (pid, device, stream) key of their launch's stream). A capture that
    forked runs its branches on streams of the graph's own (a real H200 trace: 8 nodes on the
    launch stream, 1 on stream 142), and work queued on the launch stream after the launch
    waits for the whole graph: in the stream clock, and in choosing a phase's stream, they
    count on the launch stream. A launch's stream is one of its nodes' streams that the process
    also ran work on outside graphs or that an event record or stream wait names
    (``named_keys``, packed: a branch's stream is the graph's own, which the program never
    sees), else the one its first node ran on (the capture's origin stream, where its first
    work was captured: a capture whose first op forked has root nodes on both, and either may
    start first); ties: the stream with more of its nodes, whatever the branches hold (SGLang's
    routed experts on an alternate stream)."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if ops.num_rows == 0:
        return none
    sel, launch_id = graph_node_launches(ops)
    if len(sel) == 0:
        return none
    key = _pack(int64s(ops["pid"])[sel], int64s(ops["device_id"], -1)[sel], int64s(ops["stream_id"], -1)[sel])
    if len(np.unique(key)) == 1:
        return none
    # Nodes per (launch, stream), for ties between streams whose nodes start together.
    by_pair = np.lexsort((key, launch_id))
    new_pair = np.r_[True, (launch_id[by_pair][1:] != launch_id[by_pair][:-1]) | (key[by_pair][1:] != key[by_pair][:-1])]
    pair = np.cumsum(new_pair) - 1
    n_on = np.empty(len(sel), dtype=np.int64)
    n_on[by_pair] = np.bincount(pair)[pair]
    outside = ~is_graph_launch(ops)
    seen_keys = np.unique(np.concatenate([_pack(int64s(ops["pid"])[outside], int64s(ops["device_id"], -1)[outside], int64s(ops["stream_id"], -1)[outside]),
                                          np.asarray(named_keys if named_keys is not None else [], dtype=np.int64)]))
    graph_only = ~np.isin(key, seen_keys)
    # by launch, then a stream the program also uses, then first start, then more nodes
    order = np.lexsort((-n_on, int64s(ops["start_ns"])[sel], graph_only, launch_id))
    ids = launch_id[order]
    first = np.r_[True, ids[1:] != ids[:-1]]
    launch_key = np.empty(len(sel), dtype=np.int64)
    launch_key[order] = np.repeat(key[order][first], np.diff(np.r_[np.flatnonzero(first), len(order)]))
    off = launch_key != key
    return sel[off], launch_key[off]


@dataclass(frozen=True)
class EventRecords:
    """Every ``cudaEventRecord`` of a rank that found its call, and the one rule for which of
    them a stream wait or an event synchronize at CPU time ``t`` names: by (event id, record
    number); exports without record numbers (nsys 2024 and older) name only the event, and then
    it is the event's latest record made before ``t`` (an event is re-recorded every cycle).
    Where two records share (process, event, record number), the later row names; where two of
    an event's records were made at the same instant, the later row is the latest."""

    pid: np.ndarray
    event: np.ndarray
    sync: np.ndarray  # record number, -1 where the export has none
    row: np.ndarray  # stream row (``StreamClock.keys``) recorded on
    cpu: np.ndarray  # CPU time of the record (its call's return)

    @classmethod
    def of(cls, pid: np.ndarray, event: np.ndarray, sync: np.ndarray, row: np.ndarray, cpu: np.ndarray) -> EventRecords:
        return cls(*(np.asarray(x, dtype=np.int64) for x in (pid, event, sync, row, cpu)))

    def named_by(self, pid: np.ndarray, event: np.ndarray, sync: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per wait or synchronize (process, event id, record number or -1, CPU time): (stream
        row, record CPU time) of the record it names; -1 and I64_MIN where none is in the trace
        (recorded before the capture began, or inside a graph capture). Vectorised: one sort of
        the records and the asks together, whatever their number."""
        pid, event, sync, t = (np.asarray(x, dtype=np.int64) for x in (pid, event, sync, t))
        row, cpu = np.full(len(pid), -1, np.int64), np.full(len(pid), I64_MIN, np.int64)
        if len(pid) == 0 or len(self.pid) == 0:
            return row, cpu
        asked = sync >= 0
        # By record number: records with one, the last row of each (process, event, number).
        numbered = np.flatnonzero(self.sync >= 0)
        if asked.any() and len(numbered):
            ask = np.flatnonzero(asked)
            ids = _dense_ids(np.r_[self.pid[numbered], pid[ask]], np.r_[self.event[numbered], event[ask]], np.r_[self.sync[numbered], sync[ask]])
            rec_ids, ask_ids = ids[:len(numbered)], ids[len(numbered):]
            last = np.full(int(ids.max()) + 1, -1, np.int64)
            uniq, first_reversed = np.unique(rec_ids[::-1], return_index=True)
            last[uniq] = numbered[len(numbered) - 1 - first_reversed]
            hit = last[ask_ids]
            found = hit >= 0
            row[ask[found]], cpu[ask[found]] = self.row[hit[found]], self.cpu[hit[found]]
        # By event alone: the event's latest record made by t (the later row on a tie).
        ask = np.flatnonzero(~asked)
        if len(ask):
            n = len(self.pid)
            ids = _dense_ids(np.r_[self.pid, pid[ask]], np.r_[self.event, event[ask]])
            times = np.unique(np.r_[self.cpu, t[ask]], return_inverse=True)[1].reshape(-1)
            span = int(times.max()) + 1
            key = ids * span + times  # (event, instant) in one sortable key: both are dense ranks
            order = np.lexsort((np.arange(n), key[:n]))
            pos = np.searchsorted(key[:n][order], key[n:], side="right") - 1
            k = order[np.maximum(pos, 0)]
            found = (pos >= 0) & (ids[k] == ids[n:])
            row[ask[found]], cpu[ask[found]] = self.row[k[found]], self.cpu[k[found]]
        return row, cpu

    def first_before(self, pid: np.ndarray, event: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per (process, event id, CPU time): whether the event was recorded in the trace before
        that time at all."""
        pid, event, t = (np.asarray(x, dtype=np.int64) for x in (pid, event, t))
        if len(pid) == 0 or len(self.pid) == 0:
            return np.zeros(len(pid), dtype=bool)
        n = len(self.pid)
        ids = _dense_ids(np.r_[self.pid, pid], np.r_[self.event, event])
        first = np.full(int(ids.max()) + 1, I64_MAX, np.int64)
        np.minimum.at(first, ids[:n], self.cpu)
        return first[ids[n:]] < t


def _dense_ids(*columns: np.ndarray) -> np.ndarray:
    """Per row of the equally long ``columns``, a number shared by exactly the rows that agree
    in every column (0, 1, ... in the order of the rows' sorted values)."""
    if len(columns[0]) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for c in columns:
        sc = c[order]
        new[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _unresolved_into(wait_stream: np.ndarray, resolved: np.ndarray, recorded_before: np.ndarray) -> np.ndarray:
    """Streams with an event wait whose record the trace lacks, though it holds a record of that
    event made before the wait (``recorded_before``, per wait): a wait on a record made before
    the capture began (its event recorded nowhere earlier in the trace) is no unknown. Where no
    wait found its record (an export without the event table), every one is unknown."""
    if len(wait_stream) == 0:
        return np.zeros(0, np.int64)
    missing = np.ones(len(wait_stream), dtype=bool)
    missing[resolved] = False
    if len(resolved):
        missing &= recorded_before
    return np.unique(wait_stream[missing])


def _unpack_device(keys: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Device id of each stream row (rows >= 0)."""
    return (keys[row] >> 31) & 0xFF


def _unpack_stream(keys: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Stream id of each stream row (rows >= 0)."""
    return keys[row] & 0x7FFFFFFF


def _pack(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
    # pid < 2**24 (nsys global ids), device < 2**8, stream ids < 2**31: one int64 key.
    return (np.asarray(pid, np.int64) << 39) | ((np.asarray(dev, np.int64) & 0xFF) << 31) | (np.asarray(stream, np.int64) & 0x7FFFFFFF)


def on_working_device(work_keys: np.ndarray, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """The device of each (pid, dev, stream) named by a synchronization or event record: as
    given where that stream ran work (``work_keys``: the packed keys of streams with ops) or
    where no stream of that id in the process did; else the one device on which the process's
    stream of that id ran work. nsys 2026.2 writes device 0 in every synchronization record (the
    public mfu_2gpu and h100_2gpu captures: the process on GPU 1 waits on "device 0, stream
    15", its work is on device 1, stream 15)."""
    dev = np.asarray(dev, dtype=np.int64).copy()
    if len(dev) == 0 or len(work_keys) == 0:
        return dev
    lost = np.flatnonzero(~np.isin(_pack(pid, dev, stream), work_keys))
    if len(lost) == 0:
        return dev
    w_pid, w_dev, w_stream = work_keys >> 39, (work_keys >> 31) & 0xFF, work_keys & 0x7FFFFFFF
    by_id = (w_pid << 31) | w_stream  # per stream with work: (pid, stream id)
    order = np.argsort(by_id, kind="stable")
    ids = by_id[order]
    want = (np.asarray(pid, np.int64)[lost] << 31) | (np.asarray(stream, np.int64)[lost] & 0x7FFFFFFF)
    lo, hi = np.searchsorted(ids, want, side="left"), np.searchsorted(ids, want, side="right")
    one = hi - lo == 1  # exactly one device ran work on a stream of that id
    dev[lost[one]] = w_dev[order[lo[one]]]
    return dev


def _waits_of_the_other_device(keys: np.ndarray, work_keys: np.ndarray, pid: np.ndarray, dev_written: np.ndarray, stream: np.ndarray,
                               wait_row: np.ndarray, record_row: np.ndarray) -> np.ndarray:
    """``wait_row`` (per wait, its stream's row of ``keys``), with a wait that reads as its own
    record's stream waiting for itself (a no-op) moved to the stream of that id on the process's
    one other device with work there, where every wait record of the process says device 0: nsys
    2026.2 writes device 0 in every synchronization record, and one thread driving two GPUs has
    a stream 7 on each (GPU 1's wait for GPU 0's record read as GPU 0's own: lost)."""
    self_wait = np.flatnonzero((record_row >= 0) & (record_row == wait_row))
    if len(self_wait) == 0 or len(work_keys) == 0:
        return wait_row
    out = np.asarray(wait_row, np.int64).copy()
    k_pid, k_dev, k_stream = work_keys >> 39, (work_keys >> 31) & 0xFF, work_keys & 0x7FFFFFFF
    row_dev = (keys >> 31) & 0xFF
    carry_devices = set(np.unique(pid[dev_written != 0]).tolist())  # processes whose wait records carry their devices
    for i in self_wait.tolist():
        p, sid = int(pid[i]), int(stream[i])
        if p in carry_devices:
            continue
        other = np.unique(k_dev[(k_pid == p) & (k_stream == sid) & (k_dev != row_dev[wait_row[i]])])
        if len(other) == 1:
            out[i] = np.searchsorted(keys, _pack(np.array([p]), other, np.array([sid])))[0]
    return out


def _event_record_times(event_records: pa.Table, api_calls: pa.Table) -> dict[str, np.ndarray]:
    empty = {k: np.zeros(0, np.int64) for k in ("pid", "dev", "stream", "event", "sync", "cpu", "thread", "call_start")}
    if event_records.num_rows == 0 or api_calls.num_rows == 0:
        return empty
    call = match_correlation(int64s(api_calls["global_pid"]), int64s(api_calls["correlation_id"], -1), int64s(event_records["global_pid"]), int64s(event_records["correlation_id"], -1))
    ok = call >= 0
    if not ok.any():
        return empty
    return {
        "pid": int64s(event_records["pid"])[ok],
        "dev": int64s(event_records["device_id"], -1)[ok],
        "stream": int64s(event_records["stream_id"], -1)[ok],
        "event": int64s(event_records["event_id"], -1)[ok],
        "sync": int64s(event_records["event_sync_id"], -1)[ok],
        # Taken when the record call returned (as a launch is: ``launch_instants``): work queued
        # on the stream by then is what the event stands for.
        "cpu": int64s(api_calls["end_ns"])[call[ok]],
        "thread": thread_keys(int64s(api_calls["pid"])[call[ok]], int64s(api_calls["tid"])[call[ok]]),
        "call_start": int64s(api_calls["start_ns"])[call[ok]],
    }


def _stream_waits(sync_records: pa.Table, api_calls: pa.Table) -> dict[str, np.ndarray]:
    empty = {k: np.zeros(0, np.int64) for k in ("pid", "dev", "stream", "event", "sync", "cpu", "thread")}
    if sync_records.num_rows == 0 or "event_id" not in sync_records.column_names:
        return empty
    is_wait = string_mask(sync_records["sync_type"], lambda x: "wait" in x.lower()) & (int64s(sync_records["event_id"], -1) >= 0)
    if not is_wait.any():
        return empty
    pid = int64s(sync_records["pid"])[is_wait]
    # The thread that made the wait (its cudaStreamWaitEvent call), -1 where the call is not in
    # the trace (sync records carry the process, as in ``syncs``).
    # (Matched among the wait calls only: sorting every API call's key took 28 ms of the 76 MB
    # trace's load for its 2 waits, this 5.5 ms.)
    calls = np.flatnonzero(string_mask(api_calls["name"], lambda n: "StreamWaitEvent" in n)) if api_calls.num_rows else np.zeros(0, np.int64)
    c_pid = int64s(api_calls["pid"])[calls] if len(calls) else calls
    call = match_correlation(c_pid, int64s(api_calls["correlation_id"], -1)[calls] if len(calls) else calls,
                             pid, int64s(sync_records["correlation_id"], -1)[is_wait])
    thread = np.full(len(pid), -1, np.int64)
    found = call >= 0
    thread[found] = thread_keys(c_pid[call[found]], int64s(api_calls["tid"])[calls[call[found]]])
    return {
        "thread": thread,
        "pid": pid,
        "dev": int64s(sync_records["device_id"], -1)[is_wait],
        "stream": int64s(sync_records["stream_id"], -1)[is_wait],
        "event": int64s(sync_records["event_id"], -1)[is_wait],
        "sync": int64s(sync_records["event_sync_id"], -1)[is_wait],
        "cpu": int64s(sync_records["end_ns"])[is_wait],  # the cudaStreamWaitEvent call, when it returned
    }


# Up to this many phase x stream cells, phase_streams counts on a dense grid instead of sorting.
_DENSE_CELLS = 20_000_000


def declared_streams(clock: StreamClock, marks: tuple[np.ndarray, np.ndarray], calls: tuple[np.ndarray, np.ndarray, np.ndarray],
                     range_starts: tuple[np.ndarray, np.ndarray], phases: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per phase instance: (device, stream) its thread said was current as the phase began, -1
    where none said. ``tracerecon.instrument`` says it right after pushing the phase's range:
    it records a CUDA event on the current stream, then emits a ``tracerecon.stream`` mark. A
    mark (``marks``: its thread, ``thread_keys``, and CPU instant) names the stream of its
    thread's last API call started before it (``calls``: thread, start, whether it is a
    ``cudaEventRecord``; the calls the export keeps for GPU work), where that call is an event
    record the export holds (in ``clock``); it names it for the phase instance (``phases``:
    thread, CPU start and end) whose range is the thread's latest to start by that record
    (``range_starts``: thread and start of every range, phases or not) and holds the mark. So a
    mark whose record is not in the export says nothing, nor one of a range nested in a phase
    that marked nothing itself."""
    n = len(phases[1])
    out = np.full(n, -1, dtype=np.int64)
    m_thread, m_t = (np.asarray(x, np.int64) for x in marks)
    if len(m_t) == 0 or n == 0 or len(clock.record_row) == 0:
        return out, out.copy()

    def by_thread(thread: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
        order = np.lexsort((np.asarray(cols[0]), np.asarray(thread)))
        return (np.asarray(thread, np.int64)[order],) + tuple(np.asarray(c)[order] for c in cols) + (order,)

    m_thread, m_t, _ = by_thread(m_thread, m_t)
    c_thread, c_start, c_record, _ = by_thread(*calls)
    r_thread, r_start, r_row, _ = by_thread(clock.record_thread, clock.record_call_start, clock.record_row)
    g_thread, g_start, _ = by_thread(*range_starts)
    p_thread, p_s, p_e, p_order = by_thread(*phases)
    for th in np.intersect1d(np.intersect1d(m_thread, p_thread), r_thread).tolist():
        ms, cs, rs, gs, ps = (slice(*np.searchsorted(x, [th, th + 1])) for x in (m_thread, c_thread, r_thread, g_thread, p_thread))
        t = m_t[ms]
        # The thread's last call before each mark, an event record the export holds
        k = np.searchsorted(c_start[cs], t, side="left") - 1
        ok = (k >= 0) & c_record[cs][np.maximum(k, 0)] if cs.stop > cs.start else np.zeros(len(t), bool)
        call = c_start[cs][np.maximum(k, 0)] if cs.stop > cs.start else np.zeros(len(t), np.int64)
        r = np.minimum(np.searchsorted(r_start[rs], call), rs.stop - rs.start - 1)
        ok &= r_start[rs][r] == call
        # ... made first thing in a phase range: the thread's latest range to start by it
        j = np.searchsorted(p_s[ps], call, side="right") - 1
        g = np.searchsorted(g_start[gs], call, side="right") - 1
        ok &= (j >= 0) & (g >= 0)
        jj, gg = np.maximum(j, 0), np.maximum(g, 0)
        ok &= (p_s[ps][jj] == g_start[gs][gg]) & (p_e[ps][jj] >= t)
        take = np.flatnonzero(ok)
        phase = p_order[ps][jj[take]]
        first = np.unique(phase, return_index=True)[1]  # (one mark a phase; the first if more)
        out[phase[first]] = r_row[rs][r[take[first]]]
    said = out >= 0
    return (np.where(said, _unpack_device(clock.keys, np.maximum(out, 0)), -1), np.where(said, _unpack_stream(clock.keys, np.maximum(out, 0)), -1))


def phase_streams(ops: pa.Table, op_phase: np.ndarray, n_phases: int, prefer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per phase instance: (device_id, stream_id) that received most of its GPU time; -1 when
    it launched nothing. Ties: more ops, then the lower (device, stream). ``prefer`` (per op):
    where a phase has preferred ops, only they count (``attribution.stream_deciding_ops``)."""
    dev_out = np.full(n_phases, -1, dtype=np.int64)
    str_out = np.full(n_phases, -1, dtype=np.int64)
    if prefer is not None and not prefer.all():
        has_preferred = np.zeros(n_phases + 1, dtype=bool)
        has_preferred[op_phase[(op_phase >= 0) & prefer]] = True
        op_phase = np.where(prefer | ~has_preferred[np.where(op_phase >= 0, op_phase, n_phases)], op_phase, -1)
    sel = np.flatnonzero(op_phase >= 0)
    if len(sel) == 0 or n_phases == 0:
        return dev_out, str_out
    dev = int64s(ops["device_id"], -1)[sel]
    stream = int64s(ops["stream_id"], -1)[sel]
    dur = np.clip(int64s(ops["end_ns"])[sel] - int64s(ops["start_ns"])[sel], 0, None)
    ph = op_phase[sel]
    packed = (dev << 32) | (stream & 0xFFFFFFFF)
    streams = distinct_few(packed)
    s_dense = np.searchsorted(streams, packed)
    n_s = len(streams)
    # Best per phase: largest total, then most ops, then lowest (device, stream).
    if n_phases * n_s <= _DENSE_CELLS:
        # Few streams (the usual case): a phases x streams grid of totals and counts, no sort.
        cell = ph * n_s + s_dense
        total = np.bincount(cell, weights=dur, minlength=n_phases * n_s).astype(np.int64).reshape(n_phases, n_s)
        count = np.bincount(cell, minlength=n_phases * n_s).reshape(n_phases, n_s)
        top = total == total.max(axis=1, keepdims=True)
        count = np.where(top & (count > 0), count, -1)
        best = np.argmax(count == count.max(axis=1, keepdims=True), axis=1)  # the lowest of the ties
        has = count.max(axis=1) > 0
        k_phase, k_stream = np.flatnonzero(has), best[has]
    else:
        keys, inv = np.unique(ph * n_s + s_dense, return_inverse=True)
        inv = inv.ravel()
        total = np.bincount(inv, weights=dur).astype(np.int64)
        count = np.bincount(inv)
        kp, ks = keys // n_s, keys % n_s
        order = np.lexsort((ks, -count, -total, kp))
        first = np.r_[True, kp[order][1:] != kp[order][:-1]]
        k_phase, k_stream = kp[order[first]], ks[order[first]]
    # Each stream's own ids, from its first op (the packed key loses a negative stream's sign).
    s_first = np.full(n_s, len(packed), dtype=np.int64)
    np.minimum.at(s_first, s_dense, np.arange(len(packed)))
    dev_out[k_phase] = dev[s_first[k_stream]]
    str_out[k_phase] = stream[s_first[k_stream]]
    return dev_out, str_out


def narrowed_by_phase(op_phase: np.ndarray, n_phases: int, *masks: np.ndarray | None) -> np.ndarray:
    """Per op: whether it may decide its phase's stream (``phase_streams``), given masks in
    priority order. Each mask narrows a phase's deciding ops to those it marks, where the phase
    has any (a phase none of whose ops a mask marks keeps what it had)."""
    keep = np.ones(len(op_phase), dtype=bool)
    valid = op_phase >= 0
    slot = np.where(valid, op_phase, n_phases)
    for mask in masks:
        if mask is None:
            continue
        narrower = keep & np.asarray(mask, dtype=bool)
        has = np.zeros(n_phases + 1, dtype=bool)
        has[op_phase[valid & narrower]] = True
        keep = np.where(has[slot], narrower, keep)
    return keep


class _OpStreams:
    """One rank's ops as ``caller_streams``' rules ask about them, each worked out once and only
    when first asked (most traces never get past the first question): every op's stream row,
    which ops compute (a kernel or graph that is no collective), which streams do, and the
    (process, thread) key of the thread that launched each op."""

    def __init__(self, clock: StreamClock, ops: pa.Table):
        self.clock, self.ops = clock, ops

    @functools.cached_property
    def pid(self) -> np.ndarray:
        return int64s(self.ops["pid"])

    @functools.cached_property
    def rows(self) -> np.ndarray:
        return self.clock.stream_index(self.pid, int64s(self.ops["device_id"], -1), int64s(self.ops["stream_id"], -1))

    @functools.cached_property
    def computes(self) -> np.ndarray:
        return runs_model(self.ops)

    @functools.cached_property
    def computing_streams(self) -> np.ndarray:
        """Per stream row (and a last False for row -1): whether some op on it computes."""
        out = np.zeros(len(self.clock.keys) + 1, dtype=bool)
        out[self.rows[self.computes]] = True
        out[-1] = False
        return out

    @functools.cached_property
    def threads(self) -> np.ndarray:
        if "launch_tid" not in self.ops.column_names:
            return np.zeros(len(self.pid), np.int64)
        return thread_keys(self.pid, int64s(self.ops["launch_tid"], -1))

    def threads_on(self, row: int) -> np.ndarray:
        """The (process, thread) keys that launched ops on stream ``row``, sorted."""
        return np.unique(self.threads[self.rows == row])

    @functools.cached_property
    def _chosen(self) -> tuple[np.ndarray, dict]:
        """Per op: launched onto its stream by its thread's choice (a synchronous cudaMemcpy lands
        on the legacy stream whichever stream its thread works on); and ``threads_using``'s answers."""
        return (~synchronous_copies(self.ops) if self.ops.num_rows else np.zeros(0, bool)), {}

    def threads_using(self, row: int) -> np.ndarray:
        """The threads that launched ops on stream ``row`` other than synchronous copies, sorted
        (each row worked out once)."""
        chosen, known = self._chosen
        if row not in known:
            known[row] = np.unique(self.threads[(self.rows == row) & chosen])
        return known[row]


def caller_streams(clock: StreamClock, ops: pa.Table, op_phase: np.ndarray, ph_pid: np.ndarray, ph_tid: np.ndarray, cpu_start: np.ndarray,
                   cpu_end: np.ndarray, cycle: np.ndarray, device: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stream each phase's CUDA events would be recorded on, given the stream that received
    most of its work (``phase_streams``): the caller's stream where that one is a side stream.

    A stream that only copies or communicates (ProcessGroupNCCL's collectives, joined back in
    the phase, in a later one with ``async_op=True``, or never; a copy stream taking results
    off, vLLM's async output copy) is a side stream S of C in a phase when every op the phase
    launched on S was launched while S was forked off C within the phase: the latest event
    wait between the two before the launch is S waiting for a record made on C, made in the
    phase's CPU window. C must compute (run a kernel or graph that is no collective, somewhere
    in the trace): a stream that only copies or communicates is nobody's caller.

    Two computing streams wait for each other in turn (a side stream joined back, SGLang's plan
    stream), so either can look forked off the other. There the caller must fork first within
    the phase (the first wait between them is S waiting for C) and join S back (C waits for a
    record made on S after S's op): within the phase, or in a later phase of the same cycle and
    thread (``ph_tid``; the latest of that thread's phases started by the join that still runs)
    that is itself read on C: that phase's events go on C, so C is the thread's current stream.
    That later phase's stream is taken as read after every phase that joins within itself has
    moved, then after the moves of the rounds before (a chain of later joins settles round by
    round). A forward stream that waited for an aux stream's inputs is thus no side stream of
    the aux stream when a phase on the forward stream makes the aux stream wait later on, nor is
    a phase of a worker thread, whose current stream is S, a side of the stream that another
    thread's phase makes wait for S. S's ops count as forked from that first fork on, also those
    launched after a join without a new fork.

    Where the phase's thread reads results back (``_read_back_votes``: device-to-host copies,
    on its current stream) more on C than on S, or the phase passes its collectives or copies
    through C (``_passed_through``: a stream that does not compute forked off C and joined back
    into C, as ProcessGroupNCCL does on the current stream), C is its current stream; that
    settles what the waits alone cannot: a phase whose first wait between the two is a join of
    S's earlier work, and that then forks S anew, forks it too (so it does where more of its
    thread's phases pass collectives or copies through C than through S); a join as late as a
    later cycle's brings a phase back to C. So does work on C before the fork and after it. (Work
    on C beside S's alone does not: SGLang's forward, on its forward stream with a small kernel
    left on the default stream, is joined a cycle later the same way.) No phase
    moves off the stream its thread reads back on more than on the other, nor off a computing
    stream that the phase itself reads back on, or passes its collectives through, more than
    the other and then touches the other no more (a thread that switches its current stream for
    one phase), nor back onto a stream it left. Phases on C by that evidence settle before the phases judged by a join in a
    later phase. Then a side stream made ready one phase early (``_forked_the_phase_before``);
    then a side stream that was only joined in the phase, never forked off its caller, where
    the thread's other phases say which of the two is its current stream, or one joined into
    the stream the thread reads back on (``_joined_into_the_threads_stream``); then the stream
    the phase's own thread handed another thread's work into within the phase (``_hand_overs``:
    a worker's stream made to wait for the loop's), which no rule moves a phase off either; then
    a side stream forked off a computing stream within the phase, joined or not, where the phase's
    thread read results back on that stream and never on the side (a fire-and-forget write-back:
    the range holds code run with the caller current); last, once more the joins in a later
    phase, for the phases those rules moved.

    Repeated for nested forks; a stream with no ops at all passes a phase on to the stream it
    was forked off within the phase (NCCL's stream forked off an empty side stream). Returns
    (device, stream) per phase; unchanged where the phase launched nothing or its stream was no
    side stream."""
    device = np.asarray(device, dtype=np.int64).copy()
    stream = np.asarray(stream, dtype=np.int64).copy()
    into, from_, cpu = clock.join_into, clock.join_from, clock.join_cpu  # in CPU order of the waits
    if len(cpu) == 0 or len(device) == 0 or not (into != from_).any():
        return device, stream
    row = clock.stream_index(ph_pid, device, stream)

    # A phase moved off a stream never moves back onto it: two computing streams that wait for
    # each other within a phase (a join of the side's earlier work, then a fork) each look
    # forked off the other.
    left: dict[int, set[int]] = {}
    votes: list = []  # ``_read_back_votes``, worked out on first use
    keys = thread_keys(np.asarray(ph_pid, np.int64), np.asarray(ph_tid, np.int64))
    op_streams = _OpStreams(clock, ops)

    def read_back(key: int, pid: int) -> dict:
        if not votes:
            votes.append(_read_back_votes(clock, ops, op_streams, frozenset(keys.tolist())))
        return votes[0](key, pid)

    device_of = clock.keys >> 31  # (pid, device) of each stream row
    phase_devices: list = []  # (phase, device row) pairs each phase launched on, worked out on first use

    def launched_there(i: int, to: int) -> bool:
        # A phase's current stream is on a device it launched work on: a wait across devices
        # hands data over (a draft model on one GPU, the target on another) and forks nothing.
        # Work that may decide its stream, that is: kernels, or copies in a phase that ran no
        # kernel (a draft that copies its inputs back from the target's GPU and computes on its
        # own was moved onto the target's stream: 20 us where its events read 365).
        if device_of[to] == device_of[row[i]]:
            return True
        if not phase_devices:
            placed = (op_phase >= 0) & (op_streams.rows >= 0)
            computed = np.zeros(len(device) + 1, dtype=bool)
            computed[op_phase[placed & op_streams.computes]] = True
            deciding = placed & (op_streams.computes | ~computed[np.maximum(op_phase, 0)])
            phase_devices.append(set(zip(op_phase[deciding].tolist(), device_of[op_streams.rows[deciding]].tolist())))
        return (i, int(device_of[to])) in phase_devices[0]

    by_phase: list = []  # the ops sorted by phase, and their phases, on first use

    def others_stream(i: int, to: int) -> bool:
        # A stream only other threads launch on (``threads_using``) is theirs, not this phase's
        # current stream: a record another thread made on it, which this thread's stream waits
        # for, hands work over (a loop thread to its worker) and forks nothing. "This phase's"
        # threads: its range's and those that launched its ops (a scheduler's phase holding a
        # worker's work).
        on = op_streams.threads_using(to)
        if len(on) == 0:
            return False
        if not by_phase:
            order = np.argsort(op_phase, kind="stable")
            by_phase.extend((order, op_phase[order]))
        order, sorted_phase = by_phase
        lo, hi = np.searchsorted(sorted_phase, i, side="left"), np.searchsorted(sorted_phase, i, side="right")
        mine = np.r_[keys[i], op_streams.threads[order[lo:hi]]]
        return not bool(np.isin(mine, on).any())

    phase_reads: list = []  # {(phase, stream row): the phase's own device-to-host copies there}, on first use
    quiet: list = []  # ``_waits_for_quiet_streams``, worked out on first use

    def ends_on(i: int, at: int, to: int) -> bool:
        # Whether the phase's last launch or event wait that touches either stream was made on
        # ``at``: a launch there, or a wait that ``at`` made (joining ``to``'s work into ``at``
        # is an act on ``at``: the join that closes a fork of ``to`` off it); a wait that ``to``
        # made, or one between ``to`` and a third stream, touches ``to``.
        if not by_phase:
            order = np.argsort(op_phase, kind="stable")
            by_phase.extend((order, op_phase[order]))
        order, sorted_phase = by_phase
        mine = order[np.searchsorted(sorted_phase, i, side="left"):np.searchsorted(sorted_phase, i, side="right")]
        lo, hi = np.searchsorted(cpu, cpu_start[i], side="left"), np.searchsorted(cpu, cpu_end[i], side="right")
        w_into, w_from, w_cpu = into[lo:hi], from_[lo:hi], cpu[lo:hi]
        touches_to = (w_into == to) | ((w_from == to) & (w_into != at))
        last_at = max(clock.op_instants[mine[op_streams.rows[mine] == at]].max(initial=I64_MIN),
                      w_cpu[((w_into == at) | (w_from == at)) & ~touches_to].max(initial=I64_MIN))
        last_to = max(clock.op_instants[mine[op_streams.rows[mine] == to]].max(initial=I64_MIN), w_cpu[touches_to].max(initial=I64_MIN))
        return last_at > last_to

    def reads() -> dict:
        # Per (phase, stream row): the phase's own asynchronous device-to-host copies there (they
        # run on its thread's current stream, where torch's `.cpu()` and `.tolist()` put them; a
        # synchronous cudaMemcpy lands on the legacy default stream whatever stream is current).
        if not phase_reads:
            d2h = np.flatnonzero(read_backs(ops) & (op_phase >= 0))
            phase_reads.append(Counter(zip(op_phase[d2h].tolist(), op_streams.rows[d2h].tolist())))
        return phase_reads[0]

    def reads_on(i: int, at: int) -> int:
        return reads().get((i, at), 0)

    def current_here(i: int, at: int, to: int) -> bool:
        # A phase that itself reads results back on the computing stream it is on more than on
        # the other, or passes its collectives or copies through it and not through the other
        # (``_round_trips``), and ends there (``ends_on``), has that stream current (a thread
        # that switches its current stream for one phase, SGLang's forward stream, reads back
        # and communicates there): it stays, whatever its thread does in its other phases.
        if not op_streams.computing_streams[at] or not ends_on(i, at, to):
            # (A phase that touches the other stream after its read-backs, by a launch or a
            # wait, came back to it: `.item()` inside a `with` for a side stream.)
            return False
        if reads_on(i, at) != reads_on(i, to):
            return reads_on(i, at) > reads_on(i, to)
        if not quiet:
            quiet.append(_waits_for_quiet_streams(from_, op_streams.computing_streams, _passing_streams(clock)))
        window = (np.asarray([cpu_start[i]], np.int64), np.asarray([cpu_end[i]], np.int64))
        return bool(_round_trips(into, from_, cpu, quiet[0], at, *window)[0] and not _round_trips(into, from_, cpu, quiet[0], to, *window)[0])

    # Streams each phase's thread handed another thread's work into (``_hand_overs``).
    hand = _hand_overs(clock, op_streams, op_phase, len(row), keys, cpu_start, cpu_end)

    def move(to: np.ndarray) -> bool:
        # Never onto a stream the phase left, nor off the stream its thread reads its results
        # back on more than on the other (its current stream: an input stream's hand-off in the
        # phase looks like a fork of the forward stream off it), nor off the stream its thread
        # handed another thread's work into in the phase (onto another such one only), nor onto
        # a device it launched nothing on, nor onto another thread's stream.
        moved = [i for i in np.flatnonzero(to >= 0).tolist() if int(to[i]) not in left.get(i, ())
                 and not (int(row[i]) in hand.get(i, ()) and int(to[i]) not in hand[i])
                 and (v := read_back(int(keys[i]), int(ph_pid[i]))).get(int(row[i]), 0) <= v.get(int(to[i]), 0)
                 and not current_here(i, int(row[i]), int(to[i]))
                 and launched_there(i, int(to[i])) and not others_stream(i, int(to[i]))]
        for i in moved:
            left.setdefault(i, set()).add(int(row[i]))
        m = np.asarray(moved, dtype=np.int64)
        row[m] = to[m]
        device[m], stream[m] = _unpack_device(clock.keys, to[m]), _unpack_stream(clock.keys, to[m])
        return len(m) > 0

    # Only a phase whose stream was made to wait within its CPU window can move (a phase it
    # moves to another stream keeps being one): the other phases' ops and waits are not looked at.
    candidate = np.zeros(len(row), dtype=bool)
    for r in np.unique(row[row >= 0]).tolist():
        on_r = np.flatnonzero(row == r)
        forks = cpu[(into == r) & (from_ != r)]
        candidate[on_r] = np.searchsorted(forks, cpu_end[on_r]) > np.searchsorted(forks, cpu_start[on_r])  # forked off in the window
    f = _forks_of(clock, op_streams, op_phase, candidate, keys, np.asarray(ph_pid, np.int64), cpu_start, cpu_end, cycle, read_back) if candidate.any() else None

    def fork_rounds(rounds: tuple) -> None:
        for later_phases, on_caller_only in rounds if f is not None else ():
            for _ in range(4):  # nested forks: side -> caller -> its caller
                if not move(_forked_callers(f, row, later_phases, on_caller_only)):
                    break

    # Joins within the phase first, to the end; then joins in a later phase, whose stream is by
    # then its own reading (a phase that joins within itself is on its caller already): first
    # for phases on the caller by evidence (it computed there before the fork and after it,
    # which turn-taking streams never do, or its thread reads results back there), then for
    # the rest, so that a phase that joins in a later one is judged by that one's settled stream.
    later_rounds = ((True, True), (True, False))
    fork_rounds(((False, False),) + later_rounds)
    # Then a side stream made ready one phase early, for the phases that did not move.
    ahead = _forked_the_phase_before(clock, op_streams, op_phase, row, _phase_before(keys, cpu_start, np.asarray(cycle, np.int64)), cpu_start, cpu_end)
    ahead[np.asarray(list(left), dtype=np.int64)] = -1
    settled_late = move(ahead)
    # Last, a stream that was only ever joined in the phase, never forked off its caller.
    joined = _joined_into_the_threads_stream(clock, op_streams, op_phase, row, keys, np.asarray(ph_pid, np.int64), cpu_start, cpu_end, read_back)
    joined[np.asarray(list(left), dtype=np.int64)] = -1
    settled_late |= move(joined)
    # Last of all, a stream its thread handed work into from another thread within the phase.
    handed = np.full(len(row), -1, dtype=np.int64)
    for i, rows in hand.items():
        if int(row[i]) not in rows:
            handed[i] = rows[0]
    settled_late |= move(handed)
    # Then a side stream forked off a computing stream within the phase, joined or not (a
    # fire-and-forget write-back, SGLang HiCache's, only polled with query()), where the phase's
    # own thread read results back on that stream and none on the side (``reads_on``: an
    # asynchronous device-to-host copy runs on the current stream), so the range holds code run
    # with that stream current and the side's work was launched in a block nested in it: its
    # events go on the caller.
    unjoined = np.full(len(row), -1, dtype=np.int64)
    readers = {i for i, _ in reads()}
    for i in np.flatnonzero(candidate & (row >= 0)).tolist():  # (a fork into its stream in its window)
        if i in left or i not in readers:
            continue
        lo, hi = np.searchsorted(cpu, cpu_start[i], side="left"), np.searchsorted(cpu, cpu_end[i], side="right")
        callers = [c for c in dict.fromkeys(from_[lo:hi][(into[lo:hi] == row[i]) & (from_[lo:hi] != row[i]) & (from_[lo:hi] >= 0)].tolist())
                   if op_streams.computing_streams[c] and reads_on(i, c) > 0]
        if callers and reads_on(i, int(row[i])) == 0:
            unjoined[i] = max(callers, key=lambda c: reads_on(i, c))
    settled_late |= move(unjoined)
    if settled_late:
        # A later phase these rules moved onto the caller (mostly copies on an input stream,
        # then a join and a short kernel on the caller) is where a phase before it joined its
        # side stream back: judged again by that phase's settled stream.
        fork_rounds(later_rounds)
    return device, stream


def _hand_overs(clock: StreamClock, op_streams: _OpStreams, op_phase: np.ndarray, n_phases: int, keys: np.ndarray,
                cpu_start: np.ndarray, cpu_end: np.ndarray) -> dict[int, list[int]]:
    """Per phase that has one: the stream rows its own thread (``keys``) made wait, within the
    phase's CPU window, for a stream only other threads launch work on, in the order of those
    waits, where the row computes and the phase computed there: a hand-over, a worker thread's
    current stream taking up the loop thread's work (``worker_stream.wait_stream(loop's)``).
    A worker whose phase keeps an input stream busier than its own stream (fed from the CPU,
    joined into the worker's stream and forked off it in turn) takes turns that read both ways;
    the hand-over says which stream is the worker's."""
    into, from_, cpu, by = clock.join_into, clock.join_from, clock.join_cpu, clock.join_thread
    real = np.flatnonzero((into != from_) & (by >= 0))
    if len(real) == 0 or n_phases == 0 or "launch_tid" not in op_streams.ops.column_names:
        return {}  # (without the ops' launching threads, no stream is known to be another thread's)
    # The hand-overs among the waits (in CPU order): the waiting thread launches nothing on the
    # stream waited for, and some thread does. Asked once per (stream, thread) pair.
    pairs, which = np.unique(np.stack([from_[real], by[real]]), axis=1, return_inverse=True)
    handing = np.asarray([len(on := op_streams.threads_using(int(f))) > 0 and int(t) not in on.tolist()
                          for f, t in zip(pairs[0].tolist(), pairs[1].tolist())], dtype=bool)
    handovers = real[handing[np.asarray(which).reshape(-1)]]
    lo, hi = np.searchsorted(cpu[handovers], cpu_start, side="left"), np.searchsorted(cpu[handovers], cpu_end, side="right")
    asked = np.flatnonzero(hi > lo)
    if len(asked) == 0:
        return {}
    placed = (op_phase >= 0) & (op_streams.rows >= 0) & op_streams.computes
    computed = set(zip(op_phase[placed].tolist(), op_streams.rows[placed].tolist()))  # (phase, stream row)
    out: dict[int, list[int]] = {}
    for i in asked.tolist():
        mine = handovers[lo[i]:hi[i]]
        rows = [c for c in dict.fromkeys(into[mine[by[mine] == keys[i]]].tolist())
                if op_streams.computing_streams[c] and (i, c) in computed]
        if rows:
            out[i] = rows
    return out


def _read_back_votes(clock: StreamClock, ops: pa.Table, op_streams: _OpStreams, phase_threads: frozenset) -> Callable[[int, int], dict]:
    """(thread key, pid) -> {stream row: device-to-host copies}: where a thread reads its results
    back (`.item()`, `.tolist()`, a copy to pinned memory), which is its current stream; a copy
    on a stream that only copies counts for the stream that stream was last forked off before it
    (vLLM's asynchronous output copy; a loop thread uploading inputs and copying a worker's
    results off), where that one computes and the copy's thread put nothing on the copy stream
    but transfers to and from the host: a stream forked off NCCL's (a worker joining a
    collective back into its current stream, which only copies), or one its thread copies
    device to device or fills memory on (that thread works there), keeps its copy; so does one
    made to wait for two computing streams in the run of waits before the copy (which of the two
    is the thread's is not told by the order it waited for them). A thread that read nothing
    back answers with the copies of its process's threads that hold no phases (a helper reading
    back for it; another phase thread's copies are on its own current stream)."""
    name = ops["name"] if ops.num_rows else None
    is_d2h = equals(name, "memcpy DtoH") if ops.num_rows and "launch_tid" in ops.column_names else np.zeros(ops.num_rows, bool)
    d2h = np.flatnonzero(is_d2h)
    rows = op_streams.rows[d2h].copy()
    launch = clock.op_instants[d2h]
    copy_only = np.unique(rows[(rows >= 0) & ~op_streams.computing_streams[rows]]).tolist()
    host_transfer = (is_d2h | equals(name, "memcpy HtoD")) if copy_only else is_d2h
    for r in copy_only:
        working_there = np.unique(op_streams.threads[(op_streams.rows == r) & ~host_transfer])  # threads that put device-side work on r
        mine = np.flatnonzero((rows == r) & ~np.isin(op_streams.threads[d2h], working_there))
        forks = np.flatnonzero((clock.join_into == r) & (clock.join_from != r))
        at = np.searchsorted(clock.join_cpu[forks], launch[mine], side="left") - 1
        source = np.where(at >= 0, clock.join_from[forks[np.maximum(at, 0)]], -1) if len(forks) else np.full(len(mine), -1, np.int64)
        moved = (source >= 0) & op_streams.computing_streams[source]
        if moved.any():
            # The computing streams r waited for in the run of waits that holds the last one before
            # the copy (since r's op before that wait: copies after it in a row say nothing new):
            # one, or no telling.
            on_r = np.sort(clock.op_instants[op_streams.rows == r])
            before = np.searchsorted(on_r, clock.join_cpu[forks[np.maximum(at, 0)]], side="left") - 1
            since = np.where(before >= 0, on_r[np.maximum(before, 0)], I64_MIN)
            lo = np.searchsorted(clock.join_cpu[forks], since, side="right")
            for k in np.flatnonzero(moved).tolist():
                waited = clock.join_from[forks[lo[k]:at[k] + 1]]
                moved[k] = len(np.unique(waited[op_streams.computing_streams[waited]])) <= 1
        rows[mine[moved]] = source[moved]
    by_thread: dict[int, dict[int, int]] = {}
    by_process: dict[int, dict[int, int]] = {}
    for k, p, r in zip(op_streams.threads[d2h].tolist(), op_streams.pid[d2h].tolist(), rows.tolist()):
        by_thread.setdefault(k, {})[r] = by_thread.get(k, {}).get(r, 0) + 1
        if k not in phase_threads:
            by_process.setdefault(p, {})[r] = by_process.get(p, {}).get(r, 0) + 1
    return lambda key, p: by_thread.get(key) or by_process.get(p) or {}


def _phase_before(keys: np.ndarray, cpu_start: np.ndarray, cycle: np.ndarray) -> np.ndarray:
    """Per phase (its thread's ``keys``): the phase before it on its thread, in its cycle (-1:
    none, or no cycle)."""
    order = np.lexsort((cpu_start, keys))
    prev = np.full(len(keys), -1, dtype=np.int64)
    same = (keys[order][1:] == keys[order][:-1]) & (cycle[order][1:] == cycle[order][:-1]) & (cycle[order][1:] >= 0)
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _forks_of(clock: StreamClock, op_streams: _OpStreams, op_phase: np.ndarray, candidate: np.ndarray, keys: np.ndarray, ph_pid: np.ndarray,
              cpu_start: np.ndarray, cpu_end: np.ndarray, cycle: np.ndarray, read_back: Callable[[int, int], dict]) -> _Forks:
    """What ``_forked_callers`` reads for the ``candidate`` phases (``keys``: each phase's
    thread): their ops, the pairs of streams that wait for each other in their windows, which
    streams compute or only pass."""
    into, from_, cpu, rec_cpu, w_thread = _relayed_forks(clock.join_into, clock.join_from, clock.join_cpu, clock.join_record_cpu,
                                                         clock.join_thread, op_streams.computing_streams, _passing_streams(clock), clock.op_launch)
    sel = np.flatnonzero((op_phase >= 0) & candidate[np.maximum(op_phase, 0)])
    o_phase = op_phase[sel]
    o_row = op_streams.rows[sel]
    o_launch = clock.op_instants[sel]
    passing = _passing_streams(clock)
    n_streams = max(len(clock.keys), 1)
    pair = np.minimum(into, from_) * n_streams + np.maximum(into, from_)  # unordered: waits either way
    pair[into == from_] = -1
    # Per pair of streams: the candidate phases with a wait between the two in their CPU window,
    # and the first such wait (waits are in CPU order), found for all pairs at once.
    cand = np.flatnonzero(candidate)
    w_i, which = explode_slices(np.searchsorted(cpu, cpu_start[cand], side="left"), np.searchsorted(cpu, cpu_end[cand], side="left"))
    ph_i = cand[which]
    own = _own_waits(w_thread, keys, op_phase, op_streams.threads)
    keep = (pair[w_i] >= 0) & own(ph_i, w_i)
    ph_i, w_i = ph_i[keep], w_i[keep]
    order = np.lexsort((w_i, ph_i, pair[w_i]))  # by pair, then phase, then wait
    ph_i, w_i = ph_i[order], w_i[order]
    pq = pair[w_i]
    first_of = np.r_[True, (pq[1:] != pq[:-1]) | (ph_i[1:] != ph_i[:-1])] if len(pq) else np.zeros(0, bool)
    ph_i, w_i, pq = ph_i[first_of], w_i[first_of], pq[first_of]
    cuts = np.flatnonzero(np.r_[True, pq[1:] != pq[:-1], True]) if len(pq) else np.zeros(1, np.int64)
    pairs = tuple(_StreamPair(int(q), np.flatnonzero(pair == q), ph_i[a:b], w_i[a:b]) for q, a, b in zip(pq[cuts[:-1]].tolist(), cuts[:-1].tolist(), cuts[1:].tolist()))
    return _Forks(into=into, from_=from_, cpu=cpu, rec_cpu=rec_cpu, n_streams=n_streams, pairs=pairs,
                  compute_streams=op_streams.computing_streams, passing=passing,
                  quiet=_waits_for_quiet_streams(from_, op_streams.computing_streams, passing), o_phase=o_phase, o_row=o_row, o_launch=o_launch,
                  o_computes=op_streams.computes[sel], threads_on=op_streams.threads_on, o_thread=op_streams.threads[sel],
                  cpu_start=np.asarray(cpu_start, np.int64), cpu_end=np.asarray(cpu_end, np.int64),
                  cycle=np.asarray(cycle, np.int64), read_back=read_back, phase_thread=keys, phase_pid=ph_pid, own_wait=own,
                  **_phases_by_thread(keys, np.asarray(cpu_start, np.int64), np.asarray(cpu_end, np.int64)))


def _own_waits(w_thread: np.ndarray, keys: np.ndarray, op_phase: np.ndarray, op_thread: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """(phases, waits) -> per pair, whether the wait was made by one of the phase's threads: its
    range's, or one that launched its ops (or the wait's call is not in the trace). Two threads
    that take turns (vLLM's DBO micro-batches) each fork and join the same two streams; the
    other thread's waits within a phase's window are none of that phase's forks or joins."""
    keys, w_thread = np.asarray(keys, np.int64), np.asarray(w_thread, np.int64)
    placed = np.flatnonzero(op_phase >= 0)
    threads, dense = np.unique(np.r_[np.asarray(op_thread, np.int64)[placed], w_thread], return_inverse=True)
    n = max(len(threads), 1)
    launched_on = np.unique(op_phase[placed].astype(np.int64) * n + dense[:len(placed)])  # (phase, thread) that launched its ops
    w_dense = dense[len(placed):]

    def own(ph: np.ndarray, w: np.ndarray) -> np.ndarray:
        ph = np.asarray(ph, np.int64)
        t = w_thread[w]
        code = ph * n + w_dense[w]
        at = np.minimum(np.searchsorted(launched_on, code), max(len(launched_on) - 1, 0))
        launched = (launched_on[at] == code) if len(launched_on) else np.zeros(len(code), bool)
        return (t < 0) | (t == keys[ph]) | launched
    return own


def _relayed_forks(into: np.ndarray, from_: np.ndarray, cpu: np.ndarray, rec_cpu: np.ndarray, thread: np.ndarray, computing: np.ndarray,
                   passing: np.ndarray, op_launch: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The event waits (in CPU order), with a fork through a relay added: a computing stream X
    waiting for a record made on a stream R that does not compute (only copies or waits: vLLM's
    DBO comm stream, which DeepEP's own stream is forked off) right after R waited for a record
    made on a computing stream C (R's latest wait before that record, nothing put on R since)
    counts as X waiting for that record on C too (at the same CPU instant), the way
    ``_relayed_joins`` lets a join pass through such a stream. A copy stream that waited for C,
    then uploaded inputs that X waits for, forks nothing off C: its record marks its own work."""
    relay = np.flatnonzero((from_ >= 0) & ~computing[from_] & ~passing[from_] & (into != from_) & computing[into]) if len(into) else np.zeros(0, np.int64)
    if len(relay) == 0:
        return into, from_, cpu, rec_cpu, thread
    fed = np.flatnonzero((from_ >= 0) & (from_ != into))  # waits of one stream for another's record, in CPU order
    fed = fed[np.argsort(into[fed], kind="stable")]  # by the waiting stream, CPU order within
    add_w, add_k = [], []
    for r in np.unique(from_[relay]).tolist():
        mine = relay[from_[relay] == r]
        seg = fed[np.searchsorted(into[fed], r, side="left"):np.searchsorted(into[fed], r, side="right")]
        k = np.searchsorted(cpu[seg], rec_cpu[mine], side="left") - 1  # R's latest wait before the record X waits for
        ok = k >= 0
        mine, k = mine[ok], seg[k[ok]]
        launched = op_launch[r]
        quiet = np.searchsorted(launched, rec_cpu[mine], side="right") == np.searchsorted(launched, cpu[k], side="right")
        keep = quiet & computing[from_[k]] & (from_[k] != into[mine])
        add_w.append(mine[keep])
        add_k.append(k[keep])
    w, k = np.concatenate(add_w), np.concatenate(add_k)
    if len(w) == 0:
        return into, from_, cpu, rec_cpu, thread
    order = np.argsort(np.r_[cpu, cpu[w]], kind="stable")
    return (np.r_[into, into[w]][order], np.r_[from_, from_[k]][order], np.r_[cpu, cpu[w]][order], np.r_[rec_cpu, rec_cpu[k]][order],
            np.r_[thread, thread[w]][order])


class _StreamPair(NamedTuple):
    """Two streams that wait for each other (``_Forks.pairs``)."""

    code: int  # min(row) * n_streams + max(row)
    waits: np.ndarray  # the event waits between the two (indices of ``StreamClock.join_*``), in CPU order
    phases: np.ndarray  # the candidate phases with such a wait in their CPU window, sorted
    first_wait: np.ndarray  # per such phase: the first one in it


@dataclass(frozen=True)
class _Forks:
    """What ``caller_streams`` reads the forks and joins of one rank from: the resolved event
    waits (``StreamClock.join_*``), the pairs of streams that wait for each other, the streams
    that compute or only pass forks on, the ops of the candidate phases and the phases."""

    into: np.ndarray
    from_: np.ndarray
    cpu: np.ndarray
    rec_cpu: np.ndarray
    n_streams: int
    pairs: tuple[_StreamPair, ...]
    compute_streams: np.ndarray
    passing: np.ndarray
    quiet: np.ndarray  # per wait: for a stream that has ops and none that computes (``_waits_for_quiet_streams``)
    o_phase: np.ndarray
    o_row: np.ndarray
    o_launch: np.ndarray
    o_computes: np.ndarray  # per op: a kernel or graph that is no collective
    threads_on: Callable[[int], np.ndarray]  # stream row -> the threads that launched on it (``_OpStreams.threads_on``)
    o_thread: np.ndarray  # per op: the (process, thread) key of the thread that launched it
    cpu_start: np.ndarray
    cpu_end: np.ndarray
    cycle: np.ndarray
    thread: np.ndarray  # per phase: its thread, numbered
    by_thread: np.ndarray  # the phases by thread, then CPU start
    thread_starts: np.ndarray  # their (thread, start) keys, sorted (``_phases_by_thread``)
    base: int
    span: int
    read_back: Callable[[int, int], dict]  # (thread key, pid) -> {stream row: copies read back there} (``_read_back_votes``)
    phase_thread: np.ndarray  # per phase: its thread's key (``thread_keys``)
    phase_pid: np.ndarray
    own_wait: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (phases, waits) -> made by the phase's own threads (``_own_waits``)


def _forked_callers(f: _Forks, row: np.ndarray, later_phases: bool, on_caller_only: bool = False) -> np.ndarray:
    """Per phase: the stream row of its caller where its stream ``row`` is a side stream of it
    (``caller_streams``' rule), else -1; joins in a later phase count with ``later_phases``
    (with ``on_caller_only``, only for phases on the caller by evidence: they computed there
    before the fork and after it, or their thread reads results back there more).
    Each pair of streams looks only at its phases on the side stream of the two (``cand``)."""
    caller = np.full(len(row), -1, dtype=np.int64)
    mine = np.flatnonzero((f.o_row >= 0) & (f.o_row == row[f.o_phase]))  # the ops on their phase's stream
    n_mine = np.bincount(f.o_phase[mine], minlength=len(row))
    mine = mine[np.argsort(f.o_phase[mine], kind="stable")]  # by phase
    mine_phase = f.o_phase[mine]
    passed: dict[int, np.ndarray] = {}

    def passes(stream_row: int) -> np.ndarray:
        # Per thread (numbered): how many of its phases pass collectives or copies through the stream.
        if stream_row not in passed:
            through = _passed_through(f, stream_row, np.arange(len(row)), len(row))
            passed[stream_row] = np.bincount(f.thread[through], minlength=int(f.thread.max(initial=-1)) + 1)
        return passed[stream_row]

    for q, waits, with_wait, first_wait in f.pairs:
        for side, other in ((q // f.n_streams, q % f.n_streams), (q % f.n_streams, q // f.n_streams)):
            if f.compute_streams[side] and not f.compute_streams[other]:
                # A stream that only copies or communicates is no computing stream's caller (an
                # input stream the forward stream waits for), nor is one that runs nothing in the
                # whole trace (a side stream idle this run, which the phase joins and forks again
                # like any other: a thread's current stream computes). Either is the caller of a
                # side stream that does not compute: a worker whose current stream only copies,
                # where ProcessGroupNCCL forks NCCL's stream off that current stream (the thread
                # that launched on both, checked below), or a side stream whose context holds
                # only a collective.
                continue
            on = row[with_wait] == side
            cand, first = with_wait[on], first_wait[on]  # phases on side, sorted; the first wait between the two in each
            if len(cand) == 0:
                continue
            first_in = f.into[first] == side
            if f.passing[side]:
                # A phase moved onto a stream with no ops: on to the stream it was forked off.
                caller[cand[first_in]] = other
                continue
            # The candidates' ops on their stream, and each one's phase among them.
            pos, at = explode_slices(np.searchsorted(mine_phase, cand, side="left"), np.searchsorted(mine_phase, cand, side="right"))
            if len(pos) == 0:
                continue
            on_side = mine[pos]
            ph_of = cand[at]
            if f.compute_streams[side]:
                # Two computing streams wait for each other in turn, so either can look
                # forked off the other: the caller forks first within the phase (the first
                # wait between them is the side waiting for it) and joins back (below). Once
                # forked so, the side's ops need no fork of their own: one relaunched after a
                # join (it needs only its own stream's earlier work) still runs for the caller.
                # A phase that first joins the side's earlier work and then forks it anew forks
                # it too, where the caller is its thread's current stream by where the thread
                # reads results back (``_read_back_votes``: more on the caller than on the side).
                # A plan stream taking turns with the forward stream, or an input stream that
                # computes, waits like that too, but results are read back on the forward stream.
                fork_cpu = _first_fork(f, waits, side, cand)
                votes = [f.read_back(k, p) for k, p in zip(f.phase_thread[cand].tolist(), f.phase_pid[cand].tolist())]
                # The caller is the thread's current stream where it reads back there more, or
                # where the phase passes its collectives or copies through it (forks a stream that
                # does not compute off it and joins it back, as ProcessGroupNCCL does).
                current = np.zeros(len(row), dtype=bool)
                current[cand] = [v.get(other, 0) > v.get(side, 0) for v in votes]
                current |= _passed_through(f, other, cand, len(row))
                # Computed on the caller before the fork and after it (a layer beside the side's),
                # or the caller is the current stream: the phase was on the caller.
                on_caller = _computed_around_fork(f, other, cand, fork_cpu, len(row)) | current
                # A join of the side's earlier work, then a fork: also where more of the thread's
                # phases pass their collectives or copies through the caller than through the side
                # (a count over the thread tells nothing of where this phase's work went).
                relaxed = np.zeros(len(row), dtype=bool)
                relaxed[cand] = ~first_in & (current[cand] | (passes(other)[f.thread[cand]] > passes(side)[f.thread[cand]]))
                forks_here = first_in | relaxed[cand]
                forked = forks_here[at] & (f.o_launch[on_side] > fork_cpu[at]) & (f.o_launch[on_side] != I64_MIN)
            else:
                # Each op launched while the latest wait between the two was the fork.
                last = np.searchsorted(f.cpu[waits], f.o_launch[on_side], side="left") - 1
                fork = waits[np.maximum(last, 0)]
                forked = (last >= 0) & (f.into[fork] == side) & (f.cpu[fork] >= f.cpu_start[ph_of]) & (f.o_launch[on_side] != I64_MIN)
            ok = np.bincount(at[forked], minlength=len(cand)) == n_mine[cand]  # every op forked
            if not f.compute_streams[side] and not f.passing[other]:
                # Only a stream the thread that launched the copies launched on is their caller:
                # a loop thread whose copy stream waits for a model thread's stream (and never
                # launched there) copies results off on its own current stream. (The thread that
                # launched them, not the one holding the range: a worker thread's copies taken
                # into a scheduler's phase are forked off the worker's stream.)
                own = np.isin(f.o_thread[on_side], f.threads_on(other))
                ok &= np.bincount(at[own], minlength=len(cand)) > 0
            if f.compute_streams[side]:
                # The join: the first wait of the caller for a record made on the side
                # after the op was launched (a wait for a record of earlier work is none),
                # directly or through a stream that only copies or communicates (``_relayed_joins``).
                joins = waits[f.into[waits] == other]
                relay_cpu, relay_rec = _relayed_joins(f, side, other)
                j_cpu, j_rec = np.r_[f.cpu[joins], relay_cpu], np.r_[f.rec_cpu[joins], relay_rec]
                by_record = np.argsort(j_rec, kind="stable")
                j_cpu, j_rec = j_cpu[by_record], j_rec[by_record]
                earliest_from = np.r_[np.minimum.accumulate(j_cpu[::-1])[::-1], I64_MAX]  # of the joins from each on
                join_cpu = earliest_from[np.searchsorted(j_rec, f.o_launch[on_side], side="left")]
                joined = forked & (join_cpu != I64_MAX)
                back = joined & (join_cpu <= f.cpu_end[ph_of])  # within the phase (a call returning as it closed too)
                if later_phases:
                    # A phase that computed on the caller both before the fork and after it (a
                    # layer beside the side's) was on it: a join as late as a later cycle's still
                    # brings the side back to it. Otherwise the join must be in its cycle: a
                    # phase whose work after the fork all went to the side (SGLang's forward
                    # stream, which the scheduler's waits for a cycle later), or a compute stream
                    # fed by a prefetch stream it had not used in the phase before (which may
                    # wait for the compute stream later on, to reuse its buffers). A join inside
                    # a later phase of that same shape (which joins first, then forks anew) is
                    # one on the caller as well: that phase is read there by this very rule.
                    later = joined & _in_a_later_phase_on(join_cpu, ph_of, other, row, f, on_caller[ph_of], also_on=(side, relaxed))
                    back |= later & on_caller[ph_of] if on_caller_only else later
                    if len(j_cpu):  # a side the caller joins back elsewhere: none by the trace's end (its last cycle)
                        back |= forked & (join_cpu == I64_MAX) & on_caller[ph_of]
                ok &= forks_here & (np.bincount(at[back], minlength=len(cand)) > 0)
            caller[cand[ok & (n_mine[cand] > 0)]] = other
    return caller


def _relayed_joins(f: _Forks, side: int, caller: int) -> tuple[np.ndarray, np.ndarray]:
    """Joins of ``side`` into ``caller`` through a relay R, a stream that does not compute (a
    copy stream taking the side's results, NCCL's stream for a collective issued on the side):
    the caller waits for a record made on R after R waited for a record made on the side.
    Returns, per such wait of the caller, its CPU instant and that of the record on the side it
    reaches (the latest R waited for before the record on R the caller waits for)."""
    into, from_ = f.into, f.from_
    via = np.flatnonzero((into == caller) & (from_ != side) & (from_ != caller) & (from_ >= 0))
    if len(via) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    via = via[~f.compute_streams[from_[via]]]
    out_cpu, out_rec = [], []
    for r in np.unique(from_[via]).tolist():
        fed = np.flatnonzero((into == r) & (from_ == side))  # R waiting for the side, in CPU order
        if len(fed) == 0:
            continue
        mine = via[from_[via] == r]
        at = np.searchsorted(f.cpu[fed], f.rec_cpu[mine], side="left") - 1  # R's latest wait for the side before the record on R
        ok = at >= 0
        out_cpu.append(f.cpu[mine[ok]])
        out_rec.append(f.rec_cpu[fed[at[ok]]])
    if not out_cpu:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_cpu), np.concatenate(out_rec)


def _forked_the_phase_before(clock: StreamClock, op_streams: _OpStreams, op_phase: np.ndarray, row: np.ndarray, prev: np.ndarray,
                             cpu_start: np.ndarray, cpu_end: np.ndarray) -> np.ndarray:
    """Per phase: the stream row of its caller C where its stream (``row``, as read) is a side
    stream S made ready ahead: forked off C (S waits for C) in the phase before it (``prev``:
    same thread and cycle, read on C), nothing put on S between that fork and this phase's
    start, no other wait of S within this phase, S and C both computing, and, within this
    phase, computing work launched on C beside S's (before the join) and C waiting for a record
    made on S after this phase's last launch there (the join). Else -1. ``caller_streams``'
    rule wants the fork within the phase; this one is that rule for a fork made one phase
    early. A stream fed by an input stream that computes has no work of its own on the input
    stream before it hands it the next batch: it stays where it is."""
    out = np.full(len(row), -1, dtype=np.int64)
    into, from_, cpu, rec_cpu = clock.join_into, clock.join_from, clock.join_cpu, clock.join_record_cpu
    real = np.flatnonzero(into != from_)  # the waits, in CPU order
    found_ph, found_c = [], []
    for r in np.unique(row[(prev >= 0) & (row >= 0)]).tolist():
        w = real[into[real] == r]
        ph = np.flatnonzero((row == r) & (prev >= 0))
        if len(w) == 0:
            continue
        k = np.searchsorted(cpu[w], cpu_start[ph], side="left") - 1  # the latest wait of S before the phase
        fork = w[np.maximum(k, 0)]
        c = from_[fork]
        ok = ((k >= 0) & (cpu[fork] >= cpu_start[prev[ph]]) & (row[prev[ph]] == c)
              & (np.searchsorted(cpu[w], cpu_end[ph], side="left") - 1 == k))  # none within the phase
        ok[ok] = ~clock.queued_between(np.full(int(ok.sum()), r), cpu[fork[ok]], cpu_start[ph[ok]])
        found_ph.append(ph[ok]), found_c.append(c[ok])
    if not found_ph or not sum(len(x) for x in found_ph):
        return out
    ph, c = np.concatenate(found_ph), np.concatenate(found_c)
    # Each such phase's ops on its own stream and on the caller, and whether both streams compute.
    o_row, comp, computing = op_streams.rows, op_streams.computes, op_streams.computing_streams
    mine = np.flatnonzero(np.isin(op_phase, ph))
    for i, caller in zip(ph.tolist(), c.tolist()):
        side = int(row[i])
        if not (computing[side] and computing[caller]):
            continue
        on = mine[op_phase[mine] == i]
        side_launch = clock.op_instants[on[o_row[on] == side]]
        caller_launch = clock.op_instants[on[(o_row[on] == caller) & comp[on]]]
        if len(side_launch) == 0 or len(caller_launch) == 0:
            continue
        last = int(side_launch.max())
        joins = real[(into[real] == caller) & (from_[real] == side)]
        join = joins[(cpu[joins] >= last) & (cpu[joins] <= cpu_end[i]) & (rec_cpu[joins] >= last)]
        if len(join) and (caller_launch < cpu[join[0]]).any():
            out[i] = caller
    return out


def _joined_into_the_threads_stream(clock: StreamClock, op_streams: _OpStreams, op_phase: np.ndarray, row: np.ndarray, keys: np.ndarray,
                                    ph_pid: np.ndarray, cpu_start: np.ndarray, cpu_end: np.ndarray,
                                    votes_of: Callable[[int, int], dict]) -> np.ndarray:
    """Per phase: the stream row of its caller C where its stream S (``row``, as read) is a side
    stream whose work in the phase was only joined, never forked: after the phase's last launch
    on S, C waited for a record made on S after that launch; and either C computed within the
    phase (beside S's work or after the join) and S never waited for C within the phase (a plan
    stream whose inputs come from the CPU, SGLang's EAGLE V2 worker), or C is where the phase's
    thread reads its results back more than on S (``_read_back_votes``: a phase that only
    uploads inputs on an input stream, forked off C or not, and makes C wait for them); both
    compute; the phase read nothing back on S; the thread's other phases are read on C more
    often than on S (where they do not tell, none or as many on each, the thread reads back on
    C and never on S: a lone phase per cycle); and S is no other thread's main stream, the one
    most of its phases are read on (``keys``: each phase's thread; the other phases are those with no such join). Where several streams joined
    S, the first that passes. Else -1.

    The waits alone read both ways: the same ones are a caller S's work, then a side stream C
    forked off it (C waiting for S) that computes unjoined (SGLang's overlap scheduler merging
    its schedule and forward steps), or a thread whose current stream S another thread's stream
    C picks work up from. Which of the two streams the threads keep their other phases on tells
    them apart; where that does not, the phase stays."""
    out = np.full(len(row), -1, dtype=np.int64)
    into, from_, cpu, rec_cpu = clock.join_into, clock.join_from, clock.join_cpu, clock.join_record_cpu
    real = np.flatnonzero(into != from_)  # the waits, in CPU order
    computing = op_streams.computing_streams
    # Phases with a wait for a record on their own stream within their window: the only ones asked.
    asked = np.zeros(len(row), dtype=bool)
    for r in np.unique(row[row >= 0]).tolist():
        out_of_r = cpu[real[from_[real] == r]]
        on_r = np.flatnonzero(row == r)
        asked[on_r] = np.searchsorted(out_of_r, cpu_end[on_r], side="right") > np.searchsorted(out_of_r, cpu_start[on_r], side="left")
    if not asked.any():
        return out
    o_row, comp = op_streams.rows, op_streams.computes
    w_lo, w_hi = np.searchsorted(cpu[real], cpu_start, side="left"), np.searchsorted(cpu[real], cpu_end, side="right")
    mine = np.flatnonzero(np.isin(op_phase, np.flatnonzero(asked)))
    mine = mine[np.argsort(op_phase[mine], kind="stable")]
    lo = np.searchsorted(op_phase[mine], np.arange(len(row)), side="left")
    hi = np.searchsorted(op_phase[mine], np.arange(len(row)), side="right")
    read_back = equals(op_streams.ops["name"].take(pa.array(mine)), "memcpy DtoH") if len(mine) else np.zeros(0, dtype=bool)
    callers: dict[int, list[int]] = {}
    for i in np.flatnonzero(asked).tolist():
        side = int(row[i])
        on = mine[lo[i]:hi[i]]
        on_side = o_row[on] == side
        side_launch = clock.op_instants[on[on_side]]
        if len(side_launch) == 0 or not computing[side] or read_back[lo[i]:hi[i]][on_side].any():
            continue
        last = int(side_launch.max())
        window = real[w_lo[i]:w_hi[i]]  # the waits within the phase's CPU window
        forked = set(from_[window[into[window] == side]].tolist())  # S waited for these within the phase
        joins = window[(from_[window] == side) & (cpu[window] >= last) & (rec_cpu[window] >= last)]
        joined_into = [c for c in dict.fromkeys(into[joins].tolist()) if computing[c]]
        votes = votes_of(int(keys[i]), int(ph_pid[i])) if joined_into else {}
        # Where the thread reads back on C more than on S, that settles which of the two is its
        # current stream, S's waits for C (an input stream forked off it for a second upload) too.
        found = [c for c in joined_into
                 if votes.get(c, 0) > votes.get(side, 0) or (c not in forked and ((o_row[on] == c) & comp[on]).any())]
        if found:
            callers[i] = found
    if not callers:
        return out
    # How many of each thread's other phases are read on each stream (phases that launched
    # nothing say nothing), and which threads read phases on each stream.
    others = np.ones(len(row), dtype=bool)
    others[list(callers)] = False
    others &= row >= 0
    count: dict[tuple[int, int], int] = {}
    threads_on: dict[int, set[int]] = {}
    for k, r in zip(keys[others].tolist(), row[others].tolist()):
        count[(k, r)] = count.get((k, r), 0) + 1
        threads_on.setdefault(r, set()).add(k)
    main: dict[int, int] = {}  # per thread: the most phases it reads on one stream
    for (t, _), n in count.items():
        main[t] = max(main.get(t, 0), n)
    for i, found in callers.items():
        k, side = int(keys[i]), int(row[i])
        if any(count[(t, side)] == main[t] for t in threads_on.get(side, ()) if t != k):
            continue  # S is another thread's main current stream (a worker's, picked up from)
        # Where the thread's other phases do not tell the two apart (it has none, or as many on
        # each), the thread reading results back on C and never on S does.
        votes = votes_of(k, int(ph_pid[i]))
        out[i] = next((c for c in found if count.get((k, c), 0) > count.get((k, side), 0)
                       or (count.get((k, c), 0) == count.get((k, side), 0) and votes.get(c, 0) > 0 and votes.get(side, 0) == 0)), -1)
    return out


def _first_fork(f: _Forks, waits: np.ndarray, side: int, cand: np.ndarray) -> np.ndarray:
    """Per phase of ``cand``: the CPU time of the first wait of ``side`` among ``waits`` (the
    waits between it and another stream, in CPU order) made within the phase's CPU window by
    one of the phase's own threads (``_own_waits``: a fork of ``side`` off the other); I64_MAX
    where there is none."""
    forks = waits[f.into[waits] == side]
    out = np.full(len(cand), I64_MAX, dtype=np.int64)
    if len(forks) == 0:
        return out
    cpu = f.cpu[forks]
    w_i, which = explode_slices(np.searchsorted(cpu, f.cpu_start[cand], side="left"), np.searchsorted(cpu, f.cpu_end[cand], side="left"))
    ok = f.own_wait(np.asarray(cand)[which], forks[w_i])
    w_i, which = w_i[ok], which[ok]
    # The first of each phase's own waits (pairs come in phase order, waits in CPU order within).
    first = np.r_[True, which[1:] != which[:-1]] if len(which) else np.zeros(0, bool)
    out[which[first]] = cpu[w_i[first]]
    return out


def _computed_around_fork(f: _Forks, caller: int, cand: np.ndarray, fork_cpu: np.ndarray, n_phases: int) -> np.ndarray:
    """Per phase (of ``n_phases``): whether it is one of ``cand`` that launched computing work
    on the stream ``caller`` both before its fork (``fork_cpu``, per phase of ``cand``) and
    after it."""
    fork_at = np.full(n_phases, I64_MAX, dtype=np.int64)
    fork_at[cand] = fork_cpu
    caller_ops = (f.o_row == caller) & f.o_computes
    at = fork_at[f.o_phase]
    after = np.zeros(n_phases, dtype=bool)
    after[f.o_phase[caller_ops & (f.o_launch > at) & (at != I64_MAX)]] = True
    earlier = np.zeros(n_phases, dtype=bool)
    earlier[f.o_phase[caller_ops & (f.o_launch < at)]] = True
    return earlier & after


def _passed_through(f: _Forks, caller: int, cand: np.ndarray, n_phases: int) -> np.ndarray:
    """Per phase (of ``n_phases``): whether it is one of ``cand`` that, within its CPU window,
    forked a stream that does not compute (NCCL's, a copy stream) off ``caller`` and later
    joined it back into ``caller``: what ProcessGroupNCCL does with every collective, and an
    engine with its input or output copies, on the thread's current stream."""
    out = np.zeros(n_phases, dtype=bool)
    out[cand] = _round_trips(f.into, f.from_, f.cpu, f.quiet, caller, f.cpu_start[cand], f.cpu_end[cand])
    return out


def _passing_streams(clock: StreamClock) -> np.ndarray:
    """Per stream row (and a last False for row -1): whether it has no op at all, so that it
    only passes forks on (a side stream whose context holds nothing but a collective, which
    forks NCCL's stream off it)."""
    return np.array([len(t) == 0 for t in clock.op_launch] + [False], dtype=bool)


def _waits_for_quiet_streams(from_: np.ndarray, computing: np.ndarray, passing: np.ndarray) -> np.ndarray:
    """Per event wait (``from_``: the stream row of its record): whether it waits for a stream
    that has ops and none that computes (NCCL's, a copy stream)."""
    return ~computing[from_] & ~passing[from_] & (from_ >= 0)


def _round_trips(into: np.ndarray, from_: np.ndarray, cpu: np.ndarray, quiet: np.ndarray, stream: int, start: np.ndarray,
                end: np.ndarray) -> np.ndarray:
    """Per CPU window [start, end]: whether a stream that does not compute (``quiet``, per
    wait: of the stream waited for) was forked off ``stream`` within it and later joined back
    into ``stream`` within it (``into``, ``from_``, ``cpu``: event waits in CPU order)."""
    out = np.zeros(len(start), dtype=bool)
    joins = np.flatnonzero((into == stream) & (from_ != stream) & quiet)
    if len(joins) == 0 or len(start) == 0:
        return out
    forks = np.flatnonzero((from_ == stream) & (into != stream))
    for n in np.unique(from_[joins]).tolist():
        n_forks = cpu[forks[into[forks] == n]]
        n_joins = cpu[joins[from_[joins] == n]]
        if len(n_forks) == 0:
            continue
        # The first fork within each window, then a join after it within the window.
        at = np.searchsorted(n_forks, start, side="left")
        first = n_forks[np.minimum(at, len(n_forks) - 1)]
        has_fork = (at < len(n_forks)) & (first < end)
        after = np.searchsorted(n_joins, first, side="right")
        out |= has_fork & (after < len(n_joins)) & (n_joins[np.minimum(after, len(n_joins) - 1)] <= end)
    return out


def _in_a_later_phase_on(t: np.ndarray, ph: np.ndarray, stream_row: int, row: np.ndarray, f: _Forks,
                         later_cycles: np.ndarray, also_on: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """Per instant ``t[i]`` (a join made after phase ``ph[i]`` ended): it falls in a later phase
    (started after ``ph[i]``) of the same cycle (of a later one too, where ``later_cycles[i]``)
    and thread, one of the thread's last few started by then that still runs, that is read on
    ``stream_row`` (``row``: each phase's stream as read so far), or launched nothing: a phase
    whose only GPU call makes ``stream_row`` wait (the join) records its events there.
    ``also_on`` (a stream row, per phase): phases read on that row that count as read on
    ``stream_row`` where marked."""
    want = f.thread[ph] * f.span + np.clip(t - f.base, -1, f.span - 1)
    last = np.searchsorted(f.thread_starts, want, side="right") - 1
    # The thread's phases started by then, latest first: any of the last few that still runs,
    # began after ph in ph's cycle and is read on the stream (phases of a thread overlap where
    # nvtxRangeStart/End ranges sit inside others, or a cycle's first phase opens inside them).
    found = np.zeros(len(t), dtype=bool)
    for back in range(4):
        k = last - back
        h = f.by_thread[np.maximum(k, 0)]
        found |= ((k >= 0) & (f.thread[h] == f.thread[ph]) & (f.cpu_end[h] > t) & (f.cpu_start[h] > f.cpu_start[ph])
                  & (f.cycle[ph] >= 0) & ((f.cycle[h] == f.cycle[ph]) | (later_cycles & (f.cycle[h] > f.cycle[ph])))
                  & ((row[h] == stream_row) | (row[h] < 0) | ((row[h] == also_on[0]) & also_on[1][h] if also_on else False)))
    return found


def _phases_by_thread(keys: np.ndarray, cpu_start: np.ndarray, cpu_end: np.ndarray) -> dict:
    """``_Forks``' index of the phases by thread, then CPU start: one sorted key per phase,
    thread x span + (start - base), so that one search finds, for many (thread, instant) at once,
    each thread's latest phase started by then (other threads' phases never hide it)."""
    thread = np.unique(keys, return_inverse=True)[1].ravel().astype(np.int64)
    base = int(cpu_start.min()) if len(cpu_start) else 0
    span = max(int(cpu_start.max()), int(cpu_end.max())) - base + 2 if len(cpu_start) else 2
    if (int(thread.max()) + 1 if len(thread) else 1) * span >= 2**62:  # no room for the key: the phases' CPU span is ~146 years / threads
        thread = np.zeros_like(thread)
    sort_keys = thread * span + (cpu_start - base)
    order = np.argsort(sort_keys, kind="stable")
    return {"thread": thread, "by_thread": order, "thread_starts": sort_keys[order], "base": base, "span": span}


class CopyStreams:
    """Which streams only copy: streams of a process that ran kernels or CUDA graphs, none of
    them on that stream (an input stream, a KV-cache offload thread's stream). A thread that
    launches kernels records its events on the stream it computes on (torch's current stream),
    so such a stream is not where its phases are read (``thread_stream`` is), nor where the
    events of a process that launched nothing in its phases go; a thread that never launches a
    kernel (a loop thread that only uploads inputs and reads tokens) has only copy streams to
    record on. A thread whose only kernels are collectives runs them on NCCL's own stream,
    forked off its current stream: it has no stream of its own that computes (``thread_stream``,
    ``thread_runs_model``). Each answer is worked out when first asked."""

    def __init__(self, ops: pa.Table):
        self._ops = ops
        self._c = computes(ops) if ops.num_rows else np.zeros(0, bool)

    @functools.cached_property
    def _model(self) -> np.ndarray:
        """Per op: a kernel or graph that is no collective."""
        return runs_model(self._ops)

    def _columns(self, *names: str, model: bool = False) -> tuple[np.ndarray, ...]:
        """Columns of the computing ops, or (``model``) of those that are no collective (not
        kept: a copy of 8 bytes per op each)."""
        if self._ops.num_rows == 0:
            return tuple(np.zeros(0, np.int64) for _ in names)
        mask = self._model if model else self._c
        return tuple(int64s(self._ops[name], -1)[mask] for name in names)

    @functools.cached_property
    def _computing(self) -> np.ndarray:
        return distinct_few(_pack(*self._columns("pid", "device_id", "stream_id")))

    @functools.cached_property
    def _modelling(self) -> np.ndarray:
        return distinct_few(_pack(*self._columns("pid", "device_id", "stream_id", model=True)))

    @functools.cached_property
    def _computing_pids(self) -> np.ndarray:
        return distinct_few(self._columns("pid")[0])

    @functools.cached_property
    def _computing_threads(self) -> np.ndarray:
        return distinct_few(thread_keys(*self._columns("pid", "launch_tid")))

    @functools.cached_property
    def _threads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The keys (sorted) of the threads that ran kernels or graphs other than collectives,
        and each one's (device, stream) those ran longest on (ties: the lower packed stream)."""
        pid, dev, stream, tid, start, end = self._columns("pid", "device_id", "stream_id", "launch_tid", "start_ns", "end_ns", model=True)
        thread_u, t_code = np.unique(thread_keys(pid, tid), return_inverse=True)
        stream_u, s_code = np.unique(_pack(pid, dev, stream), return_inverse=True)
        cell = t_code.ravel() * len(stream_u) + s_code.ravel()
        cells = np.unique(cell)
        total = np.bincount(np.searchsorted(cells, cell), weights=np.clip(end - start, 0, None), minlength=len(cells))
        t_of, s_of = cells // max(len(stream_u), 1), cells % max(len(stream_u), 1)
        order = np.lexsort((s_of, -total, t_of))
        best = order[np.r_[True, t_of[order][1:] != t_of[order][:-1]]] if len(order) else order
        first = np.full(len(stream_u), -1, dtype=np.int64)
        first[s_code.ravel()[::-1]] = np.arange(len(s_code))[::-1]  # a row of each stream
        rows = first[s_of[best]]
        return thread_u, dev[rows], stream[rows]

    def of(self, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Per (pid, device, stream), streams < 0 excepted: whether it only copies."""
        pid = np.asarray(pid, dtype=np.int64)
        return (np.asarray(stream) >= 0) & isin_few(pid, self._computing_pids) & ~isin_few(_pack(pid, np.asarray(dev, np.int64), np.asarray(stream, np.int64)), self._computing)

    def collectives_only(self, keys: np.ndarray) -> np.ndarray:
        """Per stream key (``_pack``: ``StreamClock.keys``): whether it ran kernels, all of them
        collectives (NCCL's own stream, which no engine records its events on)."""
        keys = np.asarray(keys, np.int64)
        return isin_few(keys, self._computing) & ~isin_few(keys, self._modelling)

    def of_ops(self, ops: pa.Table) -> np.ndarray:
        if ops.num_rows == 0:
            return np.zeros(0, dtype=bool)
        return self.of(int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))

    def thread_computes(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """Per (pid, tid): whether that thread launched a kernel or a CUDA graph."""
        return np.isin(thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64)), self._computing_threads)

    def thread_runs_model(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """Per (pid, tid): whether that thread launched a kernel or a CUDA graph that is no
        collective (it has a stream of its own that computes: ``thread_stream``)."""
        if len(pid) == 0:
            return np.zeros(0, dtype=bool)
        return np.isin(thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64)), self._threads[0])

    def thread_stream(self, pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (pid, tid): the (device, stream) its kernels and graphs other than collectives
        ran longest on, where its events go (-1, -1 for a thread that launched none: collectives
        run on NCCL's stream, which no event of the thread's is recorded on)."""
        key = thread_keys(np.asarray(pid, np.int64), np.asarray(tid, np.int64))
        threads, dev, stream = self._threads
        if len(threads) == 0:
            return np.full(len(key), -1, np.int64), np.full(len(key), -1, np.int64)
        at = np.minimum(np.searchsorted(threads, key), len(threads) - 1)
        hit = threads[at] == key
        return np.where(hit, dev[at], -1), np.where(hit, stream[at], -1)


def busiest_streams(ops: pa.Table, copy_streams: CopyStreams | None = None) -> dict[int, tuple[int, int]]:
    """Per pid: the (device, stream) with the most GPU time, of the streams that compute where
    the process has any (where no phase launched anything, events would be recorded on the
    stream the process mostly works on; ``CopyStreams``)."""
    if ops.num_rows == 0:
        return {}
    pid = int64s(ops["pid"])
    dev = int64s(ops["device_id"], -1)
    stream = int64s(ops["stream_id"], -1)
    dur = np.clip(int64s(ops["end_ns"]) - int64s(ops["start_ns"]), 0, None)
    packed = _pack(pid, dev, stream)
    keys = distinct_few(packed)
    inv = np.searchsorted(keys, packed)
    first = np.full(len(keys), len(packed), dtype=np.int64)
    np.minimum.at(first, inv, np.arange(len(packed)))
    total = np.bincount(inv, weights=dur, minlength=len(keys))
    copies = (copy_streams or CopyStreams(ops)).of(pid[first], dev[first], stream[first])
    out: dict[int, tuple[int, int]] = {}
    for k in np.lexsort((-total, copies)):
        i = first[k]
        out.setdefault(int(pid[i]), (int(dev[i]), int(stream[i])))
    return out


def phase_boundaries(
    clock: StreamClock,
    pid: np.ndarray,
    cpu_start: np.ndarray,
    cpu_end: np.ndarray,
    cycle: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    fallback: dict[int, tuple[int, int]] | None = None,
    tid: np.ndarray | None = None,
    own_stream_only: bool = False,
    ended_elsewhere: np.ndarray | None = None,
    range_end: np.ndarray | None = None,
    cycle_ends: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The boundary rule (module doc), for phase instances in time order, on each timeline
    (``timelines``: a process, or each of its threads where they run cycles of their own).

    Returns (gpu_boundary_start, gpu_boundary_end, device, stream) per phase: the boundaries
    (int64 min for both where the phase's process has no GPU stream at all; a phase's GPU time
    is end - start) and the stream they were read on (-1: none), inherited where the phase
    launched nothing. ``fallback``: per pid, the stream to use when none of the process's
    phases launched anything (``busiest_streams``). ``own_stream_only``: each boundary read on
    the phase's own stream alone and never backwards along that stream's phases only (what
    events on each phase's own stream would read; see ``tiled_off_their_stream``).
    ``ended_elsewhere``: phases whose range another thread ended (which one the trace does not
    keep): no hand-off is taken from them (``_read_boundaries``). ``range_end``: the ranges' own
    CPU ends, where ``cpu_end`` is where each end is read (``rank.read_ends``: later where
    another thread's launch call for it returned late); whether two phases overlap is told by
    these (default ``cpu_end``). ``cycle_ends``: filled per phase with where its cycle's end
    reads it (its boundary end, or later: the cycle's edge on the next cycle's stream that a
    last phase begun apart does not read, or work queued between two of its phases still
    running past its last phase: ``_read_boundaries``; int64 min where it has none).
    """
    range_end = cpu_end if range_end is None else range_end
    if cycle_ends is not None:
        cycle_ends[:] = I64_MIN
    n = len(cpu_start)
    start_b = np.full(n, I64_MIN, dtype=np.int64)
    end_b = np.full(n, I64_MIN, dtype=np.int64)
    dev_used = np.full(n, -1, dtype=np.int64)
    stream_used = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return start_b, end_b, dev_used, stream_used
    device = np.asarray(device, dtype=np.int64).copy()
    stream = np.asarray(stream, dtype=np.int64).copy()
    line = timelines(pid, cycle, tid)
    sequenced = in_sequence(pid, cycle, tid, cpu_start, range_end, line)
    for ln in np.unique(line):
        seq = np.flatnonzero(line == ln)
        d_s = (fallback or {}).get(int(pid[seq[0]]))
        if d_s is not None and (stream[seq] < 0).all():
            device[seq[0]], stream[seq[0]] = d_s  # the first phase reads the busiest stream; the rest inherit it
    row = clock.stream_index(pid, device, stream)
    for ln in np.unique(line):
        seq = np.flatnonzero(line == ln)  # this timeline's phases, in time order
        in_cycle = sequenced[seq]
        if in_cycle.all() or not (cycle[seq] >= 0).any():
            parts = [(seq, False)]
        else:
            # Phase ranges in no cycle (a range of a phase's name on another thread, a phase
            # before the first cycle range), and those held whole inside a phase range of
            # another thread (a helper thread's short range while the loop's phase runs), are
            # read alone: they are no neighbour of the cycles' other phases, lend them no
            # stream, and move none of their boundaries.
            parts = [(seq[in_cycle], False), (seq[~in_cycle], True)]
        keys = thread_keys(pid[seq], tid[seq]) if tid is not None else None
        # Thread first over the whole timeline: a thread's current stream is told by any of its
        # phases that launched, one read alone too (a warm-up before the first cycle range) ...
        whole = _fill_index(row[seq], keys)
        launched = np.isin(keys, keys[row[seq] >= 0]) if keys is not None else np.zeros(len(seq), dtype=bool)
        for part, alone in parts:
            at = np.searchsorted(seq, part)
            if alone:  # its thread's stream, else the timeline's at its time
                filled = whole[at] if len(whole) else np.full(len(part), -1, np.int64)
            else:
                # ... but a phase in sequence takes its thread's in-sequence phases' stream where
                # they launched (a warm-up under graph capture's side stream lends none), else
                # the sequence's phase before it; the whole timeline lends only to a thread that
                # launched nothing in sequence.
                k = keys[at] if keys is not None else None
                filled = at[_fill_index(row[part], k)] if (row[part] >= 0).any() else np.full(len(part), -1, np.int64)
                if len(whole) and k is not None:
                    in_sequence_too = np.isin(k, k[row[part] >= 0])
                    filled = np.where(launched[at] & ~in_sequence_too, whole[at], filled)
            # (-1: nothing lends the phase a stream)
            srow = np.where(filled >= 0, row[seq][np.maximum(filled, 0)], -1)
            src = np.where(filled >= 0, seq[np.maximum(filled, 0)], part)
            dev_used[part] = np.where(srow >= 0, device[src], -1)
            stream_used[part] = np.where(srow >= 0, stream[src], -1)
            if (srow < 0).all():
                continue  # no GPU work on this timeline: no GPU timeline to share
            threads = None
            if tid is not None:
                started = thread_keys(pid[part], tid[part])
                ended = np.where(ended_elsewhere[part], -1, started) if ended_elsewhere is not None else started  # -1: which thread is unknown
                threads = (started, ended)
            start_b[part], end_b[part], edge_b = _read_boundaries(clock, cpu_start[part], cpu_end[part], cycle[part], srow, alone, own_stream_only, threads,
                                                          range_end[part])
            if cycle_ends is not None:
                cycle_ends[part] = edge_b
    return start_b, end_b, dev_used, stream_used


def _read_boundaries(clock: StreamClock, t: np.ndarray, cpu_end: np.ndarray, cyc: np.ndarray, srow: np.ndarray,
                     alone: bool, own_stream_only: bool = False, threads: tuple[np.ndarray, np.ndarray] | None = None,
                     range_end: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The boundaries of a sequence of phases in time order (CPU starts ``t``, ends ``cpu_end``,
    cycles ``cyc``, stream rows ``srow``, ``threads``: the threads each started and ended on, -1
    where another, unknown one ended it): a phase ends where the next one of
    its cycle begins (what the thread did between the two scopes is the earlier phase's tail,
    as an event recorded at the later one's start reads it), unless GPU work was queued on
    either's stream between the two (work in no phase: SGLang's or vLLM's code between the
    scopes a preset marks, a phase left out of ``--phase``): then it ends at its CPU end, the
    later one begins at its CPU start on its own stream alone, and that work is in neither
    phase, only in the cycle. Where the next phase runs on another
    thread (a hand-off: a loop thread's prepare, a model thread's forward), the two meet at the
    earlier one's CPU end: the thread that ends a phase hands the cycle on there, and the time
    the other thread takes to pick it up is the later phase's (a real H200 trace, a model
    thread woken through a queue: 0.14 ms a cycle, where the engine's events put it). Where the
    next phase began before this one ended (``nvtxRangeStart/End`` ranges, or another thread's
    range opened before this one closed; also across a cycle's edge), no boundary is shared: each reads its own, this one's
    end at its CPU end, on its own stream, as the events each range's thread records there
    would (``range_end``: the ranges' own ends, which tell an overlap; ``cpu_end`` where each end
    is read). Each boundary between two phases of a cycle is read on both their streams, and
    boundaries never run backwards (a running maximum over start, end, start, end, ...; not
    across an overlap: the later phase, on its own stream, may begin before the earlier
    phase's start boundary, and the earlier one's end holds nothing back; nor across work
    between, on the GPU the two phases are on). A cycle's last phase ends where the next
    cycle's first begins, read on both streams too, unless it began apart from the phase before
    it (work between, an overlap): then on the next cycle's stream only where its own thread
    launched work there within its range, as what that stream held before (the work between,
    the overlapping phase's tail) is not its and its start never read it. Returns (starts,
    ends, cycle edges): the third, per phase, where its cycle's end reads it, at least its end:
    the cycle's edge read on both streams whatever of it the last phase took, and, after work
    between, the streams of the two phases around it at the later one's start (the cycle holds
    that work). ``alone``: phases that are no neighbours of each other (in no cycle), each read
    on its own stream from its CPU start to its CPU end."""
    if alone:
        a = np.maximum(t, clock.done(srow, t))
        z = np.maximum.reduce([a, cpu_end, clock.done(srow, cpu_end)])
        return a, z, z
    # A boundary is shared only by neighbours on one GPU: one thread driving two GPUs records a
    # phase's events on its own GPU's stream, which is ordered after nothing on the other GPU;
    # a phase whose next one is on the other GPU ends at its own CPU end, as an event there reads.
    gpu = _gpu_of_rows(clock, srow)
    same_gpu_prev = np.r_[False, gpu[1:] == gpu[:-1]]
    same_gpu_next = np.r_[gpu[1:] == gpu[:-1], False]
    same_cycle_next = np.r_[(cyc[1:] == cyc[:-1]) & (cyc[:-1] >= 0), False] & same_gpu_next
    prev_row = np.where(same_gpu_prev, np.r_[-1, srow[:-1]], -1) if not own_stream_only else srow
    # The next phase's stream too, also across a cycle's edge (a cycle ends where the GPU is done
    # with what it queued on either: the next cycle starts there).
    next_in_a_cycle = np.r_[(cyc[1:] >= 0) & (cyc[:-1] >= 0), False]
    next_row = np.where(next_in_a_cycle & same_gpu_next, np.r_[srow[1:], -1], -1) if not own_stream_only else srow
    t_next = np.where(same_cycle_next, np.r_[t[1:], 0], cpu_end)
    # An overlap also across a cycle's edge: a cycle's last range still open when the next
    # cycle's first began (nvtxRangeStart/End, the CPU a cycle ahead) holds that one back no more
    # than an overlap inside a cycle does.
    overlap = next_in_a_cycle & (np.r_[t[1:], 0] < (cpu_end if range_end is None else range_end))
    # Work queued between two phases of a cycle is in neither: the earlier one ends at its own
    # CPU end. A wait made between them for work the earlier phase's end event reads anyway
    # (TensorRT-LLM forks its execution stream off the loop's stream, which still runs the last
    # step's sampling, right before the forward's range) queues nothing new: the CPU time between
    # stays the earlier phase's tail.
    read_at_end = clock.done(srow, cpu_end)
    between = same_cycle_next & (clock.queued_between(srow, cpu_end, t_next, read_at_end) |
                                 clock.queued_between(np.r_[srow[1:], -1], cpu_end, t_next, read_at_end))
    if threads is not None:
        started, ended = threads
        hand_off = same_cycle_next & ~overlap & np.r_[(started[1:] != ended[:-1]) & (ended[:-1] != -1), False]
    else:
        hand_off = np.zeros(len(t), dtype=bool)
    e = np.where(between | hand_off, np.minimum(cpu_end, t_next), np.where(overlap, cpu_end, t_next))
    # A hand-off with nothing queued between: the later phase begins where the earlier ended.
    t = np.where(np.r_[False, (hand_off & ~between)[:-1]], np.r_[0, e[:-1]], t)
    # Where no boundary is shared (work queued between the two, or the next began before this
    # one ended), each phase reads its own edge on its own stream alone: the other's stream holds
    # it back no more than the events the phase's own thread records there would (SGLang's
    # pipeline loop: a late receive joined into the scheduler's stream before run_batch, whose
    # forward stream waits for it only inside the range).
    apart = overlap | between
    after_apart = np.r_[False, apart[:-1]]
    a = np.maximum.reduce([t, clock.done(srow, t), clock.done(np.where(after_apart, -1, prev_row), t)])
    # A phase begun apart reads the next cycle's stream at its cycle's end only where its own
    # thread launched work there within its range: what that stream held from before it (the
    # work between, in no phase; an overlapping phase's tail) is not its, and its start never
    # read it; nor is what another thread queued there meanwhile (a helper's copy), nor any
    # wait its thread made there (no work of its own).
    cycle_edge = next_in_a_cycle & ~same_cycle_next & ~overlap
    own_end = after_apart & cycle_edge
    if own_end.any():
        ask = np.flatnonzero(own_end)
        who = threads[0][ask] if threads is not None else np.full(len(ask), -1, np.int64)
        own_end[ask] = ~clock.launched_by(next_row[ask], t[ask], e[ask], who)
    edge_read = clock.done(np.where(apart, -1, next_row), e)  # (the cycle edge on the next cycle's stream)
    z = np.maximum.reduce([e, clock.done(srow, e), np.where(own_end, I64_MIN, edge_read)])
    # The cycle's end (``edge``) is read at its edge on both streams, whatever of it its last
    # phase took, and holds the work between: the streams of the phases around each gap read
    # at the later one's start, when that work was all queued (not at the cycle's end, where
    # they may hold work queued later that no event at the cycle's edge waits for: the next
    # cycle's, run a cycle ahead, or a copy on a stream neither edge phase is on).
    edge = np.maximum(z, edge_read)
    gap = np.flatnonzero(between)
    if len(gap):
        np.maximum.at(edge, gap + 1, np.maximum(clock.done(srow[gap], t[gap + 1]), clock.done(srow[gap + 1], t[gap + 1])))
    pairs = np.stack([a, z], 1)
    # Runs of phases one after another, cut where the next began before the earlier ended.
    # Never backwards along each stream's own phases (``own_stream_only``), else along each GPU's.
    # A run is also cut where work was queued between two phases, but only on the line the two
    # are on: a phase begun after it is held back by the earlier one's end no more than its own
    # stream is, and the other GPU's phases (events ordered after nothing here) not at all.
    along = srow if own_stream_only else gpu
    run_of = np.cumsum(np.r_[False, overlap[:-1]])  # (an overlap cuts every line)
    gap_cut = np.r_[False, between[:-1] & (along[1:] == along[:-1])]
    for g in np.unique(along).tolist():
        on_g = np.flatnonzero(along == g)
        # (a cut between two of the line's phases where an overlap lies anywhere between them)
        runs = run_of[on_g]
        starts = np.flatnonzero(np.r_[False, (runs[1:] != runs[:-1]) | gap_cut[on_g][1:]])
        pairs[on_g] = _running_max_by_segment(pairs[on_g].ravel(), 2 * starts).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1], np.maximum(edge, pairs[:, 1])


def _running_max_by_segment(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` started afresh at each index of ``starts`` (sorted):
    in one pass where each segment can be lifted above the one before it in int64 (a segment's
    values shifted by its number times the whole span), else segment by segment."""
    if len(starts) == 0 or len(values) == 0:
        return np.maximum.accumulate(values)
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (len(starts) + 1) >= 2**62:
        return np.concatenate([np.maximum.accumulate(seg) for seg in np.split(values, starts)])
    lift = np.zeros(len(values), dtype=np.int64)
    lift[starts] = 1
    lift = np.cumsum(lift) * span
    return np.maximum.accumulate((values - lo) + lift) - lift + lo


def _gpu_of_rows(clock: StreamClock, row: np.ndarray) -> np.ndarray:
    """Per stream row of ``clock`` (-1: none): its (pid, device) key, -1 where none."""
    return np.where(row >= 0, clock.keys[np.maximum(row, 0)] >> 31, -1) if len(clock.keys) else np.full(len(row), -1, np.int64)


def tiled_off_their_stream(clock: StreamClock, pid: np.ndarray, cpu_start: np.ndarray, cpu_end: np.ndarray, cycle: np.ndarray, device: np.ndarray,
                           stream: np.ndarray, tid: np.ndarray | None, boundary_start: np.ndarray, boundary_end: np.ndarray,
                           ended_elsewhere: np.ndarray | None = None, range_end: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Phases that neighbours on other streams, which their own stream is not ordered after,
    gave less GPU time: (mask, own-stream reading in ns) per phase. ``device``, ``stream``,
    ``boundary_*``: ``phase_boundaries``' output. The own-stream reading is the tiling with
    every boundary read on the phase's own stream and kept in order among that stream's
    phases only (``own_stream_only``); a phase is marked where it gets
    more than max(10 us, 10 %) of that less (its start boundary pushed later), and its stream
    did not wait, by the phase's end, for a record made after that work was queued on the
    streams that pushed it (``_joined_after``): the timeline's other streams still busy, at the
    phase's CPU start, until that boundary (SGLang's scheduler phases on the default stream
    beside a forward stream running the previous batch; the README's not-handled case), unless
    its stream has event waits the trace cannot resolve. Said, not hidden."""
    n = len(pid)
    mask = np.zeros(n, dtype=bool)
    used = stream >= 0
    if n == 0 or len(np.unique(_pack(pid[used], device[used], stream[used]))) < 2:
        return mask, np.zeros(n, np.int64)  # one stream: nothing on another can push a phase
    own_s, own_e, _, _ = phase_boundaries(clock, pid, cpu_start, cpu_end, cycle, device, stream, None, tid, own_stream_only=True, ended_elsewhere=ended_elsewhere,
                                          range_end=range_end)
    has = (boundary_start != I64_MIN) & (own_s != I64_MIN)
    own = np.where(has, own_e - own_s, 0)
    tiled = np.where(has, boundary_end - boundary_start, 0)
    lost = has & (own - tiled > np.maximum(10_000, own // 10))
    if not lost.any():
        return mask, own
    row = clock.stream_index(pid, device, stream)
    unknown = clock.unresolved_into
    line = timelines(pid, cycle, tid)
    for ln in np.unique(line[lost]).tolist():
        mine = line == ln
        ks = np.flatnonzero(lost & mine)
        # A loss is a start boundary pushed later; what pushed it is a stream of the timeline
        # still busy, at the phase's CPU start, until at least that boundary. One search per
        # stream for all such phases at once. The streams join there (the tiling by design: a
        # verify that waits inside itself for draft's input stream) where the phase's stream
        # waited, by the phase's end, for a record made on the pushing stream after the work
        # that pushed it was queued; a wait made elsewhere in the run (an output copy that
        # waits for the forward each step, a wait before the first cycle) orders nothing here.
        pushed, waited = np.zeros(len(ks), dtype=bool), np.zeros(len(ks), dtype=bool)
        for o in np.unique(row[mine & (row >= 0)]).tolist():
            mover = (row[ks] != o) & (clock.done(np.full(len(ks), o), cpu_start[ks]) >= boundary_start[ks])
            pushed |= mover
            if mover.any():
                waited[mover] |= _joined_after(clock, row[ks][mover], o, clock.queued_since(o, boundary_start[ks][mover]), cpu_end[ks][mover])
        mask[ks] = pushed & ~waited & ~np.isin(row[ks], unknown)
    return mask, own


def _joined_after(clock: StreamClock, into: np.ndarray, from_: int, since: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Per (waiting stream row ``into``, CPU instants ``since``, ``by``): whether that stream
    waited, at a CPU instant no later than ``by``, for an event recorded on stream row
    ``from_`` no earlier than ``since``."""
    out = np.zeros(len(into), dtype=bool)
    for r in np.unique(into).tolist():
        js = np.flatnonzero((clock.join_into == r) & (clock.join_from == from_))
        if len(js) == 0:
            continue
        order = np.argsort(clock.join_record_cpu[js], kind="stable")
        rec, cpu = clock.join_record_cpu[js][order], clock.join_cpu[js][order]
        earliest_wait = np.minimum.accumulate(cpu[::-1])[::-1]  # of the records made at or after each
        sel = np.flatnonzero(into == r)
        at = np.searchsorted(rec, since[sel], side="left")
        ok = at < len(rec)
        out[sel[ok]] = earliest_wait[at[ok]] <= by[sel[ok]]
    return out


def timelines(pid: np.ndarray, cycle: np.ndarray, tid: np.ndarray | None) -> np.ndarray:
    """Which phase instances form one sequence of boundaries: per process, unless threads of
    it each hold phases of cycles of their own (no cycle has phases on two of them), as when
    one process drives a GPU per thread: then per thread. Phases of one cycle spread over
    threads (a scheduler and a worker) stay one sequence. Returns a timeline key per phase."""
    pid = np.asarray(pid, dtype=np.int64)
    if tid is None or len(pid) == 0:
        return pid
    tid = np.asarray(tid, dtype=np.int64)
    cycle = np.asarray(cycle, dtype=np.int64)
    line = thread_keys(pid, tid)
    for p in np.unique(pid).tolist():
        mine = pid == p
        threads = np.unique(tid[mine])
        with_cycle = mine & (cycle >= 0)
        # Each cycle's phases on one thread (as many (cycle, thread) pairs as cycles), and more
        # than one thread with cycles.
        pairs = _dense_ids(cycle[with_cycle], tid[with_cycle])
        n_pairs = int(pairs.max()) + 1 if len(pairs) else 0
        own_cycles = n_pairs == len(np.unique(cycle[with_cycle])) and len(np.unique(tid[with_cycle])) > 1
        if len(threads) > 1 and not own_cycles:
            line[mine] = line[mine].min()  # one sequence for the process
    return line


def in_sequence(pid: np.ndarray, cycle: np.ndarray, tid: np.ndarray | None, cpu_start: np.ndarray, cpu_end: np.ndarray,
                line: np.ndarray | None = None) -> np.ndarray:
    """Per phase instance (in time order): whether it takes its place in its timeline's
    sequence of boundaries: it is in a cycle, and no phase range of another thread of its
    timeline runs all through it (``intervals.inside_another_thread``). The others are read alone
    (``phase_boundaries``). ``line``: ``timelines``' keys, where already made."""
    out = np.asarray(cycle) >= 0
    if tid is None or len(out) == 0:
        return out
    line = timelines(pid, cycle, tid) if line is None else line
    keys = thread_keys(pid, tid)
    for ln in np.unique(line).tolist():
        seq = np.flatnonzero(line == ln)
        out[seq] &= ~inside_another_thread(np.asarray(cpu_start)[seq], np.asarray(cpu_end)[seq], keys[seq], out[seq])
    return out


def _fill_index(row: np.ndarray, thread: np.ndarray | None = None) -> np.ndarray:
    """Position whose stream each phase uses: its own, else the previous phase's (else the
    next one's) among phases that launched something. Empty when none did. ``thread`` (per
    phase): a phase first takes the stream of its own thread's phases (the previous, else the
    next, that launched something), and another thread's only where its thread's phases
    launched nothing: a thread's current stream is its own (a scheduler's phase that only
    joins a helper's copy stream into the loop's stream is read there, not on the worker's
    stream of the phase before it)."""
    known = np.flatnonzero(row >= 0)
    if len(known) == 0:
        return np.zeros(0, dtype=np.int64)
    idx = _previous_else_next(row >= 0)
    if thread is not None:
        thread = np.asarray(thread)
        for th in np.unique(thread[row < 0]).tolist():
            mine = np.flatnonzero(thread == th)
            launched = row[mine] >= 0
            if launched.any() and not launched.all():
                idx[mine] = mine[_previous_else_next(launched)]
    return idx


def _previous_else_next(known: np.ndarray) -> np.ndarray:
    """Per position: itself where ``known``, else the previous known position (else the first)."""
    idx = np.where(known, np.arange(len(known)), -1)
    idx = np.maximum.accumulate(idx)
    idx[idx < 0] = np.flatnonzero(known)[0]
    return idx


# Blocking calls by what they wait for (base API names).
STREAM_SYNC_APIS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize"})
EVENT_SYNC_APIS = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
DEVICE_SYNC_APIS = frozenset({"cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize"})
MAX_BOUND_CELLS = 2_000_000  # calls x streams (16 MB); beyond it every call counts all work, as before


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
        dev[hit], strm[hit] = _unpack_device(clock.keys, row[hit]), _unpack_stream(clock.keys, row[hit])
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
    pairs = np.unique(((work_keys >> 39) << 8) | ((work_keys >> 31) & 0xFF))  # (pid, device) with work
    p_pid, n_dev = np.unique(pairs >> 8, return_counts=True)
    only = pairs[np.searchsorted(pairs >> 8, p_pid)] & 0xFF  # each process's first (with n_dev 1: only) device
    k = np.minimum(np.searchsorted(p_pid, np.asarray(pid, np.int64)[no_stream]), len(p_pid) - 1)
    one = (p_pid[k] == np.asarray(pid, np.int64)[no_stream]) & (n_dev[k] == 1)
    dev[no_stream[one]] = only[k[one]]
    return dev


def awaited_work(clock: StreamClock, blocking: pa.Table, targets: WaitTargets) -> tuple[np.ndarray, np.ndarray] | None:
    """What each blocking call (``syncs.find_blocking_calls``) waits for, given what it waits
    on (``wait_targets``): (known, bounds): per call, whether that is known, and per call and
    stream row of ``clock`` the latest launch instant of the work on that stream the call waits
    for (int64 min: none of it). Where it is not known, all work counts (as a context-wide wait
    would). Each call waits also for what its streams were made to wait for (event waits,
    followed back through their records, each bounding its record's stream at the record's
    time). Returns None when the trace has no blocking call or too many calls x streams to hold."""
    n_calls, n_rows = blocking.num_rows, len(clock.keys)
    if n_calls == 0 or n_rows == 0 or n_calls * n_rows > MAX_BOUND_CELLS:
        return None
    pid = int64s(blocking["pid"])
    start = int64s(blocking["start_ns"])
    bounds = np.full((n_calls, n_rows), I64_MIN, dtype=np.int64)
    known = targets.row >= 0
    bounds[np.flatnonzero(known), targets.row[known]] = targets.until[known]
    if targets.whole_device.any():
        key_pid = clock.keys >> 39
        key_dev = (clock.keys >> 31) & 0xFF
        dev = targets.device
        for i in np.flatnonzero(targets.whole_device).tolist():
            on = (key_pid == pid[i]) & ((dev[i] < 0) | (key_dev == dev[i]))
            if on.any():
                bounds[i] = np.where(on, start[i], I64_MIN)
                known[i] = True
    # Follow the event waits back: stream s bounded at B waits for stream r's work up to the
    # latest record behind a wait of s made by B. For all calls at once, until nothing moves (a
    # chain of waits is at most as long as there are streams).
    into, from_, w_cpu, rec_cpu = clock.join_into, clock.join_from, clock.join_cpu, clock.join_record_cpu
    if len(w_cpu) and known.any():
        steps = []
        for s_row, r_row in sorted(set(zip(into.tolist(), from_.tolist()))):
            if s_row != r_row:
                sel = (into == s_row) & (from_ == r_row)
                steps.append((s_row, r_row, w_cpu[sel], np.maximum.accumulate(rec_cpu[sel])))
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
