"""Which stream a phase's events would be recorded on when its work forks to side streams.

A phase that forks work to another stream and joins it back (``wait_stream`` both ways: a side
stream, ProcessGroupNCCL's collectives) records its events on the caller's stream, even where
the side stream got most of the GPU time (an all-reduce waiting for a slower peer). Every
expected number below is worked out by hand from the ops' times: an event recorded on the
caller's stream at a CPU instant completes when the work queued there (and what it waits for)
is done.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000  # 1 us


def one_rank(trace: FakeTrace, tmp_path):
    (rank,) = analyze([trace.write(tmp_path / "t.sqlite")]).ranks
    return rank


def per_cycle(rank):
    return [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist()]


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, name: str = "k", device: int = 0) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U), gpu_us[0] * U, gpu_us[1] * U, stream=stream, name=name, device=device)


def fork_join(t: FakeTrace, event: int, record: int, at_us: int, side: int, caller: int = 7) -> None:
    """``side.wait_stream(caller)`` at ``at_us``: record on the caller, the side stream waits."""
    t.event_record(event=event, record=record, start=at_us * U, end=(at_us + 1) * U, stream=caller)
    t.stream_wait(event=event, record=record, start=(at_us + 1) * U, end=(at_us + 2) * U, stream=side)


def test_a_long_all_reduce_on_nccls_stream_is_read_on_the_compute_stream(tmp_path):
    # GIVEN a synchronous tensor-parallel engine: each cycle draft (stream 7), then verify, the
    # cycle's last phase: a GEMM on 7, an all-reduce on NCCL's stream 30 forked off 7 and joined
    # back (this rank waits 300 us for a slower peer, most of verify's GPU time), sampling on 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 200) * U)
        launch(t, b + 5, (b + 10, b + 60))
        launch(t, b + 55, (b + 60, b + 100))
        fork_join(t, 1, c + 1, b + 60, side=30)
        launch(t, b + 64, (b + 100, b + 400), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        fork_join(t, 2, c + 1, b + 67, side=7, caller=30)
        launch(t, b + 71, (b + 400, b + 550))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on stream 7: draft starts at its CPU instant b and ends when its kernel is done
    # (b+60, verify's CPU start b+50 is earlier); verify ends at done(7, b+200) = b+550, the
    # sampling kernel after the join: 490 us every cycle, not the 340 us stream 30 would read
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 60), ("verify", 490))]
    # and the cycles tile the GPU timeline with no gap: each is 550 us
    assert [(c["gpu_ns"] // U, c["adds_up"]) for c in rank.cycles.to_pylist()] == [(550, True)] * 3


def test_fork_join_with_the_cpu_one_cycle_ahead(tmp_path):
    # GIVEN the CPU queues each cycle while the GPU still runs the one before; verify forks a
    # 400 us kernel to side stream 9 and joins back to 7, then a 200 us kernel on 7
    t = FakeTrace()
    for c, (b, g) in enumerate([(0, 20), (300, 730), (600, 1440)]):  # CPU start, GPU start (us)
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        launch(t, b + 10, (g, g + 100))
        launch(t, b + 110, (g + 100, g + 110))
        fork_join(t, 1, c + 1, b + 113, side=9)
        launch(t, b + 115, (g + 110, g + 510), stream=9)
        fork_join(t, 2, c + 1, b + 118, side=7, caller=9)
        launch(t, b + 121, (g + 510, g + 710))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN on stream 7: cycle 0 draft 0..120 (its kernel runs 20..120), verify 120..730 = 610;
    # cycle 1 draft starts when 7 is done with cycle 0 (730) and runs 100; verify 830..1440 = 610;
    # cycle 2 the same from 1440
    assert per_cycle(rank) == [(0, "draft", 120, 7), (0, "verify", 610, 7), (1, "draft", 100, 7), (1, "verify", 610, 7),
                               (2, "draft", 100, 7), (2, "verify", 610, 7)]


def test_a_cpu_only_last_phase_after_a_fork_join_inherits_the_callers_stream(tmp_path):
    # GIVEN verify forks 400 us of work to side stream 9, joins back to 7 and runs 200 us more on
    # 7; the cycle's last phase (draft_re_extend: bookkeeping) launches nothing
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, (b + 300) * U, names=("draft", "verify", "draft_re_extend"))
        launch(t, b + 10, (b + 20, b + 120))
        launch(t, b + 110, (b + 120, b + 130))
        fork_join(t, 1, c + 1, b + 113, side=9)
        launch(t, b + 115, (b + 130, b + 530), stream=9)
        fork_join(t, 2, c + 1, b + 118, side=7, caller=9)
        launch(t, b + 121, (b + 530, b + 730))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN verify runs from b+120 (draft's kernel done) to done(7, b+200) = b+730: 610 us; the
    # CPU-only last phase reads stream 7 too and finds it already done: 0 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 120), ("verify", 610), ("draft_re_extend", 0))]


def test_the_caller_stays_the_caller_when_collectives_are_waited_for_lazily(tmp_path):
    # GIVEN one phase per cycle on stream 7 with two all-reduces on stream 30, each joined back
    # only when the next layer needs it (functional collectives): the waits alternate
    # 30<-7, 7<-30, 30<-7, 7<-30, and 7 launches between them; stream 30 gets most GPU time.
    # The waits make 7 look forked off 30 between a join and the next fork, but that bracket
    # opens before the phase does (the previous cycle's join) or 7 launches outside it
    t = FakeTrace()
    for c in range(2):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 200) * U)
        t.range("verify", b * U, (b + 200) * U)
        launch(t, b + 10, (b + 10, b + 50))  # layer 0 GEMM
        fork_join(t, 1, 2 * c + 1, b + 20, side=30)
        launch(t, b + 23, (b + 50, b + 250), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        launch(t, b + 30, (b + 50, b + 80))  # overlapped work on 7
        fork_join(t, 2, 2 * c + 1, b + 40, side=7, caller=30)  # join
        launch(t, b + 50, (b + 250, b + 300))  # layer 1 GEMM
        fork_join(t, 1, 2 * c + 2, b + 60, side=30)
        launch(t, b + 63, (b + 300, b + 500), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        launch(t, b + 70, (b + 300, b + 320))
        fork_join(t, 2, 2 * c + 2, b + 80, side=7, caller=30)  # join
        launch(t, b + 90, (b + 500, b + 530))  # sampling
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN both cycles read stream 7: verify b..done(7, b+200) = b+530
    assert per_cycle(rank) == [(0, "verify", 530, 7), (1, "verify", 530, 7)]


def test_a_copy_stream_never_joined_back_is_no_phases_stream(tmp_path):
    # GIVEN sampling (a 50 us kernel on 7), then a copy stream 12 forked off 7 that copies 400 us
    # of logprobs to the host; no stream ever waits for 12 (the CPU waits on an event)
    t = FakeTrace()
    t.range("cycle 0", 0, 200 * U)
    t.range("verify", 0, 200 * U)
    launch(t, 10, (10, 60))
    fork_join(t, 1, 1, 20, side=12)
    t.copy(t.call("cudaMemcpyAsync", 25 * U, 27 * U), 60 * U, 460 * U, stream=12)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7 (12 was forked off it, and only copies): verify 0 .. max(200, done(7, 200)
    # = 60) = 200 us, not 460 (the copy's end on 12)
    assert per_cycle(rank) == [(0, "verify", 200, 7)]


def test_a_collective_waited_for_in_the_next_phase_is_read_on_the_compute_stream(tmp_path):
    # GIVEN draft launches a 30 us kernel on 7 and an all-reduce with async_op=True (NCCL's
    # stream 30 waits for 7; the all-reduce waits 400 us for a slower peer); verify runs 150 us
    # on 7, then work.wait() (7 waits for 30), then 20 us on 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        launch(t, b + 5, (b + 10, b + 40))
        fork_join(t, 1, c + 1, b + 50, side=30)
        launch(t, b + 52, (b + 60, b + 460), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        t.event_record(event=2, record=c + 1, start=(b + 55) * U, end=(b + 56) * U, stream=30)
        launch(t, b + 105, (b + 106, b + 256))
        t.stream_wait(event=2, record=c + 1, start=(b + 270) * U, end=(b + 271) * U, stream=7)
        launch(t, b + 275, (b + 460, b + 480))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. max(b+100, done(7) = b+40) = 100 us; verify b+100 .. done(7,
    # b+300) = b+480 (after the wait for the all-reduce): 380 us. On NCCL's stream draft would
    # read 460 and verify 20.
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 380))]


def test_a_plan_stream_and_a_collective_in_one_phase_end_on_the_forward_stream(tmp_path):
    # GIVEN SGLang's plan stream: verify forks plan stream 40 off forward stream 20 twice (prep
    # kernels on 40, 20 waits for them, then a CUDA graph on 20), with a synchronous all-gather
    # on NCCL's stream 30 (900 us: a slower peer) between the two rounds
    t = FakeTrace()
    for c in range(3):
        b = c * 3000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 5, (b + 10, b + 60), stream=20)
        fork_join(t, 1, 4 * c + 1, b + 105, side=40, caller=20)
        launch(t, b + 108, (b + 110, b + 130), stream=40)
        fork_join(t, 2, 4 * c + 1, b + 130, side=20, caller=40)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 140) * U, (b + 142) * U), (b + 142) * U, (b + 642) * U, stream=20)
        fork_join(t, 5, c + 1, b + 150, side=30, caller=20)
        launch(t, b + 153, (b + 642, b + 1542), stream=30, name="ncclDevKernel_AllGather_RING_LL")
        fork_join(t, 6, c + 1, b + 155, side=20, caller=30)
        fork_join(t, 1, 4 * c + 2, b + 200, side=40, caller=20)
        launch(t, b + 203, (b + 1542, b + 1562), stream=40)
        fork_join(t, 2, 4 * c + 2, b + 230, side=20, caller=40)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 240) * U, (b + 242) * U), (b + 1562) * U, (b + 1762) * U, stream=20)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 20: draft b .. b+100 (its kernel ended at b+60); verify b+100 .. done(20,
    # b+400) = b+1762, the draft-extend graph's end: 1662 us, every cycle 1762 us
    assert per_cycle(rank) == [(c, n, v, 20) for c in range(3) for n, v in (("draft", 100), ("verify", 1662))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [1762] * 3


def test_a_copy_stream_for_inputs_and_results_is_nobodys_caller(tmp_path):
    # GIVEN verify uploads its inputs on copy stream 12 (no wait), the compute stream 7 waits
    # for the upload and runs the forward, then 12 waits for 7 and copies 200 us of results out
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 10, b + 90))
        t.copy(t.call("cudaMemcpyAsync", (b + 102) * U, (b + 103) * U), (b + 105) * U, (b + 110) * U, kind=1, stream=12)
        fork_join(t, 1, c + 1, b + 104, side=7, caller=12)  # 7 waits for the upload
        launch(t, b + 110, (b + 110, b + 500), name="forward")
        fork_join(t, 2, c + 1, b + 300, side=12)  # 12 waits for the forward
        t.copy(t.call("cudaMemcpyAsync", (b + 302) * U, (b + 303) * U), (b + 500) * U, (b + 700) * U, kind=2, stream=12)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN the waits look like 7 forked off 12 and joined back, but 12 ran no kernel: verify is
    # read on 7, b+100 .. done(7, b+400) = b+500: 400 us (not 600 with the copy out)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 400))]


def test_a_phase_that_opens_with_a_collective_is_read_on_the_compute_stream(tmp_path):
    # GIVEN draft (here: sampling) opens with an all-gather on NCCL's stream 30 forked off 7 and
    # joined back (300 us: a slower peer), then a sampling kernel on 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, names=("verify", "draft"))
        launch(t, b + 10, (b + 10, b + 150))
        fork_join(t, 1, c + 1, b + 102, side=30)
        launch(t, b + 104, (b + 150, b + 450), stream=30, name="ncclDevKernel_AllGather_RING_LL")
        fork_join(t, 2, c + 1, b + 107, side=7, caller=30)
        launch(t, b + 110, (b + 450, b + 520))
    # WHEN analysed with verify first in each cycle
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify", "draft"))).ranks
    # THEN events on 7: verify b..done(7, b+100) = b+150; draft b+150..done(7, b+300) = b+520
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("verify", 150), ("draft", 370))]


def test_a_collective_under_an_empty_side_stream_is_read_on_the_compute_stream(tmp_path):
    # GIVEN `side.wait_stream(cur); with torch.cuda.stream(side): dist.all_reduce(x);
    # cur.wait_stream(side)`: side stream 60 is forked off 7 and launches nothing itself,
    # NCCL's stream 30 is forked off 60 (the all-reduce waits 445 us for a slower peer), 30 joins
    # 60, 60 joins 7, then a 50 us kernel on 7; forward is the cycle's last phase
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        t.cycle(c, b * U, (b + 50) * U, (b + 400) * U)
        launch(t, b + 5, (b + 10, b + 30))
        launch(t, b + 55, (b + 60, b + 100))
        fork_join(t, 1, c + 1, b + 60, side=60)
        fork_join(t, 2, c + 1, b + 66, side=30, caller=60)
        launch(t, b + 69, (b + 105, b + 550), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        fork_join(t, 3, c + 1, b + 72, side=60, caller=30)
        fork_join(t, 4, c + 1, b + 75, side=7, caller=60)
        launch(t, b + 80, (b + 550, b + 600))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. b+50 (its kernel ended at b+30); verify b+50 .. done(7, b+400)
    # = b+600, the kernel after the joins: 550 us (NCCL's stream would read 500); cycles 600 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 50), ("verify", 550))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [600] * 3


def test_a_side_stream_relaunched_after_a_join_without_a_new_fork_is_read_on_the_caller(tmp_path):
    # GIVEN verify forks side stream 50 off 7 (a 200 us kernel there), joins it back, runs 20 us
    # on 7, then launches a second 200 us kernel on 50 with no new fork (it needs only 50's own
    # earlier output) and joins 50 into 7 again before a last 20 us kernel on 7; 50 has the most
    # GPU time; verify is the cycle's last phase
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        t.cycle(c, b * U, (b + 50) * U, (b + 400) * U)
        launch(t, b + 5, (b + 10, b + 30))
        launch(t, b + 55, (b + 60, b + 100))
        fork_join(t, 1, c + 1, b + 60, side=50)
        launch(t, b + 63, (b + 100, b + 300), stream=50)
        fork_join(t, 2, c + 1, b + 66, side=7, caller=50)
        launch(t, b + 70, (b + 300, b + 320))
        launch(t, b + 74, (b + 300, b + 500), stream=50)
        fork_join(t, 3, c + 1, b + 78, side=7, caller=50)
        launch(t, b + 82, (b + 500, b + 520))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. b+50; verify b+50 .. done(7, b+400) = b+520, the last kernel
    # after the second join: 470 us (stream 50 would end at b+500: 450); cycles 520 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 50), ("verify", 470))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [520] * 3


def test_a_side_stream_joined_back_in_a_later_phase_of_the_cycle_is_read_on_the_caller(tmp_path):
    # GIVEN draft (CPU b..b+100) runs 30 us on 7, forks side stream 50 off 7 (record on 7 at b+50),
    # queues a 500 us kernel on 50 (b+60..b+560) and another 18 us one on 7; 50 is not joined back
    # in draft; verify (CPU b+100..b+400) makes 7 wait for 50 (record on 50 at b+150) and runs a
    # 20 us kernel on 7 after it (b+560..b+580): side_join_later of launch/stream_shapes_probe.py
    t = FakeTrace()
    for c in range(3):
        _side_joined_in_verify(t, c * 2000, c)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7, where both phases' events go: draft b..max(b+100, done(7, b+100) = b+90):
    # 100 us; verify b+100..done(7, b+400) = b+580 (its kernel waited for 50): 480 us. Read on
    # stream 50, draft would take 560 us and verify 20 us; cycles 580 us either way
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 480))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [580] * 3


@pytest.mark.parametrize("join_us, verify_us", [(59, 200), (74, 602)], ids=["between_the_phases", "at_the_top_of_verify"])
def test_a_side_stream_never_forked_and_joined_after_the_phase_before_its_thread_launches_again_is_read_on_the_caller(tmp_path, join_us, verify_us):
    # GIVEN one thread, current stream 7, the GPU idle at each cycle's start: draft (CPU b..b+50)
    # runs 100 us on 7 (b+30..b+130) and a 500 us prefetch on side stream 8 (b+32..b+532), never
    # forked off 7, and records on 8 at b+40; 7 waits for that record at b+join_us, after draft's
    # range (between the ranges, or inside verify's, CPU b+70..b+120) and before the thread's
    # next launch: verify's 200 us kernel on 7 (launched b+80, runs b+532..b+732)
    t = _prefetched_then_joined(join_us, verify_gpu=(532, 732))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN draft is read on 7, its thread's stream: events there read b..done(7, b+50) = b+130:
    # 130 us (on 8 it read 532); verify b+70..done(7, b+120) = b+732, from done(7, b+70): b+130
    # where the join is inside verify (602 us), b+532 where it came before verify began (200 us)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 130), ("verify", verify_us))]


def test_a_side_stream_joined_only_after_its_thread_launched_again_keeps_the_phase_on_it(tmp_path):
    # GIVEN the cycles above, but 7 waits for 8's record at b+85, after the thread launched
    # verify's kernel on 7 (b+80): the join orders nothing of draft's before verify's work
    t = _prefetched_then_joined(85, verify_gpu=(130, 330))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN draft stays where the rule for side streams joined within no phase reads it, on 8
    # (b..b+532, verify's boundary after it: b+532..done(7, b+120) = b+532: 0 us), as before
    assert per_cycle(rank) == [(c, n, v, s) for c in range(3) for n, v, s in (("draft", 532, 8), ("verify", 0, 7))]


def _prefetched_then_joined(join_us: int, verify_gpu: tuple[int, int]) -> FakeTrace:
    """Three cycles (b = 2c ms) of the two tests above: draft's kernel on 7 and prefetch on 8
    (recorded on 8 at b+40), 7 waiting for it at b+join_us, verify's kernel on 7 launched at
    b+80 and running b+verify_gpu."""
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        t.range(f"cycle {c}", b * U, (b + 120) * U)
        t.range("draft", b * U, (b + 50) * U)
        t.range("verify", (b + 70) * U, (b + 120) * U)
        launch(t, b + 10, (b + 30, b + 130))
        launch(t, b + 31, (b + 32, b + 532), stream=8)
        t.event_record(event=1, record=c + 1, start=(b + 40) * U, end=(b + 41) * U, stream=8)
        t.stream_wait(event=1, record=c + 1, start=(b + join_us) * U, end=(b + join_us + 1) * U, stream=7)
        launch(t, b + 80, (b + verify_gpu[0], b + verify_gpu[1]))
    return t


def _side_joined_in_verify(t: FakeTrace, b: int, c: int, device: int = 0) -> None:
    """Cycle ``c`` at ``b`` us of the test above: draft forks 50 off 7, verify joins it back at
    b+150; the kernels on GPU ``device`` (the event records and waits name device 0)."""
    t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
    launch(t, b + 5, (b + 10, b + 40), device=device)
    fork_join(t, 1, c + 1, b + 50, side=50)
    launch(t, b + 55, (b + 60, b + 560), stream=50, device=device)
    launch(t, b + 70, (b + 72, b + 90), device=device)
    fork_join(t, 2, c + 1, b + 150, side=7, caller=50)
    launch(t, b + 160, (b + 560, b + 580), device=device)


def test_another_threads_phase_begun_before_the_join_does_not_hide_the_joining_phase(tmp_path):
    # GIVEN the cycles above, and a phase bg on thread 12 that starts at b+120, between verify's
    # start and the join (b+150), runs a 5 us kernel on its own stream 60 and ends past the cycle
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        _side_joined_in_verify(t, b, c)
        t.range("bg", (b + 120) * U, (b + 450) * U, tid=12)
        t.kernel(t.call("cudaLaunchKernel", (b + 122) * U, (b + 124) * U, tid=12), (b + 125) * U, (b + 130) * U, stream=60)
    # WHEN analysed with the three phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "bg"))).ranks
    # THEN verify, the phase of draft's thread that holds the join, still makes draft a side of 7:
    # draft 100 us and verify 480 us on 7, as without bg; bg (in no cycle: it ends past it) is
    # read alone on 60: b+120..b+450 = 330 us
    rows = per_cycle(rank)
    assert [r for r in rows if r[1] != "bg"] == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 480))]
    assert [r[2:] for r in rows if r[1] == "bg"] == [(330, 60)] * 3


def test_a_start_end_phase_ended_before_the_join_does_not_hide_the_phase_holding_it(tmp_path):
    # GIVEN the cycles above, and a phase sub marked with nvtxRangeStart/End on the same thread
    # inside verify (b+110..b+140), ended before verify's join at b+150 (such ranges never nest:
    # sub is a phase of its own, the latest to start before the join)
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        _side_joined_in_verify(t, b, c)
        t.range("sub", (b + 110) * U, (b + 140) * U, push_pop=False)
    # WHEN analysed with the three phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "sub"))).ranks
    # THEN the join is in verify, which still runs then, so draft is read on 7: b..b+100 = 100 us
    # (on 50 it would read 560 us); every phase is on 7
    rows = per_cycle(rank)
    assert [r for r in rows if r[1] == "draft"] == [(c, "draft", 100, 7) for c in range(3)]
    assert {r[3] for r in rows} == {7}


def test_a_join_held_by_a_later_phase_of_the_cycle_counts_though_the_next_cycle_opened_meanwhile(tmp_path):
    # GIVEN one thread, no cycle ranges (a cycle starts at each a), start/end ranges: a (0..100)
    # forks 50 off 7 and queues 500 us there; b (100..400) runs 20 us on 7; the next cycle's a
    # opens at 300, inside b, and at 350, with both open, 7 waits for a record made on 50 at 349
    t = FakeTrace()
    t.range("a", 0, 100 * U, push_pop=False)
    t.range("b", 100 * U, 400 * U, push_pop=False)
    t.range("a", 300 * U, 600 * U, push_pop=False)
    fork_join(t, 1, 1, 10, side=50)
    launch(t, 15, (20, 520), stream=50)
    launch(t, 110, (110, 130))
    fork_join(t, 2, 1, 348, side=7, caller=50)
    launch(t, 360, (520, 540))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b"))).ranks
    # THEN the join is b's, a later phase of the first a's cycle read on 7, not the second a's
    # (the latest to open): the first a is read on 7, where the thread's events go
    rows = [(p["cycle"], p["phase"], p["stream_id"]) for p in rank.phases.to_pylist()]
    assert rows[0] == (0, "a", 7) and (0, "b", 7) in rows


def test_event_records_and_waits_naming_device_0_find_their_streams_on_the_process_gpu(tmp_path):
    # GIVEN the shape above in a process whose work is on GPU 1, its event records and stream
    # waits naming device 0 (as nsys 2026.2 writes every synchronization record)
    t = FakeTrace()
    for c in range(3):
        _side_joined_in_verify(t, c * 2000, c, device=1)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN the waits join GPU 1's streams 7 and 50, and the numbers are those above: draft 100 us,
    # verify 480 us on 7 (with the waits on phantom device-0 streams: 560 and 20 us on 50)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 480))]
    assert [p["device_id"] for p in rank.phases.to_pylist()] == [1] * 6


def test_an_aux_stream_that_waits_for_the_phases_stream_later_is_not_its_caller(tmp_path):
    # GIVEN draft prepares inputs on aux stream 9 (a 10 us kernel), makes forward stream 7 wait for
    # them (record on 9, wait on 7) and runs 200 us on 7; verify runs 50 us on 7, then makes 9 wait
    # for 7 (buffers reused next step: record on 7, wait on 9) and runs a 5 us kernel on 9. So 7
    # waits for 9 first in draft and 9 for 7 later in the cycle, as a side stream joined back would
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        launch(t, b + 5, (b + 10, b + 20), stream=9)
        fork_join(t, 1, c + 1, b + 30, side=7, caller=9)
        launch(t, b + 40, (b + 40, b + 240))
        launch(t, b + 110, (b + 240, b + 290))
        fork_join(t, 2, c + 1, b + 120, side=9, caller=7)
        launch(t, b + 125, (b + 290, b + 295), stream=9)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN verify, the phase that joins, is read on 7, not on 9: 7 is where the engine's events
    # go, and 7 was never forked off 9. Events on 7: draft b..b+240 = 240 us, verify
    # b+240..max(b+300, b+290) = 60 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 240), ("verify", 60))]


def test_an_aux_stream_forked_off_and_joined_back_within_each_cycle_is_read_on_the_caller(tmp_path):
    # GIVEN prep (CPU b..b+50) forks aux stream 9 off 7 (buffers free: record on 7, wait on 9) and
    # prepares inputs there (10 us); forward (b+50..b+150) makes 7 wait for them (record on 9,
    # wait on 7) and runs 200 us on 7 (b+60..b+260); sample (b+150..b+300) runs 50 us on 7. So 7
    # waits for 9 in forward, and 9 for 7 again only in the next cycle's prep
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, (b + 300) * U, names=("prep", "forward", "sample"))
        fork_join(t, 1, c + 1, b + 5, side=9, caller=7)
        launch(t, b + 10, (b + 12, b + 22), stream=9)
        fork_join(t, 2, c + 1, b + 55, side=7, caller=9)
        launch(t, b + 60, (b + 60, b + 260))
        launch(t, b + 160, (b + 260, b + 310))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prep", "forward", "sample"))).ranks
    # THEN every phase is read on 7: prep forked 9 off 7 and forward, read on 7, joined it back
    # in the cycle; forward's 7 is not forked off 9 (9 waits for 7 again only in the next cycle).
    # Events on 7: prep b..b+50 = 50 us, forward b+50..done(7, b+150) = b+260: 210 us, sample
    # b+260..b+310 = 50 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("prep", 50), ("forward", 210), ("sample", 50))]


def test_a_worker_threads_phase_is_no_side_of_the_stream_another_thread_joins_it_into(tmp_path):
    # GIVEN one process, two threads: schedule and process on thread 11 (current stream 7),
    # forward on worker thread 12 (current stream 50). schedule runs 30 us on 7 and records on 7;
    # forward makes 50 wait for it, runs 500 us on 50 (b+110..b+610) and records on 50; process
    # makes 7 wait for that record and runs 20 us on 7 (b+610..b+630). Thread 12 never touches 7
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=11)
        t.range("schedule", b * U, (b + 100) * U, tid=11)
        t.range("forward", (b + 100) * U, (b + 200) * U, tid=12)
        t.range("process", (b + 200) * U, (b + 400) * U, tid=11)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U, tid=11), (b + 10) * U, (b + 40) * U, stream=7)
        t.event_record(event=1, record=c + 1, start=(b + 50) * U, end=(b + 51) * U, stream=7, tid=11)
        t.stream_wait(event=1, record=c + 1, start=(b + 101) * U, end=(b + 102) * U, stream=50, tid=12)
        t.kernel(t.call("cudaLaunchKernel", (b + 105) * U, (b + 107) * U, tid=12), (b + 110) * U, (b + 610) * U, stream=50)
        t.event_record(event=2, record=c + 1, start=(b + 190) * U, end=(b + 191) * U, stream=50, tid=12)
        t.stream_wait(event=2, record=c + 1, start=(b + 210) * U, end=(b + 211) * U, stream=7, tid=11)
        t.kernel(t.call("cudaLaunchKernel", (b + 220) * U, (b + 222) * U, tid=11), (b + 610) * U, (b + 630) * U, stream=7)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks
    # THEN forward is read on 50, its own thread's stream (the join was made by another thread):
    # schedule b..b+100 = 100 us, forward b+100..done(50, b+200) = b+610: 510 us, process
    # b+610..b+630 = 20 us. Read on 7, forward would take 100 us and process 430 us
    assert per_cycle(rank) == [(c, n, v, s) for c in range(3) for n, v, s in (("schedule", 100, 7), ("forward", 510, 50), ("process", 20, 7))]


def test_a_wait_for_a_record_of_earlier_work_joins_nothing_back(tmp_path):
    # GIVEN SGLang's overlap loop with forward's range inside its stream context: forward forks
    # 50 off 7, runs 500 us on 50 (b+110..b+610) and records copy_done on 50 (b+190); process
    # makes 7 wait for the PREVIOUS batch's copy_done (a record made before this forward's work)
    # and runs 20 us on 7 (b+220..b+240)
    t = FakeTrace()
    for c in range(4):
        b = c * 2000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, (b + 400) * U, names=("schedule", "forward", "process"))
        launch(t, b + 5, (b + 10, b + 40))
        fork_join(t, 1, c + 1, b + 101, side=50)
        launch(t, b + 105, (b + 110, b + 610), stream=50)
        t.event_record(event=2, record=c + 1, start=(b + 190) * U, end=(b + 191) * U, stream=50)
        if c:
            t.stream_wait(event=2, record=c, start=(b + 210) * U, end=(b + 211) * U, stream=7)
        launch(t, b + 220, (b + 220, b + 240))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks
    # THEN forward stays on 50 in every cycle (its work was never joined back): schedule 100 us,
    # forward b+100..b+610 = 510 us, process b+610..b+610 = 0 us (7's work was done by b+240);
    # cycles 610 us. Taken for a join, forward would read 100 us on 7 and its 500 us fall in no cycle
    assert per_cycle(rank) == [(c, n, v, s) for c in range(4) for n, v, s in (("schedule", 100, 7), ("forward", 510, 50), ("process", 0, 7))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [610] * 4


def test_a_join_in_a_later_phase_counts_on_that_phases_stream_after_its_own_forks(tmp_path):
    # GIVEN one thread, current stream 7 throughout: prepare makes 7 wait for aux stream 50 (a
    # defensive wait before reusing buffers) and runs 30 us on 7; forward forks 50 off 7, runs
    # 150 us on 50 and 50 us on 7, joins 50 back and runs 20 us more on 7; sample runs 200 us on 7.
    # So 7 waits for 50 first in prepare, and 50 waits for 7 next in forward, whose busiest
    # stream (50) is a side stream of 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, (b + 300) * U, names=("prepare", "forward", "sample"))
        fork_join(t, 3, c + 1, b + 5, side=7, caller=50)
        launch(t, b + 10, (b + 12, b + 42))
        fork_join(t, 1, c + 1, b + 105, side=50)
        launch(t, b + 110, (b + 112, b + 262), stream=50)
        launch(t, b + 115, (b + 117, b + 167))
        fork_join(t, 2, c + 1, b + 120, side=7, caller=50)
        launch(t, b + 125, (b + 262, b + 282))
        launch(t, b + 205, (b + 282, b + 482))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample"))).ranks
    # THEN every phase is read on 7: forward joins 50 back within itself, so it is on 7, and the
    # phase that made 50 wait after prepare is on 7, not on 50. Events on 7: prepare b..b+100 =
    # 100 us, forward b+100..b+282 = 182 us, sample b+282..b+482 = 200 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("prepare", 100), ("forward", 182), ("sample", 200))]


def test_a_long_prefetch_on_a_copy_stream_does_not_move_the_phase_off_its_compute_stream(tmp_path):
    # GIVEN each cycle draft (a 70 us kernel on stream 7) and verify (a 70 us kernel on 7 and a
    # 650 us host-to-device copy on copy stream 12, never joined: a prefetch of the next step's
    # weights); the copy is most of verify's GPU time
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        launch(t, b + 10, (b + 20, b + 90))
        launch(t, b + 110, (b + 120, b + 190))
        t.copy(t.call("cudaMemcpyAsync", (b + 130) * U, (b + 132) * U), (b + 150) * U, (b + 800) * U, kind=1, stream=12)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on stream 7, where the engine records them: draft b..max(b+100, b+90) = 100 us,
    # verify b+100..max(b+300, b+190) = 200 us, not the 700 us stream 12 would read (b+800)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 200))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [300] * 3
    # and the copy still counts in verify's ops and GPU span
    assert [p["n_gpu_ops"] for p in rank.phases.to_pylist() if p["phase"] == "verify"] == [2] * 3


def verify_copying_on(stream: int, tmp_path):
    """Two cycles (b = 1000c us): draft's kernel on 7 (b+20..b+90), then verify, whose only work
    is a 300 us copy (b+120..b+420) on ``stream``; the one rank analysed."""
    t = FakeTrace()
    for c in range(2):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        launch(t, b + 10, (b + 20, b + 90))
        t.copy(t.call("cudaMemcpyAsync", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 420) * U, kind=1, stream=stream)
    return one_rank(t, tmp_path)


def test_a_phase_that_only_copies_on_a_copy_stream_is_read_on_the_stream_that_computes(tmp_path):
    # GIVEN draft's kernel on stream 7, then verify, whose only work is a 300 us copy on stream 12,
    # a stream that never runs a kernel (an input or offload stream), waited for by nothing
    # WHEN analysed
    rank = verify_copying_on(12, tmp_path)
    # THEN verify is read on 7, where the engine's events go (it was read on 12, to b+420): 7 is
    # done at b+90, so verify reads its CPU time b+100..b+200 = 100 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(2) for n, v in (("draft", 100), ("verify", 100))]


def test_a_phase_that_only_copies_on_the_stream_that_computes_is_read_there(tmp_path):
    # GIVEN as above, but verify's 300 us copy on stream 7 itself (a non_blocking input copy on
    # torch's current stream)
    # WHEN analysed
    rank = verify_copying_on(7, tmp_path)
    # THEN an event on 7 at verify's end waits for the copy: b+100..b+420 = 320 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(2) for n, v in (("draft", 100), ("verify", 320))]


def test_a_phase_whose_copies_the_next_phase_waits_for_reads_them_in_the_next(tmp_path):
    # GIVEN prepare (b..b+50), whose only work is an input copy on stream 11 (b+10..b+120) with an
    # event recorded after it; forward (b+50..b+150) makes 7 wait for that event first (b+52),
    # then runs its kernel b+120..b+300
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, names=("prepare", "forward"))
        t.copy(t.call("cudaMemcpyAsync", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 120) * U, kind=1, stream=11)
        t.event_record(event=1, record=c + 1, start=(b + 20) * U, end=(b + 21) * U, stream=11)
        t.stream_wait(event=1, record=c + 1, start=(b + 52) * U, end=(b + 53) * U, stream=7)
        launch(t, b + 60, (b + 120, b + 300))
    # WHEN analysed with prepare and forward
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward"))).ranks[0]
    # THEN events on 7 read prepare b..b+50 = 50 us (7 is idle and not yet waiting) and forward
    # b+50..b+300 = 250 us (the wait for the copy is forward's); read on 11, prepare took 120
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("prepare", 50), ("forward", 250))]


def test_a_stream_waiting_for_inputs_just_prepared_on_another_stays_the_phases_stream(tmp_path):
    # GIVEN the forward stream 7 current all along; draft prepares its inputs on input stream 9
    # (a 10 us kernel), then 7 waits for them (record on 9, wait on 7) and runs the 200 us draft
    # kernel; verify launches nothing. Stream 9 never waits for 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        launch(t, b + 5, (b + 10, b + 20), stream=9)
        fork_join(t, 1, c + 1, b + 30, side=7, caller=9)
        launch(t, b + 40, (b + 40, b + 240))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN 7 consumed 9's fresh work, it was not forked off 9: events on 7 read draft b..b+240
    # (its kernel's end) = 240 us and verify b+240..max(b+300, b+240) = 60 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 240), ("verify", 60))]


def test_a_stream_waiting_for_a_prefetch_stream_stays_the_phases_stream(tmp_path):
    # GIVEN the CUDA data prefetcher: compute stream 7 current all along; schedule (CPU b..b+50)
    # runs a 5 us kernel on 7; step (CPU b+50..b+150) makes 7 wait for prefetch stream 9 (record
    # on 9, wait on 7, within step), then queues the next batch's 18 us normalisation on 9 and
    # the 528 us forward on 7. Stream 9 never waits for 7, and got no op in step before the record
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, names=("schedule", "step"))
        launch(t, b + 10, (b + 12, b + 17))
        fork_join(t, 1, c + 1, b + 55, side=7, caller=9)
        launch(t, b + 60, (b + 62, b + 80), stream=9)
        launch(t, b + 70, (b + 72, b + 600))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "step"))).ranks
    # THEN events on 7 read schedule b..b+50 = 50 us and step b+50..done(7, b+150) = b+600:
    # 550 us (7 consumed 9's earlier work; it was not forked off 9), cycles 600 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("schedule", 50), ("step", 550))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [600] * 3


def test_a_wait_for_a_stream_that_never_runs_anything_keeps_the_phase_on_its_own_stream(tmp_path):
    # GIVEN an engine running everything on stream 9; forward (CPU b+100..b+200) begins with
    # current_stream().wait_stream(default_stream) (record on 7, wait on 9), and stream 7 never
    # gets an op; schedule (b..b+100) runs a 5 us kernel on 9, forward a 500 us one (b+112..b+612)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, names=("schedule", "forward"))
        launch(t, b + 10, (b + 12, b + 17), stream=9)
        fork_join(t, 1, c + 1, b + 105, side=9, caller=7)
        launch(t, b + 110, (b + 112, b + 612), stream=9)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward"))).ranks
    # THEN events on 9 read schedule b..b+100 = 100 us and forward b+100..done(9, b+200) = b+612:
    # 512 us
    assert per_cycle(rank) == [(c, n, v, 9) for c in range(3) for n, v in (("schedule", 100), ("forward", 512))]


def test_a_side_stream_joined_back_in_a_later_phase_that_launches_nothing_is_read_on_the_caller(tmp_path):
    # GIVEN cycles (b = 1000c us) whose draft (CPU b..b+100) runs a kernel on 7 (b+10..b+30),
    # forks side stream 9 off 7 at b+40 and runs 400 us there (b+45..b+445); verify (CPU
    # b+100..b+200) launches nothing: it only makes 7 wait for 9 (record on 9 at b+150)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        launch(t, b + 10, (b + 10, b + 30))
        fork_join(t, 1, c + 1, b + 40, side=9)
        launch(t, b + 45, (b + 45, b + 445), stream=9)
        fork_join(t, 2, c + 1, b + 150, side=7, caller=9)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN both are read on 7, where a phase that made 7 wait records its events: draft ends at
    # its CPU end (7 is done at b+30), verify when 7's wait for 9 is over (b+445): 100 and 345 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 345))]


@pytest.mark.parametrize("branch", [[(130, 260)], [(130, 175), (175, 220), (220, 260)]], ids=["one-branch-node", "more-nodes-on-the-branch"])
def test_a_graph_whose_capture_forked_ends_on_its_launch_stream_when_its_branch_does(tmp_path, branch):
    # GIVEN node-mode CUDA-graph replays (every node kernel shares the cudaGraphLaunch call's
    # correlation id) in verify (CPU b..b+50, b = 1000c us): its first nodes on the launch stream
    # 7 (b+20..b+130, b+130..b+170) and a branch the capture forked, on the graph's stream 142
    # (b+130..b+260, in one node or in three: more than the launch stream holds); sample
    # (b+50..b+300) synchronizes stream 7 (b+60..b+262)
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 300) * U, names=("verify", "sample"))
        g = t.call("cudaGraphLaunch_v10000", (b + 10) * U, (b + 20) * U)
        t.kernel(g, (b + 20) * U, (b + 130) * U, stream=7, node=1, name="attn")
        t.kernel(g, (b + 130) * U, (b + 170) * U, stream=7, node=2, name="mlp")
        for k, (s, e) in enumerate(branch):
            t.kernel(g, (b + s) * U, (b + e) * U, stream=142, node=3 + k, name="shared_expert")
        corr = t.call("cudaStreamSynchronize_v3020", (b + 60) * U, (b + 262) * U)
        t.sync_record(corr, (b + 60) * U, (b + 262) * U, stream=7)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify", "sample"))).ranks
    # THEN an event on 7 after the launch completes with the whole graph (b+260): verify 260 us,
    # sample 40; the synchronize waited for the graph's work from b+60 to b+260: 200 us, verify's
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("verify", 260), ("sample", 40))]
    assert [(s["waited_gpu_ns"] // U, s["waited_for_phase"]) for s in rank.syncs.to_pylist()] == [(200, "verify")] * 3


def test_an_offload_threads_copies_do_not_decide_where_a_scheduling_phase_is_read(tmp_path):
    # GIVEN schedule (b..b+50, thread 1, launches nothing) and forward (b+50..b+150, thread 1, a
    # kernel on 7 b+60..b+300), while a KV-cache offload thread (3) copies blocks to the host on
    # its own stream 40 (launched b+10, b+12..b+400): the copies fall in schedule by thread
    t = FakeTrace()
    for c in range(4):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, names=("schedule", "forward"), tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 12) * U, tid=3), (b + 12) * U, (b + 400) * U, kind=2, stream=40)
        t.kernel(t.call("cudaLaunchKernel", (b + 55) * U, (b + 57) * U, tid=1), (b + 60) * U, (b + 300) * U)
    # WHEN analysed
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward"))).ranks[0]
    # THEN both are read on 7, where the loop's events go: schedule its CPU time, 50 us, and
    # forward b+50..b+300 = 250 us (schedule read the offload copy on 40, forward 0)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(4) for n, v in (("schedule", 50), ("forward", 250))]


def test_a_loop_thread_that_only_copies_is_read_on_its_copy_stream(tmp_path):
    # GIVEN a loop thread (1) that launches no kernel: prepare (b..b+50) uploads inputs on 7
    # (b+10..b+120) and records E; a model thread (2) runs forward (b+60..b+150): 20 waits for E
    # (b+62) and runs a kernel b+120..b+300, then records F; sample (thread 1, b+160..b+320)
    # makes 7 wait for F (b+161) and copies the tokens back on 7 (b+300..b+302)
    t = FakeTrace()
    for c in range(4):
        b, r = 1000 * c, c + 1
        t.range(f"cycle {c}", b * U, (b + 330) * U, tid=1)
        t.range("prepare", b * U, (b + 50) * U, tid=1)
        t.range("forward", (b + 60) * U, (b + 150) * U, tid=2)
        t.range("sample", (b + 160) * U, (b + 320) * U, tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 5) * U, (b + 7) * U, tid=1), (b + 10) * U, (b + 120) * U, kind=1)
        t.event_record(event=1, record=r, start=(b + 20) * U, end=(b + 21) * U, tid=1, stream=7)
        t.stream_wait(event=1, record=r, start=(b + 62) * U, end=(b + 63) * U, tid=2, stream=20)
        t.kernel(t.call("cudaLaunchKernel", (b + 65) * U, (b + 67) * U, tid=2), (b + 120) * U, (b + 300) * U, stream=20)
        t.event_record(event=2, record=r, start=(b + 70) * U, end=(b + 71) * U, tid=2, stream=20)
        t.stream_wait(event=2, record=r, start=(b + 161) * U, end=(b + 162) * U, tid=1, stream=7)
        t.copy(t.call("cudaMemcpyAsync", (b + 162) * U, (b + 302) * U, tid=1), (b + 300) * U, (b + 302) * U, kind=2)
    # WHEN analysed
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample"))).ranks[0]
    # THEN the loop's events are on 7, the only stream it has: prepare b..b+120 (its upload's
    # end) = 120 us, forward b+120..b+300 = 180 us (handed over at prepare's end), sample
    # b+300..b+320 = 20 us (prepare read 50, on 20)
    assert [(p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()] == [("prepare", 120), ("forward", 180), ("sample", 20)] * 4


def test_a_cycles_end_is_read_on_the_next_cycles_stream_too(tmp_path):
    # GIVEN cycle 0: prepare (0..40, 10 us on 7), forward (40..80, nothing), sample (80..180:
    # 180 us on input stream 50, b+110..b+290, then 7 waits for it and runs 40 us, 290..330);
    # cycle 1 right after (180..280): prepare queues 6 us on 7 (330..336)
    t = FakeTrace()
    names = ("prepare", "forward", "sample")
    t.cycle(0, 0, 40 * U, 80 * U, 180 * U, names=names)
    t.cycle(1, 180 * U, 230 * U, 260 * U, 280 * U, names=names)
    launch(t, 5, (10, 20))
    launch(t, 100, (110, 290), stream=50)
    t.event_record(event=1, record=1, start=130 * U, end=131 * U, stream=50)
    t.stream_wait(event=1, record=1, start=131 * U, end=132 * U, stream=7)
    launch(t, 140, (290, 330))
    launch(t, 185, (330, 336))
    # WHEN analysed
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=names)).ranks[0]
    # THEN sample (read on 50, most of its kernel time) ends where both its stream and the next
    # phase's (7) are done with what was queued by its end: 80..330 = 250 us (it read 210, and
    # 290..330 was in no cycle); the cycles tile: 0..330 and 330..336
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()] == [
        (0, "prepare", 40), (0, "forward", 40), (0, "sample", 250), (1, "prepare", 6), (1, "forward", 0), (1, "sample", 0)]
    assert [(c["gpu_boundary_start_ns"] // U, c["gpu_boundary_end_ns"] // U) for c in rank.cycles.to_pylist()] == [(0, 330), (330, 336)]


def test_a_side_stream_joined_back_only_by_the_next_cycle_is_read_on_the_caller(tmp_path):
    # GIVEN the real probe side_join_next in miniature (b = 1000c): prepare (CPU b..b+20) runs a
    # 2 us kernel on 7, joins the previous cycle's side stream 9 back into 7 (c >= 1: record on 9
    # at b+6, 7 waits at b+7: 9's kernel runs to b+46) and runs another 2 us kernel on 7 (a phase
    # whose first GPU call is the join is the README's not-handled join-then-fork case);
    # forward (b+20..b+120) runs 20 us
    # on 7, forks 9 off 7 at b+70, runs ~970 us on 9 (to b+1046, into the next cycle) and 150 us
    # on 7 beside it (b+82..232); sample (b+120..b+300) 50 us on 7 (b+232..282). The last cycle's
    # side stream is never joined back
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 20) * U, (b + 120) * U, (b + 300) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 1, (b + 3, b + 5))
        if c:
            fork_join(t, 10 + c, c, b + 6, side=7, caller=9)
        launch(t, b + 10, (b + 12, b + 14) if c == 0 else (b + 46, b + 48))
        launch(t, b + 25, (b + 27, b + 47) if c == 0 else (b + 48, b + 68))
        fork_join(t, 1, c + 1, b + 70, side=9)
        launch(t, b + 75, (b + 77, b + 1046), stream=9)
        launch(t, b + 80, (b + 82, b + 232))
        launch(t, b + 125, (b + 232, b + 282))
    # WHEN analysed with the three phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample"))).ranks
    # THEN every phase is read on 7, where the engine's events go: prepare b..done(7, b+20) = b+20
    # (c = 0), b+48 (the join waits for 9 to b+46, then the 2 us kernel); forward to done(7, b+120)
    # = b+232: 212 and 184 us; sample b+232..max(b+300, b+282): 68 us. On 9, forward would read
    # to b+1046
    want = [(0, "prepare", 20, 7), (0, "forward", 212, 7), (0, "sample", 68, 7)]
    want += [(c, n, v, 7) for c in (1, 2) for n, v in (("prepare", 48), ("forward", 184), ("sample", 68))]
    assert per_cycle(rank) == want


def join_then_fork_engine(read_back_on: int) -> FakeTrace:
    """Four cycles of draft (a kernel on 7, a result read back on stream ``read_back_on``: 7, or
    a copy stream 50 forked off 7) and verify (from cycle 1 a join of 13's work of the cycle
    before, which ends at b+150; a kernel on 7; a fork of 13 off 7; 1 ms on 13 left running; a
    kernel on 7 beside it, to b+200)."""
    t = FakeTrace()
    for c in range(4):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 140) * U)
        launch(t, b + 5, (b + 10, b + 60))
        if read_back_on != 7:
            fork_join(t, 9, c + 1, b + 66, side=read_back_on)
        t.copy(t.call("cudaMemcpyAsync", (b + 70) * U, (b + 71) * U), (b + 72) * U, (b + 74) * U, stream=read_back_on)
        if c:
            fork_join(t, 3, c, b + 105, side=7, caller=13)  # the join: 13's work ends at b+150
        launch(t, b + 110, (b + 150, b + 170) if c else (b + 112, b + 132))
        fork_join(t, 1, c + 1, b + 120, side=13)
        launch(t, b + 125, (b + 170 if c else b + 132, b + 1150), stream=13)
        launch(t, b + 130, (b + 170 if c else b + 132, b + 200))
    return t


def test_a_phase_that_joins_the_side_streams_earlier_work_then_forks_it_again_is_read_on_the_caller(tmp_path):
    # GIVEN verify first joins side stream 13's work of the cycle before (7 waits for a record
    # on 13), runs a kernel on 7, forks 13 off 7 again, launches 1 ms of work on 13 that it
    # leaves running into the next cycle, and a kernel on 7 beside it; draft reads a result back
    # on 7 (a device-to-host copy: 7 is the thread's current stream) (a real H200 trace of the
    # shape: launch/stream_shapes_probe.py's join_then_fork)
    t = join_then_fork_engine(read_back_on=7)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. b+100; verify b+100 .. done(7, b+140) = b+200 (the kernel
    # beside the side's): 100 us every cycle. On 13 verify would read b+150 (c > 0) .. b+1150.
    assert per_cycle(rank) == [(c, n, 100, 7) for c in range(4) for n in ("draft", "verify")]


def test_a_side_stream_forked_in_the_phase_before_and_joined_in_the_phase_that_used_it(tmp_path):
    # GIVEN draft ends by forking side stream 13 off 7 and launches nothing there; verify runs
    # 290 us on 13, a kernel on 7 beside it, joins 13 back and runs 20 us more on 7
    # (launch/stream_shapes_probe.py's fork_early)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 140) * U)
        launch(t, b + 5, (b + 10, b + 60))
        fork_join(t, 1, c + 1, b + 90, side=13)
        launch(t, b + 105, (b + 110, b + 400), stream=13)
        launch(t, b + 110, (b + 112, b + 150))
        fork_join(t, 2, c + 1, b + 120, side=7, caller=13)
        launch(t, b + 125, (b + 400, b + 420))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. b+100, verify b+100 .. done(7, b+140) = b+420 (the kernel after
    # the join): 320 us. On 13 verify would read b+100 .. b+400: 300 us.
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 320))]


def test_a_plan_stream_that_plans_ahead_between_hand_offs_does_not_take_the_forward_streams_phase(tmp_path):
    # GIVEN SGLang's plan stream 40 beside forward stream 20 (a review's case): draft runs on 20;
    # verify makes 40 wait for 20, plans on 40, hands back (20 waits for 40), plans the next step
    # on 40 at once (no new wait), replays a graph on 20 (b+142..b+642), waits for 40 again, and a
    # second graph (b+642..b+842). 40 next waits for 20 in the next verify: in the waits alone,
    # verify looks like a phase that joins a side stream (20) and forks it anew
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 5, (b + 10, b + 60), stream=20)
        fork_join(t, 1, 2 * c + 1, b + 105, side=40, caller=20)
        launch(t, b + 108, (b + 110, b + 130), stream=40)
        fork_join(t, 2, 2 * c + 1, b + 130, side=20, caller=40)
        launch(t, b + 135, (b + 135, b + 160), stream=40)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 140) * U, (b + 142) * U), (b + 142) * U, (b + 642) * U, stream=20)
        fork_join(t, 2, 2 * c + 2, b + 200, side=20, caller=40)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 240) * U, (b + 242) * U), (b + 642) * U, (b + 842) * U, stream=20)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 20 (draft's stream, the thread's): draft b .. b+100, verify b+100 ..
    # done(20, b+400) = b+842: 742 us every cycle
    assert per_cycle(rank) == [(c, n, v, 20) for c in range(3) for n, v in (("draft", 100), ("verify", 742))]


def test_an_input_stream_that_computes_and_prefetches_the_next_batch_is_no_caller(tmp_path):
    # GIVEN prepare's kernel on input stream 9, which 7 waits for; forward runs 200 us on 7, then
    # 9 waits for 7 (to reuse its buffers) and the next batch's kernel goes on 9; sample 900 us on
    # 7 (a review's case: the waits look like 7 forked off 9 in the phase before and joined back)
    t = FakeTrace()
    gpu = {0: (10, 20, 60, 260, 260, 410, 260, 1160), 1: (1010, 1020, 1160, 1360, 1360, 1510, 1360, 2260),
           2: (2010, 2020, 2260, 2460, 2460, 2610, 2460, 3360)}
    for c in range(3):
        b, g = c * 1000, gpu[c]
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, (b + 300) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 5, (g[0], g[1]), stream=9)
        fork_join(t, 1, c + 1, b + 30, side=7, caller=9)
        launch(t, b + 60, (g[2], g[3]))
        fork_join(t, 2, c + 1, b + 140, side=9, caller=7)
        launch(t, b + 145, (g[4], g[5]), stream=9)
        launch(t, b + 160, (g[6], g[7]))
    # WHEN analysed with its three phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample"))).ranks
    # THEN forward and sample on 7: forward from done(7, b+50) (the sample before it: b+160 for
    # c > 0) to its kernel's end b+360: 210 us in cycle 0 (from its CPU start), 200 after; sample
    # to b+1160 + 1000 c: 900 us
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist() if p["phase"] != "prepare"]
    assert got == [(c, n, v, 7) for c in range(3) for n, v in (("forward", 210 if c == 0 else 200), ("sample", 900))]


def test_a_phase_never_moves_back_onto_any_stream_it_left(tmp_path):
    # GIVEN verify forks side stream 50 off 7 (200 us there), joins it, relaunches 200 us on 50
    # and joins again, then an all-reduce on NCCL's stream 30 forked off 7 (700 us) joined back,
    # and 20 us on 7 (a review's case: the phase went 50 -> 30 -> 7, then back to 50)
    t = FakeTrace()
    for c in range(3):
        b = c * 2000
        t.cycle(c, b * U, (b + 50) * U, (b + 400) * U)
        launch(t, b + 5, (b + 10, b + 30))
        fork_join(t, 1, c + 1, b + 60, side=50)
        launch(t, b + 63, (b + 100, b + 300), stream=50)
        fork_join(t, 2, c + 1, b + 66, side=7, caller=50)
        launch(t, b + 70, (b + 300, b + 320))
        launch(t, b + 74, (b + 300, b + 500), stream=50)
        fork_join(t, 3, c + 1, b + 78, side=7, caller=50)
        fork_join(t, 4, c + 1, b + 80, side=30)
        launch(t, b + 83, (b + 500, b + 1200), stream=30, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        fork_join(t, 5, c + 1, b + 86, side=7, caller=30)
        launch(t, b + 90, (b + 1200, b + 1220))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. b+50, verify b+50 .. done(7, b+400) = b+1220: 1170 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 50), ("verify", 1170))]


def test_a_side_stream_joined_by_the_next_cycles_first_phase_leaves_that_phase_on_the_caller(tmp_path):
    # GIVEN verify forks side stream 13 off 7 (1.9 ms there, into the next cycle) with a kernel on
    # 7 beside it, and the next cycle's draft first joins 13 (7 waits for 13's record), then runs
    # 50 us on 7 (a review's case: draft's join looks like 7 forked off 13, verify's fork like
    # the join back)
    t = FakeTrace()
    for c in range(4):
        b = c * 2000
        t.cycle(c, b * U, (b + 100) * U, (b + 140) * U)
        if c:
            fork_join(t, 3, c, b + 2, side=7, caller=13)  # 13's work ends at b+150
        launch(t, b + 5, (b + 150, b + 200) if c else (b + 10, b + 60))
        launch(t, b + 110, (b + 200, b + 220) if c else (b + 112, b + 132))
        fork_join(t, 1, c + 1, b + 120, side=13)
        launch(t, b + 125, (b + 220 if c else b + 132, b + 2150), stream=13)
        launch(t, b + 130, (b + 220, b + 300) if c else (b + 132, b + 200))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN events on 7: draft b .. done(7, b+100) = b+200 (after the join, its kernel; cycle 0:
    # b+100), verify .. done(7, b+140) = b+300 (the kernel beside the side's): 100 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(4) for n, v in (("draft", 200 if c else 100), ("verify", 100))]


def input_stream_engine(fork_in_forward: bool, read_back: bool) -> FakeTrace:
    """Three cycles of prepare (from cycle 1, input stream 9 waits for 7; a kernel on 9, b+6..b+16)
    and forward (9 waits for 7 at b+55 where ``fork_in_forward``; a kernel on 9, b+61..b+71; 7
    waits for 9; 500 us on 7, b+81..b+581; a prefetch on 9 beside it, b+91..b+101; with
    ``read_back``, the logits copied back on 7, b+581..b+583)."""
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 300) * U, names=("prepare", "forward"))
        if c:
            fork_join(t, 3, c, b + 2, side=9, caller=7)
        launch(t, b + 5, (b + 6, b + 16), stream=9)
        if fork_in_forward:
            fork_join(t, 1, c + 1, b + 55, side=9, caller=7)
        launch(t, b + 60, (b + 61, b + 71), stream=9)
        fork_join(t, 2, c + 1, b + 75, side=7, caller=9)
        launch(t, b + 80, (b + 81, b + 581))
        launch(t, b + 90, (b + 91, b + 101), stream=9)
        if read_back:
            t.copy(t.call("cudaMemcpyAsync", (b + 290) * U, (b + 292) * U), (b + 581) * U, (b + 583) * U)
    return t


def test_an_input_stream_fed_back_the_forward_streams_buffers_is_no_caller_of_it(tmp_path):
    # GIVEN prepare's kernel on input stream 9 (which first waits for 7, from cycle 1 on, to reuse
    # its buffers); forward makes 9 wait for 7, preps on 9 (10 us), makes 7 wait for 9, runs 500 us
    # on 7 and a prefetch kernel on 9 beside it (a review's case: join_then_fork's waits with the
    # roles swapped; nothing is read back on 9)
    t = input_stream_engine(fork_in_forward=True, read_back=False)
    # WHEN analysed with its two phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward"))).ranks
    # THEN forward on 7: b+50 .. done(7, b+300) = b+581: 531 us every cycle, the cycle 581 us
    assert [(p["cycle"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist() if p["phase"] == "forward"] == [(c, 531, 7) for c in range(3)]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [581] * 3


def test_results_read_back_on_a_copy_stream_forked_off_the_caller_count_for_the_caller(tmp_path):
    # GIVEN the join-then-fork engine above, but its draft reads results back on a copy stream 50
    # forked off 7 (vLLM's asynchronous output copy), none on 7 (a review's case)
    t = join_then_fork_engine(read_back_on=50)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN as with the copy on 7: draft and verify 100 us each on 7
    assert per_cycle(rank) == [(c, n, 100, 7) for c in range(4) for n in ("draft", "verify")]


def test_a_phase_is_not_moved_off_the_stream_its_thread_reads_results_back_on(tmp_path):
    # GIVEN forward preps on input stream 9, makes 7 wait for it (b+75), runs 500 us on 7, a
    # prefetch on 9 beside it, and reads the logits back on 7 (b+581..b+583); the next prepare
    # makes 9 wait for 7 and runs a kernel on 9 (a review's case: 7's wait for 9 inside forward
    # and 9's wait for 7 a phase later look like 7 forked off 9 and joined back)
    t = input_stream_engine(fork_in_forward=False, read_back=True)
    # WHEN analysed with its two phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward"))).ranks
    # THEN forward on 7: b+50 .. done(7, b+300) = b+583 (the read-back): 533 us every cycle
    assert [(p["cycle"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist() if p["phase"] == "forward"] == [(c, 533, 7) for c in range(3)]


def test_a_phase_that_joins_forks_and_joins_the_side_again_is_read_on_the_stream_results_are_read_back_on(tmp_path):
    # GIVEN prepare reads a result back on 7 (a device-to-host copy); forward forks 13 off 7 and
    # runs 200 us there, nothing on 7; sample joins 13 (7 waits until b+316), forks it again, runs
    # 20 us on 13, joins it and runs 8 us on 7 (a differential fuzzer's pattern: sample's first
    # wait is a join, so it looked like 7 forked off 13)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, (b + 300) * U, names=("prepare", "forward", "sample"))
        launch(t, b + 5, (b + 10, b + 20))
        t.copy(t.call("cudaMemcpyAsync", (b + 30) * U, (b + 34) * U), (b + 31) * U, (b + 33) * U)
        fork_join(t, 1, 2 * c + 1, b + 110, side=13)
        launch(t, b + 115, (b + 116, b + 316), stream=13)
        fork_join(t, 2, 2 * c + 1, b + 205, side=7, caller=13)
        fork_join(t, 1, 2 * c + 2, b + 210, side=13)
        launch(t, b + 215, (b + 316, b + 336), stream=13)
        fork_join(t, 2, 2 * c + 2, b + 230, side=7, caller=13)
        launch(t, b + 235, (b + 336, b + 344))
    # WHEN analysed with its three phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward", "sample"))).ranks
    # THEN events on 7: prepare b .. b+100, forward .. b+200 (nothing queued on 7 meanwhile), sample
    # .. done(7, b+300) = b+344 (after both joins): 100, 100 and 144 us
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("prepare", 100), ("forward", 100), ("sample", 144))]


def handed_to_a_worker(forward_copies, process_kernel_start: int) -> FakeTrace:
    """A loop thread (11) on stream 7 and a worker (12) that computes on stream 20 (a warm-up
    kernel). Per cycle (b = 1000, 2000, 3000): schedule on 11 (b..b+100): a kernel on 7
    b+10..b+110, an event after it; forward on 12 (b+100..b+200): 20 waits for that event, then
    ``forward_copies(t, b, c)``; process on 11 (b+200..b+300): 7 waits for 20, then a kernel
    ``process_kernel_start``..b+300."""
    t = FakeTrace()
    loop, worker = 11, 12
    t.kernel(t.call("cudaLaunchKernel", 50 * U, 52 * U, tid=worker), 100 * U, 150 * U, stream=20)
    for c in range(3):
        b = 1000 + c * 1000
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=loop)
        t.range("schedule", b * U, (b + 100) * U, tid=loop)
        t.range("forward", (b + 100) * U, (b + 200) * U, tid=worker)
        t.range("process", (b + 200) * U, (b + 300) * U, tid=loop)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U, tid=loop), (b + 10) * U, (b + 110) * U, stream=7)
        t.event_record(event=1, record=c + 1, start=(b + 20) * U, end=(b + 21) * U, tid=loop, stream=7)
        t.stream_wait(event=1, record=c + 1, start=(b + 102) * U, end=(b + 103) * U, tid=worker, stream=20)
        forward_copies(t, b, c)
        t.event_record(event=2, record=c + 1, start=(b + 202) * U, end=(b + 203) * U, tid=worker, stream=20)
        t.stream_wait(event=2, record=c + 1, start=(b + 204) * U, end=(b + 205) * U, tid=loop, stream=7)
        t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U, tid=loop), (b + process_kernel_start) * U, (b + 300) * U, stream=7)
    return t


def test_a_synchronous_copy_on_the_legacy_stream_does_not_decide_a_phase_of_copies(tmp_path):
    # GIVEN the hand-off above (``handed_to_a_worker``); forward's work: a synchronous cudaMemcpy
    # (b+110..b+190; its copy b+115..b+185 runs on the legacy stream 7, as synchronous copies do)
    # and a cudaMemsetAsync on 20 (b+195..b+260); process's kernel b+265..b+300
    def forward(t, b, c):
        t.copy(t.call("cudaMemcpy", (b + 110) * U, (b + 190) * U, tid=12), (b + 115) * U, (b + 185) * U, kind=1, stream=7)
        t.fill(t.call("cudaMemsetAsync", (b + 192) * U, (b + 194) * U, tid=12), (b + 195) * U, (b + 260) * U, stream=20)

    t = handed_to_a_worker(forward, 265)
    # WHEN analysed with the three phases
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks[0]
    # THEN forward is read on 20, where its thread's events go: from schedule's end (b+110) to the
    # memset's end (b+260) = 150 us, and process b+260..b+300 = 40 us. Read on 7 by the copy's
    # longer time, forward ended at its CPU end (b+200: 90 us) and process took 100 us
    assert per_cycle(rank) == [(c, n, v, s) for c in range(3) for n, v, s in (("schedule", 110, 7), ("forward", 150, 20), ("process", 40, 7))]


def test_a_synchronous_copy_beside_an_input_copy_the_threads_stream_waits_for_decides_nothing(tmp_path):
    # GIVEN the hand-off above; forward runs a synchronous cudaMemcpy (b+110..b+150: its copy
    # b+115..b+145 on the legacy stream 7) and then an input copy on stream 9, a stream that only
    # copies (b+160..b+230), which 20 waits for (record on 9 at b+170, wait on 20 at b+172);
    # process's kernel b+235..b+300
    def forward(t, b, c):
        t.copy(t.call("cudaMemcpy", (b + 110) * U, (b + 150) * U, tid=12), (b + 115) * U, (b + 145) * U, kind=1, stream=7)
        t.copy(t.call("cudaMemcpyAsync", (b + 155) * U, (b + 157) * U, tid=12), (b + 160) * U, (b + 230) * U, kind=1, stream=9)
        t.event_record(event=3, record=c + 1, start=(b + 170) * U, end=(b + 171) * U, tid=12, stream=9)
        t.stream_wait(event=3, record=c + 1, start=(b + 172) * U, end=(b + 173) * U, tid=12, stream=20)

    t = handed_to_a_worker(forward, 235)
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks[0]
    # THEN forward is read on 20, which waited for the input copy: from schedule's end (b+110) to
    # the copy's end (b+230) = 120 us, process b+230..b+300 = 70 us. The synchronous copy made it
    # read on 7: its CPU end (b+200: 90 us), and process 100 us
    assert per_cycle(rank) == [(c, n, v, s) for c in range(3) for n, v, s in (("schedule", 110, 7), ("forward", 120, 20), ("process", 70, 7))]


def test_a_worker_stream_handed_work_by_the_loop_threads_event_is_the_workers_own(tmp_path):
    # GIVEN program 800 of the extended differential fuzzer (tests/data/fuzz, made by its simulator
    # of CUDA stream semantics): a loop thread (11) on stream 7 records an event each cycle that a
    # worker (12) makes its stream 20 wait for before its forward work; the worker also copies
    # synchronously (cudaMemcpy: on the legacy stream 7); only cycle 1's process makes 7 wait for 20
    import lzma
    import shutil

    path = tmp_path / "t.sqlite"
    with lzma.open(Path(__file__).parent / "data" / "fuzz" / "worker_handoff_800.sqlite.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    rank = analyze([path], PhaseConfig(phases=("schedule", "forward", "process"))).ranks[0]
    # THEN forward reads what events on 20, the worker's own stream, read in the simulation (7 is
    # the loop's: the worker only waited for its event; forward was read on 7, 0 us, and the
    # loop's next schedule took its work: 490 us where the events read 231)
    got = {(c, n): v for c, n, v, _s in per_cycle(rank)}
    truth = {(0, "forward"): 0, (1, "forward"): 499, (2, "forward"): 259, (3, "forward"): 591, (4, "forward"): 0, (5, "forward"): 1318,
             (3, "schedule"): 231, (4, "schedule"): 0}
    assert {k: got[k] for k in truth} == truth


@pytest.mark.parametrize("device_copy", [True, False], ids=["device_and_host_copies", "read_back_only"])
def test_a_worker_that_only_communicates_and_copies_is_read_on_its_own_copy_stream(tmp_path, device_copy):
    # GIVEN a loop thread 11 (schedule, process on stream 7) and a worker thread 12 (forward)
    # whose current stream 20 never runs a kernel: its only kernels are all-reduces, on NCCL's
    # stream 30, which ProcessGroupNCCL forks off 20 and joins back. schedule runs 30 us on 7
    # and records E1; forward makes 20 wait for E1; in even cycles it all-reduces (b+110..b+400
    # on 30), then copies on 20 (device to device b+400..b+430, its result back b+430..b+432);
    # in odd cycles it only copies (b+120..b+260, b+260..b+262). It records E4 on 20; process
    # makes 7 wait for E4 and runs 20 us on 7, 20 us after the copies. In the second trace the
    # device-to-device copy is left out: 20 holds only the result's copy back (`.item()`)
    t = FakeTrace()
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    for c in range(6):
        b, r = 1000 * c, c + 1
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=11)
        t.range("schedule", b * U, (b + 100) * U, tid=11)
        t.range("forward", (b + 100) * U, (b + 200) * U, tid=12)
        t.range("process", (b + 200) * U, (b + 400) * U, tid=11)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U, tid=11), (b + 10) * U, (b + 40) * U, stream=7)
        t.event_record(event=1, record=r, start=(b + 50) * U, end=(b + 51) * U, stream=7, tid=11)
        t.stream_wait(event=1, record=r, start=(b + 101) * U, end=(b + 102) * U, stream=20, tid=12)
        if c % 2 == 0:
            t.event_record(event=2, record=r, start=(b + 103) * U, end=(b + 104) * U, stream=20, tid=12)
            t.stream_wait(event=2, record=r, start=(b + 104) * U, end=(b + 105) * U, stream=30, tid=12)
            t.kernel(t.call("cudaLaunchKernel", (b + 105) * U, (b + 107) * U, tid=12), (b + 110) * U, (b + 400) * U, stream=30, name=nccl)
            t.event_record(event=3, record=r, start=(b + 108) * U, end=(b + 109) * U, stream=30, tid=12)
            t.stream_wait(event=3, record=r, start=(b + 110) * U, end=(b + 111) * U, stream=20, tid=12)
            copies = ((b + 400, b + 430), (b + 430, b + 432))
        else:
            copies = ((b + 120, b + 260), (b + 260, b + 262))
        if device_copy:
            t.copy(t.call("cudaMemcpyAsync", (b + 115) * U, (b + 117) * U, tid=12), copies[0][0] * U, copies[0][1] * U, kind=8, stream=20)
        else:
            copies = ((copies[0][0], copies[0][0]), (copies[0][0], copies[0][0] + 2))  # the copy back right away
        t.copy(t.call("cudaMemcpyAsync", (b + 118) * U, (b + 120) * U, tid=12), copies[1][0] * U, copies[1][1] * U, kind=2, stream=20)
        t.event_record(event=4, record=r, start=(b + 190) * U, end=(b + 191) * U, stream=20, tid=12)
        t.stream_wait(event=4, record=r, start=(b + 201) * U, end=(b + 202) * U, stream=7, tid=11)
        k = max(copies[1][1] + 20, b + 210)  # (never before its launch at b+205)
        t.kernel(t.call("cudaLaunchKernel", (b + 205) * U, (b + 207) * U, tid=11), k * U, (k + 20) * U, stream=7)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks
    # THEN forward's events are on 20, the worker's own stream: schedule b..b+100 = 100 us;
    # forward b+100..done(20, b+200): b+432 in even cycles (332 us; 300 on NCCL's stream 30,
    # which would leave the copies to process), b+262 in odd ones (162 us; 100 read on 7, where
    # 20 was forked off, as a copy stream's phase); process from forward's end to the later of
    # its kernel's end (b+472, b+302) and its CPU end (b+400): 40 us, 138 us
    # (without the device-to-device copy the copy back ends 30 us earlier: b+402 and b+122;
    # forward reads 302 and 100, process 40 and 200: 300 on NCCL's stream would leave 72 to it)
    even = [("schedule", 100, 7), ("forward", 332 if device_copy else 302, 20), ("process", 40, 7)]
    odd = [("schedule", 100, 7), ("forward", 162 if device_copy else 100, 20), ("process", 138 if device_copy else 200, 7)]
    assert per_cycle(rank) == [(c, n, v, s) for c in range(6) for n, v, s in (even if c % 2 == 0 else odd)]


@pytest.mark.parametrize("relay", ["copy", "collective"])
def test_a_side_stream_joined_back_through_a_relay_stream_in_the_next_phase_is_read_on_the_caller(tmp_path, relay):
    # GIVEN draft (b..b+100) computing on 7 (b+10..b+50), forking side stream 9 off 7 and running
    # a long kernel there (b+50..b+400); a relay stream 13 waits for 9 and then copies 9's result
    # (b+400..b+410), or all-reduces it (NCCL's stream, a collective issued on the side stream);
    # verify (b+100..b+200) makes 7 wait for a record on 13, the only way 7 waits for 9, and
    # computes on 7 (b+410..b+450)
    t = FakeTrace()
    for c in range(3):
        b, r = 1000 * c, c + 1
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        launch(t, b + 5, (b + 10, b + 50))
        fork_join(t, 10, r, b + 6, side=9)
        launch(t, b + 10, (b + 50, b + 400), stream=9)
        fork_join(t, 1, r, b + 20, side=13, caller=9)
        if relay == "copy":
            t.copy(t.call("cudaMemcpyAsync", (b + 24) * U, (b + 26) * U), (b + 400) * U, (b + 410) * U, kind=8, stream=13)
        else:
            launch(t, b + 24, (b + 400, b + 410), stream=13, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        t.event_record(event=2, record=r, start=(b + 27) * U, end=(b + 28) * U, stream=13)
        t.stream_wait(event=2, record=r, start=(b + 105) * U, end=(b + 106) * U, stream=7)
        launch(t, b + 110, (b + 410, b + 450))
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN both phases are read on 7: draft b..b+100 (7 holds only its own kernel, done at b+50;
    # 350 us on 9), verify b+100..b+450 = 350 us (50 us on 7 behind a draft read on 9)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 350))]


@pytest.mark.parametrize("upload", [False, True], ids=["reads", "uploads_and_reads"])
def test_a_loop_threads_output_copy_stream_still_says_where_the_workers_results_are(tmp_path, upload):
    # GIVEN a loop thread 11 holding forward (b..b+300) and process (b+300..b+400) and launching
    # no kernel; its worker thread 12 joins side stream 9 (forked the cycle before) into 7,
    # runs a kernel on 7 (b+15..b+20), forks 9 off 7 again and runs 600 us on 9 (joined only
    # by the next cycle), and records Eout on 7; thread 11's copy stream 13 waits for Eout and
    # copies the result back (b+312..b+314); in the second trace thread 11 also uploads the
    # cycle's inputs on 13 (b+2..b+4), which 7 waits for: transfers to and from the host only
    t = FakeTrace()
    for c in range(5):
        b, r = 1000 * c, c + 1
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=11)
        t.range("forward", b * U, (b + 300) * U, tid=11)
        t.range("process", (b + 300) * U, (b + 400) * U, tid=11)
        if upload:
            t.copy(t.call("cudaMemcpyAsync", (b + 1) * U, (b + 2) * U, tid=11), (b + 2) * U, (b + 4) * U, kind=1, stream=13)
            t.event_record(event=13, record=r, start=(b + 5) * U, end=(b + 6) * U, stream=13, tid=11)
            t.stream_wait(event=13, record=r, start=(b + 8) * U, end=(b + 9) * U, stream=7, tid=12)
        if c > 0:
            t.stream_wait(event=9, record=c, start=(b + 10) * U, end=(b + 11) * U, stream=7, tid=12)
        t.kernel(t.call("cudaLaunchKernel", (b + 12) * U, (b + 14) * U, tid=12), (b + 15) * U, (b + 20) * U, stream=7)
        t.event_record(event=7, record=r, start=(b + 20) * U, end=(b + 21) * U, stream=7, tid=12)
        t.stream_wait(event=7, record=r, start=(b + 21) * U, end=(b + 22) * U, stream=9, tid=12)
        t.kernel(t.call("cudaLaunchKernel", (b + 25) * U, (b + 27) * U, tid=12), (b + 27) * U, (b + 627) * U, stream=9)
        t.event_record(event=9, record=r, start=(b + 40) * U, end=(b + 41) * U, stream=9, tid=12)
        t.event_record(event=5, record=r, start=(b + 50) * U, end=(b + 51) * U, stream=7, tid=12)
        t.stream_wait(event=5, record=r, start=(b + 305) * U, end=(b + 306) * U, stream=13, tid=11)
        t.copy(t.call("cudaMemcpyAsync", (b + 310) * U, (b + 312) * U, tid=11), (b + 312) * U, (b + 314) * U, kind=2, stream=13)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "process"))).ranks
    # THEN the copy off 7 says 7 is where the results are read: forward is read there, b..b+300
    # (7's work is done at b+20; 9's 600 us kernel is the next cycle's to join): 300 us; process
    # b+300..b+400 = 100 us (on 9, forward would read 627 and process 0)
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()] == [
        (c, n, v) for c in range(5) for n, v in (("forward", 300), ("process", 100))]
    assert [p["stream_id"] for p in rank.phases.to_pylist() if p["phase"] == "forward"] == [7] * 5


@pytest.mark.parametrize("copies", [1, 3])
@pytest.mark.parametrize("last", ["side", "caller"])
def test_a_copy_stream_that_waited_for_two_computing_streams_says_nothing_of_which_is_current(tmp_path, last, copies):
    # GIVEN one thread whose current stream is 7: its copy stream 13 uploads the inputs (7 waits
    # for them); draft and verify each compute on 7, fork side stream 9 off 7 for 200 us, join it
    # back within the phase and compute a 40 us tail on 7; at verify's end 13 waits for 7 and for
    # 9 (in either order) and copies the result back (b+530..b+532)
    def at(t, stream, when, event, r, wait_on):
        t.event_record(event=event, record=r, start=when * U, end=(when + 1) * U, stream=stream)
        t.stream_wait(event=event, record=r, start=(when + 2) * U, end=(when + 3) * U, stream=wait_on)

    t = FakeTrace()
    for c in range(6):
        b, r = 1000 * c, c + 1
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        t.copy(t.call("cudaMemcpyAsync", (b + 1) * U, (b + 2) * U), (b + 2) * U, (b + 4) * U, kind=1, stream=13)
        at(t, 13, b + 4, 1, r, wait_on=7)
        launch(t, b + 10, (b + 12, b + 30))
        at(t, 7, b + 14, 2, r, wait_on=9)
        launch(t, b + 18, (b + 30, b + 230), stream=9)
        at(t, 9, b + 22, 3, r, wait_on=7)
        launch(t, b + 26, (b + 230, b + 270))
        launch(t, b + 110, (b + 270, b + 290))
        at(t, 7, b + 114, 4, r, wait_on=9)
        launch(t, b + 118, (b + 290, b + 490), stream=9)
        at(t, 9, b + 122, 5, r, wait_on=7)
        launch(t, b + 126, (b + 490, b + 530))
        for k, (stream, event) in enumerate(((7, 6), (9, 7)) if last == "side" else ((9, 7), (7, 6))):
            at(t, stream, b + 130 + 3 * k, event, r, wait_on=13)
        for k in range(copies):  # (token ids, then logprobs...: copies in a row after the waits)
            t.copy(t.call("cudaMemcpyAsync", (b + 138 + 2 * k) * U, (b + 139 + 2 * k) * U), (b + 530 + k) * U, (b + 531 + k) * U, kind=2, stream=13)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN both phases are read on 7, where they fork and join: draft b..b+270 (its tail on 7
    # ends then) = 270 us, verify b+270..b+530 = 260 us, whichever stream 13 waited for last and
    # however many copies follow (read by the last one, 9, draft would lose its tail: 230 us)
    assert per_cycle(rank) == [(c, n, v, 7) for c in range(6) for n, v in (("draft", 270), ("verify", 260))]


@pytest.mark.parametrize("feeds", [True, False])
def test_a_phase_that_only_copies_on_its_threads_stream_read_where_that_stream_feeds_is_said(tmp_path, feeds):
    # GIVEN one thread, the CPU a cycle ahead (b = 1000n, 4 cycles): schedule [b, b+100] copies
    # inputs on stream 7 (b+12..b+20, launched b+10), records E on 7 (b+30) and makes stream 20
    # wait for it (b+31) (without ``feeds``, neither: 20 is still the thread's only computing
    # stream); run_batch [b+100, b+130] launches the forward on 20 (b+110), running
    # b+150..b+1150: the previous batch's forward holds 20 through the next schedule. Stream 7
    # only ever copies
    t = FakeTrace()
    for n in range(4):
        b = 1000 * n
        t.range("schedule", b * U, (b + 100) * U)
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 11) * U), (b + 12) * U, (b + 20) * U, kind=1, stream=7)
        if feeds:
            t.event_record(1, n + 1, (b + 30) * U, (b + 31) * U, stream=7)
            t.stream_wait(1, n + 1, (b + 31) * U, (b + 32) * U, stream=20)
        t.range("run_batch", (b + 100) * U, (b + 130) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 150) * U, (b + 1150) * U, stream=20)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "run_batch")))
    # THEN schedule is read on 20, the stream its copies feed (the README's rule): from cycle 1
    # on, 20 is busy past its end (b+150 > b+100), so it reads 0; events on 7, its thread's
    # current stream, idle but for its own copy, read b..b+100: 0.100 ms. One line says both
    sched = [(p["cycle"], p["stream_id"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist() if p["phase"] == "schedule"]
    assert sched == [(0, 20, 100), (1, 20, 0), (2, 20, 0), (3, 20, 0)]
    said = [w for w in run.warnings if "'schedule'" in w and "only copied" in w]
    where = "stream 20, which those copies feed or were forked off" if feeds else "its thread's stream 20"
    assert len(said) == 1 and f"in 3 of 4 instances it only copied, on stream 7, and is read on {where}: 0.000 ms (median)" in said[0]
    assert "events there read 0.100 ms" in said[0]
    # and cycle 0's, which only copied too, reads alike on both (0.100 ms: 20 is idle before the
    # first forward), said so (a count of 3 of 4 had read as if only 3 copied: a review of real
    # traces, 75 of 86 where all 86 did)
    assert said[0].endswith("; in its 1 other such instance the two readings are within 10 us or 10 %")


def test_a_phase_that_launched_nothing_read_on_its_threads_other_stream_is_said(tmp_path):
    # GIVEN one thread, the CPU a cycle ahead (b = 1000n, 4 cycles): schedule [b, b+100] runs a
    # kernel on stream 7 (b+10..b+20); run_batch [b+100, b+130] launches the forward on stream 20
    # (b+110), running b+150..b+1150; process [b+130, b+900] launches nothing (it waits on the
    # CPU for the previous batch's results)
    t = FakeTrace()
    for n in range(4):
        b = 1000 * n
        t.range("schedule", b * U, (b + 100) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 20) * U, stream=7)
        t.range("run_batch", (b + 100) * U, (b + 130) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 150) * U, (b + 1150) * U, stream=20)
        t.range("process", (b + 130) * U, (b + 900) * U)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "run_batch", "process")))
    # THEN process inherits stream 20 from run_batch, where its start event waits for this
    # batch's forward (b+1150), past its end: 0 in every cycle; on stream 7, where schedule is
    # read, events at its ends read its CPU span b+130..b+900: 0.770 ms. One line says both
    proc = [(p["stream_id"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist() if p["phase"] == "process"]
    assert proc == [(20, 0)] * 4
    said = [w for w in run.warnings if "'process'" in w]
    assert len(said) == 1 and "in 4 of 4 instances it launched nothing and is read on stream 20, inherited from its thread's phases: 0.000 ms" in said[0]
    assert "also read on stream 7: if its range's events go there, they read 0.770 ms" in said[0]


def test_a_phase_that_only_copies_is_never_read_on_nccls_own_stream(tmp_path):
    # GIVEN SGLang's pipeline loop in miniature, one thread whose current stream 7 launches no
    # kernel (b = 1000 + 1000c us, 3 cycles): fwd [b, b+40] forks forward stream 8 off 7 (b+2) and
    # runs a 200 us forward there (b+9..b+209); between the phases a receive on NCCL's stream 30,
    # forked off 7 (b+50) and joined back (30 records at b+60, 7 waits at b+61), runs
    # b+57..b+RECV, and a send queued behind it there (b+RECV..b+RECV+250, waited for only in the
    # next step); result [b+300, b+450] copies the outputs to the host on 7 (.tolist(): 2 us from
    # max(b+305, b+RECV)) and synchronizes; then the outputs are sent to the next stage on 30,
    # forked off 7 (b+470, a 10 us kernel)
    t = FakeTrace()
    recv = (100, 380, 420)
    for c, r in enumerate(recv):
        b = 1000 + 1000 * c
        t.range("fwd", b * U, (b + 40) * U)
        fork_join(t, 1, 3 * c + 1, b + 2, side=8)
        launch(t, b + 6, (b + 9, b + 209), stream=8, name="forward")
        fork_join(t, 1, 3 * c + 2, b + 50, side=30)
        launch(t, b + 54, (b + 57, b + r), stream=30, name="ncclDevKernel_SendRecv")
        fork_join(t, 1, 3 * c + 3, b + 60, side=7, caller=30)
        launch(t, b + 64, (b + r, b + r + 250), stream=30, name="ncclDevKernel_SendRecv")  # the carried outputs' send, joined next time
        t.range("result", (b + 300) * U, (b + 450) * U)
        at = max(b + 305, b + r)
        t.copy(t.call("cudaMemcpyAsync", (b + 302) * U, (b + 304) * U), at * U, (at + 2) * U, kind=2, stream=7)
        t.sync_record(t.call("cudaStreamSynchronize", (b + 304) * U, (at + 4) * U), (b + 304) * U, (at + 4) * U, stream=7)
        fork_join(t, 2, c + 1, b + 470, side=30)
        launch(t, b + 474, (b + 477, b + 487), stream=30, name="ncclDevKernel_SendRecv")
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("fwd", "result"), cycle_prefix=""))
    # THEN result is read on 7, where its thread took its outputs back (the copy, then the
    # synchronize of 7 inside the range: `.tolist()` on its current stream), not on NCCL's
    # stream 30, which its copies' stream feeds first (the sends) and no engine records events on
    # (there it read 100, 0, 0 us: the sends queued behind the late receives), nor on 8, the
    # stream 7 feeds next (the README's rule for a phase that only copied: 150 us each). Events on
    # 7 read b+450 - max(b+300, b+RECV) = 150, 70, 30 us
    got = [(p["cycle"], p["stream_id"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist() if p["phase"] == "result"]
    assert got == [(0, 7, 150), (1, 7, 70), (2, 7, 30)]
    assert not [w for w in run.warnings if "only copied" in w]


def dedicated_copy_stream_engine(block, output_end: int = 470, broadcast: bool = True) -> FakeTrace:
    """One thread, current stream 7 (computes); a dedicated D2H stream 20 that launches no kernel
    (b = 1000 + 1000c us, 3 cycles). prepare [b, b+50]: 7 waits for 20 (b+2: output buffers reused
    once the last copy is done), kernel on 7 b+10..b+40. forward [b+50, b+300]: kernel on 7
    b+60..b+250, 20 waits for 7 (b+260), another kernel on 7 b+270..b+450. output [b+300,
    b+``output_end``]: inside `with torch.cuda.stream(20)` copies the tokens to the host
    (launched b+310, runs b+310..b+315), then ``block(t, c, b)`` blocks. With ``broadcast``,
    between cycles (b+600) the thread, once more inside `with torch.cuda.stream(20)`, broadcasts
    a small tensor: ProcessGroupNCCL makes NCCL's stream 30 wait for 20 (b+600) and broadcasts
    there (b+610..b+620)."""
    t = FakeTrace()
    for c in range(3):
        b = 1000 + 1000 * c
        t.range("prepare", b * U, (b + 50) * U)
        fork_join(t, 1, c + 1, b + 2, side=7, caller=20)
        launch(t, b + 5, (b + 10, b + 40))
        t.range("forward", (b + 50) * U, (b + 300) * U)
        launch(t, b + 55, (b + 60, b + 250))
        fork_join(t, 2, c + 1, b + 260, side=20)
        launch(t, b + 265, (b + 270, b + 450))
        t.range("output", (b + 300) * U, (b + output_end) * U)
        t.copy(t.call("cudaMemcpyAsync", (b + 310) * U, (b + 312) * U), (b + 310) * U, (b + 315) * U, kind=2, stream=20)
        block(t, c, b)
        if broadcast:
            fork_join(t, 3, c + 1, b + 600, side=30, caller=20)
            launch(t, b + 605, (b + 610, b + 620), stream=30, name="ncclDevKernel_Broadcast_RING_LL")
    return t


def test_a_copy_back_on_a_dedicated_copy_stream_the_compute_stream_waits_for_stays_on_the_compute_stream(tmp_path):
    # GIVEN one thread computing on its current stream 7 with a copy stream 20 that launches no
    # kernel (b = 1000 + 1000c us, 3 cycles): prepare [b, b+50] makes 7 wait for 20 (b+2: the
    # output buffers reused once the last copy is done) and runs a kernel on 7 (b+10..b+40);
    # forward [b+50, b+300] a kernel on 7 (b+60..b+250), 20 waits for 7 (b+260), another kernel
    # on 7 (b+270..b+450); output [b+300, b+420] copies the tokens to the host on 20 (launched
    # b+310, b+310..b+315) and synchronizes 20 (b+313..b+316), inside `with stream(20)`
    def sync_20(t, c, b):
        t.sync_record(t.call("cudaStreamSynchronize", (b + 313) * U, (b + 316) * U), (b + 313) * U, (b + 316) * U, stream=20)

    t = dedicated_copy_stream_engine(sync_20, output_end=420, broadcast=False)
    for phases in (("prepare", "forward", "output"), ("output",)):
        # WHEN analysed with all three phases, and with output alone (the rest between phases)
        run = analyze([t.write(tmp_path / f"t{len(phases)}.sqlite")], PhaseConfig(phases=phases, cycle_prefix=""))
        # THEN output is read on 7, the stream its copy stream was forked off (nothing ties 20
        # to the thread's current stream: no collective was issued with it current): events on 7
        # at b+300 and b+420 both read b+450 (the second kernel), 0 us (once 120 on 20)
        assert [r for r in per_cycle(run.ranks[0]) if r[1] == "output"] == [(c, "output", 0, 7) for c in range(3)]


def test_a_copy_stream_the_host_synchronizes_on_is_not_the_phases_stream_without_nccls_word(tmp_path):
    # GIVEN one thread, current stream 7 (which launches no kernel), forward stream 8, 3 cycles
    # (b = 1000 + 1000c us): fwd [b, b+40] forks 8 off 7 (b+2) and runs a 300 us forward on 8
    # (b+9..b+309); between the phases 7 waits for 8 (b+60: the forward's launch event); result
    # [b+100, b+320] forks a copy stream 20 off 7 (b+110), copies the tokens to the host there
    # (launched b+120, b+309..b+311) and synchronizes an event recorded on 20 (b+125..b+312):
    # vLLM's output copy. No collective is issued from any stream
    t = FakeTrace()
    for c in range(3):
        b = 1000 + 1000 * c
        t.range("fwd", b * U, (b + 40) * U)
        fork_join(t, 1, 2 * c + 1, b + 2, side=8)
        launch(t, b + 6, (b + 9, b + 309), stream=8, name="forward")
        fork_join(t, 2, 2 * c + 1, b + 60, side=7, caller=8)
        t.range("result", (b + 100) * U, (b + 320) * U)
        fork_join(t, 2, 2 * c + 2, b + 110, side=20)
        t.copy(t.call("cudaMemcpyAsync", (b + 120) * U, (b + 122) * U), (b + 309) * U, (b + 311) * U, kind=2, stream=20)
        t.event_record(event=3, record=c + 1, start=(b + 123) * U, end=(b + 124) * U, stream=20)
        t.sync_record(t.call("cudaEventSynchronize", (b + 125) * U, (b + 312) * U), (b + 125) * U, (b + 312) * U, sync_type=1, stream=20)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("fwd", "result"), cycle_prefix=""))
    # THEN result is not read on 20, where its thread blocked on its copy (no collective tells
    # that 20 is ever its current stream): on 7, the stream 20 was forked off in the range,
    # events read b+309 (7 waits for the forward) to b+320: 11 us
    assert [r for r in per_cycle(run.ranks[0]) if r[1] == "result"] == [(c, "result", 11, 7) for c in range(3)]


def test_an_input_stream_whose_copies_nccl_waits_for_first_is_read_where_they_feed_the_forward(tmp_path):
    # GIVEN per cycle (b = 1000 + 1000c us, 4 cycles) an input stream 20 forked off compute stream
    # 7 before prep (b-120); prep [b, b+100] copies the inputs on 20 (b+50..b+300); between the
    # phases NCCL's stream 30 waits for 20 (b+150) and broadcasts (b+300..b+320); fwd [b+200,
    # b+300] makes 7 wait for 20 (b+205) and runs its GEMM on 7 (b+300..b+500)
    t = FakeTrace()
    for c in range(4):
        b = 1000 + 1000 * c
        fork_join(t, 1, 3 * c + 1, b - 120, side=20)
        t.range("prep", b * U, (b + 100) * U)
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 12) * U), (b + 50) * U, (b + 300) * U, kind=1, stream=20)
        fork_join(t, 2, 3 * c + 2, b + 150, side=30, caller=20)
        launch(t, b + 154, (b + 300, b + 320), stream=30, name="ncclDevKernel_Broadcast_RING_LL")
        t.range("fwd", (b + 200) * U, (b + 300) * U)
        fork_join(t, 3, 3 * c + 3, b + 205, side=7, caller=20)
        launch(t, b + 210, (b + 300, b + 500), stream=7, name="gemm")
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prep", "fwd"), cycle_prefix=""))
    # THEN prep is read on 7, the computing stream its copies feed (NCCL's 30, which waits for
    # them first, is no stream an engine records events on): events on 7 read b..b+200 for prep
    # and b+200..b+500 for fwd; one line says its events may go on 20 instead
    assert per_cycle(run.ranks[0]) == [(c, ph, us, 7) for c in range(4) for ph, us in (("prep", 200), ("fwd", 300))]
    assert any("'prep': in 4 of 4 instances it only copied, on stream 20, and is read on stream 7" in w for w in run.warnings)


def test_a_write_back_forked_off_and_never_joined_leaves_the_phase_on_the_stream_it_read_back_on(tmp_path):
    # GIVEN SGLang HiCache's write-through in miniature (cache_controller.py start_writing, the
    # L2 transfer's submission): one thread, current stream 7; per cycle (b = 1000 + 5000c us)
    # fwd [b, b+50] runs a 300 us forward on 7 (b+13..b+313); proc [b+60, b+400] reads the
    # tokens back (a device-to-host copy on 7 behind the forward, b+313..b+315, and a stream
    # synchronize), then forks write-back stream 22 off 7 (b+360) and runs a transfer kernel
    # there (b+367, WB us) that nothing ever waits for (polled with query())
    t = FakeTrace()
    for c, wb in enumerate((100, 500, 3000)):
        b = 1000 + 5000 * c
        t.range("fwd", b * U, (b + 50) * U)
        launch(t, b + 10, (b + 13, b + 313), name="forward")
        t.range("proc", (b + 60) * U, (b + 400) * U)
        t.copy(t.call("cudaMemcpyAsync", (b + 62) * U, (b + 64) * U), (b + 313) * U, (b + 315) * U, kind=2, stream=7)
        t.sync_record(t.call("cudaStreamSynchronize", (b + 64) * U, (b + 320) * U), (b + 64) * U, (b + 320) * U, stream=7)
        fork_join(t, 1, c + 1, b + 360, side=22)
        launch(t, b + 364, (b + 367, b + 367 + wb), stream=22, name="transfer_kv_all_layer")
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("fwd", "proc"), cycle_prefix=""))
    # THEN proc is read on 7, where its thread read back (the range holds code run with 7
    # current; the write-back ran in a block nested in it): events on 7 read b+313..b+400 = 87
    # us every cycle (once read on 22: 154, 554, 3054 us, the write-back's), fwd b..b+313; and
    # one line gives what events on 22 would read
    assert per_cycle(run.ranks[0]) == [(c, ph, us, 7) for c in range(3) for ph, us in (("fwd", 313), ("proc", 87))]
    assert any("'proc': in 3 of 3 instances it ran all its kernels on stream 22, a side stream of stream 7" in w for w in run.warnings)


def _prep_then_fwd(t: FakeTrace, b: int) -> None:
    """prep [b, b+10] running a kernel on 7 (b+4..b+24), then fwd's range [b+10, b+60] (us)."""
    t.range("prep", b * U, (b + 10) * U)
    launch(t, b + 2, (b + 4, b + 24), name="prep")
    t.range("fwd", (b + 10) * U, (b + 60) * U)


