"""Stream-order phase boundaries: what a CUDA event recorded at each phase boundary would read.

A phase boundary is a CPU instant, read on a stream with the stream clock
(``stream_clock.StreamClock.done``); which stream: ``phase_streams``. The
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
"""

from __future__ import annotations

import numpy as np

from tracerecon.analysis.columns import thread_keys
from tracerecon.analysis.intervals import inside_another_thread, running_beside
from tracerecon.analysis.phase_streams import UnsetStreams
from tracerecon.analysis.projection import I64_MIN
from tracerecon.analysis.stream_clock import StreamClock
from tracerecon.analysis.stream_keys import dense_ids, gpu_keys, pack_keys


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
    op_owner: np.ndarray | None = None,
    launcher_ops: np.ndarray | None = None,
    beside: np.ndarray | None = None,
    unset: UnsetStreams | None = None,
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
    ``op_owner``: per row of the ops table the clock was built from, the phase (an index into
    these phases) whose work the op is, -1 none (``StreamClock.owned_between``): what a cycle's
    last phase begun apart reads on the next cycle's stream; None: every op there is its.
    ``launcher_ops``: per row of that ops table, whether a launcher of these phases launched it
    onto one of its streams (a thread that launched kernels they own, ``rank._launcher_ops``):
    queued between two phases of a cycle, such an op is the loop's work, which the cycle holds as
    it does what the phases' own threads queued there, where an offload thread's copy is not.
    ``beside``: per phase, whether its thread runs beside the loop (``beside_the_loop``): read alone.
    ``unset``: where given, a phase read alone none of whose thread's phases on its timeline is
    read on a stream of its own (none launched anything or said a stream) is read on the stream
    a thread that never set one works on (``UnsetStreams.of_thread``: its process's NULL stream,
    where the stream it would inherit is a non-blocking one and the thread queued nothing on
    another stream anywhere), an idle one too (then from its CPU start to its CPU end, but for
    what the device's blocking streams hold its events back: ``StreamClock.done``).
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
    sequenced = in_sequence(pid, cycle, tid, cpu_start, range_end, line, beside)
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
            if alone and unset is not None and keys is not None:
                # A thread that launched nothing and said nothing has not set a stream that we
                # know of: its events go to the NULL stream (a row of the clock, idle or not,
                # whose events wait for the blocking streams too), not to the one the loop set.
                quiet = np.flatnonzero(~launched[at] & (srow >= 0))
                null = unset.of_thread(pid[part[quiet]], tid[part[quiet]], dev_used[part[quiet]], stream_used[part[quiet]])
                moved, null = quiet[null >= 0], null[null >= 0]
                if len(moved):
                    stream_used[part[moved]] = null
                    srow = srow.copy()
                    srow[moved] = clock.stream_index(pid[part[moved]], dev_used[part[moved]], null)
            if (srow < 0).all():
                continue  # no GPU work on this timeline: no GPU timeline to share
            threads = None
            if tid is not None:
                started = thread_keys(pid[part], tid[part])
                ended = np.where(ended_elsewhere[part], -1, started) if ended_elsewhere is not None else started  # -1: which thread is unknown
                threads = (started, ended)
            start_b[part], end_b[part], edge_b = _read_boundaries(clock, cpu_start[part], cpu_end[part], cycle[part], srow, alone, own_stream_only, threads,
                                                          range_end[part], part, op_owner, launcher_ops, cycle_ends is not None)
            if cycle_ends is not None:
                cycle_ends[part] = edge_b
    return start_b, end_b, dev_used, stream_used


def _read_boundaries(clock: StreamClock, t: np.ndarray, cpu_end: np.ndarray, cyc: np.ndarray, srow: np.ndarray,
                     alone: bool, own_stream_only: bool = False, threads: tuple[np.ndarray, np.ndarray] | None = None,
                     range_end: np.ndarray | None = None, phase_ids: np.ndarray | None = None, op_owner: np.ndarray | None = None,
                     launcher_ops: np.ndarray | None = None, cycle_edges: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    it (work between, an overlap): then on the next cycle's stream only where work of its own
    was launched there within its range (``phase_ids``: these phases' indices in ``op_owner``,
    per op the phase that owns it, ``phase_boundaries``; whichever thread launched it), as what that
    stream held before (the work between, the overlapping phase's tail) is not its and its
    start never read it. Returns (starts,
    ends, cycle edges): the third, per phase, where its cycle's end reads it, at least its end:
    the cycle's edge read on both streams whatever of it the last phase took, and, after work
    between, the streams of the two phases around it where the sequence's own threads last
    queued work there in the gap (ops, waits, event records; and the ops ``launcher_ops``
    marks: the cycle holds the loop's work between, not an offload thread's copy put there
    meanwhile, which no event at its edges waits for); with ``cycle_edges`` False, the third is
    the ends alone (no cycle's end is asked for). ``alone``: phases that are no neighbours of each other (in no cycle), each read
    on its own stream from its CPU start to its CPU end."""
    if alone:
        a = np.maximum(t, clock.done(srow, t))
        z = np.maximum.reduce([a, cpu_end, clock.done(srow, cpu_end)])
        return a, z, z
    # A boundary is shared only by neighbours on one GPU: one thread driving two GPUs records a
    # phase's events on its own GPU's stream, which is ordered after nothing on the other GPU;
    # a phase whose next one is on the other GPU ends at its own CPU end, as an event there reads.
    gpu = gpu_of_rows(clock, srow)
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
    # A phase begun apart reads the next cycle's stream at its cycle's end only where work it
    # owns was launched there within its range (by its thread, or by a launcher thread whose
    # work the analysis gives it): what that stream held from before it (the work between, in
    # no phase; an overlapping phase's tail) is not its, and its start never read it; nor is
    # what no phase or another phase owns queued there meanwhile (a helper's copy), nor any wait
    # its thread made there (no work of its own).
    cycle_edge = next_in_a_cycle & ~same_cycle_next & ~overlap
    own_end = after_apart & cycle_edge
    if own_end.any():
        ask = np.flatnonzero(own_end)
        ids = phase_ids if phase_ids is not None else np.arange(len(t))
        own_end[ask] = ~clock.owned_between(next_row[ask], t[ask], e[ask], ids[ask], op_owner)
    edge_read = clock.done(np.where(apart, -1, next_row), e)  # (the cycle edge on the next cycle's stream)
    z = np.maximum.reduce([e, clock.done(srow, e), np.where(own_end, I64_MIN, edge_read)])
    # The cycle's end (``edge``) is read at its edge on both streams, whatever of it its last
    # phase took, and holds the work between that the loop queued: each stream of the phases
    # around a gap read as the loop last queued work there in the gap (its phases' threads, and
    # a launcher thread on its own streams: ``launcher_ops``), when theirs was all queued (not at the cycle's end, where they may hold work queued later that
    # no event at the cycle's edge waits for: the next cycle's, run a cycle ahead, or a copy on
    # a stream neither edge phase is on). Nor is an offload thread's copy put there in the gap
    # the cycle's (a KV-offload helper's, on the earlier phase's stream): no event at the
    # cycle's edges waits for it, no more than for one it put there inside a phase's range;
    # the loop's own work queued behind it still reads it, as it ran after it.
    edge = np.maximum(z, edge_read)
    gap = np.flatnonzero(between) if cycle_edges else np.zeros(0, np.int64)
    if len(gap):
        loop = None if threads is None else np.unique(np.r_[threads[0], threads[1]])
        for side in (srow[gap], srow[gap + 1]):
            at = clock.last_queued_by(side, cpu_end[gap], t[gap + 1], loop, launcher_ops)
            np.maximum.at(edge, gap + 1, np.where(at != I64_MIN, clock.done(side, at), I64_MIN))
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


def gpu_of_rows(clock: StreamClock, row: np.ndarray) -> np.ndarray:
    """Per stream row of ``clock`` (-1: none): its (pid, device) key, -1 where none."""
    return np.where(row >= 0, gpu_keys(clock.keys[np.maximum(row, 0)]), -1) if len(clock.keys) else np.full(len(row), -1, np.int64)


def tiled_off_their_stream(clock: StreamClock, pid: np.ndarray, cpu_start: np.ndarray, cpu_end: np.ndarray, cycle: np.ndarray, device: np.ndarray,
                           stream: np.ndarray, tid: np.ndarray | None, boundary_start: np.ndarray, boundary_end: np.ndarray,
                           ended_elsewhere: np.ndarray | None = None, range_end: np.ndarray | None = None,
                           beside: np.ndarray | None = None, unset: UnsetStreams | None = None) -> tuple[np.ndarray, np.ndarray]:
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
    its stream has event waits the trace cannot resolve. Said, not hidden. ``beside``,
    ``unset``: as ``phase_boundaries``'."""
    n = len(pid)
    mask = np.zeros(n, dtype=bool)
    used = stream >= 0
    if n == 0 or len(np.unique(pack_keys(pid[used], device[used], stream[used]))) < 2:
        return mask, np.zeros(n, np.int64)  # one stream: nothing on another can push a phase
    own_s, own_e, _, _ = phase_boundaries(clock, pid, cpu_start, cpu_end, cycle, device, stream, None, tid, own_stream_only=True, ended_elsewhere=ended_elsewhere,
                                          range_end=range_end, beside=beside, unset=unset)
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
        pairs = dense_ids(cycle[with_cycle], tid[with_cycle])
        n_pairs = int(pairs.max()) + 1 if len(pairs) else 0
        own_cycles = n_pairs == len(np.unique(cycle[with_cycle])) and len(np.unique(tid[with_cycle])) > 1
        if len(threads) > 1 and not own_cycles:
            line[mine] = line[mine].min()  # one sequence for the process
    return line


def in_sequence(pid: np.ndarray, cycle: np.ndarray, tid: np.ndarray | None, cpu_start: np.ndarray, cpu_end: np.ndarray,
                line: np.ndarray | None = None, beside: np.ndarray | None = None) -> np.ndarray:
    """Per phase instance (in time order): whether it takes its place in its timeline's
    sequence of boundaries: it is in a cycle, not of a thread beside the loop (``beside``:
    ``beside_the_loop``), and no phase range of another thread of its timeline in the sequence
    runs all through it (``intervals.inside_another_thread``: a helper thread's short range
    inside the loop's phase). The others are read alone (``phase_boundaries``). ``line``:
    ``timelines``' keys, where already made."""
    out = np.asarray(cycle) >= 0
    if beside is not None:
        out = out & ~beside
    if tid is None or len(out) == 0:
        return out
    line = timelines(pid, cycle, tid) if line is None else line
    keys = thread_keys(pid, tid)
    for ln in np.unique(line).tolist():
        seq = np.flatnonzero(line == ln)
        out[seq] &= ~inside_another_thread(np.asarray(cpu_start)[seq], np.asarray(cpu_end)[seq], keys[seq], out[seq])
    return out


def beside_the_loop(pid: np.ndarray, cycle: np.ndarray, tid: np.ndarray | None, cpu_start: np.ndarray, cpu_end: np.ndarray,
                    launched: np.ndarray) -> np.ndarray:
    """Per phase instance (in time order): whether it is of a thread that runs its phases beside
    its timeline's loop (``intervals.running_beside``: an output thread whose range for one step,
    running no kernel, is open while the loop runs the next), read alone: its range is no
    boundary of the loop's phases, which meet where the loop thread's next one begins, as the
    events that thread records at its own boundaries read. The loop thread opens the cycles
    (the thread of most cycles' first phase). ``launched``: per phase, whether it owns work that
    computes (a kernel, a graph launch; a copy back to the host reads results)."""
    out = np.zeros(len(cycle), dtype=bool)
    cycle = np.asarray(cycle)
    if tid is None or len(out) == 0:
        return out
    line = timelines(pid, cycle, tid)
    keys = thread_keys(pid, tid)
    start, end = np.asarray(cpu_start), np.asarray(cpu_end)
    for ln in np.unique(line).tolist():
        seq = np.flatnonzero((line == ln) & (cycle >= 0))
        if len(seq) == 0 or len(np.unique(keys[seq])) < 2:
            continue
        # (in time order: each cycle's first phase is the first of its number)
        _, first = np.unique(cycle[seq], return_index=True)
        openers, counts = np.unique(keys[seq][first], return_counts=True)
        loop = int(openers[np.argmax(counts)])
        # The share is over all of a thread's ranges, those in no cycle too (an output thread's
        # range opened in one cycle and closed in the next is in none, and is most of its time).
        whole = np.flatnonzero(line == ln)
        beside = running_beside(start[whole], end[whole], keys[whole], loop, ~np.asarray(launched)[whole])
        out[seq] = beside[np.searchsorted(whole, seq)]
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

