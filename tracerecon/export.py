"""Writers: per-rank parquet datasets (hive-partitioned) and the manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracerecon.errors import TraceReconError
from tracerecon.pipeline import Analysis

TABLES = ("ranges", "phases", "cycles", "gpu_ops", "syncs")


def export_parquet(analysis: Analysis, out_dir: str | os.PathLike) -> dict:
    """Write ``DIR/<table>/rank=<R>/part-0.parquet`` for every table and rank, and ``DIR/manifest.json``.

    The ``rank`` column lives in the directory name (hive partitioning), so pandas, polars,
    DuckDB and pyarrow datasets all read it back as a column. Timestamps are the trace's own
    int64 ns. Returns the manifest written. Existing files of the same names are replaced.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        counts: dict[str, dict[str, int]] = {t: {} for t in TABLES}
        for r in analysis.ranks:
            for name in TABLES:
                table: pa.Table = getattr(r, name)
                if "rank" in table.column_names:
                    table = table.drop_columns(["rank"])
                d = out / name / f"rank={r.rank}"
                d.mkdir(parents=True, exist_ok=True)
                pq.write_table(table, d / "part-0.parquet", compression="zstd")
                counts[name][str(r.rank)] = table.num_rows
        manifest = analysis.manifest()
        manifest["tables"] = {name: {"path": name, "rows_per_rank": counts[name]} for name in TABLES}
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    except OSError as exc:
        raise TraceReconError(f"{out}: cannot write export ({exc.strerror or exc})") from None
    return manifest
