"""Bad input through the real CLI: one clear line on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import DEMO2, H200, PUBLIC, SAMPLES, need_public, run_cli


def edited_copy(tmp_path, sql: str):
    """A copy of the README's trace with ``sql`` run on it."""
    p = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    con = sqlite3.connect(p)
    con.execute(sql)
    con.commit()
    con.close()
    return p


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
    (["report", "x.sqlite", "--jobs", "many"], "expected a number of worker processes, got 'many'"),
    (["report", "x.sqlite", "--jobs", "0"], "expected 1 or more worker processes, got 0"),
    (["report", "x.sqlite", "--phase", "=verify"], "the phase's name before '=' is empty"),
    (["report", "x.sqlite", "--phase", ""], "--phase '': a phase needs a name"),
    (["report", "x.sqlite", "--phase", "verify="], "the range name or pattern after '=' is empty"),
    (["report", ""], "an empty path was given as a trace"),
    (["report", "x.sqlite", "--phase", "verify=re:"], "--phase 'verify=re:': the pattern after 're:' is empty"),
    (["report", "x.sqlite", "--phase", "verify=glob: "], "the pattern after 'glob:' is empty"),
    (["scrub", ""], "an empty path was given as a trace"),
    (["scrub", "."], ".: not a file (scrub copies one export)"),
    (["scrub", "/"], "/: not a file (scrub copies one export)"),
])
def test_usage_errors_are_one_line(argv, needle):
    # GIVEN a command line argparse rejects WHEN run THEN one line (no usage block) and exit 2
    assert_one_line_error(run_cli(*argv), needle)


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("report", str(tmp_path / "nope.sqlite")), "no such file")
    # GIVEN a symbolic link to a file that is gone, and a loop of links THEN each is named so
    (tmp_path / "dangling.sqlite").symlink_to("gone.sqlite")
    (tmp_path / "a.sqlite").symlink_to("b.sqlite")
    (tmp_path / "b.sqlite").symlink_to("a.sqlite")
    (tmp_path / "a.sqlite.xz").symlink_to("b.sqlite.xz")
    (tmp_path / "b.sqlite.xz").symlink_to("a.sqlite.xz")
    assert_one_line_error(run_cli("report", str(tmp_path / "dangling.sqlite")), "dangling.sqlite: a symbolic link to a missing file (gone.sqlite)")
    assert_one_line_error(run_cli("report", str(tmp_path / "a.sqlite")), "a.sqlite: a loop of symbolic links")
    assert_one_line_error(run_cli("export", "-o", str(tmp_path / "out"), str(tmp_path / "a.sqlite.xz")), "a.sqlite.xz: a loop of symbolic links")


def test_not_sqlite(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("hello, this is not a database\n")
    assert_one_line_error(run_cli("report", str(p)), "not an SQLite file")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    assert_one_line_error(run_cli("report", str(p)), "empty file")


def test_an_xz_export_with_other_bytes_after_it_is_refused_as_xz_refuses_it(tmp_path):
    # GIVEN an export compressed with xz, and the same with 3000 other bytes appended (xz -t
    # says "Compressed data is corrupt"; Python's reader skips them without a word)
    import lzma

    good = tmp_path / "good.sqlite.xz"
    good.write_bytes(lzma.compress((DEMO2 / "nccl_gpu_bound" / "rank0.sqlite").read_bytes(), preset=0))
    bad = tmp_path / "bad.sqlite.xz"
    bad.write_bytes(good.read_bytes() + bytes(range(256)) * 11 + b"tail")
    # WHEN reported or scrubbed THEN the good one is read, the other refused in one line (exit 2)
    assert run_cli("report", str(good)).returncode == 0
    for argv in (("report", str(bad)), ("scrub", str(bad), "-o", str(tmp_path / "s.sqlite"))):
        assert_one_line_error(run_cli(*argv), "not a readable .xz file (bytes after its last stream are not .xz data")
    assert not (tmp_path / "s.sqlite").exists()


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


@pytest.mark.parametrize("table", ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"])
def test_a_table_made_a_view_is_named(tmp_path, table):
    # GIVEN an export one of whose tables another tool replaced by a view of it (said as "the
    # NVTX table changed while it was read")
    p = tmp_path / "viewed.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    con = sqlite3.connect(p)
    con.execute(f"alter table {table} rename to kept_rows")
    con.execute(f"create view {table} as select * from kept_rows")
    con.commit()
    con.close()
    # WHEN it is reported on THEN one line names the view and the cause, exit 2
    assert_one_line_error(run_cli("report", "--no-cache", str(p)), f"{table} is a view, not a table, which nsys never writes")


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


def test_an_output_that_holds_the_input_is_refused_even_with_force(tmp_path):
    # GIVEN a run directory holding its trace
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", run / "t.sqlite")
    # WHEN exported into that directory (--force), into its parent, or as a timeline over the trace
    for argv in (["-o", str(run), "--force"], ["-o", str(tmp_path), "--force"], ["-o", str(run / "t.sqlite"), "--format", "chrome-json"]):
        res = run_cli("export", str(run / "t.sqlite"), *argv)
        # THEN refused in one line, exit 2, and the trace is still there, unchanged
        assert_one_line_error(res, "holds the input")
        assert (run / "t.sqlite").read_bytes() == (H200 / "eagle_gpu_bound.sqlite").read_bytes()


@pytest.mark.parametrize("kept", ["rank1.sqlite", "sub/rank1.sqlite.xz", "report.nsys-rep"])
def test_export_force_never_replaces_a_folder_holding_a_trace(kept, tmp_path):
    # GIVEN a folder holding another trace (an export, a compressed one in a sub-folder, an nsys
    # report) and a note: --force replaced it whole, the traces with it, without a word
    out = tmp_path / "out"
    (out / kept).parent.mkdir(parents=True)
    if kept.endswith(".xz"):
        import lzma

        (out / kept).write_bytes(lzma.compress(b"SQLite format 3\x00"))
    else:
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", out / kept)
    (out / "notes.txt").write_text("keep me")
    # WHEN exported there with --force THEN one line naming the trace, exit 2, the folder as it was
    res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out), "--force")
    assert_one_line_error(res, f"holds a trace, {out / kept}, which replacing it would lose")
    assert (out / kept).is_file() and (out / "notes.txt").read_text() == "keep me"


def test_export_force_replaces_a_folder_holding_only_a_link_to_a_trace(tmp_path):
    # GIVEN a folder holding a note and a link to a trace kept elsewhere (replacing the folder
    # removes the link, never the trace: it was refused as if it held the trace)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("x")
    (out / "report.sqlite").symlink_to(H200 / "eagle_gpu_bound.sqlite")
    # WHEN exported there with --force THEN written, and the trace is where it was
    res = run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out), "--force")
    assert res.returncode == 0, res.stderr
    assert (out / "manifest.json").is_file() and (H200 / "eagle_gpu_bound.sqlite").is_file()


def test_a_picture_over_its_input_is_refused(tmp_path):
    # GIVEN a trace named like a picture, and a link named like one pointing at a trace
    pic = tmp_path / "trace.svg"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", pic)
    link = tmp_path / "link.svg"
    link.symlink_to(pic)
    # WHEN plotted over itself, or over the link to it (as the second run of a diff too)
    for argv in ([str(pic), "-o", str(pic)], [str(pic), "-o", str(link)], [str(H200 / "eagle_gpu_bound.sqlite"), "--diff", str(pic), "-o", str(link)]):
        res = run_cli("plot", *argv)
        # THEN refused in one line, exit 2, and the trace is unchanged
        assert_one_line_error(res, "holds the input")
        assert pic.read_bytes() == (H200 / "eagle_gpu_bound.sqlite").read_bytes()


def test_a_picture_over_another_trace_is_refused(tmp_path):
    # GIVEN another trace (another rank's export) named like a picture, not an input
    other = tmp_path / "rank1.png"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", other)
    # WHEN a plot, or a diff's picture, is written there (a mistyped -o / --plot)
    for argv in (["plot", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(other)],
                 ["diff", str(H200 / "eagle_gpu_bound.sqlite"), str(H200 / "eagle_gpu_bound.sqlite"), "--plot", str(other)]):
        res = run_cli(*argv)
        # THEN refused in one line, exit 2, as a timeline over a trace is, and the trace is kept
        assert_one_line_error(res, "holds a trace; a picture is not written over it")
        assert other.read_bytes() == (H200 / "eagle_gpu_bound.sqlite").read_bytes()


