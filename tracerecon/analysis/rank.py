"""One rank, start to finish: which phase owns which GPU op and blocking call, the ranges'
projection, the stream-order boundaries, and the finished phases and cycles tables.

Pure functions over Arrow tables (what ``tracerecon.nsys`` read, already cut to the rank's
processes). ``own_rank`` does everything that needs no other rank; ``finish_rank`` adds what the
cross-rank step found (each phase's wait in collectives) and returns the finished tables.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon import schema
from tracerecon.memory import release_free_memory
from tracerecon.cores import usable_cores
from tracerecon.json_text import gpu_label
from tracerecon.analysis.attribution import attribute_other_threads, cross_thread_phases, own_launches, stream_deciding_ops
from tracerecon.analysis.awaited import WaitTargets, awaited_work, calls_in_turns, wait_steps, wait_targets
from tracerecon.analysis.columns import computes, graph_node_launches, is_graph_launch, read_backs, synchronous_copies, thread_keys
from tracerecon.analysis.intervals import distinct_few, isin_few
from tracerecon.analysis.boundaries import beside_the_loop, in_sequence, phase_boundaries, tiled_off_their_stream, timelines
from tracerecon.analysis.caller_streams import caller_streams
from tracerecon.analysis.phase_streams import CopyStreams, UnsetStreams, busiest_streams, narrowed_by_phase, phase_streams, said_streams
from tracerecon.analysis.stream_keys import pack_keys
from tracerecon.analysis.stream_clock import StreamClock, launch_instants, stream_clock
from tracerecon.analysis.nccl import comm_mask, phase_comm_split
from tracerecon.analysis.config import NUMBERS, PhaseConfig, cycle_kind, is_cycle_name
from tracerecon.analysis.phases import (ERROR_FLOOR_NS, PhaseInputs, adds_up_tolerance, build_cycles, build_phases, cycle_said, cycles_by_time, empty_steps,
                                        cycles_per_thread, phases_past_their_cycle, select_phases)
from tracerecon.analysis.projection import I64_MAX, I64_MIN, index_launches, innermost_owner, int64s, string_mask
from tracerecon.analysis.ranges import build_ranges, nest
from tracerecon.analysis.summary import phase_value_for
from tracerecon.analysis.syncs import attribute_waits, find_blocking_calls


@dataclass(frozen=True)
class RankTables:
    """What one rank's analysis reads: Arrow tables in the ``tracerecon.schema`` raw layouts,
    cut to the rank's processes. ``gpu_ops`` are linked to their launching calls
    (``projection.link_launches``)."""

    nvtx_ranges: pa.Table
    gpu_ops: pa.Table
    api_calls: pa.Table
    sync_records: pa.Table
    event_records: pa.Table
    accepted_marks: tuple = ()  # (payload, ts_ns, tokens) of tracerecon.accepted=N marks
    stream_marks: pa.Table | None = None  # (pid, tid, ts_ns) of tracerecon.stream marks
    # The CPU start of the rank's first kernel launch made after every launch of the rank whose
    # GPU work is in the trace (``pipeline._unrun_from``: the capture ended before recording
    # its work); None: none.
    unrun_from_ns: int | None = None
    # (pid, CUDA device in that process, the machine's GPU) where a process numbered a GPU
    # otherwise than the machine (CUDA_VISIBLE_DEVICES; ``ExportInfo.cuda_devices``): what the
    # notes name a GPU by. The tables' device ids stay the process's CUDA numbers.
    cuda_devices: tuple = ()
    # How each of the rank's streams was created (``schema.CUDA_STREAMS``): a process's NULL
    # stream and the blocking streams it waits for and they for it (``stream_clock``); None or
    # empty where the export does not say.
    cuda_streams: pa.Table | None = None


def gpu_names(pid: np.ndarray, device: np.ndarray, cuda_devices: tuple) -> list[str]:
    """Each (process, CUDA device) as a note names its GPU: ``2``, or ``2 (CUDA 0)`` where the
    process numbered the machine's GPU 2 otherwise (as the report's GPU lines do); one name per
    (process, device), in the order of the machine's GPUs, each name once."""
    renamed = {(p, c): g for p, c, g in cuda_devices if c != g}
    named = {(renamed.get((p, d), d), d) for p, d in zip(pid.tolist(), device.tolist())}
    return list(dict.fromkeys(gpu_label(g, c) for g, c in sorted(named)))


@dataclass(frozen=True)
class RankWork:
    """One rank after ownership and boundaries, before the cross-rank step fills ``wait_ns``."""

    rank: int
    ranges: pa.Table
    gpu_ops: pa.Table
    syncs: pa.Table
    phase_inputs: PhaseInputs
    cycle_rows: np.ndarray
    skip_cycles: int | None = None
    accepted_marks: tuple = ()
    # The phases table without waits in collectives (what the cross-rank step reads), built
    # where the rank was analysed: in its worker process when several exports load at once.
    provisional: pa.Table | None = None
    notes: tuple[str, ...] = ()  # what the analysis could not take as given (warnings, one line each)
    # The CPU start of the first kernel launch whose GPU work the capture ended before recording
    # (``RankTables.unrun_from_ns``; None: none): the cycles from there are incomplete.
    unrun_from_ns: int | None = None
    # The cycles in whose span no thread of the rank launched GPU work (``cycles_without_launches``),
    # and those split off as steps that ended inside their first phase (``phases.empty_steps``).
    silent_cycles: np.ndarray | None = None
    empty_steps: np.ndarray | None = None
    # Per cycle (ids, GPU instants): where its end reads, at least its phases' latest end and
    # later where its edge on the next cycle's stream (which a last phase begun apart from the
    # one before it leaves out) or work queued between two of its phases runs past that
    # (``boundaries.phase_boundaries``' ``cycle_ends``); None: no cycle has a phase read.
    cycle_ends: tuple[np.ndarray, np.ndarray] | None = None

    def provisional_phases(self) -> pa.Table:
        """The phases table without waits in collectives (what the cross-rank step reads)."""
        return self.provisional if self.provisional is not None else build_phases(self.phase_inputs)


# Above this many GPU ops in one rank, the per-phase stream work waits for the projection
# instead of running beside it (memory over speed; see _own_rank). The 76 MB trace has 420k
# ops; the 1 GiB export 5.9M.
STREAM_WORK_ALONGSIDE_MAX_OPS = 2_000_000

# How the warnings of GPU work queued outside the phases begin (in no phase of a cycle, or
# between two phases): said of the phases only, not of the trace (``ranges`` leaves them out).
QUEUED_OUTSIDE_PHASES = "GPU work was queued "


def _calls_as_launches(calls: pa.Table) -> pa.Table:
    """View CPU calls as 'ops launched by themselves', to reuse range ownership lookups."""
    return pa.table(
        {
            "pid": calls["pid"],
            "launch_tid": calls["tid"],
            "launch_start_ns": calls["start_ns"],
            "launch_end_ns": calls["end_ns"],
        }
    )


def own_rank(tables: RankTables, rank: int, config: PhaseConfig) -> RankWork:
    """Ownership (same thread, then across threads), projection, stream boundaries, waits."""
    ops = tables.gpu_ops
    api = tables.api_calls
    sync_records = tables.sync_records
    event_records = tables.event_records
    # The stream clock and the blocking calls need no ownership: they are worked out in other
    # threads while this one owns the ops (numpy releases the GIL in its sorts and searches):
    # 0.12-0.15 s less of a 2-core run's 0.9 s analysis of the 76 MB trace.
    with ThreadPoolExecutor(2) as pool:
        clock_f = pool.submit(stream_clock, ops, api, event_records, sync_records, tables.cuda_streams)
        blocking_f = pool.submit(find_blocking_calls, api, sync_records, ops)
        return _own_rank(tables, rank, config, clock_f.result, blocking_f.result)


