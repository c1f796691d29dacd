"""Every public export (nsys 2023.2 .. 2026.2, one to six processes, NCCL, two hosts) reads cleanly."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import PUBLIC, need_public
from tracerecon.errors import BadTraceError
from tracerecon.nsys.sqlite_export import read_export
from tracerecon.api import load as analyze

FILES = sorted(PUBLIC.glob("*/*.sqlite")) if PUBLIC.is_dir() else []


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reads_every_public_export(path):
    need_public()
    t = read_export(path)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}

    def count(table):
        return con.execute(f"select count(*) from {table}").fetchone()[0] if table in tables else 0

    # every kernel, memcpy, memset row is read (nothing silently dropped)
    kinds = t.gpu_ops["kind"].to_pylist()
    assert kinds.count("kernel") == count("CUPTI_ACTIVITY_KIND_KERNEL")
    assert kinds.count("memcpy") == count("CUPTI_ACTIVITY_KIND_MEMCPY")
    assert kinds.count("memset") == count("CUPTI_ACTIVITY_KIND_MEMSET")
    assert t.info.nsys_version and t.info.metadata_table in ("META_DATA_EXPORT", "EXPORT_META_DATA")
    # ranges: push/pop + start/end rows
    want = con.execute("select count(*) from NVTX_EVENTS where eventType in (59,60,70,71)").fetchone()[0] if "NVTX_EVENTS" in tables else 0
    assert t.nvtx_ranges.num_rows == want


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analysis_runs_or_refuses_cleanly(path):
    need_public()
    try:
        a = analyze([path])
    except BadTraceError as exc:
        assert "NVTX" in str(exc) or "empty" in str(exc)
        return
    for r in a.ranks:
        ranges = r.ranges.to_pylist()
        # every projected range ends after it starts, and owns as many ops as point at it
        assert all(x["gpu_start_ns"] is None or x["gpu_start_ns"] <= x["gpu_end_ns"] for x in ranges)
        # every op a range owns was launched inside that range, on its thread (nsys's rule)
        for op in r.gpu_ops.to_pylist():
            if op["range_id"] is not None and ranges[op["range_id"]]["attribution"] == "same_thread":
                owner = ranges[op["range_id"]]
                assert owner["start_ns"] <= op["launch_start_ns"] and op["launch_end_ns"] <= owner["end_ns"] and op["launch_tid"] == owner["tid"]
        # and phases tile their cycles
        assert all(c["phases_gpu_ns"] == c["gpu_ns"] for c in r.cycles.to_pylist() if c["gpu_ns"] is not None)


def test_legacy_export_metadata_table_is_detected():
    need_public()
    t = read_export(PUBLIC / "wenscarl__cutlass_benchmark" / "report1.sqlite")
    assert t.info.metadata_table == "EXPORT_META_DATA" and t.info.nsys_version.startswith("2023.2")


def test_nsys_2022_4_export_from_the_local_collector(tmp_path):
    """nsys 2022.4 (Debian) exports carry EXPORT_META_DATA and registered NVTX strings."""
    import shutil
    import subprocess
    import sys

    nsys = shutil.which("nsys")
    if not nsys:
        pytest.skip("nsys not installed")
    prog = tmp_path / "p.py"
    prog.write_text(
        "import sys; sys.path.insert(0, %r)\nfrom tracerecon.instrument import cycle, phase\nimport time\n"
        "for i in range(3):\n    with cycle(i):\n        with phase('draft'): time.sleep(0.002)\n        with phase('verify'): time.sleep(0.001)\n"
        % str(__import__("pathlib").Path(__file__).resolve().parent.parent)
    )
    from conftest import run_cli

    res = run_cli("run", "-o", str(tmp_path / "run"), "--", sys.executable, str(prog))
    assert res.returncode == 0, res.stderr
    (sql,) = (tmp_path / "run").glob("*.sqlite")
    t = read_export(sql)
    assert t.info.nsys_version and t.info.nsys_version.startswith(subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.split()[-1][:6])
    (rank,) = analyze([sql]).ranks
    assert rank.phases["phase"].to_pylist() == ["draft", "verify"] * 3
    cpu = rank.phases["cpu_ns"].to_pylist()
    assert all(c >= 1_000_000 for c in cpu)  # the sleeps are in there
    assert set(rank.ranges["domain"].to_pylist()) == {"tracerecon"}