def test_a_layer_wise_write_through_busier_than_the_forward_leaves_it_on_the_stream_its_thread_reads_back_on(tmp_path):
    # GIVEN SGLang HiCache's layer-wise write-through beside the forward (a reviewer's shape): one
    # thread, current stream 7; per cycle (b = 1000 + 2000c us) prep [b, b+10] runs a kernel on 7
    # (b+4..b+24); fwd [b+10, b+60] runs 4 layers, each a 60 us GEMM on 7 then a fork of 13 off
    # 7 and a 150 us transfer on 13 that nothing ever waits for: GEMMs b+24..b+264, transfers
    # b+84..b+684 (more of the phase's kernel time on 13 than on 7); samp [b+60, b+280] reads
    # back on 7 (a kernel b+264..b+274, a device-to-host copy b+274..b+276, a synchronize)
    t = FakeTrace()
    for c in range(3):
        b = 1000 + 2000 * c
        _prep_then_fwd(t, b)
        for k in range(4):
            launch(t, b + 12 + 11 * k, (b + 24 + 60 * k, b + 84 + 60 * k), name="gemm")
            fork_join(t, 1, 4 * c + k + 1, b + 17 + 11 * k, side=13)
            launch(t, b + 20 + 11 * k, (b + 84 + 150 * k, b + 234 + 150 * k), stream=13, name="transfer_kv_per_layer")
        t.range("samp", (b + 60) * U, (b + 280) * U)
        launch(t, b + 62, (b + 264, b + 274), name="sample")
        t.copy(t.call("cudaMemcpyAsync", (b + 65) * U, (b + 67) * U), (b + 274) * U, (b + 276) * U, kind=2, stream=7)
        t.sync_record(t.call("cudaStreamSynchronize", (b + 67) * U, (b + 277) * U), (b + 67) * U, (b + 277) * U, stream=7)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prep", "fwd", "samp"), cycle_prefix=""))
    # THEN fwd is read on 7, where its thread reads back (in samp) and never on 13: events on 7
    # read prep b..b+24, fwd b+24..b+264, samp b+264..b+280 every cycle (once fwd read on 13,
    # 660 and 600 us, and samp and the next prep 0)
    assert per_cycle(run.ranks[0]) == [(c, ph, us, 7) for c in range(3) for ph, us in (("prep", 24), ("fwd", 240), ("samp", 16))]


