"""`tracerecon run` for real: Nsight Systems profiles real programs (CI installs Debian's 2022.4,
whose importer is hidden from the CLI, so the QdstrmImporter fallback is exercised)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, run_profiled
from tracerecon.nsys.launch import RunRequest, build_command, parse_torchrun, profile_args
from tracerecon.nsys.locate import NsysInstall

NSYS = shutil.which("nsys")
needs_nsys = pytest.mark.skipif(NSYS is None and not os.environ.get("TRACERECON_REQUIRE_NSYS"), reason="nsys not installed")
DEMO = str(ROOT / "launch" / "eagle_demo.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def have_torch():
    import importlib.util

    return importlib.util.find_spec("torch") is not None


needs_torch = pytest.mark.skipif(not have_torch() and not os.environ.get("TRACERECON_REQUIRE_NSYS"), reason="torch not installed (engine extra)")

FAKE = NsysInstall("/x/nsys", "2025.3.1", frozenset({"--trace", "--sample", "--cpuctxsw", "--cuda-graph-trace", "--kill", "--force-overwrite", "--capture-range"}))


def test_defaults_only_where_the_user_gave_none():
    args = profile_args(["-t", "cuda,nvtx", "--capture-range=cudaProfilerApi"], FAKE)
    assert args[:3] == ["-t", "cuda,nvtx", "--capture-range=cudaProfilerApi"]
    assert "--trace=cuda,nvtx,osrt" not in args and "--sample=none" in args and "--cuda-graph-trace=node" in args


def test_defaults_skip_options_this_nsys_lacks():
    old = NsysInstall("/x/nsys", "2021.1", frozenset({"--trace", "--sample"}))
    assert profile_args([], old) == ["--trace=cuda,nvtx,osrt", "--sample=none"]


def test_torchrun_gets_nsys_per_worker(tmp_path):
    req = RunRequest(("torchrun", "--nproc_per_node", "2", "--standalone", "train.py", "--lr", "1"), tmp_path)
    argv, per_rank = build_command(req, FAKE, python="/py")
    assert per_rank
    assert argv[:5] == ["torchrun", "--nproc_per_node", "2", "--standalone", "--no-python"]
    i = argv.index("/x/nsys")
    assert argv[i + 1] == "profile" and f"{tmp_path}/rank%q{{RANK}}" in argv
    assert argv[-4:] == ["/py", "train.py", "--lr", "1"]


def test_python_m_torch_distributed_run_and_module_mode():
    tr = parse_torchrun(["python3", "-m", "torch.distributed.run", "--nnodes=1", "-m", "pkg.main", "x"])
    assert tr.module and tr.program == ("pkg.main", "x")
    assert parse_torchrun(["python3", "train.py"]) is None


def test_other_commands_get_one_report_for_the_tree(tmp_path):
    argv, per_rank = build_command(RunRequest(("bash", "-c", "echo hi"), tmp_path), FAKE)
    assert not per_rank and argv[-3:] == ["bash", "-c", "echo hi"] and str(tmp_path / "report") in argv


def test_a_program_whose_file_name_holds_a_space_is_run_through_a_shell(tmp_path):
    # GIVEN a program at a path whose file name holds a space (nsys 2022.4 names its session after
    # it and then cannot find the session), and one whose directory only does
    # WHEN the nsys command is built
    spaced, _ = build_command(RunRequest(("/opt/my tools/run me.sh", "--x"), tmp_path), FAKE)
    plain, _ = build_command(RunRequest(("/opt/my tools/run.sh",), tmp_path), FAKE)
    # THEN the first runs through `sh -c 'exec "$0" "$@"'` (which execs it in the same process),
    # the second as it is
    assert spaced[-5:] == [shutil.which("sh") or "/bin/sh", "-c", 'exec "$0" "$@"', "/opt/my tools/run me.sh", "--x"]
    assert plain[-2:] == [str(tmp_path / "report"), "/opt/my tools/run.sh"]


@needs_nsys
@pytest.mark.parametrize("file_name", ["run me.sh", "x=y z.sh"])
def test_run_profiles_a_program_whose_file_name_holds_a_space(tmp_path, file_name):
    # GIVEN an executable script whose name holds a space (and an "=", which `env` would take for
    # a variable) that runs a program with two NVTX phases
    (tmp_path / "a b").mkdir()
    prog = tmp_path / "a b" / file_name
    prog.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import nvtx, time\nfor i in range(3):\n"
                    f"    with nvtx.annotate(\"draft\"):\n        time.sleep(0.01)\n    with nvtx.annotate(\"verify\"):\n        time.sleep(0.01)'\n")
    prog.chmod(0o755)
    out = tmp_path / "run"
    # WHEN run under nsys
    res = run_cli("run", "-o", str(out), "--", str(prog))
    # THEN a report comes out with both phases, three times each
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(run_cli("report", str(out), "--json").stdout)
    assert {p["phase"]: p["n"] for p in doc["ranks"][0]["phases"]} == {"draft": 3, "verify": 3}


def test_nsys_missing_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRACERECON_NSYS"}
    res = run_cli("run", "--nsys", str(tmp_path / "no-nsys"), "--", "true", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "nsys not found" in line and "install" in line


@pytest.mark.parametrize("bad", [["--phase", "a=re:("], ["--skip-cycles", "-1"], ["--phase-thread", "foo"]], ids=["phase", "skip", "thread"])
def test_bad_phase_options_are_refused_before_anything_runs(tmp_path, bad):
    # GIVEN an nsys that would record that it ran, and a bad phase option
    ran = tmp_path / "ran"
    fake = tmp_path / "nsys"
    fake.write_text(f'#!/bin/sh\ntouch {ran}\ncase "$1" in --version) echo "NVIDIA Nsight Systems version 2025.3.1.90";; '
                    'profile) [ "$2" = "--help" ] && echo "--trace --sample" && exit 0; exit 1;; esac\n')
    fake.chmod(0o755)
    out = tmp_path / "run"
    # WHEN run with it
    res = run_cli("run", "--nsys", str(fake), "-o", str(out), *bad, "--", "true")
    # THEN one line and exit 2, before nsys is even asked its version, and nothing recorded (a
    # bad --phase was checked after the whole run, and saved in run.json)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert not ran.exists() and not out.exists()


def test_runs_started_in_the_same_second_get_directories_of_their_own(tmp_path, monkeypatch):
    # GIVEN a run directory of this second's name already there
    from tracerecon.cli import run as run_cli_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_cli_module.time, "strftime", lambda fmt: "tracerecon-run-20261202-120000")
    (tmp_path / "tracerecon-run-20261202-120000").mkdir()
    # WHEN two more runs start THEN each gets one of its own, made for it
    assert run_cli_module._new_run_dir() == Path("tracerecon-run-20261202-120000-2")
    assert run_cli_module._new_run_dir() == Path("tracerecon-run-20261202-120000-3")
    assert (tmp_path / "tracerecon-run-20261202-120000-3").is_dir()


def test_an_nsys_that_fails_at_once_is_one_line_and_exit_2(tmp_path):
    # GIVEN a program that does not answer as nsys does, and an "nsys" that answers but fails
    # before it starts the program (an option it refuses)
    failing = tmp_path / "nsys"
    failing.write_text('#!/bin/sh\ncase "$1" in --version) echo "NVIDIA Nsight Systems version 2025.3.1.90";; '
                       'profile) [ "$2" = "--help" ] && echo "--trace --sample" && exit 0; echo "Error: unknown option" >&2; exit 1;; esac\n')
    failing.chmod(0o755)
    for nsys, said in (("/bin/false", "does not answer as Nsight Systems does"), (str(failing), "nsys produced no report (exit code 1")):
        # WHEN run with it (and --scrub, with a secret on the command line)
        out = tmp_path / f"run{len(said)}"
        res = run_cli("run", "--nsys", nsys, "-o", str(out), "--scrub", "--", "true", "--password", "hunter2 zebra")
        # THEN exit 2 with one error line, no "traces kept", and no secret left in run.json nor
        # in the command line echoed
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("tracerecon: error")]
        assert res.returncode == 2 and len(errors) == 1 and said in errors[0], res.stderr
        assert "traces kept" not in res.stderr and "Traceback" not in res.stderr and "hunter2" not in res.stderr and "zebra" not in res.stderr
        assert not (out / "run.json").exists() or b"hunter2" not in (out / "run.json").read_bytes()


@needs_nsys
@needs_torch
def test_torchrun_two_ranks_on_cpu(tmp_path):
    out = tmp_path / "run"
    res = run_cli("run", "-o", str(out), "--", TORCHRUN, "--nproc_per_node=2", DEMO, "--device", "cpu", "--cycles", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((out / "run.json").read_text())
    assert meta["one_report_per_rank"] and meta["exit_code"] == 0
    assert sorted(r["sqlite"] for r in meta["reports"]) == ["rank0.sqlite", "rank1.sqlite"]
    assert "rank 0" in res.stdout and "rank 1" in res.stdout
    doc = json.loads(run_cli("report", str(out), "--json").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all([p["n"] for p in r["phases"]] == [4, 4, 4] for r in doc["ranks"])
    if not Path(NSYS).resolve().parent.joinpath("QdstrmImporter").exists() and any(k.startswith("import") for k in meta["timings_s"]):
        assert not list(out.glob("*.qdstrm"))  # imported by tracerecon, then removed


@needs_nsys
@needs_torch
def test_failing_program_keeps_its_trace_and_exit_code(tmp_path):
    out = tmp_path / "run"
    res = run_cli("run", "-o", str(out), "--", sys.executable, DEMO, "--device", "cpu", "--cycles", "2", "--exit-code", "3")
    assert res.returncode == 3, res.stderr[-2000:]
    assert (out / "report.sqlite").exists()
    assert json.loads((out / "run.json").read_text())["exit_code"] == 3
    assert "exited with code 3" in res.stderr and "draft_re_extend" in res.stdout


@needs_nsys
def test_wrap_gives_phases_to_an_engine_that_has_none(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "data" / "wrapdemo"))
    res = run_cli(
        "run", "-o", str(out), "--wrap", "toy_engine:Worker.draft=draft", "--wrap", "toy_engine:Worker.verify=verify",
        "--", sys.executable, "-c", "import toy_engine; toy_engine.main(4)", env=env,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(run_cli("report", str(out), "--json").stdout)
    phases = {p["phase"]: p for p in doc["ranks"][0]["phases"]}
    assert phases["draft"]["n"] == 4 and phases["verify"]["n"] == 4
    assert 1.5 < phases["draft"]["cpu_ms_median"] < 50 and 2.5 < phases["verify"]["cpu_ms_median"] < 50


@needs_nsys
def test_run_scrub_removes_secrets_from_the_exports(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, MY_SERVICE_TOKEN="hf_abcdefghijklmnopqrstuvwxyz0123456789")
    prog = "import sys; sys.path.insert(0, %r)\nfrom tracerecon.instrument import phase\nwith phase('verify'): pass\n" % str(ROOT)
    # (a secret option's value given as the next argument: run.json holds the argument list)
    res = run_cli("run", "-o", str(out), "--scrub", "--", sys.executable, "-c", prog, "--api-key", "mysecretkey42", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    data = (out / "report.sqlite").read_bytes()
    assert b"hf_abcdefghijklmnopqrstuvwxyz" not in data
    assert str(tmp_path).encode() not in data
    for f in (out / "report.sqlite", out / "run.json"):
        assert b"mysecretkey42" not in f.read_bytes(), f


def run_a_loop_until_ready(out: Path, log: Path | None = None) -> subprocess.Popen:
    """``tracerecon run -o out`` of a loop of 10 ms cycles (each logged to ``log`` when it is
    done: the engine's own count, independent of nsys), once it prints that it runs."""
    log_open = f"log = open({str(log)!r}, 'w')\n" if log else ""
    log_line = "    log.write(f'{i}\\n'); log.flush()\n" if log else ""
    prog = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\nfrom tracerecon.instrument import cycle, phase\n"
            f"print('ready', flush=True)\ni = 0\n{log_open}while True:\n    with cycle(i):\n        with phase('verify'): time.sleep(0.01)\n"
            f"{log_line}    i += 1\n")
    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    proc = subprocess.Popen([exe, "run", "-o", str(out), "--", sys.executable, "-c", prog], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    line = ""
    while "ready" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:  # (its output ended: it will never say so)
            break
    if "ready" not in line:  # (nsys did not start the program: say why, not a later assert's guess)
        proc.kill()
        _out, err = proc.communicate(timeout=60)
        raise AssertionError(f"the profiled loop never said it runs (exit {proc.returncode}): {err[-3000:]}")
    return proc


@needs_nsys
def test_ctrl_c_is_forwarded_and_the_trace_kept(tmp_path):
    # GIVEN an engine that logs each cycle it completes (its own count, independent of nsys)
    out = tmp_path / "run"
    log = tmp_path / "cycles.log"
    proc = run_a_loop_until_ready(out, log)
    time.sleep(2)
    # WHEN Ctrl-C reaches tracerecon
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    # THEN the program alone was stopped, nsys wrote the trace, and it holds every cycle the
    # engine completed (a SIGINT to nsys as well lost the last ~0.3 s of ranges)
    assert proc.returncode == 130, stderr  # the program died of the SIGINT: 128 + 2
    assert "stopping the profiled program" in stderr
    assert (out / "report.sqlite").exists(), stderr[-2000:]
    completed = len(log.read_text().split())
    ranges = json.loads(run_cli("ranges", str(out), "--json").stdout)
    traced = sum(1 for r in ranges["ranks"][0]["ranges"] if r["name"].startswith("cycle "))
    assert completed > 10 and traced >= completed, (traced, completed)


@needs_nsys
def test_a_second_ctrl_c_while_nsys_writes_the_trace_keeps_it(tmp_path):
    # GIVEN a program that ends at once on SIGINT
    out = tmp_path / "run"
    proc = run_a_loop_until_ready(out)
    time.sleep(1)
    # WHEN Ctrl-C twice, the second after the program has ended (nsys writing the trace)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=300)
    # THEN the second did not reach nsys: the trace is there (it was lost: the second press sent
    # SIGINT to nsys's group once the program had gone)
    assert "press Ctrl-C once more to stop nsys" in stderr
    assert (out / "report.sqlite").exists(), stderr[-2000:]


@needs_nsys
@pytest.mark.parametrize("scrub", [(), ("--scrub",)], ids=["plain", "scrub"])
def test_importer_failure_keeps_the_qdstrm_and_says_how_to_retry(tmp_path, scrub):
    # GIVEN an importer that fails (with --scrub too, which deletes the nsys reports it scrubbed)
    out = tmp_path / "run"
    env = dict(os.environ, QDSTRM_IMPORTER="/bin/false")
    res = run_cli("run", "-o", str(out), *scrub, "--", sys.executable, "-c", "print('hi')", env=env)
    if not list(out.glob("*.qdstrm")) and (out / "report.nsys-rep").exists():
        pytest.skip("this nsys imports its reports itself")
    # THEN the .qdstrm, the trace's only copy, is kept, and how to retry is said
    assert res.returncode == 2, res.stderr[-2000:]
    assert list(out.glob("*.qdstrm"))
    assert "import failed" in res.stderr and "retry with" in res.stderr
    assert "(cd /bin && ./false -i " in res.stderr  # the importer it was given, by its own name
    assert "Traceback" not in res.stderr
    if scrub:
        assert "kept the unscrubbed nsys report(s) report.qdstrm: no SQLite export was made from them" in res.stderr, res.stderr[-2000:]


def test_naive_cpu_timers_are_logged(tmp_path):
    code = (
        "import sys; sys.path.insert(0, %r)\nfrom tracerecon import instrument\ninstrument.enable_cpu_timers(%r)\n"
        "import time\nfor i in range(3):\n    with instrument.cycle(i):\n        with instrument.phase('verify'): time.sleep(0.002)\n"
        % (str(ROOT), str(tmp_path / "t"))
    )
    env = dict(os.environ, RANK="5")
    # (with umask 0, as nsys runs a program: the file is still writable by its owner alone)
    subprocess.run([sys.executable, "-c", "import os; os.umask(0)\n" + code], check=True, env=env)
    assert (tmp_path / "t.rank5.jsonl").stat().st_mode & 0o777 == 0o644
    rows = [json.loads(line) for line in (tmp_path / "t.rank5.jsonl").read_text().splitlines()]
    assert [(r["rank"], r["cycle"], r["phase"]) for r in rows] == [(5, 0, "verify"), (5, 1, "verify"), (5, 2, "verify")]
    assert all(2.0 <= r["cpu_ms"] < 100 for r in rows)


@needs_nsys
@needs_torch
def test_engine_timers_stand_beside_the_trace(tmp_path):
    out = tmp_path / "run"
    # 9 cycles: a median of 3 moved 0.76 ms on a loaded 2-core machine (another process beside)
    res = run_cli("run", "-o", str(out), "--cpu-timers", "--", sys.executable, DEMO, "--device", "cpu", "--cycles", "9")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "cpu_timers.rank0.jsonl").exists() and "engine" in res.stdout.split("CPU ms")[0].splitlines()[-1]
    doc = json.loads(run_cli("report", str(out), "--json").stdout)
    assert all("engine_cpu_ms_median" in p for p in doc["ranks"][0]["phases"]), doc["ranks"][0]["phases"]
    # The engine's perf_counter runs inside the phase's NVTX range (``instrument.phase``): in
    # every cycle it reads at most the range's time (20 us for the two clocks), and in some
    # cycle nearly all of it (per cycle: a loaded machine preempting the process between the
    # range's push and the timer's start moved a median of 9 by more than 0.5 ms)
    from tracerecon import api

    ranges = api.load([str(out)]).ranks[0].phases.select(["phase", "cpu_ns"]).to_pylist()
    timed = [json.loads(line) for line in (out / "cpu_timers.rank0.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in ranges] == [t["phase"] for t in timed]
    gaps: dict[str, list[float]] = {}
    for r, t in zip(ranges, timed):
        gaps.setdefault(r["phase"], []).append(r["cpu_ns"] / 1e6 - t["cpu_ms"])
    for phase, gap in gaps.items():
        median = sorted(r["cpu_ns"] / 1e6 for r in ranges if r["phase"] == phase)[len(gap) // 2]
        assert len(gap) == 9 and min(gap) >= -0.02 and min(gap) < max(0.5, 0.2 * median), (phase, gap)
    # torch imported, CUDA never initialised: the phases marked no current stream (none to record
    # an event on), and marked their ranges all the same
    with contextlib.closing(sqlite3.connect(f"file:{out / 'report.sqlite'}?mode=ro", uri=True)) as db:
        texts = [t for (t,) in db.execute("select coalesce(e.text, s.value) from NVTX_EVENTS e left join StringIds s on s.id = e.textId")]
    assert "tracerecon.stream" not in texts and texts.count("verify") == 9


def test_engine_timers_are_per_cycle_and_named_as_the_report_names_phases(tmp_path):
    # GIVEN an engine's timer log: verify timed twice in each of cycles 0-2 (2 ms each), draft
    # once (1, 3, 5 ms), and one verify line of no cycle (7 ms)
    from tracerecon.run_dir import read_engine_timers

    lines = [{"rank": 0, "cycle": c, "phase": "verify", "cpu_ms": 2.0} for c in range(3) for _ in range(2)]
    lines += [{"rank": 0, "cycle": c, "phase": "draft", "cpu_ms": ms} for c, ms in enumerate((1.0, 3.0, 5.0))]
    lines.append({"rank": 0, "cycle": None, "phase": "verify", "cpu_ms": 7.0})
    (tmp_path / "cpu_timers.rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # WHEN read as `report --phase draft --phase fwd=verify` reads them
    from tracerecon.analysis.config import PhaseConfig

    timers = read_engine_timers([str(tmp_path)], PhaseConfig(phases=("draft", "fwd=verify")).label_of)
    # THEN verify's timers are fwd's, one value per cycle (their sum: 4 ms; the lone line 7 ms)
    # and the median of (4, 4, 4, 7) is 4 ms, as the report's CPU ms of a phase timed twice a
    # cycle is; draft's median is 3 ms. (It was verify 2 ms, the median per call, under its raw name.)
    assert timers.medians == {0: {"draft": 3.0, "fwd": 4.0}}


def test_engine_timers_of_two_processes_and_of_a_repeated_cycle_number_are_not_summed(tmp_path):
    # GIVEN two processes writing rank 0's file (no RANK set), interleaved, each draft 1 ms in
    # cycles 0-2; and one of them then a main loop numbering its cycles from 0 again (draft 3 ms)
    from tracerecon.run_dir import read_engine_timers

    lines = []
    for c in range(3):
        for pid in (100, 200):
            lines.append({"rank": 0, "pid": pid, "cycle": c, "phase": "draft", "cpu_ms": 1.0})
    lines += [{"rank": 0, "pid": 100, "cycle": c, "phase": "draft", "cpu_ms": 3.0} for c in range(3)]
    (tmp_path / "cpu_timers.rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # WHEN read THEN each process's cycle is a cycle: nine values 1, 1, 1, 1, 1, 1, 3, 3, 3
    # (median 1 ms; summed by cycle number alone, 2 ms for the first three and 4 for warm-up + main)
    assert read_engine_timers([str(tmp_path)]).medians == {0: {"draft": 1.0}}


def test_a_warm_up_cycle_and_the_main_loops_cycle_of_one_number_are_two_cycles(tmp_path):
    # GIVEN an engine whose warm-up loop runs cycle 0 (draft 30 ms) and whose main loop numbers
    # its cycles from 0 again (draft timed twice per cycle, ~5 ms each), logged by the instrument
    code = (
        "import sys; sys.path.insert(0, %r)\nfrom tracerecon import instrument\ninstrument.enable_cpu_timers(%r)\n"
        "import time\nwith instrument.cycle(0):\n    with instrument.phase('draft'): time.sleep(0.03)\n"
        "for i in range(2):\n    with instrument.cycle(i):\n        for _ in range(2):\n            with instrument.phase('draft'): time.sleep(0.005)\n"
        % (str(ROOT), str(tmp_path / "cpu_timers"))
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, RANK="0"))
    from tracerecon.run_dir import read_engine_timers

    # WHEN read THEN three cycles: 30 ms, and two of two 5 ms timings each (~10 ms): the median
    # is a main-loop cycle's (summing the warm-up cycle into main cycle 0 by its number made
    # the cycles 40 and 10 ms: median 25)
    median = read_engine_timers([str(tmp_path)]).medians[0]["draft"]
    assert 9.5 <= median < 20, median
    rows = [json.loads(line) for line in (tmp_path / "cpu_timers.rank0.jsonl").read_text().splitlines()]
    assert len({r["cycle_id"] for r in rows}) == 3 and {r["cycle"] for r in rows} == {0, 1}


@needs_nsys
def test_report_of_a_run_directory_reads_it_as_the_run_did(tmp_path):
    # GIVEN a program whose one range "cycles_loop" holds 4 x (draft, verify): with --cycle "" no
    # range is a cycle, so each draft starts a cycle again (4 cycles); run with --cycle "",
    # --skip-cycles 1 and --phase-thread same
    prog = ("import sys, time; sys.path.insert(0, %r)\nimport nvtx\nwith nvtx.annotate('cycles_loop'):\n    for i in range(4):\n"
            "        with nvtx.annotate('draft'): time.sleep(0.002)\n        with nvtx.annotate('verify'): time.sleep(0.003)\n") % str(ROOT)
    out = tmp_path / "run"
    res = run_cli("run", "-o", str(out), "--cycle", "", "--skip-cycles", "1", "--phase-thread", "same", "--", sys.executable, "-c", prog)
    assert res.returncode == 0, res.stderr[-2000:]
    # WHEN the run directory is reported later, with no options
    later = run_cli("report", "--json", str(out))
    # THEN it is read as the run read it: 4 cycles, the first left out, the same numbers
    doc = json.loads(later.stdout)
    cycles = doc["ranks"][0]["cycles"]
    assert (cycles["n"], cycles["n_warmup"]) == (3, 1), cycles
    again = json.loads(run_cli("report", "--json", str(out), "--cycle", "", "--skip-cycles", "1", "--phase-thread", "same").stdout)
    assert doc["ranks"] == again["ranks"]


@needs_nsys
def test_worker_processes_forked_without_exec_are_traced(tmp_path):
    # GIVEN a program whose two multiprocessing workers (forked, Linux's default) each mark their
    # rank and run cycles of draft and verify
    prog = ("import sys, time; sys.path.insert(0, %r)\nimport multiprocessing as m\nfrom tracerecon.instrument import cycle, phase, mark_rank\n"
            "def work(r):\n    mark_rank(r)\n    for i in range(4):\n        with cycle(i):\n"
            "            with phase('draft'): time.sleep(0.002)\n            with phase('verify'): time.sleep(0.003)\n"
            "if __name__ == '__main__':\n    ctx = m.get_context('fork')\n    ps = [ctx.Process(target=work, args=(r,)) for r in range(2)]\n"
            "    [p.start() for p in ps]; [p.join() for p in ps]\n") % str(ROOT)
    out = tmp_path / "run"
    # WHEN run under tracerecon run THEN both workers are ranks with their phases
    res = run_cli("run", "-o", str(out), "--", sys.executable, "-c", prog)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(run_cli("report", "--json", str(out)).stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all({p["phase"] for p in r["phases"]} == {"draft", "verify"} for r in doc["ranks"])


@needs_nsys
def test_a_cycle_says_the_tokens_it_accepted(tmp_path):
    # GIVEN a program whose cycles say what they accepted as they open (issue 12's
    # ``cycle(accepted=n)``), one of them later through ``accepted(n, cycle_index=...)``
    prog = ("import sys, time; sys.path.insert(0, %r)\nfrom tracerecon.instrument import accepted, cycle, phase\n"
            "for i in range(4):\n    with cycle(i, accepted=None if i == 3 else i + 1):\n"
            "        with phase('verify'): time.sleep(0.002)\n        if i == 3: accepted(7, cycle_index=3)\n") % str(ROOT)
    out = tmp_path / "run"
    # WHEN run under tracerecon run THEN each cycle has its tokens: 1 + 2 + 3 + 7
    res = run_cli("run", "-o", str(out), "--", sys.executable, "-c", prog)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(run_cli("report", "--json", "--skip-cycles", "0", str(out)).stdout)
    assert doc["ranks"][0]["cycles"]["accepted_tokens"] == 13, doc["ranks"][0]["cycles"]


@needs_nsys
def test_an_engine_a_cycle_ahead_says_which_cycle_each_step_is_for(tmp_path):
    # GIVEN an engine a cycle ahead (instrument.start_cycle/end_cycle: overlapping cycle ranges)
    # whose first cycle ran in step (schedule, forward, output, detok, closed), then whose
    # output and detok steps for cycle N run after cycle N+1 opened and before its first phase;
    # each phase says its cycle (``phase(name, cycle=...)``: what start_cycle returned, or its
    # index). (By time alone, outputs 1-4 read a cycle late there: a limit README names.)
    prog = ("import sys, time; sys.path.insert(0, %r)\nfrom tracerecon.instrument import end_cycle, phase, start_cycle\n"
            "def step(name, c):\n    with phase(name, cycle=c): time.sleep(0.002)\n"
            "c = start_cycle(0)\nfor name in ('schedule', 'forward', 'output', 'detok'): step(name, c)\nend_cycle(c)\nprev = None\n"
            "for i in range(1, 6):\n    c = start_cycle(i)\n"
            "    if prev is not None:\n        step('output', prev); step('detok', prev); end_cycle(prev)\n"
            "    step('schedule', c); step('forward', c.index)\n    prev = c\n"
            "step('output', prev); step('detok', prev); end_cycle(prev)\n") % str(ROOT)
    out = tmp_path / "run"
    res = run_profiled("run", "-o", str(out), "--phase", "schedule", "--phase", "forward", "--phase", "output", "--phase", "detok", "--",
                       sys.executable, "-c", prog)
    assert res.returncode == 0, res.stderr[-2000:]
    exported = tmp_path / "export"
    assert run_cli("export", str(out), "-o", str(exported)).returncode == 0
    import pyarrow.parquet as pq

    names = dict(zip(*pq.read_table(exported / "cycles").select(["cycle", "name"]).to_pydict().values()))
    phases = pq.read_table(exported / "phases").sort_by("cpu_start_ns").select(["phase", "cycle"]).to_pylist()
    got = [(p["phase"], int(names[p["cycle"]].split()[-1])) for p in phases]
    # WHEN read THEN with the cycles said, each phase is in its own cycle
    truth = [("schedule", 0), ("forward", 0), ("output", 0), ("detok", 0), ("schedule", 1), ("forward", 1)]
    truth += [x for i in range(2, 6) for x in (("output", i - 1), ("detok", i - 1), ("schedule", i), ("forward", i))] + [("output", 5), ("detok", 5)]
    assert got == truth


@needs_nsys
def test_a_cycle_the_engine_never_ended_is_incomplete(tmp_path):
    # GIVEN an engine a cycle ahead that forgot to end its last cycle (start_cycle, no
    # end_cycle), whose process then idles 50 ms: nsys 2022.4 ends such a range at the capture's
    # end (ANALYSIS_DETAILS.duration), later versions leave its end NULL
    prog = ("import sys, time; sys.path.insert(0, %r)\nfrom tracerecon.instrument import end_cycle, phase, start_cycle\n"
            "older = None\nfor i in range(4):\n    c = start_cycle(i)\n    with phase('forward', cycle=c): time.sleep(0.003)\n"
            "    if older is not None:\n        with phase('output', cycle=older): time.sleep(0.001)\n        end_cycle(older)\n    older = c\n"
            "with phase('output', cycle=older): time.sleep(0.001)\ntime.sleep(0.05)\n") % str(ROOT)
    out = tmp_path / "run"
    assert run_profiled("run", "-o", str(out), "--phase", "forward", "--phase", "output", "--", sys.executable, "-c", prog).returncode == 0
    doc = json.loads(run_cli("report", "--json", "--skip-cycles", "0", str(out)).stdout)
    # WHEN read THEN that cycle is incomplete, left out of the medians (it had read as a whole
    # cycle 50 ms long), and the three others are whole
    cycles = doc["ranks"][0]["cycles"]
    assert (cycles["n"], cycles["n_incomplete"]) == (3, 1), cycles
    assert cycles["cpu_ms_median"] < 20, cycles


@needs_nsys
def test_recording_from_an_nvtx_range_says_how_tracerecons_ranges_are_named(tmp_path):
    # GIVEN a program of tracerecon.instrument cycles (ranges in the domain "tracerecon")
    prog = ("import sys, time; sys.path.insert(0, %r)\nfrom tracerecon.instrument import cycle, phase\nfor i in range(3):\n"
            "    with cycle(i):\n        with phase('draft'): time.sleep(0.002)\n        with phase('verify'): time.sleep(0.002)\n") % str(ROOT)
    # WHEN recorded from the range "draft" on, named without its domain THEN no report, and the line says how to name it
    res = run_cli("run", "-o", str(tmp_path / "a"), "-c", "nvtx", "-p", "draft", "--", sys.executable, "-c", prog)
    assert res.returncode == 2 and "nsys produced no report" in res.stderr and "-p 'verify@tracerecon'" in res.stderr, res.stderr[-2000:]
    # and named so, the run has its report
    ok = run_cli("run", "-o", str(tmp_path / "b"), "-c", "nvtx", "-p", "draft@tracerecon", "--", sys.executable, "-c", prog)
    assert ok.returncode == 0 and (tmp_path / "b" / "report.sqlite").is_file(), ok.stderr[-2000:]
