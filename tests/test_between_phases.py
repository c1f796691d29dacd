"""GPU work queued between two phases of a cycle (code between the scopes an engine or a preset
marks, a phase left out of ``--phase``) is in neither phase: CUDA events recorded at the earlier
phase's end and the later one's start read it between them. Every expected number is worked out
by hand from the ops' times."""

from __future__ import annotations

import re
import shlex

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us


def kernel(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, tid: int | None = None) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def draft_verify_cycles(tmp_path, between, verify_gpu, phases=("draft", "verify"), name="t.sqlite"):
    """Three cycles (b = 1000c us) on stream 7: draft CPU b..b+100 (its kernel b+20..b+90),
    verify CPU b+200..b+300 (its kernel launched at b+210, running ``verify_gpu(b)``), and what
    ``between(t, c, b)`` puts between them; loaded with ``phases`` (draft and verify)."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 200) * U, (b + 300) * U)
        kernel(t, b + 10, (b + 20, b + 90))
        between(t, c, b)
        kernel(t, b + 210, verify_gpu(b))
    return load([t.write(tmp_path / name)], PhaseConfig(phases=tuple(phases)))


def cycles_with(between_stream: int | None, tmp_path):
    """The cycles with, unless ``between_stream`` is None, a kernel launched at b+110, in no
    phase, on that stream (b+120..b+600); verify's kernel runs b+600..b+700 behind it on 7,
    else b+220..b+300."""
    def between(t, c, b):
        if between_stream is not None:
            kernel(t, b + 110, (b + 120, b + 600), stream=between_stream)

    return draft_verify_cycles(tmp_path, between, lambda b: (b + 600, b + 700) if between_stream == 7 else (b + 220, b + 300))


def gpu_us(a) -> list[tuple[str, int]]:
    return [(p["phase"], p["gpu_ns"] // U) for p in a.ranks[0].phases.to_pylist()]


def test_work_queued_between_two_phases_is_in_neither(tmp_path):
    # GIVEN the kernel in no phase queued on stream 7 between draft and verify
    a = cycles_with(7, tmp_path)
    # THEN draft ends at its CPU end (b+100: its kernel is done by b+90), verify begins when the
    # kernel between is done (b+600) and ends with its own (b+700): 100 and 100 us, as events at
    # each phase's ends would read; the cycle holds all of it (b..b+700), so the phases do not add up
    assert gpu_us(a) == [("draft", 100), ("verify", 100)] * 3
    cycles = a.ranks[0].cycles.to_pylist()
    assert [(c["gpu_ns"] // U, c["phases_gpu_ns"] // U, c["adds_up"]) for c in cycles] == [(700, 200, False)] * 3
    # AND verify is said to have queued behind it, and the report says what is in no phase
    assert {p["cause"] for p in a.ranks[0].phases.to_pylist() if p["phase"] == "verify"} == {"queued_behind"}
    (note,) = [w for w in a.warnings if "between" in w]
    assert "between 'draft' and 'verify': the GPU time between the two is in neither phase" in note and "in 3 of 3 cycles, 0.500 ms (median)" in note


def test_phases_with_nothing_queued_between_them_still_tile_their_cycle(tmp_path):
    # GIVEN no kernel between the phases (verify's kernel b+220..b+300), or one on stream 9,
    # which neither phase's stream (7) waits for
    for between in (None, 9):
        (tmp_path / str(between)).mkdir()
        a = cycles_with(between, tmp_path / str(between))
        # THEN draft ends where verify begins (b+200: the CPU gap is draft's tail, as an event
        # recorded at verify's start reads it) and verify ends with its kernel at b+300, so the
        # phases add up to their cycle and nothing is said
        assert gpu_us(a) == [("draft", 200), ("verify", 100)] * 3
        assert all(c["adds_up"] and c["phases_gpu_ns"] == c["gpu_ns"] for c in a.ranks[0].cycles.to_pylist())
        assert not [w for w in a.warnings if "between" in w]


def cycles_with_a_wait(tmp_path, copy: tuple[int, int, int], record_at: int, wait_at: int, verify_gpu: tuple[int, int]):
    """The cycles with stream 7 made to wait for a copy stream between the phases: a kernel on 9
    (``copy``: launched at, runs from, to), an event recorded on 9 at ``record_at`` and waited
    for on 7 at ``wait_at``; verify's kernel runs ``verify_gpu`` (offsets from b)."""
    def between(t, c, b):
        kernel(t, b + copy[0], (b + copy[1], b + copy[2]), stream=9)
        t.event_record(event=1, record=c + 1, start=(b + record_at) * U, end=(b + record_at + 1) * U, stream=9)
        t.stream_wait(event=1, record=c + 1, start=(b + wait_at) * U, end=(b + wait_at + 1) * U, stream=7)

    return draft_verify_cycles(tmp_path, between, lambda b: (b + verify_gpu[0], b + verify_gpu[1]))


def test_a_stream_made_to_wait_between_two_phases_counts_as_work_between(tmp_path):
    # GIVEN the work between on stream 9 (b+120..b+600) and stream 7 made to wait for it between
    # the phases (record on 9 at b+130, 7 waits at b+140): an input copy on a copy stream,
    # outside the marked scopes; verify's kernel runs after it (b+600..b+700)
    a = cycles_with_a_wait(tmp_path, (110, 120, 600), 130, 140, (600, 700))
    # THEN as with the work on 7 itself: draft 100 us (its CPU end; 7 is done at b+90), verify
    # 100 us (b+600..b+700), the 500 us between in neither, and said
    assert gpu_us(a) == [("draft", 100), ("verify", 100)] * 3
    assert any("between 'draft' and 'verify'" in w and "0.500 ms (median)" in w for w in a.warnings)


def test_a_wait_between_two_phases_for_work_already_done_holds_nothing_up(tmp_path):
    # GIVEN stream 9's copy done at b+8 (launched at b+1) and stream 7 made to wait for it
    # between the phases (record on 9 at b+120, wait at b+150): glue code that waits for an input
    # copy finished long ago; verify's kernel b+220..b+300
    a = cycles_with_a_wait(tmp_path, (1, 2, 8), 120, 150, (220, 300))
    # THEN the phases tile as with nothing between (draft 200 us, verify 100), and nothing is said
    assert gpu_us(a) == [("draft", 200), ("verify", 100)] * 3
    assert not [w for w in a.warnings if "between" in w]