def test_a_phase_run_whole_under_a_side_stream_stays_there_though_its_thread_reads_back_on_the_caller(tmp_path):
    # GIVEN (a reviewer's shape) per cycle (b = 1000 + 2000c us) prep [b, b+10] runs a kernel on
    # 7 (b+4..b+24); fwd [b+10, b+60] runs under `with torch.cuda.stream(13)`: 13 waits for 7,
    # four 60 us layers on 13 (b+24..b+264), nothing on 7, never joined, a done event recorded
    # on 13; samp [b+60, b+290] synchronizes that event, samples on 7 and reads back on 7
    t = FakeTrace()
    for c in range(3):
        b = 1000 + 2000 * c
        _prep_then_fwd(t, b)
        fork_join(t, 1, c + 1, b + 12, side=13)
        for k in range(4):
            launch(t, b + 15 + 10 * k, (b + 24 + 60 * k, b + 84 + 60 * k), stream=13, name="layer")
        t.event_record(event=2, record=c + 1, start=(b + 57) * U, end=(b + 58) * U, stream=13)
        t.range("samp", (b + 60) * U, (b + 290) * U)
        t.sync_record(t.call("cudaEventSynchronize", (b + 61) * U, (b + 265) * U), (b + 61) * U, (b + 265) * U, sync_type=1, stream=13)
        launch(t, b + 266, (b + 268, b + 278), name="sample")
        t.copy(t.call("cudaMemcpyAsync", (b + 270) * U, (b + 272) * U), (b + 278) * U, (b + 280) * U, kind=2, stream=7)
        t.sync_record(t.call("cudaStreamSynchronize", (b + 272) * U, (b + 281) * U), (b + 272) * U, (b + 281) * U, stream=7)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prep", "fwd", "samp"), cycle_prefix=""))
    # THEN fwd, which computed nothing on 7, stays on 13, its current stream: events read prep
    # b..b+24, fwd b+24..b+264, samp b+264..b+290 (a version that went by the thread's
    # read-backs alone read fwd 36 us on 7 and samp 230)
    assert per_cycle(run.ranks[0]) == [(c, ph, us, s) for c in range(3) for ph, us, s in (("prep", 24, 7), ("fwd", 240, 13), ("samp", 26, 7))]


