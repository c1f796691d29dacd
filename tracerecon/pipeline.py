"""The one core that ``report``, ``export`` and ``view`` share: traces in, per-rank tables out.

``analyze(paths)`` reads every export (nsys/), splits it into ranks, and runs the analysis
(analysis/) for each. The result is plain Arrow tables in frozen dataclasses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon import __version__, schema
from tracerecon.analysis.cross_rank import CrossRank, RankView, analyze_cross_rank
from tracerecon.analysis.nccl import phase_comm_split
from tracerecon.analysis.attribution import attribute_other_threads, cross_thread_phases
from tracerecon.analysis.boundaries import busiest_streams, phase_boundaries, phase_streams, stream_clock
from tracerecon.analysis.phases import PhaseConfig, PhaseInputs, build_cycles, build_phases, select_phases
from tracerecon.analysis.projection import I64_MIN, equals, index_launches, innermost_owner, int64s, link_launches, string_mask
from tracerecon.analysis.ranges import build_ranges, nest
from tracerecon.analysis.ranks import RankSource, processes_in_file, rank_from_filename, select_pids
from tracerecon.analysis.syncs import attribute_waits, base_api_name, find_blocking_calls
from tracerecon.errors import BadTraceError
from tracerecon.nsys.sqlite_export import XZ_SUFFIX, ExportInfo, TraceTables, read_all_api_calls, read_export, trace_stem

Progress = Callable[[str], None]

NO_NVTX_HINT = (
    "no NVTX ranges in the trace: was the program instrumented, and traced with `-t nvtx`? "
    "Nsight Systems 2022.4 records no ranges from the `nvtx` Python package 0.2.11 or newer "
    "(pip install 'nvtx==0.2.10', or use a newer nsys)"
)


@dataclass(frozen=True)
class RankResult:
    """Everything tracerecon knows about one rank. Tables follow ``tracerecon.schema``."""

    source: RankSource
    info: ExportInfo
    ranges: pa.Table
    gpu_ops: pa.Table
    syncs: pa.Table
    phases: pa.Table
    cycles: pa.Table

    @property
    def rank(self) -> int:
        return self.source.rank


@dataclass(frozen=True)
class Analysis:
    ranks: tuple[RankResult, ...]
    inputs: tuple[str, ...]
    config: PhaseConfig
    warnings: tuple[str, ...] = field(default=())
    cross: CrossRank | None = None
    # The engine's own naive timers (`run --cpu-timers`): {rank: {phase: median ms}}
    engine_timers: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        """What the export's manifest.json says: inputs, versions, rank mapping."""
        return {
            "tracerecon_version": __version__,
            "inputs": list(self.inputs),
            "phases": list(self.config.phases),
            "cycle_prefix": self.config.cycle_prefix,
            "ranks": [
                {
                    "rank": r.rank,
                    "source": r.source.path,
                    "pids": list(r.source.pids),
                    "rank_from": r.source.how,
                    "nsys_version": r.info.nsys_version,
                    "export_schema_version": r.info.schema_version,
                    "graph_trace_mode": r.info.graph_trace_mode,
                    "session_start_utc_ns": r.info.session_start_utc_ns,
                    "offset_ns": (self.cross.alignment_of(r.rank).offset_ns if self.cross else 0),
                    "offset_uncertainty_ns": (self.cross.alignment_of(r.rank).offset_uncertainty_ns if self.cross else 0),
                    "alignment": (self.cross.alignment_of(r.rank).method if self.cross else "shared clock"),
                }
                for r in self.ranks
            ],
            "warnings": list(self.warnings),
        }