def verify_in_cycle_ranges(tmp_path, verify_us: tuple[int, int], work):
    """Three cycle ranges b..b+900 (b = 1000c us), each holding verify over ``verify_us`` (us
    after b) and what ``work(t, b)`` launches; loaded with verify as the only phase."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 900) * U)
        t.range("verify", (b + verify_us[0]) * U, (b + verify_us[1]) * U)
        work(t, b)
    return load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))

def test_work_inside_the_cycle_range_before_its_first_phase_is_said(tmp_path):
    # GIVEN three cycle ranges (b = 1000c us, b..b+900) whose first 200 us are unmarked code
    # (vLLM's preprocess) that copies inputs (launched b+50, running b+100..b+300), then verify
    # (CPU b+200..b+600, its kernel launched b+210 running b+300..b+800), then unmarked code
    # queueing a kernel at b+700 (b+800..b+850)
    def work(t, b):
        t.copy(t.call("cudaMemcpyAsync", (b + 50) * U, (b + 52) * U), (b + 100) * U, (b + 300) * U, kind=1)
        kernel(t, b + 210, (b + 300, b + 800))
        kernel(t, b + 700, (b + 800, b + 850))

    a = verify_in_cycle_ranges(tmp_path, (200, 600), work)
    # THEN verify reads 300..800 (500 us), the cycle verify's span, and two warnings: an event at
    # the cycle's start (b) reads b, one at verify's start b+300: 300 us before the first phase,
    # of which the copy ran 200 (the GPU idled the first 100); after the last, verify's end
    # b+800 to the stream's end b+850: 50 us
    (rank,) = a.ranks
    assert rank.phases["gpu_ns"].to_pylist() == [500 * U] * 3 and rank.cycles["gpu_ns"].to_pylist() == [500 * U] * 3
    (before,) = [w for w in a.warnings if "before its first phase ('verify') in 3 of 3 cycles, 0.300 ms (median) (the work ran 0.200 ms of it, median)" in w]
    (after,) = [w for w in a.warnings if "after its last phase ('verify') in 3 of 3 cycles, 0.050 ms" in w]


def test_a_launch_of_another_thread_returning_after_the_phase_is_not_its(tmp_path):
    # GIVEN cycle ranges b..b+900 (b = 1000c us) on thread 10 holding verify b+100..b+300,
    # which launches nothing itself; thread 11's cudaLaunchKernel call runs b+250..b+320 (it
    # returns after verify ended) and its kernel b+330..b+400
    def work(t, b):
        t.kernel(t.call("cudaLaunchKernel", (b + 250) * U, (b + 320) * U, tid=11), (b + 330) * U, (b + 400) * U)

    a = verify_in_cycle_ranges(tmp_path, (100, 300), work)
    # THEN an event recorded at verify's end (b+300) is recorded before the kernel was put on
    # the stream (b+320) and reads b+300: verify reads b+100..b+300 = 200 us, the kernel none of
    # its, and a warning says work was queued in the cycle range after its last phase (the call
    # begun inside verify had made the kernel verify's, its end read after it: 300 us, where its
    # events read 200)
    (rank,) = a.ranks
    assert rank.phases["gpu_ns"].to_pylist() == [200 * U] * 3 and rank.phases["n_gpu_ops"].to_pylist() == [0] * 3
    assert any("inside the cycle range after its last phase ('verify') in 3 of 3 cycles, 0.100 ms (median) (the work ran 0.070 ms of it" in w for w in a.warnings), a.warnings


def test_the_between_warning_names_the_range_the_work_was_launched_in(tmp_path):
    # GIVEN the cycles with a range 'eplb' (b+110..b+150, in no phase) between draft and verify,
    # launching a kernel at b+120 (b+120..b+600) on stream 7; verify's kernel runs behind it
    def between(t, c, b):
        t.range("eplb", (b + 110) * U, (b + 150) * U)
        kernel(t, b + 120, (b + 120, b + 600))

    a = draft_verify_cycles(tmp_path, between, lambda b: (b + 600, b + 700))
    # THEN the warning says which range to name as a phase
    (line,) = [w for w in a.warnings if "queued between 'draft' and 'verify'" in w]
    assert "it was launched in the range 'eplb': name it in --phase to see it" in line


def test_the_between_warning_gives_a_pattern_for_a_range_numbered_per_instance(tmp_path):
    # GIVEN the same, the range named as torch's profiler names its ops, a number per instance
    # ('aten::add, seq = 4710, op_id = 9980' in cycle 0, 4711 and 9981 in cycle 1, ...)
    def between(t, c, b):
        t.range(f"aten::add, seq = {4710 + c}, op_id = {9980 + c}", (b + 110) * U, (b + 150) * U)
        kernel(t, b + 120, (b + 120, b + 600))

    a = draft_verify_cycles(tmp_path, between, lambda b: (b + 600, b + 700))
    # THEN the warning gives the --phase that takes every instance, not one instance's name
    (line,) = [w for w in a.warnings if "queued between 'draft' and 'verify'" in w]
    assert "one of a name numbered per instance: --phase 'aten::add=re:^aten::add, seq = \\d+, op_id = \\d+$' takes them all" in line, line


def test_the_between_warning_gives_the_value_naming_a_range_that_cannot_be_typed(tmp_path):
    # GIVEN the same, the range named 'eplb\x01' (a control character: not typable in a shell, no
    # number in it; a fuzzing review's: the hint called it "one of a name numbered per instance")
    def between(t, c, b):
        t.range("eplb\x01", (b + 110) * U, (b + 150) * U)
        kernel(t, b + 120, (b + 120, b + 600))

    a = draft_verify_cycles(tmp_path, between, lambda b: (b + 600, b + 700))
    # THEN the warning gives the --phase value that names it, and says nothing of instances
    (line,) = [w for w in a.warnings if "queued between 'draft' and 'verify'" in w]
    assert "numbered per instance" not in line, line
    m = re.search(r"it was launched in the range 'eplb\\x01': --phase (\S+) names it, to see it", line)
    assert m is not None, line
    # WHEN that value is given as a phase THEN the range is one: events at its CPU ends on stream
    # 7 read b+110 (after draft's kernel, ended b+90) and b+600 (after its kernel): 490 us; verify
    # 100 us (its kernel b+600..b+700, behind that one); no warning of work between phases
    value = shlex.split(m.group(1))[0]
    named = draft_verify_cycles(tmp_path, between, lambda b: (b + 600, b + 700), phases=("draft", value, "verify"), name="named.sqlite")
    phases = named.ranks[0].phases
    by = {}
    for label, gpu in zip(phases["phase"].to_pylist(), phases["gpu_ns"].to_pylist()):
        by.setdefault(label, []).append(gpu)
    eplb = next(k for k in by if k not in ("draft", "verify"))
    assert by[eplb] == [490 * U] * 3 and by["verify"] == [100 * U] * 3, by
    assert not [w for w in named.warnings if "queued between" in w], named.warnings


def test_small_gaps_that_keep_a_cycle_from_adding_up_are_said(tmp_path):
    # GIVEN cycles (b = 1000c us) of pa [b, b+100], pb [b+100.5, b+200], pc [b+200.5, b+300];
    # each phase's kernel runs to b+150 / b+256 / b+350; between pa and pb (launched at
    # b+100.2) a kernel b+150..b+156, between pb and pc (b+200.2) one b+256..b+262
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c * U
        t.range(f"cycle {c}", b, b + 400 * U)
        for name, lo, hi in (("pa", 0, 100_000), ("pb", 100_500, 200_000), ("pc", 200_500, 300_000)):
            t.range(name, b + lo, b + hi)
        for at, s, e in ((5_000, 10_000, 150_000), (100_200, 150_000, 156_000), (100_700, 156_000, 256_000),
                         (200_200, 256_000, 262_000), (200_700, 262_000, 350_000)):
            t.kernel(t.call("cudaLaunchKernel", b + at, b + at + 100), b + s, b + e)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("pa", "pb", "pc")))
    # THEN the cycle (10..350: 340 us, 2 % = 6.8 us; floor 10 us) misses 6 + 6 = 12 us between
    # its phases: it does not add up, and both gaps are said (each alone is under the floor)
    (rank,) = a.ranks
    assert rank.cycles["adds_up"].to_pylist() == [False] * 3
    assert any("between 'pa' and 'pb'" in w and "0.006 ms" in w for w in a.warnings)
    assert any("between 'pb' and 'pc'" in w and "0.006 ms" in w for w in a.warnings)


def test_the_between_warning_names_no_range_that_holds_the_phases(tmp_path):
    # GIVEN the eplb case, each cycle's phases inside a range 'step' (b..b+900) that holds them
    # and the work between them; the work launched in no other range
    def between(t, c, b):
        kernel(t, b + 120, (b + 120, b + 600))

    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 950) * U)
        t.range("step", b * U, (b + 900) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 200) * U, (b + 300) * U)
        kernel(t, b + 10, (b + 20, b + 90))
        between(t, c, b)
        kernel(t, b + 210, (b + 600, b + 700))
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify")))
    # THEN the warning gives the generic advice: naming 'step' as a phase would hide both phases
    (line,) = [w for w in a.warnings if "queued between 'draft' and 'verify'" in w]
    assert "'step'" not in line and "give that work a phase range of its own" in line


def handed_over(tmp_path, forward_tid: int):
    """Three cycles (b = 1000c us) marked on thread 1 (b..b+600) on stream 7: prepare on thread 1
    (CPU b..b+100, its kernel launched b+10 running b+20..b+50), then forward on
    ``forward_tid`` (CPU b+250..b+400, its kernel launched b+260 running b+270..b+500)."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("prepare", b * U, (b + 100) * U, tid=1)
        t.range("forward", (b + 250) * U, (b + 400) * U, tid=forward_tid)
        kernel(t, b + 10, (b + 20, b + 50), tid=1)
        kernel(t, b + 260, (b + 270, b + 500), tid=forward_tid)
    return load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward")))


def test_a_phase_handed_to_another_thread_begins_where_the_earlier_one_ended(tmp_path):
    # GIVEN forward on a model thread (2), woken 150 us after prepare ended on the loop thread
    a = handed_over(tmp_path, forward_tid=2)
    # THEN an event recorded when prepare ends (b+100; its kernel was done at b+50) reads prepare
    # 100 us, and forward runs from there to its kernel's end (b+500): 400 us; the phases still
    # add up to the cycle (b..b+500) and nothing is said
    assert gpu_us(a) == [("prepare", 100), ("forward", 400)] * 3
    assert all(c["adds_up"] and c["gpu_ns"] == 500 * U for c in a.ranks[0].cycles.to_pylist())
    assert not [w for w in a.warnings if "between" in w]


