"""Phases whose thread said which stream was current (``tracerecon.instrument``: as the phase
begins, an event recorded on the current stream, then a ``tracerecon.stream`` mark):
they are read on that stream, whatever their kernels' streams suggest. From the kernels and
waits alone a thread that switches its current stream for one phase (``with
torch.cuda.stream(F)`` around forward's range, SGLang's forward stream) reads the same as one
that forks F off its stream inside the phase and joins it back later; the mark tells them
apart, cycle by cycle.

Truth: ``engine_programs.simulate``, events on each phase's current stream worked out
independently of tracerecon, and hand reckonings."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from engine_programs import SAID_EVENT, U, program, simulate
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.run_dir import STREAM_MARK

LOOP = 11
# SGLang's shape, minimised: prepare runs 100 us on 7; forward runs with 20 current, forks it
# off 7 and runs 500 us there; sample joins 20 back into 7, runs 10 us and reads back (.item()).
SWITCH = [("prepare", LOOP, 7, [("k", 7, 100)]), ("forward", LOOP, 20, [("w", 20, 7), ("k", 20, 500)]),
          ("sample", LOOP, 7, [("w", 7, 20), ("k", 7, 10), ("item", 7, 2)])]


def readings(prog, tmp_path, say: bool) -> tuple[list, list, tuple]:
    t, names, truth = simulate(prog, say_streams=say)
    path = tmp_path / "t.sqlite"
    path.unlink(missing_ok=True)
    run = load([t.write(path)], PhaseConfig(phases=tuple(names)))
    return truth, [(p["cycle"], p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in run.ranks[0].phases.to_pylist()], run.warnings


def test_a_phase_run_inside_its_own_current_stream_is_read_there_once_it_says_so(tmp_path):
    # GIVEN four cycles of SWITCH whose phases say their current stream
    # WHEN analysed
    truth, got, warnings = readings([SWITCH] * 4, tmp_path, say=True)
    # THEN by hand (CPU: 2 us into a phase, 3 us before each op, 2 us for a launch or a wait, 4
    # us to close a phase; an event completes at its CPU instant or when the work queued before
    # it is done): cycle 0 prepare 5 .. 111 (its kernel 11 .. 111): 106 us; forward, on 20, from
    # 111 to its kernel's end 611: 500 us; sample from 611 to its range's end at 628 (.item()
    # returned at 624; an event recorded at 628 completes then, the GPU idle): 17 us
    assert truth[:3] == [(0, "prepare", 106, 7), (0, "forward", 500, 20), (0, "sample", 17, 7)]
    # and every cycle reads so, forward on 20, with nothing to warn of
    assert got == [(c, n, float(us), s) for c, n, us, s in truth]
    assert warnings == ()


def test_without_the_mark_the_same_trace_reads_the_switched_phase_as_a_side_stream_and_says_so(tmp_path):
    # GIVEN the same four cycles, their phases saying nothing of their stream
    # WHEN analysed
    truth, got, warnings = readings([SWITCH] * 4, tmp_path, say=False)
    # THEN forward is read on 7, 20 taken for a side stream (0 us: launched and gone; sample
    # absorbs the 500 us when it joins), and a warning gives the other reading: 0.500 ms on 20
    assert [(n, us, s) for _, n, us, s in got[:3]] == [("prepare", 106.0, 7), ("forward", 0.0, 7), ("sample", 517.0, 7)]
    assert len(warnings) == 1 and "'forward': in 4 of 4 instances" in warnings[0] and "events there read 0.500 ms" in warnings[0]


def test_instances_that_only_copied_on_the_side_stream_are_said_as_those_that_ran_kernels_there(tmp_path):
    # GIVEN SWITCH whose forward, in odd cycles, runs no kernel but a 300 us copy to the device
    # on 20 (after 20's wait for 7); its phases say nothing of their stream
    copying = [SWITCH[0], ("forward", LOOP, 20, [("w", 20, 7), ("cp", 20, 300, 1)]), SWITCH[2]]
    truth, got, warnings = readings([SWITCH, copying] * 2, tmp_path, say=False)
    # THEN every forward is read on 7 (20 a side stream of it: 0 us), where the events on 20 the
    # engine records read 500 us and, copying, 300 us (the simulation's truth)
    assert [(c, us) for c, n, us, _ in truth if n == "forward"] == [(0, 500), (1, 300), (2, 500), (3, 300)]
    assert [(c, us, s) for c, n, us, s in got if n == "forward"] == [(0, 0.0, 7), (1, 0.0, 7), (2, 0.0, 7), (3, 0.0, 7)]
    # and a warning gives the other reading of each kind: the copying ones too (their stream
    # computes in the other cycles: no copy stream, so nothing had said them)
    kernels = [w for w in warnings if "'forward': in 2 of 4 instances it ran all its kernels on stream 20" in w]
    copies = [w for w in warnings if "'forward': in 2 of 4 instances it ran no kernel, only copies on stream 20, a side stream of stream 7" in w]
    assert len(kernels) == 1 and "events there read 0.500 ms" in kernels[0]
    assert len(copies) == 1 and "events there read 0.300 ms" in copies[0], warnings


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["phase", "cycle", "any"]))
def test_every_phase_of_a_thread_switching_streams_reads_its_events_when_phases_say_their_stream(seed, joins, tmp_path):
    # GIVEN a random program whose forward runs on the loop's thread with 20 current (side
    # streams forked off 20 and 7, an input stream, a copy stream, NCCL's, .item() reads),
    # every phase saying its current stream
    # WHEN analysed
    truth, got, _ = readings(program(seed, joins=joins, stream_switch=True), tmp_path, say=True)
    # THEN every phase of every cycle reads what events on its current stream read (to 1 us)
    assert len(got) == len(truth)
    for (cycle, phase, us, stream), (g_cycle, g_phase, g_us, g_stream) in zip(truth, got):
        assert (g_cycle, g_phase, g_stream) == (cycle, phase, stream)
        assert abs(g_us - us) <= 1, (seed, joins, cycle, phase, us, g_us)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["phase", "cycle", "any"]))
def test_saying_the_stream_changes_nothing_where_the_work_already_tells_it(seed, joins, tmp_path):
    # GIVEN a random program of the other shapes (a quarter with forward on a worker thread of
    # its own), every phase saying its current stream
    # WHEN analysed
    truth, got, _ = readings(program(seed, joins=joins), tmp_path, say=True)
    # THEN every phase reads its events, as it does unsaid (test_engine_programs)
    assert len(got) == len(truth)
    for (cycle, phase, us, _), (g_cycle, g_phase, g_us, _) in zip(truth, got):
        assert (g_cycle, g_phase) == (cycle, phase)
        assert abs(g_us - us) <= 1, (seed, joins, cycle, phase, us, g_us)


def said(t: FakeTrace, at_us: int, stream: int, tid: int = LOOP, record: int = 1) -> None:
    """What tracerecon.instrument does as a phase begins: the record, then the mark."""
    t.event_record(event=SAID_EVENT, record=record, start=at_us * U, end=at_us * U + 500, stream=stream, tid=tid)
    t.mark(STREAM_MARK, at_us * U + 700, tid=tid)


def kernel(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int, tid: int = LOOP) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def analyse(t: FakeTrace, tmp_path, phases=("prepare", "forward")) -> list:
    run = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases))
    return [(p["cycle"], p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in run.ranks[0].phases.to_pylist()]


# forward with 7 current forks 20 inside and runs 500 us there; sample joins 20 back: read
# unmarked, forward is 0 us on 7 and sample 517 us (the trace's waits make 20 a side stream)
FORKED_INSIDE = [("prepare", LOOP, 7, [("k", 7, 100)]), ("forward", LOOP, 7, [("w", 20, 7), ("k", 20, 500)]),
                 ("sample", LOOP, 7, [("w", 7, 20), ("k", 7, 10), ("item", 7, 2)])]


def range_edges(t: FakeTrace, name: str) -> list[tuple[int, int]]:
    """(start, end) in ns of the ranges ``name`` (``cycle N`` for every cycle's)."""
    return sorted((r["start"], r["end"]) for r in t.nvtx if r["eventType"] == 59 and (r["text"] == name or name == "cycle N" and r["text"].startswith("cycle ")))


def test_a_mark_whose_record_the_export_lost_says_nothing(tmp_path):
    # GIVEN FORKED_INSIDE's cycles, marked, whose exports lost the instrument's event rows (the
    # record calls kept), so each mark's last call is a record the export cannot place, and the
    # thread's next event record is the join's, on side stream 20
    t, names, truth = simulate([FORKED_INSIDE] * 3, say_streams=True)
    own = {e["correlationId"] for e in t.events if e["eventId"] == SAID_EVENT + LOOP}
    t.events = [e for e in t.events if e["correlationId"] not in own]
    # WHEN analysed
    run = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=tuple(names)))
    got = [(p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in run.ranks[0].phases.to_pylist()]
    # THEN every phase is read as unmarked, which here is the truth (forward 0 us on 7, sample
    # 517 us), not on the join's stream
    assert [(n, float(us), s) for _, n, us, s in truth[:3]] == [("prepare", 106.0, 7), ("forward", 0.0, 7), ("sample", 517.0, 7)]
    assert got == [(n, float(us), s) for _, n, us, s in truth]


def test_a_mark_of_a_range_nested_in_a_phase_that_marked_nothing_says_nothing_of_the_phase(tmp_path):
    # GIVEN FORKED_INSIDE's cycles, unmarked, but for a range `attn` nested in forward after its
    # fork, with 20 current, that marks 20 (an instrumented range the phases do not name, inside
    # an engine's own forward range)
    t, names, truth = simulate([FORKED_INSIDE] * 3)
    for i, (s, _) in enumerate(range_edges(t, "forward")):
        t.range("attn", s + 6 * U, s + 9 * U, tid=LOOP)
        said(t, s // U + 7, 20, record=i + 1)
    # WHEN analysed
    got = analyse(t, tmp_path, phases=tuple(names))
    # THEN forward is read as unmarked (0 us on 7, the truth), not on attn's stream 20
    assert got == [(c, n, float(us), s) for c, n, us, s in truth]


def test_a_mark_outside_every_phase_says_nothing(tmp_path):
    # GIVEN FORKED_INSIDE's cycles, unmarked, with a record on 20 and a mark 5 us after each
    # cycle's range, in no phase (nor any range)
    t, names, truth = simulate([FORKED_INSIDE] * 3)
    for i, (_, end) in enumerate(range_edges(t, "cycle N")):
        said(t, end // U + 5, 20, record=i + 1)
    # WHEN analysed
    got = analyse(t, tmp_path, phases=tuple(names))
    # THEN no phase takes it: all read as unmarked (the truth)
    assert got == [(c, n, float(us), s) for c, n, us, s in truth]


def marked_cycles(edges_us: tuple[int, int, int], streams: tuple[int, int], launches: list) -> FakeTrace:
    """Three cycles 1 ms apart of prepare and forward on the loop thread (between ``edges_us``),
    each phase saying its stream (``streams``) 1 us into its range, and per cycle the
    ``launches``: (CPU us, (GPU start us, end us), stream, launching thread)."""
    t = FakeTrace()
    for c in range(3):
        o = 1000 * c
        t.cycle(c, *((o + x) * U for x in edges_us), names=("prepare", "forward"), tid=LOOP)
        for i, stream in enumerate(streams):
            said(t, o + edges_us[i] + 1, stream, record=2 * c + i + 1)
        for at, (g0, g1), stream, tid in launches:
            kernel(t, o + at, (o + g0, o + g1), stream, tid=tid)
    return t


def test_a_phase_whose_work_another_thread_launched_keeps_that_works_stream(tmp_path):
    # GIVEN phases on the loop thread that say 7 is current, while a worker thread (tid 12)
    # launches all their GPU work on 20 (prepare 40 us, forward 300 us)
    t = marked_cycles((10, 100, 500), (7, 7), [(20, (30, 70), 20, 12), (110, (120, 420), 20, 12)])
    # WHEN analysed
    got = analyse(t, tmp_path)
    # THEN the loop thread's current stream is not where that work went: each phase is read on
    # 20, as unsaid (events there complete at the boundaries' CPU instants 10, 100 and 500, the
    # work done by then): 90 and 400 us
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 400.0, 20)] * 3


def test_a_worker_that_used_the_said_stream_only_outside_the_phase_keeps_its_works_stream(tmp_path):
    # GIVEN the worker above (tid 12, all the phases' work on 20) which also launched a kernel
    # on 7 once, before the cycles (a warm-up: CPU 2 us, GPU 3..6 us)
    t = marked_cycles((10, 100, 500), (7, 7), [(20, (30, 70), 20, 12), (110, (120, 420), 20, 12)])
    kernel(t, 2, (3, 6), 7, tid=12)
    # WHEN analysed
    got = analyse(t, tmp_path)
    # THEN it worked from 7 in no phase's range: each phase is read on 20 as above, 90 and 400 us
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 400.0, 20)] * 3


