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
from tracerecon.analysis.phases import PhaseConfig, build_cycles, build_phases, select_phases
from tracerecon.analysis.projection import equals, index_launches, innermost_owner, int64s, link_launches, string_mask
from tracerecon.analysis.ranges import build_ranges
from tracerecon.analysis.ranks import RankSource, processes_in_file, rank_from_filename, select_pids
from tracerecon.analysis.syncs import attribute_waits, base_api_name, find_blocking_calls
from tracerecon.errors import BadTraceError
from tracerecon.nsys.sqlite_export import ExportInfo, TraceTables, read_all_api_calls, read_export

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
    """Files as given; a directory contributes its ``*.sqlite`` files (a run directory's
    ``run.json`` order first), sorted by name."""
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
            found = [f for f in listed if f.is_file()] or sorted(p.glob("*.sqlite"))
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
    results: list[RankResult] = []
    multi = len(files) > 1
    file_ranks = [rank_from_filename(f.stem) for f in files]
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
            results.append(_analyze_rank(tables, linked, RankSource(rank, str(f), tuple(pids), how), config))
        else:
            splits, how = processes_in_file(tables.gpu_ops, tables.nvtx_ranges, tables.nvtx_marks)
            if not splits:
                raise BadTraceError(f"{f}: empty trace: no GPU work and no NVTX ranges")
            for rank, pids in splits:
                say(f"rank {rank}: analysing")
                results.append(_analyze_rank(tables, linked, RankSource(rank, str(f), tuple(pids), how), config))
    results.sort(key=lambda r: r.rank)
    if len({r.rank for r in results}) != len(results):
        raise BadTraceError("two inputs map to the same rank (" + ", ".join(f"{r.source.path}: {r.rank}" for r in results) + "); rename the files (rank0, rank1, ...)")
    if all(r.ranges.num_rows == 0 for r in results):
        raise BadTraceError(f"{NO_NVTX_HINT[0].upper()}{NO_NVTX_HINT[1:]}")
    if all(r.phases.num_rows == 0 for r in results):
        warnings.append(f"no range named as a phase ({', '.join(config.phases)}); pass --phase NAME for your engine's phase ranges")
    cross = analyze_cross_rank(
        [RankView(r.rank, r.source.path, r.info.session_start_utc_ns, r.gpu_ops, r.phases, r.info.time_normalized) for r in results]
    )
    results = [_with_waits(r, cross) for r in results]
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


def _with_waits(r: RankResult, cross: CrossRank) -> RankResult:
    c = cross.comm_of(r.rank)
    if c is None or r.phases.num_rows == 0:
        return r
    idx = r.phases.schema.get_field_index("wait_ns")
    return replace(r, phases=r.phases.set_column(idx, "wait_ns", pa.array(c.phase_wait_ns)))


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


def _analyze_rank(tables: TraceTables, linked_ops: pa.Table, source: RankSource, config: PhaseConfig) -> RankResult:
    pids = list(source.pids)
    rank = source.rank
    raw_ranges = select_pids(tables.nvtx_ranges, pids)
    ops = select_pids(linked_ops, pids)
    api = select_pids(tables.api_calls, pids)
    sync_records = select_pids(tables.sync_records, pids)

    launches = index_launches(ops)  # sorted once; every lookup of ops by CPU range below uses it
    ranges = build_ranges(raw_ranges, ops, rank, launches)
    phase_rows, cycle_of, cycle_rows = select_phases(ranges, config)
    depth = int64s(ranges["depth"]) if ranges.num_rows else np.zeros(0, np.int64)
    row_to_phase = np.full(ranges.num_rows + 1, -1, dtype=np.int64)
    row_to_phase[phase_rows] = np.arange(len(phase_rows))
    phase_mask = np.zeros(ranges.num_rows, dtype=bool)
    phase_mask[phase_rows] = True
    all_mask = pc.not_equal(ranges["style"], "start_end_cross_thread").to_numpy(zero_copy_only=False) if ranges.num_rows else np.zeros(0, bool)

    op_phase = row_to_phase[innermost_owner(ops, ranges, phase_mask, depth, launches)]
    op_range = innermost_owner(ops, ranges, all_mask, depth, launches)

    blocking = find_blocking_calls(api, sync_records, ops)
    as_launch = _calls_as_launches(blocking)
    call_phase = row_to_phase[innermost_owner(as_launch, ranges, phase_mask, depth)]
    call_range = innermost_owner(as_launch, ranges, all_mask, depth)
    waits = attribute_waits(blocking, ops, op_phase, call_phase)
    syncs = _build_syncs(blocking, waits, call_range, call_phase, ranges, phase_rows, rank)

    phases = build_phases(ranges, syncs, phase_rows, cycle_of, rank)
    if phases.num_rows and ops.num_rows:
        phases = _with_graph_launch_counts(phases, ops, op_phase)
        split = phase_comm_split(ops.append_column("phase_id", pa.array(op_phase)), phases.num_rows)
        for col, values in split.items():
            phases = phases.set_column(phases.schema.get_field_index(col), col, pa.array(values))
    cycles = build_cycles(ranges, phases, cycle_rows, rank)
    gpu_ops = _build_gpu_ops(ops, op_range, op_phase, rank)
    return RankResult(source=source, info=tables.info, ranges=ranges, gpu_ops=gpu_ops, syncs=syncs, phases=phases, cycles=cycles)


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


def _with_graph_launch_counts(phases: pa.Table, ops: pa.Table, op_phase: np.ndarray) -> pa.Table:
    """Count CUDA-graph launches per phase: graph-trace rows, or distinct node-mode launch calls."""
    is_graph = equals(ops["kind"], "graph") | string_mask(ops["launch_api"], lambda a: base_api_name(a) in ("cudaGraphLaunch", "cuGraphLaunch"))
    sel = np.flatnonzero(is_graph & (op_phase >= 0))
    counts = np.zeros(phases.num_rows, dtype=np.int64)
    if len(sel):
        corr = int64s(ops["correlation_id"], -1)[sel]
        # One launch call = one (phase, correlation id); node-mode kernels of a launch share it.
        _, dense = np.unique(corr, return_inverse=True)
        packed = np.unique(op_phase[sel] * (dense.max() + 1) + dense.ravel())
        counts = np.bincount(packed // (dense.max() + 1), minlength=phases.num_rows).astype(np.int64)
    idx = phases.schema.get_field_index("n_graph_launches")
    return phases.set_column(idx, "n_graph_launches", pa.array(counts))


def _build_gpu_ops(ops: pa.Table, op_range: np.ndarray, op_phase: np.ndarray, rank: int) -> pa.Table:
    n = ops.num_rows
    if n == 0:
        return schema.empty(schema.GPU_OPS)
    t = ops.append_column("rank", pa.array(np.full(n, rank, dtype=np.int32)))
    t = t.append_column("range_id", pa.array(op_range, mask=op_range < 0))
    t = t.append_column("phase_id", pa.array(op_phase, mask=op_phase < 0))
    return t.select(schema.GPU_OPS.names).cast(schema.GPU_OPS)
