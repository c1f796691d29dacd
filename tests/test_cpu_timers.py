"""The engine-side CPU timers of ``tracerecon.instrument`` (``enable_cpu_timers``, the rows
``report`` shows as the engine's own numbers): each phase's row under the rank the process's
trace says, and each time its own, whatever threads and nesting the engine's phase objects see.
Each case runs in a fresh interpreter (the instrument's state is per process)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap


def rows_of(tmp_path, program: str, env: dict | None = None) -> dict[str, list[dict]]:
    import os

    code = "from tracerecon.instrument import *\nimport time, threading\n" + textwrap.dedent(program).replace("PREFIX", repr(str(tmp_path / "t")))
    run_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "TRACERECON_CPU_TIMERS")}
    subprocess.run([sys.executable, "-c", code], check=True, env={**run_env, **(env or {})})
    return {f.name: [json.loads(line) for line in f.read_text().splitlines()] for f in sorted(tmp_path.glob("t.rank*.jsonl"))}


def test_rows_go_under_the_rank_the_process_marked(tmp_path):
    # GIVEN timers turned on first, then the rank marked as 3 (a process a launcher numbered
    # itself, RANK unset), then a phase
    got = rows_of(tmp_path, """
        enable_cpu_timers(PREFIX)
        mark_rank(3)
        with cycle(0):
            with phase("draft"):
                pass
    """)
    # THEN its row is rank 3's, in rank 3's file (it had gone to rank 0's, which report then
    # merged into rank 0 and left rank 3 without engine numbers)
    assert list(got) == ["t.rank3.jsonl"] and [r["rank"] for r in got["t.rank3.jsonl"]] == [3]


def test_rank_from_the_environment_when_none_is_marked(tmp_path):
    got = rows_of(tmp_path, """
        enable_cpu_timers(PREFIX)
        with phase("draft"):
            pass
    """, env={"RANK": "5"})
    assert list(got) == ["t.rank5.jsonl"] and got["t.rank5.jsonl"][0]["rank"] == 5


def test_one_phase_object_on_two_threads_and_nested_in_itself_times_each_use(tmp_path):
    # GIVEN one phase object used on two threads at once (20 ms; 5 ms begun 10 ms later) and
    # nested in itself (outer 3 ms, inner 3 ms, outer 3 ms more)
    got = rows_of(tmp_path, """
        enable_cpu_timers(PREFIX)
        P = phase("draft")
        def work(delay_ms, ms):
            time.sleep(delay_ms / 1e3)
            with P:
                time.sleep(ms / 1e3)
        ts = [threading.Thread(target=work, args=(0, 20)), threading.Thread(target=work, args=(10, 5))]
        [t.start() for t in ts]; [t.join() for t in ts]
        with P:
            time.sleep(0.003)
            with P:
                time.sleep(0.003)
            time.sleep(0.003)
    """)
    ms = [r["cpu_ms"] for r in got["t.rank0.jsonl"]]
    # THEN each use is timed on its own, each at least as long as it ran (with one start kept on
    # the object, the 20 ms thread read from the later thread's start, about 10 ms, and the outer
    # use from the inner one's, about 6 ms)
    assert len(ms) == 4
    (five, twenty), inner, outer = sorted(ms[:2]), ms[2], ms[3]
    assert five >= 5 and twenty >= 20 and inner >= 3 and outer >= 9, ms


def test_a_phase_open_when_the_timers_are_turned_on_logs_nothing(tmp_path):
    # GIVEN a phase entered with the timers off, which turns them on (a server enabling them on
    # a request), then a phase of 2 ms
    got = rows_of(tmp_path, """
        with phase("serve"):
            enable_cpu_timers(PREFIX)
        with phase("draft"):
            time.sleep(0.002)
    """)
    # THEN only the second is logged (the first had logged the seconds since boot: 20,258,611 ms)
    (row,) = got["t.rank0.jsonl"]
    assert row["phase"] == "draft" and 2 <= row["cpu_ms"] < 10_000, row



def test_a_phase_saying_its_cycle_logs_under_that_cycle_not_the_open_one(tmp_path):
    # GIVEN an engine a cycle ahead: cycle 0 run in step (a warm-up), then cycles 0 and 1 opened
    # with start_cycle, cycle 0's output said by what start_cycle returned while cycle 1 is the
    # newest, cycle 1's by its index, inside a ``with cycle(7)`` around them all
    got = rows_of(tmp_path, """
        enable_cpu_timers(PREFIX)
        with cycle(7):
            warm = start_cycle(0)
            with phase("forward", cycle=warm):
                pass
            end_cycle(warm)
            c0 = start_cycle(0)
            with phase("forward", cycle=c0):
                pass
            c1 = start_cycle(1)
            with phase("forward", cycle=1):
                pass
            with phase("output", cycle=c0):
                pass
            end_cycle(c0)
            with phase("output", cycle=1):
                pass
            end_cycle(c1)
            with phase("sample"):
                pass
    """)
    rows = [(r["phase"], r["cycle"], r["cycle_id"]) for r in got["t.rank0.jsonl"]]
    # THEN each row names the cycle the phase said, and that cycle's own opening: the warm-up's
    # cycle 0 apart from the main loop's; a phase saying nothing is the enclosing cycle's
    outer, warm, c0, c1 = 1, 2, 3, 4  # the openings, in order
    assert rows == [("forward", 0, warm), ("forward", 0, c0), ("forward", 1, c1), ("output", 0, c0), ("output", 1, c1), ("sample", 7, outer)]


def test_timers_that_cannot_be_written_are_turned_off_without_breaking_the_engine(tmp_path):
    # GIVEN timers pointed into a folder that is not there, and phases on two threads
    import os

    code = ("from tracerecon.instrument import *\nimport threading\nenable_cpu_timers(%r)\n"
            "def work():\n    for _ in range(3):\n        with phase('draft'):\n            pass\n"
            "t = threading.Thread(target=work); t.start(); t.join(); work(); print('engine done')\n") % str(tmp_path / "missing" / "t")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "TRACERECON_CPU_TIMERS")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    # THEN the engine runs to its end (each phase exit had raised FileNotFoundError, killing its
    # thread with the NVTX range left open), and one line says the timers are off
    assert res.returncode == 0 and res.stdout == "engine done\n", res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "CPU timers off" in lines[0] and "missing" in lines[0]


def test_a_cycle_index_said_by_two_threads_logs_each_threads_own_opening(tmp_path):
    # GIVEN two threads each running a loop of its own, cycles 0 and 1 opened with start_cycle,
    # phases saying their cycle by index
    got = rows_of(tmp_path, """
        enable_cpu_timers(PREFIX)
        ids = {}
        go = threading.Barrier(2)
        def loop(name):
            for i in range(2):
                c = start_cycle(i)
                go.wait()  # (both threads' cycle i open at once)
                with phase(name, cycle=i):
                    pass
                ids[(name, i)] = c.id
                go.wait()
                end_cycle(c)
        ts = [threading.Thread(target=loop, args=(n,)) for n in ("a", "b")]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(ids)
    """)
    rows = got["t.rank0.jsonl"]
    # THEN each row carries its own thread's opening of that index, never the other thread's
    by_phase = {(r["phase"], r["cycle"]): r["cycle_id"] for r in rows}
    assert len(rows) == 4 and len(set(by_phase.values())) == 4
    assert by_phase[("a", 0)] != by_phase[("b", 0)] and by_phase[("a", 1)] != by_phase[("b", 1)]


def test_a_thread_reusing_a_dead_threads_ident_logs_the_process_latest_opening_not_the_dead_ones(tmp_path):
    # GIVEN thread A opening cycle 0 with start_cycle and dying without ending it, the main
    # thread opening cycle 0 again, then thread B (started after A was joined, with A's ident:
    # Python often reuses it; here the instrument sees one ident for every thread but the main
    # one) running a phase that says cycle 0 without opening it itself
    got = rows_of(tmp_path, """
        import tracerecon.instrument as instrument
        class OneIdent:
            get_ident = staticmethod(lambda: 1 if threading.current_thread() is threading.main_thread() else 12345)
            def __getattr__(self, name):
                return getattr(threading, name)
        instrument.threading = OneIdent()
        enable_cpu_timers(PREFIX)
        ids = {}
        def a():
            ids["a"] = start_cycle(0).id
            ids["a_ident"] = instrument.threading.get_ident()
        def b():
            ids["b_ident"] = instrument.threading.get_ident()
            with phase("output", cycle=0):
                pass
        t = threading.Thread(target=a); t.start(); t.join()
        ids["main"] = start_cycle(0).id
        t = threading.Thread(target=b); t.start(); t.join()
        with open(PREFIX + ".ids", "w") as f:
            f.write(repr(ids))
    """)
    ids = ast.literal_eval((tmp_path / "t.ids").read_text())
    assert ids["a_ident"] == ids["b_ident"]
    # THEN B's row carries the main thread's opening, the process's latest (it had carried the
    # dead thread A's, kept under A's ident)
    (row,) = got["t.rank0.jsonl"]
    assert (row["phase"], row["cycle"], row["cycle_id"]) == ("output", 0, ids["main"]), (row, ids)


def test_cycles_never_ended_are_named_at_exit_and_ended_ones_are_not(tmp_path):
    import os

    def stderr_of(program: str) -> str:
        code = "from tracerecon.instrument import *\n" + textwrap.dedent(program)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "TRACERECON_CPU_TIMERS")}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        return res.stderr

    # GIVEN an engine a cycle ahead that ends every cycle but its last two (3 and 4), one of
    # them opened on another thread
    left = stderr_of("""
        import threading
        older = None
        for i in range(4):
            c = start_cycle(i)
            if older is not None:
                end_cycle(older)
            older = c
        t = threading.Thread(target=lambda: start_cycle(4)); t.start(); t.join()
    """)
    # THEN one line at exit names both (the report reads them as incomplete)
    assert left.splitlines() == ["tracerecon.instrument: cycles 3, 4 opened by start_cycle were never ended by "
                                 "end_cycle: the report reads them as incomplete"], left
    # GIVEN every cycle ended, one of them on another thread THEN nothing is said
    assert stderr_of("""
        import threading
        c = start_cycle(0)
        d = start_cycle(1)
        end_cycle(c)
        t = threading.Thread(target=end_cycle, args=(d,)); t.start(); t.join()
    """) == ""


def test_a_forked_child_does_not_name_its_parents_open_cycles(tmp_path):
    import os

    # GIVEN a process that opened cycle 0 (start_cycle), forked a child that exits normally
    # (atexit runs there), then ended the cycle itself
    code = ("from tracerecon.instrument import *\nimport os, sys\nc = start_cycle(0)\npid = os.fork()\n"
            "if pid == 0:\n    sys.exit(0)\nos.waitpid(pid, 0)\nend_cycle(c)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "TRACERECON_CPU_TIMERS")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    # THEN nothing is said: the cycle is the parent's, which ended it (the child had named it)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    # GIVEN a fork while the instrument's lock is held (another thread logging a CPU timer row)
    held = ("import tracerecon.instrument as instrument\nimport os, sys\ninstrument._lock.acquire()\npid = os.fork()\n"
            "if pid == 0:\n    sys.exit(0)\ninstrument._lock.release()\nos.waitpid(pid, 0)\n")
    # THEN the child still exits (it had hung at exit, waiting for a lock no thread of it holds)
    res = subprocess.run([sys.executable, "-c", held], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