def _own_rank(tables: RankTables, rank: int, config: PhaseConfig, clock_of: Callable[[], StreamClock], blocking_of: Callable[[], pa.Table]) -> RankWork:
    """``own_rank`` given the stream clock and the blocking calls (``find_blocking_calls``),
    each asked for where it is first needed."""
    ops = tables.gpu_ops
    nested = nest(tables.nvtx_ranges)

    launches = index_launches(ops)  # sorted once; every lookup of ops by CPU range below uses it
    phase_rows, cycle_of, cycle_rows, labels = select_phases(nested, config)
    if len(cycle_rows):
        cycle_of, empty = cycles_by_time(nested, phase_rows, cycle_of, cycle_rows, labels), (None, np.zeros(0, np.int64))
    else:
        cycle_of = cycles_per_thread(nested, phase_rows, cycle_of, labels, config.labels(), ops)
        cycle_of, *empty = empty_steps(nested, phase_rows, cycle_of, labels, launches)
    n_ph = len(phase_rows)
    depth = int64s(nested["depth"]) if nested.num_rows else np.zeros(0, np.int64)
    row_to_phase = np.full(nested.num_rows + 1, -1, dtype=np.int64)
    row_to_phase[phase_rows] = np.arange(n_ph)
    phase_mask = np.zeros(nested.num_rows, dtype=bool)
    phase_mask[phase_rows] = True
    all_mask = pc.not_equal(nested["style"], "start_end_cross_thread").to_numpy(zero_copy_only=False) if nested.num_rows else np.zeros(0, bool)

    # Same-thread ownership (nsys's rule; a phase started with nvtxRangeStart and ended on another
    # thread, which nsys projects nothing to, owns what its starting thread launched inside it),
    # then work of other threads (analysis.attribution).
    # Of several phases holding a launch, the latest-starting (the later row: for push/pop ranges
    # the deepest; start/end ranges, depth 0 whatever they lie in, are ordered by time too).
    op_phase = row_to_phase[innermost_owner(ops, nested, phase_mask, None, launches, start_thread_too=True)]
    ph = nested.take(pa.array(phase_rows, pa.int64())) if n_ph else nested.slice(0, 0)
    ph_pid, ph_tid = (int64s(ph["pid"]), int64s(ph["tid"])) if n_ph else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    ph_s, ph_e = (int64s(ph["start_ns"]), int64s(ph["end_ns"])) if n_ph else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    copy_streams = CopyStreams(ops)
    op_thread_computes = copy_streams.thread_computes(int64s(ops["pid"]), int64s(ops["launch_tid"], -1)) if ops.num_rows else np.zeros(0, bool)
    own, launched_nothing = own_launches(op_phase, n_ph, computes(ops) if ops.num_rows else np.zeros(0, bool), op_thread_computes)
    takes_cross = cross_thread_phases(ph_pid, ph_tid, labels, own, config.phase_thread)
    ended_elsewhere = ~all_mask[phase_rows] if n_ph else np.zeros(0, bool)  # start/end ranges ended on another thread
    # What those own lies outside nsys's projection: their ranges rows take it as cross-thread work.
    by_start_thread = np.flatnonzero((op_phase >= 0) & ended_elsewhere[np.maximum(op_phase, 0)]) if ended_elsewhere.any() else np.zeros(0, np.int64)
    if takes_cross.any() and ops.num_rows:
        same = op_phase
        op_phase = attribute_other_threads(int64s(ops["pid"]), int64s(ops["launch_tid"], -1), _attribution_instants(ops), same,
                                           ph_pid, ph_tid, ph_s, ph_e, takes_cross, launched_nothing)
        moved = np.flatnonzero((op_phase >= 0) & (same < 0))
        got = np.zeros(n_ph, dtype=bool)
        got[op_phase[moved]] = True
        takes_cross &= got | (own == 0)
        stream_deciders = stream_deciding_ops(op_thread_computes, moved)
        took_cross = bool((takes_cross & got).any())
        moved = np.union1d(moved, by_start_thread)
        cross_owned = (moved, phase_rows[op_phase[moved]])
        cross_rows = np.union1d(phase_rows[takes_cross & got], phase_rows[op_phase[by_start_thread]])
    elif len(by_start_thread):
        cross_owned = (by_start_thread, phase_rows[op_phase[by_start_thread]])
        cross_rows, stream_deciders, took_cross = np.unique(cross_owned[1]), None, False
    else:
        cross_owned, cross_rows, stream_deciders, took_cross = None, np.zeros(0, np.int64), None, False
    # Each phase's stream work needs the ops' phases (and the stream clock), not the ranges: on
    # two other threads, the mix of its ops (communication split, graph launches) from now,
    # its stream-order boundaries once the clock is in, while this thread projects the ranges
    # (the 76 MB trace: 0.17 s less of a 2-core run's 0.53 s here). Not on a large rank, where
    # the projection's arrays are the run's memory peak and theirs would add to it (a 1 GiB
    # export: 2.5 -> 2.8 GB on the 2-core machine; the 76 MB trace: +30 MB), nor on one core,
    # where it would cost the memory and save nothing.
    alongside = ops.num_rows <= STREAM_WORK_ALONGSIDE_MAX_OPS and usable_cores() > 1
    # Phases of a thread beside the loop (an output thread's, running no kernel, open while the
    # loop runs its next phases; its copies back to the host read results): read alone, in every
    # reading of the boundaries below.
    computing_op = op_phase[(op_phase >= 0) & computes(ops)] if ops.num_rows else np.zeros(0, np.int64)
    runs_kernels = np.bincount(computing_op, minlength=n_ph)[:n_ph] > 0
    beside = beside_the_loop(ph_pid, cycle_of, ph_tid, ph_s, ph_e, runs_kernels)
    with ThreadPoolExecutor(2) as side:
        mix_f = side.submit(_phase_op_mix, ops, op_phase, n_ph) if alongside else None
        # The clock and the blocking calls are in before the projection: it makes the run's
        # largest arrays (one entry per range and op it owns), and those threads' working
        # arrays would add to that peak (a 1 GiB export went from 2.5 to 3.0 GB when they overlapped).
        blocking, clock = blocking_of(), clock_of()
        targets = wait_targets(clock, blocking)  # (1 ms on the 76 MB trace: the stream work asks too)
        release_free_memory()  # what those threads freed, before the peak
        said = said_streams(clock, tables.stream_marks, tables.api_calls, nested, ops, op_phase, stream_deciders, ph_pid, ph_tid, ph_s, ph_e, cycle_of)
        unset = UnsetStreams(clock)
        stream_work = (ops, op_phase, n_ph, clock, ph_pid, ph_tid, ph_s, ph_e, cycle_of, stream_deciders, ended_elsewhere, copy_streams, said, (blocking, targets),
                       beside, unset)
        boundaries_f = side.submit(_phase_stream_boundaries, *stream_work) if alongside else None
        ranges = build_ranges(nested, ops, rank, launches, cross_owned, cross_rows)
        op_range = innermost_owner(ops, ranges, all_mask, depth, launches)
        if cross_owned is not None:
            # Work of other threads sits in the phase that took it; a phase's own start thread's
            # work (a phase ended elsewhere) in whichever of the two started later.
            moved_ops, moved_to = cross_owned
            later = _starts_no_earlier(nested, moved_to, op_range[moved_ops]) | ~np.isin(moved_ops, by_start_thread)
            op_range[moved_ops[later]] = moved_to[later]

        # Blocking calls, owned by the same two rules.
        as_launch = _calls_as_launches(blocking)
        call_phase = row_to_phase[innermost_owner(as_launch, ranges, phase_mask, None, start_thread_too=True)]
        if took_cross:
            call_phase = attribute_other_threads(int64s(blocking["pid"]), int64s(blocking["tid"]), int64s(blocking["start_ns"]), call_phase, ph_pid, ph_tid, ph_s, ph_e,
                                                 takes_cross, launched_nothing)
        call_range = innermost_owner(as_launch, ranges, all_mask, depth)
        if n_ph:
            # The call's phase is its range where no range holds it, or where that phase (ended
            # on another thread, outside nsys's projection) started no earlier than the range.
            ph_row = phase_rows[np.maximum(call_phase, 0)]
            inner = ended_elsewhere[np.maximum(call_phase, 0)] & _starts_no_earlier(nested, ph_row, call_range)
            call_range = np.where((call_phase >= 0) & ((call_range < 0) | inner), ph_row, call_range)
        in_timer = _in_phase_timer(blocking, call_phase, ph_s, ph_e)
        waits = attribute_waits(blocking, ops, op_phase, call_phase, _awaited(clock, blocking, targets, ops), (*in_timer, n_ph))
        syncs = _build_syncs(blocking, targets, waits, call_range, call_phase, labels, rank)
        b_start, b_end, dev, stream, ph_read_end, as_side, cycle_ends = boundaries_f.result() if boundaries_f is not None else _phase_stream_boundaries(*stream_work)
        split, n_graph = mix_f.result() if mix_f is not None else _phase_op_mix(ops, op_phase, n_ph)

    # A phase's timer holds only the part of each wait charged to it that it ran through, and
    # two waits at once (its own thread's and a worker's) once.
    blocked, absorbed = waits["blocked_by_phase"], waits["absorbed_by_phase"]
    inputs = PhaseInputs(
        rank=rank, ranges=ranges, phase_rows=phase_rows, labels=labels, cycle=cycle_of,
        boundary_start=b_start, boundary_end=b_end, stream_device=dev, stream_id=stream,
        n_graph_launches=n_graph,
        blocked_ns=blocked, absorbed_ns=absorbed,
        comm_ns=split["comm_ns"], compute_ns=split["compute_ns"], overlap_ns=split["overlap_ns"],
    )
    gpu_ops = _build_gpu_ops(ops, op_range, op_phase, rank)
    tiled, own = tiled_off_their_stream(clock, ph_pid, ph_s, ph_read_end, cycle_of, dev, stream, ph_tid, b_start, b_end, ended_elsewhere, ph_e, beside, unset)
    # ``_unphased_launches``, worked out once, where a note needs it.
    unphased = functools.cache(lambda: _unphased_launches(ops, clock, op_phase, op_range, ranges, phase_rows, config.cycle_prefix))
    nested_cycles = cycles_within_cycles(nested, cycle_rows)
    provisional = build_phases(inputs)
    silent = cycles_without_launches(nested, cycle_rows, cycle_of, ph_s, ph_e, clock.op_instants)
    latest_edges = _latest_cycle_edges(cycle_of, cycle_ends)
    # (the cycles as the finished tables will have them, where a note asks)
    cycles_now = functools.cache(lambda: build_cycles(ranges, provisional, cycle_rows, rank, config.skip_cycles, list(tables.accepted_marks),
                                                      tables.unrun_from_ns, silent, empty[1], latest_edges))

    return RankWork(rank=rank, ranges=ranges, gpu_ops=gpu_ops, syncs=syncs, phase_inputs=inputs, cycle_rows=cycle_rows, skip_cycles=config.skip_cycles,
                    unrun_from_ns=tables.unrun_from_ns,
                    silent_cycles=silent, empty_steps=empty[1], cycle_ends=latest_edges,
                    accepted_marks=tables.accepted_marks, provisional=provisional,
                    notes=_past_cycle_notes(phases_past_their_cycle(nested, phase_rows, cycle_of, cycle_rows), labels) + _tiled_notes(tiled, own, b_end - b_start, labels)
                    + _side_stream_notes(as_side, b_end - b_start, stream, labels)
                    + _between_notes(ph_pid, ph_tid, cycle_of, b_start, b_end, labels, ph_s, ph_e, unphased, dev,
                                     clock.stream_index(ph_pid, dev, stream), beside)
                    + _phase_thread_notes(config.phase_thread, ph_tid)
                    + _out_of_step_notes(cycle_of, cycle_rows, labels, ph_tid, int64s(nested["tid"])[cycle_rows] if len(cycle_rows) else np.zeros(0, np.int64))
                    + _overlapping_cycle_notes(nested, cycle_rows)
                    + _before_capture_notes(clock)
                    + _host_side_wait_notes(tables.api_calls)
                    + _unrecorded_stream_notes(tables.stream_marks, clock)
                    + _interprocess_wait_notes(clock, opened := _interprocess_pids(tables.api_calls))
                    + _unrecorded_wait_notes(clock, opened)
                    + _several_devices_notes(ops, tables.cuda_devices)
                    + _loops_per_gpu_notes(ph_pid, ph_tid, cycle_of, dev, tables.cuda_devices)
                    + _phases_on_several_gpus_notes(ops, op_phase, dev, labels, ph_pid, tables.cuda_devices)
                    + _cycles_across_gpus_notes(cycle_of, dev, b_start, ph_pid, ph_tid, ph_s, ph_e, tables.cuda_devices, beside)
                    + _cycle_edge_notes(clock, nested, cycle_rows, cycle_of, ph_pid, ph_s, ph_read_end, dev, stream, b_start, b_end, labels, unphased,
                                        holds_cycles=nested_cycles[1])
                    + _nested_cycle_notes(nested, cycle_rows, config.cycle_prefix, *nested_cycles)
                    + _empty_step_notes(empty[0], len(empty[1]), cycle_of)
                    + _steps_without_first_phase_notes(labels, cycle_of, len(cycle_rows) > 0)
                    + _other_cycle_said_notes(nested, phase_rows, cycle_of, cycle_rows, labels)
                    + _quiet_thread_cycle_notes(ph_pid, ph_tid, cycle_of, runs_kernels, labels)
                    + _read_alone_notes(ph_pid, ph_tid, cycle_of, ph_s, ph_e, beside, labels, cycles_now))