def test_a_phase_whose_work_a_launcher_forked_off_the_said_stream_is_read_on_it(tmp_path):
    # GIVEN phases on the loop thread that say 7 is current, while a launcher thread (tid 15,
    # holding no range) launches all their GPU work: prepare's kernel on 7 (GPU 30 .. 70 us), and
    # in forward a fork of 14 off 7 (a record on 7, 14 waiting for it, at 110) and a kernel on
    # 14 (GPU 130 .. 700, past forward's end at 500), joined back into 7 after the cycle (600)
    launcher = 15
    t = marked_cycles((10, 100, 500), (7, 7), [(20, (30, 70), 7, launcher), (120, (130, 700), 14, launcher)])
    for c in range(3):
        o = 1000 * c
        for at, waiter, source, event in ((110, 14, 7, 40), (600, 7, 14, 41)):
            t.event_record(event=event, record=c + 1, start=(o + at) * U, end=(o + at) * U + 500, stream=source, tid=launcher)
            t.stream_wait(event=event, record=c + 1, start=(o + at + 1) * U, end=(o + at + 1) * U + 500, stream=waiter, tid=launcher)
    # WHEN analysed
    got = analyse(t, tmp_path)
    # THEN the launcher queues work on 7 itself and forks 14 off it: 7 is where the phases'
    # work goes from, and events recorded on 7 read each phase: prepare from 10 (7 idle) to 100
    # (its kernel done at 70): 90 us; forward from 100 to 500 (7 idle, 14's kernel not waited
    # for before 600): 400 us. (Read off 14, forward would be 100 .. 700: 600 us.)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 7), ("forward", 400.0, 7)] * 3


