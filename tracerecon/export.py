"""Writers: per-rank parquet datasets (hive-partitioned) and the manifest."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerecon import __version__, schema
from tracerecon.analysis.cross_rank import CrossRank, RankAlignment, RankComm
from tracerecon.schema import COLLECTIVES, CRITICAL_PATH
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.ranks import RankSource
from tracerecon.errors import BadTraceError, TraceReconError
from tracerecon.model import Analysis, RankResult
from tracerecon.nsys.sqlite_export import ExportInfo
from tracerecon.run_dir import MANIFEST_JSON, is_export_dir

TABLES = ("ranges", "phases", "cycles", "gpu_ops", "syncs", "collectives")


def manifest(analysis: Analysis) -> dict:
    """What ``manifest.json`` says: inputs, versions, the phase definition, and per rank its
    mapping, alignment, communication totals and engine timers: everything ``report`` shows
    that the tables do not hold, so that an export reads back as the same report."""
    cross = analysis.cross
    ranks = []
    for r in analysis.ranks:
        al = cross.alignment_of(r.rank) if cross else None
        cm = cross.comm_of(r.rank) if cross else None
        ranks.append({
            "rank": r.rank,
            "source": r.source.path,
            "pids": list(r.source.pids),
            "rank_from": r.source.how,
            "nsys_version": r.info.nsys_version,
            "export_schema_version": r.info.schema_version,
            "graph_trace_mode": r.info.graph_trace_mode,
            "session_start_utc_ns": r.info.session_start_utc_ns,
            "time_normalized": r.info.time_normalized,
            "offset_ns": al.offset_ns if al else 0,
            "offset_uncertainty_ns": al.offset_uncertainty_ns if al else 0,
            "alignment": al.method if al else "shared clock",
            "nccl": {"comm_ns": cm.comm_ns if cm else 0, "wait_ns": cm.wait_ns if cm else 0, "n_collectives": cm.n_collectives if cm else 0},
            "engine_timers_ms": analysis.engine_timers.get(r.rank, {}),
        })
    return {
        "tracerecon_version": __version__,
        "inputs": list(analysis.inputs),
        "phases": list(analysis.config.phases),
        "cycle_prefix": analysis.config.cycle_prefix,
        "phase_thread": analysis.config.phase_thread,
        "skip_cycles": analysis.config.skip_cycles,
        "ranks": ranks,
        "warnings": list(analysis.warnings),
    }


def export_parquet(analysis: Analysis, out_dir: str | os.PathLike, force: bool = False) -> dict:
    """Write ``DIR/<table>/rank=<R>/part-0.parquet`` for every table and rank, and ``DIR/manifest.json``.

    The ``rank`` column lives in the directory name (hive partitioning), so pandas, polars,
    DuckDB and pyarrow datasets all read it back as a column. Timestamps are the trace's own
    int64 ns. Returns the manifest written.

    DIR is replaced whole, never mixed: everything is written into a temporary sibling that is
    then renamed to DIR (a previous export there is moved aside and removed; of two concurrent
    exports the last rename wins, whole). A DIR that holds anything but a tracerecon export is
    refused unless ``force``. A failed export leaves DIR as it was.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TraceReconError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not is_export_dir(out) and not force:
        raise TraceReconError(f"{out}: not empty and not a tracerecon export; choose another -o, or --force to replace it")
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        doc = _write_export(analysis, tmp)
        _swap_in(tmp, out)
        tmp = None
    except OSError as exc:
        raise TraceReconError(f"{out}: cannot write export ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return doc


def _swap_in(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``, moving whatever is at ``out`` aside first (atomic per rename)."""
    for _ in range(20):
        try:
            os.rename(tmp, out)
            return
        except OSError:
            if not out.exists():
                raise
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        try:
            os.rename(out, aside / "x")
        except FileNotFoundError:
            pass  # another writer moved it first
        shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"could not replace {out}: other writers kept replacing it")


def _write_export(analysis: Analysis, out: Path) -> dict:
    counts: dict[str, dict[str, int]] = {t: {} for t in TABLES}
    for r in analysis.ranks:
        for name in TABLES:
            if name == "collectives":
                table = analysis.cross.collectives.filter(pc.equal(analysis.cross.collectives["rank"], r.rank))
            else:
                table = getattr(r, name)
            if "rank" in table.column_names:
                table = table.drop_columns(["rank"])
            d = out / name / f"rank={r.rank}"
            d.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, d / "part-0.parquet", compression="zstd")
            counts[name][str(r.rank)] = table.num_rows
    (out / "critical_path").mkdir(exist_ok=True)
    pq.write_table(analysis.cross.critical_path, out / "critical_path" / "part-0.parquet", compression="zstd")
    doc = manifest(analysis)
    doc["tables"] = {name: {"path": name, "rows_per_rank": counts[name]} for name in TABLES}
    doc["tables"]["critical_path"] = {"path": "critical_path", "rows": analysis.cross.critical_path.num_rows}
    (out / MANIFEST_JSON).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


SCHEMAS = {"ranges": schema.RANGES, "phases": schema.PHASES, "cycles": schema.CYCLES, "gpu_ops": schema.GPU_OPS, "syncs": schema.SYNCS, "collectives": COLLECTIVES}


def read_parquet_export(path: str | os.PathLike) -> Analysis:
    """Load a directory written by ``export_parquet`` back into an Analysis (no trace needed)."""
    root = Path(path)
    try:
        manifest = json.loads((root / MANIFEST_JSON).read_text())
        ranks = []
        engine = {}
        comm = []
        alignment = []
        coll_parts = []
        for r in manifest["ranks"]:
            rank = int(r["rank"])
            tables = {}
            for name, sch in SCHEMAS.items():
                f = root / name / f"rank={rank}" / "part-0.parquet"
                if not f.exists():
                    tables[name] = sch.empty_table()
                    continue
                t = pq.read_table(f)
                if "rank" in sch.names:
                    t = t.append_column("rank", pa.array([rank] * t.num_rows, pa.int32()))
                tables[name] = t.select(sch.names).cast(sch)
            info = ExportInfo(
                path=r["source"], nsys_version=r.get("nsys_version"), schema_version=r.get("export_schema_version"), metadata_table=None,
                tables=frozenset(), graph_trace_mode=r.get("graph_trace_mode"), session_start_utc_ns=r.get("session_start_utc_ns"),
                time_normalized=bool(r.get("time_normalized", False)),
            )
            src = RankSource(rank, r["source"], tuple(r.get("pids", ())), r.get("rank_from", "export"))
            ranks.append(RankResult(src, info, tables["ranges"], tables["gpu_ops"], tables["syncs"], tables["phases"], tables["cycles"]))
            alignment.append(RankAlignment(rank, int(r.get("offset_ns", 0)), r.get("offset_uncertainty_ns"), r.get("alignment", "export")))
            coll = tables["collectives"]
            coll_parts.append(coll)
            ph = tables["phases"]
            nccl = r["nccl"]  # the totals over every communication kernel, as analysed
            comm.append(RankComm(
                rank, int(nccl["comm_ns"]), int(nccl["wait_ns"]), int(nccl["n_collectives"]),
                ph["wait_ns"].to_numpy(zero_copy_only=False) if ph.num_rows else None,
            ))
            if r.get("engine_timers_ms"):
                engine[rank] = {str(k): float(v) for k, v in r["engine_timers_ms"].items()}
        cp_file = root / "critical_path" / "part-0.parquet"
        critical = pq.read_table(cp_file).cast(CRITICAL_PATH) if cp_file.exists() else CRITICAL_PATH.empty_table()
        collectives = pa.concat_tables(coll_parts) if coll_parts else COLLECTIVES.empty_table()
        cross = CrossRank(tuple(alignment), tuple(comm), collectives, critical)
        config = PhaseConfig(tuple(manifest.get("phases", ())) or PhaseConfig().phases, manifest.get("cycle_prefix", "cycle"), manifest.get("phase_thread", "auto"), manifest.get("skip_cycles"))
        return Analysis(tuple(ranks), tuple(manifest.get("inputs", [])), config, tuple(manifest.get("warnings", [])), cross, engine)
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowException) as exc:
        raise BadTraceError(f"{root}: not a readable tracerecon export ({exc})") from None


# --- timeline for Perfetto / chrome://tracing ----------------------------------------------------

# Thread ids of the synthetic tracks inside each rank's process (real CPU threads keep theirs).
GPU_PHASES_TID = 1_000_000_000
STREAM_TID_BASE = 1_000_000_100


def export_chrome_json(analysis: Analysis, out_file: str | os.PathLike) -> dict:
    """Write the run as Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing),
    on the aligned cross-rank timeline (each rank's ``offset_ns`` applied; microseconds from the
    earliest event). Per rank one process with: each CPU thread's cycles and phases (args: CPU
    ms, GPU ms, verdict, cause) and blocking waits; a ``GPU phases`` track (each phase between
    its boundaries, cycles around them, the critical path's gating phase marked per cycle); one
    track per GPU stream with every kernel, copy, memset and graph launch. Flow arrows go from
    each wait to the GPU phase it waited for, and along each collective from rank to rank.

    Written as a stream (one event per line), so memory stays flat for large traces; replaced
    atomically. Returns counts per event kind (what the tests read back).
    """
    out = Path(out_file)
    offsets = {r.rank: (analysis.cross.alignment_of(r.rank).offset_ns if analysis.cross and analysis.cross.alignment_of(r.rank) else 0) for r in analysis.ranks}
    t0 = min((int(pc.min(r.phases["cpu_start_ns"]).as_py()) + offsets[r.rank] for r in analysis.ranks if r.phases.num_rows), default=0)
    for r in analysis.ranks:
        if r.gpu_ops.num_rows:
            t0 = min(t0, int(pc.min(r.gpu_ops["start_ns"]).as_py()) + offsets[r.rank])
    counts = {"phase": 0, "cycle": 0, "gpu_phase": 0, "gpu_cycle": 0, "gpu_op": 0, "wait": 0, "flow": 0, "gate": 0}

    def us(ns: int, rank: int) -> float:
        return round((ns + offsets[rank] - t0) / 1000.0, 3)

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as fh:
            first = True

            def emit(ev: dict) -> None:
                nonlocal first
                fh.write(("[\n" if first else ",\n") + json.dumps(ev, separators=(",", ":")))
                first = False

            flow_id = 0
            gated = {}
            if analysis.cross is not None:
                for row in analysis.cross.critical_path.to_pylist():
                    gated[(row["gating_rank"], row["cycle"])] = row["gating_phase"]
            for r in analysis.ranks:
                rank = r.rank
                emit({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank} ({Path(r.source.path).name})"}})
                emit({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
                emit({"ph": "M", "name": "thread_name", "pid": rank, "tid": GPU_PHASES_TID, "args": {"name": "GPU phases (CUDA-event time)"}})
                ph = r.phases.to_pylist()
                phase_names = [p["phase"] for p in ph]
                for c in r.cycles.to_pylist():
                    tid = next((p["tid"] for p in ph if p["cycle"] == c["cycle"]), 0)
                    emit({"ph": "X", "name": c["name"], "cat": "cycle", "pid": rank, "tid": tid, "ts": us(c["cpu_start_ns"], rank),
                          "dur": round(c["cpu_ns"] / 1000.0, 3), "args": {"cpu_ms": c["cpu_ns"] / 1e6, "gpu_ms": (c["gpu_ns"] or 0) / 1e6}})
                    counts["cycle"] += 1
                    if c["gpu_boundary_start_ns"] is not None:
                        emit({"ph": "X", "name": c["name"], "cat": "gpu_cycle", "pid": rank, "tid": GPU_PHASES_TID, "ts": us(c["gpu_boundary_start_ns"], rank),
                              "dur": round(c["gpu_ns"] / 1000.0, 3), "args": {"gpu_ms": c["gpu_ns"] / 1e6}})
                        counts["gpu_cycle"] += 1
                for p in ph:
                    args = {"cpu_ms": p["cpu_ns"] / 1e6, "gpu_ms": None if p["gpu_ns"] is None else p["gpu_ns"] / 1e6,
                            "verdict": p["verdict"], "cause": p["cause"], "cycle": p["cycle"], "attribution": p["attribution"]}
                    emit({"ph": "X", "name": p["phase"], "cat": "phase", "pid": rank, "tid": p["tid"], "ts": us(p["cpu_start_ns"], rank),
                          "dur": round(p["cpu_ns"] / 1000.0, 3), "args": args})
                    counts["phase"] += 1
                    if p["gpu_boundary_start_ns"] is not None:
                        gargs = {"gpu_ms": p["gpu_ns"] / 1e6, "span_ms": None if p["gpu_span_ns"] is None else p["gpu_span_ns"] / 1e6,
                                 "busy_ms": p["gpu_busy_ns"] / 1e6, "verdict": p["verdict"], "cause": p["cause"], "stream": p["stream_id"]}
                        emit({"ph": "X", "name": p["phase"], "cat": "gpu_phase", "pid": rank, "tid": GPU_PHASES_TID,
                              "ts": us(p["gpu_boundary_start_ns"], rank), "dur": round(p["gpu_ns"] / 1000.0, 3), "args": gargs})
                        counts["gpu_phase"] += 1
                        if gated.get((rank, p["cycle"])) == p["phase"]:
                            emit({"ph": "i", "s": "t", "name": f"gated cycle {p['cycle']}", "cat": "critical_path", "pid": rank, "tid": GPU_PHASES_TID,
                                  "ts": us(p["gpu_boundary_start_ns"], rank)})
                            counts["gate"] += 1
                            gated.pop((rank, p["cycle"]))
                for s in r.syncs.to_pylist():
                    emit({"ph": "X", "name": f"wait: {s['api']}", "cat": "wait", "pid": rank, "tid": s["tid"], "ts": us(s["start_ns"], rank),
                          "dur": round(s["blocked_ns"] / 1000.0, 3),
                          "args": {"blocked_ms": s["blocked_ns"] / 1e6, "waited_for": s["waited_for_phase"], "waited_gpu_ms": s["waited_gpu_ns"] / 1e6}})
                    counts["wait"] += 1
                    wf = s["waited_for_phase_id"]
                    if wf is not None and ph[wf]["gpu_boundary_start_ns"] is not None:
                        flow_id += 1
                        emit({"ph": "s", "id": flow_id, "name": "waited for", "cat": "wait", "pid": rank, "tid": s["tid"], "ts": us(s["start_ns"], rank)})
                        emit({"ph": "f", "bp": "e", "id": flow_id, "name": "waited for", "cat": "wait", "pid": rank, "tid": GPU_PHASES_TID,
                              "ts": us(ph[wf]["gpu_boundary_start_ns"], rank)})
                        counts["flow"] += 1
                counts["gpu_op"] += _emit_gpu_ops(emit, r, rank, us, phase_names)
            if analysis.cross is not None and len(analysis.ranks) > 1:
                by_coll: dict[int, list[dict]] = {}
                for row in analysis.cross.collectives.to_pylist():
                    by_coll.setdefault(row["collective"], []).append(row)
                stream_of = {}
                for r in analysis.ranks:
                    if r.gpu_ops.num_rows:
                        d = r.gpu_ops.select(["start_ns", "stream_id"]).to_pydict()
                        stream_of[r.rank] = dict(zip(d["start_ns"], d["stream_id"]))
                for rows in by_coll.values():
                    rows.sort(key=lambda x: x["rank"])
                    for a, b in zip(rows, rows[1:]):
                        flow_id += 1
                        emit({"ph": "s", "id": flow_id, "name": _collective_name(a), "cat": "collective", "pid": a["rank"],
                              "tid": STREAM_TID_BASE + stream_of.get(a["rank"], {}).get(a["start_ns"], 0), "ts": us(a["start_ns"], a["rank"])})
                        emit({"ph": "f", "bp": "e", "id": flow_id, "name": _collective_name(a), "cat": "collective", "pid": b["rank"],
                              "tid": STREAM_TID_BASE + stream_of.get(b["rank"], {}).get(b["start_ns"], 0), "ts": us(b["start_ns"], b["rank"])})
                        counts["flow"] += 1
            fh.write("[\n]\n" if first else "\n]\n")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TraceReconError(f"{out}: cannot write ({exc.strerror or exc})") from None
    return counts


def _collective_name(row: dict) -> str:
    return f"collective {row['collective']}"


def _emit_gpu_ops(emit, r: RankResult, rank: int, us, phase_names: list[str]) -> int:
    """One slice per GPU op on its stream's track, in batches (flat memory)."""
    ops = r.gpu_ops
    if ops.num_rows == 0:
        return 0
    streams = sorted(set(ops["stream_id"].to_pylist()) - {None})
    for s in streams:
        dev = ops.filter(pc.equal(ops["stream_id"], s))["device_id"][0].as_py()
        emit({"ph": "M", "name": "thread_name", "pid": rank, "tid": STREAM_TID_BASE + s, "args": {"name": f"GPU {dev} stream {s}"}})
        emit({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": STREAM_TID_BASE + s, "args": {"sort_index": 100 + s}})
    n = 0
    for batch in ops.select(["kind", "name", "start_ns", "end_ns", "stream_id", "phase_id", "correlation_id"]).to_batches(50_000):
        d = batch.to_pydict()
        for kind, name, s, e, st, pid, corr in zip(d["kind"], d["name"], d["start_ns"], d["end_ns"], d["stream_id"], d["phase_id"], d["correlation_id"]):
            args = {"kind": kind, "correlation": corr}
            if pid is not None:
                args["phase"] = phase_names[pid]
            emit({"ph": "X", "name": name or kind, "cat": kind, "pid": rank, "tid": STREAM_TID_BASE + (st or 0), "ts": us(s, rank),
                  "dur": round((e - s) / 1000.0, 3), "args": args})
            n += 1
    return n