def test_a_synchronous_copy_on_the_legacy_stream_says_nothing_of_the_current_stream(tmp_path):
    # GIVEN per cycle (b = 1000 + 2000c us) sched [b, b+100] on stream 7 (a kernel b+20..b+80),
    # and fwd [b+100, b+300] run with forward stream 13 current: 13 waits for 7 (b+102), its
    # forward runs b+110..b+900 on 13, and a library reads a small result back with a
    # synchronous cudaMemcpy (b+200), which CUDA puts on the legacy stream 7 whatever is current
    t = FakeTrace()
    for c in range(3):
        b = 1000 + 2000 * c
        t.range("sched", b * U, (b + 100) * U)
        launch(t, b + 10, (b + 20, b + 80), name="prep")
        t.range("fwd", (b + 100) * U, (b + 300) * U)
        fork_join(t, 1, c + 1, b + 102, side=13)
        launch(t, b + 108, (b + 110, b + 900), stream=13, name="forward")
        t.copy(t.call("cudaMemcpy", (b + 200) * U, (b + 203) * U), (b + 200) * U, (b + 202) * U, kind=2, stream=7)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("sched", "fwd"), cycle_prefix=""))
    # THEN fwd stays on 13, where its forward ran: events there read b+100..b+900 = 800 us (the
    # copy is no read-back on its current stream: a review's case, once read on 7, 200 us)
    assert per_cycle(run.ranks[0]) == [(c, ph, us, s) for c in range(3) for ph, s, us in (("sched", 7, 100), ("fwd", 13, 800))]