def test_a_phase_that_launches_nothing_is_read_on_the_stream_it_says(tmp_path):
    # GIVEN forward (with 20 current) runs 300 us on 20 and prepare (7 current) launches nothing
    t = marked_cycles((10, 50, 100), (7, 20), [(60, (70, 370), 20, LOOP)])
    # WHEN analysed
    got = analyse(t, tmp_path)
    # THEN prepare reads events on 7 (nothing queued: its range, 40 us) and forward events on
    # 20 (from 50, where the boundary's event on 7 completes, to its kernel's end 370: 320 us);
    # unsaid, prepare would take forward's stream and read 20 (the same 40 us here: nothing is
    # queued there before 50 either; the stream it is read on is what the mark changes)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 40.0, 7), ("forward", 320.0, 20)] * 3


def test_marks_in_an_export_without_event_records_are_said_to_be_unread(tmp_path):
    # GIVEN SWITCH's cycles, their phases marked, in an export that kept no event records (nsys
    # 2022, or --cuda-event-trace=false): the CUDA_EVENT rows dropped, the record calls kept
    t, names, _ = simulate([SWITCH] * 4, say_streams=True)
    t.events.clear()
    # WHEN analysed
    run = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=tuple(names)))
    got = [(p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in run.ranks[0].phases.to_pylist()]
    # THEN the phases are read from their work (without records the waits cannot be followed
    # either, so nothing makes 20 a side stream: forward is read where its kernel ran), and a
    # warning says the 12 marks could not be read and why, another that the streams' waits
    # (7 and 20 wait for each other) are not modelled
    assert got[:3] == [("prepare", 106.0, 7), ("forward", 500.0, 20), ("sample", 17.0, 7)]
    assert any(w.endswith("12 phase starts marked their current stream (tracerecon.stream), but the export holds no CUDA event records to say "
                          "which (CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): each phase's stream is "
                          "chosen from its work instead") for w in run.warnings), run.warnings
    assert any(w.endswith("streams waited for events on 2 stream(s), but the export holds no CUDA event records to say what they waited for "
                          "(CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): such waits are not modelled: "
                          "a phase whose stream only waited may read short, and the next one long") for w in run.warnings), run.warnings


def test_the_marking_is_on_by_default_off_by_the_environment_or_the_call_and_idle_without_cuda():
    # GIVEN fresh processes importing the instrument (torch imported, CUDA never initialised)
    code = ("import sys, torch; from tracerecon import instrument as i\n"
            "with i.cycle(0), i.phase('verify'): pass\n"
            "on = i._declaring; i.declare_streams(False); print(on, i._declaring)")
    def run(**env) -> str:
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, **env), capture_output=True, text=True, check=True).stdout.split()

    # WHEN run plainly, and with TRACERECON_STREAM_MARKS=0
    # THEN marking is on after a phase ran with no CUDA (nothing to mark, nothing failed) and off
    # after declare_streams(False); the environment turns it off from the start
    assert run() == ["True", "False"]
    assert run(TRACERECON_STREAM_MARKS="0") == ["False", "False"]


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), joins=st.sampled_from(["phase", "cycle", "any"]), gaps=st.sampled_from(["code", "unnamed"]))
def test_every_phase_and_cycle_reads_its_events_with_work_between_phases_when_phases_say_their_stream(seed, joins, gaps, tmp_path):
    # GIVEN a random program with code run between two phases of its cycles (in no range, or in
    # a range not named a phase): kernels, read-backs, copies, forks and joins there, every phase
    # saying its current stream
    t, names, truth, cycles = simulate(program(seed, joins=joins, gaps=gaps), say_streams=True, cycles=True)
    # WHEN analysed
    path = tmp_path / "t.sqlite"
    path.unlink(missing_ok=True)
    (rank,) = load([t.write(path)], PhaseConfig(phases=tuple(names))).ranks
    got = [(p["cycle"], p["phase"], p["gpu_ns"] / U, p["stream_id"]) for p in rank.phases.to_pylist()]
    # THEN every phase reads what events on its current stream read, and every cycle what
    # events at its first phase's start and its end read (the work between held), to 1 us
    assert [(c, ph, s) for c, ph, _, s in got] == [(c, ph, s) for c, ph, _, s in truth]
    assert all(abs(g[2] - w[2]) <= 1 for g, w in zip(got, truth)), (seed, joins, gaps, [(w, g) for g, w in zip(got, truth) if abs(g[2] - w[2]) > 1])
    got_cycles = [(c["cycle"], c["gpu_ns"] / U) for c in rank.cycles.to_pylist()]
    assert [c for c, _ in got_cycles] == [c for c, _ in cycles]
    assert all(abs(g - w) <= 1 for (_, g), (_, w) in zip(got_cycles, cycles)), (seed, joins, gaps, got_cycles, cycles)


