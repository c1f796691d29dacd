"""Bad input through the real CLI: one clear line on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from conftest import H200, PUBLIC, need_public, run_cli


def assert_one_line_error(res, needle):
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("tracerecon: error:") and needle in lines[0], lines[0]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("argv, needle", [
    (["report", "x.sqlite", "--bogus"], "unrecognized arguments: --bogus (see `tracerecon report --help`)"),
    (["nosuch"], "invalid choice: 'nosuch'"),
    ([], "required: COMMAND (see `tracerecon --help`)"),
    (["report"], "required: TRACE (see `tracerecon report --help`)"),
    (["report", "x.sqlite", "--jobs", "many"], "invalid int value: 'many'"),
])
def test_usage_errors_are_one_line(argv, needle):
    # GIVEN a command line argparse rejects WHEN run THEN one line (no usage block) and exit 2
    assert_one_line_error(run_cli(*argv), needle)


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("report", str(tmp_path / "nope.sqlite")), "no such file")


def test_not_sqlite(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("hello, this is not a database\n")
    assert_one_line_error(run_cli("report", str(p)), "not an SQLite file")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    assert_one_line_error(run_cli("report", str(p)), "empty file")


def test_truncated_export(tmp_path):
    src = H200 / "eagle_gpu_bound.sqlite"
    p = tmp_path / "cut.sqlite"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 3])
    assert_one_line_error(run_cli("report", str(p)), "truncated")


def test_another_tools_database(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("create table users (id integer, name text)")
    con.commit()
    con.close()
    assert_one_line_error(run_cli("report", str(p)), "without any Nsight Systems table")


@pytest.mark.parametrize("table, key", [("CUPTI_ACTIVITY_KIND_KERNEL", "start, correlationId, deviceId, streamId"),
                                        ("NVTX_EVENTS", "start, eventType, globalTid")])
@pytest.mark.parametrize("reader", ["native", "sqlite3"])
def test_a_table_rewritten_without_rowid_is_named(tmp_path, table, key, reader):
    # GIVEN an export one of whose tables another tool rebuilt WITHOUT ROWID (nsys never does)
    p = tmp_path / "rewritten.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    con = sqlite3.connect(p)
    sql = con.execute("select sql from sqlite_master where name = ?", (table,)).fetchone()[0]
    cols = ", ".join(r[1] for r in con.execute(f"pragma table_info({table})"))
    con.execute(f"alter table {table} rename to old_rows")
    con.execute(sql.rstrip().rstrip(")") + f", primary key ({key})) without rowid")
    con.execute(f"insert or ignore into {table} select {cols} from old_rows")
    con.execute("drop table old_rows")
    con.commit()
    con.close()
    # WHEN it is reported on THEN one line names the table and the cause, exit 2
    env = dict(os.environ, TRACERECON_READER=reader) if reader == "sqlite3" else None
    assert_one_line_error(run_cli("report", "--no-cache", str(p), env=env), f"table {table} was created WITHOUT ROWID")


def test_nsys_rep_instead_of_sqlite(tmp_path):
    p = tmp_path / "r.nsys-rep"
    p.write_bytes(b"\x00" * 64)
    assert_one_line_error(run_cli("report", str(p)), "nsys export --type sqlite")


def test_directory_without_exports(tmp_path):
    assert_one_line_error(run_cli("report", str(tmp_path)), "no .sqlite")


def test_export_without_nvtx_names_the_nvtx_package_cause():
    need_public()
    assert_one_line_error(run_cli("report", str(PUBLIC / "GindaChen__nsys-ai" / "mock.sqlite")), "nvtx")


def test_export_without_cuda_or_nvtx_tables():
    need_public()
    assert_one_line_error(run_cli("report", str(PUBLIC / "CO18326__uvmTorch" / "report1.sqlite")), "NVTX")


def test_export_output_dir_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(blocker / "sub")), "cannot write export")


def test_input_opened_read_only(tmp_path):
    p = tmp_path / "ro.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    p.chmod(0o444)
    res = run_cli("report", str(p), "--json")
    assert res.returncode == 0, res.stderr
