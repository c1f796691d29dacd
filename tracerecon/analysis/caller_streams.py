"""A phase read on its caller's stream: where the stream that received a phase's work was
forked off another one and joined back into it, within the phase or in a later phase of its
cycle read on the caller's stream (a side stream, NCCL's stream under ProcessGroupNCCL), the
phase is read on the caller's stream, where the engine's own events would be recorded
(``caller_streams``)."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa

from tracerecon.analysis.columns import read_backs, runs_model, synchronous_copies, thread_keys
from tracerecon.analysis.intervals import explode_slices
from tracerecon.analysis.projection import I64_MAX, I64_MIN, equals, int64s
from tracerecon.analysis.stream_clock import StreamClock, forks_joined_back
from tracerecon.analysis.stream_keys import device_of_keys, gpu_keys, stream_of_keys


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
    the range holds code run with the caller current), in the phase itself, else, where it
    computed on the caller too, in the other phases of the threads that launched its work; last,
    once more the joins in a later phase, for the phases those rules moved.

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

    def read_back(key: int, pid: int, own: bool = False) -> dict:
        if not votes:
            votes.append(_read_back_votes(clock, ops, op_streams, frozenset(keys.tolist())))
        return votes[0](key, pid, own)

    device_of = gpu_keys(clock.keys)  # (pid, device) of each stream row
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

    def ops_of(i: int) -> np.ndarray:
        # The rows (of ``ops``) of phase i's ops.
        if not by_phase:
            order = np.argsort(op_phase, kind="stable")
            by_phase.extend((order, op_phase[order]))
        order, sorted_phase = by_phase
        return order[np.searchsorted(sorted_phase, i, side="left"):np.searchsorted(sorted_phase, i, side="right")]

    def others_stream(i: int, to: int) -> bool:
        # A stream only other threads launch on (``threads_using``) is theirs, not this phase's
        # current stream: a record another thread made on it, which this thread's stream waits
        # for, hands work over (a loop thread to its worker) and forks nothing. "This phase's"
        # threads: its range's and those that launched its ops (a scheduler's phase holding a
        # worker's work).
        on = op_streams.threads_using(to)
        if len(on) == 0:
            return False
        mine = np.r_[keys[i], op_streams.threads[ops_of(i)]]
        return not bool(np.isin(mine, on).any())

    phase_reads: list = []  # {(phase, stream row): the phase's own device-to-host copies there}, on first use
    quiet: list = []  # ``_waits_for_quiet_streams``, worked out on first use

    def ends_on(i: int, at: int, to: int) -> bool:
        # Whether the phase's last launch or event wait that touches either stream was made on
        # ``at``: a launch there, or a wait that ``at`` made (joining ``to``'s work into ``at``
        # is an act on ``at``: the join that closes a fork of ``to`` off it); a wait that ``to``
        # made, or one between ``to`` and a third stream, touches ``to``.
        mine = ops_of(i)
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
        device[m], stream[m] = device_of_keys(clock.keys, to[m]), stream_of_keys(clock.keys, to[m])
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
    # fire-and-forget write-back, SGLang HiCache's, only polled with query(); its layer-wise
    # write-through beside the forward's own kernels), where the phase's own thread read results
    # back on that stream and none on the side (``reads_on``: an asynchronous device-to-host copy
    # runs on the current stream), so the range holds code run with that stream current and the
    # side's work was launched in a block nested in it: its events go on the caller. A phase
    # that read nothing back itself, and computed on the caller too, goes by where the threads
    # that launched its work on those streams (its own, or a launcher thread's) read back in all
    # (``read_back``, their own copies: a sample's `.item()`), where that was the caller and
    # never the side; a helper thread that only copies off the caller launched nothing there and
    # says nothing.
    unjoined = np.full(len(row), -1, dtype=np.int64)
    readers = {i for i, _ in reads()}
    for i in np.flatnonzero(candidate & (row >= 0)).tolist():  # (a fork into its stream in its window)
        if i in left:
            continue
        lo, hi = np.searchsorted(cpu, cpu_start[i], side="left"), np.searchsorted(cpu, cpu_end[i], side="right")
        forked_off = [c for c in dict.fromkeys(from_[lo:hi][(into[lo:hi] == row[i]) & (from_[lo:hi] != row[i]) & (from_[lo:hi] >= 0)].tolist())
                      if op_streams.computing_streams[c]]
        if i in readers:
            votes_of = functools.partial(reads_on, i)
        else:
            mine = ops_of(i)
            launchers = np.unique(op_streams.threads[mine[np.isin(op_streams.rows[mine], [int(row[i]), *forked_off])]]).tolist()
            thread_votes: Counter = Counter()
            for t in launchers:
                thread_votes.update(read_back(int(t), int(ph_pid[i]), own=True))
            votes_of = thread_votes.__getitem__
            # (and only onto a caller it computed on itself: a phase run whole under `with
            # torch.cuda.stream(side)` has the side current, wherever its thread reads back)
            computed_on = set(op_streams.rows[mine[op_streams.computes[mine]]].tolist())
            forked_off = [c for c in forked_off if c in computed_on]
        callers = [c for c in forked_off if votes_of(c) > 0]
        if callers and votes_of(int(row[i])) == 0:
            unjoined[i] = max(callers, key=votes_of)
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
    back for it; another phase thread's copies are on its own current stream), but where asked
    for its ``own`` alone: then its asynchronous copies only (a synchronous `cudaMemcpy` lands on
    the legacy stream whatever stream is current)."""
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
    own_async: dict[int, dict[int, int]] = {}  # (a thread's own, asynchronous ones alone)
    synchronous = synchronous_copies(ops)[d2h] if len(d2h) else np.zeros(0, bool)
    for k, p, r, sync in zip(op_streams.threads[d2h].tolist(), op_streams.pid[d2h].tolist(), rows.tolist(), synchronous.tolist()):
        by_thread.setdefault(k, {})[r] = by_thread.get(k, {}).get(r, 0) + 1
        if not sync:
            own_async.setdefault(k, {})[r] = own_async.get(k, {}).get(r, 0) + 1
        if k not in phase_threads:
            by_process.setdefault(p, {})[r] = by_process.get(p, {}).get(r, 0) + 1
    return lambda key, p, own=False: own_async.get(key, {}) if own else (by_thread.get(key) or by_process.get(p) or {})


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
    on S, C waited for a record made on S after that launch, within the phase or after it by the
    phase's thread before that thread launched anything more (then only where C computed in
    the phase); and either C computed within the
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
    # A wait the phase's own thread made after the phase, before it launched anything more (the
    # next phase's `cur.wait_stream(side)` at its top), joins the phase's work as one made in it
    # would: the thread ran nothing on the GPU in between. (Taken only where the phase computed
    # on the stream joined, below: by read-backs alone it is an input stream's hand-off.)
    after = real[clock.join_thread[real] >= 0]
    until = _next_launch_after(clock, op_streams, keys, cpu_end, np.unique(clock.join_thread[after]))
    # Phases with a wait for a record on their own stream within their window, or after it so:
    # the only ones asked.
    asked = np.zeros(len(row), dtype=bool)
    for r in np.unique(row[row >= 0]).tolist():
        out_of_r = cpu[real[from_[real] == r]]
        on_r = np.flatnonzero(row == r)
        asked[on_r] = np.searchsorted(out_of_r, cpu_end[on_r], side="right") > np.searchsorted(out_of_r, cpu_start[on_r], side="left")
        late = after[from_[after] == r]
        if len(late):
            hit = np.searchsorted(cpu[late], until[on_r], side="left") > np.searchsorted(cpu[late], cpu_end[on_r], side="right")
            asked[on_r[hit]] = True
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
        late = after[np.searchsorted(cpu[after], cpu_end[i], side="right"):np.searchsorted(cpu[after], until[i], side="left")]
        late = late[clock.join_thread[late] == keys[i]]
        late = late[(from_[late] == side) & (rec_cpu[late] >= last)]
        joined_after = [c for c in dict.fromkeys(into[late].tolist()) if computing[c] and c not in joined_into]
        votes = votes_of(int(keys[i]), int(ph_pid[i])) if joined_into else {}
        # Where the thread reads back on C more than on S, that settles which of the two is its
        # current stream, S's waits for C (an input stream forked off it for a second upload) too.
        found = [c for c in joined_into
                 if votes.get(c, 0) > votes.get(side, 0) or (c not in forked and ((o_row[on] == c) & comp[on]).any())]
        found += [c for c in joined_after if c not in forked and ((o_row[on] == c) & comp[on]).any()]
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


