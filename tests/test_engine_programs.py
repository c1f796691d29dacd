"""Random engine programs against events simulated on their current streams (``engine_programs``:
GPU times and truth worked out independently of tracerecon): side streams that compute, an input
stream, a copy stream taking results off, NCCL's stream, `.item()` reads, a worker thread with a
stream of its own, CPU gaps; one to three phases a cycle.

Where every side stream and collective is joined back in the phase that forked it, every phase of
every cycle must read its events (none misread over 150 seeded programs when this was written).
Where joins come in a later phase of the cycle, 2 of 150 programs had a phase misread, 3 of 150
where they also come in the next cycle; they are not asserted here."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_programs import U, program, simulate
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load


def readings(prog, tmp_path) -> tuple[list, list]:
    t, names, truth = simulate(prog)
    path = tmp_path / "t.sqlite"
    path.unlink(missing_ok=True)
    (rank,) = load([t.write(path)], PhaseConfig(phases=tuple(names))).ranks
    return truth, [(p["cycle"], p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in rank.phases.to_pylist()]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1))
def test_every_phase_reads_its_current_streams_events_where_forks_join_in_their_phase(seed, tmp_path):
    # GIVEN a random program whose side streams and collectives are joined in the forking phase
    # WHEN analysed
    truth, got = readings(program(seed, joins="phase"), tmp_path)
    # THEN every phase of every cycle reads what events on its current stream read (to 1 us)
    assert len(got) == len(truth)
    for (cycle, phase, us, _), (g_cycle, g_phase, g_us, _) in zip(truth, got):
        assert (g_cycle, g_phase) == (cycle, phase)
        assert abs(g_us - us) <= 1, (seed, cycle, phase, us, g_us)


def test_the_simulated_truth_is_what_a_hand_reckoning_gives(tmp_path):
    # GIVEN a join-then-fork engine as a program: draft runs 50 us on 7 and reads back on 7;
    # verify joins 13 (from cycle 1), runs 20 us on 7, forks 13 for 1 ms, runs 30 us on 7 beside it
    cycles = []
    for c in range(4):
        verify = ([("w", 7, 13)] if c else []) + [("k", 7, 20), ("w", 13, 7), ("k", 13, 1000), ("k", 7, 30)]
        cycles.append([("draft", 11, 7, [("k", 7, 50), ("item", 7, 2)]), ("verify", 11, 7, verify)])
    # WHEN simulated
    _, names, truth = simulate(cycles)
    # THEN by hand (CPU: 2 us into a phase, 3 us before each op, 2 us for a launch, 4 us to close
    # a phase, 20 us between cycles): cycle 0 draft 5 .. 68 (its read-back ends at 63, verify
    # starts at 68): 63 us; verify 68 .. 124 (its kernel beside the side ends at 124): 56 us; cycle
    # 1 draft 124 (cycle 0's work on 7) .. 181: 57 us; verify 181 .. 1144: its join waits for the
    # side's millisecond (to 1094), then 20 and 30 us on 7: 963 us
    assert names == ["draft", "verify"]
    assert truth[:4] == [(0, "draft", 63, 7), (0, "verify", 56, 7), (1, "draft", 57, 7), (1, "verify", 963, 7)]
    # and tracerecon reads every cycle as the simulation does
    got = readings(cycles, tmp_path)[1]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_only_joins_forks_and_joins_the_side_again_is_read_on_the_caller(tmp_path):
    # GIVEN forward forks 13 (20 us there) and reads a result back on 7; sample joins 13, forks it
    # again (10 us there) and joins it, with no work of its own on 7 (the fuzzer's pattern, minimised)
    quiet = [("prepare", 11, 7, []), ("forward", 11, 7, []), ("sample", 11, 7, [("k", 7, 10)])]
    busy = [("prepare", 11, 7, []), ("forward", 11, 7, [("w", 13, 7), ("k", 13, 20), ("item", 7, 4)]),
            ("sample", 11, 7, [("w", 7, 13), ("w", 13, 7), ("k", 13, 10), ("w", 7, 13)])]
    prog = [quiet, busy, busy]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN every phase reads the events on 7 (forward 25 us: to its read-back and the next phase's
    # start; sample 26 us: to the side's second run)
    assert [(c, n, us) for c, n, us, _ in truth][4:6] == [(1, "forward", 25), (1, "sample", 26)]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_whose_side_work_is_joined_a_cycle_later_is_read_where_its_thread_reads_back(tmp_path):
    # GIVEN forward forks side stream 14 and runs only there (10 us), the next cycle's prepare
    # joins it, and sample reads results back on 7: 7 is the thread's current stream
    quiet = [("prepare", 11, 7, []), ("forward", 11, 7, [("w", 14, 7), ("k", 14, 10)]), ("sample", 11, 7, [("k", 7, 10)])]
    joining = [("prepare", 11, 7, [("w", 7, 14)]), ("forward", 11, 7, [("w", 14, 7), ("k", 14, 10)]), ("sample", 11, 7, [("item", 7, 5)])]
    prog = [quiet, joining, joining]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN every phase reads the events on 7 (forward is not read on 14, where its work went)
    assert all(s == 7 for *_, s in truth)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_another_phase_threads_read_backs_say_nothing_of_a_threads_current_stream(tmp_path):
    # GIVEN a loop thread (schedule, process on 7) that reads nothing back and a worker thread
    # whose forward runs on its stream 20 and reads back there; process first waits for 20
    cycle = [("schedule", 11, 7, [("k", 7, 50)]), ("forward", 12, 20, [("w", 20, 7), ("k", 20, 100), ("item", 20, 3)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 80)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN process stays on 7 in every cycle, the last one too (the worker's read-backs on 20 are
    # its own current stream's, not the loop thread's)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_joins_then_forks_with_nothing_after_on_the_caller_is_read_where_results_are_read(tmp_path):
    # GIVEN prepare joins the side stream 13 it forked a cycle before, runs 20 us on 7, reads back
    # on 7, forks 13 anew and leaves 300 us there running into the next cycle; nothing more on 7
    # (the fuzzer's pattern: the thread reads back on 7 in every phase)
    prog = [[("prepare", 11, 7, ([("w", 7, 13)] if c else []) + [("k", 7, 20), ("item", 7, 2), ("w", 13, 7), ("k", 13, 300)]),
             ("forward", 11, 7, [("k", 7, 40)]), ("sample", 11, 7, [("item", 7, 2)])] for c in range(4)]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN every phase reads the events on 7
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_side_stream_only_joined_never_forked_is_read_on_the_stream_that_joins_it(tmp_path):
    # GIVEN prepare runs 26 us and an input copy on plan stream 21, which never waits for 7 (its
    # inputs come from the CPU: SGLang's EAGLE V2 plan stream), then 7 joins it and runs 10 us;
    # forward is on 20, process on 7 (a review's minimal program, from eagle_worker_v2)
    cycle = [("prepare", 11, 7, [("k", 21, 26), ("cp", 21, 1, 1), ("w", 7, 21), ("k", 7, 10)]),
             ("forward", 11, 20, [("k", 20, 1)]), ("process", 11, 7, [("k", 7, 1)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN by hand: prepare opens at 5 us; its kernel on 21 is launched at 10, runs 11 .. 37, the
    # copy 37 .. 38; the join makes 7 wait for 38, its kernel runs 38 .. 48: 43 us on 7 (on 21 it
    # read 33 us, and forward took the other 10)
    assert truth[:2] == [(0, "prepare", 43, 7), (0, "forward", 0, 20)]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_side_stream_forked_at_a_phases_end_and_never_joined_leaves_the_phase_on_its_caller(tmp_path):
    # GIVEN the same waits read the other way: step runs 26 us on 7, then 20 waits for 7 and runs
    # 10 us unjoined (a schedule and a forward step merged in one phase); process computes and
    # reads back on 7
    cycle = [("step", 11, 7, [("k", 7, 26), ("w", 20, 7), ("k", 20, 10)]), ("process", 11, 7, [("k", 7, 2), ("item", 7, 1)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN step stays on 7, where the thread keeps its other phase: 5 .. 37 (the launch at 10 runs
    # 11 .. 37; the events on 7 do not wait for 20's work)
    assert truth[0] == (0, "step", 32, 7)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_joined_only_stream_that_is_another_threads_current_stream_keeps_its_phase(tmp_path):
    # GIVEN the loop thread's launch phase, whose current stream is the worker's 20: it runs
    # 40 us there, then 7 joins it and runs 10 us; the worker's forward runs on 20 every cycle,
    # the loop's process on 7 (a review's program: the thread's own phases alone pointed at 7)
    cycle = [("launch", 11, 20, [("k", 7, 2), ("k", 20, 40), ("w", 7, 20), ("k", 7, 10)]), ("forward", 12, 20, [("k", 20, 5)]),
             ("process", 11, 7, [("k", 7, 1), ("item", 7, 1)])]
    # (and with a second phase of the loop thread on 7: a count of phases is no evidence)
    more = cycle + [("sample", 11, 7, [("k", 7, 1)])]
    for prog in ([cycle] * 4, [more] * 4):
        # WHEN analysed
        truth, got = readings(prog, tmp_path)
        # THEN launch stays on 20 in every cycle, as its events read (51 us, where 7 read 61)
        assert truth[0] == (0, "launch", 51, 20)
        assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_of_the_streams_that_join_a_plan_stream_the_threads_own_is_taken(tmp_path):
    # GIVEN prepare's plan-stream work (21) joined first by a computing stream 22 the thread keeps
    # nothing on, then by its own 7; or two plan streams, both joined by 7
    first_other = [("k", 21, 26), ("cp", 21, 1, 1), ("w", 22, 21), ("k", 22, 2), ("w", 7, 21), ("k", 7, 10)]
    two_sides = [("k", 21, 26), ("k", 22, 30), ("w", 7, 21), ("w", 7, 22), ("k", 7, 10)]
    for prepare in (first_other, two_sides):
        cycle = [("prepare", 11, 7, prepare), ("forward", 11, 20, [("k", 20, 1)]), ("process", 11, 7, [("k", 7, 1)])]
        # WHEN analysed
        truth, got = readings([cycle] * 3, tmp_path)
        # THEN prepare is read on 7 in every cycle
        assert all(s == 7 for c, n, us, s in truth if n == "prepare")
        assert [(c, n, round(us), s) for c, n, us, s in got] == truth