def test_on_one_thread_the_gap_between_two_phases_is_the_earlier_ones_tail(tmp_path):
    # GIVEN the same phases on one thread (the thread's own code between the two scopes)
    a = handed_over(tmp_path, forward_tid=1)
    # THEN an event recorded at forward's start (b+250) reads prepare 250 us and forward 250 us
    assert gpu_us(a) == [("prepare", 250), ("forward", 250)] * 3


def test_a_range_ended_by_the_thread_that_runs_the_next_phase_hands_nothing_over(tmp_path):
    # GIVEN prepare on thread 1 (b..b+100, kernel b+20..b+50); forward started by nvtxRangeStart
    # on thread 1 at b+100 and ended by thread 2 at b+400 (its kernel, launched by thread 2 at
    # b+260, runs b+270..b+350); thread 2 then works on the CPU until b+550 and runs sample
    # (push/pop b+550..b+600, kernel b+570..b+580)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("prepare", b * U, (b + 100) * U, tid=1)
        t.range("forward", (b + 100) * U, (b + 400) * U, tid=1, end_tid=2, push_pop=False)
        t.range("sample", (b + 550) * U, (b + 600) * U, tid=2)
        kernel(t, b + 10, (b + 20, b + 50), tid=1)
        kernel(t, b + 260, (b + 270, b + 350), tid=2)
        kernel(t, b + 560, (b + 570, b + 580), tid=2)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample")))
    # THEN prepare hands forward over at its CPU end (b+100: 100 us); forward's range was ended
    # by thread 2, which runs sample, so its CPU gap is forward's tail: b+100..b+550 = 450 us and
    # sample b+550..b+600 = 50 us (read as a hand-off from thread 1: 300 and 200)
    assert gpu_us(a) == [("prepare", 100), ("forward", 450), ("sample", 50)] * 3


def test_cycle_ranges_that_overlap_the_next_cycle_hold_no_edge_work(tmp_path):
    # GIVEN cycle ranges started on thread 10 and ended on thread 11 50 us after the next cycle
    # began (b..b+1050); in each, draft (b..b+100) and verify (b+100..b+200) launch a kernel each
    # (b+20..b+150, b+150..b+300), and in a second trace verify's cycle also copies a result
    # after verify, in no phase (b+300..b+340, launched at b+250)
    def trace(tail: bool) -> FakeTrace:
        t = FakeTrace()
        for c in range(6):
            b = 1000 * c
            t.range(f"cycle {c}", b * U, (b + 1050) * U, tid=10, end_tid=11, push_pop=False)
            t.range("draft", b * U, (b + 100) * U, tid=10)
            t.range("verify", (b + 100) * U, (b + 200) * U, tid=10)
            kernel(t, b + 10, (b + 20, b + 150), tid=10)
            kernel(t, b + 110, (b + 150, b + 300), tid=10)
            if tail:
                kernel(t, b + 250, (b + 300, b + 340), tid=10)
        return t
    # WHEN analysed
    plain = load([trace(False).write(tmp_path / "plain.sqlite")])
    tail = load([trace(True).write(tmp_path / "tail.sqlite")])
    # THEN the next cycle's phases' work, inside this cycle's range, is no edge work: nothing is
    # said, and every phase reads 150 us; the work after verify in its own cycle still is (40 us)
    assert not any("queued inside the cycle range" in w for w in plain.warnings), plain.warnings
    assert [p["gpu_ns"] // U for p in plain.ranks[0].phases.to_pylist()] == [150] * 12
    assert any("queued inside the cycle range after its last phase ('verify') in 6 of 6 cycles, 0.040 ms" in w for w in tail.warnings), tail.warnings


def test_threads_running_cycles_of_their_own_keep_their_edge_work_said(tmp_path):
    # GIVEN one process whose threads 11 and 12 each run cycles of their own on their own
    # streams, interleaved (thread 12's begin 200 us after thread 11's, every 500 us): each
    # cycle range queues 100 us of GPU work (launched at its start) before its first phase
    t = FakeTrace()
    for k in range(8):
        for tid, stream, off in ((11, 7, 0), (12, 8, 200)):
            a = 500 * k + off
            t.range(f"cycle {2 * k + (tid == 12)}", a * U, (a + 400 + (100 if tid == 12 else 0)) * U, tid=tid)
            t.range("draft", (a + 150) * U, (a + 250) * U, tid=tid)
            t.range("verify", (a + 250) * U, (a + 400) * U, tid=tid)
            kernel(t, a + 5, (a + 10, a + 110), stream=stream, tid=tid)
            kernel(t, a + 155, (a + 160, a + 240), stream=stream, tid=tid)
            kernel(t, a + 255, (a + 260, a + 390), stream=stream, tid=tid)
    # WHEN analysed THEN every cycle's edge work is said: each cycle is trimmed only by its own
    # thread's next and last cycles, never by the other thread's interleaved ones
    warnings = load([t.write(tmp_path / "t.sqlite")]).warnings
    assert any("queued inside the cycle range before its first phase ('draft') in 16 of 16 cycles" in w for w in warnings), warnings


def test_a_gap_counts_against_its_cycles_whole_span():
    # GIVEN one thread's cycle 0: phase a's boundaries 0..400 us, phase b's 415..1000 us (15 us
    # between them), and cycle 1 the same with 25 us between
    import numpy as np

    from tracerecon.analysis.rank import _between_notes

    pid, tid = np.full(4, 10), np.full(4, 1)
    cycle = np.array([0, 0, 1, 1])
    b_start = np.array([0, 415, 2000, 2425]) * U
    b_end = np.array([400, 1000, 2400, 3000]) * U
    # WHEN the work between phases is looked for
    notes = _between_notes(pid, tid, cycle, b_start, b_end, ["a", "b", "a", "b"])
    # THEN only cycle 1's gap is one: a cycle may miss max(10 us, 2 % of its 1,000 us span) =
    # 20 us, so 15 us is within it and 25 us is not (2 % of a span taken from the wrong ends,
    # 400 or 585 us, would let 15 us count too)
    assert len(notes) == 1 and "in 1 of 2 cycles, 0.025 ms (median)" in notes[0]


def test_edge_work_is_said_where_it_ran_long_enough_with_the_time_it_ran(tmp_path):
    # GIVEN 6 cycle ranges [b, b+300] (b = 1000c), each opening with a 100 us CPU step that is
    # no phase and queues work on an idle GPU (launched at b+10), then draft [b+100, b+200]
    # (kernel b+110..b+190) and verify [b+200, b+300] (kernel b+210..b+290); the step's work is
    # 1 us in one trace and 30 us in the other; another thread's kernel in no phase runs all
    # along on stream 9
    def trace(work_us: int) -> FakeTrace:
        t = FakeTrace()
        for c in range(6):
            b = 1000 * c
            t.range(f"cycle {c}", b * U, (b + 300) * U, tid=10)
            t.range("draft", (b + 100) * U, (b + 200) * U, tid=10)
            t.range("verify", (b + 200) * U, (b + 300) * U, tid=10)
            kernel(t, b + 10, (b + 12, b + 12 + work_us), tid=10)
            kernel(t, b + 110, (b + 110, b + 190), tid=10)
            kernel(t, b + 210, (b + 210, b + 290), tid=10)
            kernel(t, b + 1, (b + 2, b + 250), stream=9, tid=11)  # another thread's, on a stream 7 never waits for
        return t
    # WHEN analysed
    small = load([trace(1).write(tmp_path / "small.sqlite")], PhaseConfig(phases=("draft", "verify")))
    large = load([trace(30).write(tmp_path / "large.sqlite")], PhaseConfig(phases=("draft", "verify")))
    # THEN 1 us of work is less than a cycle may miss (max(10 us, 2 % of 200 us)): nothing is
    # said (the 100 us from the cycle's start to draft's boundary are the GPU idling); 30 us is
    # said, with the 0.100 ms between the events at the cycle's start and draft's and the 0.030
    # ms the work ran of it
    assert not any("queued inside the cycle range" in w for w in small.warnings), small.warnings
    assert any("queued inside the cycle range before its first phase ('draft') in 6 of 6 cycles, 0.100 ms (median) (the work ran 0.030 ms "
               "of it, median)" in w for w in large.warnings), large.warnings


def test_edge_work_that_is_a_wait_for_a_copy_launched_before_the_cycle_is_said(tmp_path):
    # GIVEN cycle ranges [b, b+900] (b = 1000(c+1) us); between them a copy on stream 9 in no
    # phase (launched b-50, running b-40..b+200, its event recorded at b-45); inside the cycle
    # range, before verify [b+100, b+600], stream 7 made to wait for it (b+20); verify's kernel
    # b+200..b+500 (a review's reproduction)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * (c + 1)
        t.range(f"cycle {c}", b * U, (b + 900) * U)
        kernel(t, b - 50, (b - 40, b + 200), stream=9)
        t.event_record(event=1, record=c + 1, start=(b - 45) * U, end=(b - 44) * U, stream=9)
        t.stream_wait(event=1, record=c + 1, start=(b + 20) * U, end=(b + 21) * U, stream=7)
        t.range("verify", (b + 100) * U, (b + 600) * U)
        kernel(t, b + 110, (b + 200, b + 500))
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))
    # THEN verify begins when the copy is done (b+200) and the 200 us from the cycle's start,
    # all of it the copy running, are said to lie before the first phase
    assert [p["gpu_boundary_start_ns"] // U for p in a.ranks[0].phases.to_pylist()] == [1200, 2200, 3200]
    assert any("before its first phase ('verify') in 3 of 3 cycles, 0.200 ms (median): it is in no phase" in w for w in a.warnings), a.warnings


def test_a_cpu_step_between_two_phases_that_queued_a_microsecond_is_no_line(tmp_path):
    # GIVEN draft [b, b+100] (kernel b+20..b+90), a 100 us CPU step in no phase that queues a
    # 1 us copy (launched b+110, running b+112..b+113), verify [b+200, b+300] (kernel
    # b+210..b+290), all on stream 7
    def between(t, c, b):
        kernel(t, b + 110, (b + 112, b + 113))

    a = draft_verify_cycles(tmp_path, between, lambda b: (b + 210, b + 290))
    # THEN draft ends at its CPU end (work was queued between), verify begins at its own CPU
    # start, and nothing is said: the work between ran 1 us, under the 10 us a cycle may miss
    assert gpu_us(a) == [("draft", 100), ("verify", 100)] * 3
    assert not [w for w in a.warnings if "between" in w], a.warnings


def test_only_work_its_stream_waited_for_turns_a_gap_into_a_line(tmp_path):
    # GIVEN draft [b, b+100] (kernel b+20..b+90), a 100 us CPU step that queues 1 us (b+112..b+113)
    # on draft's stream 7, verify [b+200, b+300] (kernel b+210..b+290); another thread's kernel in
    # no phase on stream 9, which stream 7 never waits for, running b+100..b+200; then 40 us of
    # work in no phase on stream 7 (b+305..b+345) before accept [b+350, b+450] (kernel b+360..b+440)
    # (a review's reproductions)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c + 1000
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=10)
        t.range("draft", b * U, (b + 100) * U, tid=10)
        t.range("verify", (b + 200) * U, (b + 300) * U, tid=10)
        t.range("accept", (b + 350) * U, (b + 450) * U, tid=10)
        kernel(t, b + 10, (b + 20, b + 90), tid=10)
        kernel(t, b + 110, (b + 112, b + 113), tid=10)
        kernel(t, b + 210, (b + 210, b + 290), tid=10)
        kernel(t, b - 100, (b + 100, b + 200), stream=9, tid=11)
        kernel(t, b + 305, (b + 305, b + 345), tid=10)
        kernel(t, b + 360, (b + 360, b + 440), tid=10)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "accept")))
    # THEN the 1 us between draft and verify is no line, though the other thread's kernel ran
    # then and verify -> accept's work counts the cycle; verify -> accept is one: 50 us between
    # the boundaries (b+300..b+350), of which the work ran 40
    lines = [w for w in a.warnings if "queued between" in w]
    assert len(lines) == 1 and "between 'verify' and 'accept'" in lines[0], lines
    assert "in 3 of 3 cycles, 0.050 ms (median) (the work ran 0.040 ms of it, median)" in lines[0], lines


