"""The run as one timeline (issue 13): what goes on which track is decided once, here, and then
written either as Chrome trace-event JSON or as a native Perfetto protobuf trace.

``timeline(analysis)`` yields the model as a stream: ``Process`` and ``Track`` descriptors, then
``Slice`` and ``Instant`` events, and the GPU ops as columnar ``OpBatch``es (the bulk of a large
trace, so no object per op). ``export_timeline`` feeds that stream to one writer, which
serialises each item as it comes (memory stays flat for large traces) into a temporary sibling
renamed over the output. Names and args come from the analysis only, so a scrubbed input gives a
scrubbed timeline.

The Perfetto writer needs the ``perfetto`` extra (its protobuf message classes); it is imported
only when that format is asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.projection import int64s
from tracerecon.analysis.stream_keys import stream_tracks
from tracerecon.errors import EXIT_TOOL_MISSING, TraceReconError, UsageError, install_hint
from tracerecon.model import Analysis, RankResult
from tracerecon.json_text import gpu_label, valid_text
from tracerecon.present import gpus_text

FORMATS = ("chrome-json", "perfetto")
PERFETTO_HINT = install_hint("perfetto")

# Chrome JSON thread ids of the synthetic tracks inside a rank's process (CPU threads keep their
# own). Perfetto needs none: those tracks are named children of the process there.
GPU_PHASES_TID = 1_000_000_000
STREAM_TID_BASE = 1_000_000_100
NO_STREAM_TID = STREAM_TID_BASE - 1
LANE_TID_BASE = 1_500_000_000

# What each slice counts as (the counts ``export_timeline`` returns); instants count as "gate".
COUNT_KEYS = ("phase", "cycle", "gpu_phase", "gpu_cycle", "gpu_op", "wait", "flow", "gate")


# --- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Process:
    """One rank. ``pid`` is the rank plus one: ranks on several hosts may share real process
    ids, and Perfetto keeps pid 0 for the kernel's idle task (its threads are named swapper)."""

    uuid: int
    pid: int
    name: str
    sort_index: int


@dataclass(frozen=True, slots=True)
class Track:
    """One row of slices in a rank's process. ``thread``: a real CPU thread and ``tid`` its id;
    otherwise a synthetic track (GPU phases, a GPU stream, an overflow lane) whose ``tid`` only
    the JSON format uses. ``parent`` is the uuid of the rank's Process."""

    uuid: int
    pid: int
    tid: int
    name: str
    sort_index: int
    thread: bool
    parent: int


@dataclass(frozen=True, slots=True)
class Flow:
    """An arrow between two slices; ``id`` is unique in the file. It leaves its out slice at
    that slice's start and reaches its in slice at that slice's end, so that it runs forward in
    time (Perfetto drops a flow whose end comes before its start): the model only makes flows
    whose out slice starts before its in slice ends."""

    id: int
    name: str
    cat: str


@dataclass(frozen=True, slots=True)
class Slice:
    """``start_ns`` is on the aligned cross-rank timeline, counted from the run's earliest event.
    ``cat`` is the JSON category (the GPU op's kind for GPU ops); ``role`` what it counts as."""

    track: Track
    name: str
    cat: str
    role: str
    start_ns: int
    dur_ns: int
    args: dict
    flows_out: tuple[Flow, ...] = ()
    flows_in: tuple[Flow, ...] = ()

    def row(self) -> tuple:
        """The fields ``OpBatch.rows`` gives per op, so that writers treat both alike."""
        return self.track, self.name, self.cat, self.start_ns, self.dur_ns, self.args, self.flows_out, self.flows_in


@dataclass(frozen=True, slots=True)
class OpBatch:
    """Up to ``OP_BATCH`` GPU ops of one stream, in time order, as columns: GPU ops are the bulk
    of a large trace, so there is no object per op. Op i is on ``lanes[i]`` when the stream
    needed overflow lanes, else on ``track``; ``flows`` maps an op's index to its
    (flows_out, flows_in) (collectives only)."""

    track: Track
    lanes: list | None
    names: list
    kinds: list
    starts: list  # aligned ns, like Slice.start_ns
    durs: list
    correlations: list
    phases: list  # the launching phase's name, or None
    flows: dict

    def rows(self) -> Iterator[tuple]:
        """Each op as the fields of a Slice: (track, name, cat, start_ns, dur_ns, args,
        flows_out, flows_in); args are its kind, correlation id and phase (when known)."""
        tracks = self.lanes or itertools.repeat(self.track)
        flows = self.flows
        for i, (track, name, kind, start, dur, corr, phase) in enumerate(
                zip(tracks, self.names, self.kinds, self.starts, self.durs, self.correlations, self.phases)):
            args = {"kind": kind, "correlation": corr}
            if phase is not None:
                args["phase"] = phase
            out, inn = flows.get(i, _NO_FLOWS) if flows else _NO_FLOWS
            yield track, name or kind, kind, start, dur, args, out, inn