def _worker_on_its_own_stream():
    # prepare's kernel on 20 (GPU 30..70); forward's on 20 (GPU 130..700, past forward's CPU end at 500)
    return marked_cycles((10, 100, 500), (7, 7), [(20, (30, 70), 20, 12), (120, (130, 700), 20, 12)])


def _worker_making_its_stream_wait_for_7():
    """The worker above, making 20 wait for 7 as forward's work begins in each cycle
    (`forward_stream.wait_stream(default_stream)`, SGLang's overlap thread, a vLLM-style
    worker): a record on 7 and 20 waiting for it, both by the worker, at b+110."""
    t = _worker_on_its_own_stream()
    for c in range(3):
        o = 1000 * c
        t.event_record(event=40, record=c + 1, start=(o + 110) * U, end=(o + 110) * U + 500, stream=7, tid=12)
        t.stream_wait(event=40, record=c + 1, start=(o + 111) * U, end=(o + 111) * U + 500, stream=20, tid=12)
    return t


def test_worker_that_syncs_its_stream_with_the_said_stream_keeps_its_streams_reading(tmp_path):
    # GIVEN the worker making its stream 20 wait for 7 every cycle; 20 is never joined into 7 on
    # the GPU (the loop reads results by CPU sync)
    got = analyse(_worker_making_its_stream_wait_for_7(), tmp_path)
    # THEN the worker's work went to its own stream 20, exactly as in
    # test_a_phase_whose_work_another_thread_launched_keeps_that_works_stream: read on 20,
    # prepare 10..100 = 90 us, forward 100..700 = 600 us (not on 7, idle: 400 us, hiding 200 us
    # of forward's GPU time: no fork off 7, 20 is never joined back into it)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 600.0, 20)] * 3