def expand_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given; a directory contributes its ``*.sqlite`` files (else ``*.sqlite.xz``; a
    run directory's ``run.json`` order first), sorted by name."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            run = p / "run.json"
            listed: list[Path] = []
            if run.is_file():
                try:
                    meta = json.loads(run.read_text())
                    listed = [p / Path(x["sqlite"]).name for x in meta.get("reports", []) if x.get("sqlite")]
                except (ValueError, KeyError, TypeError, AttributeError):
                    listed = []
            listed = [f if f.is_file() else f.with_name(f.name + XZ_SUFFIX) for f in listed]
            found = [f for f in listed if f.is_file()] or sorted(p.glob("*.sqlite")) or sorted(p.glob("*.sqlite" + XZ_SUFFIX))
            if not found:
                raise BadTraceError(f"{p}: directory holds no .sqlite exports")
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise BadTraceError("no input traces given")
    return out


def analyze(paths: Sequence[str | Path], config: PhaseConfig | None = None, progress: Progress | None = None) -> Analysis:
    """Read and analyse every trace. Raises BadTraceError when no input is usable."""
    config = config or PhaseConfig()
    say = progress or (lambda _m: None)
    files = expand_inputs(paths)
    warnings: list[str] = []
    work: list[_RankWork] = []
    multi = len(files) > 1
    file_ranks = [rank_from_filename(trace_stem(f)) for f in files]
    by_name = multi and all(r is not None for r in file_ranks) and len(set(file_ranks)) == len(file_ranks)
    if multi and not by_name:
        warnings.append("rank numbers not found in every file name (e.g. rank3, r3, _3); ranks follow file order")
    for i, f in enumerate(files):
        say(f"reading {f.name}")
        tables = read_export(f, progress=lambda m, f=f: say(f"{f.name}: {m}"))
        warnings.extend(tables.warnings)
        if not tables.info.has_cuda:
            warnings.append(f"{f}: no CUDA activity in the trace (traced without `-t cuda`, or a CPU-only run): CPU times only")
        if tables.nvtx_ranges.num_rows == 0:
            warnings.append(f"{f}: {NO_NVTX_HINT}")
        linked = link_launches(tables.gpu_ops, tables.api_calls)
        if linked["launch_tid"].null_count:
            # The filtered read of API calls missed a launcher: read them all and link again.
            tables = replace(tables, api_calls=read_all_api_calls(f))
            linked = link_launches(tables.gpu_ops, tables.api_calls)
            if linked["launch_tid"].null_count:
                warnings.append(f"{f}: {linked['launch_tid'].null_count} GPU op(s) have no launching API call in the trace; they belong to no range")
        if multi:
            rank = file_ranks[i] if by_name else i
            pids = sorted(set(int64s(tables.gpu_ops["pid"]).tolist()) | set(int64s(tables.nvtx_ranges["pid"]).tolist()))
            splits = [(rank, pids)]
            how = "file name" if by_name else "file order"
            work.append(_own_rank(tables, linked, RankSource(rank, str(f), tuple(pids), how), config))
        else:
            splits, how = processes_in_file(tables.gpu_ops, tables.nvtx_ranges, tables.nvtx_marks)
            if not splits:
                raise BadTraceError(f"{f}: empty trace: no GPU work and no NVTX ranges")
            for rank, pids in splits:
                say(f"rank {rank}: analysing")
                work.append(_own_rank(tables, linked, RankSource(rank, str(f), tuple(pids), how), config))
    work.sort(key=lambda w: w.source.rank)
    if len({w.source.rank for w in work}) != len(work):
        raise BadTraceError("two inputs map to the same rank (" + ", ".join(f"{w.source.path}: {w.source.rank}" for w in work) + "); rename the files (rank0, rank1, ...)")
    if all(w.ranges.num_rows == 0 for w in work):
        raise BadTraceError(f"{NO_NVTX_HINT[0].upper()}{NO_NVTX_HINT[1:]}")
    if all(len(w.phase_inputs.phase_rows) == 0 for w in work):
        warnings.append(f"no range named as a phase ({', '.join(config.phases)}); pass --phase NAME for your engine's phase ranges")
    # Cross-rank analysis needs each rank's ops and phases (not their waits, which it computes).
    cross = analyze_cross_rank(
        [RankView(w.source.rank, w.source.path, w.info.session_start_utc_ns, w.gpu_ops, build_phases(w.phase_inputs), w.info.time_normalized) for w in work]
    )
    results = [_finish_rank(w, cross.comm_of(w.source.rank).phase_wait_ns if cross.comm_of(w.source.rank) else None) for w in work]
    return Analysis(
        ranks=tuple(results), inputs=tuple(str(f) for f in files), config=config, warnings=tuple(warnings), cross=cross,
        engine_timers=read_engine_timers(paths),
    )


def read_engine_timers(paths: Sequence[str | Path]) -> dict[int, dict[str, float]]:
    """Medians of the engine's own perf_counter phase timers (``cpu_timers.rank<R>.jsonl`` that
    ``tracerecon run --cpu-timers`` makes engines write into the run directory)."""
    import statistics

    out: dict[int, dict[str, list[float]]] = {}
    for raw in paths:
        p = Path(raw)
        folder = p if p.is_dir() else p.parent
        for f in sorted(folder.glob("cpu_timers.rank*.jsonl")):
            for line in f.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    out.setdefault(int(rec["rank"]), {}).setdefault(str(rec["phase"]), []).append(float(rec["cpu_ms"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return {r: {ph: round(statistics.median(v), 6) for ph, v in d.items()} for r, d in out.items()}


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


@dataclass(frozen=True)
class _RankWork:
    """One rank after ownership and boundaries, before the cross-rank step fills ``wait_ns``."""

    source: RankSource
    info: ExportInfo
    ranges: pa.Table
    gpu_ops: pa.Table
    syncs: pa.Table
    phase_inputs: PhaseInputs
    cycle_rows: np.ndarray


def _own_rank(tables: TraceTables, linked_ops: pa.Table, source: RankSource, config: PhaseConfig) -> _RankWork:
    """Ownership (same thread, then across threads), projection, stream boundaries, waits."""
    pids = list(source.pids)
    rank = source.rank
    ops = select_pids(linked_ops, pids)
    api = select_pids(tables.api_calls, pids)
    sync_records = select_pids(tables.sync_records, pids)
    event_records = select_pids(tables.event_records, pids)
    nested = nest(select_pids(tables.nvtx_ranges, pids))

    launches = index_launches(ops)  # sorted once; every lookup of ops by CPU range below uses it
    phase_rows, cycle_of, cycle_rows = select_phases(nested, config)
    n_ph = len(phase_rows)
    depth = int64s(nested["depth"]) if nested.num_rows else np.zeros(0, np.int64)
    row_to_phase = np.full(nested.num_rows + 1, -1, dtype=np.int64)
    row_to_phase[phase_rows] = np.arange(n_ph)
    phase_mask = np.zeros(nested.num_rows, dtype=bool)
    phase_mask[phase_rows] = True
    all_mask = pc.not_equal(nested["style"], "start_end_cross_thread").to_numpy(zero_copy_only=False) if nested.num_rows else np.zeros(0, bool)

    # Same-thread ownership (nsys's rule), then work of other threads (analysis.attribution).
    op_phase = row_to_phase[innermost_owner(ops, nested, phase_mask, depth, launches)]
    ph = nested.take(pa.array(phase_rows, pa.int64())) if n_ph else nested.slice(0, 0)
    ph_pid, ph_tid = (int64s(ph["pid"]), int64s(ph["tid"])) if n_ph else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    ph_s, ph_e = (int64s(ph["start_ns"]), int64s(ph["end_ns"])) if n_ph else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    own = np.bincount(op_phase[op_phase >= 0], minlength=n_ph)[:n_ph] if n_ph else np.zeros(0, np.int64)
    takes_cross = cross_thread_phases(ph_pid, ph_tid, ph["name"].to_pylist() if n_ph else [], own, config.phase_thread)
    if takes_cross.any() and ops.num_rows:
        same = op_phase
        op_phase = attribute_other_threads(int64s(ops["pid"]), int64s(ops["launch_tid"], -1), int64s(ops["launch_start_ns"], I64_MIN), same, ph_pid, ph_tid, ph_s, ph_e, takes_cross)
        moved = np.flatnonzero((op_phase >= 0) & (same < 0))
        cross_owned = (moved, phase_rows[op_phase[moved]])
        got = np.zeros(n_ph, dtype=bool)
        got[op_phase[moved]] = True
        takes_cross &= got | (own == 0)
        cross_rows = phase_rows[takes_cross & got]
    else:
        cross_owned, cross_rows = None, np.zeros(0, np.int64)
    ranges = build_ranges(nested, ops, rank, launches, cross_owned, cross_rows)
    op_range = innermost_owner(ops, ranges, all_mask, depth, launches)
    if cross_owned is not None:
        op_range[cross_owned[0]] = cross_owned[1]

    # Blocking calls, owned by the same two rules.
    blocking = find_blocking_calls(api, sync_records, ops)
    as_launch = _calls_as_launches(blocking)
    call_phase = row_to_phase[innermost_owner(as_launch, ranges, phase_mask, depth)]
    if len(cross_rows):
        call_phase = attribute_other_threads(int64s(blocking["pid"]), int64s(blocking["tid"]), int64s(blocking["start_ns"]), call_phase, ph_pid, ph_tid, ph_s, ph_e, takes_cross)
    call_range = innermost_owner(as_launch, ranges, all_mask, depth)
    call_range = np.where((call_range < 0) & (call_phase >= 0), phase_rows[np.maximum(call_phase, 0)] if n_ph else -1, call_range)
    waits = attribute_waits(blocking, ops, op_phase, call_phase)
    syncs = _build_syncs(blocking, waits, call_range, call_phase, ranges, phase_rows, rank)

    # Stream-order boundaries (analysis.boundaries).
    clock = stream_clock(ops, api, event_records, sync_records)
    dev, stream = phase_streams(ops, op_phase, n_ph)
    b_start, b_end, dev, stream = phase_boundaries(clock, ph_pid, ph_s, ph_e, cycle_of, dev, stream, busiest_streams(ops))

    blocked = np.zeros(n_ph, dtype=np.int64)
    absorbed = np.zeros(n_ph, dtype=np.int64)
    if syncs.num_rows and n_ph:
        sp = int64s(syncs["phase_id"], -1)
        ok = sp >= 0
        np.add.at(blocked, sp[ok], int64s(syncs["blocked_ns"])[ok])
        np.add.at(absorbed, sp[ok], int64s(syncs["waited_other_phase_ns"])[ok])
    split = phase_comm_split(ops.append_column("phase_id", pa.array(op_phase)), n_ph)
    inputs = PhaseInputs(
        rank=rank, ranges=ranges, phase_rows=phase_rows, cycle=cycle_of,
        boundary_start=b_start, boundary_end=b_end, stream_device=dev, stream_id=stream,
        n_graph_launches=_graph_launch_counts(ops, op_phase, n_ph),
        blocked_ns=blocked, absorbed_ns=absorbed,
        comm_ns=split["comm_ns"], compute_ns=split["compute_ns"], overlap_ns=split["overlap_ns"],
    )
    gpu_ops = _build_gpu_ops(ops, op_range, op_phase, rank)
    return _RankWork(source=source, info=tables.info, ranges=ranges, gpu_ops=gpu_ops, syncs=syncs, phase_inputs=inputs, cycle_rows=cycle_rows)


def _finish_rank(work: _RankWork, wait_ns: np.ndarray | None) -> RankResult:
    phases = build_phases(work.phase_inputs, wait_ns)
    cycles = build_cycles(work.ranges, phases, work.cycle_rows, work.source.rank)
    return RankResult(source=work.source, info=work.info, ranges=work.ranges, gpu_ops=work.gpu_ops, syncs=work.syncs, phases=phases, cycles=cycles)


def _build_syncs(blocking, waits, call_range, call_phase, ranges, phase_rows, rank) -> pa.Table:
    n = blocking.num_rows
    if n == 0:
        return schema.empty(schema.SYNCS)
    names = ranges["name"].to_pylist()
    wf = waits["waited_for_phase_id"]
    wf_name = [names[phase_rows[p]] if p >= 0 else None for p in wf]
    t = {
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "pid": blocking["pid"],
        "tid": blocking["tid"],
        "api": blocking["api"],
        "start_ns": blocking["start_ns"],
        "end_ns": blocking["end_ns"],
        "blocked_ns": pc.subtract(blocking["end_ns"], blocking["start_ns"]),
        "device_id": blocking["sync_device_id"],
        "stream_id": blocking["sync_stream_id"],
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
    is_graph = equals(ops["kind"], "graph") | string_mask(ops["launch_api"], lambda a: base_api_name(a) in ("cudaGraphLaunch", "cuGraphLaunch"))
    sel = np.flatnonzero(is_graph & (op_phase >= 0))
    if len(sel):
        corr = int64s(ops["correlation_id"], -1)[sel]
        # One launch call = one (phase, correlation id); node-mode kernels of a launch share it.
        _, dense = np.unique(corr, return_inverse=True)
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