def test_a_run_never_writes_into_a_used_output(tmp_path):
    # GIVEN an earlier run's directory, and a file
    prev = tmp_path / "prev"
    prev.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", prev / "report.sqlite")
    (tmp_path / "file").write_text("x")
    # WHEN a new run is asked to write there (nsys is not needed to refuse)
    for out in (prev, tmp_path / "file"):
        res = run_cli("run", "-o", str(out), "--nsys", str(tmp_path / "no-nsys"), "--", "true")
        # THEN refused in one line, exit 2, nothing replaced
        assert_one_line_error(res, "choose a new one")
    assert (prev / "report.sqlite").read_bytes() == (H200 / "eagle_gpu_bound.sqlite").read_bytes()
    assert sorted(p.name for p in prev.iterdir()) == ["report.sqlite"] and (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("sql", [
    "update TARGET_INFO_GPU set uuid = 12345", "update TARGET_INFO_GPU set name = X'fffe41'",
    "update PROCESSES set pid = 'abc'", "update TARGET_INFO_CUDA_DEVICE set cudaId = 'abc'",
])
def test_metadata_of_the_wrong_type_is_read_as_missing(tmp_path, sql):
    # GIVEN an export whose metadata table holds a value of another type (another tool's writer)
    p = edited_copy(tmp_path, sql)
    # WHEN reported THEN the same phase numbers as the original, exit 0
    res, want = run_cli("report", "--json", str(p)), run_cli("report", "--json", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 0, res.stderr
    import json

    phases = lambda out: [(x["phase"], x["gpu_ms_median"]) for x in json.loads(out)["ranks"][0]["phases"]]  # noqa: E731
    assert phases(res.stdout) == phases(want.stdout)


def test_engine_timer_files_that_are_not_timings_are_skipped(tmp_path):
    # GIVEN a run directory whose engine timer files hold NaN, an overflowing rank, or are a directory
    import json

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", run / "t.sqlite")
    (run / "cpu_timers.rank0.jsonl").write_text('{"rank": 0, "phase": "verify", "cpu_ms": NaN}\n{"rank": 1e999, "phase": "verify", "cpu_ms": 1}\n'
                                                 '{"rank": 0, "phase": "draft", "cpu_ms": 0.5}\n')
    (run / "cpu_timers.rank1.jsonl").mkdir()
    # WHEN reported as JSON THEN exit 0, valid strict JSON, and only the real timing kept
    res = run_cli("report", "--json", str(run))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    engine = {p["phase"]: p.get("engine_cpu_ms_median") for p in doc["ranks"][0]["phases"]}
    assert engine == {"draft": 0.5, "verify": None, "draft_re_extend": None}


def test_a_closed_or_full_output_is_one_line(tmp_path):
    import subprocess
    import sys

    for redirect in (">&-", ">/dev/full"):
        res = subprocess.run(f"{sys.executable} -m tracerecon report {H200 / 'eagle_gpu_bound.sqlite'} {redirect}", shell=True, capture_output=False,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, TRACERECON_NO_CACHE="1"))
        assert res.returncode == 2 and res.stderr.startswith("tracerecon: error: cannot write the output"), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_a_rank_without_phases_is_warned_about_when_others_have_them(tmp_path):
    # GIVEN two rank files: rank 0 marks draft and verify, rank 1 only ranges of other names
    from nsys_factory import FakeTrace

    for rank, names in ((0, ("draft", "verify")), (1, ("step_a", "step_b"))):
        t = FakeTrace()
        for c in range(3):
            b = c * 1_000_000
            t.cycle(c, b, b + 100_000, b + 300_000, names=names)
            t.kernel(t.call("cudaLaunchKernel", b + 10_000, b + 12_000), b + 20_000, b + 90_000)
        t.write(tmp_path / f"rank{rank}.sqlite")
    # WHEN reported THEN exit 0, and a warning names rank 1
    res = run_cli("report", str(tmp_path / "rank0.sqlite"), str(tmp_path / "rank1.sqlite"))
    assert res.returncode == 0, res.stderr
    assert "warning: rank 1 (" in res.stderr and "no range named as a phase" in res.stderr


@pytest.mark.parametrize("sql, needle", [
    ("drop table CUPTI_ACTIVITY_KIND_KERNEL", "kernel launch call(s) but no kernel in the trace"),
    ("delete from CUPTI_ACTIVITY_KIND_KERNEL", "kernel launch call(s) but no kernel in the trace"),
    ("update NVTX_EVENTS set eventType = 'x' where rowid in (select rowid from NVTX_EVENTS limit 3)", "dropped 3 NVTX row(s) whose event type is not a number"),
    # a push written as a row of its own (ENUM_NSYS_EVENT_TYPE's NvtxPushRange), and a kind no nsys writes yet
    ("update NVTX_EVENTS set eventType = 35 where rowid in (select rowid from NVTX_EVENTS where eventType = 59 limit 2)",
     "skipped 2 NVTX row(s) of event types tracerecon does not read (35 (NvtxPushRange): 2)"),
    ("update NVTX_EVENTS set eventType = 500 where rowid in (select rowid from NVTX_EVENTS where eventType = 59 limit 4)",
     "skipped 4 NVTX row(s) of event types tracerecon does not read (500: 4)"),
])
def test_rows_not_read_are_said(tmp_path, sql, needle):
    # GIVEN an export whose kernels are gone, or some of whose NVTX rows have a kind that is no number
    p = edited_copy(tmp_path, sql)
    # WHEN reported THEN a partial result with a warning saying what was not read
    res = run_cli("report", str(p))
    assert res.returncode == 0 and needle in res.stderr, res.stderr


def test_nvtx_rows_that_only_name_things_are_not_warned_about(tmp_path):
    # GIVEN an export with a thread named (NvtxThread, 39, as torch's and nsys's own rows are),
    # a category named (33) and a CUDA stream named (99): rows the read leaves out
    p = edited_copy(tmp_path, "insert into NVTX_EVENTS (start, end, eventType, globalTid) select start, null, k, globalTid "
                              "from (select start, globalTid from NVTX_EVENTS limit 1), (select 33 as k union select 39 union select 99)")
    # WHEN reported THEN nothing is said of them
    res = run_cli("report", str(p))
    assert res.returncode == 0 and "NVTX row(s)" not in res.stderr, res.stderr


@pytest.mark.parametrize("verb", ["drop table", "delete from"])
def test_cuda_tables_empty_or_missing_say_the_same(tmp_path, verb):
    # GIVEN the README's trace with every CUDA activity table dropped, or there but emptied
    p = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    con = sqlite3.connect(p)
    for (table,) in con.execute("select name from sqlite_master where type = 'table' and name like 'CUPTI_ACTIVITY_KIND_%'").fetchall():
        con.execute(f"{verb} {table}")
    con.commit()
    con.close()
    # WHEN reported
    res = run_cli("report", "--json", str(p))
    # THEN CPU times only, and the same warning either way
    assert res.returncode == 0, res.stderr
    assert f"tracerecon: warning: {p}: no CUDA activity in the trace (traced without `-t cuda`, or a CPU-only run): CPU times only" in res.stderr.splitlines()
    assert [list(ph["verdicts"]) for ph in json.loads(res.stdout)["ranks"][0]["phases"]] == [["no_gpu_work"]] * 3


@pytest.mark.parametrize("phase_options, needle", [
    ({"phases": 5}, "{run}/run.json: phase_options.phases is 5, not a list of phase names"),
    ({"phases": ["=verify"]}, "the phase's name before '=' is empty (phases recorded in {run}/run.json)"),
    ({"phase_thread": "sometimes"}, "{run}/run.json: phase_options.phase_thread is \"sometimes\", not auto, same or a thread id"),
    ({"phase_thread": True}, "{run}/run.json: phase_options.phase_thread is true, not auto, same or a thread id"),
    ({"phase_thread": [7]}, "{run}/run.json: phase_options.phase_thread is [7], not auto, same or a thread id"),
    ({"skip_cycles": -2}, "{run}/run.json: phase_options.skip_cycles is -2, not a whole number of 0 or more"),
])
def test_a_run_directory_recording_bad_phases_is_named(tmp_path, phase_options, needle):
    from conftest import DEMO

    # GIVEN a run directory whose run.json records phases that are no list of names, or a bad one
    run = tmp_path / "myrun"
    shutil.copytree(DEMO / "gpu_bound", run)
    doc = json.loads((run / "run.json").read_text())
    doc["phase_options"] = phase_options
    (run / "run.json").write_text(json.dumps(doc))
    # WHEN reported THEN one line naming the run.json and what is wrong in it
    assert_one_line_error(run_cli("report", str(run)), needle.format(run=run))


def test_an_export_directory_with_a_foreign_table_names_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # GIVEN an export directory whose phases dataset another tool rewrote with other columns
    out = tmp_path / "out"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    part = out / "phases" / "rank=0" / "part-0.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), part)
    # WHEN reported THEN one line naming that file (not the manifest) and the missing column
    assert_one_line_error(run_cli("report", str(out)), f"{part}: not the phases table of a tracerecon export (Field ")


def test_an_export_written_before_later_columns_reads_the_same(tmp_path):
    import pyarrow.parquet as pq

    # GIVEN an export of the NCCL straggler run, and a copy of it as an older tracerecon wrote it:
    # gpu_ops without demangled_name, cycles without accepted_tokens and incomplete
    out, old = tmp_path / "new", tmp_path / "old"
    assert run_cli("export", str(DEMO2 / "nccl_skew"), "-o", str(out)).returncode == 0
    shutil.copytree(out, old)
    for table, column in (("gpu_ops", "demangled_name"), ("cycles", "accepted_tokens"), ("cycles", "incomplete")):
        for part in (old / table).glob("rank=*/part-0.parquet"):
            pq.write_table(pq.read_table(part).drop_columns([column]), part)
    # WHEN both are reported THEN the same report
    new_res, old_res = run_cli("report", "--json", str(out)), run_cli("report", "--json", str(old))
    assert new_res.returncode == old_res.returncode == 0, old_res.stderr
    strip = lambda doc: {k: v for k, v in json.loads(doc).items() if k not in ("inputs", "warnings")}  # noqa: E731
    assert strip(new_res.stdout) == strip(old_res.stdout)


def test_kernels_whose_short_names_are_lost_on_one_rank_are_still_matched(tmp_path):
    # GIVEN the NCCL straggler run, and a copy whose rank 0 lost its NCCL kernels' short name ids
    # (their demangled names still there)
    run = tmp_path / "nccl_skew"
    shutil.copytree(DEMO2 / "nccl_skew", run)
    con = sqlite3.connect(run / "rank0.sqlite")
    con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set shortName = 987654 where shortName in "
                "(select id from StringIds where value like 'ncclDevKernel%')")
    assert con.total_changes > 1000
    con.commit()
    con.close()
    # WHEN both are reported THEN the same collectives, waits and critical path, nothing said
    before, after = (json.loads(run_cli("report", "--json", str(r)).stdout) for r in (DEMO2 / "nccl_skew", run))
    assert [r["nccl"] for r in after["ranks"]] == [r["nccl"] for r in before["ranks"]]
    assert after["critical_path"] == before["critical_path"] and after["warnings"] == before["warnings"]


def test_kernels_whose_names_cannot_be_read_are_counted(tmp_path):
    # GIVEN both ranks of the NCCL straggler run, every kernel's name ids pointing at no string
    run = tmp_path / "nccl_skew"
    shutil.copytree(DEMO2 / "nccl_skew", run)
    counts = {}
    for f in ("rank0.sqlite", "rank1.sqlite"):
        con = sqlite3.connect(run / f)
        con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set shortName = 999999, demangledName = 999999, mangledName = 999999")
        counts[f] = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        con.commit()
        con.close()
    # WHEN reported
    res = run_cli("report", "--json", str(run))
    # THEN the NCCL kernels are no longer recognised (no collectives), and a warning per file
    # counts the kernels that lost their names
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["nccl"]["n_collectives"] for r in doc["ranks"]] == [0, 0]
    for f, n in counts.items():
        assert f"{run / f}: {n} kernel(s) have no name (a name id the string table lacks); communication (NCCL) kernels among them are not counted as such" in doc["warnings"], doc["warnings"]


