"""The stream clock: when a CUDA event recorded on a stream at a CPU instant would complete.

An event recorded at CPU instant ``t`` on stream S completes at

    done(S, t) = max(t, end of every GPU op launched on S before t (by any thread of the
                 process), end of the work S was made to wait for before t)

where "made to wait for" follows ``cudaStreamWaitEvent`` back to the ``cudaEventRecord`` it
names (stream R at CPU time t_r): that contributes ``done(R, t_r)``, recursively. Work on one
stream runs in launch order, so the running maximum of op ends in launch order is exact.
NCCL's streams and graph launches need nothing special: their kernels are ops on their
streams, and the compute stream waits for them through the same event records (a graph's
branch nodes count on its launch's stream: ``graphs.graph_branches``; work queued before the
capture began: ``capture.queued_before_capture``).

Not modelled (documented in the README): the legacy default stream's implicit
synchronisation with other blocking streams, and the ~0.1 ms an event recorded on an idle GPU
takes to be submitted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from tracerecon.analysis.capture import BEFORE_THE_TRACE, BeforeCapture, FirstCalls, queued_before_capture
from tracerecon.analysis.columns import graph_node_launches, thread_keys
from tracerecon.analysis.graphs import graph_branches
from tracerecon.analysis.intervals import distinct_few
from tracerecon.analysis.projection import I64_MAX, I64_MIN, int64s, match_correlation, string_mask
from tracerecon.analysis.stream_keys import dense_ids, device_of_keys, pack_keys, stream_of_keys, unpack_keys
from tracerecon.schema import STREAM_BLOCKING, STREAM_NULL


@dataclass(frozen=True)
class StreamClock:
    """For every stream of a rank: when the work queued on it before a CPU instant is done."""

    keys: np.ndarray  # per stream: (pid, device_id, stream_id) packed by ``pack_keys``, sorted
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
    # The process of each event wait that found no record and whose event no record of that
    # process in the trace names (recorded before the capture and never again, by a graph, or by
    # another process: an interprocess event).
    unrecorded_wait_pids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Every event record that found its call (``EventRecords``), for the blocking waits on an event.
    records: EventRecords | None = None
    # How many event waits named, by its number, a record made after them (an export whose
    # record calls' times are off): left unresolved (``EventRecords.named_by``).
    waits_before_their_record: int = 0
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
    # Per stream, beside ``op_launch``: each op's index in the ops table the clock was built
    # from (a graph branch node's on its launch stream too; -1: the stand-in for work queued
    # before the capture).
    op_index: tuple = ()
    # Per op of that ops table: the thread (``thread_keys``) whose call launched it, -1 where
    # the trace does not tell (a call not in it, work before the capture).
    launch_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # The legacy default stream's implicit synchronisation (``legacy_partners``): per stream
    # row, the rows whose work queued before an instant an event recorded on it then waits for;
    # and per such row, when what an event there waits for is done, as ``op_launch`` /
    # ``op_done`` are (``_legacy_done``: its own work, its partners', and the NULL stream's
    # records and waits, each of which waits for the blocking streams first).
    legacy: dict = field(default_factory=dict)
    legacy_done: dict = field(default_factory=dict)
    # How each (pid, stream id) was made (``stream_flags``), and each process's NULL stream per
    # device (``null_streams``: (pid, device) -> stream id, each a row of ``keys``).
    made: dict = field(default_factory=dict)
    nulls: dict = field(default_factory=dict)

    def stream_index(self, pid: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Row of ``keys`` for each (pid, device, stream); -1 where the stream has no work."""
        out = np.full(len(pid), -1, dtype=np.int64)
        if len(self.keys) == 0 or len(pid) == 0:
            return out
        want = pack_keys(pid, device, stream)
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
        dev[self.branch_ops] = device_of_keys(self.keys, self.branch_rows)
        stream[self.branch_ops] = stream_of_keys(self.keys, self.branch_rows)
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
        return (np.where(found, device_of_keys(self.keys, np.maximum(out, 0)), -1) if len(self.keys) else out,
                np.where(found, stream_of_keys(self.keys, np.maximum(out, 0)), -1) if len(self.keys) else out)

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
            a, b = _after_until(self.op_launch[s], lo[sel], hi[sel])
            out[sel] = b > a
            for r in self.legacy.get(s, ()):  # (work put then on a stream an event on s waits for)
                a, b = _after_until(self.op_launch[r], lo[sel], hi[sel])
                out[sel] |= b > a
            waits, dep = self.wait_time[s], self.wait_dep[s]
            if len(waits):
                a, b = _after_until(waits, lo[sel], hi[sel])
                for j in np.flatnonzero((b > a) & ~out[sel]).tolist():
                    k, t = sel[j], int(lo[sel[j]])
                    held = dep[a[j]:b[j]] > t
                    if read_by is not None and held.any():
                        src = self.wait_from[s][a[j]:b[j]]
                        queued_by_lo = self.done(src, np.full(len(src), t, np.int64))
                        held &= (dep[a[j]:b[j]] > read_by[k]) | (dep[a[j]:b[j]] > queued_by_lo)
                    out[k] = bool(held.any())
        return out

    def owned_between(self, stream: np.ndarray, lo: np.ndarray, hi: np.ndarray, phase: np.ndarray, op_owner: np.ndarray | None) -> np.ndarray:
        """For each (stream row, CPU instants ``lo`` < ``hi``, phase): whether an op of that
        phase was put on the stream after ``lo`` and by ``hi`` (``queued_between``'s window;
        event waits, and ops of no phase or another's, do not count). ``op_owner``: per row of
        the ops table the clock was built from, the phase whose work the op is (-1: none), as
        the analysis owns ops, whichever thread launched them (``attribution``); None: every op
        counts. ``stream`` -1 gives False."""
        stream = np.asarray(stream, dtype=np.int64)
        lo, hi, phase = np.asarray(lo, np.int64), np.asarray(hi, np.int64), np.asarray(phase, np.int64)
        out = np.zeros(len(stream), dtype=bool)
        for s in np.unique(stream[stream >= 0]).tolist():
            sel = np.flatnonzero((stream == s) & (lo < hi))
            a, b = _after_until(self.op_launch[s], lo[sel], hi[sel])
            some = b > a
            if op_owner is None:
                out[sel] = some
                continue
            for j in np.flatnonzero(some).tolist():  # (at most one per cycle: its last phase, begun apart)
                rows = self.op_index[s][a[j]:b[j]]
                out[sel[j]] = bool((op_owner[rows[rows >= 0]] == phase[sel[j]]).any())
        return out

    def launch_threads(self, stream: int) -> np.ndarray:
        """Per op of stream row ``stream``, in ``op_launch``'s order: the thread that launched
        it (``launch_thread``; -1 where not known)."""
        index = self.op_index[stream]
        if not len(self.launch_thread):
            return np.full(len(index), -1, np.int64)
        return np.where(index >= 0, self.launch_thread[np.maximum(index, 0)], -1)

    def last_queued_by(self, stream: np.ndarray, lo: np.ndarray, hi: np.ndarray, threads: np.ndarray | None, ops: np.ndarray | None = None) -> np.ndarray:
        """For each (stream row, CPU instants ``lo`` < ``hi``): the latest instant after ``lo``
        and by ``hi`` (``queued_between``'s window) at which one of ``threads`` (thread keys;
        None: any thread) put an op on the stream, made it wait for a record (``join_*``) or
        recorded an event there (which reads what ran there before it); an op, wait or record
        whose thread is not known counts as theirs, as every op does where the clock keeps no
        threads, and so does an op that ``ops`` (per op of the ops table) marks, whichever
        thread launched it. int64 min where none did; ``stream`` -1 gives int64 min."""
        stream = np.asarray(stream, dtype=np.int64)
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        out = np.full(len(stream), I64_MIN, dtype=np.int64)

        def theirs(who: np.ndarray) -> np.ndarray:
            return np.ones(len(who), bool) if threads is None else (who == -1) | np.isin(who, threads)

        their_joins, their_records = theirs(self.join_thread), theirs(self.record_thread)
        for s in np.unique(stream[stream >= 0]).tolist():
            sel = np.flatnonzero((stream == s) & (lo < hi))
            mine = theirs(self.launch_threads(s))
            if ops is not None:
                index = self.op_index[s]
                mine |= np.where(index >= 0, ops[np.maximum(index, 0)], False)
            waits = self.join_cpu[(self.join_into == s) & their_joins]  # (in CPU order)
            records = np.sort(self.record_call_start[(self.record_row == s) & their_records])
            for times in (self.op_launch[s][mine], waits, records):
                a, b = _after_until(times, lo[sel], hi[sel])
                ok = b > a  # (the latest of them: the one before b)
                out[sel[ok]] = np.maximum(out[sel[ok]], times[b[ok] - 1])
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
        for s in np.unique(stream[stream >= 0]).tolist():
            sel = np.flatnonzero(stream == s)
            if s in self.legacy_done:  # (with what it implicitly waits for)
                out[sel] = _before(*self.legacy_done[s], t[sel])
            else:
                out[sel] = np.maximum(_before(self.op_launch[s], self.op_done[s], t[sel]), _before(self.wait_time[s], self.wait_done[s], t[sel]))
        return out