def test_worker_that_joins_its_stream_back_once_at_shutdown_keeps_its_streams_reading(tmp_path):
    # GIVEN the same worker, which once, at shutdown (CPU 5000 us, long after the last cycle),
    # makes 7 wait for 20 (`default_stream.wait_stream(forward_stream)` in a teardown or a weight
    # update): a record on 20 and the wait on 7, both by the worker
    t = _worker_making_its_stream_wait_for_7()
    t.event_record(event=41, record=1, start=5000 * U, end=5000 * U + 500, stream=20, tid=12)
    t.stream_wait(event=41, record=1, start=5001 * U, end=5001 * U + 500, stream=7, tid=12)
    got = analyse(t, tmp_path)
    # THEN the one join, 2.3 ms after the last cycle, changes no event of any cycle: the worker
    # never worked from 7 within a phase (its kernels all on 20), its forks of three cycles are
    # no side stream it joined back each time: prepare 90 us and forward 600 us on 20, as above
    # (once forward read on 7: 600, 600 and 400 us, the last cycle hiding 200 us)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 600.0, 20)] * 3


def _launcher_forking_twice_joining_once(join_at: int):
    """prepare 10..100 and forward 100..500 say 7; a launcher thread (15, no range) whose current
    stream is 7 launches no kernel there: it forks 14 off 7 in prepare (15) and runs a kernel on
    14 (GPU 30..70), forks 14 off 7 again in forward (110) and runs one on 14 (GPU 130..700), and
    joins 14 back into 7 once per cycle, at ``join_at`` (b+)."""
    t = marked_cycles((10, 100, 500), (7, 7), [(20, (30, 70), 14, 15), (120, (130, 700), 14, 15)])
    for c in range(3):
        o = 1000 * c
        for at, waiter, source, event, rec in ((15, 14, 7, 40, 2 * c + 1), (110, 14, 7, 40, 2 * c + 2), (join_at, 7, 14, 41, c + 1)):
            t.event_record(event=event, record=rec, start=(o + at) * U, end=(o + at) * U + 500, stream=source, tid=15)
            t.stream_wait(event=event, record=rec, start=(o + at + 1) * U, end=(o + at + 1) * U + 500, stream=waiter, tid=15)
    return t