def _next_launch_after(clock: StreamClock, op_streams: _OpStreams, keys: np.ndarray, at: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Per phase whose thread (``keys``) is one of ``threads``: when that thread next launched
    GPU work after ``at`` (its ops' ``launch_instants``); I64_MAX where it launched none after.
    ``at`` itself (no time after the phase) for the other phases, a thread that launched nothing,
    and where the ops name no thread: a wait is then no join after the phase."""
    out = np.asarray(at, dtype=np.int64).copy()
    asked = np.flatnonzero(np.isin(keys, threads))
    if len(asked) == 0 or "launch_tid" not in op_streams.ops.column_names:
        return out
    sel = np.flatnonzero(np.isin(op_streams.threads, threads))
    th, inst = op_streams.threads[sel], clock.op_instants[sel]
    order = np.lexsort((inst, th))
    th, inst = th[order], inst[order]
    for k in np.unique(keys[asked]).tolist():
        times = inst[np.searchsorted(th, k, side="left"):np.searchsorted(th, k, side="right")]  # (its ops, in launch order)
        if len(times) == 0:
            continue  # (a thread that launched nothing: no launch bounds a window after its phases)
        mine = asked[keys[asked] == k]
        nxt = np.searchsorted(times, at[mine], side="right")
        out[mine] = np.where(nxt < len(times), times[np.minimum(nxt, len(times) - 1)], I64_MAX)
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
    wait: of the stream waited for) was forked off ``stream`` within it and joined back into
    ``stream`` within it (``forks_joined_back``; ``into``, ``from_``, ``cpu``: event waits in
    CPU order)."""
    out = np.zeros(len(start), dtype=bool)
    fork_at, side, join_at = forks_joined_back(into, from_, cpu, stream, joins_counted=quiet)
    for n in np.unique(side).tolist():
        f, j = fork_at[side == n], join_at[side == n]
        # The first fork within each window, joined back within it (a later fork of the same
        # side stream joins back no earlier).
        at = np.searchsorted(f, start, side="left")
        inside = (at < len(f)) & (f[np.minimum(at, len(f) - 1)] < end)
        out |= inside & (j[np.minimum(at, len(f) - 1)] <= end)
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