def forks_joined_back(into: np.ndarray, from_: np.ndarray, cpu: np.ndarray, stream: int,
                      waits_counted: np.ndarray | None = None, joins_counted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The forks of stream row ``stream`` that were joined back: each event wait (``into``,
    ``from_``, ``cpu``: event waits in CPU order, as ``StreamClock.join_*``) by which another
    stream, the side stream, was made to wait for a record on ``stream``, with the first wait
    after it by which ``stream`` was made to wait for a record on that side stream (the fork's
    join back). Returns (fork instants, side stream rows, join-back instants) in CPU order of the
    forks; a fork never joined back is left out. ``waits_counted`` (per wait): the waits that
    count as forks and joins (default all); ``joins_counted``: the waits that count as joins
    instead, where given."""
    counted = np.ones(len(into), bool) if waits_counted is None else waits_counted
    joins_ok = counted if joins_counted is None else joins_counted
    forks = np.flatnonzero(counted & (from_ == stream) & (into != stream))
    joins = np.flatnonzero(joins_ok & (into == stream) & (from_ != stream))
    fork_at, side, join_at = [], [], []
    for n in np.intersect1d(into[forks], from_[joins]).tolist():
        f, j = cpu[forks[into[forks] == n]], cpu[joins[from_[joins] == n]]
        nxt = np.searchsorted(j, f, side="right")  # (the first join back strictly after each fork)
        back = nxt < len(j)
        fork_at.append(f[back])
        side.append(np.full(int(back.sum()), n, np.int64))
        join_at.append(j[nxt[back]])
    if not fork_at:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    fork_at, side, join_at = np.concatenate(fork_at), np.concatenate(side), np.concatenate(join_at)
    order = np.argsort(fork_at, kind="stable")
    return fork_at[order], side[order], join_at[order]


def _after_until(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window of ``queued_between``, ``owned_between`` and ``last_queued_by``: per pair of
    CPU instants, the indices [a, b) of the sorted ``times`` after ``lo`` and by ``hi`` (a call
    that returned at ``lo`` was made in the range that ended then; one at ``hi``, by then)."""
    return np.searchsorted(times, lo, side="right"), np.searchsorted(times, hi, side="right")


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


def stream_flags(cuda_streams: pa.Table | None) -> dict[tuple[int, int], int]:
    """How each (pid, stream id) was made: ``TARGET_INFO_CUDA_STREAM``'s flag (``schema``'s
    STREAM_BLOCKING, STREAM_NON_BLOCKING, STREAM_NULL). A stream id two contexts of a process
    both use, made otherwise, is left out; exports that do not say: none."""
    if cuda_streams is None or cuda_streams.num_rows == 0:
        return {}
    flags: dict[tuple[int, int], set[int]] = {}
    for f, p, sid in zip(*(int64s(cuda_streams[c], -1).tolist() for c in ("flag", "pid", "stream_id"))):
        flags.setdefault((p, sid), set()).add(f)
    return {k: next(iter(f)) for k, f in flags.items() if len(f) == 1}


def null_streams(keys: np.ndarray, made: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """Each process's NULL stream per device, (pid, device) -> stream id, among ``keys`` (packed
    (pid, device, stream)): one that ran work, recorded or waited there; else, in a process
    whose streams of ``keys`` are all on one device and that has one NULL stream that did none
    of that, that one there (where a thread that never set a stream would record its events)."""
    k_pid, k_dev, k_stream = unpack_keys(keys) if len(keys) else (np.zeros(0, np.int64),) * 3
    worked = list(zip(k_pid.tolist(), k_dev.tolist(), k_stream.tolist()))
    out: dict[tuple[int, int], int] = {}
    for p in sorted({p for (p, _), f in made.items() if f == STREAM_NULL}):
        devices = sorted({d for q, d, _ in worked if q == p})
        idle = []
        for sid in sorted(sid for (q, sid), f in made.items() if q == p and f == STREAM_NULL):
            on = [d for q, d, t in worked if q == p and t == sid]
            out.update({(p, d): sid for d in on})
            if not on:
                idle.append(sid)
        if len(devices) == 1 and len(idle) == 1 and (p, devices[0]) not in out:
            out[(p, devices[0])] = idle[0]
    return out


def legacy_partners(keys: np.ndarray, made: dict[tuple[int, int], int]) -> tuple[dict[int, tuple[int, ...]], set[int]]:
    """The legacy default stream's implicit synchronisation, per stream row of ``keys`` (a
    stream clock's; ``made``: ``stream_flags``): on each device of a process, its NULL stream
    waits for the work queued before on every blocking stream there (made without
    cudaStreamNonBlocking, as plain ``cudaStreamCreate`` and CUDA's per-thread default streams
    are), and each of those for the NULL stream's; streams made non-blocking (PyTorch's,
    NCCL's) wait for neither. Returns the partners of each row, and which rows are NULL streams
    with partners."""
    if not made or len(keys) == 0:
        return {}, set()
    k_pid, k_dev, k_stream = unpack_keys(keys)
    by_device: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for row, (p, d, sid) in enumerate(zip(k_pid.tolist(), k_dev.tolist(), k_stream.tolist())):
        nulls, blocking = by_device.setdefault((p, d), ([], []))
        {STREAM_NULL: nulls, STREAM_BLOCKING: blocking}.get(made.get((p, sid)), []).append(row)
    out: dict[int, tuple[int, ...]] = {}
    null_rows: set[int] = set()
    for nulls, blocking in by_device.values():
        if len(nulls) == 1 and blocking:
            out[nulls[0]] = tuple(blocking)
            out.update({b: (nulls[0],) for b in blocking})
            null_rows.add(nulls[0])
    return out, null_rows


def stream_clock(ops: pa.Table, api_calls: pa.Table, event_records: pa.Table, sync_records: pa.Table, cuda_streams: pa.Table | None = None) -> StreamClock:
    """Build the clock of one rank from its linked GPU ops (``projection.link_launches``), its
    API calls, ``cudaEventRecord`` records and ``cudaStreamWaitEvent`` sync records; with
    ``cuda_streams`` (``schema.CUDA_STREAMS``), the legacy default stream's implicit waits
    (``legacy_partners``) too."""
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

    op_key = pack_keys(o_pid[placed], o_dev[placed], o_str[placed])
    work_keys = distinct_few(op_key)
    # Work queued before the capture began (``queued_before_capture``) is done, for every
    # boundary the trace holds, when it is: a stand-in "op" launched before them all.
    rec["dev"] = on_working_device(work_keys, rec["pid"], rec["dev"], rec["stream"], carried=True)
    w["dev"] = on_working_device(work_keys, w["pid"], w["dev"], w["stream"])
    rec_key, wait_key = pack_keys(rec["pid"], rec["dev"], rec["stream"]), pack_keys(w["pid"], w["dev"], w["stream"])
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
    # Each process's NULL stream has a row, an idle one too (where a thread that never set a
    # stream records: ``phase_streams.UnsetStreams``), and the legacy stream's waits their rows.
    made = stream_flags(cuda_streams)
    nulls = null_streams(keys, made)
    keys = np.union1d(keys, np.array([pack_keys(p, d, sid) for (p, d), sid in nulls.items()], np.int64))
    n = len(keys)
    legacy, null_rows = legacy_partners(keys, made)

    def index_of(pid, dev, stream):
        if n == 0 or len(pid) == 0:
            return np.zeros(len(pid), dtype=np.int64)
        return np.searchsorted(keys, pack_keys(pid, dev, stream))

    op_launch, op_done, op_index = [], [], []
    oi = np.searchsorted(keys, op_key_all) if n and len(op_key_all) else np.zeros(len(op_key_all), dtype=np.int64)
    ol, oe = np.concatenate([o_launch[placed], g_launch]), np.concatenate([o_end[placed], g_end])
    # Each one's row of ``ops`` (a graph branch: its node's; -1: work before the capture), and
    # who launched each row: the launching call's thread (a graph branch node: its launch's).
    o_tid = int64s(ops["launch_tid"], -1) if ops.num_rows and "launch_tid" in ops.column_names else np.full(len(o_pid), -1, np.int64)
    launch_thread = np.where((o_tid >= 0) & ~head.called_before, thread_keys(o_pid, o_tid), -1)
    orow = np.concatenate([np.flatnonzero(placed), b_rows[b_placed], np.full(len(head.stream_key), -1, np.int64)])
    order = np.lexsort((ol, oi))
    oi, ol, oe, orow = oi[order], ol[order], oe[order], orow[order]
    cuts = np.searchsorted(oi, np.arange(n + 1))
    for s in range(n):
        a, b = cuts[s], cuts[s + 1]
        op_launch.append(ol[a:b])
        op_done.append(np.maximum.accumulate(oe[a:b]) if b > a else oe[a:b])
        op_index.append(orow[a:b])

    # Waits in CPU order: each depends on its record's stream as of the record's CPU time,
    # including the waits that stream had itself made by then.
    rec_stream = index_of(rec["pid"], rec["dev"], rec["stream"])
    wait_stream = index_of(w["pid"], w["dev"], w["stream"])
    records = EventRecords.of(rec["pid"], rec["event"], rec["sync"], rec_stream, rec["cpu"], rec["call_start"])
    # Each wait's record (stream row, CPU time); the waits that found theirs, in CPU order (a
    # wait whose record was made before the capture began, or inside a graph capture, has none).
    named_row, named_cpu = records.named_by(w["pid"], w["event"], w["sync"], w["cpu"])
    # (waits that name, by its number, a record made after them: not modelled, and said)
    late = (named_row < 0) & (w["sync"] >= 0) & (records.named_by(w["pid"], w["event"], w["sync"], np.full(len(w["cpu"]), I64_MAX // 2))[0] >= 0)
    wait_stream = _waits_of_the_other_device(keys, work_keys, w["pid"], w_dev_written, w["stream"], wait_stream, named_row)
    recorded_before = records.first_before(w["pid"], w["event"], w["cpu"])
    by_cpu = np.argsort(w["cpu"], kind="stable")
    resolved = by_cpu[named_row[by_cpu] >= 0]
    rec_s, rec_t = named_row[resolved], named_cpu[resolved]
    # What each record waits for among GPU ops: one search per record stream, not per wait.
    from_ops = np.empty(len(resolved), dtype=np.int64)
    for s in np.unique(rec_s).tolist():
        sel = rec_s == s
        from_ops[sel] = np.maximum.reduce([_before(op_launch[r], op_done[r], rec_t[sel]) for r in (s, *legacy.get(s, ()))])
    # Then the waits' own chains, in CPU order: a record made after a wait on its stream
    # depends on what that wait waited for.
    times: list[list[int]] = [[] for _ in range(n)]
    running: list[list[int]] = [[] for _ in range(n)]
    deps: list[list[int]] = [[] for _ in range(n)]
    froms: list[list[int]] = [[] for _ in range(n)]
    w_cpu, w_stream = w["cpu"].tolist(), wait_stream.tolist()
    for i, rs, rt, dep in zip(resolved.tolist(), rec_s.tolist(), rec_t.tolist(), from_ops.tolist()):
        for r in (rs, *legacy.get(rs, ())):  # (the record's stream's waits, and its partners')
            k = bisect.bisect_left(times[r], rt) - 1
            if k >= 0:
                dep = max(dep, running[r][k])
        s = w_stream[i]
        prev = running[s][-1] if running[s] else I64_MIN
        times[s].append(w_cpu[i])
        running[s].append(max(prev, dep))
        deps[s].append(dep)
        froms[s].append(rs)
    wait_time = tuple(np.array(x, dtype=np.int64) for x in times)
    wait_done = tuple(np.array(x, dtype=np.int64) for x in running)
    legacy_done = _legacy_done(legacy, null_rows, op_launch, op_done, wait_time, wait_done, rec_stream, rec["cpu"])
    return StreamClock(
        keys=keys,
        op_launch=tuple(op_launch),
        op_done=tuple(op_done),
        wait_time=wait_time,
        wait_done=wait_done,
        wait_dep=tuple(np.array(x, dtype=np.int64) for x in deps),
        wait_from=tuple(np.array(x, dtype=np.int64) for x in froms),
        join_cpu=w["cpu"][resolved],
        join_into=np.asarray(wait_stream, np.int64)[resolved],
        join_from=rec_s,
        join_thread=w["thread"][resolved],
        unresolved_into=_unresolved_into(wait_stream, resolved, recorded_before),
        unrecorded_wait_pids=np.asarray(w["pid"], np.int64)[(named_row < 0) & ~records.first_before(w["pid"], w["event"], np.full(len(w["cpu"]), I64_MAX))],
        join_record_cpu=rec_t,
        records=records,
        waits_before_their_record=int(late.sum()),
        branch_ops=b_rows,
        branch_rows=np.searchsorted(keys, b_key) if n else np.zeros(len(b_key), np.int64),
        before_capture=head,
        op_instants=o_launch_raw,
        record_thread=rec["thread"],
        record_call_start=rec["call_start"],
        record_row=np.asarray(rec_stream, np.int64),
        op_index=tuple(op_index),
        launch_thread=launch_thread,
        legacy=legacy,
        legacy_done=legacy_done,
        made=made,
        nulls=nulls,
    )


def _legacy_done(legacy: dict, null_rows: set, op_launch: list, op_done: list, wait_time: tuple, wait_done: tuple, rec_row: np.ndarray,
                 rec_cpu: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per stream row with legacy partners: (CPU instants, running maximum of what is done by
    then), merged, so that ``StreamClock.done`` reads it in one search: its own ops and waits,
    its partners' (the blocking streams' for the NULL stream, the NULL stream's for a blocking
    one), and, for a blocking stream, each record and wait on the NULL stream, done when every
    blocking stream's work before it is (CUDA: the legacy stream first waits for the blocking
    streams; a record there, which runs nothing, links them all the same)."""
    def merged(parts: list) -> tuple[np.ndarray, np.ndarray]:
        t = np.concatenate([x for x, _ in parts])
        v = np.concatenate([y for _, y in parts])
        order = np.argsort(t, kind="stable")
        return t[order], (np.maximum.accumulate(v[order]) if len(v) else v)

    out = {}
    for n in null_rows:
        blocking = legacy[n]
        # (each row's own ops and waits, once: (launch instants, done) as ``StreamClock.done`` reads them)
        own = {r: (np.concatenate([op_launch[r], wait_time[r]]), np.concatenate([op_done[r], wait_done[r]])) for r in (n, *blocking)}
        out[n] = merged(list(own.values()))
        # (its actions that run nothing, its records and waits, each done once every blocking
        # stream's work queued before it is)
        acts = np.sort(np.concatenate([np.asarray(rec_cpu, np.int64)[np.asarray(rec_row) == n], wait_time[n]]))
        reached = np.maximum.reduce([_before(*merged([own[b]]), acts) for b in blocking]) if len(acts) else acts
        for b in blocking:
            out[b] = merged([own[b], own[n], (acts, reached)])
    return out


# A wait names a record made before it; a record call begun this long after the wait or the
# event synchronize that names it (asked at its return, or its start) is taken as not its.
RECORD_AFTER_WAIT_NS = 1_000_000


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
    began: np.ndarray  # when its call began (``cpu`` where not given)

    @classmethod
    def of(cls, pid: np.ndarray, event: np.ndarray, sync: np.ndarray, row: np.ndarray, cpu: np.ndarray, began: np.ndarray | None = None) -> EventRecords:
        return cls(*(np.asarray(x, dtype=np.int64) for x in (pid, event, sync, row, cpu, cpu if began is None else began)))

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
            ids = dense_ids(np.r_[self.pid[numbered], pid[ask]], np.r_[self.event[numbered], event[ask]], np.r_[self.sync[numbered], sync[ask]])
            rec_ids, ask_ids = ids[:len(numbered)], ids[len(numbered):]
            last = np.full(int(ids.max()) + 1, -1, np.int64)
            uniq, first_reversed = np.unique(rec_ids[::-1], return_index=True)
            last[uniq] = numbered[len(numbered) - 1 - first_reversed]
            hit = last[ask_ids]
            # (a record whose call began after the wait that names it is no record of it: an
            # export whose record calls' times are off would have the wait hold its stream until
            # then, every boundary after it pushed there; named by none, the wait is said as
            # unresolved. By its call's start: another thread's record call may return later.)
            found = (hit >= 0) & (self.began[np.maximum(hit, 0)] <= t[ask] + RECORD_AFTER_WAIT_NS)
            row[ask[found]], cpu[ask[found]] = self.row[hit[found]], self.cpu[hit[found]]
        # By event alone: the event's latest record made by t (the later row on a tie).
        ask = np.flatnonzero(~asked)
        if len(ask):
            n = len(self.pid)
            ids = dense_ids(np.r_[self.pid, pid[ask]], np.r_[self.event, event[ask]])
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
        ids = dense_ids(np.r_[self.pid, pid], np.r_[self.event, event])
        first = np.full(int(ids.max()) + 1, I64_MAX, np.int64)
        np.minimum.at(first, ids[:n], self.cpu)
        return first[ids[n:]] < t


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


def on_working_device(work_keys: np.ndarray, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray, carried: bool = False) -> np.ndarray:
    """The device of each (pid, dev, stream) named by a synchronization or event record: as
    given where that stream ran work (``work_keys``: the packed keys of streams with ops), where
    no stream of that id in the process did, or where it names another device than 0; else the
    one device on which the process's stream of that id ran work. nsys writes device 0 in
    synchronization records whatever the device (2026.2 in every one: the public mfu_2gpu and
    h100_2gpu captures, the process on GPU 1 waits on "device 0, stream 15", its work is on
    device 1, stream 15; 2025.3 too: the demo's rank on GPU 1; 2024.5 in its event records too),
    never another: a record that names GPU 1's idle NULL stream, in a process whose GPU 0 ran
    work on a NULL stream of the same id, is GPU 1's (it had been moved to GPU 0: a phase on GPU
    1 lost the wait for the blocking streams it stood for). ``carried``: records of a kind that
    carries its device where one of a process's names another than 0 (event records from nsys
    2025.3 on): all of that process's are as given, device 0 too."""
    dev = np.asarray(dev, dtype=np.int64).copy()
    if len(dev) == 0 or len(work_keys) == 0:
        return dev
    pid = np.asarray(pid, dtype=np.int64)
    movable = dev == 0
    if carried:
        movable &= ~np.isin(pid, pid[dev != 0])
    lost = np.flatnonzero(~np.isin(pack_keys(pid, dev, stream), work_keys) & movable)
    if len(lost) == 0:
        return dev
    w_pid, w_dev, w_stream = unpack_keys(work_keys)
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
    k_pid, k_dev, k_stream = unpack_keys(work_keys)
    row_dev = unpack_keys(keys)[1]
    carry_devices = set(np.unique(pid[dev_written != 0]).tolist())  # processes whose wait records carry their devices
    for i in self_wait.tolist():
        p, sid = int(pid[i]), int(stream[i])
        if p in carry_devices:
            continue
        other = np.unique(k_dev[(k_pid == p) & (k_stream == sid) & (k_dev != row_dev[wait_row[i]])])
        if len(other) == 1:
            out[i] = np.searchsorted(keys, pack_keys(np.array([p]), other, np.array([sid])))[0]
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

