"""Phase ranges that are not one after the other, and instants that tie: what CUDA events
recorded at each range's own boundaries, on its thread's current stream, would read. Found by a
review's synthetic engine loops; every expected number is worked out by hand from the ops'
times (one stream, 7, unless said)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us


def kernel(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, tid: int | None = None, call_us: int = 2) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + call_us) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def sums(trace: FakeTrace, tmp_path, phases: tuple[str, ...] = ("a", "b", "c")) -> dict:
    """Each (cycle, phase)'s GPU us, a cycle's instances of one name added up."""
    rank = load([trace.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases)).ranks[0]
    out: dict = {}
    for p in rank.phases.to_pylist():
        out[(p["cycle"], p["phase"])] = out.get((p["cycle"], p["phase"]), 0) + p["gpu_ns"] // U
    return out


def test_start_end_ranges_that_overlap_on_one_thread_each_read_their_own_ends(tmp_path):
    # GIVEN nvtxRangeStart/End ranges on one thread where b begins (B+80) before a ends (B+100):
    # a launches k1 at B+10 (GPU B+20..150) and k2 at B+90 (GPU B+150..170), b launches k3 at
    # B+110 (GPU B+170..250), c [B+200, B+260] launches nothing
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 260) * U)
        t.range("a", b * U, (b + 100) * U, push_pop=False)
        t.range("b", (b + 80) * U, (b + 200) * U, push_pop=False)
        t.range("c", (b + 200) * U, (b + 260) * U, push_pop=False)
        kernel(t, b + 10, (b + 20, b + 150))
        kernel(t, b + 90, (b + 150, b + 170))
        kernel(t, b + 110, (b + 170, b + 250))
    # WHEN analysed
    got = sums(t, tmp_path)
    # THEN a's end event (B+100) waits for k2: a = B..170; b's start event (B+80) for k1 only:
    # b = 150..250; c = 250..260 (its CPU end) — before, a's end was read at b's start (150)
    assert got == {(c, p): v for c in range(3) for p, v in (("a", 170), ("b", 100), ("c", 10))}


def test_a_short_range_of_another_thread_inside_a_phase_moves_no_boundary(tmp_path):
    # GIVEN the main thread's a [B, B+100] (k1 launched at B+10, GPU B+20..200; k2 at B+70, GPU
    # B+200..300), b [B+100, B+150] (nothing), c [B+150, B+250] (k3 at B+160, GPU B+300..400),
    # and a helper thread's range named b at [B+20, B+60] that launches nothing
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 150) * U, (b + 250) * U, names=("a", "b", "c"))
        kernel(t, b + 10, (b + 20, b + 200))
        kernel(t, b + 70, (b + 200, b + 300))
        kernel(t, b + 160, (b + 300, b + 400))
        t.range("b", (b + 20) * U, (b + 60) * U, tid=11)
    # WHEN analysed
    load_ = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b", "c")))
    got = sums(t, tmp_path)
    # THEN the main thread's events read a = B..300 (k2 included), b = 0, c = 100; the helper's
    # range, read alone, adds 0 (events at B+20 and B+60 both wait for k1 only); before, the
    # helper's range cut a at B+20 (a = 200) and k2 was said to be in no phase
    assert got == {(c, p): v for c in range(3) for p, v in (("a", 300), ("b", 0), ("c", 100))}
    assert not [w for w in load_.warnings if "queued between" in w]


def test_a_launch_returning_at_the_very_nanosecond_its_range_ends_is_inside_it(tmp_path):
    # GIVEN a [B, B+100] whose launch call runs B+98..B+100 (kernel GPU B+110..300), b
    # [B+150, B+250] launching k2 at B+160 (GPU B+300..400)... named as cycle phases a, b, c
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 150) * U, (b + 250) * U, names=("a", "b", "c"))
        kernel(t, b + 98, (b + 110, b + 300))
        kernel(t, b + 160, (b + 300, b + 400))
    # WHEN analysed
    got = sums(t, tmp_path)
    # THEN the call returned as a's range closed: it was made inside a, and a's end event waits
    # for its kernel (a = B..300), b = 300..300, c = 300..400 — before, a read 100 and b 200
    assert got == {(c, p): v for c in range(3) for p, v in (("a", 300), ("b", 0), ("c", 100))}


def test_a_copy_stream_forked_off_for_the_first_time_inside_a_copy_only_phase(tmp_path):
    # GIVEN a [B, B+100]: a kernel on 7 (B+20..40), then side stream 9 forked off 7 (record on 7
    # at B+50, 9 waits at B+51) and a 400 us kernel on 9 (B+56..456); b [B+100, B+150]: nothing;
    # c [B+150, B+250]: copy stream 15 forked off 7 (record B+160, wait B+161), a copy on 15
    # (B+166..170), then 9 joined back into 7 (record on 9 at B+200, 7 waits at B+201)
    t = FakeTrace()
    ev = iter(range(1, 1000))
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 150) * U, (b + 250) * U, names=("a", "b", "c"))
        kernel(t, b + 10, (b + 20, b + 40))
        e = next(ev)
        t.event_record(e, e, (b + 49) * U, (b + 50) * U, stream=7)
        t.stream_wait(e, e, (b + 50) * U, (b + 51) * U, stream=9)
        kernel(t, b + 55, (b + 56, b + 456), stream=9)
        e = next(ev)
        t.event_record(e, e, (b + 159) * U, (b + 160) * U, stream=7)
        t.stream_wait(e, e, (b + 160) * U, (b + 161) * U, stream=15)
        t.copy(t.call("cudaMemcpyAsync_v3020", (b + 165) * U, (b + 167) * U), (b + 166) * U, (b + 170) * U, kind=2, stream=15)
        e = next(ev)
        t.event_record(e, e, (b + 199) * U, (b + 200) * U, stream=9)
        t.stream_wait(e, e, (b + 200) * U, (b + 201) * U, stream=7)
    # WHEN analysed
    got = sums(t, tmp_path)
    # THEN every cycle, the first one too, is read on 7, which 15 was forked off: a = B..100,
    # b = 100..150, c = 150..456 (7 waits for 9 inside c) — before, the first cycle's c was read
    # on the thread's busiest stream (9), which pulled a onto 9 too (a 456, b 0, c 0)
    assert got == {(c, p): v for c in range(3) for p, v in (("a", 100), ("b", 50), ("c", 306))}


def test_a_worker_launch_returning_after_the_next_phase_began_is_no_overlap(tmp_path):
    # GIVEN phases on a scheduler thread (a [B, B+102], b [B+103, B+300]) that launch nothing,
    # and a worker thread with no phase launching k1 (call B+10..14, GPU B+14..214), k2 (call
    # B+100..104: begun in a, returned after b began; GPU B+214..264) and k3 (B+150..154, GPU
    # B+264..300) on stream 7
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=10)
        t.range("a", b * U, (b + 102) * U, tid=10)
        t.range("b", (b + 103) * U, (b + 300) * U, tid=10)
        for at, gpu in ((b + 10, (b + 14, b + 214)), (b + 100, (b + 214, b + 264)), (b + 150, (b + 264, b + 300))):
            kernel(t, at, gpu, tid=11, call_us=4)
    # WHEN analysed THEN the two ranges are one after the other (a's end is read later, for
    # k2, but the ranges do not overlap): the boundary at b's start (B+103) reads done(7) = B+214,
    # before k2 was put on the stream: a 214, b 86, adding up to the cycle's 300 (k2 was counted
    # in both, a 264, when the late read made them look overlapped)
    assert sums(t, tmp_path, ("a", "b")) == {(c, p): v for c in range(3) for p, v in (("a", 214), ("b", 86))}


def test_a_draft_thread_phase_opened_while_the_loops_is_open_reads_from_its_own_start(tmp_path):
    # GIVEN a pipelined drafter, cycle ranges on the loop thread (tid 10, stream 7), b = 1000c:
    # a [b, b+50]: 7 waits for the previous draft (event on 9), a kernel on 7 (GPU b+12..400);
    # b [b+50, b+150]: a kernel on 7 (b+400..450), records e7; the draft thread (tid 11, stream
    # 9) opens c [b+100, b+300] while b is open: 9 waits for the previous cycle's e7 (long done),
    # drafts on 9 (b+112..280), records e9; then d [b+300, b+320] works on the CPU only
    t = FakeTrace()
    prev9 = prev7 = None
    for c in range(4):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 320) * U, tid=10)
        t.range("a", b * U, (b + 50) * U, tid=10)
        if prev9 is not None:
            t.stream_wait(prev9, prev9, (b + 5) * U, (b + 6) * U, tid=10, stream=7)
        kernel(t, b + 10, (b + 12, b + 400), tid=10)
        t.range("b", (b + 50) * U, (b + 150) * U, tid=10)
        kernel(t, b + 60, (b + 400, b + 450), tid=10)
        e7 = 100 + c
        t.event_record(e7, e7, (b + 70) * U, (b + 71) * U, tid=10, stream=7)
        t.range("c", (b + 100) * U, (b + 300) * U, tid=11)
        if prev7 is not None:
            t.stream_wait(prev7, prev7, (b + 105) * U, (b + 106) * U, tid=11, stream=9)
        kernel(t, b + 110, (b + 112, b + 280), stream=9, tid=11)
        e9 = 200 + c
        t.event_record(e9, e9, (b + 290) * U, (b + 291) * U, tid=11, stream=9)
        t.range("d", (b + 300) * U, (b + 320) * U, tid=11)
        prev9, prev7 = e9, e7
    # WHEN analysed THEN events on each thread's stream at its own ranges' ends: a b..done(7,
    # b+50) = 400; b 400..450 = 50; c from done(9, b+100) = b+100 to done(9, b+300) = b+300 =
    # 200 (not held back to b's start boundary on 7, b+400); d b+300..the cycle's edge, read on
    # 9 and on the next a's 7: done(7, b+320) = b+450: 150 (cycles 1-2: the first has no wait yet)
    got = sums(t, tmp_path, ("a", "b", "c", "d"))
    assert {k: v for k, v in got.items() if k[0] in (1, 2)} == {(c, p): v for c in (1, 2) for p, v in (("a", 400), ("b", 50), ("c", 200), ("d", 150))}


def test_a_loop_thread_that_copies_results_off_another_threads_stream_reads_its_own(tmp_path):
    # GIVEN a model thread (tid 11) running a [b, b+200] on its own stream 9 (kernel b+12..300,
    # then an event), and a loop thread (tid 10, cycle ranges) that never launches a kernel: b
    # [b+210, b+260] makes 7 wait for that event and copies the result to the host on 7
    # (b+300..400); c [b+260, b+300] works on the CPU
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=10)
        t.range("a", b * U, (b + 200) * U, tid=11)
        kernel(t, b + 10, (b + 12, b + 300), stream=9, tid=11)
        t.event_record(c + 1, c + 1, (b + 190) * U, (b + 191) * U, tid=11, stream=9)
        t.range("b", (b + 210) * U, (b + 260) * U, tid=10)
        t.stream_wait(c + 1, c + 1, (b + 215) * U, (b + 216) * U, tid=10, stream=7)
        t.copy(t.call("cudaMemcpyAsync_v3020", (b + 220) * U, (b + 222) * U, tid=10), (b + 300) * U, (b + 400) * U, kind=2, stream=7)
        t.range("c", (b + 260) * U, (b + 300) * U, tid=10)
    # WHEN analysed THEN b and c are read on 7, the loop thread's own stream (it never launched
    # on 9): a b..done(9, b+200) = 300; b b+300..done(7, b+260) = b+400: 100; c 0; before, 7
    # looked like a copy stream forked off 9, and b read 0
    assert sums(t, tmp_path, ("a", "b", "c")) == {(c, p): v for c in range(3) for p, v in (("a", 300), ("b", 100), ("c", 0))}


def test_without_cycle_ranges_a_helper_range_named_like_the_first_phase_starts_no_cycle(tmp_path):
    # GIVEN no cycle ranges: the loop thread marks a [s, s+100] (k1 GPU s+20..200, k2 launched at
    # s+70, GPU s+200..300), b [s+100, s+150], c [s+150, s+250] (k3 s+300..400), steps every
    # 1000 us; a helper thread marks a short range named a at [s+120, s+130], inside b
    t = FakeTrace()
    for step in range(4):
        s = 1000 * step
        for name, lo, hi in (("a", s, s + 100), ("b", s + 100, s + 150), ("c", s + 150, s + 250)):
            t.range(name, lo * U, hi * U, tid=10)
        kernel(t, s + 10, (s + 20, s + 200), tid=10)
        kernel(t, s + 70, (s + 200, s + 300), tid=10)
        kernel(t, s + 160, (s + 300, s + 400), tid=10)
        t.range("a", (s + 120) * U, (s + 130) * U, tid=11)
    # WHEN analysed THEN four cycles, not eight: the helper's range, inside b, starts none (read
    # alone: 0); each cycle a 300, b 0, c 100
    assert sums(t, tmp_path, ("a", "b", "c")) == {(c, p): v for c in range(4) for p, v in (("a", 300), ("b", 0), ("c", 100))}


def test_a_worker_threads_copy_stream_forked_off_its_own_stream_in_a_schedulers_phase(tmp_path):
    # GIVEN the worker-thread shape: a scheduler thread (tid 10) holds the cycles and phases and
    # launches nothing; a worker thread (tid 11) launches all: in a, a kernel on 7 (GPU
    # s+20..300); in b, copy stream 15 forked off 7 and a copy on it (s+300..320); in c, a kernel
    # on 7 (s+300..450)
    t = FakeTrace()
    for c in range(3):
        s = 1000 * c
        t.cycle(c, s * U, (s + 100) * U, (s + 150) * U, (s + 400) * U, names=("a", "b", "c"), tid=10)
        kernel(t, s + 10, (s + 20, s + 300), tid=11)
        t.event_record(c + 1, c + 1, (s + 110) * U, (s + 111) * U, tid=11, stream=7)
        t.stream_wait(c + 1, c + 1, (s + 111) * U, (s + 112) * U, tid=11, stream=15)
        t.copy(t.call("cudaMemcpyAsync_v3020", (s + 115) * U, (s + 117) * U, tid=11), (s + 300) * U, (s + 320) * U, kind=2, stream=15)
        kernel(t, s + 160, (s + 300, s + 450), tid=11)
    # WHEN analysed THEN b is read on 7, which the thread that launched its copy forked 15 off
    # (not the range's thread, which launched nothing): a 300, b 0, c 150 (b read on 15: 20, c 130)
    got = sums(t, tmp_path, ("a", "b", "c"))
    assert {k: v for k, v in got.items() if k[0] >= 1} == {(c, p): v for c in (1, 2) for p, v in (("a", 300), ("b", 0), ("c", 150))}


def test_without_cycle_ranges_a_step_that_repeats_phases_every_time_is_never_cut(tmp_path):
    # GIVEN no cycle ranges; every step runs a, b, c, b, c (two forward and sample pairs), every
    # fourth one also d at its end; each range's kernel runs inside it (100 us apart)
    t = FakeTrace()
    for k in range(8):
        s = 1000 * k
        for i, name in enumerate(["a", "b", "c", "b", "c"] + (["d"] if k % 4 == 3 else [])):
            lo = s + 100 * i
            t.range(name, lo * U, (lo + 100) * U)
            kernel(t, lo + 10, (lo + 20, lo + 90))
    # WHEN analysed THEN 8 cycles, each whole (the usual step repeats b and c itself, so a longer
    # step is no step missing its first phase)
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b", "c", "d"))).ranks[0]
    assert rank.cycles.num_rows == 8
    assert [p["phase"] for p in rank.phases.to_pylist() if p["cycle"] == 3] == ["a", "b", "c", "b", "c", "d"]


def test_a_cycles_last_range_still_open_when_the_next_cycle_begins_holds_no_boundary_back(tmp_path):
    # GIVEN one thread, no cycle ranges, stream 7, the CPU running a cycle ahead: draft (push/pop)
    # and verify (nvtxRangeStart/End, closed once its result is read, after the next cycle's
    # draft began). Times (us), launch call -> GPU run:
    #   c0 draft [0, 100]       k at 10 -> 12..212      c0 verify [100, 250]   k at 110 -> 212..1012
    #   c1 draft [200, 300]     k at 210 -> 1012..1212  c1 verify [300, 400]   k at 310 -> 1212..2012
    #   c2 draft [2100, 2200]   k at 2110 -> 2112..2312 c2 verify [2200, 2300] k at 2210 -> 2312..2412
    t = FakeTrace()
    for (d0, d1, dk, dg), (v0, v1, vk, vg) in (((0, 100, 10, (12, 212)), (100, 250, 110, (212, 1012))),
                                               ((200, 300, 210, (1012, 1212)), (300, 400, 310, (1212, 2012))),
                                               ((2100, 2200, 2110, (2112, 2312)), (2200, 2300, 2210, (2312, 2412)))):
        t.range("draft", d0 * U, d1 * U)
        kernel(t, dk, dg)
        t.range("verify", v0 * U, v1 * U, push_pop=False)
        kernel(t, vk, vg)
    # WHEN analysed
    got = sums(t, tmp_path, phases=("draft", "verify"))
    # THEN events at each range's own ends: c0 draft 0 -> 212 (212), c0 verify 212 -> its end at
    # 250 waits for c1 draft's kernel, 1212 (1000); c1 draft's start event (200) waits for c0
    # verify's kernel only, 1012 -> 1212 (200); c1 verify 1212 -> 2012 (800); c2 draft 2100 ->
    # 2312 (212); c2 verify 2312 -> 2412 (100). Before, c0 verify's end was carried into c1
    # draft's start across the cycles' edge (c1 draft 0).
    assert got == {(0, "draft"): 212, (0, "verify"): 1000, (1, "draft"): 200, (1, "verify"): 800, (2, "draft"): 212, (2, "verify"): 100}


def _cycle_ahead_trace(n_cycles: int, outputs: int = 1, prefill_in: int | None = None, open_from: int | None = None,
                       outputs_in: int | None = None, output_us: int = 90, around: bool = False, cycle_ranges: bool = True) -> FakeTrace:
    """Start/end cycle ranges of an engine a cycle ahead (b = 1000n): cycle n [b, b+1400] (never
    closed from cycle ``open_from`` on), forward n [b, b+100] (kernel b+12..b+62), ``outputs``
    output ranges of cycle n [b+1200+100j, b+1200+100j+output_us] (a D2H copy each, GPU 20 us
    from 12 us in) for the first ``outputs_in`` cycles (all by default), and, in cycle
    ``prefill_in``, a prefill right after its forward [b+100, b+150] (a kernel b+112..b+140);
    with ``around``, one more cycle range 'cycles' [0, 4000] around them all; without
    ``cycle_ranges``, the phases alone."""
    t = FakeTrace()
    if around:
        t.range("cycles", 0, 4000 * U, push_pop=False)
    for n in range(n_cycles):
        b = 1000 * n
        if cycle_ranges:
            t.range(f"cycle {n}", b * U, None if open_from is not None and n >= open_from else (b + 1400) * U, push_pop=False)
        t.range("forward", b * U, (b + 100) * U)
        kernel(t, b + 10, (b + 12, b + 62))
        if n == prefill_in:
            t.range("prefill", (b + 100) * U, (b + 150) * U)
            kernel(t, b + 110, (b + 112, b + 140))
        if outputs_in is None or n < outputs_in:
            for j in range(outputs):
                o = b + 1200 + 100 * j
                t.range("output", o * U, (o + output_us) * U)
                t.copy(t.call("cudaMemcpyAsync", (o + 10) * U, (o + 12) * U), (o + 12) * U, (o + 32) * U, kind=2)
    return t


@pytest.mark.parametrize("around", [False, True])
def test_overlapping_cycle_ranges_keep_each_cycles_own_phases(tmp_path, around):
    # GIVEN nvtxRangeStart/End cycle ranges that overlap, as an engine a cycle ahead marks them
    # (_cycle_ahead_trace): cycle n [b, b+1400] (b = 1000n) holds forward n [b, b+100] (GPU
    # b+12..b+62) and output n [b+1200, b+1300] (a D2H copy, GPU b+1212..b+1232), which runs
    # after forward n+1 began; the GPU idle at every boundary; (around) inside one more cycle
    # range, 'cycles' [0, 4000], around them all
    t = _cycle_ahead_trace(3, output_us=100, around=around)
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "output"))).ranks[0]
    # THEN every cycle has its own forward and output, each 100 us (events at its CPU ends), and
    # runs b..b+1300 on the GPU; before, output n went to cycle n+1 (held by both ranges, the
    # later one chosen): cycle 0 had none and the last two
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    got = sorted((name[p["cycle"]], p["phase"], p["gpu_ns"] // U, p["cpu_start_ns"] // U) for p in rank.phases.to_pylist())
    assert got == [(f"cycle {n}", ph, 100, 1000 * n + off) for n in range(3) for ph, off in (("forward", 0), ("output", 1200))]
    assert sorted((c["name"], c["gpu_ns"] // U) for c in rank.cycles.to_pylist()) == [("cycle 0", 1300), ("cycle 1", 1300), ("cycle 2", 1300)]


def test_overlapping_cycle_ranges_are_said_with_the_time_from_start_to_start(tmp_path):
    # GIVEN the overlapping cycle ranges of _cycle_ahead_trace (cycle n [b, b+1400], b = 1000n),
    # and the same engine's cycles closed before the next began ([b, b+900], outputs ending by
    # b+890)
    ahead = _cycle_ahead_trace(3).write(tmp_path / "ahead.sqlite")
    t = FakeTrace()
    for n in range(3):
        b = 1000 * n
        t.range(f"cycle {n}", b * U, (b + 900) * U, push_pop=False)
        t.range("forward", b * U, (b + 100) * U)
        kernel(t, b + 10, (b + 12, b + 62))
        t.range("output", (b + 800) * U, (b + 890) * U)
    apart = t.write(tmp_path / "apart.sqlite")
    # WHEN analysed
    said = [w for w in load([ahead], PhaseConfig(phases=("forward", "output"))).warnings if "cycle ranges overlap" in w]
    not_said = [w for w in load([apart], PhaseConfig(phases=("forward", "output"))).warnings if "cycle ranges overlap" in w]
    # THEN one line says cycles 0 and 1 each ran past the next one's start, and that one cycle's
    # start to the next's is 1.000 ms, where a cycle's own CPU time is 1.4 ms; none for the other
    assert len(said) == 1 and "overlap in 2 of 3 cycles" in said[0] and "from one cycle's start to the next: 1.000 ms" in said[0]
    assert not_said == []
    # and a range around them all (a cycle range of another kind) hides nothing
    around = _cycle_ahead_trace(3, around=True).write(tmp_path / "around.sqlite")
    said = [w for w in load([around], PhaseConfig(phases=("forward", "output"))).warnings if "cycle ranges overlap" in w]
    assert len(said) == 1 and "overlap in 2 of 3 cycles" in said[0] and "from one cycle's start to the next: 1.000 ms" in said[0]


def test_without_cycle_ranges_a_cycle_aheads_output_step_is_in_the_cycle_it_ran_in(tmp_path):
    # GIVEN the engine a cycle ahead of _cycle_ahead_trace without its cycle ranges: forward n
    # [b, b+100] (GPU b+12..b+62, b = 1000n), output n [b+1200, b+1300] (a D2H copy, GPU
    # b+1212..b+1232) after forward n+1 began
    t = _cycle_ahead_trace(3, output_us=100, cycle_ranges=False)
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "output"))).ranks[0]
    # THEN cycles follow one another from each forward (the README's rule), forwards 0 and 1
    # back to back two cycles (each step runs one forward): output n is in cycle n+1, the one
    # it ran in, the last two in the last cycle. Each phase reads events at its start and at
    # the next phase's start in its cycle (the GPU idle at each: the CPU instants): forward 0
    # alone 0 -> 100 (its own end), forward 1 1000 -> 1200, output 0 1200 -> 1300, forward 2
    # 2000 -> 2200, output 1 2200 -> 3200, output 2 3200 -> 3300. Before, the two forwards
    # back to back were one step: two cycles, forward 0 1000 us
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    assert got == [(0, "forward", 100), (1, "forward", 200), (1, "output", 100), (2, "forward", 200), (2, "output", 1000), (2, "output", 100)]
    # and each cycle's CPU time runs from its first phase's start to its last's end
    assert [(c["cycle"], c["cpu_start_ns"] // U, c["cpu_end_ns"] // U) for c in rank.cycles.to_pylist()] == [(0, 0, 100), (1, 1000, 1300), (2, 2000, 3300)]


def test_without_cycle_ranges_a_step_that_drafted_twice_is_one_cycle(tmp_path):
    # GIVEN steps draft-verify, draft-verify, draft-draft-verify, draft-verify, draft-verify on
    # one thread, no cycle ranges (each range 100 us, back to back, a kernel in each)
    t = FakeTrace()
    at = 0
    for step in ("dv", "dv", "ddv", "dv", "dv"):
        for p in step:
            t.range("draft" if p == "d" else "verify", at * U, (at + 100) * U)
            kernel(t, at + 10, (at + 12, at + 60))
            at += 100
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify"))).ranks[0]
    # THEN five cycles, the third holding both drafts: two drafts back to back are one step
    # where each step has one verify (five verifies), not two (a cycle-ahead engine's first two
    # forwards are two steps where the outputs count one a step: the test above)
    got = [(p["cycle"], p["phase"]) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    assert got == [(0, "draft"), (0, "verify"), (1, "draft"), (1, "verify"), (2, "draft"), (2, "draft"), (2, "verify"), (3, "draft"), (3, "verify"),
                   (4, "draft"), (4, "verify")]


def test_a_range_around_several_cycles_is_no_cycle_of_their_phases(tmp_path):
    # GIVEN start/end cycle ranges 'cycle 0' .. 'cycle 2' ([b, b+300], b = 1000n, never
    # overlapping each other) inside one start/end range 'cycles' around them all [0, 3000],
    # each cycle holding a [b, b+100] (kernel at b+10, GPU b+12..b+62) and c [b+150, b+250]
    t = FakeTrace()
    t.range("cycles", 0, 3000 * U, push_pop=False)
    for n in range(3):
        b = 1000 * n
        t.range(f"cycle {n}", b * U, (b + 300) * U, push_pop=False)
        t.range("a", b * U, (b + 100) * U)
        kernel(t, b + 10, (b + 12, b + 62))
        t.range("c", (b + 150) * U, (b + 250) * U)
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "c"))).ranks[0]
    # THEN each phase is in the cycle range of its own n (the innermost holding it), one a and
    # one c per cycle; the range around them all (a cycle range too, by its name) holds none
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    got = sorted((name[p["cycle"]], p["phase"], p["cpu_start_ns"] // U) for p in rank.phases.to_pylist())
    assert got == [(f"cycle {n}", ph, 1000 * n + off) for n in range(3) for ph, off in (("a", 0), ("c", 150))]
    assert sorted(name.values()) == ["cycle 0", "cycle 1", "cycle 2"]


@pytest.mark.parametrize("case, trace, want", [
    # a phase only one cycle runs, in the window where the cycle before is still open: its own
    # cycle (the one it began in), not the open one that lacks a phase of its name
    ("prefill once", _cycle_ahead_trace(3, prefill_in=1),
     [(0, "forward"), (1, "forward"), (1, "prefill"), (0, "output"), (2, "forward"), (1, "output"), (2, "output")]),
    # two outputs a cycle: each cycle keeps both of its own (one each, then the rest cascaded)
    ("two outputs a cycle", _cycle_ahead_trace(4, outputs=2),
     [(0, "forward"), (1, "forward"), (0, "output"), (0, "output"), (2, "forward"), (1, "output"), (1, "output"),
      (3, "forward"), (2, "output"), (2, "output"), (3, "output"), (3, "output")]),
    # the capture stopped with cycles 1 and 2 open (both run to the trace's end) after output 1
    ("two cycles left open", _cycle_ahead_trace(3, open_from=1, outputs_in=2),
     [(0, "forward"), (1, "forward"), (0, "output"), (2, "forward"), (1, "output")]),
    # only the last cycle left open: its end at the trace's end ties with cycle 1's
    ("last cycle left open", _cycle_ahead_trace(3, open_from=2, outputs_in=2),
     [(0, "forward"), (1, "forward"), (0, "output"), (2, "forward"), (1, "output")]),
])
def test_overlapping_cycle_ranges_give_each_phase_the_cycle_it_is_of(tmp_path, case, trace, want):
    # GIVEN overlapping start/end cycle ranges (see _cycle_ahead_trace), in each case's shape
    # WHEN analysed
    rank = load([trace.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "prefill", "output"))).ranks[0]
    # THEN each phase, in time order, is in the cycle named for it by hand
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    got = [(int(name[p["cycle"]].split()[1]), p["phase"]) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    assert got == want, case


def _drafting_cycle_ahead_trace(drafts: tuple[int, ...], detok_in: tuple[int, ...] = (), ahead: int = 1) -> FakeTrace:
    """A speculative-decoding loop ``ahead`` cycles ahead with start/end cycle ranges (b =
    1000n): turn n opens 'cycle n' at b, runs ``drafts[n]`` drafts [b+100j, b+100j+60] and a
    verify right after them (each 60 us, a kernel from 12 to 52 us in), then cycle m = n-ahead's
    output [o, o+50] (o = 100 us after the verify; a D2H copy o+12..o+32) and, for m in
    ``detok_in``, its detok [o+60, o+90] (a kernel o+72..o+82), and closes cycle m at o+95;
    ``ahead`` more turns finish the last cycles."""
    t = FakeTrace()
    opened: list[int] = []
    for n, k in enumerate((*drafts, *[None] * ahead)):
        b = 1000 * n
        at = b
        if k is not None:
            opened.append(b)
            for name in ["draft"] * k + ["verify"]:
                t.range(name, at * U, (at + 60) * U)
                kernel(t, at + 10, (at + 12, at + 52))
                at += 100
        if n >= ahead:
            o, m = at, n - ahead
            t.range("output", o * U, (o + 50) * U)
            t.copy(t.call("cudaMemcpyAsync", (o + 10) * U, (o + 12) * U), (o + 12) * U, (o + 32) * U, kind=2)
            if m in detok_in:
                t.range("detok", (o + 60) * U, (o + 90) * U)
                kernel(t, o + 70, (o + 72, o + 82))
            t.range(f"cycle {m}", opened[m] * U, (o + 95) * U, push_pop=False)
    return t


def test_overlapping_cycle_ranges_keep_a_cycles_drafts_however_many_it_ran(tmp_path):
    # GIVEN the loop of _drafting_cycle_ahead_trace with 1, 3, 0, 2 and 1 drafts in cycles 0..4,
    # a detok after the output of cycles 0, 2 and 4 only: each cycle's drafts and verify run
    # while the cycle before is still open (its output step comes after them)
    t = _drafting_cycle_ahead_trace((1, 3, 0, 2, 1), detok_in=(0, 2, 4))
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "output", "detok"))).ranks[0]
    # THEN each phase, in time order, is in the cycle that ran it: a cycle's drafts and verify
    # are the newer cycle's, the output and detok after them the older one's (before, the drafts
    # went to the earliest open cycle short of two, the average: cycle 0 took cycle 1's first,
    # cycle 2 took cycle 3's, and the detoks went to the newer cycle)
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    got = [(int(name[p["cycle"]].split()[1]), p["phase"]) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    assert got == [(0, "draft"), (0, "verify"),
                   (1, "draft"), (1, "draft"), (1, "draft"), (1, "verify"), (0, "output"), (0, "detok"),
                   (2, "verify"), (1, "output"),
                   (3, "draft"), (3, "draft"), (3, "verify"), (2, "output"), (2, "detok"),
                   (4, "draft"), (4, "verify"), (3, "output"),
                   (4, "output"), (4, "detok")]
    # and each cycle's drafts add up to 100 us each (events at a draft's start and at the next
    # phase's start in its cycle, 100 us later, the GPU idle at both), cycle 2 none
    drafts: dict[int, int] = {}
    for p in rank.phases.to_pylist():
        if p["phase"] == "draft":
            drafts[int(name[p["cycle"]].split()[1])] = drafts.get(int(name[p["cycle"]].split()[1]), 0) + p["gpu_ns"] // U
    assert drafts == {0: 100, 1: 300, 3: 200, 4: 100}


def test_cycle_ranges_two_ahead_keep_a_cycles_drafts_however_many_it_ran(tmp_path):
    # GIVEN the loop of _drafting_cycle_ahead_trace two cycles ahead (turn n runs cycle n's drafts
    # and verify, then cycle n-2's output), 3, 3, 2, 3, 3 drafts in cycles 0..4
    t = _drafting_cycle_ahead_trace((3, 3, 2, 3, 3), ahead=2)
    # WHEN analysed
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "output"))).ranks[0]
    # THEN each phase is in the cycle that ran it (three cycles open at once: the drafts and
    # verify are the newest one's, the output the oldest one's; before, cycle 2 took one of
    # cycle 3's drafts, 3 one of 4's)
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    got = [(int(name[p["cycle"]].split()[1]), p["phase"]) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    assert got == [*[(0, "draft")] * 3, (0, "verify"),
                   *[(1, "draft")] * 3, (1, "verify"),
                   *[(2, "draft")] * 2, (2, "verify"), (0, "output"),
                   *[(3, "draft")] * 3, (3, "verify"), (1, "output"),
                   *[(4, "draft")] * 3, (4, "verify"), (2, "output"),
                   (3, "output"), (4, "output")]


def test_a_cycle_range_closed_after_the_next_forward_keeps_its_own_output(tmp_path):
    # GIVEN start/end cycle ranges of a loop that, in turn n, opens cycle n, schedules it, runs
    # cycle n-1's output, launches cycle n's forward and only then closes cycle n-1
    # (_loop_trace): the last phase before each cycle's range closes is the next cycle's forward
    t, _ = _loop_trace(_turns("o:0 schedule:0 forward:0", "o:{n} schedule:{n} output:{p} forward:{n} c:{p}", 4))
    # WHEN analysed THEN each cycle has its own schedule, forward and output: cycle 0 ran
    # schedule and forward alone before cycle 1 began, so those lead, and the output is the
    # older cycle's
    assert _phase_cycles(t, tmp_path, ("schedule", "output", "forward")) == [
        (0, "schedule"), (0, "forward"), *[x for n in range(1, 4) for x in ((n, "schedule"), (n - 1, "output"), (n, "forward"))], (3, "output")]


def _phase_cycles(t: FakeTrace, tmp_path, phases: tuple[str, ...]) -> list[tuple[int, str]]:
    """(cycle number from its range's name, phase) of each phase instance, in time order."""
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases)).ranks[0]
    name = {c["cycle"]: c["name"] for c in rank.cycles.to_pylist()}
    return [(int(name[p["cycle"]].split()[1]), p["phase"]) for p in sorted(rank.phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]


def test_a_loop_that_runs_the_older_cycles_output_before_the_next_forward_keeps_it(tmp_path):
    # GIVEN start/end cycle ranges of a loop whose turn n opens cycle n, runs cycle n-1's output,
    # then cycle n's forward, and closes cycle n-1 (_loop_trace): every shared stretch opens
    # with the older cycle's output
    t, _ = _loop_trace(_turns("o:0 forward:0", "o:{n} output:{p} forward:{n} c:{p}", 4))
    # WHEN analysed THEN each output is the cycle's before (cycle 0 ran its forward alone: the
    # forward leads; a name opening the stretches is not taken to lead where one is known)
    assert _phase_cycles(t, tmp_path, ("output", "forward")) == [
        (0, "forward"), *[x for n in range(1, 4) for x in ((n - 1, "output"), (n, "forward"))], (3, "output")]


def test_a_loop_that_runs_most_turns_in_step_keeps_each_output_in_its_cycle(tmp_path):
    # GIVEN start/end cycle ranges, ten cycles: turn n (b = 1000n) opens cycle n; in the odd
    # turns the loop first runs cycle n-1's output [b+20, b+70] and closes it (b+80), then cycle
    # n's forward [b+100, b+200]; in the even turns the forward first [b+10, b+110], then cycle
    # n-1's output [b+200, b+250], closing it at b+300; a last turn finishes cycle 9
    t = FakeTrace()
    for n in range(11):
        b = 1000 * n
        steps = [("output", 20), ("forward", 100)] if n % 2 else [("forward", 10), ("output", 200)]
        for what, at in steps:
            if what == "forward" and n < 10:
                t.range("forward", (b + at) * U, (b + at + 100) * U)
                kernel(t, b + at + 5, (b + at + 8, b + at + 40))
            elif what == "output" and n > 0:
                t.range("output", (b + at) * U, (b + at + 50) * U)
                kernel(t, b + at + 5, (b + at + 8, b + at + 20))
                t.range(f"cycle {n - 1}", (b - 1000) * U, (b + at + 60 if n % 2 else b + 300) * U, push_pop=False)
    # WHEN analysed THEN each output is its own cycle's (before, with outputs opening half the
    # shared stretches or more, every output went one cycle late)
    want = [(0, "forward")]
    for n in range(1, 10):
        want += [(n - 1, "output"), (n, "forward")] if n % 2 else [(n, "forward"), (n - 1, "output")]
    assert _phase_cycles(t, tmp_path, ("output", "forward")) == [*want, (9, "output")]


def test_an_output_thread_that_sometimes_finishes_before_the_next_cycle_opens(tmp_path):
    # GIVEN a scheduler thread (11) opening cycle n at b = 1000n, a model thread (12) running
    # forward n [b+20, b+120] and an output thread (13) running cycle n-1's output from b+x for
    # 50 us and closing cycle n-1 10 us after it: x = 150 (after cycle n opened) except -40 in
    # turns 2 and 5 (output 1 and 4 done before cycles 2 and 5 opened)
    t = FakeTrace()
    xs = [150, -40, 150, 150, -40, 150, 150, 150]
    ends = {}
    for n in range(9):
        b = 1000 * n
        if n < 8:
            t.range("forward", (b + 20) * U, (b + 120) * U, tid=12)
            kernel(t, b + 25, (b + 28, b + 60), tid=12)
        if n > 0:
            x = xs[n - 1]
            t.range("output", (b + x) * U, (b + x + 50) * U, tid=13)
            kernel(t, b + x + 5, (b + x + 8, b + x + 20), tid=13)
            ends[n - 1] = b + x + 60
    for n in range(8):
        t.range(f"cycle {n}", 1000 * n * U, ends[n] * U, tid=11, push_pop=False)
    # WHEN analysed THEN each output is its own cycle's (before, the two outputs run alone in
    # their cycle made the name a leading one, and every other output went one cycle late)
    want = [(0, "forward")]
    for n in range(1, 8):
        want += [(n - 1, "output"), (n, "forward")] if xs[n - 1] < 0 else [(n, "forward"), (n - 1, "output")]
    assert _phase_cycles(t, tmp_path, ("output", "forward")) == [*want, (7, "output")]


def _loop_trace(tokens: str, said: str | None = None, lie: int = 0) -> tuple[FakeTrace, list[tuple[int, str]]]:
    """A loop written as tokens 100 us apart: 'o:N' opens start/end range 'cycle N', 'c:N'
    closes it, 'NAME:N' runs phase NAME of cycle N (60 us, a kernel 8..28 us in), '@T' after a
    token runs it on thread T (else 10). Returns the trace and each phase's (cycle, name) in
    time order: the truth, by construction. ``said``: every range in that NVTX domain, with its
    cycle's index as payload (as ``instrument.start_cycle`` and ``phase(name, cycle=N)`` make
    them in the domain "tracerecon"), each phase's payload N + ``lie``."""
    t = FakeTrace()
    domain = t.domain(said) if said else 0
    opened: dict[int, tuple[int, int]] = {}
    want = []
    for k, token in enumerate(tokens.split()):
        at = 100 * k
        token, _, tid = token.partition("@")
        thread = int(tid) if tid else 10
        name, n = token.split(":")
        if name == "o":
            opened[int(n)] = (at, thread)
        elif name == "c":
            start, opener = opened.pop(int(n))
            t.range(f"cycle {n}", start * U, at * U, tid=opener, push_pop=False, domain=domain, payload=int(n) if said else None)
        else:
            t.range(name, at * U, (at + 60) * U, tid=thread, domain=domain, payload=int(n) + lie if said else None)
            kernel(t, at + 5, (at + 8, at + 28), tid=thread)
            want.append((int(n), name))
    return t, want


def _turns(first: str, turn: str, n: int, start: int = 1) -> str:
    """``first`` then ``turn`` for cycles ``start``..n-1 and a last turn closing the last
    cycle: in ``turn``, {n} is the new cycle and {p} the one before ('o:{n}' and the new
    cycle's phases are left out of the last turn)."""
    out = [first]
    for k in range(start, n + 1):
        step = turn.split()
        if k == n:
            step = [s for s in step if "{n}" not in s]
        out.append(" ".join(s.format(n=k, p=k - 1) for s in step))
    return " ".join(out)


_OTHER_SHAPES = {
    # a first prefill step run in step (its output alone in cycle 0), decode steps a cycle ahead
    "first step in step": _turns("o:0 prefill:0 output:0 o:1 c:0 decode:1", "o:{n} decode:{n} output:{p} c:{p}", 6, start=2),
    # a first prefill cycle, then decode steps named apart
    "prefill first": _turns("o:0 prefill:0", "o:{n} decode:{n} output:{p} c:{p}", 6),
    # a first prefill, then draft, verify, and the older cycle's accept after the verify
    "prefill first, then drafts": _turns("o:0 prefill:0", "o:{n} draft:{n} draft:{n} verify:{n} accept:{p} c:{p}", 6),
    # a tail of two steps, sample then output, after the next forward
    "a tail of two steps": _turns("o:0 forward:0", "o:{n} forward:{n} sample:{p} output:{p} c:{p}", 6),
    # the outputs on a thread of their own, the cycles marked on the model's thread
    "outputs on their own thread": _turns("o:0@11 forward:0@11", "o:{n}@11 forward:{n}@11 output:{p}@13 c:{p}", 6),
}


@pytest.mark.parametrize("case", list(_OTHER_SHAPES))
def test_overlapping_cycle_ranges_in_loops_of_other_shapes(tmp_path, case):
    # GIVEN start/end cycle ranges of a loop a cycle ahead, in each case's shape (_loop_trace)
    t, want = _loop_trace(_OTHER_SHAPES[case])
    names = tuple(dict.fromkeys(name for _, name in want))
    # WHEN analysed THEN each phase, in time order, is in the cycle that ran it (the share rule
    # alone put a decode, a verify in the prefill cycle and every later one in the cycle
    # before; the stage rule alone got the other three wrong, each output or sample a cycle late)
    assert _phase_cycles(t, tmp_path, names) == want, case


def _random_loop(r: random.Random) -> str:
    """A loop a cycle (or two) ahead, as ``_loop_trace`` tokens, drawn from engine shapes: a
    head of schedule / prefill / decode / drafts and verify, a tail of sample / output /
    detok run before or after the next cycle's head, warm-up cycles and a drain run in step,
    the tail on a thread of its own."""
    n = r.randint(3, 8)
    depth = r.choice([1, 1, 1, 2])
    mode = r.choice(["plain", "prefill first", "mixed", "drafts"])
    pre, post = r.choice([[], ["schedule"]]), r.choice([[], ["sample"]])
    tail = r.choice([["output"], ["sample", "output"], ["output", "detok"]])
    tail = [x for x in tail if x not in post]
    tail_first, warm = r.random() < 0.3, r.choice([0, 0, 1, 2])
    drain = r.choice([None, r.randint(2, n - 1)])
    thread = r.choice(["", "@13"])

    def head(k: int) -> list[str]:
        core = {"plain": ["forward"], "prefill first": ["prefill"] if k in (0, drain) else ["decode"],
                "mixed": r.choice([["prefill"], ["decode"], ["prefill", "decode"]]) if k else ["prefill"],
                "drafts": ["draft"] * r.choice([0, 1, 2, 3]) + ["verify"]}[mode]
        return [f"{x}:{k}" for x in pre + core + post]

    def closing(k: int) -> list[str]:
        return [f"{x}:{k}{thread}" for x in tail] + [f"c:{k}"]

    out: list[str] = []
    pending: list[int] = []
    for k in range(n):
        if k < warm or k == drain:  # run in step: the older cycles drained first
            while pending:
                out += closing(pending.pop(0))
            out += [f"o:{k}", *head(k), *closing(k)]
            continue
        out.append(f"o:{k}")
        if len(pending) >= depth:
            older = closing(pending.pop(0))
            out += older + head(k) if tail_first else head(k) + older
        else:
            out += head(k)
        pending.append(k)
    while pending:
        out += closing(pending.pop(0))
    return " ".join(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_overlapping_cycle_ranges_put_each_phase_in_the_cycle_it_says(tmp_path, seed):
    # GIVEN a random loop of an engine a cycle or two ahead whose ranges say their cycle
    # (instrument.start_cycle, phase(name, cycle=N): payloads in the domain "tracerecon"),
    # some of whose shapes the trace's timing alone reads a cycle off
    t, want = _loop_trace(_random_loop(random.Random(seed)), said="tracerecon")
    # WHEN analysed THEN each phase, in time order, is in the cycle it said
    assert _phase_cycles(t, tmp_path, tuple(dict.fromkeys(name for _, name in want))) == want


@pytest.mark.parametrize("case", list(_OTHER_SHAPES))
def test_payloads_of_another_domain_say_no_cycle(tmp_path, case):
    # GIVEN the loops of other shapes, read right by their timing, whose ranges all carry a
    # payload one more than their cycle's index in a domain of the engine's own
    t, want = _loop_trace(_OTHER_SHAPES[case], said="engine", lie=1)
    # WHEN analysed THEN those payloads say nothing: each phase stays in the cycle that ran it
    assert _phase_cycles(t, tmp_path, tuple(dict.fromkeys(name for _, name in want))) == want, case


def test_a_phase_that_says_a_cycle_not_holding_it_goes_by_its_timing(tmp_path):
    # GIVEN the tail-of-two-steps loop whose phases say their cycle, but each sample says one
    # no cycle range is of (99)
    t, want = _loop_trace(_OTHER_SHAPES["a tail of two steps"], said="tracerecon")
    for row in t.nvtx:
        if row["text"] == "sample":
            row["int64Value"] = 99
    # WHEN analysed THEN the samples go by their timing (right in this shape), the others as said
    got = _phase_cycles(t, tmp_path, ("forward", "sample", "output"))
    assert got == want


def test_phases_saying_another_cycle_than_the_range_holding_them_are_said(tmp_path):
    # GIVEN instrument cycles pushed and popped (``with cycle(i)``, 900 us each) whose output
    # step says the cycle before (``phase("output", cycle=i - 1)``), as an engine a cycle ahead
    # that kept push/pop cycles would
    t = FakeTrace()
    domain = t.domain("tracerecon")
    for i in range(4):
        b = 1000 * i
        t.range(f"cycle {i}", b * U, (b + 900) * U, domain=domain, payload=i)
        t.range("forward", (b + 100) * U, (b + 300) * U, domain=domain, payload=i)
        t.range("output", (b + 400) * U, (b + 600) * U, domain=domain, payload=i - 1)
        kernel(t, b + 105, (b + 110, b + 250))
    analysis = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "output")))
    # WHEN analysed THEN each is the cycle range's that holds it, and a warning says the
    # outputs said another, and how to mark such a loop
    assert [(p["cycle"], p["phase"]) for p in analysis.ranks[0].phases.to_pylist()] == [(i, n) for i in range(4) for n in ("forward", "output")]
    (line,) = [w for w in analysis.warnings if "say another cycle" in w]
    assert "'output': 4 of 4 ranges" in line and "start_cycle" in line