def test_a_launcher_forking_its_side_stream_in_two_phases_and_joining_it_back_once_a_cycle_keeps_the_said_stream(tmp_path):
    # GIVEN the launcher above joining 14 back once a cycle: after it (b+600), or as the next
    # cycle's prepare begins (b+1012, before that cycle's fork)
    for join_at in (600, 1012):
        (tmp_path / str(join_at)).mkdir()
        got = analyse(_launcher_forking_twice_joining_once(join_at), tmp_path / str(join_at))
        # THEN events on 7 (the said stream, the launcher's current) read: 7 holds only the fork
        # records and the join's wait, made after forward's end and done by 700 (14's kernel),
        # before the next cycle's events: prepare 10..100 = 90 us, forward 100..500 = 400 us
        # (read on 14, forward would be 100..700 = 600 us). Forks of one cycle that one join
        # closes are a side stream the launcher joined back, not a worker's stream made to wait.
        assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 7), ("forward", 400.0, 7)] * 3, join_at


def test_a_launcher_joining_its_side_stream_back_a_cycle_late_keeps_the_said_stream(tmp_path):
    # GIVEN the launcher above joining 14 back into 7 at b+1200: in the next cycle's forward,
    # after that cycle's forks (the pattern of an output copy taken up a step later)
    got = analyse(_launcher_forking_twice_joining_once(1200), tmp_path)
    # THEN every phase is read on 7, and events there read: 7's only work is each join's wait
    # (b+1201), which waits for all that 14 held by b+1200, the next cycle's forward kernel too
    # (launched b+1120, done b+1700). Cycle 0: prepare 10..100 = 90, forward 100..500 = 400 (no
    # wait on 7 yet). Cycles 1 and 2: prepare 90 (the wait before is done by b+700), forward from
    # b+100 to where 7 is free after the wait made at b+201: b+700, 600 us.
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 7), ("forward", 400.0, 7)] + [("prepare", 90.0, 7), ("forward", 600.0, 7)] * 2


