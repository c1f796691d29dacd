"""Fuzzing (issue 10): a real H200 export, mutated at random the ways a broken or hand-edited
trace is broken. Every run must be a result (with a warning where rows were dropped) or one
TraceReconError (exit 2 on the command line): never another exception, never a changed input."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import H200, run_cli
from tracerecon import api
from tracerecon.errors import TraceReconError

BASE = H200 / "eagle_gpu_bound.sqlite"
TABLES = ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "StringIds", "META_DATA_EXPORT",
          "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU"]
COLUMNS = {
    "NVTX_EVENTS": ["start", "end", "globalTid", "eventType", "textId", "text", "domainId"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "correlationId", "copyKind", "bytes"],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["start", "end", "streamId", "correlationId", "syncType", "eventId"],
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ["streamId", "correlationId", "eventId", "eventSyncId"],
    "StringIds": ["id", "value"],
    "META_DATA_EXPORT": ["name", "value"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
    "TARGET_INFO_GPU": ["id", "name", "uuid", "busLocation"],
}
BAD_VALUES = ["NULL", "'text'", "1.5e3", "-1", "9223372036854775807", "4000000000000", "X'fffe41'", "0"]

mutation = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(COLUMNS)), st.data(), st.sampled_from(BAD_VALUES), st.integers(1, 7)),
    st.tuples(st.just("drop_table"), st.sampled_from(TABLES)),
    st.tuples(st.just("drop_column"), st.sampled_from(sorted(COLUMNS)), st.data()),
    st.tuples(st.just("duplicate"), st.sampled_from(TABLES)),
    st.tuples(st.just("invert"), st.sampled_from(["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"]), st.integers(1, 5)),
    st.tuples(st.just("shift"), st.sampled_from(["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"]), st.integers(-(10**12), 10**12)),
    st.tuples(st.just("delete_rows"), st.sampled_from(TABLES), st.integers(2, 5)),
)


def unconstrain(con, table) -> None:
    """nsys declares NOT NULL and primary keys; a broken trace need not keep them."""
    try:
        con.execute(f"create table fuzz_tmp as select * from {table}")
        con.execute(f"drop table {table}")
        con.execute(f"alter table fuzz_tmp rename to {table}")
    except sqlite3.Error:
        con.execute("drop table if exists fuzz_tmp")


def apply(path, muts) -> None:
    con = sqlite3.connect(path)
    try:
        for table in {m[1] for m in muts}:
            unconstrain(con, table)
        for m in muts:
            kind = m[0]
            try:
                if kind == "set":
                    _, table, data, value, every = m
                    col = data.draw(st.sampled_from(COLUMNS[table]))
                    con.execute(f"update {table} set {col} = {value} where rowid % {every} = 0")
                elif kind == "drop_table":
                    con.execute(f"drop table if exists {m[1]}")
                elif kind == "drop_column":
                    _, table, data = m
                    con.execute(f"alter table {table} drop column {data.draw(st.sampled_from(COLUMNS[table]))}")
                elif kind == "duplicate":
                    con.execute(f"insert into {m[1]} select * from {m[1]} where rowid % 3 = 0")
                elif kind == "invert":
                    con.execute(f"update {m[1]} set start = end, end = start where rowid % {m[2]} = 0 and end is not null")
                elif kind == "shift":
                    con.execute(f"update {m[1]} set start = start + {m[2]} where rowid % 4 = 0")
                elif kind == "delete_rows":
                    con.execute(f"delete from {m[1]} where rowid % {m[2]} = 0")
            except sqlite3.Error:
                pass  # a mutation the table cannot take (constraint, missing column): skip it
        con.commit()
    finally:
        con.close()


def edited_copy(tmp_path, edit) -> tuple:
    """A copy of BASE at ``tmp_path / "t.sqlite"`` with ``edit(connection)`` applied and
    committed: (its path, what ``edit`` returned)."""
    path = tmp_path / "t.sqlite"
    shutil.copy(BASE, path)
    con = sqlite3.connect(path)
    try:
        said = edit(con)
        con.commit()
    finally:
        con.close()
    return path, said


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_result_or_one_clean_error(path) -> None:
    """Loading ``path`` gives a result whose numbers are sane, or one TraceReconError of one line."""
    try:
        analysis = api.load([path])
    except TraceReconError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert_sane(analysis)


def assert_sane(analysis) -> None:
    """A result's numbers are sane where they exist."""
    for r in analysis.ranks:
        for p in r.phases.to_pylist():
            assert p["gpu_ns"] is None or 0 <= p["gpu_ns"] <= 10**13
            assert p["cpu_ns"] >= 0
        for c in r.cycles.to_pylist():
            assert c["gpu_ns"] is None or 0 <= c["gpu_ns"] <= 10**13
        # the GPUs it names: whole-number devices, texts or nothing, as JSON writes them
        for g in r.gpus:
            assert isinstance(g.device, int) and all(v is None or isinstance(v, str) for v in (g.name, g.uuid, g.bus_location)), g
            json.dumps(g.to_json())


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(muts=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_traces_give_a_result_or_one_clean_error(tmp_path_factory, muts):
    path = tmp_path_factory.mktemp("fuzz") / "t.sqlite"
    shutil.copy(BASE, path)
    apply(path, muts)
    before = digest(path)
    assert_result_or_one_clean_error(path)
    assert digest(path) == before
    assert sorted(x.name for x in path.parent.iterdir()) == ["t.sqlite"]  # nothing created beside it


@pytest.mark.parametrize("head", [b"", b"SQLite format 3\x00" + b"\x00" * 80, BASE.read_bytes()[:50_000]], ids=["empty", "header-only", "truncated"])
def test_truncated_files_are_one_line_and_exit_2(tmp_path, head):
    f = tmp_path / "t.sqlite"
    f.write_bytes(head)
    res = run_cli("report", str(f))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_dropped_rows_are_counted_in_a_warning(tmp_path):
    # GIVEN a trace where some kernels have NULL ends and some NVTX ranges end before they start
    def edit(con):
        unconstrain(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = NULL where rowid % 50 = 0")
        con.execute("update NVTX_EVENTS set end = start - 5000000 where rowid = (select min(rowid) from NVTX_EVENTS where eventType = 59)")
        return con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL where end is null").fetchone()[0]

    path, n_kernels = edited_copy(tmp_path, edit)
    a = api.load([path])
    # THEN the rows are dropped and each table's count is said once
    assert any(f"dropped {n_kernels} kernel row(s)" in w for w in a.warnings)
    assert any("dropped 1 NVTX row(s)" in w for w in a.warnings)
    assert all(p["cpu_ns"] >= 0 for r in a.ranks for p in r.phases.to_pylist())


def test_ops_of_a_negative_stream_or_device_id_are_dropped_and_counted(tmp_path):
    # GIVEN a trace where every other kernel's stream id and one copy's device id were made
    # negative (CUPTI's are unsigned: read as no stream, their phases showed no GPU time, unsaid)
    def edit(con):
        con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set streamId = -5 where rowid % 2 = 0")
        con.execute("update CUPTI_ACTIVITY_KIND_MEMCPY set deviceId = -1 where rowid = (select min(rowid) from CUPTI_ACTIVITY_KIND_MEMCPY)")
        return con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL where streamId < 0").fetchone()[0]

    path, n_kernels = edited_copy(tmp_path, edit)
    a = api.load([path])
    # THEN those rows are dropped and counted, the rest read as before
    assert any(f"dropped {n_kernels} kernel row(s) with missing or impossible values (NULL, text, a negative device or stream id" in w
               for w in a.warnings), a.warnings
    assert any("dropped 1 memcpy row(s)" in w for w in a.warnings), a.warnings
    assert all(n >= 0 for r in a.ranks for n in r.gpu_ops["stream_id"].to_pylist())


def test_a_huge_string_id_costs_no_memory(tmp_path):
    path = tmp_path / "t.sqlite"
    shutil.copy(BASE, path)
    con = sqlite3.connect(path)
    con.execute("insert into StringIds (id, value) values (4000000000000, 'far away')")
    con.commit()
    con.close()
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    api.load([path])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KB: far below the 29 TiB a dense map would need


def test_a_wal_mode_input_in_a_read_only_folder_creates_nothing(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "t.sqlite"
    shutil.copy(BASE, path)
    con = sqlite3.connect(path)
    con.execute("pragma journal_mode=wal")
    con.close()
    before = sorted(x.name for x in folder.iterdir())
    folder.chmod(0o555)
    try:
        a = api.load([path])
        assert a.ranks and sorted(x.name for x in folder.iterdir()) == before
    finally:
        folder.chmod(0o755)


# --- exports never mix runs ---------------------------------------------------------------------


def test_a_second_export_replaces_the_first_wholly(tmp_path):
    from conftest import DEMO2

    out = tmp_path / "out"
    assert run_cli("export", str(DEMO2 / "nccl_skew"), "-o", str(out)).returncode == 0
    assert (out / "phases" / "rank=1").is_dir()
    assert run_cli("export", str(BASE), "-o", str(out)).returncode == 0
    # THEN nothing of the two-rank run is left to be read with the one-rank one
    assert not (out / "phases" / "rank=1").exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


def test_a_folder_that_is_not_an_export_is_not_overwritten(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "manifest.json").write_text("{}")  # a user's own file... in a folder tracerecon did not write
    (out / "notes.txt").write_text("keep me")
    (out / "manifest.json").unlink()
    res = run_cli("export", str(BASE), "-o", str(out))
    assert res.returncode == 2 and "not a tracerecon export" in res.stderr
    assert (out / "notes.txt").read_text() == "keep me"
    assert run_cli("export", str(BASE), "-o", str(out), "--force").returncode == 0
    assert not (out / "notes.txt").exists() and (out / "manifest.json").is_file()


@pytest.mark.parametrize("manifest", ["{}", '{"tracerecon_version": "0.1.0", "ranks": [], "tables": {}}'])
def test_a_user_folder_holding_a_manifest_json_is_not_overwritten(tmp_path, manifest):
    # GIVEN a user's folder holding their own manifest.json (any JSON, even one with an
    # export's keys) beside other files of theirs
    out = tmp_path / "mine"
    out.mkdir()
    (out / "manifest.json").write_text(manifest)
    (out / "notes.txt").write_text("keep me")
    # WHEN exported into without --force
    res = run_cli("export", str(BASE), "-o", str(out))
    # THEN refused in one line, exit 2, and the folder is as it was
    assert res.returncode == 2 and "not a tracerecon export" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert sorted(x.name for x in out.iterdir()) == ["manifest.json", "notes.txt"]
    assert (out / "manifest.json").read_text() == manifest and (out / "notes.txt").read_text() == "keep me"


def test_an_export_a_user_added_a_file_to_is_not_overwritten(tmp_path):
    # GIVEN a tracerecon export into which the user saved a file of their own
    out = tmp_path / "out"
    assert run_cli("export", str(BASE), "-o", str(out)).returncode == 0
    (out / "phases" / "my_plot.png").write_bytes(b"png")
    # WHEN exported into again without --force THEN refused, their file kept
    res = run_cli("export", str(BASE), "-o", str(out))
    assert res.returncode == 2 and "not a tracerecon export" in res.stderr, res.stderr
    assert (out / "phases" / "my_plot.png").read_bytes() == b"png"
    # and the export still reads back as one
    assert run_cli("report", str(out)).returncode == 0


@pytest.mark.parametrize("umask, made, mode", [(0o022, None, 0o755), (0o027, None, 0o750), (0o022, 0o771, 0o771)])
def test_the_export_folder_gets_the_mode_a_plain_mkdir_would_or_keeps_its_own(tmp_path, umask, made, mode):
    import os
    import stat

    out = tmp_path / "out"
    if made is not None:  # GIVEN an empty folder the user made, with a mode of their choosing
        out.mkdir()
        os.chmod(out, made)
    # WHEN exported into it (or into a new folder) under the umask
    old = os.umask(umask)
    try:
        res = run_cli("export", str(BASE), "-o", str(out))
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    # THEN the folder's mode is its own, else 0o777 less the umask, as its datasets' folders are
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert stat.S_IMODE((out / "phases").stat().st_mode) == 0o777 & ~umask


def test_concurrent_exports_never_mix(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from conftest import DEMO2

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    out = tmp_path / "out"
    for _ in range(3):
        procs = [subprocess.Popen([exe, "export", str(src), "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for src in (DEMO2 / "nccl_skew", BASE)]
        codes = [p.wait(timeout=300) for p in procs]
        assert codes.count(0) >= 1 and all(c in (0, 2) for c in codes)
        manifest = json.loads((out / "manifest.json").read_text())
        ranks = sorted(int(d.name.split("=")[1]) for d in (out / "phases").iterdir())
        # THEN the folder is entirely one of them: its manifest and its datasets agree
        assert ranks == sorted(r["rank"] for r in manifest["ranks"])
        assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


def test_hostile_command_lines_get_one_line(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    res = run_cli("scrub", str(BASE), "-o", str(d))
    assert res.returncode == 2 and "is a directory" in res.stderr and res.stderr.count("\n") == 1
    res = run_cli("run", "--", str(tmp_path / "no" / "such" / "program"))
    assert res.returncode == 2 and "no such program" in res.stderr and res.stderr.count("\n") == 1
    odd = tmp_path / "tr\udcffce.sqlite".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
    shutil.copy(BASE, odd)
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    for args in (["report", str(odd)], ["report", "--json", str(odd)]):
        res = subprocess.run([exe, *args], capture_output=True)
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr


def test_a_file_name_that_is_not_utf8_is_written_as_valid_utf8_json(tmp_path):
    import json
    import os

    import duckdb

    # GIVEN the README's trace under a name holding the byte 0xff (no UTF-8)
    odd = os.fsencode(tmp_path) + b"/bad\xffname.sqlite"
    shutil.copy(BASE, odd)
    shown = str(tmp_path) + "/bad\\xffname.sqlite"  # the byte as a backslash escape: \xff
    # WHEN reported as JSON, exported as parquet, and as a native Perfetto timeline
    rep = run_cli("report", "--json", os.fsdecode(odd))
    out = tmp_path / "out"
    exp = run_cli("export", os.fsdecode(odd), "-o", str(out))
    chrome = run_cli("export", "--format", "chrome-json", os.fsdecode(odd), "-o", str(tmp_path / "t.json"))
    native = run_cli("export", "--format", "perfetto", os.fsdecode(odd), "-o", str(tmp_path / "t.pftrace"))
    # THEN each is valid UTF-8 naming the file with its byte escaped, which DuckDB reads
    assert rep.returncode == 0 and exp.returncode == 0, (rep.stderr, exp.stderr)
    assert json.loads(rep.stdout)["ranks"][0]["source"] == shown
    manifest = (out / "manifest.json").read_bytes()
    manifest.decode("utf-8")
    assert json.loads(manifest)["inputs"] == [shown] and "\\ud" not in manifest.decode()
    (tmp_path / "report.json").write_text(rep.stdout)
    assert duckdb.sql(f"select ranks[1].source from read_json_auto('{tmp_path / 'report.json'}')").fetchall() == [(shown,)]
    assert duckdb.sql(f"select inputs from read_json_auto('{out / 'manifest.json'}')").fetchall() == [([shown],)]
    # and the timelines name the rank's process so too (the native one was an internal error, exit 1)
    assert chrome.returncode == 0, chrome.stderr
    events = json.loads((tmp_path / "t.json").read_bytes().decode("utf-8"))
    assert "rank 0 (bad\\xffname.sqlite) GPU 0 NVIDIA H200" in {e.get("args", {}).get("name") for e in events if e.get("name") == "process_name"}
    assert native.returncode == 0 or "needs the `perfetto` extra" in native.stderr, native.stderr


@pytest.mark.parametrize("sql", [
    "update StringIds set value = NULL where rowid % 1 = 0",  # every name gone: kernels and copies still merge
    "update NVTX_EVENTS set end = 'text' where rowid % 1 = 0",  # no NVTX end is a time
    "update NVTX_EVENTS set start = 'text' where rowid % 1 = 0",  # no NVTX start is a time
    "update TARGET_INFO_SESSION_START_TIME set utcEpochNs = 'text' where rowid % 1 = 0",  # no session start time
    "update NVTX_EVENTS set end = 9223372036854775807 where rowid % 1 = 0",  # every range ends at int64 max
], ids=["null-strings", "text-nvtx-ends", "text-nvtx-starts", "text-session-start", "nvtx-ends-at-int64-max"])
def test_what_fuzzing_once_broke_gives_a_result_or_one_clean_error(tmp_path, sql):
    # GIVEN a trace broken the way a fuzzing run found (a crash before 2026-11-30)
    path = tmp_path / "t.sqlite"
    shutil.copy(BASE, path)
    con = sqlite3.connect(path)
    unconstrain(con, sql.split()[1])
    con.execute(sql)
    con.commit()
    con.close()
    # WHEN read THEN a result with sane numbers, or one TraceReconError of one line
    assert_result_or_one_clean_error(path)


# --- export directories edited by another tool ---------------------------------------------------

EXPORT_TABLES = ["phases", "cycles", "gpu_ops", "syncs", "ranges", "collectives", "critical_path"]


@pytest.fixture(scope="module")
def two_rank_export(tmp_path_factory):
    from conftest import DEMO2

    out = tmp_path_factory.mktemp("export") / "exp"
    assert run_cli("export", str(DEMO2 / "nccl_skew"), "-o", str(out)).returncode == 0
    return out


def _column_values(field, n: int, how: str):
    import pyarrow as pa

    if how == "null":
        return pa.nulls(n, field.type)
    if pa.types.is_integer(field.type):
        return pa.array([(-1 if how == "low" else 1) * 2 ** (field.type.bit_width - 2)] * n, field.type)
    if pa.types.is_string(field.type) or pa.types.is_dictionary(field.type):
        return pa.array(["{weird"] * n).cast(field.type)
    return pa.nulls(n, field.type)


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "20")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=st.sampled_from(EXPORT_TABLES), data=st.data(), how=st.sampled_from(["null", "low", "high"]))
def test_an_export_directory_edited_column_by_column_gives_a_result_or_one_clean_error(tmp_path_factory, two_rank_export, table, data, how):
    """GIVEN the export of a two-rank NCCL run, one column of one of its files set whole to null,
    to a huge or a negative number or to a word tracerecon never writes; WHEN every command that
    reads it back runs; THEN each gives a result (exit 0) or one line and exit 2, never an
    internal error."""
    import pyarrow.parquet as pq

    edited = tmp_path_factory.mktemp("edited") / "exp"
    shutil.copytree(two_rank_export, edited)
    part = edited / table / ("part-0.parquet" if table == "critical_path" else "rank=0/part-0.parquet")
    t = pq.read_table(part)
    i = data.draw(st.integers(0, t.num_columns - 1))
    t = t.set_column(i, t.schema.field(i).name, _column_values(t.schema.field(i), t.num_rows, how))
    pq.write_table(t, part)
    for args in (("report", str(edited)), ("report", "--json", str(edited)), ("diff", str(edited), str(two_rank_export))):
        res = run_cli(*args)
        assert res.returncode in (0, 2) and "Traceback" not in res.stderr and "internal error" not in res.stderr, (table, t.schema.field(i).name, how, args, res.stderr[-500:])
        if res.returncode == 2:
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("table, columns", [(t, g) for t, groups in __import__("tracerecon.export", fromlist=["x"]).NULL_TOGETHER.items() for g in groups])
def test_amounts_tracerecon_writes_as_null_are_read_back_by_every_command(tmp_path, two_rank_export, table, columns):
    """GIVEN the export of a two-rank NCCL run with columns that tracerecon writes as null
    together where there is nothing to give (a phase without GPU ops has no GPU start, end or
    span) set to null in every row of rank 0; WHEN every command that reads an export runs THEN
    each gives its result (exit 0); and one of them alone null: one line, exit 2."""
    import pyarrow.parquet as pq

    edited = tmp_path / "exp"
    shutil.copytree(two_rank_export, edited)
    part = edited / table / "rank=0" / "part-0.parquet"
    whole = pq.read_table(part)
    t = whole
    for column in columns:
        t = t.set_column(t.schema.get_field_index(column), column, pa_nulls(t.num_rows, t.schema.field(column).type))
    pq.write_table(t, part)
    for args in (("report", str(edited)), ("report", "--json", str(edited)), ("diff", str(edited), str(two_rank_export)),
                 ("export", str(edited), "--format", "chrome-json", "-o", str(tmp_path / "t.json")), ("export", str(edited), "-o", str(tmp_path / "again"))):
        res = run_cli(*args)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-500:])
    pq.write_table(whole.set_column(whole.schema.get_field_index(columns[-1]), columns[-1], pa_nulls(whole.num_rows, whole.schema.field(columns[-1]).type)), part)
    res = run_cli("report", str(edited))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "tracerecon writes them together" in res.stderr, res.stderr


def pa_nulls(n: int, type_):
    import pyarrow as pa

    return pa.nulls(n, type_)


def test_an_export_with_a_phase_that_ran_no_gpu_work_reads_back_as_its_report(tmp_path):
    # GIVEN vLLM's run with a phase that launches nothing (postprocess: no GPU op, no GPU span)
    from conftest import SAMPLES

    run = SAMPLES / "engines_h200" / "vllm_v1"
    phases = ("--phase", "post=gpu_model_runner: postprocess", "--phase", "fwd=gpu_model_runner: forward")
    assert run_cli("export", str(run), *phases, "-o", str(tmp_path / "exp")).returncode == 0
    # WHEN its export is reported THEN it reads back as the report of the run itself
    back = run_cli("report", "--json", str(tmp_path / "exp"))
    assert back.returncode == 0, back.stderr
    want = json.loads(run_cli("report", "--json", str(run), *phases).stdout)
    assert json.loads(back.stdout)["ranks"] == want["ranks"]
    assert [p["gpu_span_ms_median"] for p in want["ranks"][0]["phases"] if p["phase"] == "post"] == [None]