_NO_FLOWS = ((), ())
OP_BATCH = 50_000


@dataclass(frozen=True, slots=True)
class Instant:
    """A mark at one time on a track: the critical path's gating phase of a cycle."""

    track: Track
    name: str
    cat: str
    ts_ns: int


Item = Process | Track | Slice | OpBatch | Instant


@dataclass
class _Run:
    """What every rank's part of the timeline needs from the whole run; the state of one export
    (collective flow ends are taken off ``coll_flows`` as their ops are written)."""

    shift: dict  # rank -> ns to add to its own timestamps (alignment offset - the run's start)
    gates: dict  # (rank, cycle as the critical path counts it) -> gating phase name
    counted_cycles: Callable[[int, np.ndarray], np.ndarray]  # (rank, its cycles) -> those cycles as the critical path counts them
    coll_flows: dict  # rank -> {(start_ns, op name): ([out flows], [in flows])}
    uuids: Iterator[int]
    flow_ids: Iterator[int]


def timeline(analysis: Analysis) -> Iterator[Item]:
    """The run's timeline, rank by rank. Contract, which both writers rely on:

    - a Process comes before its Tracks, a Track before its first event;
    - on one track, events come in time order, an enclosing slice before what it encloses, and
      slices nest or follow each other, never cross (one that would cross goes to an overflow
      lane: a track of its own named like the first, plus ``(overlap N)``);
    - every Flow is in exactly one slice's ``flows_out`` and one slice's ``flows_in``, and
      the out slice starts before the in slice ends.
    """
    flow_ids = itertools.count(1)
    shifts = _shifts(analysis)
    counted_cycles = analysis.cross.counted_cycles if analysis.cross else (lambda rank, cycles: cycles)
    run = _Run(shifts, _gates(analysis), counted_cycles, _collective_flows(analysis, shifts, flow_ids), itertools.count(1), flow_ids)
    for r in analysis.ranks:
        yield from _rank_items(r, run)


def _shifts(analysis: Analysis) -> dict:
    """Per rank, what puts its timestamps on the aligned timeline starting at 0: its alignment
    offset minus the earliest aligned time of anything exported (so no timestamp is negative)."""
    offsets = {}
    for r in analysis.ranks:
        al = analysis.cross.alignment_of(r.rank) if analysis.cross else None
        offsets[r.rank] = al.offset_ns if al else 0
    starts = [m + offsets[r.rank] for r in analysis.ranks for m in _earliest(r)]
    t0 = min(starts, default=0)
    return {rank: off - t0 for rank, off in offsets.items()}


def _earliest(r: RankResult) -> list[int]:
    """The earliest time, on the rank's own clock, of each kind of thing exported."""
    cols = [(r.phases, "cpu_start_ns"), (r.phases, "gpu_boundary_start_ns"), (r.cycles, "cpu_start_ns"),
            (r.cycles, "gpu_boundary_start_ns"), (r.syncs, "start_ns"), (r.gpu_ops, "start_ns")]
    mins = (pc.min(t[c]).as_py() for t, c in cols if t.num_rows)
    return [int(m) for m in mins if m is not None]


def _gates(analysis: Analysis) -> dict:
    if analysis.cross is None:
        return {}
    return {(row["gating_rank"], row["cycle"]): row["gating_phase"] for row in analysis.cross.critical_path.to_pylist()}


def _collective_flows(analysis: Analysis, shifts: dict, flow_ids: Iterator[int]) -> dict:
    """Flows along each collective between the GPU ops that ran it on each rank, from rank to
    rank in the order the ops started on the aligned timeline (ties in rank order). Only ops
    present in the ranks' tables take part, so every flow drawn has both ends."""
    if analysis.cross is None or len(analysis.ranks) < 2:
        return {}
    coll = analysis.cross.collectives
    present = {r.rank: _ops_at(r, coll) for r in analysis.ranks}
    by_coll: dict[int, list[dict]] = {}
    for row in coll.to_pylist():
        if (row["start_ns"], row["name"]) in present.get(row["rank"], ()):
            by_coll.setdefault(row["collective"], []).append(row)
    ends: dict = {}
    for rows in by_coll.values():
        rows.sort(key=lambda x: (x["start_ns"] + shifts[x["rank"]], x["rank"]))
        for a, b in zip(rows, rows[1:]):
            flow = Flow(next(flow_ids), f"collective {a['collective']}", "collective")
            ends.setdefault(a["rank"], {}).setdefault((a["start_ns"], a["name"]), ([], []))[0].append(flow)
            ends.setdefault(b["rank"], {}).setdefault((b["start_ns"], b["name"]), ([], []))[1].append(flow)
    return ends