def test_worker_that_copies_a_small_input_on_the_said_stream_keeps_its_streams_reading(tmp_path):
    # GIVEN the worker's non_blocking H2D copy of a 2 us input, issued before it enters its
    # stream context (so on the default stream 7), at 112 in forward; all kernels still on 20
    t = _worker_on_its_own_stream()
    for c in range(3):
        o = 1000 * c
        t.copy(t.call("cudaMemcpyAsync", (o + 112) * U, (o + 113) * U, tid=12), (o + 114) * U, (o + 116) * U, kind=1, stream=7)
    got = analyse(t, tmp_path)
    # THEN forward's work (its kernels: copies do not decide where kernels ran) is on 20:
    # 90 and 600 us on 20 (not 400 on 7)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 600.0, 20)] * 3


LAUNCHER = 15  # a launcher thread, holding no range


def _fork_and_join_back(t, at, back, c, side=14, cur=7, tid=LAUNCHER):
    """``tid`` forks ``side`` off ``cur`` at ``at`` (a record on cur, the wait on side) and joins it
    back at ``back`` (a record on side, the wait on cur), cycle ``c``'s records."""
    t.event_record(event=40, record=c + 1, start=at * U, end=at * U + 500, stream=cur, tid=tid)
    t.stream_wait(event=40, record=c + 1, start=(at + 1) * U, end=(at + 1) * U + 500, stream=side, tid=tid)
    t.event_record(event=41, record=c + 1, start=back * U, end=back * U + 500, stream=side, tid=tid)
    t.stream_wait(event=41, record=c + 1, start=(back + 1) * U, end=(back + 1) * U + 500, stream=cur, tid=tid)


def test_a_launcher_joining_back_within_a_long_last_cycle_keeps_the_said_stream(tmp_path):
    # GIVEN three 1 ms decode cycles (prepare 10..100, forward 100..500) and a last 9 ms prefill
    # cycle (prepare 10..100, forward 100..8000) at 3000; each phase says 7; launcher 15 launches
    # prepare's kernel on 7 (GPU 30..70), forks 14 off 7 in forward (b+110), runs forward's
    # kernel on 14 (decode: GPU 130..700; prefill: GPU 130..9000) and joins 14 back into 7 after
    # forward, within the same cycle (decode b+600, prefill b+8100).
    t = FakeTrace()
    starts = [0, 1000, 2000, 3000]
    for c, o in enumerate(starts):
        fwd_end, k_end, join = (500, 700, 600) if c < 3 else (8000, 9000, 8100)
        t.cycle(c, (o + 10) * U, (o + 100) * U, (o + fwd_end) * U, names=("prepare", "forward"), tid=LOOP)
        said(t, o + 11, 7, record=2 * c + 1)
        said(t, o + 101, 7, record=2 * c + 2)
        kernel(t, o + 20, (o + 30, o + 70), 7, tid=LAUNCHER)
        kernel(t, o + 120, (o + 130, o + k_end), 14, tid=LAUNCHER)
        _fork_and_join_back(t, o + 110, o + join, c)
    got = analyse(t, tmp_path)
    # THEN events on 7 (the launcher's current stream, joined back within each cycle) read:
    # prepare 90; decode forward 100..500 = 400; prefill forward 100..8000 = 7900 (7 idle until
    # the join at 8101). Read on 14 the prefill forward would be 100..9000 = 8900.
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 7), ("forward", 400.0, 7)] * 3 + [("prepare", 90.0, 7), ("forward", 7900.0, 7)]