def test_work_waited_for_while_the_cpu_runs_ahead_of_the_gpu_is_said(tmp_path):
    # GIVEN draft [b, b+100] whose kernel runs b+20..b+400 on stream 7 (the GPU behind the CPU);
    # in no phase, a kernel on stream 8 launched b+110, running b+120..b+700, recorded at b+112
    # and waited for by stream 7 at b+115 (CPU times); verify [b+200, b+300] whose kernel runs
    # b+700..b+800 on 7 (a review's reproduction)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c + 1000
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 200) * U, (b + 300) * U)
        kernel(t, b + 10, (b + 20, b + 400))
        kernel(t, b + 110, (b + 120, b + 700), stream=8)
        t.event_record(50 + c, c + 1, (b + 112) * U, (b + 113) * U, stream=8)
        t.stream_wait(50 + c, c + 1, (b + 115) * U, (b + 116) * U, stream=7)
        kernel(t, b + 210, (b + 700, b + 800))
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify")))
    # THEN draft ends at its kernel's end (b+400), verify begins behind the wait (b+700): the 300
    # us between, all of them the kernel on 8 that stream 7 waited for, are said (the wait was made
    # at CPU b+115, long before that stretch of the GPU's time)
    assert gpu_us(a) == [("draft", 400), ("verify", 100)] * 3
    assert any("between 'draft' and 'verify'" in w and "in 3 of 3 cycles, 0.300 ms (median);" in w for w in a.warnings), a.warnings


def test_edge_work_of_a_few_cycles_names_them(tmp_path):
    # GIVEN 8 cycles of draft (a+150..a+250) and verify (a+250..a+400), a = 500 us each, of
    # which cycle 0 alone (a prefill before the decode steps) queues 100 us of GPU work at its
    # range's start, before its first phase
    t = FakeTrace()
    for k in range(8):
        a = 500 * k
        t.range(f"cycle {k}", a * U, (a + 400) * U)
        t.range("draft", (a + 150) * U, (a + 250) * U)
        t.range("verify", (a + 250) * U, (a + 400) * U)
        if k == 0:
            kernel(t, a + 5, (a + 10, a + 110))
        kernel(t, a + 155, (a + 160, a + 240))
        kernel(t, a + 255, (a + 260, a + 390))
    # WHEN analysed
    warnings = load([t.write(tmp_path / "t.sqlite")]).warnings
    # THEN the note names that cycle, and gives its one time as it is (by hand: from the cycle's
    # start, the stream idle, to draft's start boundary at 150 us; the work ran 100 us of it)
    assert any("before its first phase ('draft') in 1 of 8 cycles (cycle 0), 0.150 ms (the work ran 0.100 ms of it): " in w for w in warnings), warnings