def _ops_at(r: RankResult, coll) -> set:
    """(start_ns, name) of this rank's GPU ops that start when one of its collectives does."""
    mine = coll.filter(pc.equal(coll["rank"], r.rank))["start_ns"]
    ops = r.gpu_ops.select(["start_ns", "name"])
    hits = ops.filter(pc.is_in(ops["start_ns"], value_set=mine)).to_pydict()
    return set(zip(hits["start_ns"], hits["name"]))


# --- one rank ------------------------------------------------------------------------------------


def _rank_items(r: RankResult, run: _Run) -> Iterator[Item]:
    on = gpus_text(r.gpus)  # (which GPU the rank ran on: a teammate opening the timeline sees it)
    proc = Process(next(run.uuids), r.rank + 1, f"rank {r.rank} ({valid_text(Path(r.source.path).name)})" + (f" {on}" if on else ""), r.rank)
    yield proc
    phases = r.phases.to_pylist()
    wait_flows, phase_flows = _wait_flows(r, phases, run.flow_ids)
    cpu, n_threads = _cpu_tracks(r, phases, proc, run, wait_flows)
    yield from cpu
    yield from _gpu_phase_track(r, phases, proc, run, phase_flows, n_threads)
    yield from _stream_tracks(r, phases, proc, run, n_threads + 1)


def _wait_flows(r: RankResult, phases: list[dict], flow_ids: Iterator[int]) -> tuple[dict, dict]:
    """A flow from each blocking wait to the GPU phase it waited for, when that phase has GPU
    boundaries to point at and ends after the wait began (a wait can only have waited for GPU
    work still to finish): {sync row: flow}, {phase row: [flows]}."""
    by_wait, by_phase = {}, {}
    d = r.syncs.select(["waited_for_phase_id", "start_ns"]).to_pydict()
    for i, (wf, start) in enumerate(zip(d["waited_for_phase_id"], d["start_ns"])):
        if wf is None:
            continue
        p = phases[wf]
        if p["gpu_boundary_start_ns"] is not None and p["gpu_boundary_end_ns"] > start:
            flow = Flow(next(flow_ids), "waited for", "wait")
            by_wait[i] = flow
            by_phase.setdefault(wf, []).append(flow)
    return by_wait, by_phase


def _cpu_tracks(r: RankResult, phases: list[dict], proc: Process, run: _Run, wait_flows: dict) -> tuple[list[Item], int]:
    """Per CPU thread one track: its cycles, phases (CPU ms, GPU ms, verdict, cause) and waits;
    a cycle goes to the thread of its first phase. Returns the items and the number of threads."""
    shift = run.shift[r.rank]
    cycle_tid: dict = {}
    for p in phases:
        cycle_tid.setdefault(p["cycle"], p["tid"])
    cycles, syncs = r.cycles.to_pylist(), r.syncs.to_pylist()
    cycle_tids = [cycle_tid.get(c["cycle"], 0) for c in cycles]
    sync_tids = [s["tid"] if s["tid"] is not None else 0 for s in syncs]
    tids = sorted(set(cycle_tids) | {p["tid"] for p in phases} | set(sync_tids))
    # Perfetto's thread ids are int32: a thread outside that range becomes a named track.
    tracks = {tid: Track(next(run.uuids), proc.pid, tid, "CPU (phases, waits)", n, 0 <= tid < 2**31, proc.uuid) for n, tid in enumerate(tids)}
    events: dict[int, list[Slice]] = {tid: [] for tid in tids}
    for c, tid in zip(cycles, cycle_tids):
        events[tid].append(_cycle_slice(tracks[tid], c, shift))
    for p in phases:
        events[p["tid"]].append(_phase_slice(tracks[p["tid"]], p, shift))
    for i, (s, tid) in enumerate(zip(syncs, sync_tids)):
        flow = wait_flows.get(i)
        events[tid].append(_wait_slice(tracks[tid], s, shift, (flow,) if flow else ()))
    items: list[Item] = []
    for tid in tids:
        items += _laid_out(tracks[tid], events[tid], run)
    return items, len(tids)


