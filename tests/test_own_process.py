"""tracerecon's own processes set themselves up (``tracerecon.own_process``): OpenBLAS idle but
never for the engine ``run`` launches, the collector off and freed memory kept for reuse except
in ``view``; the program does it, ``tracerecon.cli.main`` in someone else's process does not.
Each case runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from conftest import H200, ROOT, SAMPLES

LINUX = sys.platform.startswith("linux")
GLIBC = LINUX and platform.libc_ver()[0] == "glibc"


def in_fresh_python(code: str, *args: str, **env: str) -> str:
    # The user's own malloc and BLAS settings would decide these cases instead of tracerecon's.
    # (Dask's nanny, started in this process by the Dask tests, sets OMP_NUM_THREADS, which
    # OpenBLAS also reads.)
    blas = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS"}
    clean = {k: v for k, v in os.environ.items() if k not in blas and not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env={**clean, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def numpy_uses_openblas() -> bool:
    code = "import numpy; print('openblas' in str(numpy.__config__.CONFIG.get('Build Dependencies', {}).get('blas', {})).lower())"
    return in_fresh_python(code) == "True"


@pytest.mark.skipif(not LINUX, reason="threads counted in /proc")
def test_a_one_shot_command_starts_numpy_without_blas_threads():
    # GIVEN the settings of `report`, made before numpy is imported
    # WHEN numpy is imported
    # THEN OpenBLAS started no threads of its own and the collector is off
    code = ("import os, gc; from tracerecon.own_process import prepare; prepare('report'); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')), gc.isenabled())")
    assert in_fresh_python(code) == "1 1 False"
    if (os.cpu_count() or 1) > 1 and numpy_uses_openblas():
        # ... where stock numpy starts one per core (so the case above can fail)
        assert int(in_fresh_python("import os, numpy; print(len(os.listdir('/proc/self/task')))")) > 1


def test_run_leaves_the_engine_environment_as_the_user_had_it():
    # GIVEN `run`, whose engine inherits this process's environment
    # WHEN the settings are made
    # THEN OPENBLAS_NUM_THREADS is neither added nor changed
    code = "import os, sys; from tracerecon.own_process import prepare; prepare(sys.argv[1]); print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert in_fresh_python(code, "run") == "None"
    assert in_fresh_python(code, "report", OPENBLAS_NUM_THREADS="4") == "4"


def test_view_keeps_the_collector():
    # GIVEN the interactive command WHEN the settings are made THEN the collector stays on
    assert in_fresh_python("import gc; from tracerecon.own_process import prepare; prepare('view'); print(gc.isenabled())") == "True"


def test_the_program_sets_up_its_process_and_main_leaves_a_callers_alone():
    # GIVEN `report` and `run` replaced by a command that prints what its process looks like:
    # the BLAS setting, the collector, and whether pandas is refused
    probe = ("import gc, os, sys\n"
             "import tracerecon.cli.report as report, tracerecon.cli.run as run\n"
             "from tracerecon.cli import console_main, main\n"
             "def show(args):\n"
             "    refused = any(type(f).__name__ == '_RefusePandas' for f in sys.meta_path)\n"
             "    print(os.environ.get('OPENBLAS_NUM_THREADS'), gc.isenabled(), refused)\n"
             "report.main = run.main = show\n"
             "if sys.argv[1] == 'program':\n"
             "    sys.argv = ['tracerecon', *sys.argv[2:]]\n"
             "    console_main()\n"
             "else:\n"
             "    main(sys.argv[2:])\n")
    # WHEN the program runs them THEN `report` runs set up, `run` without the BLAS setting
    assert in_fresh_python(probe, "program", "report", "x.sqlite") == "1 False True"
    assert in_fresh_python(probe, "program", "run", "--", "true") == "None False True"
    # WHEN `main` runs inside a caller's process THEN that process is as it was
    assert in_fresh_python(probe, "main", "report", "x.sqlite") == "None True False"


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc")
@pytest.mark.parametrize("mode, returned", [("stock", True), ("view", True), ("report", False)])
def test_freed_blocks_stay_for_reuse_only_in_one_shot_commands(mode, returned):
    # GIVEN a 16 MB block allocated, written and freed
    # WHEN malloc runs with stock settings, as `view` sets it, and as `report` sets it
    # THEN stock glibc returns its pages at once (a mapped block), and so does `view`; a
    #      one-shot command keeps them for its next arrays
    code = (
        "import os, sys\n"
        "from tracerecon.own_process import prepare\n"
        "if sys.argv[1] != 'stock': prepare(sys.argv[1])\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20\n"
        "b = bytearray(16 << 20); before = rss(); del b; print(before - rss())\n"
    )
    mb = int(in_fresh_python(code, mode))
    assert (mb >= 15) if returned else (mb <= 1), mb


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc")
@pytest.mark.parametrize("mode, user_setting, arenas", [("stock", {}, 13), ("view", {}, 13), ("report", {}, 8), ("report", {"MALLOC_ARENA_MAX": "3"}, 3),
                                                         ("report", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=3"}, 3)])
def test_one_shot_commands_make_at_most_eight_malloc_arenas(mode, user_setting, arenas):
    # GIVEN twelve threads that each allocate and are alive at once
    # WHEN malloc runs with stock settings, as `view` sets it, as `report` sets it, and as
    #      `report` sets it where the user set MALLOC_ARENA_MAX or glibc's tunable
    # THEN stock glibc (up to 8 arenas per core) gives each thread an arena of its own beside
    #      the main one, and so does `view`; a one-shot command stops at 8, a user's own bound
    #      stands (malloc_stats prints one "Arena N:" per arena)
    if arenas == 13 and 8 * (os.cpu_count() or 1) < 13:
        pytest.skip("stock glibc allows 8 arenas per core")
    code = (
        "import ctypes, os, sys, threading\n"
        "from tracerecon.own_process import prepare\n"
        "if sys.argv[1] != 'stock': prepare(sys.argv[1])\n"
        "both = threading.Barrier(13)\n"
        "def hold():\n"
        "    block = bytearray(1 << 20); both.wait(); both.wait()\n"
        "threads = [threading.Thread(target=hold) for _ in range(12)]\n"
        "for t in threads: t.start()\n"
        "both.wait(); sys.stdout.flush(); os.dup2(1, 2); ctypes.CDLL(None).malloc_stats(); both.wait()\n"
        "for t in threads: t.join()\n"
    )
    out = in_fresh_python(code, mode, **user_setting)
    assert sum(line.startswith("Arena ") for line in out.splitlines()) == arenas, out


def test_a_report_through_the_program_matches_one_through_main(tmp_path):
    # GIVEN one trace WHEN reported by the program (settings made) and by main (none made)
    # THEN the two JSON documents are the same
    env = {"TRACERECON_NO_CACHE": "1"}
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    program = in_fresh_python("import sys; from tracerecon.cli import console_main; sys.argv = ['tracerecon', 'report', '--json', sys.argv[1]]; console_main()", trace, **env)
    plain = in_fresh_python("import sys; from tracerecon.cli import main; main(['report', '--json', sys.argv[1]])", trace, **env)
    assert program == plain and '"ranks"' in program


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_workers_and_reader_threads_follow_the_cores_the_process_may_use():
    # GIVEN a process allowed one core (as `taskset -c 0` or a container's cpuset would)
    # WHEN it sizes its work THEN one worker process and one reader connection, whatever the
    #      machine has (os.cpu_count would say all of them)
    out = subprocess.run([sys.executable, "-c",
                          "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
                          "from tracerecon.cores import usable_cores\n"
                          "from tracerecon.pipeline import default_jobs\n"
                          "from tracerecon.nsys.native_read import read_threads\n"
                          "from pathlib import Path\n"
                          "print(usable_cores(), default_jobs([Path(f'rank{i}.sqlite') for i in range(8)]), read_threads(), os.cpu_count() >= 1)"],
                         capture_output=True, text=True, check=True, cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "TRACERECON_READ_THREADS"})
    assert out.stdout.split() == ["1", "1", "1", "True"]


def test_workers_are_as_many_as_files_cores_and_memory_allow():
    from tracerecon.pipeline import workers_that_fit

    # GIVEN files, cores, the memory available and each worker's peak, WHEN sized THEN:
    assert workers_that_fit(8, 16, 64 << 30, 1 << 30) == 8  # one per file
    assert workers_that_fit(8, 4, 64 << 30, 1 << 30) == 4  # at most one per core
    assert workers_that_fit(8, 16, 10 << 30, 3 << 30) == 3  # as many as fit in memory
    assert workers_that_fit(8, 16, 1 << 30, 3 << 30) == 1  # always one, even where none fits
    assert workers_that_fit(8, 16, None, 3 << 30) == 8  # memory unknown: not bounded by it


def test_a_workers_peak_is_estimated_from_the_exports_size(tmp_path):
    from tracerecon.pipeline import WORKER_BASE_BYTES, worker_peak_bytes

    # GIVEN a 1 MB export and a 1 MB .xz one WHEN their workers' peaks are estimated THEN the
    #      base plus 3.5x the export, the .xz taken as 8 times its size (and a missing file: the base)
    (tmp_path / "a.sqlite").write_bytes(b"\0" * 1_000_000)
    (tmp_path / "b.sqlite.xz").write_bytes(b"\0" * 1_000_000)
    assert worker_peak_bytes(tmp_path / "a.sqlite") == WORKER_BASE_BYTES + 3_500_000
    assert worker_peak_bytes(tmp_path / "b.sqlite.xz") == WORKER_BASE_BYTES + 28_000_000
    assert worker_peak_bytes(tmp_path / "none.sqlite") == WORKER_BASE_BYTES


def test_when_memory_bounds_the_workers_the_load_says_so(monkeypatch):
    from tracerecon import api, cores
    from conftest import report_json

    # GIVEN two ranks and room in memory for one worker at a time
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    run = sorted((SAMPLES / "demo_h200x2" / "nccl_skew").glob("*.sqlite"))
    said: list[str] = []
    monkeypatch.setattr(cores, "available_memory_bytes", lambda: 200 << 20)
    # WHEN loaded with the default number of workers
    bounded = report_json(api.load(run, progress=said.append))
    # THEN one export is read at a time, the progress says why, and the report is the same
    assert any(m.startswith("1 of 2 exports at a time: about 0.") and "GB of memory available" in m for m in said), said
    assert "reading rank0.sqlite" in said
    monkeypatch.setattr(cores, "available_memory_bytes", lambda: None)
    assert report_json(api.load(run, jobs=2)) == bounded


def test_the_room_under_cgroup_limits_counts_ancestors_and_leaves_out_inactive_cache(tmp_path):
    from tracerecon.cores import _rooms

    gib = 1 << 30

    def group(path, limit, used=None, inactive=None, files=("memory.max", "memory.current", "inactive_file")):
        d = tmp_path / path
        d.mkdir(parents=True, exist_ok=True)
        (d / files[0]).write_text(f"{limit}\n")
        if used is not None:
            (d / files[1]).write_text(f"{used}\n")
            (d / "memory.stat").write_text(f"anon 1\n{files[2]} {inactive or 0}\nfile 9\n")

    # GIVEN cgroup v2: a Slurm job limited to 7 GiB (5 GiB used, 3 of them inactive page cache)
    #       over its step and task groups, which have no limit of their own
    group("v2/job_1", 7 * gib, 5 * gib, 3 * gib)
    group("v2/job_1/step_0", "max", 5 * gib, 3 * gib)
    group("v2/job_1/step_0/task_0", "max", 4 * gib, 3 * gib)
    # WHEN the room is read from the task's group THEN the job's: 7 - (5 - 3) GiB
    assert _rooms(str(tmp_path / "v2"), "/job_1/step_0/task_0", "memory.max", "memory.current", "inactive_file") == [5 * gib]
    # GIVEN cgroup v1 as in a container: the mount is the container's group (limited to 4 GiB,
    #       1 GiB used), the path in /proc/self/cgroup one the mount does not show
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    group("v1", 4 * gib, 1 * gib, 0, files=v1)
    # THEN its root's room: 3 GiB; and an unlimited v1 group (about 2**63) has no room said
    assert _rooms(str(tmp_path / "v1"), "/docker/abc", *v1) == [3 * gib]
    group("v1u", 2**63 - 4096, 1 * gib, 0, files=v1)
    assert _rooms(str(tmp_path / "v1u"), "/", *v1) == []