def draft_then_verify_on_another_stream(tmp_path, verify_gpu, draft_gpu=(20, 90), verify_cpu=(200, 300), waits_at=None, between=(110, 120, 600),
                                       during_verify=None, verify_tid=None):
    """Three cycles (b = 1000c us): draft on stream 7 (CPU b..b+100, its kernel launched at b+10
    running ``draft_gpu`` from b), a kernel in no phase on 7 (``between``: launched at, runs
    from, to, from b) and verify on stream 8 (CPU ``verify_cpu`` from b, its kernel launched 10
    us into it running ``verify_gpu`` from b); where ``waits_at`` is given, verify makes 8 wait
    for 7 inside its range (record on 7 at b+waits_at, the wait on 8 2 us later: SGLang's
    pipeline loop forking its forward stream off the scheduler's in run_batch);
    ``during_verify(t, c, b)`` adds what else happens in verify's range; ``verify_tid``: the
    thread that launches verify's kernel (default: the phases' own)."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + verify_cpu[1]) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + verify_cpu[0]) * U, (b + verify_cpu[1]) * U)
        kernel(t, b + 10, (b + draft_gpu[0], b + draft_gpu[1]))
        kernel(t, b + between[0], (b + between[1], b + between[2]))
        if waits_at is not None:
            t.event_record(event=1, record=c + 1, start=(b + waits_at) * U, end=(b + waits_at + 1) * U, stream=7)
            t.stream_wait(event=1, record=c + 1, start=(b + waits_at + 2) * U, end=(b + waits_at + 3) * U, stream=8)
        kernel(t, b + verify_cpu[0] + 10, (b + verify_gpu[0], b + verify_gpu[1]), stream=8, tid=verify_tid)
        if during_verify is not None:
            during_verify(t, c, b)
    return load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify")))


def cycles_us(a) -> list[tuple[int, int, bool]]:
    return [(c["gpu_ns"] // U, c["phases_gpu_ns"] // U, c["adds_up"]) for c in a.ranks[0].cycles.to_pylist()]


def test_a_phase_on_another_stream_that_waits_inside_itself_for_work_between_holds_that_wait(tmp_path):
    # GIVEN draft on 7, a kernel in no phase on 7 between the two (b+120..b+600: a receive the
    # peer is late for, joined into the scheduler's stream), and verify on 8 (CPU b+200..b+300)
    # making 8 wait for 7 only inside its range (record at b+205, wait at b+207), its kernel
    # running b+600..b+700 behind that wait
    a = draft_then_verify_on_another_stream(tmp_path, verify_gpu=(600, 700), waits_at=205)
    # THEN verify, read on 8, begins where an event recorded on 8 at its start reads (b+200: 8
    # is idle then, the last verify ended at b-300) and ends with its kernel (b+700): 500 us,
    # the wait it made inside its range included (once 100: begun where 7 was done); draft ends
    # at its CPU end (b+100, its kernel done by b+90): 100
    assert gpu_us(a) == [("draft", 100), ("verify", 500)] * 3
    assert {p["stream_id"] for p in a.ranks[0].phases.to_pylist() if p["phase"] == "verify"} == {8}
    # AND the cycle runs b..b+700; its phases read 600 of it (b+100..b+200 is in neither)
    assert cycles_us(a) == [(700, 600, False)] * 3


def test_work_between_on_the_next_cycles_stream_stays_out_of_the_later_phases_end(tmp_path):
    # GIVEN the kernel in no phase on 7 (b+120..b+600) and verify on 8 (CPU b+200..b+300) that
    # never waits for 7, its own kernel running b+220..b+300; the next cycle's draft is on 7
    a = draft_then_verify_on_another_stream(tmp_path, verify_gpu=(220, 300))
    # THEN verify reads what events on 8 read: b+200 (8 idle) to b+300 (its kernel done), 100 us
    # in every cycle; the work between on 7, still running at verify's end, is not verify's
    # (once 400 in all but the last cycle: its end was read on the next cycle's stream, 7)
    assert gpu_us(a) == [("draft", 100), ("verify", 100)] * 3
    # AND the cycle still holds that work: b..b+600 (draft 100 + verify 100 of it)
    assert cycles_us(a) == [(600, 200, False)] * 3


def test_a_phase_after_work_between_is_not_held_back_by_the_earlier_phases_end_on_another_stream(tmp_path):
    # GIVEN draft on 7 whose kernel runs b+20..b+150, past its CPU end (b+100), a kernel in no
    # phase on 7 (launched b+110, running b+150..b+170 behind draft's), and verify on 8 (CPU
    # b+120..b+300), never waiting for 7, its kernel running b+130..b+230
    a = draft_then_verify_on_another_stream(tmp_path, verify_gpu=(130, 230), draft_gpu=(20, 150), verify_cpu=(120, 300), between=(110, 150, 170))
    # THEN draft ends where 7 is done at its CPU end (b+150): 150; verify begins where 8 is free
    # at its CPU start (b+120, not at draft's end on 7) and ends at b+300: 180 us, as events on 8
    # read (once 150: its start held back to draft's end)
    assert gpu_us(a) == [("draft", 150), ("verify", 180)] * 3
    # AND the cycle runs b..b+300
    assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [300] * 3


def test_a_later_phases_end_reads_the_next_cycles_stream_only_for_work_its_own_thread_launched_there(tmp_path):
    # GIVEN the kernel in no phase on 7 (b+120..b+600) and verify on 8 (CPU b+200..b+300, its
    # kernel b+220..b+300), the next cycle's draft on 7, and inside verify's range either a
    # helper thread's 5 us copy on 7 (launched b+250, running b+600..b+605 behind the work
    # between), verify's thread making 7 wait for 8 (record on 8 at b+292, the wait at b+294),
    # or verify's thread itself launching a 5 us kernel on 7 (b+250, running b+600..b+605)
    def helper(t, c, b):
        t.copy(t.call("cudaMemcpyAsync", (b + 250) * U, (b + 252) * U, tid=99), (b + 600) * U, (b + 605) * U, stream=7)

    def join(t, c, b):
        t.event_record(event=2, record=c + 1, start=(b + 292) * U, end=(b + 293) * U, stream=8)
        t.stream_wait(event=2, record=c + 1, start=(b + 294) * U, end=(b + 295) * U, stream=7)

    def own(t, c, b):
        kernel(t, b + 250, (b + 600, b + 605))

    read = {}
    for name, during in (("helper", helper), ("join", join), ("own", own)):
        (tmp_path / name).mkdir()
        a = draft_then_verify_on_another_stream(tmp_path / name, verify_gpu=(220, 300), during_verify=during)
        read[name] = ([us for ph, us in gpu_us(a) if ph == "verify"], [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()])
    # THEN where verify's thread launched nothing on 7, verify reads what events on 8 read:
    # b+200 (8 idle) to b+300 (its kernel done), 100 us in every cycle: the helper's copy is not
    # its work, and the wait it made on 7 is for 8's work, done by b+300 (once 405 and 400: 7
    # read at verify's end, the work between on it to b+600, the copy to b+605). The cycle's end
    # is read at its edge on 8 and on 7 (the next cycle's draft's): b+605 where the copy ran
    # (none in the last cycle: no next cycle; there 7 is read at verify's start, the work between
    # queued by then, b+600), b+600 with the wait (7: the work between, then 8's work to b+300)
    assert read["helper"] == ([100] * 3, [605, 605, 600])
    assert read["join"] == ([100] * 3, [600] * 3)
    # AND where it launched a kernel on 7 itself, its end is read there too: that kernel is done
    # at b+605, behind the work between (b+200..b+605: 405 us; the last cycle, with no next
    # cycle's stream to read, 100 on 8)
    assert read["own"] == ([405, 405, 100], [605, 605, 600])


def test_a_later_phases_end_reads_the_next_cycles_stream_for_work_it_owns_there_whichever_thread_launched_it(tmp_path):
    # GIVEN the engine above, but verify's kernels launched by a launcher thread (50) that holds
    # no range: its kernel on 8 (b+210, b+220..b+300) and, inside its range, either a 5 us
    # kernel on 7 (launched b+250, running b+600..b+605 behind the work between) or a copy on 7
    # by a helper thread (99) that never runs a kernel (a KV-cache offload thread; b+250,
    # b+600..b+605). verify launches nothing on its own thread, so the launcher's work, and the
    # helper's copy, are verify's (``attribution``: another thread's work in the phase open then)
    def launcher(t, c, b):
        kernel(t, b + 250, (b + 600, b + 605), tid=50)

    def helper(t, c, b):
        t.copy(t.call("cudaMemcpyAsync", (b + 250) * U, (b + 252) * U, tid=99), (b + 600) * U, (b + 605) * U, stream=7)

    read, owner = {}, {}
    for name, during in (("launcher", launcher), ("helper", helper)):
        (tmp_path / name).mkdir()
        a = draft_then_verify_on_another_stream(tmp_path / name, verify_gpu=(220, 300), during_verify=during, verify_tid=50)
        read[name] = ([us for ph, us in gpu_us(a) if ph == "verify"], [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()])
        phases = a.ranks[0].phases.to_pylist()
        owner[name] = [phases[o["phase_id"]]["phase"] if o["phase_id"] is not None else None
                       for o in a.ranks[0].gpu_ops.to_pylist() if o["start_ns"] // U % 1000 == 600]
    # THEN the work on 7 inside verify's range is verify's in both
    assert owner["launcher"] == owner["helper"] == ["verify"] * 3
    # AND the launcher's kernel on 7 is read as the own-thread twin's is: verify begins at b+200
    # (8 idle; the work between keeps 7 busy, but verify began apart) and ends at the next
    # cycle's start read on 7, where that kernel is done behind the work between: b+605, 405 us
    # (once 100: the launcher is not verify's thread); the last cycle, with no next cycle's
    # stream, b+300 on 8: 100. The cycle's edge is read on 8 and 7: b+605, the last cycle's
    # b+600 (7 at verify's start: the work between)
    assert read["launcher"] == ([405, 405, 100], [605, 605, 600])
    # AND the helper's copy, verify's too but from a thread that never runs a kernel, whose
    # stream is no phase's events' (``stream_deciding_ops``), holds verify's end no more than
    # another thread's copy does above: b+200..b+300 on 8, 100 us; the cycle's edge holds it
    assert read["helper"] == ([100] * 3, [605, 605, 600])


def p_a_b_trace(during=None, launcher: int | None = None, p_launches: bool = True) -> FakeTrace:
    """Three cycles (b = 1000c us, cycle ranges b..b+300) of P on 9 (CPU b..b+50, its kernel
    launched b+5, b+10..b+40; with ``p_launches`` False, none: a CPU-only step), A on 7 (CPU
    b+50..b+100, kernel b+55, b+60..b+90) and B on 8 (CPU b+200..b+300, kernel b+210,
    b+220..b+290); the kernels launched by ``launcher`` (None: the phases' own thread);
    ``during(t, c, b)`` adds what else happens in each cycle."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        for name, lo, hi in (("P", 0, 50), ("A", 50, 100), ("B", 200, 300)):
            t.range(name, (b + lo) * U, (b + hi) * U)
        if p_launches:
            kernel(t, b + 5, (b + 10, b + 40), stream=9, tid=launcher)
        kernel(t, b + 55, (b + 60, b + 90), tid=launcher)
        kernel(t, b + 210, (b + 220, b + 290), stream=8, tid=launcher)
        if during is not None:
            during(t, c, b)
    return t


def test_a_cycles_end_reads_the_streams_around_its_gap_when_the_work_between_was_queued(tmp_path):
    # GIVEN cycles (b..b+300) of P on 9 (CPU b..b+50, kernel b+10..b+40), A on 7 (CPU
    # b+50..b+100, kernel b+60..b+90), a kernel in no phase on 7 (launched b+110, b+120..b+150)
    # and B on 8 (CPU b+200..b+300, kernel b+220..b+290), in whose range a 640 us copy is put on
    # 7 (launched b+250, b+260..b+900) by B's thread or by a helper thread
    for helper in (False, True):
        def during(t, c, b):
            kernel(t, b + 110, (b + 120, b + 150))
            t.copy(t.call("cudaMemcpyAsync", (b + 250) * U, (b + 252) * U, tid=99 if helper else None), (b + 260) * U, (b + 900) * U, stream=7)

        t = p_a_b_trace(during)
        (tmp_path / str(helper)).mkdir()
        a = load([t.write(tmp_path / str(helper) / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))
        # THEN P ends where A begins (b+50, on 9 and 7), A at its CPU end (b+100: work was queued
        # between; 7 done by b+90) and B runs b+200..b+300 on 8: 50, 50 and 100
        assert gpu_us(a) == [("P", 50), ("A", 50), ("B", 100)] * 3
        # AND the cycle runs b..b+300: its end is read at its edge on 8 (B's) and 9 (the next
        # cycle's P's), b+300, and the work between on 7, read at B's start (b+200: b+150), lies
        # inside; the copy on 7 is on no stream of the cycle's edges (once 900: 7 read at b+300)
        assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [300] * 3


def test_a_cycle_with_work_between_holds_none_of_the_next_cycles_work_when_the_cpu_runs_a_cycle_ahead(tmp_path):
    # GIVEN no cycle ranges; per cycle (b = 1000c) A on thread 11 and stream 7 (CPU b..b+100), a
    # kernel in no phase on 7 (launched b+110, b+120..b+150) and B on thread 12 and stream 8
    # (CPU b+200..b+1050, still open when the next cycle's A begins at b+1000; its kernel
    # b+220..b+300); A's kernel is launched by the cycle before, at b+10 (b+20..b+90 in cycle 0,
    # else b+20..b+500: launched at (b-1000)+1010, running behind nothing)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range("A", b * U, (b + 100) * U, tid=11)
        t.range("B", (b + 200) * U, (b + 1050) * U, tid=12)
        if c == 0:
            kernel(t, b + 10, (b + 20, b + 90), tid=11)
        kernel(t, b + 110, (b + 120, b + 150), tid=11)
        kernel(t, b + 210, (b + 220, b + 300), stream=8, tid=12)
        if c < 2:
            kernel(t, b + 1010, (b + 1020, b + 1500), tid=11)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("A", "B")))
    # THEN A ends at its CPU end on 7: b+90 in cycle 0 (100), else b+500 (its kernel; 500); B,
    # whose range the next A's opened in, shares no boundary: b+200..b+1050 on 8, 850
    assert gpu_us(a) == [("A", 100), ("B", 850), ("A", 500), ("B", 850), ("A", 500), ("B", 850)]
    # AND each cycle runs b..b+1050: the work between, read on 7 at B's start (b+150), lies
    # inside, and the next cycle's kernel on 7 (queued at b+1010, to b+1500) is not this cycle's
    # (once 1500: 7 read at B's CPU end)
    assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [1050] * 3