def _gpu_phase_track(r: RankResult, phases: list[dict], proc: Process, run: _Run, phase_flows: dict, sort_index: int) -> list[Item]:
    """The reconstructed GPU phases (each between its CUDA-event boundaries), cycles around them,
    and per cycle a mark on the critical path's gating phase when this rank gated it."""
    shift = run.shift[r.rank]
    track = Track(next(run.uuids), proc.pid, GPU_PHASES_TID, "GPU phases (CUDA-event time)", sort_index, False, proc.uuid)
    events: list[Slice | Instant] = []
    for c in r.cycles.to_pylist():
        if c["gpu_boundary_start_ns"] is not None:
            events.append(Slice(track, c["name"], "gpu_cycle", "gpu_cycle", c["gpu_boundary_start_ns"] + shift, c["gpu_ns"] or 0,
                                {"gpu_ms": _ms(c["gpu_ns"])}))
    marked = set()
    # The critical path counts cycles as the first rank does; this rank's may be shifted (a
    # capture begun cycles later): its marks carry its own number, and the other where they differ.
    own = sorted({p["cycle"] for p in phases if p["cycle"] is not None})
    counted = dict(zip(own, run.counted_cycles(r.rank, np.array(own, np.int64)).tolist()))
    for i, p in enumerate(phases):
        if p["gpu_boundary_start_ns"] is None:
            continue
        events.append(_gpu_phase_slice(track, p, shift, tuple(phase_flows.get(i, ()))))
        cycle = p["cycle"]
        counted_as = counted.get(cycle)
        if cycle is not None and run.gates.get((r.rank, counted_as)) == p["phase"] and cycle not in marked:
            marked.add(cycle)  # one mark per cycle: on its first such phase
            name = f"gated cycle {cycle}" + (f" (critical path cycle {counted_as})" if counted_as != cycle else "")
            events.append(Instant(track, name, "critical_path", p["gpu_boundary_start_ns"] + shift))
    return _laid_out(track, events, run)


def _stream_tracks(r: RankResult, phases: list[dict], proc: Process, run: _Run, sort_index: int) -> Iterator[Item]:
    """One track per GPU stream with every kernel, copy, memset and graph launch on it, in
    batches so memory stays flat; collectives carry their cross-rank flows."""
    ops = r.gpu_ops
    if ops.num_rows == 0:
        return
    phase_names = [p["phase"] for p in phases]
    which, keys = stream_tracks(int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1))
    for n, (pid, dev, stream) in enumerate(keys):
        mine = ops.take(pa.array(np.flatnonzero(which == n)))
        mine = mine.sort_by([("start_ns", "ascending"), ("end_ns", "descending")])
        dev, stream = (None if dev < 0 else dev), (None if stream < 0 else stream)
        track = _stream_track(_gpu_words(r, mine, dev), stream, pid, n, proc, run, sort_index + n)
        yield track
        lanes, new_tracks = _op_lanes(mine, track, run)
        yield from new_tracks
        yield from _op_batches(mine, track, lanes, run.shift[r.rank], phase_names, run.coll_flows.get(r.rank, {}))


def _op_lanes(ops, track: Track, run: _Run) -> tuple[list | None, list[Track]]:
    """Each op's lane and the overflow tracks made. (None, []) when every op starts after the
    ones before it ended, as on a usual stream: then no op needs placing one by one."""
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    if len(start) < 2 or bool((start[1:] >= np.maximum.accumulate(end)[:-1]).all()):
        return None, []
    lanes = _Lanes(track, run.uuids)
    placed = [lanes.place(s, e)[0] for s, e in zip(start.tolist(), end.tolist())]
    return placed, lanes.tracks[1:]


def _op_batches(ops, track: Track, lanes: list | None, shift: int, phase_names: list, flows: dict) -> Iterator[OpBatch]:
    """``ops`` (one stream, time order) as OpBatches; the collective flow ends found are taken
    off ``flows``, so each is carried by one op. Columns go to Python through numpy, which is
    several times quicker than ``to_pylist`` on this many rows."""
    phase_of = np.array(phase_names + [None], dtype=object)  # index -1: launched by no phase
    first = 0
    for b in ops.select(["kind", "name", "start_ns", "end_ns", "phase_id", "correlation_id"]).to_batches(OP_BATCH):
        starts, ends = _ints(b.column("start_ns")), _ints(b.column("end_ns"))
        names = _strings(b.column("name"))
        mine = {}
        if flows:
            for i, key in enumerate(zip(starts.tolist(), names)):
                found = flows.pop(key, None)
                if found:
                    mine[i] = (tuple(found[0]), tuple(found[1]))
        yield OpBatch(
            track, lanes[first:first + b.num_rows] if lanes else None, names, _strings(b.column("kind")),
            (starts + shift).tolist(), (ends - starts).tolist(), _values(b.column("correlation_id")),
            phase_of[_ints(b.column("phase_id"), missing=-1)].tolist(), mine,
        )
        first += b.num_rows


def _ints(a, missing: int | None = None) -> np.ndarray:
    """An int64 Arrow array as numpy; nulls become ``missing``."""
    if a.null_count:
        a = pc.fill_null(a, missing)
    return a.to_numpy()


