"""The parquet and JSON contracts, read back the way users read them: pandas, polars, DuckDB."""

from __future__ import annotations

import json
import sqlite3

import duckdb
import pandas as pd
import polars as pl
import pytest

from conftest import DEMO2, H200, run_cli

RANGE_COLS = {"rank", "pid", "tid", "domain", "name", "start_ns", "end_ns", "depth", "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns", "n_gpu_ops"}
PHASE_COLS = {"rank", "cycle", "phase", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns", "verdict"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("exp") / "out"
    res = run_cli("export", str(H200 / "eagle_launch_2proc.sqlite"), "-o", str(out))
    assert res.returncode == 0, res.stderr
    return out


def test_layout_and_manifest(exported):
    for table in ("ranges", "phases", "gpu_ops", "syncs", "cycles"):
        for rank in (0, 1):
            assert list((exported / table / f"rank={rank}").glob("*.parquet")), (table, rank)
    m = json.loads((exported / "manifest.json").read_text())
    assert m["inputs"][0].endswith("eagle_launch_2proc.sqlite")
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert all(r["nsys_version"].startswith("2025.3") and r["export_schema_version"] == "3.20.3" for r in m["ranks"])
    assert m["tracerecon_version"]


def test_pandas_reads_ranks_and_columns(exported):
    ranges = pd.read_parquet(exported / "ranges")
    phases = pd.read_parquet(exported / "phases")
    assert RANGE_COLS <= set(ranges.columns) and PHASE_COLS <= set(phases.columns)
    assert sorted(ranges["rank"].astype(int).unique()) == [0, 1]
    assert str(ranges["start_ns"].dtype) == "int64"


def test_polars_and_duckdb_agree(exported):
    pl_phases = pl.read_parquet(str(exported / "phases" / "**" / "*.parquet"), hive_partitioning=True)
    db = duckdb.sql(f"select rank, count(*) n from read_parquet('{exported}/phases/*/*.parquet', hive_partitioning=true) group by rank order by rank").fetchall()
    assert db == [(0, 48), (1, 48)]
    assert pl_phases.height == 96 and set(pl_phases["rank"].to_list()) == {0, 1}


def test_names_read_as_plain_text_in_polars_pandas_and_duckdb(tmp_path):
    # GIVEN the export of a two-rank NCCL run (its GPU ops' names are dictionaries in memory)
    out = tmp_path / "out"
    assert run_cli("export", str(DEMO2 / "nccl_skew"), "-o", str(out)).returncode == 0
    ops = pl.read_parquet(str(out / "gpu_ops" / "**" / "*.parquet"), hive_partitioning=True)
    coll = pl.read_parquet(str(out / "collectives" / "**" / "*.parquet"), hive_partitioning=True)
    # WHEN read THEN every text column is plain text: polars' .str works on kernel names, and they
    # join with the collectives' names (a Categorical refused both)
    assert all(ops.schema[c] == pl.String for c in ("kind", "name", "launch_api", "demangled_name"))
    all_reduce = ops.filter(pl.col("name").str.contains("AllReduce"))
    assert all_reduce.height == coll.height > 0
    assert ops.join(coll.select("rank", "name").unique(), on=["rank", "name"]).height == coll.height
    assert str(pd.read_parquet(out / "gpu_ops")["name"].dtype) != "category"
    assert duckdb.sql(f"select typeof(name) from read_parquet('{out}/gpu_ops/*/*.parquet') limit 1").fetchall() == [("VARCHAR",)]
    # and tracerecon reads its export back as the same report
    assert json.loads(run_cli("report", "--json", str(out)).stdout)["ranks"] == json.loads(run_cli("report", "--json", str(DEMO2 / "nccl_skew")).stdout)["ranks"]


def test_timestamps_are_the_traces_own(exported):
    # GIVEN the raw NVTX rows of the export; THEN the parquet start/end are the very same ns values
    con = sqlite3.connect(f"file:{H200 / 'eagle_launch_2proc.sqlite'}?mode=ro", uri=True)
    raw = sorted(con.execute("select start, end from NVTX_EVENTS where eventType = 59").fetchall())
    got = pd.read_parquet(exported / "ranges")
    assert sorted(zip(got["start_ns"].tolist(), got["end_ns"].tolist())) == raw
    ops = pd.read_parquet(exported / "gpu_ops")
    kernels = sorted(r[0] for r in con.execute("select start from CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted(ops[ops["kind"] == "kernel"]["start_ns"].tolist()) == kernels


def test_report_json_contract():
    res = run_cli("report", str(DEMO2 / "nccl_gpu_bound"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    for r in doc["ranks"]:
        names = [p["phase"] for p in r["phases"]]
        assert names == ["draft", "verify", "draft_re_extend"]
        for p in r["phases"]:
            assert {"phase", "n", "cpu_ms_median", "gpu_span_ms_median", "gpu_busy_ms_median", "verdicts", "causes"} <= set(p)
            assert p["n"] + r["cycles"]["n_warmup"] == 30 and sum(p["verdicts"].values()) == p["n"] == sum(p["causes"].values())
        assert {"n", "cpu_ms_median", "gpu_ms_median", "n_warmup"} <= set(r["cycles"]) and r["cycles"]["n"] + r["cycles"]["n_warmup"] == 30


def test_report_table_names_the_misleading_phase():
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 0
    assert "most misleading: draft_re_extend" in res.stdout
    for col in ("CPU ms", "GPU ms", "span", "busy", "verdict", "cause", "cycles: 23", "warm-up cycle(s) left"):
        assert col in res.stdout


def test_an_export_directory_reads_back_as_the_same_report(tmp_path):
    out = tmp_path / "exp"
    src = DEMO2 / "nccl_skew"
    assert run_cli("export", str(src), "-o", str(out)).returncode == 0
    a = json.loads(run_cli("report", str(src), "--json").stdout)
    b = json.loads(run_cli("report", str(out), "--json").stdout)
    assert [r["phases"] for r in a["ranks"]] == [r["phases"] for r in b["ranks"]]
    assert [r["cycles"] for r in a["ranks"]] == [r["cycles"] for r in b["ranks"]]
    assert [(r["offset_ns"], r["nccl"]) for r in a["ranks"]] == [(r["offset_ns"], r["nccl"]) for r in b["ranks"]]
    assert a["critical_path"] == b["critical_path"]


def test_cycles_left_out_by_skip_cycles_are_said_as_such():
    # GIVEN a 30-cycle run WHEN reported with --skip-cycles 3, and without
    given = " ".join(run_cli("report", str(DEMO2.parent / "demo_h200" / "gpu_bound"), "--skip-cycles", "3").stdout.split())
    auto = " ".join(run_cli("report", str(H200 / "eagle_gpu_bound.sqlite")).stdout.split())
    # THEN the first says the 3 leading cycles were left out by the option, not as warm-up
    assert "cycles: 27 " in given and "3 leading cycle(s) left out (--skip-cycles 3)" in given and "warm-up" not in given
    assert "1 warm-up cycle(s) left out (--skip-cycles 0 keeps them)" in auto


def test_the_readme_lists_each_tables_columns_as_the_files_hold_them(tmp_path):
    # GIVEN the README's parquet table (one row per table: its columns, notes in parentheses)
    import re

    import pyarrow.parquet as pq

    from conftest import ROOT

    text = (ROOT / "README.md").read_text()
    section = text[text.index("| table | one row per | columns |"):]
    listed = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        table, _, columns = (cell.strip() for cell in line.strip("|").split(" | ", 2))
        while re.search(r"\([^()]*\)", columns):  # notes, nested ones too
            columns = re.sub(r" ?\([^()]*\)", "", columns)
        listed[table.split("`")[1]] = [c.strip() for c in columns.split(",")]
    # WHEN a two-rank NCCL run is exported (every table has rows)
    out = tmp_path / "exp"
    assert run_cli("export", str(DEMO2 / "nccl_gpu_bound"), "-o", str(out)).returncode == 0
    # THEN each table's files hold the listed columns in that order, `rank` (listed first) from
    #      the folder name, the critical path (no rank partition) without it
    assert set(listed) == {"ranges", "phases", "cycles", "gpu_ops", "collectives", "syncs", "critical_path"}
    for table, columns in listed.items():
        (part, *_) = sorted((out / table).rglob("part-0.parquet"))
        held = pq.read_schema(part).names
        assert columns == (held if table == "critical_path" else ["rank", *held]), table