def test_work_between_on_one_gpu_moves_no_boundary_on_the_other(tmp_path):
    # GIVEN one thread driving two GPUs, per cycle (b..b+300): A on GPU 0 (stream 7, CPU
    # b..b+50, kernel b+10..b+40), W on GPU 1 (stream 17, CPU b+50..b+100, kernel b+60..b+500),
    # X on GPU 1 (stream 18, CPU b+100..b+150, kernel b+110..b+140), C on GPU 0 (CPU b+150..b+200,
    # kernel b+160..b+190), B on GPU 0 (CPU b+230..b+260, kernel b+240..b+255) and Y on GPU 1
    # (stream 18, CPU b+260..b+300, kernel b+270..b+290); in a second trace also a kernel in no
    # phase on GPU 0 between C and B (launched b+210, b+215..b+220)
    def trace(gap: bool):
        t = FakeTrace()
        for c in range(3):
            b = 1000 * c
            t.range(f"cycle {c}", b * U, (b + 300) * U)
            for name, lo, hi in (("A", 0, 50), ("W", 50, 100), ("X", 100, 150), ("C", 150, 200), ("B", 230, 260), ("Y", 260, 300)):
                t.range(name, (b + lo) * U, (b + hi) * U)
            work = [(5, 10, 40, 7, 0), (55, 60, 500, 17, 1), (105, 110, 140, 18, 1), (155, 160, 190, 7, 0), (235, 240, 255, 7, 0), (265, 270, 290, 18, 1)]
            for at, lo, hi, stream, device in work + ([(210, 215, 220, 7, 0)] if gap else []):
                t.kernel(t.call("cudaLaunchKernel", (b + at) * U, (b + at + 2) * U), (b + lo) * U, (b + hi) * U, stream=stream, device=device)
        return t
    read = {}
    for gap in (False, True):
        (tmp_path / str(gap)).mkdir()
        read[gap] = gpu_us(load([trace(gap).write(tmp_path / str(gap) / "t.sqlite")], PhaseConfig(phases=("A", "W", "X", "C", "B", "Y"))))
    # THEN on GPU 1, W and X share a boundary read on 17 and 18 at b+100 (b+500: W 450), and
    # boundaries never run backwards along GPU 1's phases: X and Y (read on 18 alone, their
    # neighbours on GPU 0; b+150 and b+260..b+300) are held at b+500, 0 us, with the gap on GPU 0
    # or without (once 40 with it: a run cut there on every GPU); on GPU 0, A ends at its CPU end
    # (b+50: 50), B runs b+230..b+260 (30), and C ends where B begins (b+230: 80), or at its CPU
    # end where the kernel between was queued (b+200: 50)
    assert read[False] == [("A", 50), ("W", 450), ("X", 0), ("C", 80), ("B", 30), ("Y", 0)] * 3
    assert read[True] == [("A", 50), ("W", 450), ("X", 0), ("C", 50), ("B", 30), ("Y", 0)] * 3


def test_a_phase_begun_inside_another_ends_at_its_cycles_edge_on_its_own_stream(tmp_path):
    # GIVEN per cycle (b..b+400, thread 11) A on thread 11 and stream 7 (CPU b..b+300, its kernel
    # launched b+50, running b+60..b+800) and B on thread 12 and stream 8, opened inside A's
    # range (CPU b+100..b+400, its kernel b+120..b+390); the next cycle's A is on 7; no work in
    # no phase at all
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=11)
        t.range("A", b * U, (b + 300) * U, tid=11)
        t.range("B", (b + 100) * U, (b + 400) * U, tid=12)
        kernel(t, b + 50, (b + 60, b + 800), tid=11)
        kernel(t, b + 110, (b + 120, b + 390), stream=8, tid=12)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("A", "B")))
    # THEN the two share no boundary: A begins at b (7 and 8 idle) and ends on 7 at its CPU end,
    # b+800 (its kernel): 800; B reads what events on 8 read, b+100 (8 idle) to b+400 (its kernel
    # done by b+390): 300 in every cycle. A's kernel on 7, launched by A's thread before B's
    # range opened, is A's tail, not B's: B's end reads the next cycle's stream, 7, only for
    # work B's thread launched there (once 700 in all but the last cycle: 7 read at b+400)
    assert gpu_us(a) == [("A", 800), ("B", 300)] * 3
    # AND the cycle runs b..b+800 (A's end)
    assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [800] * 3