def _strings(a) -> list:
    """A (dictionary-encoded) string Arrow array as a Python list, one lookup per distinct name."""
    if not isinstance(a, pa.DictionaryArray):
        return a.to_pylist()
    words = np.array(a.dictionary.to_pylist() + [None], dtype=object)  # index -1: null
    return words[_ints(a.indices.cast(pa.int64()), missing=-1)].tolist()


def _values(a) -> list:
    """An int64 Arrow array as a Python list, None for nulls."""
    return a.to_numpy().tolist() if a.null_count == 0 else a.to_pylist()


def _gpu_words(r: RankResult, ops, dev: int | None) -> str | None:
    """How a stream track names its GPU: the process's CUDA device ``dev``, or where its
    processes numbered the machine's GPU otherwise (CUDA_VISIBLE_DEVICES), that GPU and the
    device (``2 (CUDA 0)``), as the rank's header does."""
    if dev is None or not r.info.renumbered:
        return None if dev is None else str(dev)
    gpus = {r.info.gpu_of(pid, dev) for pid in pc.unique(ops["pid"]).to_pylist() if pid is not None}
    return gpu_label(gpus.pop(), dev) if len(gpus) == 1 else str(dev)


def _stream_track(dev: str | None, stream: int | None, pid: int | None, n: int, proc: Process, run: _Run, sort_index: int) -> Track:
    """The track of the ``n``-th stream of a rank (``stream_tracks``; its thread id in Chrome
    JSON: ``STREAM_TID_BASE + n``, one per stream whatever the ids' sizes); ``dev``: its GPU in
    words (``_gpu_words``); ``pid``: its process, named where the rank has several."""
    of = f" (pid {pid})" if pid is not None else ""
    if stream is None:
        return Track(next(run.uuids), proc.pid, NO_STREAM_TID - n, "GPU ops without a stream" + (f" (GPU {dev})" if dev is not None else "") + of,
                     sort_index, False, proc.uuid)
    return Track(next(run.uuids), proc.pid, STREAM_TID_BASE + n, f"GPU {dev} stream {stream}{of}", sort_index, False, proc.uuid)


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _cycle_slice(track: Track, c: dict, shift: int) -> Slice:
    return Slice(track, c["name"], "cycle", "cycle", c["cpu_start_ns"] + shift, c["cpu_ns"],
                 {"cpu_ms": c["cpu_ns"] / 1e6, "gpu_ms": _ms(c["gpu_ns"])})


def _phase_slice(track: Track, p: dict, shift: int) -> Slice:
    args = {"cpu_ms": p["cpu_ns"] / 1e6, "gpu_ms": _ms(p["gpu_ns"]), "verdict": p["verdict"], "cause": p["cause"],
            "cycle": p["cycle"], "attribution": p["attribution"]}
    return Slice(track, p["phase"], "phase", "phase", p["cpu_start_ns"] + shift, p["cpu_ns"], args)


def _wait_slice(track: Track, s: dict, shift: int, flows: tuple[Flow, ...]) -> Slice:
    args = {"blocked_ms": s["blocked_ns"] / 1e6, "waited_for": s["waited_for_phase"], "waited_gpu_ms": _ms(s["waited_gpu_ns"])}
    return Slice(track, f"wait: {s['api']}", "wait", "wait", s["start_ns"] + shift, s["blocked_ns"], args, flows_out=flows)


def _gpu_phase_slice(track: Track, p: dict, shift: int, flows_in: tuple[Flow, ...]) -> Slice:
    args = {"gpu_ms": _ms(p["gpu_ns"]), "span_ms": _ms(p["gpu_span_ns"]), "busy_ms": _ms(p["gpu_busy_ns"]),
            "verdict": p["verdict"], "cause": p["cause"], "stream": p["stream_id"]}
    return Slice(track, p["phase"], "gpu_phase", "gpu_phase", p["gpu_boundary_start_ns"] + shift, p["gpu_ns"], args, flows_in=flows_in)


# Among slices that start together, the enclosing kind first.
_ORDER = {"cycle": 0, "gpu_cycle": 0, "phase": 1, "gpu_phase": 1, "wait": 2}


def _laid_out(track: Track, events: list[Slice | Instant], run: _Run) -> list[Item]:
    """``track`` and its events in time order (longest first among those starting together),
    each slice on the first lane where it nests."""
    def key(ev):
        if isinstance(ev, Instant):
            return (ev.ts_ns, 0, 3)
        return (ev.start_ns, -ev.dur_ns, _ORDER.get(ev.role, 2))

    lanes = _Lanes(track, run.uuids)
    out: list[Item] = [track]
    for ev in sorted(events, key=key):
        if isinstance(ev, Instant):
            out.append(ev)
            continue
        on, new = lanes.place(ev.start_ns, ev.start_ns + ev.dur_ns)
        if new is not None:
            out.append(new)
        out.append(ev if ev.track is on else dataclasses.replace(ev, track=on))
    return out