def _in_phase_timer(blocking: pa.Table, call_phase: np.ndarray, ph_s: np.ndarray, ph_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per blocking call, the part of it its phase's CPU span holds (start, end; end <= start:
    none, and no phase: none). A call on the phase's own thread lies inside it; one of another
    thread charged to the phase open when it began (``attribute_other_threads``: a worker's
    synchronize under a scheduler's phase) may run on after the phase ended, where the phase's
    timer did not wait."""
    start, end = int64s(blocking["start_ns"]), int64s(blocking["end_ns"])
    if len(ph_s) == 0:
        return start, start.copy()
    p = np.maximum(call_phase, 0)
    has = call_phase >= 0
    return np.where(has, np.maximum(start, ph_s[p]), start), np.where(has, np.minimum(end, ph_e[p]), start)


def _awaited(clock: StreamClock, blocking: pa.Table, targets: WaitTargets, ops: pa.Table) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``attribute_waits``' ``awaited``: per (op, blocking call) pair, whether the call waited
    for the op (``awaited_work``): the op's stream is bounded for the call and the op was
    launched by then (an op whose launch call the trace lacks, a capture trimmed or begun
    mid-run, may have been launched at any time before it ran: it counts wherever its stream
    is bounded). Only the ops asked about are looked up; the calls are bounded in turns
    (``awaited.calls_in_turns``), each turn's bounds dropped before the next."""
    n_calls = blocking.num_rows
    if n_calls == 0 or len(clock.keys) == 0 or ops.num_rows == 0:
        return None
    turns = calls_in_turns(n_calls, len(clock.keys))
    b_rows, b_row = clock.branch_ops, clock.branch_rows  # a graph's branch nodes count on its launch stream too
    # Of all ops, not of those asked about: a graph launch's nodes take its first node's start.
    instants = clock.op_instants

    def waited_in_turn(op: np.ndarray, call: np.ndarray, known: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        sub = ops.take(pa.array(op))
        row = clock.stream_index(int64s(sub["pid"]), int64s(sub["device_id"], -1), int64s(sub["stream_id"], -1))
        launch = np.where(int64s(sub["launch_end_ns"], -1) < 0, I64_MIN, instants[op])
        bound = bounds[call, np.maximum(row, 0)]
        waited = ~known[call] | (row < 0) | ((bound != I64_MIN) & (launch <= bound))
        if len(b_rows):
            at = np.minimum(np.searchsorted(b_rows, op), len(b_rows) - 1)
            branch = np.flatnonzero(b_rows[at] == op)
            l_row = b_row[at[branch]]
            l_bound = bounds[call[branch], np.maximum(l_row, 0)]
            waited[branch] |= (l_row >= 0) & (l_bound != I64_MIN) & (launch[branch] <= l_bound)
        return waited

    def waited_for(op: np.ndarray, call: np.ndarray) -> np.ndarray:
        if len(turns) == 1:
            return waited_in_turn(op, call, *awaited_work(clock, blocking, targets))
        out = np.zeros(len(op), dtype=bool)
        steps = wait_steps(clock)
        order = np.argsort(call, kind="stable")
        cuts = np.searchsorted(call[order], [*turns, n_calls])
        for lo, a, b in zip(turns, cuts[:-1], cuts[1:]):
            if a < b:
                hi = min(lo + turns.step, n_calls)
                sel = order[a:b]
                known, bounds = awaited_work(clock, blocking.slice(lo, hi - lo), targets.calls(lo, hi), steps)
                out[sel] = waited_in_turn(op[sel], call[sel] - lo, known, bounds)
        return out

    return waited_for


def _starts_no_earlier(nested: pa.Table, rows: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per pair: range ``rows[i]`` started no earlier than range ``other[i]`` (True where
    ``other[i]`` is -1, no range): of two ranges holding one call, the inner one in time."""
    start = int64s(nested["start_ns"])
    return (other < 0) | (start[rows] >= start[np.maximum(other, 0)])


def _past_cycle_notes(past: np.ndarray, labels: list) -> tuple[str, ...]:
    """The line for the phase instances ``phases_past_their_cycle`` finds, if any."""
    if len(past) == 0:
        return ()
    return (f"{len(past)} phase range(s) start inside a cycle range and end after it (first: {labels[int(past[0])]!r}): they belong to no "
            "cycle, are read alone and counted in no cycle's GPU time",)


# Calls that make a stream wait for the host (a host function, a callback) or for a value in
# memory: the trace records no event wait for either, so the wait is not modelled.
# (A write of a value, cuStreamWriteValue, makes no stream wait; a batch of memory operations may.)
_HOST_SIDE_WAITS = re.compile(r"LaunchHostFunc|StreamAddCallback|StreamWaitValue|StreamBatchMemOp|WaitExternalSemaphores", re.I)


def _host_side_wait_notes(api_calls: pa.Table) -> tuple[str, ...]:
    """One line where the rank made a stream wait for something no event records (a host
    function, a callback, a memory value, an external semaphore): work queued behind it starts late for a reason the
    trace does not show, so a phase on that stream may read short and the next one long."""
    if api_calls.num_rows == 0:
        return ()
    names = api_calls["name"].combine_chunks()
    if not isinstance(names, pa.DictionaryArray):
        names = names.dictionary_encode()
    hits = [i for i, n in enumerate(names.dictionary.to_pylist()) if n and _HOST_SIDE_WAITS.search(n)]
    if not hits:
        return ()
    counts = np.bincount(names.indices.to_numpy(zero_copy_only=False), minlength=len(names.dictionary))
    said = ", ".join(f"{counts[i]} {names.dictionary[i].as_py()}" for i in hits if counts[i])
    if not said:
        return ()
    return (f"{said}: streams waited for a host function, a callback, a value in memory or an external semaphore, for which the trace records no event; "
            "such waits are not modelled: a phase whose stream waited so may read short, and the next one long",)


def _unrecorded_stream_notes(stream_marks: pa.Table | None, clock: StreamClock) -> tuple[str, ...]:
    """One line where phases marked their current stream (``tracerecon.instrument``) but the
    export holds no event record to say which stream that was (nsys 2022 and older keep none;
    ``--cuda-event-trace=false`` drops them): their streams are chosen from their work."""
    if stream_marks is None or stream_marks.num_rows == 0 or len(clock.record_row):
        return ()
    return (f"{stream_marks.num_rows} phase starts marked their current stream (tracerecon.stream), but the export holds no CUDA event "
            "records to say which (CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): each phase's "
            "stream is chosen from its work instead",)


# Opening another process's event (torch's CUDA tensor sharing: the consumer waits on the
# producer's interprocess event).
_OPENS_INTERPROCESS_EVENTS = re.compile(r"IpcOpenEventHandle", re.I)


def _interprocess_pids(api_calls: pa.Table) -> np.ndarray:
    """The processes that opened another process's event (``cudaIpcOpenEventHandle``)."""
    if api_calls.num_rows == 0:
        return np.zeros(0, np.int64)
    return np.unique(int64s(api_calls["pid"])[string_mask(api_calls["name"], _OPENS_INTERPROCESS_EVENTS.search)])


def _interprocess_wait_notes(clock: StreamClock, opened: np.ndarray) -> tuple[str, ...]:
    """One line where a process that opened another process's events (``opened``) made stream
    waits on events it never recorded in the trace (``StreamClock.unrecorded_wait_pids``): waits
    on the other process's records, which this process's trace does not tie to the work they wait
    for (CUDA events on the waiting stream would read that work's end). Not modelled: taken as
    done, so a phase whose stream only waited reads short and the next one long. Not where the
    rank holds no event record at all (``_unrecorded_wait_notes`` says that, and this)."""
    n = int(np.isin(clock.unrecorded_wait_pids, opened).sum()) if len(opened) and len(clock.record_row) else 0
    if not n:
        return ()
    return (f"{n} stream wait(s) (cudaStreamWaitEvent) name events their process never recorded, and it opened another process's events "
            "(cudaIpcOpenEventHandle): waits on another process's records, which this trace does not tie to the work they wait for, are "
            "not modelled (taken as done): a phase whose stream only waited so may read short, and the next one long",)


def _unrecorded_wait_notes(clock: StreamClock, opened: np.ndarray) -> tuple[str, ...]:
    """One line where streams waited for events (``cudaStreamWaitEvent``) but the export holds
    no event record at all to say what they waited for (nsys 2022 and older keep none;
    ``--cuda-event-trace=false`` drops them): the waits are not modelled, so a boundary that
    only a wait moves (a phase that only waits for another stream's copy) reads early; where the
    rank opened another process's events (``opened``), the line says they may be that process's
    (whose records are not this rank's). And one where waits named records made after them
    (``StreamClock.waits_before_their_record``)."""
    if clock.waits_before_their_record:
        return (f"{clock.waits_before_their_record} stream wait(s) (cudaStreamWaitEvent) name an event record made after them (the export's "
                "times of those records are off): such waits are not modelled: a phase whose stream only waited may read short, and the "
                "next one long",)
    if len(clock.record_row) or not len(clock.unresolved_into):
        return ()
    n = len(np.unique(clock.unresolved_into))
    if len(opened):
        return (f"streams waited for events on {n} stream(s), but the trace holds no CUDA event record of the rank's to say what they waited "
                "for: the events may be another process's, which it opened (cudaIpcOpenEventHandle), whose records are not the rank's, or "
                "the export holds none (CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): such waits are "
                "not modelled: a phase whose stream only waited may read short, and the next one long",)
    return (f"streams waited for events on {n} stream(s), but the export holds no CUDA event records to say what they waited for "
            "(CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): such waits are not modelled: a phase "
            "whose stream only waited may read short, and the next one long",)


def cycles_within_cycles(nested: pa.Table, cycle_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle range (``cycle_rows``' order): (lies within the time span of a cycle range of
    its process named otherwise, holds one), whatever their threads and whether they nest as
    push/pop ranges (a helper's ``cycle_draft_loop`` inside ``cycle 3``; a whole-run
    ``cycle loop`` around them all). Names are compared without their numbers: ``cycle 2``
    inside ``cycle 1`` (a range ended late, on another thread; another thread's own cycles; a
    range never ended) is the same kind of cycle overlapping, not nested."""
    inner = np.zeros(len(cycle_rows), dtype=bool)
    outer = np.zeros(len(cycle_rows), dtype=bool)
    if len(cycle_rows) < 2:
        return inner, outer
    names = nested["name"].take(pa.array(cycle_rows)).to_pylist()
    kinds = [cycle_kind(n) for n in names]
    if len(set(kinds)) < 2:
        return inner, outer
    pid = int64s(nested["pid"])[cycle_rows]
    start = int64s(nested["start_ns"])[cycle_rows]
    end = int64s(nested["end_ns"], np.iinfo(np.int64).max)[cycle_rows]
    order = np.lexsort((-end, start, pid)).tolist()  # by process, then start, the longer first
    reach: dict = {}  # per kind of name: (the furthest end so far, the range reaching it)
    last_pid = None
    for k in order:
        if pid[k] != last_pid:
            reach, last_pid = {}, pid[k]
        holder = next((h for kind, (e, h) in reach.items() if kind != kinds[k] and e >= end[k]), None)
        if holder is not None:
            inner[k] = outer[holder] = True
        if end[k] > reach.get(kinds[k], (I64_MIN, -1))[0]:
            reach[kinds[k]] = (end[k], k)
    return inner, outer


def _nested_cycle_notes(nested: pa.Table, cycle_rows: np.ndarray, prefix: str, inner: np.ndarray, outer: np.ndarray) -> tuple[str, ...]:
    """One line where cycle ranges (names starting with the cycle prefix) lie within other ones
    (``cycles_within_cycles``): each is a cycle of its own, and a phase takes the innermost of its
    thread's as its cycle, so a helper range of another role whose name starts so
    (``cycle_draft_loop`` inside ``cycle 3``) splits cycles, or takes phases out of them."""
    if not inner.any():
        return ()
    names = nested["name"].take(pa.array(cycle_rows[inner])).to_pylist()
    holders = nested["name"].take(pa.array(cycle_rows[outer])).to_pylist()
    return (f"{int(inner.sum())} cycle range(s) (names starting with {prefix!r}: {', '.join(map(repr, list(dict.fromkeys(names))[:3]))}) lie within "
            f"other cycle ranges ({', '.join(map(repr, list(dict.fromkeys(holders))[:3]))}): each is a cycle of its own and a phase takes the "
            "innermost of its thread's, so cycles may be split or phases left out of them; a --cycle prefix that only the intended "
            "cycle ranges' names start with reads those alone",)


def cycles_without_launches(nested: pa.Table, cycle_rows: np.ndarray, cycle: np.ndarray, ph_s: np.ndarray, ph_e: np.ndarray,
                            instants: np.ndarray) -> np.ndarray:
    """The cycles (numbers, as ``cycle``) in whose span no thread of the rank put GPU work on a
    stream (``instants``: every op's launch instant), in its phases or not: a cycle range's span,
    else its phases' first start to last end."""
    ids = np.unique(cycle[cycle >= 0])
    if len(ids) == 0:
        return ids
    if len(cycle_rows):
        rows = cycle_rows[ids]
        lo, hi = int64s(nested["start_ns"])[rows], int64s(nested["end_ns"], I64_MAX)[rows]
    else:
        at = np.searchsorted(ids, cycle[cycle >= 0])
        lo, hi = np.full(len(ids), I64_MAX, np.int64), np.full(len(ids), I64_MIN, np.int64)
        np.minimum.at(lo, at, ph_s[cycle >= 0])
        np.maximum.at(hi, at, ph_e[cycle >= 0])
    launched = np.sort(np.asarray(instants, dtype=np.int64))
    n = np.searchsorted(launched, hi, side="right") - np.searchsorted(launched, lo, side="left")
    return ids[n == 0]


def _empty_step_notes(phase: str | None, n: int, cycle_of: np.ndarray) -> tuple[str, ...]:
    """One line where steps that ended inside their first phase were told apart
    (``phases.empty_steps``): they are cycles of their own, empty ones (``phases.empty_cycles``:
    left out of the medians)."""
    if not n:
        return ()
    return (f"{n} of {len(np.unique(cycle_of[cycle_of >= 0]))} cycles are a lone {phase!r} during which its process launched no GPU work, followed by another {phase!r} or the capture's end (an engine step "
            "with nothing to run, as vLLM's execute_model with nothing scheduled): each is read as a cycle of its own, an empty "
            "one, left out of the medians; the CPU time to the next step is in no phase",)


def _steps_without_first_phase_notes(labels: list[str], cycle_of: np.ndarray, cycle_ranges: bool) -> tuple[str, ...]:
    """One line where, without cycle ranges, cycles were told apart that run none of the phase
    that starts cycles (``phases._steps_without_their_first_phase``: read from the order of the
    phases alone, so said, with how to make it certain)."""
    counted = np.flatnonzero(cycle_of >= 0)
    if cycle_ranges or len(counted) == 0:
        return ()
    first = labels[int(counted[0])]
    cycles = np.unique(cycle_of[counted])
    holding = np.unique(cycle_of[counted][np.asarray(labels, dtype=object)[counted] == first])
    lacking = len(cycles) - len(holding)
    if not lacking:
        return ()
    return (f"{lacking} of {len(cycles)} cycles run no {first!r} (steps without the phase that starts cycles, as a prefill step or "
            "one without speculation): each is read as a cycle of its own, from the order of the phases alone; give the loop "
            "cycle ranges to be sure",)


def _other_cycle_said_notes(nested: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, cycle_rows: np.ndarray, labels: list) -> tuple[str, ...]:
    """One line per phase name whose ranges say a cycle (``tracerecon.instrument.phase(name,
    cycle=N)``) other than the instrument's cycle range they are in: a phase is in the cycle
    range it is nested in (``with cycle(i)``), and a cycle it says counts only among
    overlapping ``start_cycle`` ranges that hold it (``phases.cycles_by_time``)."""
    if len(cycle_rows) == 0 or len(phase_rows) == 0:
        return ()
    said = cycle_said(nested)
    mine = said[phase_rows]
    placed = (mine != I64_MIN) & (cycle_of >= 0)
    if not placed.any():
        return ()
    theirs = said[cycle_rows][np.maximum(cycle_of, 0)]
    placed &= theirs != I64_MIN
    other = placed & (theirs != mine)
    names = np.asarray(labels, dtype=object)
    return tuple(f"{name!r}: {int((other & (names == name)).sum())} of {int((placed & (names == name)).sum())} ranges say another cycle "
                 "(phase(name, cycle=N)) than the cycle range holding them, and are that one's (the cycle they name was ended before "
                 "they ran, or does not hold them: a `with cycle(i)` range holds only its own); for an engine a cycle ahead, open each "
                 "cycle with tracerecon.instrument.start_cycle and end it (end_cycle) after its last step"
                 for name in dict.fromkeys(names[other].tolist()))


def _quiet_thread_cycle_notes(pid: np.ndarray, tid: np.ndarray, cycle: np.ndarray, runs_kernels: np.ndarray, labels: list) -> tuple[str, ...]:
    """One line per thread that marks cycles of its own (``boundaries.timelines``) whose phases
    run no kernel, in a process where another thread's phases do: an output thread wrapping each
    step's results in a cycle range, whose cycles then count among the loop's (a cycle's medians
    mix the two) where its phases are of the loop's cycles."""
    if len(cycle) == 0:
        return ()
    line = timelines(pid, cycle, tid)
    keys = thread_keys(pid, tid)
    out = []
    for p in np.unique(pid).tolist():
        mine = (pid == p) & (cycle >= 0)
        threads = np.unique(keys[mine])
        if len(threads) < 2 or len(np.unique(line[mine])) < 2:
            continue  # (one thread, or the process's threads share one sequence)
        busy = [t for t in threads.tolist() if runs_kernels[mine & (keys == t)].any()]
        if not busy:
            continue
        for t in threads.tolist():
            at = mine & (keys == t)
            if t in busy:
                continue
            names = ", ".join(repr(n) for n in dict.fromkeys(np.asarray(labels, dtype=object)[at].tolist()))
            out.append(f"thread {int(tid[at][0])} of process {p} marks {len(np.unique(cycle[at]))} cycle ranges of its own holding only phases that "
                       f"run no kernel ({names}), beside threads whose phases do: each counts as a cycle, in the cycles' medians; to have "
                       "them in the loop's cycles, mark cycles on the loop's thread only (tracerecon.instrument.start_cycle, ended after "
                       "the step's last phase) and say which cycle each such phase is for (phase(name, cycle=N))")
    return tuple(out)


def _read_alone_notes(pid: np.ndarray, tid: np.ndarray, cycle: np.ndarray, cpu_start: np.ndarray, cpu_end: np.ndarray, beside: np.ndarray,
                      labels: list, cycles_of: Callable[[], pa.Table]) -> tuple[str, ...]:
    """One line per kind of phase range of a cycle read alone (``boundaries.in_sequence``): those
    another thread's phase range runs all through (micro-batch threads inside the loop's
    forward), naming the enclosing phases, and those of a thread beside the loop: each reads its
    own edges, and its GPU time is also inside the phases it overlaps, so its cycles' phases may
    add up to more than the cycle. Said where they do, in the cycles (``cycles_of()``: the
    rank's cycles table) whose phases' GPU time exceeds the cycle's by more than the report
    allows (``adds_up`` false), as the report's count of cycles that add up says."""
    in_cycle = cycle >= 0
    keys = thread_keys(pid, tid)
    if not in_cycle.any() or len(np.unique(keys[in_cycle])) < 2:
        return ()
    alone = in_cycle & ~in_sequence(pid, cycle, tid, cpu_start, cpu_end, None, beside)
    if not alone.any():
        return ()
    cycles = cycles_of()
    gpu, summed = (int64s(cycles[c], -1) for c in ("gpu_ns", "phases_gpu_ns"))
    adds_up = cycles["adds_up"].fill_null(True).to_numpy(zero_copy_only=False)
    over = ~adds_up & cycles["gpu_ns"].is_valid().to_numpy(zero_copy_only=False) & (summed > gpu)
    alone &= np.isin(cycle, int64s(cycles["cycle"])[over])
    if not alone.any():
        return ()
    names = np.asarray(labels, dtype=object)
    n_cycles = len(np.unique(cycle[in_cycle]))

    def listed(mask: np.ndarray) -> str:
        return ", ".join(repr(n) for n in dict.fromkeys(names[mask].tolist()))

    out = []
    inside = alone & ~beside
    if inside.any():
        # The enclosing phase: the latest in-sequence phase of another thread begun by its start
        seq = np.flatnonzero(in_cycle & ~alone)
        seq = seq[np.argsort(cpu_start[seq], kind="stable")]
        holders = []
        for k in np.flatnonzero(inside).tolist():
            j = np.searchsorted(cpu_start[seq], cpu_start[k], side="right") - 1
            while j >= 0 and (keys[seq[j]] == keys[k] or pid[seq[j]] != pid[k]):
                j -= 1
            if j >= 0 and cpu_end[seq[j]] >= cpu_end[k]:
                holders.append(seq[j])
        held = f" inside {listed(np.isin(np.arange(len(cycle)), holders))}" if holders else " inside another thread's phase range"
        out.append(f"{listed(inside)}: in {len(np.unique(cycle[inside]))} of {n_cycles} cycles, ranges of other threads, each held{held}: each is read "
                   "alone from its own edges, its GPU time also inside the enclosing phase's, so those cycles' phases add up to more than "
                   "the cycle (the cycles table's adds_up); leave the enclosing phase, or the inner ones, out of --phase for phases that "
                   "tile the cycle")
    if beside.any() and (alone & beside).any():
        at = alone & beside
        out.append(f"{listed(at)}: in {len(np.unique(cycle[at]))} of {n_cycles} cycles, ranges of a thread beside the loop (open while the "
                   "loop runs its next phases): each is read alone from its own edges, its GPU time overlapping the loop's phases', so "
                   "those cycles' phases add up to more than the cycle (the cycles table's adds_up)")
    return tuple(out)


def _several_devices_notes(ops: pa.Table, cuda_devices: tuple = ()) -> tuple[str, ...]:
    """One line per process that ran collectives on several GPUs (one process driving several
    devices, a thread each): it is one rank, so the collectives among its own GPUs are matched
    with nothing and their waits for each other are not counted, and the phases and cycles of
    all its threads are numbered together."""
    if ops.num_rows == 0:
        return ()
    comm = np.flatnonzero(comm_mask(ops))
    if len(comm) == 0:
        return ()
    pid, dev = int64s(ops["pid"])[comm], int64s(ops["device_id"], -1)[comm]
    pairs = distinct_few((pid << 16) | (dev & 0xFFFF))  # (a sort of every collective only where a sample misses a pair)
    out = []
    for p in np.unique(pairs >> 16).tolist():
        devices = pairs[(pairs >> 16) == p] & 0xFFFF
        if len(devices) > 1:
            names = gpu_names(np.full(len(devices), p), devices, cuda_devices)
            out.append(f"process {p} ran collectives on GPUs {', '.join(names)}: one process driving several GPUs is one rank, so "
                       "their collectives with each other are matched with nothing (waits between them are not counted)")
    return tuple(out)


def _loops_per_gpu_notes(pid: np.ndarray, tid: np.ndarray, cycle: np.ndarray, device: np.ndarray, cuda_devices: tuple = ()) -> tuple[str, ...]:
    """One line per process whose threads each run cycles of their own (``boundaries.timelines``)
    on GPUs not all the same (each thread's phases read on one GPU most often): one process is
    one rank, so those cycles are numbered together, in time order, and each phase's medians
    are taken over all of them, every GPU's mixed; the phases table's ``tid`` and
    ``device_id`` tell them apart."""
    read = (cycle >= 0) & (device >= 0)
    if not read.any() or len(np.unique(device[read])) < 2:
        return ()
    line = timelines(pid, cycle, tid)
    out = []
    for p in np.unique(pid[read]).tolist():
        mine = read & (pid == p)
        lines = np.unique(line[mine])
        if len(lines) < 2:
            continue
        main, n_cycles = [], []
        for k in lines.tolist():
            devices, count = np.unique(device[mine & (line == k)], return_counts=True)
            main.append(int(devices[np.argmax(count)]))
            n_cycles.append(len(np.unique(cycle[mine & (line == k)])))
        if len(set(main)) < 2:
            continue
        threads = [int(tid[mine & (line == k)][0]) for k in lines.tolist()]
        gpus = [gpu_names(np.array([p]), np.array([d]), cuda_devices)[0] for d in main]  # (one per thread, in its order)
        out.append(f"process {p} runs cycles of its own on each of threads {', '.join(map(str, threads))}, on GPU {', '.join(gpus)} in turn: one "
                   f"process is one rank, so their {sum(n_cycles)} cycles ({', '.join(map(str, n_cycles))} a thread) are numbered together in "
                   "time order and each phase's medians are over all of them, every GPU's mixed (the phases table's tid and device_id tell "
                   "them apart)")
    return tuple(out)


def _phases_on_several_gpus_notes(ops: pa.Table, op_phase: np.ndarray, device: np.ndarray, labels: list, pid: np.ndarray,
                                  cuda_devices: tuple = ()) -> tuple[str, ...]:
    """One line per phase name with instances that launched GPU work on several GPUs (one
    thread driving several devices): a phase is read between its boundaries on one stream of
    one GPU (``device``, per instance; ``pid``, its process), as events on that stream alone
    would read it; the other GPUs' work is in its span on no stream of theirs. Nothing is
    worked out where the rank's ops ran on one GPU (a min and a max)."""
    if ops.num_rows == 0 or len(device) == 0:
        return ()
    span = pc.min_max(ops["device_id"])
    if span["min"] == span["max"]:
        return ()
    own = np.flatnonzero(op_phase >= 0)
    pairs = np.unique(op_phase[own] * np.int64(1 << 20) + (int64s(ops["device_id"], -1)[own] & 0xFFFFF))
    instance, n_gpus = np.unique(pairs >> 20, return_counts=True)
    several = instance[n_gpus > 1]
    out = []
    names = np.asarray(labels, dtype=object)
    for name in dict.fromkeys(labels[k] for k in several.tolist()):
        mine = several[names[several] == name]
        held = pairs[np.isin(pairs >> 20, mine)]
        gpus = gpu_names(pid[held >> 20], held & 0xFFFFF, cuda_devices)
        read = mine[device[mine] >= 0]
        read_on = Counter(gpu_names(pid[k:k + 1], device[k:k + 1], cuda_devices)[0] for k in read.tolist())
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances it launched GPU work on GPUs {', '.join(gpus)}; "
                   "its GPU time is read on one stream of one GPU ("
                   + (", ".join(f"GPU {d} in {read_on[d]}" for d in gpu_names(pid[read], device[read], cuda_devices)) or "none")
                   + "; the phases table's device_id and stream_id), not across its GPUs: "
                   "give each GPU's work a phase range of its own to time each")
    return tuple(out)


def _cycles_across_gpus_notes(cycle: np.ndarray, device: np.ndarray, boundary_start: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                              cpu_start: np.ndarray, cpu_end: np.ndarray, cuda_devices: tuple = (), beside: np.ndarray | None = None) -> tuple[str, ...]:
    """A line where the phases of a cycle that share its sequence of boundaries (one timeline,
    ``boundaries.in_sequence``: not a helper thread's range read alone) are read on streams of
    different GPUs (one thread driving several, ``boundaries.phase_boundaries``): each phase
    between events on its own GPU's stream, ordered after nothing on the other GPU, so such
    phases, and cycles, may overlap in time and a cycle's phases need not add up to its GPU time."""
    read = (cycle >= 0) & (device >= 0) & (boundary_start != I64_MIN)
    if not read.any() or len(np.unique(device[read])) < 2:
        return ()
    line = timelines(pid, cycle, tid)
    read &= in_sequence(pid, cycle, tid, cpu_start, cpu_end, line, beside)
    pairs = np.unique(np.stack([line[read], cycle[read], device[read]], 1), axis=0)
    per_cycle, n_gpus = np.unique(pairs[:, :2], axis=0, return_counts=True)
    across = int((n_gpus > 1).sum())
    if across == 0:
        return ()
    gpus = ", ".join(gpu_names(pid[read], device[read], cuda_devices))
    n = len(np.unique(cycle[cycle >= 0]))
    return (f"in {across} of {n} cycles the phases are read on different GPUs ({gpus}): each phase between events on its own GPU's "
            "stream, which waits for nothing on the other GPU, so phases on different GPUs, and cycles, may overlap, and a cycle's phases "
            "need not add up to its GPU time",)


def _overlapping_cycle_notes(nested: pa.Table, cycle_rows: np.ndarray) -> tuple[str, ...]:
    """A line where a thread's cycle ranges overlap, each one's still open when the next began
    (``nvtxRangeStart/End`` cycles of an engine a cycle ahead, closed after their output step):
    a cycle's CPU and GPU times then hold part of the next one's and its phases add up to less,
    so its time is no time per cycle; the line gives that from start to start (median CPU).
    Cycles of two threads (a GPU per thread) overlap by design and are not compared."""
    if len(cycle_rows) < 2:
        return ()
    start, end = int64s(nested["start_ns"])[cycle_rows], int64s(nested["end_ns"])[cycle_rows]
    # Ranges of one kind (a name without its numbers, as ``cycles_within_cycles``) on one thread:
    # a helper's ``cycle_draft_loop`` inside ``cycle 3``, a ``cycles`` range around them all, are
    # other kinds, compared with none of these.
    _, kind = np.unique(np.array([cycle_kind(n) for n in nested["name"].take(pa.array(cycle_rows)).to_pylist()], dtype=object).astype(str),
                        return_inverse=True)
    _, thread = np.unique(np.stack([thread_keys(int64s(nested["pid"])[cycle_rows], int64s(nested["tid"])[cycle_rows]), kind.ravel()], 1), axis=0, return_inverse=True)
    thread = thread.ravel()
    order = np.lexsort((start, thread))
    start, end, thread = start[order], end[order], thread[order]
    # Against the range reaching furthest so far (one never closed, running to the trace's end,
    # hides the rest): the next began before that one ended and ends after it.
    reach, setter = np.empty_like(end), np.empty(len(end), dtype=np.int64)
    for t in np.unique(thread).tolist():
        at = np.flatnonzero(thread == t)
        reach[at] = np.maximum.accumulate(end[at])
        setter[at] = at[np.maximum.accumulate(np.where(end[at] == reach[at], np.arange(len(at)), 0))]
    same = thread[1:] == thread[:-1]
    overlapping = same & (start[1:] < reach[:-1]) & (end[1:] > reach[:-1])
    if not overlapping.any():
        return ()
    period = np.median((start[1:] - start[setter[:-1]])[overlapping]) / 1e6
    of = int(np.isin(thread, thread[1:][overlapping]).sum())  # the cycle ranges of the kinds (and threads) that overlap
    return (f"cycle ranges overlap in {int(overlapping.sum())} of {of} cycles "
            "(each still open when the next began: an engine a cycle ahead closing cycle N after its output step): a cycle's CPU and GPU "
            f"times hold part of the next one's, and its phases add up to less; from one cycle's start to the next: {period:.3f} ms (median CPU)",)


def _out_of_step_notes(cycle: np.ndarray, cycle_rows: np.ndarray, labels: list, tid: np.ndarray, cycle_tid: np.ndarray) -> tuple[str, ...]:
    """A line per phase name whose ranges are on threads that mark no cycle, that no cycle range
    holds in some cycles and two or more of in others, about once per cycle in all: its ranges
    run out of step with the cycle ranges (a worker thread running a cycle behind the thread that
    marks the cycles), so a cycle's number for it sums two cycles' work and other cycles read
    none. (Phases a cycle runs on its own thread several times or only in some cycles by design,
    draft twice in odd cycles, extend once in even ones, are not out of step.)"""
    if len(cycle_rows) < 4 or len(cycle) == 0:
        return ()
    out = []
    n_cycles = len(cycle_rows)
    names = np.asarray(labels, dtype=object)
    elsewhere = ~np.isin(tid, cycle_tid)
    for name in dict.fromkeys(labels):
        mine = cycle[(names == name) & (cycle >= 0) & elsewhere]
        counts = np.bincount(mine, minlength=n_cycles)[:n_cycles] if len(mine) else np.zeros(n_cycles, np.int64)
        none, several = int((counts == 0).sum()), int((counts >= 2).sum())
        if none >= 2 and several >= 2 and abs(int(counts.sum()) - n_cycles) <= max(2, n_cycles // 10):
            out.append(f"{name!r}: no cycle range holds it in {none} of {n_cycles} cycles, two or more in {several}: its ranges run out of step "
                       "with the cycle ranges (a worker thread a cycle behind the thread that marks cycles?), so a cycle's numbers for it sum two "
                       "cycles' work; mark the cycles on the thread that runs the phases (tracerecon.instrument.cycle there)")
    return tuple(out)


def _side_stream_notes(side: SideReadings, gpu: np.ndarray, stream: np.ndarray, labels: list) -> tuple[str, ...]:
    """One line per phase name and kind (``SideReadings``) with instances read on one stream whose
    range's events may have gone on another: which of the two readings is right depends on
    where they go, which the trace does not record."""
    out = []
    names = np.asarray(labels, dtype=object)
    # Said where the two readings differ by more than max(10 us, 10 %) (as ``_tiled_notes``).
    differ = side.mask & (np.abs(side.own_ns - gpu) > np.maximum(10_000, np.maximum(side.own_ns, gpu) // 10))

    def by_name(kind: np.ndarray):
        """Per phase name with instances of ``kind`` (a mask) whose two readings differ: the name,
        those instances, the streams they are read on and those of their other reading
        (``a/b``), and the two readings' medians; and its other instances of that kind, which
        read alike on both, said (a phase all 86 of whose instances only copied read "in 75 of
        86 instances it only copied": the 75 whose readings differ)."""
        mask = differ & kind
        for name in dict.fromkeys(labels[k] for k in np.flatnonzero(mask).tolist()):
            mine = np.flatnonzero(mask & (names == name))
            alike = int((kind & ~differ & (names == name)).sum())
            yield (name, mine, "/".join(map(str, np.unique(stream[mine]).tolist())), "/".join(map(str, np.unique(side.own_stream[mine]).tolist())),
                   f"{np.median(gpu[mine]) / 1e6:.3f} ms", f"{np.median(side.own_ns[mine]) / 1e6:.3f} ms",
                   f"; in its {alike} other such instance{'s' if alike > 1 else ''} the two readings are within 10 us or 10 %" if alike else "")

    unrecorded = "(the trace does not record which stream was current at the range's ends)"
    for name, mine, on, of, read, other, rest in by_name(side.mask & (side.kind == LAUNCHED_NOTHING)):
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances it launched nothing and is read on stream {on}, "
                   f"inherited from its thread's phases: {read} (median); they are also read on stream {of}: if its range's events go there, "
                   f"they read {other} {unrecorded}{rest}")
    for name, mine, on, of, read, other, rest in by_name(side.mask & np.isin(side.kind, (COPIES_FEED, COPIES_THREAD))):
        where = (f"stream {on}, which those copies feed or were forked off" if (side.kind[mine] == COPIES_FEED).all() else
                 f"its thread's stream {on}" if (side.kind[mine] == COPIES_THREAD).all() else f"stream {on}")
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances it only copied, on stream {of}, and is read on {where}: {read} "
                   f"(median); if {of} was its thread's current stream at the range's ends (the range inside `with torch.cuda.stream(...)` "
                   f"for it), events there read {other} {unrecorded}{rest}")
    for name, mine, on, of, read, other, rest in by_name(side.mask & (side.kind == SIDE_STREAM_KERNELS)):
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances it ran all its kernels on stream {of}, a side stream of stream "
                   f"{on} by the trace's waits, and none on {on}, where it is read: {read} (median); if its range runs inside "
                   f"`with torch.cuda.stream(...)` for {of}, events there read {other} {unrecorded}{rest}")
    for name, mine, on, of, read, other, rest in by_name(side.mask & (side.kind == SIDE_STREAM_COPIES)):
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances it ran no kernel, only copies on stream {of}, a side stream of "
                   f"stream {on} by the trace's waits, where it is read: {read} (median); if its range runs inside `with torch.cuda.stream(...)` "
                   f"for {of}, events there read {other} {unrecorded}{rest}")
    return tuple(out)


def _tiled_notes(tiled: np.ndarray, own: np.ndarray, gpu: np.ndarray, labels: list) -> tuple[str, ...]:
    """One line per phase name with instances ``tiled_off_their_stream`` marks."""
    out = []
    for name in dict.fromkeys(labels[k] for k in np.flatnonzero(tiled).tolist()):
        mine = np.flatnonzero(tiled & (np.asarray(labels, dtype=object) == name))
        out.append(f"{name!r}: in {len(mine)} of {labels.count(name)} instances another phase's stream, whose work there its own stream never waits for, "
                   f"ran past its boundaries: it reads {np.median(gpu[mine]) / 1e6:.3f} ms (median) where events on its own stream would read "
                   f"{np.median(own[mine]) / 1e6:.3f} ms (streams that run at once and do not join there are tiled one after another, "
                   f"and so are the GPU times of the cycles they are in)")
    return tuple(out)


def _cycle_edge_notes(clock: StreamClock, nested: pa.Table, cycle_rows: np.ndarray, cycle: np.ndarray, pid: np.ndarray, cpu_start: np.ndarray,
                      cpu_end: np.ndarray, device: np.ndarray, stream: np.ndarray, b_start: np.ndarray, b_end: np.ndarray, labels: list,
                      unphased: Callable[[], UnphasedOps] | None = None,
                      holds_cycles: np.ndarray | None = None) -> tuple[str, ...]:
    """A line where GPU work was queued inside cycle ranges before their first phase or after
    their last (vLLM's preprocess before the phases a preset marks): a cycle's GPU time runs
    from its first phase's start boundary to its last's end, so that work is in no phase and no
    cycle. How long: from when the stream was free (or the cycle began) to the first phase's
    start boundary, or from the last phase's end boundary to when the stream was done with what
    was queued by the cycle's end (what events there read), and of that the time the ops in no
    phase (``unphased``) ran (said where less); between cycles made of phases, the GPU time of
    the ops in no phase launched between them. Counted in a cycle where the work is more than the cycle's
    phases may miss and still add up (max(10 us, 2 % of its GPU time): a result copy of a few
    microseconds is not worth a line). Without cycle ranges (cycles made of phases), the work
    after a cycle's last phase and before the next cycle's first. ``cpu_end``: where each
    phase's end is read (``read_ends``). Not for cycle ranges that hold other cycle ranges
    (``holds_cycles``, per cycle range: their phases are the inner ones', said apart)."""
    ok = (cycle >= 0) & (b_start != I64_MIN)
    if holds_cycles is not None and holds_cycles.any() and len(cycle_rows):
        ok &= ~holds_cycles[np.maximum(cycle, 0)]
    if not ok.any():
        return ()
    idx = np.flatnonzero(ok)
    c = cycle[idx]
    order = np.lexsort((cpu_start[idx], c))
    idx, c = idx[order], c[order]
    heads = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    first = idx[heads]
    tails = np.r_[heads[1:] - 1, len(idx) - 1]
    last = idx[tails]
    if len(cycle_rows):
        cs = int64s(nested["start_ns"])[cycle_rows[cycle[first]]]
        ce = int64s(nested["end_ns"], I64_MIN)[cycle_rows[cycle[last]]]
        # Cycle ranges that overlap (one ended on another thread after the next began): the work
        # of the next cycle's phases, or the last one's, is no work of this cycle's edges. The
        # next and last of the same thread's cycle ranges (threads that each run cycles of their
        # own interleave theirs).
        ctid = int64s(nested["tid"])[cycle_rows[cycle[first]]] if "tid" in nested.column_names else np.zeros(len(first), np.int64)
        by_thread = np.lexsort((cs, ctid, pid[first]))
        same = (pid[first][by_thread][1:] == pid[first][by_thread][:-1]) & (ctid[by_thread][1:] == ctid[by_thread][:-1])
        next_start = np.full(len(first), np.iinfo(np.int64).max, dtype=np.int64)
        last_end = np.full(len(first), I64_MIN, dtype=np.int64)
        # (the next cycle's range start, or its first phase's if earlier: work queued between them is the next one's)
        next_start[by_thread[:-1][same]] = np.minimum(cs[by_thread[1:][same]], cpu_start[first[by_thread[1:][same]]])
        last_end[by_thread[1:][same]] = cpu_end[last[by_thread[:-1][same]]]
        ce, cs = np.minimum(ce, next_start), np.maximum(cs, last_end)
        where = "inside the cycle range"
    else:
        # Cycles made of phases: from a cycle's last phase to the next cycle's first (of its
        # process) the work is in no cycle either.
        cs = cpu_start[first]
        has_next = np.r_[pid[first[1:]] == pid[last[:-1]], False]
        ce = np.where(has_next, np.r_[cpu_start[first[1:]], 0], cpu_end[last])
        where = "between cycles"
    out = []
    for which, ph, lo, hi in (("before its first phase", first, cs, cpu_start[first]), ("after its last phase", last, cpu_end[last], ce)):
        row = clock.stream_index(pid[ph], device[ph], stream[ph])
        queued = clock.queued_between(row, lo, hi) & (hi > lo)
        if not queued.any():
            continue
        if which.startswith("before"):
            gpu_lo, gpu_hi = np.maximum(lo, clock.done(row, lo)), b_start[ph]
        elif len(cycle_rows) or unphased is None:
            gpu_lo, gpu_hi = b_end[ph], clock.done(row, hi)
        else:
            gpu_lo = gpu_hi = None  # between cycles the GPU may idle until the next one: the work alone
        if gpu_lo is None:
            took = work = unphased().launched_work(pid[ph], lo, hi)
        else:
            took = gpu_hi - gpu_lo
            # The GPU may idle meanwhile (a 100 us CPU step that queued a 1 us copy): said where
            # the ops in no phase ran long enough then (those launched before too: a copy the
            # stream was made to wait for), with both.
            work = np.minimum(took, unphased().ran_within(row, gpu_lo, gpu_hi, lo, hi)) if unphased is not None else took
        cycle_gpu = b_end[last] - b_start[first]
        queued &= work > adds_up_tolerance(cycle_gpu)
        if not queued.any():
            continue
        took, work = took[queued], work[queued]
        names = list(dict.fromkeys(labels[k] for k in ph[queued].tolist()))
        ran = f" (the work ran {np.median(work) / 1e6:.3f} ms of it{', median' if len(work) > 1 else ''})" if (work < took).any() else ""
        # The range that launched most of it (by GPU time), as the notes of work between phases say.
        held = Counter()
        if unphased is not None:
            free = unphased()
            for p, a, b in zip(pid[ph][queued].tolist(), lo[queued].tolist(), hi[queued].tolist()):
                window = free.launched_between(p, a, b)
                for n, d in zip(free.label[window], free.took[window].tolist()):
                    if n is not None:
                        held[n] += d
        name = next(iter(held.most_common(1)), (None, 0))[0]
        hint = _name_it(name) if name is not None else "give that work a phase range of its own (or a --phase pattern that names it)"
        out.append(f"{QUEUED_OUTSIDE_PHASES}{where} {which} ({', '.join(map(repr, names[:3]))}) in {int(queued.sum())} of "
                   f"{len(first)} cycles{_which_cycles(cycle[ph][queued], len(first))}, {np.median(took) / 1e6:.3f} ms{' (median)' if len(took) > 1 else ''}{ran}: it is in no phase and not in "
                   f"the cycle's GPU time; {hint}")
    return tuple(out)


def _name_it(name: str) -> str:
    """How a note tells the user to make the range ``name`` a phase: its name, or, where it
    numbers its instances (``aten::add, seq = 47285``: a name each), the pattern that takes them;
    where it cannot be typed as it is (``phase_value_for``), the value that names it."""
    value = phase_value_for(name)
    if value == name:
        return f"it was launched in the range {name!r}: name it in --phase to see it"
    if NUMBERS.search(name):
        return f"it was launched in the range {name!r}, one of a name numbered per instance: --phase {shlex.quote(value)} takes them all"
    # A name that cannot be typed as it is (control characters, bytes that are not UTF-8, one
    # blank or with "="): the value that names it.
    return f"it was launched in the range {name!r}: --phase {shlex.quote(value)} names it, to see it"


def _which_cycles(cycles: np.ndarray, of: int, most: int = 3) -> str:
    """`` (cycle 0)``, `` (cycles 0, 7)``: the cycles a note counts where they are ``most`` or
    fewer and not all ``of`` them (a note of the one prefill cycle before the decode steps
    reads as one, which the report's medians may leave out as warm-up), else nothing."""
    if not 0 < len(cycles) <= most or len(cycles) == of:
        return ""
    return f" (cycle{'s' if len(cycles) > 1 else ''} {', '.join(map(str, sorted(cycles.tolist())))})"


def _before_capture_notes(clock: StreamClock) -> tuple[str, ...]:
    """A line where the trace holds work queued before the capture began
    (``capture.queued_before_capture``): the first boundaries wait for it, as events would."""
    head = clock.before_capture
    if head is None:
        return ()
    out = []
    if head.called_before.any():
        out.append(f"{int(head.called_before.sum())} GPU op(s) at the head of their streams have no launching call (launched before the "
                   "capture began): every phase boundary on their streams waits for them, as CUDA events recorded there would")
    if len(head.stream_key):
        i = int(np.argmax(head.waited))
        out.append(f"{len(head.stream_key)} stream(s) ran work queued before the capture began, which the trace does not show (the first op "
                   f"of each waited up to {head.waited[i] / 1e6:.3f} ms after its launch on an idle device): phase boundaries before then "
                   "wait for it, as CUDA events would; the capture's first cycle may hold the engine's earlier cycle's tail")
    return tuple(out)


def _phase_thread_notes(mode, ph_tid: np.ndarray) -> tuple[str, ...]:
    """A line where ``--phase-thread`` names a thread that holds none of the phases."""
    if not isinstance(mode, int) or not len(ph_tid) or (ph_tid == mode).any():
        return ()
    held = sorted(set(ph_tid.tolist()))
    return (f"--phase-thread {mode}: no phase range is on that thread (the phases are on thread(s) {', '.join(map(str, held[:8]))}"
            f"{', ...' if len(held) > 8 else ''}); no work of other threads was attributed",)


def _between_notes(pid: np.ndarray, tid: np.ndarray, cycle: np.ndarray, b_start: np.ndarray, b_end: np.ndarray, labels: list,
                   cpu_start: np.ndarray | None = None, cpu_end: np.ndarray | None = None,
                   unphased: Callable[[], UnphasedOps] | None = None,
                   device: np.ndarray | None = None, row: np.ndarray | None = None, beside: np.ndarray | None = None) -> tuple[str, ...]:
    """One line per pair of phase names with GPU time between them that neither holds
    (``boundaries.phase_boundaries``: work was queued between the two): in how many cycles, and
    how long in those (median of each cycle's total). Counted in a cycle where the work between
    all its phases is more than they may miss and still add up (max(10 us, 2 % of its GPU time),
    as ``_cycle_edge_notes``: a few microseconds of setup between two scopes every cycle is no
    line).
    With ``unphased`` (``_unphased_launches``) and the phases' CPU spans, the line names the range
    most of that work's GPU time was launched in, where it has one that holds no phase (vLLM's
    ``gpu_model_runner: eplb``). Of a counted cycle's gaps, those under half the floor are left
    out. How long between two phases: from the earlier one's end boundary to the later one's
    start; counted, per cycle and per pair, by the time the ops in no phase ran then on either
    phase's stream (``row``, per phase: its stream row) or one it was made to wait for then (with
    ``unphased``, the spans and ``row``: a 100 us CPU step that queued a 1 us copy is no line),
    which the line gives where less. ``device`` (per phase, the GPU it is read on): neighbours
    read on two GPUs share no boundary; between them, the GPU time of the ops in no phase
    launched between their CPU spans (with ``unphased`` and the spans; else nothing)."""
    if len(cycle) < 2:
        return ()
    line = timelines(pid, cycle, tid)
    order = np.lexsort((np.arange(len(line)), line))  # each timeline's phases, in time order
    if cpu_start is not None and cpu_end is not None:  # those read alone are nobody's neighbour
        order = order[in_sequence(pid, cycle, tid, cpu_start, cpu_end, line, beside)[order]]
    a, b = order[:-1], order[1:]
    gap = b_start[b] - b_end[a]
    neighbours = (line[a] == line[b]) & (cycle[a] == cycle[b]) & (cycle[a] >= 0) & (b_end[a] != I64_MIN) & (b_start[b] != I64_MIN)
    spans = unphased is not None and cpu_start is not None and cpu_end is not None
    work = gap
    if spans and row is not None and (neighbours & (gap > 0)).any():
        free, until = unphased(), np.maximum(b_start[b], b_end[a])
        ran = np.maximum(free.ran_within(row[a], b_end[a], until, cpu_end[a], cpu_start[b]),
                         free.ran_within(row[b], b_end[a], until, cpu_end[a], cpu_start[b]))
        work = np.where(gap > 0, np.minimum(gap, ran), 0)
    if device is not None:
        across = neighbours & (device[a] != device[b])
        gap = np.where(across, unphased().launched_work(pid[a], cpu_end[a], cpu_start[b]) if spans and across.any() else 0, gap)
        work = np.where(across, gap, work)
    found = np.flatnonzero(neighbours & (gap > 0))
    per_cycle: dict[tuple[str, str], dict[int, int]] = {}
    pair_ran: dict[tuple[str, str], dict[int, int]] = {}  # the time the work in no phase ran there
    for i, j, g, w in zip(a[found].tolist(), b[found].tolist(), gap[found].tolist(), work[found].tolist()):
        cycles = per_cycle.setdefault((labels[i], labels[j]), {})
        cycles[int(cycle[i])] = cycles.get(int(cycle[i]), 0) + g
        ran_there = pair_ran.setdefault((labels[i], labels[j]), {})
        ran_there[int(cycle[i])] = ran_there.get(int(cycle[i]), 0) + w
    n_cycles = len(np.unique(cycle[cycle >= 0]))
    timed = (cycle >= 0) & (b_start != I64_MIN)
    # Each cycle's first boundary start and last boundary end.
    timed_cycles, slot = np.unique(cycle[timed], return_inverse=True)
    lo, hi = np.full(len(timed_cycles), I64_MAX, np.int64), np.full(len(timed_cycles), I64_MIN, np.int64)
    np.minimum.at(lo, slot.ravel(), b_start[timed])
    np.maximum.at(hi, slot.ravel(), b_end[timed])
    first, last = dict(zip(timed_cycles.tolist(), lo.tolist())), dict(zip(timed_cycles.tolist(), hi.tolist()))
    # A cycle counts where all the work between its phases (the sum over pairs, which is what
    # keeps its phases from adding up) exceeds the threshold.
    ran: dict[int, int] = {}
    for works in pair_ran.values():
        for c, w in works.items():
            ran[c] = ran.get(c, 0) + w
    counted = {c for c, w in ran.items() if w > adds_up_tolerance(last[c] - first[c])}
    # ... and of its gaps, those whose own work ran half the floor or more (a 1.5 us gap beside a
    # 300 us one, or a CPU step that queued 1 us beside a pair with real work, is no line).
    worth = {pair: {c: g for c, g in gaps.items() if c in counted and 2 * pair_ran[pair][c] >= ERROR_FLOOR_NS} for pair, gaps in per_cycle.items()}
    held_by: dict[tuple[str, str], Counter] = {}
    if unphased is not None and cpu_start is not None and cpu_end is not None and any(worth.values()):
        free = unphased()
        for i, j in zip(a[found].tolist(), b[found].tolist()):
            if int(cycle[i]) not in worth.get((labels[i], labels[j]), {}):
                continue
            window = free.launched_between(pid[i], cpu_end[i], cpu_start[j])
            got = held_by.setdefault((labels[i], labels[j]), Counter())
            for n, d in zip(free.label[window], free.took[window].tolist()):  # by GPU time, not by count
                if n is not None:
                    got[n] += d

    def hint(pair: tuple[str, str]) -> str:
        name = next(iter(held_by.get(pair, Counter()).most_common(1)), (None, 0))[0]
        if name is None:
            return "give that work a phase range of its own (or name its range in --phase) to see it"
        return _name_it(name)

    def ran_of(pair: tuple[str, str], gaps: dict[int, int]) -> str:
        works = [pair_ran[pair][c] for c in gaps]
        return f" (the work ran {np.median(works) / 1e6:.3f} ms of it, median)" if any(w < g for w, g in zip(works, gaps.values())) else ""

    return tuple(f"{QUEUED_OUTSIDE_PHASES}between {x!r} and {y!r}: the GPU time between the two is in neither phase, only in the cycle's: "
                 f"in {len(g)} of {n_cycles} cycles, {np.median(list(g.values())) / 1e6:.3f} ms (median){ran_of((x, y), g)}; {hint((x, y))}"
                 for (x, y), g in worth.items() if g)


@dataclass(frozen=True)
class UnphasedOps:
    """The ops in no phase, sorted by (pid, launch instant): their pids, launch instants, the
    name of the innermost range each was launched in (None: none, a cycle range, or a range
    that holds phases: naming it as a phase would hide them), GPU durations, starts, ends and
    stream rows (``StreamClock.keys``; -1: none), and the rank's event waits that found their
    record (``StreamClock.join_*``: CPU time, waiting and waited-for stream rows)."""

    pid: np.ndarray
    launch: np.ndarray
    label: list
    took: np.ndarray
    start: np.ndarray
    end: np.ndarray
    row: np.ndarray
    join_cpu: np.ndarray
    join_into: np.ndarray
    join_from: np.ndarray
    by_row: dict = field(default_factory=dict, repr=False, compare=False)  # stream row -> its ops' sorted starts, ends and their sums

    def launched_between(self, pid: int, lo: int, hi: int) -> slice:
        """The rows of process ``pid``'s ops launched after ``lo`` and before ``hi``."""
        a, b = np.searchsorted(self.pid, pid, side="left"), np.searchsorted(self.pid, pid, side="right")
        return slice(int(a + np.searchsorted(self.launch[a:b], lo, side="right")), int(a + np.searchsorted(self.launch[a:b], hi, side="left")))

    def launched_work(self, pid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per (pid, lo, hi): the summed GPU durations of the process's ops launched after
        ``lo`` and before ``hi`` (0 where none)."""
        out = np.zeros(len(pid), dtype=np.int64)
        if len(self.pid) == 0:
            return out
        total = np.r_[0, np.cumsum(self.took)]
        for p in np.unique(pid).tolist():
            mine = np.flatnonzero(pid == p)
            a, b = np.searchsorted(self.pid, p, side="left"), np.searchsorted(self.pid, p, side="right")
            first = a + np.searchsorted(self.launch[a:b], lo[mine], side="right")
            end = a + np.searchsorted(self.launch[a:b], hi[mine], side="left")
            out[mine] = np.where(end > first, total[np.maximum(end, first)] - total[first], 0)
        return out

    def ran_within(self, row: np.ndarray, lo: np.ndarray, hi: np.ndarray, cpu_lo: np.ndarray, cpu_hi: np.ndarray) -> np.ndarray:
        """Per (stream row, lo, hi): the GPU time the ops in no phase spent running between ``lo``
        and ``hi`` (GPU times) on that stream and on the streams it was made to wait for by a
        wait made between ``cpu_lo`` and ``cpu_hi`` (CPU times: a copy it waited for; another
        thread's work on a stream it never waits for is none of its); summed over ops, each
        clipped to the window; 0 where none or ``hi <= lo``."""
        row, lo = np.asarray(row, np.int64), np.asarray(lo, np.int64)
        hi = np.maximum(np.asarray(hi, np.int64), lo)
        out = self._on_rows(row, lo, hi)
        if len(self.join_cpu) == 0 or len(row) == 0:
            return out
        # Each query's waits: those made into its stream in its CPU window, (query, waited-for
        # stream) pairs once each, one search per stream for all its queries.
        order = np.lexsort((self.join_cpu, self.join_into))
        j_into, j_cpu, j_from = self.join_into[order], self.join_cpu[order], self.join_from[order]
        first, last = np.zeros(len(row), np.int64), np.zeros(len(row), np.int64)
        for r in np.unique(row).tolist():
            mine = np.flatnonzero(row == r)
            k0, k1 = np.searchsorted(j_into, r, side="left"), np.searchsorted(j_into, r, side="right")
            first[mine] = k0 + np.searchsorted(j_cpu[k0:k1], np.asarray(cpu_lo, np.int64)[mine], side="left")
            last[mine] = k0 + np.searchsorted(j_cpu[k0:k1], np.asarray(cpu_hi, np.int64)[mine], side="right")
        n = np.maximum(last - first, 0)
        if not n.any():
            return out
        query = np.repeat(np.arange(len(row)), n)
        at = np.repeat(first - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(int(n.sum()))
        pairs = np.unique(np.stack([query, j_from[at]], 1), axis=0)
        pairs = pairs[(pairs[:, 1] != row[pairs[:, 0]]) & (pairs[:, 1] >= 0)]
        if len(pairs):
            np.add.at(out, pairs[:, 0], self._on_rows(pairs[:, 1], lo[pairs[:, 0]], hi[pairs[:, 0]]))
        return out

    def _on_rows(self, row: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per (stream row, lo, hi), ``hi >= lo``: the time its ops ran between the two, W(hi) -
        W(lo), where W(x), the work done by x, sums clip(x - start, 0, duration) over the ops:
        (ops started by x) * x - their starts - ((ops ended by x) * x - their ends). (The sums
        may wrap around int64 on a long trace; their differences stay exact.)"""
        out = np.zeros(len(row), dtype=np.int64)
        for r in np.unique(row[row >= 0]).tolist():
            if r not in self.by_row:  # each stream's ops sorted once
                on = self.row == r
                starts, ends = np.sort(self.start[on]), np.sort(self.end[on])
                self.by_row[r] = (starts, ends, np.r_[0, np.cumsum(starts)], np.r_[0, np.cumsum(ends)])
            starts, ends, s_sum, e_sum = self.by_row[r]
            if len(starts) == 0:
                continue
            mine = np.flatnonzero(row == r)

            def done_by(x: np.ndarray) -> np.ndarray:
                n_s, n_e = np.searchsorted(starts, x, side="right"), np.searchsorted(ends, x, side="right")
                return (n_s * x - s_sum[n_s]) - (n_e * x - e_sum[n_e])

            out[mine] = done_by(hi[mine]) - done_by(lo[mine])
        return out


def _unphased_launches(ops: pa.Table, clock: StreamClock, op_phase: np.ndarray, op_range: np.ndarray, ranges: pa.Table, phase_rows: np.ndarray,
                       cycle_prefix: str) -> UnphasedOps:
    """The ops in no phase (``UnphasedOps``)."""
    free = np.flatnonzero(op_phase < 0)
    pid, launch = int64s(ops["pid"])[free], clock.op_instants[free]
    row = clock.stream_index(pid, int64s(ops["device_id"], -1)[free], int64s(ops["stream_id"], -1)[free])
    start, end = int64s(ops["start_ns"])[free], int64s(ops["end_ns"])[free]
    order = np.lexsort((launch, pid))
    rows = op_range[free][order]
    names = ranges["name"].to_pylist() if ranges.num_rows else []
    holds = np.zeros(len(names), dtype=bool)  # ranges with a phase nested in them
    if len(names) and "parent_id" in ranges.column_names:
        parent = int64s(ranges["parent_id"], -1)
        up = parent[phase_rows] if len(phase_rows) else np.zeros(0, np.int64)
        while (up >= 0).any():
            up = up[up >= 0]
            holds[up] = True
            up = parent[up]
    label = [names[r] if r >= 0 and not holds[r] and not is_cycle_name(names[r], cycle_prefix) else None
             for r in rows.tolist()]
    return UnphasedOps(pid[order], launch[order], label, (end - start)[order], start[order], end[order], row[order],
                       clock.join_cpu, clock.join_into, clock.join_from)


# Why a phase is read on another stream than the one its range's events may have gone on
# (``SideReadings.kind``).
SIDE_STREAM_KERNELS = 1  # all its kernels on a side stream of the stream it is read on (``caller_streams``)
COPIES_FEED = 2  # only copies, on a stream that only copies, read on the stream they feed or were forked off (``CopyStreams``)
COPIES_THREAD = 3  # the same, read on its thread's own stream
LAUNCHED_NOTHING = 4  # nothing launched, read on a stream inherited from its thread's phases, which are read on another too
SIDE_STREAM_COPIES = 5  # no kernel, its copies on a side stream of the stream it is read on (``caller_streams``), one its other instances compute on


class SideReadings(NamedTuple):
    """Phases read on one stream whose range's events may have gone on another (``kind``), and
    what events on that other stream would read instead."""

    mask: np.ndarray  # per phase
    own_ns: np.ndarray  # per phase: the reading on that other stream (0 elsewhere)
    own_stream: np.ndarray  # per phase: that stream's id (-1 elsewhere)
    kind: np.ndarray  # per phase: SIDE_STREAM_KERNELS, COPIES_FEED, COPIES_THREAD or LAUNCHED_NOTHING (0 elsewhere)


def _took_back_where_copied(clock: StreamClock, ops: pa.Table, op_phase: np.ndarray, blocking: tuple[pa.Table, WaitTargets] | None, phases: np.ndarray,
                            rows: np.ndarray, ph_pid: np.ndarray, ph_tid: np.ndarray, ph_e: np.ndarray, nccl: np.ndarray) -> np.ndarray:
    """Per phase of ``phases`` (ones whose work all went to a stream that only copies, stream
    row ``rows``): whether its own thread, inside its range, blocked on an asynchronous copy to
    the host the phase made on that stream (a synchronize of the stream, a synchronous copy on
    it, or a synchronize of an event recorded there, waiting for work launched at or after the
    copy: `.tolist()`, `.item()`), where the same thread made NCCL's stream (``nccl``, per stream
    row) wait for that stream anywhere in the trace (a collective, send or receive issued with it
    current: ProcessGroupNCCL makes its stream wait for the caller's current one; a wait whose
    call is not in the trace counts for every thread). Such a thread took its results on its
    current stream: SGLang's pipeline loop, whose scheduler stream launches no kernel, sends and
    receives on NCCL forked off it and copies the tokens back there. Without NCCL's word the
    trace does not tell the thread's current stream from a copy stream it enters to copy back
    (`with torch.cuda.stream(copy_stream)`, vLLM's output copy, a buffer-guarding D2H stream
    its compute stream waits for): those keep the stream the copies feed. Nor does a wait
    that covers the copy without naming its stream tell (a device synchronize, a synchronize of
    another stream made to wait for it): an engine that enters a dedicated copy stream to copy
    and then synchronizes makes the same calls (``tests/test_side_streams.py``). A synchronous
    cudaMemcpy runs on the legacy default stream whatever stream is current: no such copy.
    ``blocking``: the rank's blocking calls and what each waits on (``wait_targets``)."""
    out = np.zeros(len(phases), dtype=bool)
    if blocking is None or blocking[0].num_rows == 0 or len(phases) == 0 or ops.num_rows == 0:
        return out
    blocking, targets = blocking
    slot = np.full(len(op_phase), -1, dtype=np.int64)  # per op: its phase's place in ``phases``
    at = np.full(max(int(op_phase.max(initial=-1)) + 1, 1), -1, dtype=np.int64)
    at[phases[phases < len(at)]] = np.flatnonzero(phases < len(at))
    owned = op_phase >= 0
    slot[owned] = at[np.minimum(op_phase[owned], len(at) - 1)]
    copy = np.flatnonzero((slot >= 0) & read_backs(ops))
    if len(copy) == 0:
        return out
    k = slot[copy]
    on_row = clock.stream_index(int64s(ops["pid"])[copy], int64s(ops["device_id"], -1)[copy], int64s(ops["stream_id"], -1)[copy]) == rows[k]
    copy, k = copy[on_row], k[on_row]
    if len(copy) == 0:
        return out
    launch = clock.op_instants[copy]
    i = phases[k]
    # The thread made NCCL's stream wait for that stream.
    copy_thread = thread_keys(ph_pid[i], ph_tid[i])
    into_nccl = np.flatnonzero(nccl[np.maximum(clock.join_into, 0)] & (clock.join_into >= 0) & (clock.join_from >= 0))
    by = clock.join_thread[into_nccl]
    current = np.zeros(len(copy), dtype=bool)
    for r in np.unique(rows[k]).tolist():
        mine = np.flatnonzero(rows[k] == r)
        threads = by[clock.join_from[into_nccl] == r]
        current[mine] = np.isin(copy_thread[mine], threads) | (threads < 0).any()
    # Blocked on it: a call of the phase's thread in the range, begun after the copy's launch,
    # waiting on that stream for work up to the copy at least.
    call_thread = thread_keys(int64s(blocking["pid"]), int64s(blocking["tid"]))
    call_start = int64s(blocking["start_ns"])
    waited = np.zeros(len(copy), dtype=bool)
    for r in np.unique(rows[k[current]]).tolist():
        on_r = np.flatnonzero(targets.row == r)
        for th in np.unique(copy_thread[current & (rows[k] == r)]).tolist():
            ask = np.flatnonzero(current & (rows[k] == r) & (copy_thread == th))
            calls = on_r[call_thread[on_r] == th]
            calls = calls[np.argsort(call_start[calls], kind="stable")]
            if len(calls) == 0:
                continue
            # The latest work waited for by a call begun in [the copy's launch, the range's end].
            lo = np.searchsorted(call_start[calls], launch[ask], side="left")
            hi = np.searchsorted(call_start[calls], ph_e[i[ask]], side="right")
            some = lo < hi
            until = np.r_[targets.until[calls], I64_MIN]
            edges = np.stack([lo, hi], 1).ravel()
            latest = np.maximum.reduceat(until, np.minimum(edges, len(calls)))[::2]
            waited[ask] = some & (latest >= launch[ask])
    np.logical_or.at(out, k[waited], True)
    return out


def _phase_stream_boundaries(ops: pa.Table, op_phase: np.ndarray, n_ph: int, clock: StreamClock, ph_pid: np.ndarray, ph_tid: np.ndarray, ph_s: np.ndarray,
                             ph_e: np.ndarray, cycle_of: np.ndarray, stream_deciders: np.ndarray | None,
                             ended_elsewhere: np.ndarray, copy_streams: CopyStreams,
                             said: tuple[np.ndarray, np.ndarray] | None = None,
                             blocking: tuple[pa.Table, WaitTargets] | None = None,
                             beside: np.ndarray | None = None, unset: UnsetStreams | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, SideReadings, np.ndarray]:
    """Per phase instance: the stream-order boundaries (analysis.boundaries) on the stream its
    thread said was current (``said_streams``), else on the stream that received its work (of
    the ops ``stream_deciders`` marks) or the stream that forked that one off: (boundary start,
    boundary end, device, stream, the CPU instant its end was read at, ``SideReadings``, where
    its cycle's end reads it: ``phase_boundaries``' ``cycle_ends``). ``blocking``: the rank's
    blocking calls (``find_blocking_calls``) and their ``wait_targets``, which tell a phase that only copied and took its
    results back where it copied (``_took_back_where_copied``). ``unset``: what a thread that
    set no stream works on (``phase_boundaries``)."""
    # The engine's events go on the stream that computes: copies and memsets decide only in a
    # phase that ran no kernel (a long prefetch on a copy stream is not where its events are),
    # and there only those on a stream that also computes; a phase whose work is all on streams
    # that only copy (an input stream the next phase waits for) is read on the stream those
    # feed, else on the one its thread computes on (``CopyStreams``).
    # Another thread's copies moved into a phase (``stream_deciding_ops``: a KV-cache offload
    # thread that never launches a kernel) decide nothing: its stream is nobody's events'.
    deciding_phase = op_phase if stream_deciders is None else np.where(stream_deciders, op_phase, -1)
    computing = computes(ops)
    # A synchronous cudaMemcpy runs on the legacy default stream whichever stream its thread
    # works on: it decides nothing where the phase did anything else.
    deciders = narrowed_by_phase(deciding_phase, n_ph, computing, ~synchronous_copies(ops),
                                 _on_the_launchers_stream(ops, deciding_phase, n_ph, computing, copy_streams), ~copy_streams.of_ops(ops))
    placed = clock.on_launch_streams(ops)  # graph branches on their launch's stream
    dev, stream = phase_streams(placed, deciding_phase, n_ph, deciders)
    only_copies = np.flatnonzero(copy_streams.of(ph_pid, dev, stream))
    only_copies = only_copies[copy_streams.thread_runs_model(ph_pid[only_copies], ph_tid[only_copies])]  # (few phases, if any: asked only for them)
    copied_on = (dev[only_copies], stream[only_copies])
    fed = np.zeros(len(only_copies), dtype=bool)  # read on the stream the copies feed or were forked off (else: the thread's own)
    if len(only_copies):
        # Read where the copies' stream feeds (or was forked off), else on the thread's own; where
        # the thread took its results back there, where it copied.
        # (never NCCL's own stream, which no engine records its events on: a receive forked off
        # the copies' stream, SGLang's pipeline loop's scheduler stream that launches no kernel)
        nccl = copy_streams.collectives_only(clock.keys)
        copied_row = clock.stream_index(ph_pid[only_copies], dev[only_copies], stream[only_copies])
        p_dev, p_stream = clock.partner(copied_row, ph_s[only_copies], ph_e[only_copies], thread_keys(ph_pid[only_copies], ph_tid[only_copies]), skip=nccl)
        # A phase whose thread blocked on its own copy to the host there, a stream it issued
        # collectives from, took its results on its current stream (`.tolist()`): read where it
        # copied (SGLang's pipeline loop, whose scheduler stream launches no kernel).
        took = _took_back_where_copied(clock, ops, op_phase, blocking, only_copies, copied_row, ph_pid, ph_tid, ph_e, nccl)
        p_dev, p_stream = np.where(took, -1, p_dev), np.where(took, -1, p_stream)
        own_dev, own_stream = copy_streams.thread_stream(ph_pid[only_copies], ph_tid[only_copies])
        own_dev, own_stream = np.where(took, copied_on[0], own_dev), np.where(took, copied_on[1], own_stream)
        dev, stream = dev.copy(), stream.copy()
        dev[only_copies] = np.where(p_stream >= 0, p_dev, own_dev)
        stream[only_copies] = np.where(p_stream >= 0, p_stream, own_stream)
        fed = p_stream >= 0
    work_dev, work_stream = dev, stream
    dev, stream = caller_streams(clock, ops, op_phase, ph_pid, ph_tid, ph_s, ph_e, cycle_of, dev, stream)
    said_dev, said_stream = said if said is not None else (dev, np.full(n_ph, -1, np.int64))
    told = said_stream >= 0
    if told.any():
        dev, stream = np.where(told, said_dev, dev), np.where(told, said_stream, stream)
    ph_read_end = read_ends(ops, op_phase, ph_e, clock.op_instants)
    busiest = busiest_streams(ops, copy_streams)
    moved = ((dev != work_dev) | (stream != work_stream)) & (work_stream >= 0) & ~told  # (a said stream is no guess: nothing to warn of)
    kernels_there, copies_there = _work_all_on(clock, placed, deciding_phase, ph_pid, work_dev, work_stream) if moved.any() else (moved, moved)
    # (an instance that only copied, on a stream its other instances run kernels on, is no
    # copy-stream phase above: it is moved as they are, and said as they are)
    mask = moved & (kernels_there | copies_there)
    side = SideReadings(np.zeros(n_ph, dtype=bool), np.zeros(n_ph, np.int64), np.full(n_ph, -1, np.int64), np.zeros(n_ph, np.int8))
    if mask.any():
        # Events on the stream their work went to, had the range run inside a `with
        # torch.cuda.stream(...)` for it: the same tiling with those phases on that stream.
        o_start, o_end, _, _ = phase_boundaries(clock, ph_pid, ph_s, ph_read_end, cycle_of, np.where(mask, work_dev, dev), np.where(mask, work_stream, stream),
                                                busiest, ph_tid, ended_elsewhere=ended_elsewhere, range_end=ph_e, op_owner=deciding_phase, beside=beside, unset=unset)
        ok = mask & (o_start != I64_MIN)
        side = SideReadings(ok, np.where(ok, o_end - o_start, 0), np.where(ok, work_stream, -1),
                            np.where(ok, np.where(kernels_there, SIDE_STREAM_KERNELS, SIDE_STREAM_COPIES), 0).astype(np.int8))
    cycle_ends = np.full(n_ph, I64_MIN, dtype=np.int64)
    # A cycle's last phase begun apart reads the next cycle's stream where work of its own went
    # there (``_read_boundaries``): its work as owned above, whichever thread launched it, but
    # not an offload thread's copies moved into it, which decide no stream here either.
    b_start, b_end, dev, stream = phase_boundaries(clock, ph_pid, ph_s, ph_read_end, cycle_of, dev, stream, busiest, ph_tid, ended_elsewhere=ended_elsewhere,
                                                   range_end=ph_e, cycle_ends=cycle_ends, op_owner=deciding_phase,
                                                   launcher_ops=_launcher_ops(clock, ops, deciding_phase, computing, ph_pid, dev, stream), beside=beside, unset=unset)
    # Phases whose range's events may have gone on another stream of their thread: one that only
    # copied, read off the stream its copies ran on (SGLang's scheduler copying inputs on the
    # default stream that the forward stream waits for), and one that launched nothing, read on
    # a stream inherited from its thread's phases where they are read on another too (SGLang's
    # result processing after a forward on the forward stream). What events there alone read:
    # each boundary on the phase's own stream (``own_stream_only``).
    alt_dev, alt_stream, kind = dev.copy(), stream.copy(), np.zeros(n_ph, np.int8)
    if len(only_copies):
        off = ((dev[only_copies] != copied_on[0]) | (stream[only_copies] != copied_on[1])) & (copied_on[1] >= 0) & ~told[only_copies]
        at = only_copies[off]
        alt_dev[at], alt_stream[at] = copied_on[0][off], copied_on[1][off]
        kind[at] = np.where(fed[off], COPIES_FEED, COPIES_THREAD)
    idle = (np.bincount(op_phase[op_phase >= 0], minlength=n_ph)[:n_ph] == 0) & (stream >= 0) & ~told & (b_start != I64_MIN)
    if idle.any():
        other_dev, other_stream = _other_stream_of_its_thread(ph_pid, ph_tid, dev, stream, idle)
        at = np.flatnonzero(idle & (other_stream >= 0))
        alt_dev[at], alt_stream[at], kind[at] = other_dev[at], other_stream[at], LAUNCHED_NOTHING
    if kind.any():
        a_start, a_end, _, _ = phase_boundaries(clock, ph_pid, ph_s, ph_read_end, cycle_of, alt_dev, alt_stream, busiest, ph_tid, own_stream_only=True,
                                                ended_elsewhere=ended_elsewhere, range_end=ph_e, beside=beside, unset=unset)
        ok = (kind > 0) & (a_start != I64_MIN)
        side = SideReadings(side.mask | ok, np.where(ok, a_end - a_start, side.own_ns), np.where(ok, alt_stream, side.own_stream), np.where(ok, kind, side.kind))
    return b_start, b_end, dev, stream, ph_read_end, side._replace(mask=side.mask & (b_start != I64_MIN)), cycle_ends


def _latest_cycle_edges(cycle_of: np.ndarray, cycle_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per cycle, the latest of its phases' ``cycle_ends`` (ids, instants), None where none."""
    ok = (cycle_of >= 0) & (cycle_ends != I64_MIN)
    if not ok.any():
        return None
    ids, at = np.unique(cycle_of[ok], return_inverse=True)
    out = np.full(len(ids), I64_MIN, dtype=np.int64)
    np.maximum.at(out, at, cycle_ends[ok])
    return ids, out


def _other_stream_of_its_thread(pid: np.ndarray, tid: np.ndarray, dev: np.ndarray, stream: np.ndarray, idle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per phase marked ``idle``: the stream (device, stream) other than its own (``dev``,
    ``stream``) that most of its thread's other phases, those not ``idle``, are read on
    (-1 where there is none, and for the rest)."""
    out_dev, out_stream = np.full(len(pid), -1, np.int64), np.full(len(pid), -1, np.int64)
    thread = thread_keys(pid, tid)
    for t in np.unique(thread[idle]).tolist():
        mine = thread == t
        read = mine & ~idle & (stream >= 0)
        if not read.any():
            continue
        pairs, counts = np.unique(np.stack([dev[read], stream[read]], 1), axis=0, return_counts=True)
        pairs = pairs[np.argsort(-counts, kind="stable")]
        # The most used stream, or the second where the phase is read on the first.
        at = np.flatnonzero(mine & idle)
        on_first = (dev[at] == pairs[0, 0]) & (stream[at] == pairs[0, 1])
        pick = np.where(on_first, 1, 0)
        ok = pick < len(pairs)
        out_dev[at[ok]], out_stream[at[ok]] = pairs[pick[ok], 0], pairs[pick[ok], 1]
    return out_dev, out_stream


def _work_all_on(clock: StreamClock, placed: pa.Table, op_phase: np.ndarray, ph_pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per phase: whether it launched kernels or graphs (collectives too), every one of them on
    its stream (``dev``, ``stream``); and whether it launched none but copies or memsets, every
    one of them there. ``placed``: the ops with graph branches on their launch's stream
    (``StreamClock.on_launch_streams``)."""
    n = len(dev)
    rows = clock.stream_index(int64s(placed["pid"]), int64s(placed["device_id"], -1), int64s(placed["stream_id"], -1))
    computing = computes(placed)
    mine = op_phase >= 0
    here = np.zeros(len(op_phase), dtype=bool)
    here[mine] = rows[mine] == clock.stream_index(ph_pid, dev, stream)[op_phase[mine]]

    def every_one_here(ops: np.ndarray) -> np.ndarray:
        some = np.zeros(n + 1, dtype=bool)
        elsewhere = np.zeros(n + 1, dtype=bool)
        some[op_phase[ops]] = True
        elsewhere[op_phase[ops[~here[ops]]]] = True
        return (some & ~elsewhere)[:n]

    kernels = np.flatnonzero(mine & computing)
    ran_kernels = np.zeros(n + 1, dtype=bool)
    ran_kernels[op_phase[kernels]] = True
    return every_one_here(kernels), every_one_here(np.flatnonzero(mine & ~computing)) & ~ran_kernels[:n]


def _launcher_ops(clock: StreamClock, ops: pa.Table, deciding_phase: np.ndarray, computing: np.ndarray, ph_pid: np.ndarray, ph_dev: np.ndarray,
                  ph_stream: np.ndarray) -> np.ndarray:
    """Per op of ``ops`` (the table ``clock`` was built from: its ``launch_thread`` tells who
    launched each): whether a launcher of these phases launched it onto one of its streams: a
    thread that launched a kernel a phase owns (``deciding_phase``; ``computing``: per op, a
    kernel or graph), onto the stream of such a kernel or the stream its phase is read on (``ph_pid``,
    ``ph_dev``, ``ph_stream``: the kernel on a side stream forked off it). Queued between two
    phases of a cycle, such work is the loop's, which the cycle holds (``phase_boundaries``'
    ``launcher_ops``). A thread that runs kernels of its own, none a phase's (a KV-offload
    thread gathering blocks before its copy), is no launcher; one whose kernel on its own stream
    a phase that launched nothing took (``--phase-thread auto``: the gather made while the
    scheduler's CPU-only phase was open) is one on that stream alone, where that phase is read,
    not for its copies on the loop's streams."""
    out = np.zeros(ops.num_rows, bool)
    owned = np.flatnonzero((deciding_phase >= 0) & computing)
    if len(owned) == 0:
        return out
    thread = clock.launch_thread
    where = pack_keys(int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))
    ph = deciding_phase[owned]
    read_on = np.where(ph_stream[ph] >= 0, pack_keys(ph_pid[ph], ph_dev[ph], ph_stream[ph]), where[owned])
    for th in distinct_few(thread[owned]).tolist():
        mine = thread[owned] == th
        out |= (thread == th) & isin_few(where, distinct_few(np.r_[where[owned][mine], read_on[mine]]))
    return out


def _on_the_launchers_stream(ops: pa.Table, op_phase: np.ndarray, n_ph: int, computing: np.ndarray, copy_streams: CopyStreams) -> np.ndarray | None:
    """Per op of a phase that ran no kernel or graph: whether it ran on the stream its launching
    thread computes on (``CopyStreams.thread_stream``), where that thread's events go; True for
    every other op. A copy the thread put on another thread's stream is not where its events
    are. None where every phase that launched anything ran a kernel."""
    has_kernel = np.zeros(n_ph + 1, dtype=bool)
    has_kernel[op_phase[(op_phase >= 0) & computing]] = True
    rows = np.flatnonzero((op_phase >= 0) & ~has_kernel[np.where(op_phase >= 0, op_phase, n_ph)])
    if len(rows) == 0:
        return None
    own_dev, own_stream = copy_streams.thread_stream(int64s(ops["pid"])[rows], int64s(ops["launch_tid"], -1)[rows])
    out = np.ones(len(op_phase), dtype=bool)
    out[rows] = (own_stream >= 0) & (int64s(ops["device_id"], -1)[rows] == own_dev) & (int64s(ops["stream_id"], -1)[rows] == own_stream)
    return out


def _attribution_instants(ops: pa.Table) -> np.ndarray:
    """Per op: the instant at which the phase open on another thread takes it as its work
    (``attribute_other_threads``): when it was put on its stream, as the boundaries count it
    (``launch_instants``; a worker's launch call begun in a cycle's last phase that returned
    after the phase closed had been that phase's, its end boundary then reading work no event
    recorded at its end waits for), less a nanosecond (put there at the very nanosecond a phase
    closed, it was made inside it, as a boundary counts it); an op whose launch call the trace
    lacks, nobody's (int64 min). One instant for both: a copy its call waited for (``.item()``
    on a worker) taken at its call's start for its owner and at its GPU start by the boundaries
    had left a phase owning work it did not time, and a cycle's last phase taking the next
    cycle's work through its read end."""
    called = int64s(ops["launch_start_ns"], I64_MIN) != I64_MIN
    return np.where(called, launch_instants(ops) - 1, I64_MIN)


def read_ends(ops: pa.Table, op_phase: np.ndarray, cpu_end: np.ndarray, instants: np.ndarray) -> np.ndarray:
    """Per phase instance: the CPU instant its end boundary is read at: its CPU end, or just
    after the latest instant one of its ops was put on its stream where that is later (a
    launch call of its starting thread that returned after a range ended on another thread had
    ended: an event recorded then comes after that op; ``StreamClock.done`` counts what was put
    there before the instant). Other threads' ops are a phase's only where put on their stream
    inside it (``attribute_other_threads`` at their launch instants)."""
    out = np.asarray(cpu_end, dtype=np.int64).copy()
    if len(out) == 0 or ops.num_rows == 0:
        return out
    launch = instants  # ``StreamClock.op_instants``
    # Only the ops put on their stream after their phase's CPU end move it (few, if any).
    late = np.flatnonzero((op_phase >= 0) & (launch > out[np.maximum(op_phase, 0)]))
    if len(late):
        np.maximum.at(out, op_phase[late], launch[late] + 1)
    return out


def _phase_op_mix(ops: pa.Table, op_phase: np.ndarray, n_ph: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per phase instance: the communication/compute split of its ops and its CUDA-graph launches."""
    return phase_comm_split(ops.append_column("phase_id", pa.array(op_phase)), n_ph), _graph_launch_counts(ops, op_phase, n_ph)


def with_rank(work: RankWork, rank: int) -> RankWork:
    """``work`` numbered ``rank``: a rank is numbered only once every input is read (a file's
    processes' marks, its name, its neighbours'), after its worker analysed it under a
    provisional number; the number is its tables' ``rank`` column and nothing else."""

    def numbered(t: pa.Table | None) -> pa.Table | None:
        if t is None or "rank" not in t.column_names:
            return t
        return t.set_column(t.column_names.index("rank"), "rank", pa.array(np.full(t.num_rows, rank, dtype=np.int32)))

    ranges = numbered(work.ranges)
    return replace(work, rank=rank, ranges=ranges, gpu_ops=numbered(work.gpu_ops), syncs=numbered(work.syncs),
                   phase_inputs=replace(work.phase_inputs, rank=rank, ranges=ranges), provisional=numbered(work.provisional))


def finish_rank(work: RankWork, wait_ns: np.ndarray | None) -> tuple[pa.Table, pa.Table]:
    """The finished (phases, cycles) tables; ``wait_ns``: per phase, time its collectives waited
    for other ranks (None with one rank)."""
    # No wait anywhere (one rank, a rank that ran no collective, or never waited at one): the
    # phases are the provisional ones, whose waits are zeros (built once, in the rank's worker).
    waited = wait_ns is not None and bool(np.any(wait_ns))
    phases = build_phases(work.phase_inputs, wait_ns) if waited else work.provisional_phases()
    return phases, build_cycles(work.ranges, phases, work.cycle_rows, work.rank, work.skip_cycles, list(work.accepted_marks), work.unrun_from_ns,
                                work.silent_cycles, work.empty_steps, work.cycle_ends)



def _build_syncs(blocking: pa.Table, targets: WaitTargets, waits: dict, call_range: np.ndarray, call_phase: np.ndarray, labels: list,
                 rank: int) -> pa.Table:
    """The syncs table: one row per blocking call, its device and stream those it waits on
    (``WaitTargets``), and the phase (``labels``: per phase instance, as the phases table names
    it, not its range's name) whose work ended last in the wait."""
    n = blocking.num_rows
    if n == 0:
        return schema.empty(schema.SYNCS)
    wf = waits["waited_for_phase_id"]
    wf_name = [labels[p] if p >= 0 else None for p in wf]
    t = {
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "pid": blocking["pid"],
        "tid": blocking["tid"],
        "api": blocking["api"],
        "start_ns": blocking["start_ns"],
        "end_ns": blocking["end_ns"],
        "blocked_ns": pc.subtract(blocking["end_ns"], blocking["start_ns"]),
        "device_id": pa.array(targets.device, mask=targets.device < 0),
        "stream_id": pa.array(targets.stream, mask=targets.stream < 0),
        "sync_type": blocking["sync_type"],
        "range_id": pa.array(call_range, mask=call_range < 0),
        "phase_id": pa.array(call_phase, mask=call_phase < 0),
        "waited_gpu_ns": pa.array(waits["waited_gpu_ns"]),
        "waited_other_phase_ns": pa.array(waits["waited_other_phase_ns"]),
        "waited_for_phase_id": pa.array(wf, mask=wf < 0),
        "waited_for_phase": pa.array(wf_name, pa.string()),
    }
    return pa.table(t, schema=schema.SYNCS).sort_by([("start_ns", "ascending")])


def _graph_launch_counts(ops: pa.Table, op_phase: np.ndarray, n_phases: int) -> np.ndarray:
    """CUDA-graph launches per phase: graph-trace rows, or distinct node-mode launch calls."""
    counts = np.zeros(n_phases, dtype=np.int64)
    if ops.num_rows == 0 or n_phases == 0:
        return counts
    # One launch = one graph-trace row, or the node-mode kernels of one launch call (their
    # correlation id, within their process: ``graph_node_launches``).
    launch = -1 - np.arange(ops.num_rows, dtype=np.int64)  # a graph-trace row: a launch of its own
    nodes, node_launch = graph_node_launches(ops)
    launch[nodes] = node_launch
    sel = np.flatnonzero(is_graph_launch(ops) & (op_phase >= 0))
    if len(sel):
        _, dense = np.unique(launch[sel], return_inverse=True)
        packed = np.unique(op_phase[sel] * (dense.max() + 1) + dense.ravel())
        counts = np.bincount(packed // (dense.max() + 1), minlength=n_phases).astype(np.int64)
    return counts


def _build_gpu_ops(ops: pa.Table, op_range: np.ndarray, op_phase: np.ndarray, rank: int) -> pa.Table:
    n = ops.num_rows
    if n == 0:
        return schema.empty(schema.GPU_OPS)
    t = ops.append_column("rank", pa.array(np.full(n, rank, dtype=np.int32)))
    t = t.append_column("range_id", pa.array(op_range, mask=op_range < 0))
    t = t.append_column("phase_id", pa.array(op_phase, mask=op_phase < 0))
    return t.select(schema.GPU_OPS.names).cast(schema.GPU_OPS)
