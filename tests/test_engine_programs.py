"""Random engine programs against events simulated on their current streams (``engine_programs``:
GPU times and truth worked out independently of tracerecon): side streams that compute, an input
stream, a copy stream taking results off, NCCL's stream, `.item()` reads, a worker thread with a
stream of its own, CPU gaps; one to three phases a cycle.

Every phase of every cycle must read its events, wherever side streams and collectives are
joined back: in the phase that forked them, in a later phase of the cycle, or in the next cycle
(2026-12-02: none misread over 300, 300 and 900 seeded programs; before that day's rules 1 of
300 and 9 of 300 misread where joins come later). Beside a KV-offload helper thread (2026-12-03,
seeds 2,000,000-2,000,299): joins in the phase 0 misread (2 before that day's rules), joins
anywhere 6 (9 before), all six as the 5 the same seeds misread without the helper: a phase whose most kernel time went to
a side stream joined back only in the next cycle, read on that stream (the trace alone does not
tell it from a phase run inside ``with torch.cuda.stream(side)``). With CUDA graphs (node by node
or whole, some with a branch), a launching thread that holds no phase and a phase run three times
a cycle (2026-12-03, seeds 8,000,000-8,000,299, six mixes of them): joins in the phase 0 misread,
in the cycle 0, in the next cycle 1-2 (among the two seeds misread without those), where this fuzzer had first found two shapes
read wrong (the two tests below named after them)."""

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


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["cycle", "any"]))
def test_every_phase_reads_its_current_streams_events_where_forks_join_later(seed, joins, tmp_path):
    # GIVEN a random program whose side streams and collectives are joined in the forking phase,
    # a later one of its cycle, or the next cycle's
    # WHEN analysed
    truth, got = readings(program(seed, joins=joins), tmp_path)
    # THEN every phase of every cycle reads what events on its current stream read (to 1 us)
    assert len(got) == len(truth)
    for (cycle, phase, us, _), (g_cycle, g_phase, g_us, _) in zip(truth, got):
        assert (g_cycle, g_phase) == (cycle, phase)
        assert abs(g_us - us) <= 1, (seed, joins, cycle, phase, us, g_us)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["phase", "cycle"]))
def test_every_phase_reads_its_current_streams_events_beside_a_kv_offload_thread(seed, joins, tmp_path):
    # GIVEN a random program beside a helper thread that holds no phase and copies on a stream
    # of its own forked off the shared stream 7, joined into the phase's stream in the next
    # phase, the next cycle's first, or never
    # WHEN analysed
    truth, got = readings(program(seed, joins=joins, helper=True), tmp_path)
    # THEN every phase of every cycle reads what events on its current stream read (to 1 us)
    assert len(got) == len(truth)
    for (cycle, phase, us, _), (g_cycle, g_phase, g_us, _) in zip(truth, got):
        assert (g_cycle, g_phase) == (cycle, phase)
        assert abs(g_us - us) <= 1, (seed, joins, cycle, phase, us, g_us)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["phase", "cycle", "any"]), graphs=st.sampled_from(["node", "whole"]),
       launcher=st.booleans(), repeats=st.booleans())
def test_every_phase_reads_its_current_streams_events_with_graphs_a_launching_thread_and_draft_steps(seed, joins, graphs, launcher, repeats, tmp_path):
    # GIVEN a random program where half the kernels are CUDA graphs (some with a branch that ran
    # beside them), traced node by node or as whole graphs; maybe a worker thread that holds no
    # phase launches all the phases' work; maybe the first phase runs three times a cycle
    # WHEN analysed
    truth, got = readings(program(seed, joins=joins, graphs=graphs, launcher=launcher, repeats=repeats), tmp_path)
    # THEN every phase of every cycle reads what events on its current stream read (to 1 us)
    assert len(got) == len(truth)
    for (cycle, phase, us, _), (g_cycle, g_phase, g_us, _) in zip(truth, got):
        assert (g_cycle, g_phase) == (cycle, phase)
        assert abs(g_us - us) <= 1, (seed, joins, graphs, launcher, repeats, cycle, phase, us, g_us)