class _Lanes:
    """Keeps slices on a track properly nested, as Perfetto's begin/end slices need: given the
    track's slices in time order, puts each on the first lane (the track itself, then overflow
    tracks made on demand) where it nests inside or follows what is open there."""

    def __init__(self, track: Track, uuids: Iterator[int]) -> None:
        self.tracks = [track]
        self.open: list[list[int]] = [[]]  # per lane: end times of the open slices, innermost last
        self.uuids = uuids

    def place(self, start: int, end: int) -> tuple[Track, Track | None]:
        """The lane for [start, end), and the lane's Track when it was just made (to yield first)."""
        for lane, stack in enumerate(self.open):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return self.tracks[lane], None
        main = self.tracks[0]
        n = len(self.tracks)
        base = f"{main.name} (thread {main.tid})" if main.thread else main.name  # a lane is no thread: say whose it is
        lane = Track(next(self.uuids), main.pid, LANE_TID_BASE + main.uuid * 1000 + n, f"{base} (overlap {n})",
                     main.sort_index, False, main.parent)
        self.tracks.append(lane)
        self.open.append([end])
        return lane, lane


# --- writing -------------------------------------------------------------------------------------


def export_timeline(analysis: Analysis, out_file: str | os.PathLike, fmt: str = "chrome-json") -> dict:
    """Write the run's timeline to ``out_file`` as ``fmt`` ("chrome-json" or "perfetto"),
    replacing it atomically; returns counts per kind (phase, cycle, gpu_phase, gpu_cycle,
    gpu_op, wait, flow, gate), the same for both formats. "perfetto" without the ``perfetto``
    package raises TraceReconError (exit 2) naming the extra to install, before writing."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown timeline format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "perfetto":
        pb = perfetto_messages()
        writer_of = lambda fh: _PerfettoWriter(fh, pb)  # noqa: E731
    else:
        writer_of = _ChromeJsonWriter
    out = Path(out_file)
    from tracerecon.nsys.read_plan import refuse_file_over_a_trace
    from tracerecon.run_dir import refuse_output_over_inputs, refuse_replacing_what_a_folder_reads, refuse_special_output

    refuse_output_over_inputs(out, analysis.inputs)
    refuse_special_output(out)
    refuse_replacing_what_a_folder_reads(out)
    refuse_file_over_a_trace(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    counts = dict.fromkeys(COUNT_KEYS, 0)
    try:
        with open(tmp, "wb", buffering=1 << 20) as fh:
            writer = writer_of(fh)
            for item in _counted(timeline(analysis), counts):
                writer.add(item)
            writer.close()
        os.replace(tmp, out)
    except OSError as exc:
        raise TraceReconError(f"{out}: cannot write ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):  # not there, or never could be (its folder is a file)
            tmp.unlink()
    return counts


def _counted(items: Iterable[Item], counts: dict) -> Iterator[Item]:
    """``items`` unchanged, adding each to ``counts`` (a flow is counted at its out end)."""
    for item in items:
        if isinstance(item, OpBatch):
            counts["gpu_op"] += len(item.starts)
            counts["flow"] += sum(len(out) for out, _ in item.flows.values())
        elif isinstance(item, Slice):
            counts[item.role] += 1
            counts["flow"] += len(item.flows_out)
        elif isinstance(item, Instant):
            counts["gate"] += 1
        yield item


def perfetto_messages():
    """The ``perfetto`` package's protobuf module (``perfetto_trace_pb2``). Raises
    TraceReconError (exit 2) with the install line when it, or protobuf, cannot be imported."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except Exception as exc:  # ImportError, or a protobuf runtime too old for the generated code
        raise TraceReconError(f"the perfetto format needs the `perfetto` extra ({type(exc).__name__}: {exc}): {PERFETTO_HINT}",
                              exit_code=EXIT_TOOL_MISSING) from None
    return perfetto_trace_pb2


class _Writer:
    """What both writers share: dispatch on the model's item types, and GPU op batches written
    row by row through the same ``row`` as single slices."""

    def add(self, item: Item) -> None:
        if type(item) is OpBatch:
            row = self.row
            for r in item.rows():
                row(*r)
        elif type(item) is Slice:
            self.row(*item.row())
        elif type(item) is Instant:
            self.instant(item)
        elif type(item) is Track:
            self.track(item)
        else:
            self.process(item)