def test_a_cycle_begins_at_its_first_phases_start_though_a_later_phase_began_earlier_on_the_gpu(tmp_path):
    # GIVEN per cycle (b = 1000c us): A on stream 7 (CPU b..b+100) launching a 1500 us kernel at
    # b+10, so the GPU runs behind the CPU on 7; a 10 us kernel on 7 between the phases (b+110, in
    # no range); B on stream 8, idle (CPU b+200..b+300), its 30 us kernel b+220..b+250
    t = FakeTrace()
    free7 = 0
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("A", b * U, (b + 100) * U)
        t.range("B", (b + 200) * U, (b + 300) * U)
        s = max(b + 20, free7)
        kernel(t, b + 10, (s, s + 1500))
        kernel(t, b + 110, (s + 1500, s + 1510))
        free7 = s + 1510
        kernel(t, b + 210, (b + 220, b + 250), stream=8)
    # WHEN analysed
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("A", "B")))
    # THEN (by hand) A reads 1520 in cycle 0 (0..1520, its kernel from 20) and 1500 after (from
    # where 7 is free, 1530 and 3040, to its kernel's end); B reads b+200..b+300 on 8: 100, before
    # A's start on the GPU in cycles 1 and 2; each cycle runs from A's start, where an event at
    # the cycle's start reads, to 7 read at B's start (the work between): 0..1530, 1530..3040,
    # 3040..4550 (once 1200..3040 and 2200..4550: from B's start, the cycles overlapping)
    assert gpu_us(a) == [("A", 1520), ("B", 100), ("A", 1500), ("B", 100), ("A", 1500), ("B", 100)]
    assert [(c["gpu_boundary_start_ns"] // U, c["gpu_boundary_end_ns"] // U) for c in a.ranks[0].cycles.to_pylist()] == [(0, 1530), (1530, 3040), (3040, 4550)]


def test_a_helper_threads_copy_queued_between_two_phases_is_not_held_in_the_cycle(tmp_path):
    # GIVEN cycles (b = 1000c us, ranges b..b+300) of P on 9 (CPU b..b+50, kernel b+10..b+40), A
    # on 7 (CPU b+50..b+100, kernel b+60..b+90) and B on 8 (CPU b+200..b+300, kernel
    # b+220..b+290); the next cycle's P is on 9. Between A's CPU end and B's CPU start a 740 us
    # copy (launched b+150, b+160..b+900) is put on a stream: by a helper thread (tid 99; with no
    # range of its own, or inside its own "offload" range b+140..b+160) on 7, A's stream, which
    # neither edge phase (P, B) is on; by the helper on 5, a stream no phase is on; or by the
    # loop's own thread on 7. In a last trace the loop's thread also puts a kernel in no phase on
    # 7 (launched b+110) that runs behind a helper's copy launched first (b+105, b+115..b+900):
    # b+900..b+930
    def trace(copy_stream: int, tid: int | None, ranged: bool = False, behind: bool = False):
        def during(t, c, b):
            if ranged:
                t.range("offload", (b + 140) * U, (b + 160) * U, tid=99)
            at = 105 if behind else 150
            t.copy(t.call("cudaMemcpyAsync", (b + at) * U, (b + at + 2) * U, tid=tid), (b + at + 10) * U, (b + 900) * U, stream=copy_stream)
            if behind:
                kernel(t, b + 110, (b + 900, b + 930))

        return p_a_b_trace(during)

    read = {}
    for name, args in (("helper on 7", (7, 99)), ("ranged helper on 7", (7, 99, True)), ("helper on 5", (5, 99)), ("loop on 7", (7, None)),
                       ("loop behind helper", (7, 99, False, True))):
        (tmp_path / name).mkdir()
        a = load([trace(*args).write(tmp_path / name / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))
        read[name] = (gpu_us(a), [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()])
    # THEN with the copy on 7 between the two, A ends at its CPU end (b+100; 7 done by b+90) and
    # B runs b+200..b+300 on 8 alone; P ends where A begins (b+50): 50, 50, 100. The cycle begins
    # at P's start (b: 9 idle) and ends where events at its edge read: on 8 (B's) b+290 and on 9
    # (the next cycle's P's) b+40, so b+300; nothing on either waits for 7. The helper's copy
    # is not the loop's work between, whether or not the helper has ranges: 300 (once 900: 7 read
    # at B's start, b+200, the copy queued on it by then)
    for name in ("helper on 7", "ranged helper on 7"):
        assert read[name] == ([("P", 50), ("A", 50), ("B", 100)] * 3, [300] * 3), name
    # AND on 5 nothing is queued between on 7 or 8: A ends where B begins (b+200, read on 7 and 8,
    # done by b+90 and idle): 150; the cycle reads 300 as well
    assert read["helper on 5"] == ([("P", 50), ("A", 150), ("B", 100)] * 3, [300] * 3)
    # AND the loop's own copy between is work in no phase, held by the cycle: 7 read where the
    # loop queued it (b+152) is done at b+900, so b..b+900: 900 (the phases read as with the helper's)
    assert read["loop on 7"] == ([("P", 50), ("A", 50), ("B", 100)] * 3, [900] * 3)
    # AND the loop's kernel queued behind the helper's copy ran after it: 7 read where the loop
    # queued it (b+112) is done at b+930, so the cycle holds b..b+930: 930
    assert read["loop behind helper"] == ([("P", 50), ("A", 50), ("B", 100)] * 3, [930] * 3)


def test_an_offload_thread_that_runs_a_kernel_of_its_own_puts_no_copy_of_its_into_the_cycle(tmp_path):
    # GIVEN the "helper on 7" engine above (P on 9, A on 7, B on 8; the offload thread 99's 740 us
    # copy on 7 between A and B, launched b+150, b+160..b+900), but the offload thread also runs a
    # kernel of its own each cycle, in no phase, on its own stream 40 (launched b+140,
    # b+142..b+148): a gather of KV blocks into its staging buffer before the copy off, as
    # LMCache's store path does. Nothing joins 40 or 7 into 8 or 9.
    def during(t, c, b):
        kernel(t, b + 140, (b + 142, b + 148), stream=40, tid=99)
        t.copy(t.call("cudaMemcpyAsync", (b + 150) * U, (b + 152) * U, tid=99), (b + 160) * U, (b + 900) * U, stream=7)

    a = load([p_a_b_trace(during).write(tmp_path / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))
    # THEN the phases read as with the helper that runs no kernel: P 50, A 50 (7 done by b+90 at
    # its CPU end b+100), B 100 (b+200..b+300 on 8)
    assert gpu_us(a) == [("P", 50), ("A", 50), ("B", 100)] * 3
    # AND each cycle begins at P's start (b) and ends where events at its edges read: 8 at b+300
    # (B's kernel done b+290), 9 at b+300 (P's done b+40): 300 us. A thread that runs kernels of
    # its own, none a phase's, is no launcher of the loop's: its copy is not the loop's work
    # between (once 900: any thread that ran a kernel counted as the loop's)
    assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [300] * 3


def test_an_offload_threads_kernel_taken_by_a_cpu_only_phase_puts_no_copy_of_its_into_the_cycle(tmp_path):
    # GIVEN the P/A/B cycles with P a CPU-only scheduling step (launches nothing) and an offload
    # thread (99, no range; SGLang HiCache's write thread, LMCache's store thread) copying KV off
    # on 7 between A and B (launched b+150, b+160..b+900); in a second trace it first runs a
    # gather kernel of its own on its stream 40 while P is open (launched b+20, b+22..b+30), which
    # P takes (--phase-thread auto: a phase that launches nothing takes other threads' work
    # launched while it is open). Nothing joins 40 or 7 into 8.
    def trace(gather: bool) -> FakeTrace:
        def during(t, c, b):
            if gather:
                kernel(t, b + 20, (b + 22, b + 30), stream=40, tid=99)
            t.copy(t.call("cudaMemcpyAsync", (b + 150) * U, (b + 152) * U, tid=99), (b + 160) * U, (b + 900) * U, stream=7)

        return p_a_b_trace(during, p_launches=False)

    read = {}
    for gather in (False, True):
        (tmp_path / str(gather)).mkdir()
        a = load([trace(gather).write(tmp_path / str(gather) / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))
        read[gather] = (gpu_us(a), [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()])
    # THEN by hand, events on the phases' streams: P b..b+50 (its stream idle at both): 50; A
    # b+50..b+100 on 7 (its kernel done b+90; the copy queued after A's end): 50; B b+200..b+300
    # on 8: 100. The cycle: P's start b to its end read on 8 (b+300) and on the next P's stream
    # (idle): 300. No event at the cycle's edges waits for the copy on 7, and no thread of the
    # loop queued work between: the offload thread is no launcher of the loop's on 7 because P
    # took its kernel on its own stream (the gather's trace read 900 where any thread that ran a
    # kernel, or any with a kernel a phase owns, was a launcher)
    for gather in (False, True):
        assert read[gather] == ([("P", 50), ("A", 50), ("B", 100)] * 3, [300] * 3), gather


def p_a_b(tmp_path, launcher: int | None, between_tid: int | None):
    """``p_a_b_trace`` with the kernels launched by ``launcher`` and a kernel in no phase on 7
    launched at b+150 by ``between_tid``, running b+160..b+900, analysed."""
    t = p_a_b_trace(lambda t, c, b: kernel(t, b + 150, (b + 160, b + 900), tid=between_tid), launcher)
    (tmp_path / "t.sqlite").parent.mkdir(parents=True, exist_ok=True)
    return load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))


def test_a_launcher_threads_work_between_is_the_loops_work_between(tmp_path):
    # GIVEN the engine of test_a_helper_threads_copy_queued_between_two_phases_is_not_held_in_the_cycle
    # ("loop on 7"), but, as in test_a_later_phases_end_reads_..._whichever_thread_launched_it, a
    # launcher thread (50) holding no range launches every kernel: P's, A's, B's (each phase's
    # by attribution: the phases launched nothing themselves) and the kernel in no phase on 7
    # between A and B (b+150, b+160..b+900): the loop's own work between, launched where the
    # loop launches everything (a kernel, not an offload thread's copy)
    own = p_a_b(tmp_path / "own", None, None)
    launched = p_a_b(tmp_path / "launcher", 50, 50)
    # THEN the phases read as with the loop's thread launching: A ends at its CPU end (7 done by
    # b+90): P 50, A 50, B b+200..b+300 on 8: 100
    assert gpu_us(own) == gpu_us(launched) == [("P", 50), ("A", 50), ("B", 100)] * 3
    # AND the cycle holds the work between as it does where the phases' thread queued it: 7 read
    # where the loop (its launcher) queued it, b+152, is done at b+900: b..b+900, 900 us
    assert [c["gpu_ns"] // U for c in own.ranks[0].cycles.to_pylist()] == [900] * 3
    # (once 300: the launcher not among the phases' threads, its kernel dropped like an offload
    # helper's copy)
    assert [c["gpu_ns"] // U for c in launched.ranks[0].cycles.to_pylist()] == [900] * 3


def test_a_cycle_holds_a_helpers_copy_the_loop_recorded_behind_in_the_gap_in_its_last_cycle_too(tmp_path):
    # GIVEN the P/A/B cycles (every kernel on the phases' thread 10) and, between A and B, a
    # helper thread's (99, never runs a kernel) copy on 7, A's stream (launched b+150, running
    # b+160..b+900), behind which the loop's thread records an event on 7 (b+160) and makes 9,
    # the stream of P (the cycle's first phase and the next cycle's), wait for it (b+162): the
    # loop joins the helper's copy into its own stream in the gap
    def during(t, c, b):
        t.copy(t.call("cudaMemcpyAsync", (b + 150) * U, (b + 152) * U, tid=99), (b + 160) * U, (b + 900) * U, stream=7)
        t.event_record(event=3, record=c + 1, start=(b + 160) * U, end=(b + 161) * U, stream=7)
        t.stream_wait(event=3, record=c + 1, start=(b + 162) * U, end=(b + 163) * U, stream=9)

    t = p_a_b_trace(during)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("P", "A", "B")))
    # THEN the phases read as in the commit's "helper on 7": P 50, A 50 (7 done b+90 at its CPU
    # end), B b+200..b+300 on 8: 100
    assert gpu_us(a) == [("P", 50), ("A", 50), ("B", 100)] * 3
    # AND every cycle holds the copy the loop joined into its own stream: in cycles 0 and 1 the
    # edge event on 9 (next P's stream) waits for it, b+900; the last cycle is the same loop
    # doing the same thing, and the event the loop recorded on 7 behind the copy reads b+900:
    # 900 (once [900, 900, 300]: the loop queued no op on 7 or 8 in the gap, only a record on 7
    # and a wait on 9, so the last cycle, with no next cycle's stream, dropped it)
    assert [c["gpu_ns"] // U for c in a.ranks[0].cycles.to_pylist()] == [900] * 3


def test_a_phase_that_only_copies_is_read_where_its_copies_feed_so_work_between_on_the_stream_it_forked_them_off_is_no_work_between(tmp_path):
    # GIVEN cycles (b = 1000c us) marked on the loop thread 1 (b..b+400): schedule on 1 (CPU
    # b..b+100) that only copies results off: it forks the copy stream 12 off 7 (a record on 7 at
    # b+10, 12 waits at b+12) and copies there (launched b+20, running b+30..b+80); then code in
    # no phase on 1 (b+100..b+150): 20 waits for 12 (a record at b+110, the wait at b+112: the copy
    # is done by schedule's end) and a kernel on 7 (launched b+120, running b+130..b+300); forward
    # on thread 2 (CPU b+150..b+250): 20 waits for 7 (b+160/b+162) and a kernel on 20 behind it
    # (launched b+170, running b+300..b+320); process on 1 (CPU b+250..b+400): 7 waits for 20
    # (b+255/b+257), a kernel on 7 (launched b+260, running b+320..b+380)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=1)
        t.range("schedule", b * U, (b + 100) * U, tid=1)
        t.range("forward", (b + 150) * U, (b + 250) * U, tid=2)
        t.range("process", (b + 250) * U, (b + 400) * U, tid=1)
        t.event_record(event=1, record=c + 1, start=(b + 10) * U, end=(b + 11) * U, stream=7, tid=1)
        t.stream_wait(event=1, record=c + 1, start=(b + 12) * U, end=(b + 13) * U, stream=12, tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 20) * U, (b + 22) * U, tid=1), (b + 30) * U, (b + 80) * U, stream=12)
        t.event_record(event=2, record=c + 1, start=(b + 110) * U, end=(b + 111) * U, stream=12, tid=1)
        t.stream_wait(event=2, record=c + 1, start=(b + 112) * U, end=(b + 113) * U, stream=20, tid=1)
        kernel(t, b + 120, (b + 130, b + 300), stream=7, tid=1)
        t.event_record(event=3, record=c + 1, start=(b + 160) * U, end=(b + 161) * U, stream=7, tid=2)
        t.stream_wait(event=3, record=c + 1, start=(b + 162) * U, end=(b + 163) * U, stream=20, tid=2)
        kernel(t, b + 170, (b + 300, b + 320), stream=20, tid=2)
        t.event_record(event=4, record=c + 1, start=(b + 255) * U, end=(b + 256) * U, stream=20, tid=1)
        t.stream_wait(event=4, record=c + 1, start=(b + 257) * U, end=(b + 258) * U, stream=7, tid=1)
        kernel(t, b + 260, (b + 320, b + 380), stream=7, tid=1)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process")))
    # THEN schedule, whose copies feed 20 (the first stream that waits for 12 once it began), is
    # read on 20 (the trace does not say which stream was current: with 7 current it is the same
    # trace), where the code between queued nothing new (its wait is for a copy done by b+80):
    # the kernel between is on neither phase's stream, so forward is handed over at schedule's
    # CPU end (b+100) and ends with its kernel (b+320): schedule 100 (nothing on 20 by b+100),
    # forward 220, process b+320..b+400 (its CPU end: 7 done at b+380, 20 at b+320) 80.
    # (With 7 current, schedule's 7 would hold the kernel between: forward would begin on 20 alone at
    # its CPU start, b+150, and read 170: the trace cannot tell the two programs apart.)
    phases = a.ranks[0].phases.to_pylist()
    assert [(p["phase"], p["stream_id"]) for p in phases] == [("schedule", 20), ("forward", 20), ("process", 7)] * 3
    assert gpu_us(a) == [("schedule", 100), ("forward", 220), ("process", 80)] * 3
