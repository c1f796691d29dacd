"""The two big reads started before numpy and pyarrow are imported (``read_plan.start_ahead``).

A read started ahead is only ever a head start: ``read_export`` takes it when it asks for the
very same SQL and reads as before otherwise. Checked here: on every sample export the tables are
the same with and without it and every read started is taken (so the SQL of the two sides has
not drifted apart); a read of other SQL is never used; the reads need neither numpy nor pyarrow;
and the CLI starts them before importing either.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import H200, SAMPLES

from tracerecon.errors import BadTraceError
from tracerecon.nsys import native_read, read_plan
from tracerecon.nsys.sqlite_export import read_export

TABLES = ("nvtx_ranges", "nvtx_marks", "api_calls", "gpu_ops", "sync_records", "event_records", "processes", "strings")

pytestmark = pytest.mark.skipif(not native_read.available(), reason="adbc-driver-sqlite not installed")


@pytest.fixture(autouse=True)
def _nothing_left_ahead():
    native_read.discard_ahead()
    yield
    native_read.discard_ahead()


def _plain_exports() -> list[Path]:
    return sorted(SAMPLES.rglob("*.sqlite"))


def _equal(a, b, name: str) -> bool:
    if name == "strings":
        return a.values.equals(b.values) and a.ids.tolist() == b.ids.tolist()
    return a.equals(b)


@pytest.mark.parametrize("path", _plain_exports(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_reads_started_ahead_are_taken_and_change_nothing(path):
    # GIVEN a real export read once the usual way
    before = read_export(path)
    # WHEN its big reads are started ahead and it is read again
    started = read_plan.start_ahead(path)
    after = read_export(path)
    # THEN every table is the same, and every read started was taken by the read
    assert len(started) == sum(t in before.info.tables for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"))
    assert native_read.discard_ahead() == 0
    for name in TABLES:
        assert _equal(getattr(after, name), getattr(before, name), name), name
    assert after.warnings == before.warnings


def _table(tmp_path: Path, values: list) -> str:
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table T (a, b)")
        db.executemany("insert into T values (?, ?)", [(v, i) for i, v in enumerate(values)])
    return f"file:{path}?mode=ro&immutable=1"


def test_a_read_of_other_sql_is_never_used(tmp_path):
    # GIVEN a read of column b started ahead
    uri = _table(tmp_path, list(range(100, 200)))
    native_read.start_ahead(uri, ["b"], "T")
    # WHEN column a, and then b of some rows, are asked for
    a = native_read.fetch_int_columns(uri, ["a"], "T", ["x"], guard=read_plan.int_guard)["x"]
    some = native_read.fetch_int_columns(uri, ["b"], "T where b < 10", ["x"], guard=read_plan.int_guard)["x"]
    # THEN each is what was asked for, and the read started ahead is still there, unused
    assert a.tolist() == list(range(100, 200)) and some.tolist() == list(range(10))
    assert native_read.discard_ahead() == 1


@pytest.mark.parametrize("values", [
    [1, None, 3, None],
    [None] * 3000 + [5, 6],
    [1.5, 2, -3.75],
    [1, 2] * 1500 + ["text", b"\x01", 4.25],
])
def test_a_read_ahead_of_odd_values_gives_the_guarded_sql(tmp_path, values):
    # GIVEN a column of integers with NULL, real, text and blob values, its read started ahead
    uri = _table(tmp_path, values)
    native_read.start_ahead(uri, ["a", "b", "7"], "T")
    # WHEN it is fetched with the guard THEN the columns are what sqlite3 gives for the guarded SQL
    got = native_read.fetch_int_columns(uri, ["a", "b", "7"], "T", ["a", "b", "c"], guard=read_plan.int_guard, null_value=read_plan.NULL_SENTINEL)
    with sqlite3.connect(uri, uri=True) as db:
        want = [r[0] for r in db.execute(f"select {read_plan.int_guard('a')} from T order by rowid")]
    assert got["a"].tolist() == want and got["b"].tolist() == list(range(len(values))) and got["c"].tolist() == [7] * len(values)
    assert native_read.discard_ahead() == 0


@pytest.mark.parametrize("name, started", [("missing.sqlite", 0), ("empty.sqlite", 0), ("text.sqlite", 0), ("trace.sqlite.xz", 0), ("other.sqlite", 1)])
def test_start_ahead_leaves_what_it_cannot_read_to_the_read(tmp_path, name, started):
    # GIVEN a file that is no readable plain export
    path = tmp_path / name
    if name == "empty.sqlite":
        path.write_bytes(b"")
    elif name == "text.sqlite":
        path.write_text("not a database")
    elif name == "trace.sqlite.xz":
        path.write_bytes(b"\xfd7zXZ\x00")
    elif name == "other.sqlite":
        with sqlite3.connect(path) as db:
            db.execute("create table CUPTI_ACTIVITY_KIND_KERNEL (x)")  # a kernel table without the columns read
    # WHEN its reads are started ahead THEN nothing is raised (a kernel table is planned, and its
    # read fails on its thread), nothing is created beside it, and the read says what is wrong
    keys = read_plan.start_ahead(path)
    assert len(keys) == started
    assert sorted(p.name for p in tmp_path.iterdir()) == ([name] if name != "missing.sqlite" else [])
    with pytest.raises(BadTraceError):
        read_export(path)
    assert native_read.discard_ahead(keys) == started


def test_reads_that_cannot_start_leave_nothing_behind(monkeypatch):
    # GIVEN a process where the second read cannot get a thread (a container's pids limit)
    real, calls = native_read._execute_all, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("can't start new thread")
        return real(*args, **kwargs)

    monkeypatch.setattr(native_read, "_execute_all", second_fails)
    # WHEN the reads are started ahead THEN none is left registered, and the export reads as ever
    assert read_plan.start_ahead(H200 / "eagle_gpu_bound.sqlite") == []
    assert native_read._AHEAD == {}
    monkeypatch.undo()
    assert read_export(H200 / "eagle_gpu_bound.sqlite").gpu_ops.num_rows > 0


def test_each_load_drops_only_its_own_reads():
    # GIVEN the reads of two exports started ahead (two loads at once, as on a Dask worker)
    mine = read_plan.start_ahead(H200 / "eagle_gpu_bound.sqlite")
    theirs = read_plan.start_ahead(SAMPLES / "demo_h200x2" / "nccl_skew" / "rank0.sqlite")
    # WHEN one load drops what it did not take THEN the other's reads are still there
    assert native_read.discard_ahead(mine) == 2
    assert native_read.discard_ahead(theirs) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_never_waits_on_its_parents_reads():
    # GIVEN reads started ahead in a process WHEN it forks THEN the child has none of them (the
    # threads behind them stayed in the parent), and the parent still has them
    code = (
        "import os, sys\n"
        "from tracerecon.nsys import native_read, read_plan\n"
        "keys = read_plan.start_ahead(sys.argv[1])\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(len(native_read._AHEAD))\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('CHILD', os.waitstatus_to_exitcode(status), 'PARENT', len(native_read._AHEAD), len(keys))\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code, str(H200 / "eagle_gpu_bound.sqlite")],
                         capture_output=True, text=True, timeout=120)
    assert "CHILD 0 PARENT 2 2" in out.stdout, out.stdout + out.stderr


def test_a_part_is_read_in_one_batch_whatever_its_rowids(tmp_path):
    # GIVEN a table whose rowids span more than a C int, cut into two parts
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table T (a)")
        db.executemany("insert into T(rowid, a) values (?, ?)", [(i, i) for i in list(range(3000)) + [2**40, 2**41]])
    parts = native_read._parts(f"file:{path}?mode=ro&immutable=1", "T", 2)
    # WHEN the parts' batch sizes are bounded THEN each covers its own rowid span, at least its rows
    bounds = parts.rows_bounds()
    assert len(bounds) == 2 and bounds[0] >= 3000 and sum(bounds) == 2**41 + 1
    # ... and the driver takes the largest batch size asked for
    ex = native_read._Executed(f"file:{path}?mode=ro&immutable=1", "select a from T order by rowid", 2**62)
    assert ex.table().column(0).num_chunks == 1


def test_reads_ahead_need_neither_numpy_nor_pyarrow():
    # GIVEN a fresh interpreter WHEN an export's reads are started ahead and have finished
    code = (
        "import sys\n"
        "from tracerecon.nsys import native_read, read_plan\n"
        "n = len(read_plan.start_ahead(sys.argv[1]))\n"
        "parts = [f for fs in native_read._AHEAD.values() for f in fs]\n"
        "done = [f.result() for f in parts]\n"
        "print('STARTED', n, len(done), 'numpy' in sys.modules, 'pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(H200 / "eagle_gpu_bound.sqlite")], capture_output=True, text=True, timeout=120)
    # THEN two reads ran to the end and neither numpy nor pyarrow was imported
    assert "STARTED 2 " in out.stdout and out.stdout.strip().endswith("False False"), out.stdout + out.stderr


def test_the_report_command_starts_the_reads_before_importing_numpy(tmp_path):
    # GIVEN `tracerecon report` of one export, cache off, in a fresh interpreter
    code = (
        "import sys\n"
        "from tracerecon.nsys import native_read, read_plan\n"
        "seen = []\n"
        "start, discard = read_plan.start_ahead, native_read.discard_ahead\n"
        "read_plan.start_ahead = lambda p: seen.append(('numpy' in sys.modules, 'pyarrow' in sys.modules)) or seen.append(start(p)) or seen[-1]\n"
        "native_read.discard_ahead = lambda keys=None: seen.append(discard(keys)) or seen[-1]\n"
        "from tracerecon.cli import console_main\n"
        "sys.argv = ['tracerecon', 'report', '--no-cache', sys.argv[1]]\n"
        "rc = console_main()\n"
        "print('SEEN', seen, rc)\n"
    )
    env = dict(os.environ, TRACERECON_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code, str(H200 / "eagle_gpu_bound.sqlite")], capture_output=True, text=True, env=env, timeout=120)
    # THEN its two reads were started before numpy and pyarrow were imported, and both were taken
    why = out.stdout[-2000:] + out.stderr[-2000:]
    assert "SEEN [(False, False), [" in out.stdout and "], 0] 0" in out.stdout and out.stdout.count("CUPTI_ACTIVITY_KIND") == 2, why


@pytest.mark.parametrize("cores, want", [(1, 1), (2, 1), (4, 1), (8, 3), (16, 7), (64, native_read.MAX_PARTS)])
def test_reads_ahead_leave_two_cores_to_the_rest(monkeypatch, cores, want):
    # GIVEN a process that may use `cores` cores
    from tracerecon import cores as cores_module

    monkeypatch.delenv("TRACERECON_READ_THREADS", raising=False)
    monkeypatch.setattr(cores_module, "usable_cores", lambda: cores)
    # WHEN the two reads started ahead are sized THEN each table gets half of all but two cores
    assert native_read.ahead_threads() == want
    # ... unless the user sized the reads
    monkeypatch.setenv("TRACERECON_READ_THREADS", "5")
    assert native_read.ahead_threads() == 5


def test_a_read_ahead_is_cut_into_that_many_parts(tmp_path, monkeypatch):
    # GIVEN a table of 40,000 rows, parts of at least 1,000 rows, 3 connections per table ahead
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table T (a)")
        db.executemany("insert into T values (?)", [(i,) for i in range(40_000)])
    uri = f"file:{path}?mode=ro&immutable=1"
    monkeypatch.setattr(native_read, "ROWS_PER_PART", 1000)
    monkeypatch.setenv("TRACERECON_READ_THREADS", "3")
    # WHEN it is started ahead THEN it runs as 3 parts, and taken whole, in rowid order
    native_read.start_ahead(uri, ["a"], "T")
    assert len(native_read._AHEAD[(uri, ("a",), "T")]) == 3
    got = native_read.fetch_int_columns(uri, ["a"], "T", ["a"], guard=read_plan.int_guard)["a"]
    assert got.tolist() == list(range(40_000))


def test_an_analysis_freed_in_the_background_is_gone_once_waited_for():
    # GIVEN a value nothing else holds, handed to free_in_background
    import weakref

    from tracerecon.memory import free_in_background, wait_freed

    class Tables:
        pass

    held = [Tables()]
    alive = weakref.ref(held[0])
    free_in_background(held)
    # WHEN its freeing is waited for THEN the list is empty and the value is gone
    wait_freed()
    assert held == [] and alive() is None


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_loads_in_worker_processes_one_after_another_leave_nothing_behind(tmp_path, monkeypatch):
    # GIVEN two exports loaded twice in a row in one process, in 2 worker processes, cache off
    from tracerecon import api
    from conftest import report_json

    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    files = sorted((SAMPLES / "demo_h200x2" / "nccl_skew").glob("*.sqlite"))
    before = {p.name for p in Path("/dev/shm").glob("tracerecon-handoff-*")}
    # WHEN the second load's workers fork right after the first's (whose pool was not waited for)
    first = report_json(api.load(files, jobs=2))
    second = report_json(api.load(files, jobs=2))
    # THEN both say the same and no handoff file is left in /dev/shm
    assert first == second
    assert {p.name for p in Path("/dev/shm").glob("tracerecon-handoff-*")} <= before


def test_numpy_and_pyarrow_are_imported_before_the_analysis_is_imported_on_a_thread():
    # GIVEN a fresh interpreter reading one export the way a report does
    code = (
        "import sys\n"
        "from tracerecon import import_ahead, pipeline\n"
        "seen = []\n"
        "real = import_ahead.ImportAhead.__init__\n"
        "def spy(self, modules):\n"
        "    seen.append([m in sys.modules for m in ('numpy', 'pyarrow', 'pyarrow.compute')])\n"
        "    real(self, modules)\n"
        "import_ahead.ImportAhead.__init__ = spy\n"
        "pipeline._read_tables(sys.argv[1], pipeline.ANALYSIS_MODULES)\n"
        "print('SEEN', seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(H200 / "eagle_gpu_bound.sqlite")], capture_output=True, text=True, timeout=120)
    # THEN when the analysis modules start importing on their thread, numpy, pyarrow and
    #      pyarrow.compute are already imported (two threads importing those at once is unsafe)
    assert "SEEN [[True, True, True]]" in out.stdout, out.stdout + out.stderr