def output_readings(t, tmp_path, phases=("prepare", "forward", "output")):
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases, cycle_prefix=""))
    return [(p["cycle"], p["stream_id"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist() if p["phase"] == "output"]


def device_sync(t, c, b):
    # torch.cuda.synchronize() at the step's end (timing): b+400, returns when 7's kernel is done (b+450)
    corr = t.call("cudaDeviceSynchronize", (b + 400) * U, (b + 451) * U)
    t.sync_record(corr, (b + 400) * U, (b + 451) * U, sync_type=4, stream=0xFFFFFFFF)


def current_stream_sync(t, c, b):
    # 7 waits for 20 after the copy (b+320: the buffer guard, record on 20 at b+320), then
    # torch.cuda.current_stream().synchronize(), a synchronize of 7 (b+400..b+451)
    fork_join(t, 4, c + 1, b + 320, side=7, caller=20)
    t.sync_record(t.call("cudaStreamSynchronize", (b + 400) * U, (b + 451) * U), (b + 400) * U, (b + 451) * U, stream=7)


# What events read for output, on 7 (the thread's current stream, where the engine records):
# at b+300, 7's work launched before is done at b+450; at b+470, b+470 (nothing after b+450):
# 20 us every cycle. On 20 (where the copy ran): b+300 (20 waits only for 7's work up to b+260,
# done b+250) to b+470: 170 us.
ON_7 = [(c, 7, 20) for c in range(3)]


@pytest.mark.parametrize("phases", [("prepare", "forward", "output"), ("output",)], ids=["three", "alone"])
@pytest.mark.parametrize("block", [device_sync, current_stream_sync], ids=["device_sync", "sync_of_7"])
def test_an_unrelated_wait_after_a_copy_on_a_dedicated_copy_stream_keeps_the_phase_off_that_stream(tmp_path, block, phases):
    # GIVEN output's copy on the dedicated stream 20 (entered for the copy; its thread issues a
    # broadcast from 20 between cycles) and, back on 7, a device synchronize or a synchronize of
    # 7 made to wait for 20 after the copy: waits that cover the copy, but name no stream or
    # another one. THEN output is read on 7, where the engine records (20 us), not on 20: such
    # a wait is what SGLang's `.tolist()` on its current stream and this engine's end-of-step
    # synchronize alike make; only a wait naming the copy's own stream says the thread took its
    # results back there (``rank._took_back_where_copied``)
    assert output_readings(dedicated_copy_stream_engine(block), tmp_path, phases) == ON_7