def test_an_export_directory_edited_to_hold_impossible_numbers_says_so(tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    # GIVEN an export of the EAGLE run, reported as written, and a copy whose phases table was
    # edited: two phases' GPU times made negative, one phase's CPU end put before its start
    out, edited = tmp_path / "exp", tmp_path / "edited"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    as_written = run_cli("report", "--json", str(out))
    assert as_written.returncode == 0 and not any("never writes" in w for w in json.loads(as_written.stdout)["warnings"])
    shutil.copytree(out, edited)
    part = edited / "phases" / "rank=0" / "part-0.parquet"
    t = pq.read_table(part)
    gpu = t["gpu_ns"].to_pylist()
    gpu[0], gpu[1] = -gpu[0] - 1, -5
    cpu_end = t["cpu_end_ns"].to_pylist()
    cpu_end[2] = t["cpu_start_ns"][2].as_py() - 1
    cycle = t["cycle"].to_pylist()
    cycle[3] = -1  # (a phase in no cycle is written with a null cycle)
    t = t.set_column(t.schema.get_field_index("gpu_ns"), "gpu_ns", pa.array(gpu, pa.int64()))
    t = t.set_column(t.schema.get_field_index("cpu_end_ns"), "cpu_end_ns", pa.array(cpu_end, pa.int64()))
    t = t.set_column(t.schema.get_field_index("cycle"), "cycle", pa.array(cycle, t.schema.field("cycle").type))
    pq.write_table(t, part)
    assert pc.min(t["error_ns"]).as_py() < 0  # (a negative error is a number tracerecon writes)
    # WHEN reported THEN the numbers are read as they are (exit 0), and a warning per edited
    # column says how many rows hold what tracerecon never writes
    res = run_cli("report", "--json", str(edited))
    assert res.returncode == 0, res.stderr
    said = [w for w in json.loads(res.stdout)["warnings"] if "never writes" in w]
    assert said == [f"{part}: 1 row(s) of cycle below zero, which tracerecon never writes (the file was changed since): read as they are",
                    f"{part}: 1 row(s) with cpu_end_ns before cpu_start_ns, which tracerecon never writes (the file was changed since): read as they are",
                    f"{part}: 2 row(s) of gpu_ns below zero, which tracerecon never writes (the file was changed since): read as they are"], said


def test_an_export_directory_missing_a_table_says_so(tmp_path):
    # GIVEN an export directory whose phases dataset was deleted
    out = tmp_path / "exp"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    shutil.rmtree(out / "phases")
    # WHEN reported THEN a warning names the missing table
    res = run_cli("report", str(out))
    assert res.returncode == 0 and "phases of rank 0 is missing (72 row(s) written)" in res.stderr, res.stderr


def test_an_export_directory_missing_its_critical_path_says_so(tmp_path):
    # GIVEN the export of a two-rank run whose critical path (one table for the run) was deleted
    out = tmp_path / "exp"
    assert run_cli("export", str(DEMO2 / "nccl_skew"), "-o", str(out)).returncode == 0
    rows = json.loads((out / "manifest.json").read_text())["tables"]["critical_path"]["rows"]
    shutil.rmtree(out / "critical_path")
    # WHEN reported THEN a warning names it (the straggler line it fed is gone)
    res = run_cli("report", str(out))
    assert rows > 0 and res.returncode == 0 and f"critical_path is missing ({rows} row(s) written)" in res.stderr, res.stderr


def test_scrub_reads_an_xz_export_as_every_command_does(tmp_path):
    # GIVEN a run directory's compressed export WHEN scrubbed without -o THEN a plain scrubbed
    # SQLite file in the current directory, and nothing new beside the input
    src = next((H200.parent / "demo_shapes_h200x2" / "overlap_gpu_bound").glob("*.sqlite.xz"))
    (tmp_path / "in").mkdir()
    (tmp_path / "here").mkdir()
    shutil.copy(src, tmp_path / "in" / src.name)
    res = run_cli("scrub", str(tmp_path / "in" / src.name), cwd=str(tmp_path / "here"))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "here" / "report.scrubbed.sqlite"
    assert out.read_bytes()[:16] == b"SQLite format 3\x00"
    assert [p.name for p in (tmp_path / "in").iterdir()] == [src.name]
    assert run_cli("report", str(out)).returncode == 0
    # and WHEN the output is named .xz THEN it is compressed, and reads as the plain copy does
    res = run_cli("scrub", str(tmp_path / "in" / src.name), "-o", str(tmp_path / "here" / "s.sqlite.xz"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "here" / "s.sqlite.xz").read_bytes()[:6] == b"\xfd7zXZ\x00"
    assert run_cli("report", "--json", str(tmp_path / "here" / "s.sqlite.xz")).stdout == run_cli("report", "--json", str(out)).stdout.replace(
        str(out), str(tmp_path / "here" / "s.sqlite.xz"))
    assert sorted(p.name for p in (tmp_path / "here").iterdir()) == ["report.scrubbed.sqlite", "s.sqlite.xz"]


def test_scrub_never_writes_over_a_device_a_pipe_a_link_or_the_input_under_another_name(tmp_path):
    # GIVEN outputs that are no plain file, or the input by a hard link (a review found scrub, run
    # as root, replaced /dev/full with a file)
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere.sqlite")
    os.link(src, tmp_path / "hard.sqlite")
    for out in ("fifo", "link", "hard.sqlite"):
        # WHEN scrubbed to it THEN one line, exit 2, and it is as it was
        res = run_cli("scrub", str(src), "-o", str(tmp_path / out))
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, (out, res.stderr)
    assert (tmp_path / "fifo").is_fifo() and (tmp_path / "link").is_symlink() and os.path.samefile(src, tmp_path / "hard.sqlite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "hard.sqlite", "link", "t.sqlite"]
    # and a device of its own (where this user may make one: /dev/full's numbers)
    import stat

    try:
        os.mknod(tmp_path / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except (PermissionError, OSError):
        return
    res = run_cli("scrub", str(src), "-o", str(tmp_path / "full"))
    assert res.returncode == 2 and stat.S_ISCHR(os.lstat(tmp_path / "full").st_mode), res.stderr


def test_scrub_without_o_never_replaces_a_copy_already_there(tmp_path):
    # GIVEN two runs' exports of the same name (nsys names them alike: report.sqlite)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", tmp_path / run / "report.sqlite")
    (tmp_path / "here").mkdir()
    assert run_cli("scrub", str(tmp_path / "a" / "report.sqlite"), cwd=str(tmp_path / "here")).returncode == 0
    first = (tmp_path / "here" / "report.scrubbed.sqlite").read_bytes()
    # WHEN the second is scrubbed without -o THEN one line, exit 2, and the first copy stays
    res = run_cli("scrub", str(tmp_path / "b" / "report.sqlite"), cwd=str(tmp_path / "here"))
    assert res.returncode == 2 and "exists; scrub never writes over a file" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert (tmp_path / "here" / "report.scrubbed.sqlite").read_bytes() == first


@pytest.mark.parametrize("target", ["other.sqlite", "run.json", "notes.txt"])
def test_scrub_o_never_replaces_a_file_already_there(target, tmp_path):
    # GIVEN a run directory holding another rank's unscrubbed export and its run.json, and a
    # file of notes (each was replaced by the scrubbed copy without a word)
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", tmp_path / "other.sqlite")
    (tmp_path / "run.json").write_text('{"reports": []}\n')
    (tmp_path / "notes.txt").write_text("notes\n")
    before = (tmp_path / target).read_bytes()
    # WHEN scrubbed with -o naming it THEN one line, exit 2, and it is as it was
    res = run_cli("scrub", str(src), "-o", str(tmp_path / target))
    assert res.returncode == 2 and res.stderr == f"tracerecon: error: {tmp_path / target}: exists; scrub never writes over a file: choose another -o (or remove it first)\n"
    assert (tmp_path / target).read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_skipping_every_cycle_is_warned_about():
    # GIVEN the README's trace (24 cycles) WHEN 1000 are to be skipped THEN a warning, exit 0
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), "--skip-cycles", "1000")
    assert res.returncode == 0 and "--skip-cycles 1000 leaves out all of its 24 cycle(s)" in res.stderr, res.stderr


def test_an_unreadable_run_json_is_said(tmp_path):
    # GIVEN a run directory whose run.json is not JSON WHEN reported THEN a warning names it, exit 0
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", tmp_path / "t.sqlite")
    (tmp_path / "run.json").write_text("{not json")
    res = run_cli("report", str(tmp_path))
    assert res.returncode == 0 and "run.json: unreadable" in res.stderr, res.stderr


def test_an_export_directory_given_as_input_is_not_replaced_by_its_own_export(tmp_path):
    # GIVEN an export directory runs/e1 WHEN exported again into runs (--force) or into itself
    runs = tmp_path / "runs"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(runs / "e1")).returncode == 0
    before = sorted(p.name for p in (runs / "e1").iterdir())
    for out in (runs, runs / "e1"):
        res = run_cli("export", str(runs / "e1"), "-o", str(out), "--force")
        # THEN refused, and the input export is still whole
        assert_one_line_error(res, "holds the input")
        assert sorted(p.name for p in (runs / "e1").iterdir()) == before


def test_a_timeline_is_not_written_over_another_trace(tmp_path):
    # GIVEN rank 0's export, and rank 1's beside it, plain and compressed, and an older timeline
    import lzma

    rank1 = tmp_path / "rank1.sqlite"
    shutil.copy(DEMO2 / "nccl_gpu_bound" / "rank1.sqlite", rank1)
    packed = tmp_path / "rank1.sqlite.xz"
    packed.write_bytes(lzma.compress(rank1.read_bytes()[:65536], preset=0))
    old = tmp_path / "old.json"
    old.write_text("{}")
    before = rank1.read_bytes(), packed.read_bytes()
    # WHEN rank 0's timeline is exported with -o naming rank 1's trace (a slip of the keyboard)
    for out in (rank1, packed):
        for fmt in ("chrome-json", "perfetto"):
            res = run_cli("export", str(DEMO2 / "nccl_gpu_bound" / "rank0.sqlite"), "--format", fmt, "-o", str(out))
            # THEN refused in one line, and the trace is as it was
            assert_one_line_error(res, "holds a trace; a timeline is not written over it")
    assert (rank1.read_bytes(), packed.read_bytes()) == before
    # and a file that is no trace is replaced, as cp would
    res = run_cli("export", str(DEMO2 / "nccl_gpu_bound" / "rank0.sqlite"), "--format", "chrome-json", "-o", str(old))
    assert res.returncode == 0 and len(json.loads(old.read_text())) > 1, res.stderr


def test_an_output_a_folder_given_as_input_is_read_with_is_refused(tmp_path):
    # GIVEN a run directory (a preset's phases in run.json) and an export directory of it
    run = tmp_path / "run"
    shutil.copytree(H200.parent / "engines_h200" / "vllm_v1", run)
    exp = tmp_path / "exp"
    assert run_cli("export", str(run), "-o", str(exp)).returncode == 0
    before = {p: p.read_bytes() for p in [*run.rglob("*"), *exp.rglob("*")] if p.is_file()}
    # WHEN a timeline, a picture or an export is written over a file either is read with
    refused = [("export", str(run), "-o", str(run / "run.json")),  # .json: a chrome-json timeline
               ("export", str(run), "--format", "chrome-json", "-o", str(run / "report.sqlite")),  # read before report.sqlite.xz
               ("export", str(run), "--format", "chrome-json", "-o", str(run / "cpu_timers.rank0.jsonl")),
               ("export", str(exp), "-o", str(exp / "manifest.json")),
               ("export", str(exp), "-o", str(exp / "timeline.json")),
               ("plot", str(exp), "-o", str(exp / "phases" / "a.png"))]
    for argv in refused:
        # THEN refused in one line, and both folders are as they were
        assert_one_line_error(run_cli(*argv), "is read as part of the input")
    assert {p: p.read_bytes() for p in [*run.rglob("*"), *exp.rglob("*")] if p.is_file()} == before
    # and a file the run directory is not read with is written there
    res = run_cli("export", str(run), "-o", str(run / "timeline.json"))
    assert res.returncode == 0 and (run / "timeline.json").is_file(), res.stderr
    # (and the run still reads with its recorded phases)
    assert [p["phase"] for p in json.loads(run_cli("report", "--json", str(run)).stdout)["ranks"][0]["phases"]] == ["draft", "verify"]


@pytest.mark.parametrize("command", [("report",), ("ranges",), ("scrub",), ("diff", str(H200 / "eagle_gpu_bound.sqlite"))])
def test_a_schema_byte_that_is_no_utf8_is_refused_in_one_line(command, tmp_path):
    # GIVEN an export whose schema text has one byte damaged into one that is no UTF-8 (SQLite's
    # "malformed schema" message then quotes it, and Python failed to decode that message)
    data = bytearray((H200 / "eagle_gpu_bound.sqlite").read_bytes())
    at = data.find(b"NOT NULL", data.find(b"CREATE TABLE"))
    data[at + 4] = 0xA6  # "NOT \xa6ULL": a syntax error (a word in its place would read as the column's type)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    # WHEN any command reads it THEN one line names the file, exit 2 (not an internal error)
    res = run_cli(command[0], str(bad), *command[1:], cwd=tmp_path)
    assert_one_line_error(res, "unreadable SQLite file (malformed schema")


def test_a_timeline_never_replaces_what_another_folder_is_read_with(tmp_path):
    # GIVEN a run directory and an export directory, neither of them the input
    run = tmp_path / "run"
    shutil.copytree(H200.parent / "engines_h200" / "vllm_v1", run)
    exp = tmp_path / "exp"
    assert run_cli("export", str(run), "-o", str(exp)).returncode == 0
    (run / "cpu_timers.rank0.jsonl").write_text("")
    before = {p: p.read_bytes() for p in [*run.rglob("*"), *exp.rglob("*")] if p.is_file()}
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    # WHEN another trace's timeline is written over the export's manifest, the run's run.json or
    #      its engine timers (the README's "-o DIR/manifest.json" slip)
    for out in (exp / "manifest.json", exp / "cycles" / "rank=0" / "part-0.parquet", run / "run.json", run / "cpu_timers.rank0.jsonl"):
        res = run_cli("export", trace, "--format", "chrome-json", "-o", str(out))
        # THEN refused in one line, and both folders are as they were and still read
        assert_one_line_error(res, "is read as part of the tracerecon ")
    assert {p: p.read_bytes() for p in [*run.rglob("*"), *exp.rglob("*")] if p.is_file()} == before
    assert run_cli("report", "--json", str(exp)).returncode == 0
    # and a new file of the export's folder is written (a timeline beside the tables), and
    #      written again; so is a timeline named run.json in a folder no run wrote, twice
    for out in (exp / "timeline.json", exp / "timeline.json", tmp_path / "run.json", tmp_path / "run.json"):
        res = run_cli("export", trace, "-o", str(out))
        assert res.returncode == 0 and out.is_file(), res.stderr


def test_ranks_missing_from_a_run_directory_are_said(tmp_path):
    # GIVEN a two-rank run directory whose run.json lists rank1.sqlite, which is gone
    run = tmp_path / "run"
    shutil.copytree(DEMO2 / "nccl_gpu_bound", run)
    (run / "rank1.sqlite").unlink()
    # WHEN reported
    res = run_cli("report", "--json", "--no-cache", str(run))
    # THEN the one rank there is reported, and a warning says what run.json listed that is not there
    assert res.returncode == 0, res.stderr
    import json

    doc = json.loads(res.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0]
    assert any("lists 2 exports, 1 of them not there (rank1.sqlite)" in w for w in doc["warnings"]), doc["warnings"]


def test_a_folder_of_plain_and_compressed_exports_gives_every_rank(tmp_path):
    # GIVEN a folder (no run.json) with rank0.sqlite beside a compressed rank1.sqlite.xz
    import lzma

    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(DEMO2 / "nccl_gpu_bound" / "rank0.sqlite", d / "rank0.sqlite")
    (d / "rank1.sqlite.xz").write_bytes(lzma.compress((DEMO2 / "nccl_gpu_bound" / "rank1.sqlite").read_bytes(), preset=0))
    # WHEN reported THEN both ranks are, as from the plain run directory
    import json

    got = json.loads(run_cli("report", "--json", "--no-cache", str(d)).stdout)
    want = json.loads(run_cli("report", "--json", "--no-cache", str(DEMO2 / "nccl_gpu_bound")).stdout)
    assert [r["rank"] for r in got["ranks"]] == [0, 1]
    assert [[(p["phase"], p["gpu_ms_median"]) for p in r["phases"]] for r in got["ranks"]] == [[(p["phase"], p["gpu_ms_median"]) for p in r["phases"]] for r in want["ranks"]]


def test_hidden_files_and_folders_named_like_exports_are_left_out_of_a_folder_and_said(tmp_path):
    # GIVEN a folder (no run.json) of two ranks copied from a Mac: beside each export the
    # resource fork macOS writes (._rank0.sqlite, not SQLite), and a sub-folder old.sqlite
    d = tmp_path / "d"
    d.mkdir()
    for name in ("rank0.sqlite", "rank1.sqlite"):
        shutil.copy(DEMO2 / "nccl_gpu_bound" / name, d / name)
        (d / f"._{name}").write_bytes(b"\x00\x05\x16\x07" + bytes(4092))
    (d / "old.sqlite").mkdir()
    (d / "node1").mkdir()  # another node's ranks, in a folder of their own
    shutil.copy(DEMO2 / "nccl_gpu_bound" / "rank0.sqlite", d / "node1" / "rank2.sqlite")
    (d / "notes").mkdir()  # a folder of no exports: nothing to say
    # WHEN reported (cached), THEN both ranks are, and a warning names what was not read and why
    res = run_cli("report", "--json", str(d))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    said = [w for w in doc["warnings"] if "not read as ranks" in w]
    assert said == [f"{d}: 4 name(s) not read as ranks: ._rank0.sqlite (hidden), ._rank1.sqlite (hidden), old.sqlite (a folder), "
                    "node1/ (a folder of exports: give it as an input too)"], doc["warnings"]
    # WHEN they are removed and the report asked again (from the cache) THEN the warning is gone
    for f in ("._rank0.sqlite", "._rank1.sqlite"):
        (d / f).unlink()
    (d / "old.sqlite").rmdir()
    shutil.rmtree(d / "node1")
    again = run_cli("report", "--json", str(d))
    assert again.returncode == 0 and not any("not read as ranks" in w for w in json.loads(again.stdout)["warnings"]), again.stdout
    assert json.loads(again.stdout)["ranks"] == doc["ranks"]
    # GIVEN a folder holding only such names WHEN reported THEN one line, naming them, and exit 2
    e = tmp_path / "e"
    e.mkdir()
    (e / "._rank0.sqlite").write_bytes(bytes(4096))
    (e / "x.sqlite").mkdir()
    assert_one_line_error(run_cli("report", str(e)), "directory holds no .sqlite exports (not read: ._rank0.sqlite (hidden), x.sqlite (a folder))")


def test_a_hot_rollback_journal_beside_the_input_is_said_and_left_alone(tmp_path):
    # GIVEN an export whose writer stopped mid-transaction: its changed pages are in the file,
    # the journal to roll them back lies beside it
    import subprocess
    import sys

    p = tmp_path / "h.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", p)
    crash = ("import os, sqlite3, sys; con = sqlite3.connect(sys.argv[1], isolation_level=None); con.execute('pragma cache_size=1'); "
             "con.execute('begin'); con.execute('update CUPTI_ACTIVITY_KIND_KERNEL set end = end + 500000 where rowid % 3 = 0'); os._exit(0)")
    subprocess.run([sys.executable, "-c", crash, str(p)], check=True)
    journal = tmp_path / "h.sqlite-journal"
    before = (p.read_bytes(), journal.read_bytes())
    # WHEN reported
    res = run_cli("report", "--json", "--no-cache", str(p))
    # THEN a warning says the file may be half-written, and neither file is touched
    assert res.returncode == 0, res.stderr
    import json

    assert any("rollback journal (h.sqlite-journal)" in w for w in json.loads(res.stdout)["warnings"])
    assert (p.read_bytes(), journal.read_bytes()) == before