class _ChromeJsonWriter(_Writer):
    """Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing): one event per line, times
    in microseconds; flows as "s"/"f" events bound to their slices."""

    def __init__(self, fh) -> None:
        self.fh = fh
        self.first = True
        self.encode = json.JSONEncoder(separators=(",", ":")).encode

    def emit(self, ev: dict) -> None:
        self.fh.write((("[\n" if self.first else ",\n") + self.encode(ev)).encode())
        self.first = False

    def process(self, p: Process) -> None:
        self.emit({"ph": "M", "name": "process_name", "pid": p.pid, "args": {"name": p.name}})
        self.emit({"ph": "M", "name": "process_sort_index", "pid": p.pid, "args": {"sort_index": p.sort_index}})

    def track(self, t: Track) -> None:
        self.emit({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": t.tid, "args": {"name": t.name}})
        self.emit({"ph": "M", "name": "thread_sort_index", "pid": t.pid, "tid": t.tid, "args": {"sort_index": t.sort_index}})

    def row(self, track: Track, name: str, cat: str, start: int, dur: int, args: dict, flows_out: tuple, flows_in: tuple) -> None:
        ts = _us(start)
        self.emit({"ph": "X", "name": name, "cat": cat, "pid": track.pid, "tid": track.tid, "ts": ts, "dur": _us(dur), "args": args})
        for f in flows_out:
            self.emit({"ph": "s", "id": f.id, "name": f.name, "cat": f.cat, "pid": track.pid, "tid": track.tid, "ts": ts})
        if flows_in:  # bound to the slice itself: its last nanosecond is inside it
            end = _us(start + max(dur - 1, 0))
            for f in flows_in:
                self.emit({"ph": "f", "bp": "e", "id": f.id, "name": f.name, "cat": f.cat, "pid": track.pid, "tid": track.tid, "ts": end})

    def instant(self, i: Instant) -> None:
        self.emit({"ph": "i", "s": "t", "name": i.name, "cat": i.cat, "pid": i.track.pid, "tid": i.track.tid, "ts": _us(i.ts_ns)})

    def close(self) -> None:
        self.fh.write(b"[\n]\n" if self.first else b"\n]\n")


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Trace.packet is field 1, length-delimited: a file of such records is one Trace message, written
# a packet at a time instead of built whole in memory. Prefixes of the usual packet sizes are
# made once.
_PACKET_TAG = b"\x0a"
_N_PREFIXES = 1 << 14
_PREFIXES = [_PACKET_TAG + _varint(n) for n in range(_N_PREFIXES)]
_SEQUENCE_ID = 1  # one writer, one packet sequence: the scope of the interned strings
_INTERNED = ("event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values")


class _PerfettoWriter(_Writer):
    """Native Perfetto trace: a process track descriptor per rank (pid = rank + 1), thread
    descriptors (pid, tid) for CPU threads, named child tracks of the process for GPU phases
    and streams; slices as TYPE_SLICE_BEGIN/END pairs, marks as TYPE_INSTANT, a flow as
    ``flow_ids`` on its out slice's BEGIN and ``terminating_flow_ids`` on its in slice's END
    (the trace processor links them in time order, so the arrow runs out -> in).

    The trace processor sorts events by time, ties in file order, and an END closes the
    innermost open slice of its track; so per track the ENDs due by a BEGIN's time are written
    before it, innermost first (the model gives each track's slices nested and in time order).
    Event names, categories, arg names and string arg values are interned on the one packet
    sequence, whose first packet clears its state."""

    def __init__(self, fh, pb) -> None:
        self.fh, self.pb, self.Packet = fh, pb, pb.TracePacket
        self.BEGIN, self.END, self.INSTANT = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT
        self.NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        self.iids: dict[str, dict[str, int]] = {t: {} for t in _INTERNED}
        self.open: dict[int, list[int]] = {}  # track uuid -> end times of its open slices, innermost last
        self.end_flows: dict[tuple[int, int], list[int]] = {}  # (track uuid, depth) -> flow ids its END terminates
        self.templates: dict[tuple, object] = {}
        self.first = True

    def write(self, p) -> None:
        data = p.SerializeToString()
        n = len(data)
        self.fh.write((_PREFIXES[n] if n < _N_PREFIXES else _PACKET_TAG + _varint(n)) + data)

    def packet(self, ts: int | None = None):
        """A packet on the sequence; the first one written also clears its incremental state.
        (The model starts with a Process, so the first packet is always made here.)"""
        p = self.Packet()
        p.trusted_packet_sequence_id = _SEQUENCE_ID
        if self.first:
            p.first_packet_on_sequence = True
            p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | self.NEEDS_STATE
            self.first = False
        else:
            p.sequence_flags = self.NEEDS_STATE
        if ts is not None:
            p.timestamp = ts
        return p

    def intern(self, p, table: str, s: str) -> int:
        """A new interned id for ``s`` in ``table``, declared in packet ``p`` (ids start at 1)."""
        ids = self.iids[table]
        iid = ids[s] = len(ids) + 1
        entry = getattr(p.interned_data, table).add()
        entry.iid = iid
        if table == "debug_annotation_string_values":
            entry.str = s.encode()
        else:
            entry.name = s
        return iid

    def process(self, proc: Process) -> None:
        p = self.packet()
        d = p.track_descriptor
        d.uuid = proc.uuid
        d.process.pid = proc.pid
        d.process.process_name = proc.name
        d.child_ordering = self.pb.TrackDescriptor.EXPLICIT  # tracks in sibling_order_rank order
        self.write(p)

    def track(self, t: Track) -> None:
        p = self.packet()
        d = p.track_descriptor
        d.uuid = t.uuid
        d.parent_uuid = t.parent
        d.sibling_order_rank = t.sort_index
        if t.thread:
            d.thread.pid = t.pid
            d.thread.tid = t.tid
            d.thread.thread_name = t.name
        else:
            d.name = t.name
        self.write(p)

    def close_until(self, uuid: int, ts: int) -> list[int]:
        """Write the ends of the slices open on track ``uuid`` that end by ``ts``, innermost
        first; returns the track's stack of open slices."""
        stack = self.open.get(uuid)
        if stack is None:
            stack = self.open[uuid] = []
        while stack and stack[-1] <= ts:
            p = self.Packet()
            p.CopyFrom(self.template(uuid, self.END))
            p.timestamp = stack.pop()
            if self.end_flows:
                ids = self.end_flows.pop((uuid, len(stack)), None)
                if ids:
                    p.track_event.terminating_flow_ids.extend(ids)
            self.write(p)
        return stack

    def template(self, uuid: int, kind: int, cat_iid: int = 0):
        """The fields every event of this kind and (interned) category on this track shares,
        set once: copying them is much quicker than setting them one by one, per event."""
        key = (uuid, kind, cat_iid)
        t = self.templates.get(key)
        if t is None:
            t = self.templates[key] = self.Packet()
            t.trusted_packet_sequence_id = _SEQUENCE_ID
            t.track_event.type = kind
            t.track_event.track_uuid = uuid
            if kind != self.END:
                t.sequence_flags = self.NEEDS_STATE
            if cat_iid:
                t.track_event.category_iids.append(cat_iid)
        return t

    def row(self, track: Track, name: str, cat: str, start: int, dur: int, args: dict, flows_out: tuple, flows_in: tuple) -> None:
        # The hot path (once per GPU op): lookups hoisted, the common cases inline.
        uuid = track.uuid
        stack = self.open.get(uuid)
        if not stack or stack[-1] <= start:
            stack = self.close_until(uuid, start)
        iids = self.iids
        cat_iid = iids["event_categories"].get(cat)
        p = self.Packet()
        p.CopyFrom(self.templates.get((uuid, self.BEGIN, cat_iid or 0)) or self.template(uuid, self.BEGIN, cat_iid or 0))
        p.timestamp = start
        te = p.track_event
        if cat_iid is None:  # a new category: declared in this packet, in the template from now on
            te.category_iids.append(self.intern(p, "event_categories", cat))
        te.name_iid = iids["event_names"].get(name) or self.intern(p, "event_names", name)
        add = te.debug_annotations.add
        for k, v in args.items():
            if v is not None:
                self.annotate(p, add(), k, v)
        if flows_out:
            te.flow_ids.extend(f.id for f in flows_out)
        if flows_in:
            self.end_flows[(uuid, len(stack))] = [f.id for f in flows_in]
        self.write(p)
        stack.append(start + dur)

    def describe(self, p, te, track: Track, name: str, cat: str) -> None:
        """The event's track, name and category (interned)."""
        te.track_uuid = track.uuid
        iids = self.iids
        te.name_iid = iids["event_names"].get(name) or self.intern(p, "event_names", name)
        te.category_iids.append(iids["event_categories"].get(cat) or self.intern(p, "event_categories", cat))

    def annotate(self, p, a, name: str, value) -> None:
        iids = self.iids
        a.name_iid = iids["debug_annotation_names"].get(name) or self.intern(p, "debug_annotation_names", name)
        kind = type(value)
        if kind is int:
            a.int_value = value
        elif kind is float:
            a.double_value = value
        elif kind is bool:
            a.bool_value = value
        else:
            value = str(value)
            a.string_value_iid = iids["debug_annotation_string_values"].get(value) or self.intern(p, "debug_annotation_string_values", value)

    def instant(self, i: Instant) -> None:
        self.close_until(i.track.uuid, i.ts_ns)
        p = self.packet(i.ts_ns)
        p.track_event.type = self.INSTANT
        self.describe(p, p.track_event, i.track, i.name, i.cat)
        self.write(p)

    def close(self) -> None:
        for uuid in list(self.open):
            self.close_until(uuid, 2**63 - 1)