def test_a_graph_with_a_branch_keeps_its_launch_stream_busy_until_the_branch_ends(tmp_path):
    # GIVEN verify replays a graph on 7 whose capture forked: nodes of 10 and 10 us on 7 and a
    # 300 us branch beside them (stream 47 in node mode); draft runs 50 us on 7
    cycles = [[("draft", 11, 7, [("k", 7, 50)]), ("verify", 11, 7, [("g", 7, [10, 10], whole, [300])])] for whole in (False, True)]
    for cycle in cycles:
        # WHEN simulated and analysed
        truth, got = readings([cycle] * 3, tmp_path)
        # THEN by hand: draft opens at 5 us, its kernel launched at 10 runs 11 .. 61, it closes at
        # 16, where an event on 7 completes at 61: 56 us; verify's graph, launched at 21, starts
        # when 7 is free at 61: nodes 61 .. 71 and 72 .. 82, the branch 61 .. 361, so 7 is done
        # at 361: verify 300 us (not the nodes' 21 us on 7)
        assert truth[:2] == [(0, "draft", 56, 7), (0, "verify", 300, 7)]
        assert [(c, n, round(us), s) for c, n, us, s in got] == truth


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


def test_a_side_stream_joined_in_a_later_phase_that_only_the_joined_stream_rule_settles(tmp_path):
    # GIVEN forward forks side stream 13 (500 us there) and runs 40 us on 7; sample joins 13 first,
    # then uploads on input stream 9 (a copy, a 30 us kernel), joins 9 into 7 and runs 20 us on 7:
    # sample's busiest stream is 9, which only its join rule moves to 7, the stream that then
    # tells where forward's side work was joined back (the fuzzer's seed 114 under any joins)
    cycle = [("prepare", 11, 7, [("k", 7, 100), ("item", 7, 2)]),
             ("forward", 11, 7, [("w", 13, 7), ("k", 13, 500), ("k", 7, 40)]),
             ("sample", 11, 7, [("w", 7, 13), ("cp", 9, 4, 1), ("k", 9, 30), ("w", 7, 9), ("k", 7, 20)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN by hand: forward opens at S; its wait at S+5, side launch at S+10, its kernel on 7
    # launched at S+15 runs S+16 .. S+56, so the events on 7 read 56 us (not the side's 500 us),
    # and sample, which waits for the side, reads the rest
    assert [(c, n, us) for c, n, us, _ in truth][1] == (0, "forward", 56)
    assert truth[2][2] > 400
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_only_uploads_and_joins_is_read_on_the_stream_its_thread_reads_back_on(tmp_path):
    # GIVEN schedule forks side stream 13 (800 us there) in even cycles; in odd cycles it only
    # uploads on input stream 9 (a copy, a 30 us kernel) and makes 7 wait for 9 and for 13;
    # process runs 50 us on 7 and reads back there (the fuzzer's seed 10 under any joins)
    fork = [("schedule", 11, 7, [("w", 13, 7), ("k", 13, 800)]), ("process", 11, 7, [("k", 7, 50), ("item", 7, 2)])]
    upload = [("schedule", 11, 7, [("cp", 9, 20, 1), ("k", 9, 30), ("w", 7, 9), ("w", 7, 13)]),
              ("process", 11, 7, [("k", 7, 50), ("item", 7, 2)])]
    # WHEN analysed
    truth, got = readings([fork, upload] * 2, tmp_path)
    # THEN every schedule is read on 7: the forking one reads its own CPU window (2 us to open,
    # 5 for the wait, 5 for the launch, 4 to close: an event completes no earlier than it is
    # recorded) and none of the side's 800 us, the uploading one waits for it
    assert [(c, n, us) for c, n, us, _ in truth][0] == (0, "schedule", 16)
    assert truth[2][2] > 600
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_forward_stream_joined_a_cycle_later_keeps_its_phase_though_a_kernel_runs_on_the_default_stream(tmp_path):
    # GIVEN SGLang's overlap shape: schedule on 7, forward on its forward stream 13 (forked off 7,
    # 600 us there) with one small kernel left on 7 after the fork, joined back only by the next
    # cycle's schedule (a review's program: work on 7 beside 13's is no evidence that forward's
    # events go on 7; from the waits alone this is a side stream joined a cycle later)
    prog = [[("schedule", 11, 7, [("k", 7, 30), ("cp", 7, 5, 1)] + ([("w", 7, 13)] if c else [])),
             ("forward", 11, 13, [("w", 13, 7), ("k", 13, 200), ("k", 13, 200), ("k", 13, 200), ("k", 7, 20)]),
             ("process", 11, 7, [("k", 7, 10)])] for c in range(4)]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN forward is read on 13 in every cycle (600 us), and schedule does not take its work
    assert truth[1] == (0, "forward", 600, 13)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_collective_elsewhere_on_the_thread_does_not_move_a_forward_stream_phase(tmp_path):
    # GIVEN the same shape with nothing on 7 in forward, and a collective passed through 7 in
    # schedule (a review's program: a count over the thread says nothing of where forward went)
    nccl = [("w", 30, 7), ("k", 30, 40), ("w", 7, 30)]
    prog = [[("schedule", 11, 7, [("k", 7, 30), ("cp", 7, 5, 1)] + nccl + ([("w", 7, 13)] if c else [])),
             ("forward", 11, 13, [("w", 13, 7), ("k", 13, 300), ("k", 13, 300)]), ("process", 11, 7, [("k", 7, 10)])] for c in range(4)]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN forward is read on 13 in every cycle
    assert [s for c, n, us, s in got if n == "forward"] == [13, 13, 13, 13]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_whose_collectives_go_through_the_caller_is_read_there_when_its_side_is_joined_a_cycle_later(tmp_path):
    # GIVEN forward forks side stream 13 (600 us there), then forks NCCL's stream 30 off 7 for a
    # 100 us collective and joins it back into 7 (ProcessGroupNCCL, on the current stream), with
    # nothing of its own on 7; the next cycle's prepare joins 13 into 7
    prog = [[("prepare", 11, 7, ([("w", 7, 13)] if c else []) + [("k", 7, 50)]),
             ("forward", 11, 7, [("w", 13, 7), ("k", 13, 600), ("w", 30, 7), ("k", 30, 100), ("w", 7, 30)])] for c in range(4)]
    # WHEN analysed
    truth, got = readings(prog, tmp_path)
    # THEN by hand: prepare's kernel, launched at 10, runs 11 .. 61; forward opens at 16 and its
    # collective, forked off 7 at 31, waits for that kernel and runs 61 .. 161; 7 waits for it:
    # 100 us on 7 (on 13 forward would read the side's 600 us)
    assert truth[1] == (0, "forward", 100, 7)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_an_input_stream_forked_for_a_second_upload_is_joined_into_the_stream_its_thread_reads_back_on(tmp_path):
    # GIVEN forward runs on 7 around a fork of side stream 14 (900 us there); sample only
    # uploads on input stream 9: a copy and a kernel, a join into 7, then 9 forked off 7 for a
    # second copy and kernel, joined again, and 7 made to wait for 14; prepare reads back on 7
    # (the fuzzer's seed 406 under any joins)
    cycle = [("prepare", 11, 7, [("k", 7, 100), ("item", 7, 1)]),
             ("forward", 11, 7, [("k", 7, 50), ("w", 14, 7), ("k", 14, 900), ("k", 7, 60)]),
             ("sample", 11, 7, [("cp", 9, 20, 1), ("k", 9, 40), ("w", 7, 9), ("w", 9, 7), ("cp", 9, 30, 1), ("k", 9, 10),
                                ("w", 7, 9), ("w", 7, 14)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN sample is read on 7, where it waits for the side's 900 us (on 9 it would read only the
    # uploads), and forward on 7 too
    assert all(s == 7 for *_, s in truth) and truth[2][2] > 700
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_lone_phase_joining_a_busier_input_stream_is_read_on_the_stream_its_thread_reads_back_on(tmp_path):
    # GIVEN one phase a cycle (no other phase of its thread to say which stream is its own):
    # a 12 us kernel on input stream 9, a `.item()` on 7, then 7 made to wait for 9 and a
    # 10 us kernel on 7 (the fuzzer's input-stream shape, minimised to one phase)
    cycle = [("forward", 11, 7, [("k", 9, 12), ("item", 7, 1), ("w", 7, 9), ("k", 7, 10)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN it is read on 7, where its thread reads back and 9 was only joined (on 9, the busier
    # stream, it read 27 us a cycle where events on 7 read 32)
    assert all(s == 7 for *_, s in truth)
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_workers_phase_keeping_a_busier_input_stream_is_read_on_the_stream_it_took_the_loops_work_into(tmp_path):
    # GIVEN the loop thread's schedule on 7; a worker thread's forward whose stream 20 first
    # waits for 7 (the hand-over), then an input stream 9 fed from the CPU (a copy, 30 us) joined
    # into 20 (20 us there), forked off 20 again (60 us) and joined back (20 us on 20); the loop's
    # process joins 20 into 7 (the fuzzer's seed 12000189, minimised)
    cycle = [("schedule", 11, 7, [("k", 7, 50)]),
             ("forward", 12, 20, [("w", 20, 7), ("cp", 9, 5, 1), ("k", 9, 30), ("w", 20, 9), ("k", 20, 20), ("w", 9, 20),
                                  ("k", 9, 60), ("w", 20, 9), ("k", 20, 20)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 10)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN forward is read on 20, where its thread took the loop's work (on 9, the busier stream,
    # it read 80 us where events on 20 read 100, and process 30 us where they read 10)
    assert [s for *_, s in truth] == [7, 20, 7] * 3
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_workers_phase_stays_on_the_stream_it_took_the_loops_work_into_beside_a_side_stream_and_an_input_stream(tmp_path):
    # GIVEN the same worker's forward, with a side stream 14 forked off 20 (400 us there) and
    # joined back between its turns with the input stream 9 (the fuzzer's seed 12000189, cycle 0)
    cycle = [("schedule", 11, 7, [("k", 7, 50)]),
             ("forward", 12, 20, [("w", 20, 7), ("cp", 9, 5, 1), ("k", 9, 30), ("w", 20, 9), ("w", 14, 20), ("k", 14, 400),
                                  ("k", 20, 20), ("w", 20, 14), ("w", 9, 20), ("k", 9, 30), ("w", 20, 9), ("k", 20, 20)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 10)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN forward is read on 20: the side stream's caller, which the turns with the input stream
    # do not move it off (it read 430 us on 9 where events on 20 read 450)
    assert [s for *_, s in truth] == [7, 20, 7] * 3
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_joins_then_forks_is_read_on_the_stream_it_passes_its_collectives_through(tmp_path):
    # GIVEN draft runs a collective forked off 7 and joined back (ProcessGroupNCCL on the current
    # stream), 25 us on 7, then forks side stream 14 (600 us there); draft_extend runs another
    # collective through 7 and 100 us on 7, joins 14, forks it anew (500 us there), runs 150 us
    # on 7 and joins 14 again; nothing is read back (the fuzzer's seed 80 under joins in the cycle)
    cycle = [("draft", 11, 7, [("w", 30, 7), ("k", 30, 300), ("k", 7, 25), ("w", 7, 30), ("w", 14, 7), ("k", 14, 600)]),
             ("draft_extend", 11, 7, [("w", 30, 7), ("k", 30, 200), ("w", 7, 30), ("k", 7, 100), ("w", 7, 14), ("w", 14, 7),
                                      ("k", 14, 500), ("k", 7, 150), ("w", 7, 14)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN both are read on 7 in every cycle: draft ends with its collective, draft_extend waits
    # for both of 14's runs
    assert all(s == 7 for *_, s in truth) and truth[1][2] > 900
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_joins_passes_a_collective_through_its_stream_and_forks_again_is_read_there(tmp_path):
    # GIVEN draft runs a collective through 7 (598 us on NCCL's stream 30, the heaviest stream of
    # both phases), 84 us on 7, forks side stream 14 (535 us there) and runs 95 us on 7; verify
    # joins 14, runs a collective through 7 and 85 us on 7, forks 14 anew (481 us there), runs
    # 113 us on 7 and joins 14 as its last act; nothing is read back (the fuzzer's seed
    # 7,000,076 under joins in the cycle, minimised: verify was read on 14, where the waits alone
    # also make 7 look forked off 14 and joined back)
    plain = [("draft", 11, 7, [("k", 7, 300)]), ("verify", 11, 7, [("k", 7, 200)])]
    busy = [("draft", 11, 7, [("w", 30, 7), ("k", 30, 598), ("k", 7, 84), ("w", 7, 30), ("w", 14, 7), ("k", 14, 535), ("k", 7, 95)]),
            ("verify", 11, 7, [("w", 7, 14), ("w", 30, 7), ("k", 30, 892), ("k", 7, 85), ("w", 7, 30), ("w", 14, 7), ("k", 14, 196),
                               ("k", 14, 285), ("k", 7, 113), ("w", 7, 14)])]
    # WHEN analysed
    truth, got = readings([plain, plain, busy, plain], tmp_path)
    # THEN every phase of every cycle reads the events on 7 (verify waits for both of 14's runs:
    # more than the 481 us read on 14)
    assert all(s == 7 for *_, s in truth) and truth[5][2] > 1500
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_joins_a_side_stream_idle_all_run_is_read_on_its_own_stream(tmp_path):
    # GIVEN prepare joins side stream 14, which runs nothing in the whole trace, and runs 300 us
    # on 7; forward's only GPU call forks 14 off 7 again (the join and fork an engine makes
    # whether or not the side stream had work this run); sample runs 50 us on 7 (the fuzzer's
    # seed 7,000,186 with graphs, minimised: the waits alone make 7 look forked off 14 in prepare
    # and joined back in forward)
    cycle = [("prepare", 11, 7, [("w", 7, 14), ("k", 7, 300)]), ("forward", 11, 7, [("w", 14, 7)]), ("sample", 11, 7, [("k", 7, 50)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN by hand: prepare opens at 5 us, makes its join at 10 .. 12 and launches its kernel at
    # 15 (it runs 16 .. 316), and closes at 21, where an event on 7 completes at 316: 311 us;
    # forward adds nothing to 7: 0 us. Every phase of every cycle reads the events on 7 (read on
    # 14, prepare took 16 us and forward 295 in the first cycle, 0 and 300 in the others)
    assert truth[:2] == [(0, "prepare", 311, 7), (0, "forward", 0, 7)]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_only_joins_and_forks_is_read_on_the_stream_its_thread_passes_collectives_through(tmp_path):
    # GIVEN schedule runs a collective through 7, 50 us on 7 and forks side stream 13 (800 us
    # there) in even cycles; in odd cycles it joins 13, forks it anew (600 us there) and joins it,
    # with nothing of its own on 7, no collective and no read-back: only the thread's other
    # phases tell that 7 is its current stream
    fork = [("schedule", 11, 7, [("w", 30, 7), ("k", 30, 100), ("w", 7, 30), ("k", 7, 50), ("w", 13, 7), ("k", 13, 800)]),
            ("process", 11, 7, [("k", 7, 40)])]
    turn = [("schedule", 11, 7, [("w", 7, 13), ("w", 13, 7), ("k", 13, 600), ("w", 7, 13)]), ("process", 11, 7, [("k", 7, 40)])]
    # WHEN analysed
    truth, got = readings([fork, turn] * 2, tmp_path)
    # THEN every schedule is read on 7: the odd ones wait for both of 13's runs (more than the
    # 600 us read on 13), the even ones end with their 50 us on 7
    assert all(s == 7 for *_, s in truth) and truth[2][2] > 1000
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_reads_back_on_the_stream_its_thread_switched_to_is_read_there(tmp_path):
    # GIVEN one thread whose forward switches its current stream to 20 (SGLang's forward stream,
    # in the scheduler's own thread): 20 waits for 7, runs 300 us and forward reads a result back
    # on 20; process makes 7 wait for 20; schedule and process read back on 7 (so the thread as a
    # whole reads back more on 7)
    cycle = [("schedule", 11, 7, [("k", 7, 100), ("item", 7, 1)]), ("forward", 11, 20, [("w", 20, 7), ("k", 20, 300), ("item", 20, 2)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 50), ("item", 7, 1)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN forward is read on 20 in every cycle (its own read-back says so), not on 7, where its
    # events would read nothing of its 300 us
    assert [s for c, n, us, s in got if n == "forward"] == [20, 20, 20] and truth[1][2] > 300
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_that_passes_its_collectives_through_the_stream_its_thread_switched_to_is_read_there(tmp_path):
    # GIVEN the same thread and streams, forward reading nothing back but running a collective
    # forked off 20 and joined back into 20 (ProcessGroupNCCL on the current stream)
    cycle = [("schedule", 11, 7, [("k", 7, 100), ("item", 7, 1)]),
             ("forward", 11, 20, [("w", 20, 7), ("k", 20, 300), ("w", 30, 20), ("k", 30, 80), ("w", 20, 30), ("k", 20, 20)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 50), ("item", 7, 1)])]
    # WHEN analysed
    truth, got = readings([cycle] * 3, tmp_path)
    # THEN forward is read on 20 in every cycle
    assert [s for c, n, us, s in got if n == "forward"] == [20, 20, 20]
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_a_phase_read_as_a_side_streams_caller_says_what_its_own_streams_events_would_read(tmp_path):
    # GIVEN one thread whose forward runs all its kernels on stream 20 (300 us), which waits for
    # 7 at forward's start and which process makes 7 wait for; forward reads nothing back there:
    # from the trace's waits, 20 is a side stream of 7 joined in a later phase, and equally
    # forward's own current stream (`with torch.cuda.stream(...)` around its range)
    cycle = [("schedule", 11, 7, [("k", 7, 100), ("item", 7, 1)]), ("forward", 11, 20, [("w", 20, 7), ("k", 20, 300)]),
             ("process", 11, 7, [("w", 7, 20), ("k", 7, 50), ("item", 7, 1)])]
    t, names, truth = simulate([cycle] * 3)
    # WHEN analysed
    analysis = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=tuple(names)))
    got = [(p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in analysis.ranks[0].phases.to_pylist()]
    # THEN forward is read on 7, its CPU window of 16 us (2 to open, 5 for the wait, 5 for the
    # launch, 4 to close: nothing of its own there), and a warning gives the other reading: events
    # on 20 read its kernel, launched 10 us in, from forward's start to the kernel's end, 311 us,
    # which is what the simulation of events on 20 gives
    assert got[1] == ("forward", 16, 7) and truth[1] == (0, "forward", 311, 20)
    (line,) = [w for w in analysis.warnings if "'forward'" in w]
    assert "in 3 of 3 instances it ran all its kernels on stream 20" in line and "read: 0.016 ms" in line and "events there read 0.311 ms" in line


def test_a_read_back_inside_a_side_stream_forked_and_joined_within_the_phase_leaves_it_on_the_caller(tmp_path):
    # GIVEN forward runs 30 us on 7, forks side stream 13 (900 us there), reads a result back on 13
    # (`.item()` inside the `with` for 13), joins 13 into 7 and runs 200 us on 7; process is on
    # another thread's stream 20 (a review's program)
    forward = [("k", 7, 30), ("w", 13, 7), ("k", 13, 900), ("item", 13, 5), ("w", 7, 13), ("k", 7, 200)]
    cycle = [("prepare", 11, 7, [("k", 7, 50), ("item", 7, 2)]), ("forward", 11, 7, forward), ("process", 12, 20, [("w", 20, 7), ("k", 20, 30)])]
    # WHEN analysed
    truth, got = readings([cycle] * 2, tmp_path)
    # THEN forward is read on 7 in both cycles, with the 200 us after the join (not on 13)
    assert [s for c, n, us, s in got if n == "forward"] == [7, 7] and truth[1][3] == 7
    assert [(c, n, round(us), s) for c, n, us, s in got] == truth


def test_no_side_stream_reading_is_said_where_the_phases_kernels_ran_on_two_streams_or_on_its_own(tmp_path):
    # GIVEN forward's kernels on two streams forked off 7 (300 us on 20, 200 us on 21), or on 20
    # and a collective on 7 itself; process makes 7 wait for them
    two_sides = [("w", 20, 7), ("k", 20, 300), ("w", 21, 7), ("k", 21, 200)]
    with_collective = [("w", 20, 7), ("k", 20, 300), ("k", 7, 40, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")]
    for forward, joins in ((two_sides, [("w", 7, 20), ("w", 7, 21)]), (with_collective, [("w", 7, 20)])):
        cycle = [("schedule", 11, 7, [("k", 7, 100), ("item", 7, 1)]), ("forward", 11, 20, forward),
                 ("process", 11, 7, joins + [("k", 7, 50), ("item", 7, 1)])]
        t, names, _ = simulate([cycle] * 3)
        path = tmp_path / "t.sqlite"
        path.unlink(missing_ok=True)
        # WHEN analysed
        analysis = load([t.write(path)], PhaseConfig(phases=tuple(names)))
        # THEN no line says forward "ran all its kernels" on one stream (one reading on one
        # stream is not what events would read there)
        assert not [w for w in analysis.warnings if "ran all its kernels" in w], analysis.warnings