def test_a_directory_that_cannot_be_read_is_said_to_be_so(tmp_path):
    # GIVEN a directory of exports without permissions (for root too: its capabilities to pass
    # them dropped)
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux) to drop the permission overrides")
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", d / "t.sqlite")
    d.chmod(0)
    try:
        import subprocess
        import sys
        from pathlib import Path

        exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
        res = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", exe, "report", "--no-cache", str(d)],
                             capture_output=True, text=True, timeout=120)
    finally:
        d.chmod(0o755)
    # THEN one line that says the directory cannot be read (not that an output cannot be written)
    assert_one_line_error(res, "cannot read the directory (Permission denied)")


@pytest.mark.parametrize("sql", [
    "update NVTX_EVENTS set text = NULL where text = 'verify' and rowid % 3 = 0",
    "update NVTX_EVENTS set text = NULL, textId = 999999 where text = 'verify' and rowid % 3 = 0",
])
def test_ranges_that_lost_their_names_are_counted(tmp_path, sql):
    # GIVEN some verify ranges with no text, or a text id the string table lacks
    p = edited_copy(tmp_path, sql)
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    ((lost,),) = con.execute("select count(*) from NVTX_EVENTS where eventType = 59 and text is null").fetchall()
    con.close()
    assert lost > 0
    # WHEN reported THEN a warning counts them (they can be no phase), exit 0
    res = run_cli("report", "--json", "--no-cache", str(p))
    assert res.returncode == 0, res.stderr
    import json

    assert any(f"{lost} NVTX range(s) have no name" in w for w in json.loads(res.stdout)["warnings"])


def test_a_range_pushed_and_never_popped_mid_run_is_named(tmp_path):
    # GIVEN cycle 1's verify range left open (a push without its pop): every later range of its
    # thread lies inside it
    p = edited_copy(tmp_path, "update NVTX_EVENTS set end = NULL where rowid = (select rowid from NVTX_EVENTS where text = 'verify' order by start limit 1 offset 1)")
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    ((start, later),) = con.execute("select o.start, (select count(*) from NVTX_EVENTS n where n.globalTid = o.globalTid and n.start > o.start "
                                    "and n.eventType in (59, 60)) from NVTX_EVENTS o where o.end is null and o.eventType = 59").fetchall()
    con.close()
    # WHEN reported THEN a warning names it, when it opened and how many ranges it swallows, exit 0
    res = run_cli("report", "--json", "--no-cache", str(p))
    assert res.returncode == 0, res.stderr
    import json

    assert any("the range 'verify'" in w and f"opened at {start} ns" in w and f"{later} range(s) of its thread begin after it" in w
               for w in json.loads(res.stdout)["warnings"])