def test_a_worker_joined_back_once_at_shutdown_after_a_long_warm_up_cycle_keeps_its_streams_reading(tmp_path):
    # GIVEN three cycles: a 20 ms warm-up cycle 0 at 0 (prepare 10..100, forward 100..19500),
    # then cycles at 20000 and 21000 (prepare 10..100, forward 100..500), each phase saying 7;
    # a worker thread (12) whose own stream is 20 launches all the work there (prepare GPU
    # 30..70, forward GPU 130..700 (warm-up: 130..19700)), makes 20 wait for 7 at b+110 each
    # cycle and, once, at shutdown 5 ms after the last cycle (CPU 26000), makes 7 wait for 20.
    t = FakeTrace()
    starts = [0, 20000, 21000]
    for c, o in enumerate(starts):
        fwd_end, k_end = (19500, 19700) if c == 0 else (500, 700)
        t.cycle(c, (o + 10) * U, (o + 100) * U, (o + fwd_end) * U, names=("prepare", "forward"), tid=LOOP)
        said(t, o + 11, 7, record=2 * c + 1)
        said(t, o + 101, 7, record=2 * c + 2)
        kernel(t, o + 20, (o + 30, o + 70), 20, tid=12)
        kernel(t, o + 120, (o + 130, o + k_end), 20, tid=12)
        t.event_record(event=40, record=c + 1, start=(o + 110) * U, end=(o + 110) * U + 500, stream=7, tid=12)
        t.stream_wait(event=40, record=c + 1, start=(o + 111) * U, end=(o + 111) * U + 500, stream=20, tid=12)
    t.event_record(event=41, record=1, start=26000 * U, end=26000 * U + 500, stream=20, tid=12)
    t.stream_wait(event=41, record=1, start=26001 * U, end=26001 * U + 500, stream=7, tid=12)
    got = analyse(t, tmp_path)
    # THEN as in test_worker_that_joins_its_stream_back_once_at_shutdown_keeps_its_streams_reading:
    # the worker's stream 20: prepare 90, forward warm-up 100..19700 = 19600, then 600, 600.
    # (Read on 7 the last forward would be 400, hiding 200 us.)
    assert [(n, us, s) for _, n, us, s in got] == [("prepare", 90.0, 20), ("forward", 19600.0, 20)] + [("prepare", 90.0, 20), ("forward", 600.0, 20)] * 2


def test_a_launcher_serving_two_loops_keeps_the_said_stream_by_its_own_loops_cycles(tmp_path):
    # GIVEN loop A (tid 11): three 1 ms cycles at 0, 1000, 2000 (prepare 10..100, forward
    # 100..500), saying 7; the launcher 15 (no range) launches A's prepare kernel on 7 (GPU
    # 30..70), forks 14 off 7 at b+110, runs A's forward kernel on 14 (GPU 130..700) and joins
    # 14 back into 7 at b+600 (after A's forward, before A's next cycle).
    # Loop B (tid 13, also saying 7, its work also launched by 15): short cycles at b+505 and
    # b+550 (prepare s..s+15, forward s+15..s+40), each phase one 2 us kernel on 7 launched by
    # 15 at s+5 / s+20 (GPU s+6..s+8 / s+21..s+23), all after A's forward.
    t = FakeTrace()
    rec = 0
    j = 0
    for c in range(3):
        o = 1000 * c
        t.cycle(j, (o + 10) * U, (o + 100) * U, (o + 500) * U, names=("prepare", "forward"), tid=LOOP)
        j += 1
        rec += 1; said(t, o + 11, 7, record=rec)
        rec += 1; said(t, o + 101, 7, record=rec)
        kernel(t, o + 20, (o + 30, o + 70), 7, tid=LAUNCHER)
        kernel(t, o + 120, (o + 130, o + 700), 14, tid=LAUNCHER)
        _fork_and_join_back(t, o + 110, o + 600, c)
        for s in (o + 505, o + 550):
            t.cycle(j, s * U, (s + 15) * U, (s + 40) * U, names=("prepare", "forward"), tid=13)
            j += 1
            rec += 1; said(t, s + 1, 7, tid=13, record=rec)
            rec += 1; said(t, s + 16, 7, tid=13, record=rec)
            kernel(t, s + 5, (s + 6, s + 8), 7, tid=LAUNCHER)
            kernel(t, s + 20, (s + 21, s + 23), 7, tid=LAUNCHER)
    got = analyse(t, tmp_path)
    # THEN A's phases read events on 7 (the launcher's current stream; 14 joined back at b+600):
    # prepare 10..100 = 90, forward 100..500 = 400 (read on 14: 100..700 = 600)
    a = [(n, us, s) for c, n, us, s in got if us >= 50]
    assert a == [("prepare", 90.0, 7), ("forward", 400.0, 7)] * 3
