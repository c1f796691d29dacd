"""Issue 11: native reads, the whole-run cache and Dask give the same numbers as before.

The native reader (ADBC) is checked against the sqlite3 reader, which shares no fetching code
with it (``group_concat`` text parsed by numpy): same tables, row for row, on every sample
trace and on exports salted with NULL, text, real and blob values.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from conftest import DEMO2, H200, PUBLIC, ROOT, SAMPLES, run_cli

from tracerecon.nsys import native_read
from tracerecon.nsys.sqlite_export import read_export

TABLES = ("nvtx_ranges", "nvtx_marks", "api_calls", "gpu_ops", "sync_records", "event_records", "processes")

pytestmark = pytest.mark.skipif(not native_read.available(), reason="adbc-driver-sqlite not installed")


def read_both(path: Path, monkeypatch) -> tuple:
    monkeypatch.setenv("TRACERECON_READER", "sqlite3")
    slow = read_export(path)
    monkeypatch.delenv("TRACERECON_READER")
    fast = read_export(path)
    return slow, fast


def sample_exports() -> list[Path]:
    found = sorted(SAMPLES.rglob("*.sqlite")) + sorted(SAMPLES.rglob("*.sqlite.xz"))
    if PUBLIC.is_dir():
        found += sorted(PUBLIC.rglob("*.sqlite"))
    return found


@pytest.mark.parametrize("path", sample_exports(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_native_reads_equal_the_sqlite3_reads(path, monkeypatch):
    # GIVEN a real export WHEN read natively and through sqlite3 THEN every table is equal
    slow, fast = read_both(path, monkeypatch)
    for name in TABLES:
        assert getattr(fast, name).equals(getattr(slow, name)), name
    assert fast.warnings == slow.warnings
    assert (fast.trace_start_ns, fast.trace_end_ns) == (slow.trace_start_ns, slow.trace_end_ns)


def test_native_reads_in_several_parts_keep_rowid_order(monkeypatch):
    # GIVEN a table read in 4 row ranges on 4 connections THEN the rows come back as one scan
    monkeypatch.setattr(native_read, "ROWS_PER_PART", 100)
    monkeypatch.setenv("TRACERECON_READ_THREADS", "4")
    slow, fast = read_both(H200 / "eagle_gpu_bound.sqlite", monkeypatch)
    assert fast.gpu_ops.num_rows > 400
    for name in ("api_calls", "gpu_ops", "sync_records"):
        assert getattr(fast, name).equals(getattr(slow, name)), name


def test_native_reads_drop_the_same_bad_values(tmp_path, monkeypatch):
    # GIVEN an export whose kernel and runtime rows hold NULL, text, a real and a blob
    src = tmp_path / "salted.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    with sqlite3.connect(src) as db:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):  # without NOT NULL
            db.execute(f"create table salted as select * from {table} order by rowid")
            db.execute(f"drop table {table}")
            db.execute(f"alter table salted rename to {table}")
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set start = NULL where rowid = 3")
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = 'late' where rowid = 5")
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set streamId = x'07' where rowid = 7")
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set start = start + 0.75 where rowid = 9")
        db.execute("update CUPTI_ACTIVITY_KIND_RUNTIME set globalTid = NULL where rowid = 2")
        db.execute("update CUPTI_ACTIVITY_KIND_RUNTIME set correlationId = 'x' where rowid = 4")
    # WHEN read both ways THEN the same rows are dropped, counted in the same warnings
    slow, fast = read_both(src, monkeypatch)
    for name in TABLES:
        assert getattr(fast, name).equals(getattr(slow, name)), name
    assert fast.warnings == slow.warnings
    clean = read_export(H200 / "eagle_gpu_bound.sqlite")
    # three kernels go (NULL start, text end, blob stream); the real start is truncated, kept
    assert fast.gpu_ops.num_rows == clean.gpu_ops.num_rows - 3
    assert any("dropped 3 kernel row(s)" in w for w in fast.warnings)


def test_native_reads_create_nothing_beside_a_read_only_input(tmp_path):
    # GIVEN an export in a read-only folder WHEN read natively THEN it works and the folder is unchanged
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", folder / "t.sqlite")
    before = sorted(os.listdir(folder))
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        tables = read_export(folder / "t.sqlite")
        assert tables.gpu_ops.num_rows > 0
        assert sorted(os.listdir(folder)) == before
    finally:
        folder.chmod(stat.S_IRWXU)


def test_a_warm_report_reads_nothing_and_says_the_same(tmp_path, monkeypatch):
    # GIVEN a report made once WHEN made again THEN no export is opened and the JSON is equal
    from tracerecon import api
    from conftest import report_json

    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    files = sorted((DEMO2 / "nccl_skew").glob("*.sqlite*"))
    cold = report_json(api.load(files, jobs=1))
    import tracerecon.nsys.sqlite_export as api_mod  # the pipeline looks it up there at each read

    def no_reads(*_a, **_k):
        raise AssertionError("a warm load read an export")

    monkeypatch.setattr(api_mod, "read_export", no_reads)
    warm = report_json(api.load(files, jobs=1))
    assert warm == cold
    # a changed file misses (its mtime changes the key) and is read again
    monkeypatch.undo()
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "rank0.sqlite"
    shutil.copy(files[0], copy)
    with pytest.raises(AssertionError, match="read an export"):
        monkeypatch.setattr(api_mod, "read_export", no_reads)
        api.load([copy])


def test_a_warm_report_imports_neither_pyarrow_nor_numpy(tmp_path):
    # GIVEN a run directory reported once
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(DEMO2 / "nccl_skew", run)
    env = dict(os.environ, TRACERECON_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import sys, json; from tracerecon.cli import main; rc = main(['report', '--json', sys.argv[1]]); "
            "print('HEAVY', sorted(m for m in ('pyarrow', 'numpy') if m in sys.modules), rc)")

    def report() -> tuple[dict, str]:
        out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, env=env, timeout=300).stdout
        doc, _, tail = out.rpartition("HEAVY")
        return json.loads(doc), tail.strip()

    cold, cold_tail = report()
    assert cold_tail == "['numpy', 'pyarrow'] 0"
    # WHEN reported again THEN the same document comes from the cached report, without pyarrow
    warm, warm_tail = report()
    assert warm == cold and warm_tail == "[] 0"
    # ... the engine's own timers are read fresh, not cached
    (run / "cpu_timers.rank0.jsonl").write_text(json.dumps({"rank": 0, "cycle": 1, "phase": "verify", "cpu_ms": 1.5}) + "\n")
    timed, _ = report()
    verify = next(p for p in timed["ranks"][0]["phases"] if p["phase"] == "verify")
    assert verify["engine_cpu_ms_median"] == 1.5
    # ... and a changed export misses: it is analysed again (pyarrow imported)
    victim = sorted(run.glob("*.sqlite*"))[0]
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    again, again_tail = report()
    assert again_tail == "['numpy', 'pyarrow'] 0" and again["ranks"] == timed["ranks"]


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.mark.parametrize("run", ["nccl_skew", "nccl_skew_phases"])
def test_dask_gives_the_same_report_as_the_local_path(run, dask_cluster, tmp_path):
    # GIVEN a 2-rank run WHEN reported locally and on a 2-worker Dask cluster THEN the JSON is equal
    folder = (DEMO2 if (DEMO2 / run).is_dir() else SAMPLES / "demo_shapes_h200x2") / run
    # paths as a user types them (relative), and --no-cache, which must reach the workers too
    rel = os.path.relpath(folder, ROOT)
    local = run_cli("report", rel, "--json", "--no-cache", cwd=str(ROOT))
    on_dask = run_cli("report", rel, "--json", "--no-cache", "--dask", dask_cluster.scheduler_address, cwd=str(ROOT))
    assert local.returncode == 0, local.stderr
    assert on_dask.returncode == 0, on_dask.stderr
    assert json.loads(on_dask.stdout) == json.loads(local.stdout)
    assert len(json.loads(local.stdout)["ranks"]) == 2


def test_dask_with_a_scheduler_file(dask_cluster, tmp_path):
    # GIVEN the scheduler file an HPC job writes WHEN passed as --dask THEN it connects
    sched = tmp_path / "scheduler.json"
    sched.write_text(json.dumps({"type": "Scheduler", "address": dask_cluster.scheduler_address}))
    res = run_cli("ranges", str(H200 / "eagle_gpu_rank0.sqlite"), str(H200 / "eagle_gpu_rank1.sqlite"), "--dask", str(sched), "--no-cache")
    assert res.returncode == 0, res.stderr
    assert "rank 1" in res.stdout


def test_dask_errors_are_one_line(dask_cluster, tmp_path):
    # GIVEN a bad trace on the cluster, or no scheduler WHEN reported THEN one line and exit 2
    bad = tmp_path / "rank1.sqlite"
    bad.write_text("not a database")
    res = run_cli("report", str(H200 / "eagle_gpu_rank0.sqlite"), str(bad), "--dask", dask_cluster.scheduler_address, "--no-cache")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "rank1.sqlite" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), "--dask", "tcp://127.0.0.1:9", "--no-cache")
    assert res.returncode == 2
    assert res.stderr == "tracerecon: error: --dask tcp://127.0.0.1:9: cannot reach the scheduler (connection refused: nothing listens there)\n"
    # and a scheduler file naming such an address (both said at once: distributed retried for 20 s)
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps({"type": "Scheduler", "address": "tcp://127.0.0.1:9"}))
    res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), "--dask", str(refused), "--no-cache")
    assert res.returncode == 2 and "the scheduler file names no scheduler that answers (connection refused" in res.stderr, res.stderr
    # a scheduler file that is not there, or holds nothing: said so, in one line
    empty, other = tmp_path / "empty.json", tmp_path / "other.json"
    empty.write_text("")
    other.write_text('{"foo": 1}')
    for given, said in ((tmp_path / "missing.json", "no such scheduler file"), (empty, "not a Dask scheduler file"), (other, "not a Dask scheduler file")):
        res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), "--dask", str(given), "--no-cache")
        assert res.returncode == 2 and said in res.stderr and res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr, res.stderr


def test_a_refusal_deep_in_distributeds_error_chain_is_said_as_one():
    from tracerecon.pipeline import _why_no_scheduler

    # GIVEN distributed's error after its retries: "Timed out" raised from a closed stream, raised
    #       from the refusal of its last try (which try ends it depends on timing)
    try:
        try:
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except ConnectionRefusedError as refused:
                raise RuntimeError("in <TCP (closed)>: Stream is closed") from refused
        except RuntimeError as closed:
            raise OSError("Timed out trying to connect to tcp://127.0.0.1:9 after 20 s") from closed
    except OSError as exc:
        said = _why_no_scheduler(exc)
    # THEN the refusal is what is said; a timeout with nothing under it is said as one
    assert said == "connection refused: nothing listens there"
    assert _why_no_scheduler(OSError("Timed out trying to connect to tcp://10.0.0.1:8786 after 20 s")) == "no answer within 20 s"


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_dask_address_the_cache_answered_for_is_said_not_contacted(tmp_path, command):
    # GIVEN a trace reported once (the analysis and the report cached)
    env = {**os.environ, "TRACERECON_CACHE_DIR": str(tmp_path / "cache")}
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    plain = run_cli("report", trace, "--json", env=env)
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    # WHEN given again with --dask at an address where no scheduler listens
    out = ["-o", str(tmp_path / "exp")] if command == "export" else ["--json"]
    res = run_cli(command, trace, "--dask", "tcp://127.0.0.1:9", *out, env=env)
    # THEN the cache answers, and one warning says the cluster was not asked (it had passed in
    # silence, where --no-cache says no scheduler answers)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "tracerecon: warning: --dask tcp://127.0.0.1:9: not contacted: the cache held the result (--no-cache runs it on the cluster)\n"
    if command == "report":
        # (the numbers those of the plain report; the warning in its list too, this call's only)
        got, want = json.loads(res.stdout), json.loads(plain.stdout)
        assert got["warnings"] == ["--dask tcp://127.0.0.1:9: not contacted: the cache held the result (--no-cache runs it on the cluster)"]
        assert {**got, "warnings": []} == {**want, "warnings": []}
        assert json.loads(run_cli("report", trace, "--json", env=env).stdout) == want


def test_an_address_where_no_dask_scheduler_listens_is_said_in_the_users_words():
    pytest.importorskip("distributed")
    import socket
    import threading

    # GIVEN a program that answers on a port, but not as a Dask scheduler (a web server's reply)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def answer():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" * 4)
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        # WHEN given as --dask
        res = run_cli("report", str(H200 / "eagle_gpu_bound.sqlite"), "--dask", f"tcp://127.0.0.1:{srv.getsockname()[1]}", "--no-cache")
    finally:
        srv.close()
    # THEN one line says it answered but is no Dask scheduler (distributed read the reply as a
    #      message length and said "Unable to allocate 3.01 EiB"), exit 2
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "answered, but not as a Dask scheduler" in res.stderr, res.stderr


def test_native_parts_cover_every_rowid_once(tmp_path, monkeypatch):
    # GIVEN a table with the smallest and largest rowids, negative and sparse ones
    path = tmp_path / "rowids.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table T(a integer)")
        ids = [-(2**63), -5, 0, 3, 10**12, 2**63 - 1] + list(range(100, 70000, 3))
        db.executemany("insert into T(rowid, a) values (?, ?)", [(i, k) for k, i in enumerate(ids)])
    monkeypatch.setattr(native_read, "ROWS_PER_PART", 500)
    monkeypatch.setenv("TRACERECON_READ_THREADS", "4")
    uri = f"file:{path}?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as db:
        for cond in ("", " where a % 2 = 0"):
            want = [r[0] for r in db.execute(f"select a from T{cond} order by rowid")]
            # WHEN read natively in 4 parts THEN the rows are sqlite3's, in rowid order, each once
            assert native_read.fetch_int_columns(uri, ["a"], "T" + cond, ["a"])["a"].tolist() == want


@pytest.mark.parametrize("values", [
    [1, None, 3, None],                      # NULLs only: the unguarded read stands
    [None] * 3000 + [5, 6],                  # a first batch of NULLs, integers after
    [1.5, 2, -3.75],                         # a real first: the guarded read truncates
    [1, 2] * 1500 + ["text", b"\x01", 4.25],  # odd values late, after batches of integers
])
def test_unguarded_native_reads_equal_the_guarded_sql(tmp_path, values):
    # GIVEN a column holding integers with NULL, real, text and blob values
    from tracerecon.nsys.sqlite_export import NULL_SENTINEL, _int

    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table T (a, b)")
        db.executemany("insert into T values (?, ?)", [(v, i) for i, v in enumerate(values)])
    uri = f"file:{path}?mode=ro&immutable=1"
    # WHEN read with the guard offered THEN the columns are what sqlite3 gives for the guarded SQL
    got = native_read.fetch_int_columns(uri, ["a", "b", "7"], "T", ["a", "b", "c"], guard=_int, null_value=NULL_SENTINEL)
    with sqlite3.connect(path) as db:
        want = [r[0] for r in db.execute(f"select {_int('a')} from T order by rowid")]
    assert got["a"].tolist() == want
    assert got["b"].tolist() == list(range(len(values))) and got["c"].tolist() == [7] * len(values)
    assert want.count(NULL_SENTINEL) == sum(v is None or isinstance(v, (str, bytes)) for v in values)


def test_the_cli_process_never_imports_pandas(tmp_path):
    # GIVEN pandas installed WHEN `tracerecon report` runs THEN pyarrow was kept from importing it
    pytest.importorskip("pandas")
    import subprocess
    import sys

    code = ("import sys; from tracerecon.cli import console_main; sys.argv = ['tracerecon', 'report', sys.argv[1]]; rc = console_main(); "
            "print('PANDAS', 'pandas' in sys.modules, rc)")
    env = dict(os.environ, TRACERECON_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code, str(H200 / "eagle_gpu_bound.sqlite")], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "PANDAS False 0" in out
    # ... while a library user's pandas still works after tracerecon refused it in a process
    code = ("from tracerecon.no_pandas import keep_pandas_out; import pandas, pyarrow; keep_pandas_out(); "
            "print(type(pyarrow.table({'a': [1]}).to_pandas()).__name__)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.strip() == "DataFrame"


def test_a_report_made_from_a_loaded_analysis_is_cached_for_the_next_view(tmp_path, monkeypatch):
    # GIVEN a run loaded once (as `view` does when no report was cached)
    from tracerecon import api

    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    files = [str(f) for f in sorted((DEMO2 / "nccl_skew").glob("*.sqlite*"))]
    assert api.cached_report(files) is None
    analysis = api.load(files, jobs=1)
    # WHEN its report is asked for with that analysis THEN it is the same report, read nothing
    import tracerecon.nsys.sqlite_export as sqlite_export

    monkeypatch.setattr(sqlite_export, "read_export", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("read an export")))
    made = api.report(files, analysis=analysis)
    monkeypatch.undo()
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    # ... and the next view finds it cached, equal to a report made from scratch
    assert api.cached_report(files).to_json() == made.to_json()
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "other"))
    assert api.report(files, jobs=1).to_json() == made.to_json()


shm = pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm")


@shm
def test_a_result_handed_over_through_shared_memory_comes_back_whole():
    import numpy as np
    import pyarrow as pa

    from tracerecon import handoff

    # GIVEN what a worker returns: Arrow tables (dictionary, nullable columns), numpy arrays, plain values
    table = pa.table({"name": pa.array(["a", "b", None, "a"]).dictionary_encode(), "ns": pa.array([1, None, 3, 2**62], pa.int64())})
    ops = np.arange(1000, dtype=np.int64) * 3
    value = {"table": table, "ops": ops, "more": ("text", 3, None)}
    # WHEN a worker puts it and its parent takes it
    sent = handoff.put(value, owner=handoff.new_owner())
    assert Path(sent.path).parent == Path("/dev/shm") and len(sent.pickled) < 4096  # the buffers went to the file
    got = handoff.take(sent)
    # THEN it is equal, its arrays are writable (later steps update some in place), and no file is left
    assert got["table"].equals(table) and got["more"] == ("text", 3, None)
    assert (got["ops"] == ops).all()
    got["ops"][0] = -1
    assert not Path(sent.path).exists()


@shm
def test_results_no_one_took_are_removed_for_their_load_only():
    import numpy as np

    from tracerecon import handoff

    # GIVEN results written for two loads of the same process, never taken (a load that failed part way)
    mine, theirs = handoff.new_owner(), handoff.new_owner()
    a, b = handoff.put({"a": np.arange(5)}, owner=mine), handoff.put({"a": np.arange(5)}, owner=theirs)
    # WHEN the first load cleans up THEN only its files go
    handoff.discard_leftovers(mine)
    assert not Path(a.path).exists() and Path(b.path).exists()
    handoff.discard_leftovers(theirs)
    assert not Path(b.path).exists()


@shm
def test_files_of_a_killed_parent_are_removed_by_a_later_load_once_old(tmp_path):
    import subprocess
    import sys
    import time

    import numpy as np

    from tracerecon import handoff

    # GIVEN handoff files of a parent that is gone (a finished process's pid), and of this live one
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    dead = handoff.put({"a": np.arange(5)}, owner=f"{gone}-feedbeef")
    owner = handoff.new_owner()
    live = handoff.put({"a": np.arange(5)}, owner=owner)
    # WHEN a load starts soon after THEN both stay (a parent may still be taking its results)
    handoff.discard_orphans()
    assert Path(dead.path).exists() and Path(live.path).exists()
    # WHEN it starts after ORPHAN_AGE_S THEN the dead parent's file goes, the live one's stays
    handoff.discard_orphans(now=time.time() + handoff.ORPHAN_AGE_S + 1)
    assert not Path(dead.path).exists() and Path(live.path).exists()
    handoff.discard_leftovers(owner)
    assert not Path(live.path).exists()


def test_a_load_that_fails_in_a_worker_leaves_no_shared_memory_behind(tmp_path):
    from tracerecon import api, handoff
    from tracerecon.errors import BadTraceError

    # GIVEN two good ranks and a corrupt one, loaded in worker processes
    for r in (0, 1):
        shutil.copy(H200 / "eagle_gpu_bound.sqlite", tmp_path / f"rank{r}.sqlite")
    (tmp_path / "rank2.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    # WHEN the load fails THEN it says which file, and no handoff file of this process is left
    with pytest.raises(BadTraceError, match="rank2"):
        api.load(sorted(tmp_path.glob("rank*.sqlite")), jobs=3)
    assert not list(Path(handoff.SHM).glob(f"tracerecon-handoff-{os.getpid()}-*"))


def test_tables_read_at_once_keep_the_warnings_of_a_sequential_read(tmp_path):
    # GIVEN an export with bad rows in the runtime calls, the kernels and the sync records
    src = tmp_path / "salted.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    with sqlite3.connect(src) as db:
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = start - 1 where rowid = 3")
        db.execute("update CUPTI_ACTIVITY_KIND_RUNTIME set end = start - 1 where rowid in (select rowid from CUPTI_ACTIVITY_KIND_RUNTIME where nameId in (select id from StringIds where value like 'cudaLaunchKernel%') limit 2)")
        db.execute("update CUPTI_ACTIVITY_KIND_SYNCHRONIZATION set end = start - 1 where rowid = 1")
    # WHEN read (the tables on connections of their own, at once), several times
    seen = {read_export(src).warnings for _ in range(3)}
    # THEN the warnings come in one order: API calls, then GPU activity, then sync records
    assert len(seen) == 1
    dropped = [w for w in seen.pop() if "dropped" in w]
    assert ["CUDA API" in dropped[0], "kernel" in dropped[1], "synchronization" in dropped[2]] == [True, True, True], dropped


def test_without_room_in_shared_memory_results_go_through_the_pipe_writable(monkeypatch):
    import numpy as np

    from tracerecon import handoff

    ops = np.arange(100_000, dtype=np.int64)
    ops.flags.writeable = False  # as an int64s() view of an Arrow column is in the worker

    class Full:
        f_bavail, f_frsize = 0, 4096

    # GIVEN a /dev/shm with no room (a container's 64 MB one, filled by other ranks)
    monkeypatch.setattr(handoff.os, "statvfs", lambda p: Full())
    # WHEN a worker hands over THEN it goes in band (nothing written anywhere), whole and writable
    sent = handoff.put({"ops": ops}, owner=handoff.new_owner())
    got = handoff.take(sent)
    assert sent.path is None and (got["ops"] == ops).all()
    got["ops"][0] = -1


def test_a_dask_task_sizes_its_threads_by_its_workers_share():
    # GIVEN a Dask worker that runs two tasks at once (two threads)
    distributed = pytest.importorskip("distributed")
    from tracerecon.cores import usable_cores

    def cores_in_task():
        from tracerecon import cores, pipeline

        pipeline._take_dask_worker_share()
        return cores.usable_cores()

    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        # WHEN a task asks how many cores it may use THEN half the worker's (this host's)
        assert client.submit(cores_in_task, pure=False).result() == max(1, usable_cores() // 2)


def test_the_progress_line_of_several_processes_names_each_exports_stage():
    from tracerecon.pipeline import ANALYSING, DONE, READING, WAITING, board_line

    # GIVEN three exports, one at each stage but waiting WHEN the line is made THEN one line each
    assert board_line(["rank0.sqlite", "rank1.sqlite", "rank2.sqlite"], [DONE, ANALYSING, READING], 2) == (
        "1/3 exports done, 2 processes\n  rank0.sqlite: done\n  rank1.sqlite: analysing\n  rank2.sqlite: reading")
    # GIVEN more exports than lines WHEN the line is made THEN how many are at each stage
    stages = [DONE] * 3 + [ANALYSING] * 4 + [READING] * 2 + [WAITING] * 3
    assert board_line([f"rank{i}.sqlite" for i in range(12)], stages, 6) == "3/12 exports done, 6 processes: 2 reading, 4 analysing, 3 waiting"


def test_a_worker_marks_its_export_reading_then_analysing(monkeypatch):
    from tracerecon import handoff, pipeline
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.pipeline import ANALYSING, READING

    # GIVEN the board a worker process writes its export's stages to (a recorder here)
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    marks: list[tuple[int, int]] = []

    class Board(list):
        def __setitem__(self, i, v):
            marks.append((i, v))

    monkeypatch.setattr(pipeline, "_BOARD", Board([0, 0]))
    # WHEN it reads and analyses export 1 of a run of two
    owner = handoff.new_owner()
    out, _, _ = handoff.take(pipeline._file_work_handed_off(owner, DEMO2 / "nccl_skew" / "rank1.sqlite", PhaseConfig(), True, 1, 1))
    # THEN the board said reading, then analysing, for that export only
    assert out and marks == [(1, READING), (1, ANALYSING)]


def test_a_load_in_processes_says_every_export_done_before_the_cross_rank_step(monkeypatch):
    from tracerecon import api

    # GIVEN two ranks loaded in two worker processes, cache off
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    said: list[str] = []
    api.load(sorted((DEMO2 / "nccl_skew").glob("*.sqlite")), progress=said.append, jobs=2)
    # WHEN the progress lines are read THEN the last before the cross-rank step names both done
    last = said[said.index("across ranks") - 1]
    assert last == "2/2 exports done, 2 processes\n  rank0.sqlite: done\n  rank1.sqlite: done", said


def test_the_progress_of_exports_whose_names_hold_control_characters_escapes_them(tmp_path, monkeypatch):
    from tracerecon import api

    # GIVEN two ranks in files whose names hold an escape sequence, loaded in two processes
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    files = []
    for src in sorted((DEMO2 / "nccl_skew").glob("*.sqlite")):
        files.append(tmp_path / src.name.replace("rank", "\x1b[31mrank"))
        shutil.copy(src, files[-1])
    said: list[str] = []
    api.load(files, progress=said.append, jobs=2)
    # WHEN the progress lines are read THEN no control character but the lines' own newlines
    assert said and not any(ord(ch) < 0x20 and ch != "\n" for line in said for ch in line), said
    assert any("\\x1b[31mrank0.sqlite: done" in line for line in said), said


def test_the_big_export_generator_repeats_cycles_and_says_bad_input_in_one_line(tmp_path):
    import subprocess
    import sys

    script = ROOT / "benchmarks" / "make_big_export.py"
    src = H200 / "eagle_gpu_bound.sqlite"

    def make(*args):
        return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True, timeout=300)

    # GIVEN a real export WHEN made 5x bigger THEN it holds whole copies of the kernels, each
    # with fresh correlation ids, and the source is untouched
    out = tmp_path / "big.sqlite"
    res = make(src, out, "--size-gb", src.stat().st_size * 5 / (1 << 30))
    assert res.returncode == 0, res.stderr
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(out) as b:
        n, n_corr = a.execute("select count(*), count(distinct correlationId) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        m, m_corr = b.execute("select count(*), count(distinct correlationId) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert m % n == 0 and m // n >= 5 and m_corr == n_corr * (m // n)
    # GIVEN bad input (not an export, a missing one over a file that exists, the source as the
    # output, a size that is no size) THEN exit 2 with one error line (argparse's usage line
    # before it for the size), and no file touched or left
    (tmp_path / "text.sqlite").write_text("hi")
    (tmp_path / "keep.sqlite").write_text("keep")
    for args in ([tmp_path / "text.sqlite", tmp_path / "o1.sqlite"], [tmp_path / "missing.sqlite", tmp_path / "keep.sqlite"],
                 [out, out], [src, tmp_path / "o2.sqlite", "--size-gb", "nan"]):
        res = make(*args)
        lines = res.stderr.splitlines()
        assert res.returncode == 2 and lines[-1].startswith("make_big_export.py: error: ") and "Traceback" not in res.stderr, (args, res.stderr)
        assert len(lines) == (2 if "--size-gb" in args else 1), lines
    assert not (tmp_path / "o1.sqlite").exists() and not (tmp_path / "o2.sqlite").exists()
    assert (tmp_path / "keep.sqlite").read_text() == "keep" and out.stat().st_size > src.stat().st_size


def _dying_reader(monkeypatch, marker_dir: Path, name: str, times: int) -> None:
    """Worker processes (forked: they carry this patch) that are killed, SIGKILL as the kernel's
    out-of-memory killer sends it, the first ``times`` times they start reading ``name``."""
    import signal

    from tracerecon import pipeline

    real = pipeline._file_work

    def reading(f, *rest):
        if Path(f).name == name and len(list(marker_dir.glob("died*"))) < times:
            (marker_dir / f"died{os.getpid()}").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return real(f, *rest)

    monkeypatch.setattr(pipeline, "_file_work", reading)


def _two_ranks_one_killed(tmp_path, monkeypatch, name: str) -> list:
    """The two ranks of ``nccl_skew``, cache on (in ``tmp_path``), the worker reading ``name``
    killed the first time (``_dying_reader``, marks in ``tmp_path/marks``)."""
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACERECON_NO_CACHE", raising=False)
    (tmp_path / "marks").mkdir()
    _dying_reader(monkeypatch, tmp_path / "marks", name, times=1)
    return sorted((DEMO2 / "nccl_skew").glob("*.sqlite"))


def _forked_pools() -> bool:
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=False) == "fork"


@pytest.mark.skipif(not _forked_pools(), reason="the patch reaches worker processes only when they are forked")
def test_a_worker_process_killed_mid_load_is_read_again_alone_with_a_warning(tmp_path, monkeypatch):
    from tracerecon import api, handoff

    # GIVEN two ranks loaded in two processes, the one reading rank1 killed once; cache on
    files = _two_ranks_one_killed(tmp_path, monkeypatch, "rank1.sqlite")
    said: list[str] = []
    # WHEN reported
    got = api.report(files, progress=said.append, jobs=2)
    # THEN rank1 was read again in a process of its own, the report says so in one warning,
    # and every number equals a report read in this process alone (cache off)
    assert len(list((tmp_path / "marks").glob("died*"))) == 1
    assert "reading rank1.sqlite again, alone" in said, said
    notice = [w for w in got.warnings if "worker process ended abruptly" in w]
    assert len(notice) == 1 and "while reading rank1.sqlite (its process ended by SIGKILL)" in notice[0], got.warnings
    assert "rank0" not in notice[0] and "read again" in notice[0], notice
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    alone = api.report(files, jobs=1)
    assert got.to_json() == {**alone.to_json(), "warnings": list(notice) + alone.to_json()["warnings"]}
    # AND a later report from the cache says nothing of a load that did not happen this time
    monkeypatch.delenv("TRACERECON_NO_CACHE")
    again = api.report(files, jobs=2)
    assert again.to_json() == alone.to_json()
    assert not any("worker process ended abruptly" in w for w in api.load(files, jobs=2).warnings)
    assert not list(Path(handoff.SHM).glob(f"tracerecon-handoff-{os.getpid()}-*"))


@pytest.mark.skipif(not _forked_pools(), reason="the patch reaches worker processes only when they are forked")
def test_a_worker_killed_under_view_or_export_leaves_its_warning_in_no_cache_and_no_manifest(tmp_path, monkeypatch):
    import json

    from tracerecon import api

    # GIVEN two ranks loaded as `view` loads them (the analysis, then its report), the worker
    # reading rank0 killed once; cache on
    files = _two_ranks_one_killed(tmp_path, monkeypatch, "rank0.sqlite")
    loaded = api.load(files, jobs=2)
    shown = api.report(files, jobs=2, analysis=loaded)
    manifest = api.export(loaded, tmp_path / "exp")
    # THEN the load and the report shown say it; the cached report, and the export's manifest
    # (read back as the same report later), do not
    assert any("rank0.sqlite (its process ended by SIGKILL)" in w for w in loaded.warnings), loaded.warnings
    assert any("rank0.sqlite (its process ended by SIGKILL)" in w for w in shown.warnings), shown.warnings
    assert not any("ended abruptly" in w for w in api.cached_report(files).warnings)
    assert not any("ended abruptly" in w for w in manifest["warnings"] + json.loads((tmp_path / "exp" / "manifest.json").read_text())["warnings"])


@pytest.mark.skipif(not _forked_pools(), reason="the patch reaches worker processes only when they are forked")
def test_an_export_whose_own_process_dies_too_is_named_in_one_error(tmp_path, monkeypatch):
    import tempfile

    from tracerecon import api, handoff
    from tracerecon.errors import EXIT_INTERNAL, TraceReconError

    # GIVEN two ranks, the processes reading rank0 killed every time; cache off
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    files = sorted((DEMO2 / "nccl_skew").glob("*.sqlite"))
    (tmp_path / "marks").mkdir()
    _dying_reader(monkeypatch, tmp_path / "marks", "rank0.sqlite", times=99)
    # WHEN loaded in two processes THEN one error names rank0 (twice killed: once with the other
    # worker, once alone), and no handoff file or decompressed copy of this load is left
    with pytest.raises(TraceReconError, match=r"^rank0\.sqlite: the process reading it alone ended abruptly too") as err:
        api.load(files, jobs=2)
    assert err.value.exit_code == EXIT_INTERNAL
    assert len(list((tmp_path / "marks").glob("died*"))) == 2
    assert not list(Path(handoff.SHM).glob(f"tracerecon-handoff-{os.getpid()}-*"))
    assert not list(Path(tempfile.gettempdir()).glob(f"tracerecon-{os.getpid()}-*.sqlite"))