def test_a_phase_thread_that_holds_no_phase_is_said(tmp_path):
    # GIVEN the README's trace, whose phases are all on one thread (nsys's NVTX table)
    con = sqlite3.connect(f"file:{H200 / 'eagle_gpu_bound.sqlite'}?mode=ro", uri=True)
    threads = [t for (t,) in con.execute("select distinct globalTid & 16777215 from NVTX_EVENTS where text = 'verify'")]
    con.close()
    # WHEN reported with --phase-thread naming a thread that is not that one
    res = run_cli("report", "--json", "--no-cache", "--phase-thread", "99999999", str(H200 / "eagle_gpu_bound.sqlite"))
    # THEN a warning says so and names the phases' thread, exit 0
    assert res.returncode == 0, res.stderr
    import json

    assert any(f"--phase-thread 99999999: no phase range is on that thread (the phases are on thread(s) {threads[0]})" in w
               for w in json.loads(res.stdout)["warnings"]) and len(threads) == 1


def test_an_export_schema_of_another_major_version_is_warned_of(tmp_path):
    # GIVEN the README's trace as if exported by a future nsys with schema 99.1
    p = edited_copy(tmp_path, "update META_DATA_EXPORT set value = '99.1.0' where name = 'EXPORT_SCHEMA_VERSION'")
    # WHEN reported THEN read (same numbers), with a warning naming the schema
    import json

    res, want = run_cli("report", "--json", "--no-cache", str(p)), run_cli("report", "--json", "--no-cache", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert any("export schema 99.1.0" in w and "is not the 3.x tracerecon reads" in w for w in doc["warnings"])
    assert [r["phases"] for r in doc["ranks"]] == [r["phases"] for r in json.loads(want.stdout)["ranks"]]


def test_a_run_directory_whose_listed_exports_are_all_gone_says_what_it_reads_instead(tmp_path):
    # GIVEN a run directory whose run.json lists rank0 and rank1, both gone, and a stray export
    run = tmp_path / "run"
    shutil.copytree(DEMO2 / "nccl_gpu_bound", run)
    shutil.move(run / "rank0.sqlite", run / "old_attempt.sqlite")
    (run / "rank1.sqlite").unlink()
    # WHEN reported THEN the stray export is read, and a warning says the listed ones are gone
    res = run_cli("report", "--json", "--no-cache", str(run))
    assert res.returncode == 0, res.stderr
    import json

    warnings = json.loads(res.stdout)["warnings"]
    assert any("lists 2 exports, 2 of them not there (rank0.sqlite, rank1.sqlite): the report reads the other exports" in w for w in warnings), warnings


def test_a_file_output_that_is_a_pipe_or_a_link_is_refused(tmp_path):
    # GIVEN a named pipe, and a link to a file, where a timeline or a picture would go
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    target = tmp_path / "target.json"
    target.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    # WHEN exported there as a timeline, or plotted there
    for argv in (["export", trace, "--format", "chrome-json", "-o", str(pipe)], ["export", trace, "--format", "chrome-json", "-o", str(link)],
                 ["export", trace, "--format", "chrome-json", "-o", str(tmp_path)]):
        res = run_cli(*argv)
        # THEN refused in one line, exit 2, the pipe still a pipe and the link still a link to its file
        assert_one_line_error(res, "give the path of a file to write")
    import stat

    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and link.is_symlink() and target.read_text() == "keep"
    svg_pipe = tmp_path / "pic.svg"
    os.mkfifo(svg_pipe)
    assert_one_line_error(run_cli("plot", trace, "-o", str(svg_pipe)), "give the path of a file to write")
    assert stat.S_ISFIFO(os.stat(svg_pipe).st_mode)


@pytest.mark.parametrize("argv, needle", [
    (["export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", ""], "argument -o/--output: expected a path, got nothing"),
    (["scrub", str(H200 / "eagle_gpu_bound.sqlite"), "-o", " "], "argument -o/--output: expected a path, got nothing"),
    (["report", str(H200 / "eagle_gpu_bound.sqlite"), "--dask", ""], "argument --dask: expected a scheduler address"),
])
def test_an_empty_output_or_scheduler_is_refused_before_anything_is_written(tmp_path, argv, needle):
    # GIVEN an empty -o (the current directory, where a failed export left a hidden folder) or
    # --dask (which a cached report never asked for)
    # WHEN run in an empty folder THEN one line, exit 2, and the folder stays empty
    res = run_cli(*argv, cwd=tmp_path)
    assert_one_line_error(res, needle)
    assert list(tmp_path.iterdir()) == []


def test_errors_about_the_output_name_the_output(tmp_path):
    # GIVEN outputs that cannot be written: a timeline under a plain file, a scrubbed copy in /proc
    blocker = tmp_path / "afile"
    blocker.write_text("")
    src = str(H200 / "eagle_gpu_bound.sqlite")
    # WHEN exported or scrubbed there THEN the line names the output the user gave, not the input
    # nor a hidden temporary file
    assert_one_line_error(run_cli("export", src, "-o", str(blocker / "x.json")), f"{blocker / 'x.json'}: cannot write")
    res = run_cli("scrub", src, "-o", "/proc/x.sqlite")
    assert_one_line_error(res, "/proc/x.sqlite: cannot write")
    assert "eagle_gpu_bound" not in res.stderr


def test_an_export_directory_given_with_other_traces_is_said_so(tmp_path):
    # GIVEN an export directory, which reads back alone
    src = str(H200 / "eagle_gpu_bound.sqlite")
    assert run_cli("export", src, "-o", str(tmp_path / "exp")).returncode == 0
    # WHEN given with a trace THEN the line says why, not that the folder holds no exports
    assert_one_line_error(run_cli("report", str(tmp_path / "exp"), src), "a tracerecon export is read back alone")


@pytest.mark.parametrize("table, what", [("CUPTI_ACTIVITY_KIND_KERNEL", "GPU op"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA API call")])
def test_rows_an_export_holds_twice_are_dropped_with_a_warning(tmp_path, table, what):
    # GIVEN the README's trace with every row of its kernel (or runtime-call) table written twice
    count = f"select count(*) from {table}"
    once = sqlite3.connect(f"file:{H200 / 'eagle_gpu_bound.sqlite'}?mode=ro", uri=True).execute(count).fetchone()[0]
    p = edited_copy(tmp_path, f"insert into {table} select * from {table}")
    assert sqlite3.connect(p).execute(count).fetchone()[0] == 2 * once
    n = once if what == "GPU op" else None  # (runtime calls: only those that launch or wait are read)
    # WHEN reported
    res = run_cli("report", "--json", str(p))
    orig = run_cli("report", "--json", str(H200 / "eagle_gpu_bound.sqlite"))
    # THEN the numbers are those of the trace as written once (a doubled kernel doubled every
    # phase's kernel count, a doubled call its blocking waits), and a warning says so
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stderr.splitlines() if "duplicated" in ln]
    assert len(line) == 1 and f"duplicated {what} row(s)" in line[0] and (n is None or f"dropped {n} " in line[0]), res.stderr
    ranks = [json.loads(out.stdout)["ranks"] for out in (res, orig)]
    for r in ranks[0] + ranks[1]:
        r.pop("source")
    assert ranks[0] == ranks[1]


def test_engine_timer_lines_that_are_no_timing_are_counted_not_read(tmp_path):
    # GIVEN a trace beside its engine's timer file: two good verify lines, a negative time, a line
    # that is no JSON and one with no phase
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", tmp_path / "report.sqlite")
    (tmp_path / "cpu_timers.rank0.jsonl").write_text(
        '{"rank": 0, "phase": "verify", "cpu_ms": 0.5}\n{"rank": 0, "phase": "verify", "cpu_ms": 0.6}\n'
        '{"rank": 0, "phase": "verify", "cpu_ms": -900}\ngarbage line\n{"rank": 0, "cpu_ms": 1}\n\n'
        '{"rank": 0, "phase": "verify", "cpu_ms": "5"}\n{"rank": 0, "phase": "verify", "cpu_ms": true}\n'
        '{"rank": "0", "phase": "verify", "cpu_ms": 1}\n{"rank": 0, "phase": "verify", "cpu_ms": 1, "cycle": true}\n')
    # WHEN reported, twice (the second from the cache)
    for _ in range(2):
        res = run_cli("report", "--json", str(tmp_path / "report.sqlite"), env=dict(os.environ, TRACERECON_NO_CACHE="0"))
        # THEN the engine's median is that of the two good lines, and one warning counts the other
        # seven (a text or true where a number belongs was read as 5 or 1 ms before)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        verify = next(p for p in doc["ranks"][0]["phases"] if p["phase"] == "verify")
        assert verify["engine_cpu_ms_median"] == 0.55
        said = [w for w in doc["warnings"] if "cpu_timers.rank0.jsonl" in w]
        assert len(said) == 1 and "7 engine timer line(s) not read" in said[0], doc["warnings"]


@pytest.mark.parametrize("which", ["manifest", "run.json", "timers"])
def test_a_fifo_where_tracerecon_reads_a_small_file_is_not_waited_on(which, tmp_path):
    # GIVEN an export directory whose manifest.json, a run directory whose run.json, or a trace
    # whose engine timer file is a FIFO (opening one to read waits for a writer: each hung)
    if which == "manifest":
        target = tmp_path / "exp"
        assert run_cli("export", "-o", str(target), str(H200 / "eagle_gpu_bound.sqlite")).returncode == 0
        (target / "manifest.json").unlink()
        os.mkfifo(target / "manifest.json")
    else:
        target = tmp_path / "run"
        target.mkdir()
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", target / "report.sqlite")
        os.mkfifo(target / ("run.json" if which == "run.json" else "cpu_timers.rank0.jsonl"))
    # WHEN reported (with a time limit) THEN it ends: the export refused in one line (exit 2),
    # the run directory read as a folder of exports, the timer file said not read
    res = run_cli("report", str(target), env=dict(os.environ, TRACERECON_NO_CACHE="1"), timeout=120)
    if which == "manifest":
        assert res.returncode == 2 and res.stderr == f"tracerecon: error: {target}: holds a tracerecon export's tables, but its manifest.json is not a regular file\n"
    else:
        assert res.returncode == 0 and "verify" in res.stdout, res.stderr
    if which == "timers":
        assert "cpu_timers.rank0.jsonl: engine timer file not read (not a regular file)" in res.stderr, res.stderr


@pytest.mark.parametrize("number", ["abc", "\u00b2"], ids=["letters", "superscript-two"])
def test_settings_tracerecon_cannot_use_are_said_and_ignored(number):
    # GIVEN an unknown reader, a cache cap and a thread count that are no numbers (a superscript
    # two is a digit to str.isdigit but no number to int)
    env = dict(os.environ, TRACERECON_READER="bogus", TRACERECON_CACHE_MB=number, TRACERECON_READ_THREADS="0")
    # WHEN reported
    res = run_cli("report", "--json", str(H200 / "eagle_gpu_bound.sqlite"), env=env)
    # THEN the report is made as without them, and one warning names each
    assert res.returncode == 0 and json.loads(res.stdout)["ranks"]
    said = [ln for ln in res.stderr.splitlines() if "ignored" in ln]
    assert [ln.split("=")[0] for ln in said] == ["tracerecon: warning: TRACERECON_READER", "tracerecon: warning: TRACERECON_CACHE_MB",
                                                "tracerecon: warning: TRACERECON_READ_THREADS"], res.stderr


def test_a_damaged_export_that_fails_to_scrub_is_named_and_nothing_is_written(tmp_path):
    # GIVEN an export with 4 kB of its pages overwritten (it opens; its pages do not parse)
    p = tmp_path / "flip.sqlite"
    data = bytearray((H200 / "eagle_gpu_bound.sqlite").read_bytes())
    data[800_000:804_096] = b"\xff" * 4096
    p.write_bytes(bytes(data))
    # WHEN scrubbed THEN one line naming the input (not the output), exit 2, and no output file
    res = run_cli("scrub", str(p), "-o", str(tmp_path / "out.sqlite"))
    assert_one_line_error(res, f"{p}: scrub failed, the export is damaged")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["flip.sqlite"]


@pytest.mark.parametrize("table, column", [("META_DATA_EXPORT", "name"), ("StringIds", "id")])
def test_an_export_lacking_a_column_the_scrub_reads_is_named_not_the_output(table, column, tmp_path):
    import sqlite3

    # GIVEN an export one of whose tables lacks a column the scrub reads (renamed: an edited or
    # damaged export)
    p = tmp_path / "t.sqlite"
    p.write_bytes((H200 / "eagle_gpu_bound.sqlite").read_bytes())
    con = sqlite3.connect(p)
    con.execute(f"alter table {table} rename column {column} to {column}_x")
    con.commit()
    con.close()
    # WHEN scrubbed THEN one line naming the input (it named the output: "out.sqlite: cannot
    # write"), exit 2, and no output file
    res = run_cli("scrub", str(p), "-o", str(tmp_path / "out.sqlite"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"tracerecon: error: {p}: ") and f"no such column: {column}" in res.stderr, res.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.sqlite"]


def test_a_scrub_that_fails_on_the_outputs_side_names_the_output(monkeypatch, tmp_path):
    # GIVEN the output's disk filling up while the copy is scrubbed (SQLite's "database or disk
    # is full", an OperationalError like an I/O error, unlike a damaged page's SQLITE_CORRUPT)
    import sqlite3

    from tracerecon.errors import BadTraceError, TraceReconError
    from tracerecon.nsys import scrub

    def full(_tmp):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(scrub, "_scrub_in_place", full)
    out = tmp_path / "out.sqlite"
    # WHEN scrubbed THEN the error names the output, says nothing of a damaged input, and no file is left
    with pytest.raises(TraceReconError) as err:
        scrub.scrub_export(H200 / "eagle_gpu_bound.sqlite", out)
    assert not isinstance(err.value, BadTraceError)
    assert str(err.value) == f"{out}: scrub failed (database or disk is full)"
    assert list(tmp_path.iterdir()) == []


def test_an_export_directory_given_as_a_link_is_refused_not_replaced(tmp_path):
    # GIVEN -o naming a link to a folder (the export is renamed over DIR: the link itself would go)
    (tmp_path / "target").mkdir()
    (tmp_path / "L").symlink_to(tmp_path / "target")
    # WHEN exported THEN one line, exit 2, and the link and its folder are as they were
    res = run_cli("export", "-o", str(tmp_path / "L"), str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 2 and "is a link" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert (tmp_path / "L").is_symlink() and not any((tmp_path / "target").iterdir())


@pytest.mark.parametrize("flag, value", [("--phase", b"\xff=draft"), ("--phase", b"dr\xffaft"), ("--cycle", b"\xff")])
def test_a_phase_or_cycle_option_of_bytes_that_are_no_utf8_is_refused_in_one_line(flag, value):
    # GIVEN an option the shell passed as bytes that are not UTF-8 (a label of them was an
    # internal error, exit 1: Arrow takes only text)
    # WHEN reported THEN one line naming it, exit 2
    res = run_cli("report", flag, os.fsdecode(value), str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 2 and res.stderr.splitlines() == [f"tracerecon: error: {flag} {value.decode('ascii', 'backslashreplace')}: not UTF-8 text (a trace's names are)"], res.stderr


def test_names_a_terminal_cannot_encode_are_escaped_not_an_internal_error(tmp_path):
    # GIVEN a phase named with characters outside ASCII, and a stdout that takes ASCII only
    src = tmp_path / "u.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    with sqlite3.connect(src) as con:
        con.execute("update NVTX_EVENTS set text = 'vérify日本' where text = 'verify'")
    con.close()
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "TRACERECON_NO_CACHE": "1"}
    # WHEN each table is printed (exit 1, "UnicodeEncodeError", before) THEN the names read as escapes
    for args in (["ranges"], ["report", "--phase", "vérify日本"], ["diff", "--phase", "vérify日本", str(src)]):
        res = run_cli(*args, str(src), env=env)
        assert res.returncode == 0 and "v\\xe9rify\\u65e5\\u672c" in res.stdout, (args, res.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_stderr_that_cannot_be_written_loses_the_warnings_not_the_report_or_the_exit_status(tmp_path):
    import subprocess

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    bad = tmp_path / "text.sqlite"
    bad.write_text("hi\n")
    warns = ["report", "--skip-cycles", "1000", str(H200 / "eagle_gpu_bound.sqlite")]  # a warning says all cycles are left out
    env = {**os.environ, "TRACERECON_NO_CACHE": "1"}
    expected = subprocess.run([exe, *warns], capture_output=True, text=True, env=env)
    assert expected.returncode == 0 and expected.stderr and expected.stdout
    with open("/dev/full", "w") as full:
        # GIVEN stderr on a device that refuses every write
        # WHEN a trace with warnings is reported THEN its report as without (it was nothing, exit 1)
        got = subprocess.run([exe, *warns], stdout=subprocess.PIPE, stderr=full, text=True, env=env)
        assert (got.returncode, got.stdout) == (0, expected.stdout)
        # and WHEN the input is bad THEN exit 2 still (it was 1)
        assert subprocess.run([exe, "report", str(bad)], stdout=subprocess.PIPE, stderr=full, env=env).returncode == 2


def test_a_rank_whose_export_run_json_records_as_failed_is_named_not_silently_left_out(tmp_path):
    # GIVEN a two-rank run directory whose run.json records rank 1's export as failed
    src = DEMO2 / "nccl_skew"
    run = json.loads((src / "run.json").read_text())
    run["reports"][1].update(sqlite=None, error="nsys export failed (exit 1)")
    (tmp_path / "run.json").write_text(json.dumps(run))
    shutil.copy(src / "rank0.sqlite", tmp_path / "rank0.sqlite")
    # WHEN reported THEN rank 0's report, and a warning naming rank 1 and its error (it was silent)
    res = run_cli("report", str(tmp_path), env={**os.environ, "TRACERECON_NO_CACHE": "1"})
    assert res.returncode == 0 and [line.split()[:2] for line in res.stdout.splitlines() if line.startswith("rank ") and line.split()[1].isdigit()] == [["rank", "0"]]
    assert "run.json records 1 report(s) with no SQLite export, left out of this report: rank 1: nsys export failed (exit 1)" in res.stderr, res.stderr
    # and WHEN every report is recorded as failed but the exports were made by hand since THEN
    # both ranks are read, and no warning says any was left out
    for r in run["reports"]:
        r.update(sqlite=None, error="nsys export failed (exit 1)")
    (tmp_path / "run.json").write_text(json.dumps(run))
    shutil.copy(src / "rank1.sqlite", tmp_path / "rank1.sqlite")
    res = run_cli("report", str(tmp_path), env={**os.environ, "TRACERECON_NO_CACHE": "1"})
    assert res.returncode == 0 and [line.split()[:2] for line in res.stdout.splitlines() if line.startswith("rank ") and line.split()[1].isdigit()] == [["rank", "0"], ["rank", "1"]]
    assert "left out" not in res.stderr, res.stderr
    # and WHEN run.json's reports are no list THEN the exports are read as before (it was exit 1)
    (tmp_path / "run.json").write_text(json.dumps({**run, "reports": 3}))
    assert run_cli("report", str(tmp_path), env={**os.environ, "TRACERECON_NO_CACHE": "1"}).returncode == 0


def test_copies_made_while_a_stream_was_captured_raise_no_missing_table_warning():
    # GIVEN memset calls, and no memset op but graphs traced whole (calls made during a stream
    # capture put no op of their own in the trace: their work runs in the graph's records)
    import pyarrow as pa

    from tracerecon.analysis.columns import copy_calls_without_ops

    api = pa.table({"name": ["cudaMemsetAsync_v3020"] * 5 + ["cudaMemcpyAsync_v3020"]})
    # WHEN asked which kinds the trace lacks THEN none while a graph record is there
    assert copy_calls_without_ops(api, pa.table({"kind": ["kernel", "graph", "memcpy"]})) == {}
    # and without one, the memsets (5 calls) and nothing else
    assert copy_calls_without_ops(api, pa.table({"kind": ["kernel", "memcpy"]})) == {"memset": 5}


@pytest.mark.parametrize("kind, damage", [("memcpy", "drop table CUPTI_ACTIVITY_KIND_MEMCPY"), ("memset", "delete from CUPTI_ACTIVITY_KIND_MEMSET")])
def test_copies_or_memsets_launched_but_missing_from_the_trace_are_said(kind, damage, tmp_path):
    # GIVEN the README's trace (24 cudaMemcpyAsync, 144 cudaMemsetAsync calls) with one table of
    # GPU ops dropped or emptied (its phases' GPU times then changed with no word)
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    with sqlite3.connect(src) as con:
        con.execute(damage)
    con.close()
    # WHEN reported THEN a warning says how many calls made that work, and that it is left out
    res = run_cli("report", str(src), env={**os.environ, "TRACERECON_NO_CACHE": "1"})
    calls = {"memcpy": 24, "memset": 144}[kind]
    assert res.returncode == 0 and f"{calls} {kind} call(s) but no {kind} in the trace (its {kind} table is missing or empty)" in res.stderr, res.stderr
    # and the trace as it was says nothing of it
    assert "call(s) but no" not in run_cli("report", str(H200 / "eagle_gpu_bound.sqlite")).stderr


@pytest.mark.parametrize("edit, said", [
    (lambda m: m.update(ranks=[]), "its manifest.json lists no rank"),
    (lambda m: m.update(warnings="abc"), "its manifest.json has 'warnings' other than a list of texts"),
    (lambda m: m["ranks"][1].update(rank=0), "its manifest.json numbers its ranks other than once each"),
    (lambda m: m["ranks"][1].update(rank=-3), "its manifest.json numbers its ranks other than once each, by whole numbers from 0"),
    (lambda m: m["ranks"][1].update(rank=2**70), "its manifest.json numbers its ranks other than once each, by whole numbers from 0"),
    (lambda m: m["ranks"][0].update(offset_ns=None), "its manifest.json gives rank 0 a 'offset_ns' other than a whole number"),
    (lambda m: m["ranks"][1].update(nccl="x"), "its manifest.json gives rank 1 no 'nccl' totals"),
    (lambda m: m["ranks"][0].update(pids=None), "its manifest.json gives rank 0 a 'pids' other than a list of whole numbers"),
    (lambda m: m["ranks"][0].update(engine_timers_ms=[1]), "its manifest.json gives rank 0 'engine_timers_ms' other than phase names with numbers"),
    (lambda m: m.update(skip_cycles="2"), "its manifest.json has 'skip_cycles' other than a whole number or null"),
])
def test_an_edited_export_manifest_is_refused_in_one_line_not_read_wrong(edit, said, tmp_path):
    # GIVEN a two-rank export whose manifest.json was edited (no rank read as an empty report,
    # a text of warnings as one warning a letter)
    out = tmp_path / "exp"
    assert run_cli("export", "-o", str(out), str(DEMO2 / "nccl_skew")).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    # WHEN reported THEN one line saying what is wrong, exit 2
    res = run_cli("report", str(out))
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and said in res.stderr, res.stderr


def test_an_export_rank_its_manifest_does_not_list_is_said_to_be_left_out(tmp_path):
    # GIVEN a two-rank export whose manifest lists rank 0 only
    out = tmp_path / "exp"
    assert run_cli("export", "-o", str(out), str(DEMO2 / "nccl_skew")).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["ranks"] = manifest["ranks"][:1]
    (out / "manifest.json").write_text(json.dumps(manifest))
    # WHEN reported THEN rank 0, and a warning that rank 1's files are left out (it was silent)
    res = run_cli("report", str(out))
    assert res.returncode == 0 and "parquet files of rank 1 are there but manifest.json does not list them: left out" in res.stderr, res.stderr


def test_an_export_rank_listed_without_its_tables_is_said(tmp_path):
    # GIVEN a two-rank export whose manifest also lists a rank 2 (a copy of rank 1's entry)
    # that has no parquet file at all (an empty rank 2 was shown with no word before)
    out = tmp_path / "exp"
    assert run_cli("export", "-o", str(out), str(DEMO2 / "nccl_skew")).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["ranks"].append({**manifest["ranks"][1], "rank": 2})
    (out / "manifest.json").write_text(json.dumps(manifest))
    # WHEN reported THEN a warning says so
    res = run_cli("report", str(out))
    assert res.returncode == 0 and "manifest.json lists rank 2, but none of its tables are there" in res.stderr, res.stderr


def test_an_export_given_twice_through_a_hard_link_is_refused_as_any_other_alias(tmp_path):
    # GIVEN one export and a hard link to it (read as two ranks of one run, with a warning, before)
    src = tmp_path / "a.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    os.link(src, tmp_path / "b.sqlite")
    # WHEN both are reported THEN one line naming them, exit 2, as for a symlink or another spelling
    res = run_cli("report", str(src), str(tmp_path / "b.sqlite"))
    assert res.returncode == 2 and "given twice" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr


def test_an_input_name_too_long_to_look_at_is_said_as_the_input_not_the_output(tmp_path):
    # GIVEN a trace path whose name the file system refuses (said as "cannot write the output" before)
    name = str(tmp_path / ("a" * 300 + ".sqlite"))
    for args in (["report", name], ["scrub", name]):
        # WHEN given THEN one line naming the input, exit 2
        res = run_cli(*args)
        assert res.returncode == 2 and res.stderr.startswith(f"tracerecon: error: cannot read {name} (") and len(res.stderr.splitlines()) == 1, res.stderr


@pytest.mark.parametrize("command", ["export", "plot", "scrub"])
def test_an_output_named_dash_is_refused_not_written_as_a_file_named_dash(command, tmp_path):
    # GIVEN -o - (standard output, by the usual convention; it was written as a file named '-')
    # WHEN given THEN one line, exit 2, and no file '-'
    res = run_cli(command, "-o", "-", str(H200 / "eagle_gpu_bound.sqlite"), cwd=str(tmp_path))
    assert res.returncode == 2 and "'-' (standard output) is not written to" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert not (tmp_path / "-").exists()


def test_scrub_of_an_input_with_a_write_ahead_log_says_its_changes_are_not_in_the_copy(tmp_path):
    # GIVEN an export whose last change sits in a write-ahead log beside it (the writer still open)
    path = tmp_path / "w.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("pragma journal_mode=wal")
    con.execute("pragma wal_autocheckpoint=0")
    assert con.execute("update StringIds set value = 'renamed' where id = (select min(id) from StringIds)").rowcount == 1
    con.commit()
    try:
        # WHEN scrubbed THEN the copy is written, and a warning says what every command says: the
        # log's changes are not read (the copy is of the file, never modified)
        res = run_cli("scrub", str(path), "-o", str(tmp_path / "s.sqlite"))
        assert res.returncode == 0 and f"{path}: a write-ahead log (w.sqlite-wal) lies beside it" in res.stderr, res.stderr
        assert run_cli("report", str(path)).stderr.count("write-ahead log") == 1
    finally:
        con.close()


def _edited_export(tmp_path, table, edit, source=None):
    """An export of ``source`` (the EAGLE run) whose ``table`` part of rank 0 went through ``edit``
    (a function of the pyarrow table) and was written back, as another tool would."""
    import pyarrow.parquet as pq

    out = tmp_path / "exp"
    assert run_cli("export", str(source or H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    part = out / table / ("part-0.parquet" if table == "critical_path" else "rank=0/part-0.parquet")
    pq.write_table(edit(pq.read_table(part)), part)
    return out, part


def _column_set(t, name, values):
    import pyarrow as pa

    return t.set_column(t.schema.get_field_index(name), name, pa.array(values, t.schema.field(name).type))


@pytest.mark.parametrize("table,edit,needle", [
    ("phases", lambda t: _column_set(t, "verdict", ["weird"] * t.num_rows), "verdict 'weird' is none of over, under, agree, no_gpu_work"),
    ("phases", lambda t: _column_set(t, "cause", [None] * t.num_rows), "cause None is none of async_tail"),
    ("phases", lambda t: _column_set(t, "phase", [None] * t.num_rows), "72 row(s) without phase"),
    ("critical_path", lambda t: _column_set(t, "waits_ns", ["{bad"] * t.num_rows), "waits_ns '{bad' is no JSON"),
    ("phases", lambda t: t.take(list(range(t.num_rows)) * 2), "its phase_id is not its row number"),
    ("phases", lambda t: _column_set(t, "gpu_busy_ns", [None] * t.num_rows), "72 row(s) without gpu_busy_ns"),
    ("gpu_ops", lambda t: _column_set(t, "name", [None] * t.num_rows), "1086 row(s) without name"),
    ("cycles", lambda t: _column_set(t, "cycle", [None] + t["cycle"].to_pylist()[1:]), "1 row(s) without cycle"),
    ("cycles", lambda t: _column_set(t, "warmup", [None] + t["warmup"].to_pylist()[1:]), "1 row(s) without warmup"),
], ids=["verdict", "cause", "phase", "waits", "phases twice", "amount", "kernel name", "cycle number", "warm-up flag"])
def test_an_export_directory_with_values_no_command_can_read_is_refused_naming_the_file(tmp_path, table, edit, needle):
    # GIVEN an export directory one of whose files another tool rewrote with values tracerecon
    # never writes and cannot read (a verdict of another word, phases without names, waits that
    # are no JSON)
    out, part = _edited_export(tmp_path, table, edit, DEMO2 / "nccl_skew" if table == "critical_path" else None)
    # WHEN reported, compared or plotted THEN one line naming the file and the value, exit 2
    for args in (("report", str(out)), ("report", "--json", str(out)), ("diff", str(out), str(H200 / "eagle_gpu_bound.sqlite"))):
        assert_one_line_error(run_cli(*args), f"{part}: not the {table} table of a tracerecon export ({needle}")


def test_an_export_directory_with_rows_given_twice_or_taken_away_says_so(tmp_path):
    import pyarrow as pa

    # GIVEN an export whose cycles were written twice over (two files joined), one whose phases
    # file was emptied, and one with another file beside a part
    doubled, part = _edited_export(tmp_path / "a", "cycles", lambda t: pa.concat_tables([t, t]))
    emptied, empty_part = _edited_export(tmp_path / "b", "phases", lambda t: t.slice(0, 0))
    extra, extra_part = _edited_export(tmp_path / "c", "cycles", lambda t: t)
    (extra_part.parent / "part-1.parquet").write_bytes(extra_part.read_bytes())
    # WHEN reported THEN the numbers are read as they are, and warnings say what changed
    res = run_cli("report", str(doubled))
    assert res.returncode == 0, res.stderr
    assert f"{part}: 48 row(s) where manifest.json says 24 were written" in res.stderr
    assert f"{part}: 24 row(s) repeat the cycle of another, which tracerecon never writes" in res.stderr
    res = run_cli("report", str(emptied))
    assert res.returncode == 0 and f"{empty_part}: 0 row(s) where manifest.json says 72 were written" in res.stderr, res.stderr
    ops = emptied / "gpu_ops" / "rank=0" / "part-0.parquet"
    assert f"{ops}: 1032 row(s) whose phase_id names no phase of rank 0 (it has 0): read as in no phase" in res.stderr, res.stderr
    assert run_cli("diff", str(emptied), str(H200 / "eagle_gpu_bound.sqlite")).returncode == 0
    res = run_cli("report", str(extra))
    assert res.returncode == 0 and f"{extra_part.parent}: part-1.parquet beside part-0.parquet, which tracerecon does not write: not read" in res.stderr, res.stderr


def test_an_export_phase_in_a_cycle_the_rank_lacks_is_read_in_no_cycle_and_said(tmp_path):
    import json

    # GIVEN an export of the README's engine whose phases file another tool rewrote: the first
    # phase (the warm-up cycle's draft) numbered in cycle 999999, which the rank lacks
    out, part = _edited_export(tmp_path, "phases", lambda t: _column_set(t, "cycle", [999999] + t["cycle"].to_pylist()[1:]))
    # WHEN reported THEN one warning names the file and the row, and the phase counts in no
    # cycle: the report's numbers are those of the unchanged trace (before, the phase was read
    # as in a cycle that is no warm-up one, and counted: draft n 24 instead of 23)
    res = run_cli("report", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert f"{part}: 1 row(s) whose cycle names no cycle of rank 0 (it has 24), which tracerecon never writes" in res.stderr, res.stderr
    want = json.loads(run_cli("report", "--json", str(H200 / "eagle_gpu_bound.sqlite")).stdout)
    assert json.loads(res.stdout)["ranks"][0]["phases"] == want["ranks"][0]["phases"]


def test_an_export_directory_without_its_manifest_is_named_as_such(tmp_path):
    # GIVEN an export directory whose manifest.json was deleted
    out = tmp_path / "exp"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    (out / "manifest.json").unlink()
    # WHEN reported THEN one line says what it is and what it lacks (not "no .sqlite exports")
    assert_one_line_error(run_cli("report", str(out)), f"{out}: holds a tracerecon export's tables but no manifest.json")


def test_nvtx_times_of_text_are_dropped_and_said_not_read_as_ranges_never_closed(tmp_path):
    # GIVEN the README's trace with the end of 13 NVTX ranges made text (read as NULL before: 13
    # ranges "never closed", 23 cycles read as 2 and verify at 20 ms), and a copy with every start
    # made text (said as "no NVTX ranges in the trace: was the program instrumented?")
    ends, starts = tmp_path / "ends.sqlite", tmp_path / "starts.sqlite"
    for f, sql in ((ends, "update NVTX_EVENTS set end = 'xyz' where rowid in (select rowid from NVTX_EVENTS where end is not null order by rowid limit 13)"),
                   (starts, "update NVTX_EVENTS set start = 'abc'")):
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", f)
        with sqlite3.connect(f) as con:
            con.execute(sql)
        con.close()
    env = {**os.environ, "TRACERECON_NO_CACHE": "1"}
    # WHEN reported THEN the 13 rows are dropped and counted, no range is said never closed
    res = run_cli("report", "--json", str(ends), env=env)
    assert res.returncode == 0, res.stderr
    warnings = json.loads(res.stdout)["warnings"]
    assert f"{ends}: dropped 13 NVTX row(s) with text where a start or end time belongs" in warnings
    assert not [w for w in warnings if "never closed" in w], warnings
    # and where no range is left, the one line says why
    res = run_cli("report", str(starts), env=env)
    assert res.returncode == 2 and res.stderr.startswith(f"tracerecon: error: no NVTX range left to read: {starts}: dropped ") \
        and "NVTX row(s) with text where a start or end time belongs" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr


@pytest.mark.parametrize("setting, said", [
    ({"TRACERECON_NO_CACHE": "maybe"}, "TRACERECON_NO_CACHE='maybe' not understood (1 or 0, yes or no, true or false, on or off): the cache is off"),
    ({"TRACERECON_CACHE_DIR": "FILE"}, "TRACERECON_CACHE_DIR='FILE' is not a directory: nothing is cached"),
    ({"TRACERECON_CACHE_DIR": "FILE/sub"}, "TRACERECON_CACHE_DIR='FILE/sub' is under FILE, which is not a directory: nothing is cached"),
    ({"XDG_CACHE_HOME": "FILE"}, "the cache's folder FILE/tracerecon is under FILE, which is not a directory: nothing is cached (TRACERECON_CACHE_DIR "
                                 "names another)"),
])
def test_cache_settings_that_cannot_work_are_said(setting, said, tmp_path):
    # GIVEN a cache setting tracerecon cannot use (the cache was silently off)
    f = tmp_path / "afile"
    f.write_text("x")
    env = {k: v for k, v in os.environ.items() if k not in ("TRACERECON_NO_CACHE", "TRACERECON_CACHE_DIR")}
    env.update({k: v.replace("FILE", str(f)) for k, v in setting.items()})
    # WHEN reported THEN one warning says so, and the report is the same
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), env=env)
    assert res.returncode == 0 and res.stderr == f"tracerecon: warning: {said.replace('FILE', str(f))}\n", res.stderr
    assert res.stdout == run_cli("report", str(H200 / "eagle_gpu_bound.sqlite")).stdout


def test_a_cache_folder_that_cannot_be_made_is_said_also_to_root(tmp_path):
    # GIVEN TRACERECON_CACHE_DIR under /proc, which takes no folder: root's os.access says it
    #       is writable, so the cache was silently off there (a contract audit, run as root)
    env = {k: v for k, v in os.environ.items() if k != "TRACERECON_NO_CACHE"}
    env["TRACERECON_CACHE_DIR"] = "/proc/tracerecon-cache"
    # WHEN reported THEN one warning says nothing is cached and why, and the report is the same
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), env=env)
    assert res.returncode == 0 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("tracerecon: warning: TRACERECON_CACHE_DIR='/proc/tracerecon-cache' cannot be made in /proc (") \
        and res.stderr.endswith("): nothing is cached\n"), res.stderr
    assert res.stdout == run_cli("report", str(H200 / "eagle_gpu_bound.sqlite")).stdout


def test_no_cache_words_that_mean_no_leave_the_cache_on(tmp_path):
    # GIVEN TRACERECON_NO_CACHE=false (which turned the cache off) and a cache folder of its own
    env = {**os.environ, "TRACERECON_NO_CACHE": "false", "TRACERECON_CACHE_DIR": str(tmp_path / "c")}
    # WHEN reported THEN no warning, and the report is cached
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), env=env)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert list((tmp_path / "c").iterdir())


def test_dask_without_dask_installed_is_said_also_where_the_report_is_cached(tmp_path):
    # GIVEN Dask distributed not importable, and the report already in the cache (the flag was
    # ignored there, exit 0, where without the cache it was refused, exit 2)
    env = {**os.environ, "TRACERECON_CACHE_DIR": str(tmp_path / "c")}
    env.pop("TRACERECON_NO_CACHE", None)
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    assert run_cli("report", trace, env=env).returncode == 0
    code = ("import sys; sys.modules['distributed'] = None; from tracerecon.cli import main; "
            f"sys.exit(main(['report', {trace!r}, '--dask', 'tcp://127.0.0.1:1'] + sys.argv[1:]))")
    import subprocess

    for extra in ([], ["--no-cache"]):
        # WHEN reported with --dask THEN one line naming what to install, exit 2, either way
        res = subprocess.run([sys.executable, "-c", code, *extra], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "--dask: needs Dask distributed: pip install" in res.stderr, res.stderr


@pytest.mark.parametrize("edit, said", [
    (lambda d: d.pop("reports"), "run.json: 'reports' is missing: the folder's exports are read by their names instead"),
    (lambda d: d.update(reports="rank0.sqlite"), "run.json: 'reports' is no list of exports: the folder's exports are read by their names instead"),
    (lambda d: d["reports"][1].update(sqlite="../../elsewhere/rank1.sqlite"),
     "run.json: ../../elsewhere/rank1.sqlite named with a folder: an export is read from the run directory by its name alone, never from outside it"),
    (lambda d: d["reports"][1].update(sqlite=7), "run.json: 1 of its 2 report record(s) name no export (no 'sqlite' text): left out"),
])
def test_an_edited_run_json_is_said(edit, said, tmp_path):
    # GIVEN a copy of a two-rank run directory whose run.json was edited (read without a word)
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "demo_shapes_h200x2" / "nccl_overlap_skew", run)
    doc = json.loads((run / "run.json").read_text())
    edit(doc)
    (run / "run.json").write_text(json.dumps(doc))
    # WHEN reported THEN a warning says what is wrong with it
    res = run_cli("report", str(run), env={**os.environ, "TRACERECON_NO_CACHE": "1"})
    assert res.returncode == 0 and f"tracerecon: warning: {run / said}" in res.stderr, res.stderr


def test_a_run_json_as_tracerecon_run_writes_it_says_nothing():
    # GIVEN the run directories bundled as they were written WHEN reported THEN no run.json warning
    for run in ("demo_shapes_h200x2/nccl_overlap_skew", "demo_h200/gpu_bound", "demo_h200/exit3"):
        res = run_cli("report", str(SAMPLES / run))
        assert res.returncode == 0 and "run.json" not in res.stderr, (run, res.stderr)


def test_a_run_json_or_manifest_nested_too_deep_for_the_parser_is_said_not_an_internal_error(tmp_path):
    # GIVEN a folder of two rank exports beside a run.json nested 100,000 deep, and an export
    # folder whose manifest.json is
    run = tmp_path / "run"
    run.mkdir()
    for f in (DEMO2 / "nccl_skew").glob("rank*.sqlite"):
        shutil.copy(f, run / f.name)
    (run / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    exp = tmp_path / "exp"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(exp), "--no-cache").returncode == 0
    (exp / "manifest.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    # WHEN reported
    res = run_cli("report", str(run), "--no-cache")
    # THEN the run.json is said unreadable and the ranks reported (Python's parser ran out of
    # stack: an internal error, exit 1), and the export is refused in one line, exit 2
    assert res.returncode == 0 and "run.json: unreadable; its recorded phases and rank order are not used" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert_one_line_error(run_cli("report", str(exp)), "not a readable tracerecon export (JSON nested too deep)")


def test_an_export_under_a_file_names_the_file_that_is_no_directory(tmp_path):
    # GIVEN an output path whose parent is a file
    (tmp_path / "afile").write_text("x")
    # WHEN exported there, or in a folder below it THEN one line names the file in the way
    # ("File exists" and "Not a directory" before)
    for out in (tmp_path / "afile" / "out", tmp_path / "afile" / "sub" / "out"):
        assert_one_line_error(run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out), "--no-cache"),
                              f"cannot write export ({tmp_path / 'afile'} is not a directory)")
    # and so where a broken link is in the way
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert_one_line_error(run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(tmp_path / "dangling" / "out"), "--no-cache"),
                          f"cannot write export ({tmp_path / 'dangling'} is not a directory)")


def test_copies_of_one_capture_are_read_as_files_of_one_run_with_a_warning(tmp_path):
    # GIVEN the README's trace copied twice (as ranks are benchmarked)
    files = [tmp_path / f"rank{r}.sqlite" for r in range(2)]
    for f in files:
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", f)
    # WHEN reported together
    res = run_cli("report", *map(str, files), "--no-cache", "--json")
    # THEN two ranks, and one warning names the copies (as files, whatever ranks each splits into)
    assert res.returncode == 0 and len(json.loads(res.stdout)["ranks"]) == 2, res.stderr
    assert (f"{files[0]}, {files[1]} hold the same capture (the same session start and end): read as 2 files of one run, each with its own "
            "ranks") in res.stderr, res.stderr
