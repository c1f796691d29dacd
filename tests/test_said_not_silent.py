"""Shapes where a number used to change or vanish without a word: a process with no NCCL
kernels among tensor-parallel ranks, collectives hidden inside whole-graph traces, phases that
run past their cycle range, a capture that ends before the last launches ran, and a phase that
launched nothing named as queued behind. Each expected value is worked out by hand from the
ops' times."""

from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, run_cli
from nsys_factory import FakeTrace, gpid
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000  # 1 us
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], pid: int = 10, tid: int | None = None, name: str = "k", stream: int = 7) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid, tid=tid), gpu_us[0] * U, gpu_us[1] * U, pid=pid, name=name, stream=stream)


def tensor_parallel_pair_and_a_third_process() -> FakeTrace:
    """Processes 10 and 11 (ranks 0 and 1) run an all-reduce in verify each cycle; rank 1
    arrives 100 us late (it starts at b+420, rank 0 at b+320; both end at b+500). Process 12
    (rank 2) runs a kernel in each phase and no communication at all."""
    t = FakeTrace()
    for pid in (10, 11, 12):
        for c in range(4):
            b = c * 1000
            t.cycle(c, b * U, (b + 300) * U, (b + 600) * U, pid=pid)
            launch(t, b + 10, (b + 20, b + 200), pid=pid)
            if pid == 12:
                launch(t, b + 310, (b + 320, b + 400), pid=pid)
            else:
                start = b + (420 if pid == 11 else 320)
                launch(t, b + 310, (start, b + 500), pid=pid, name=ALL_REDUCE)
    return t


def test_a_rank_without_communication_leaves_the_others_collectives_matched(tmp_path):
    # GIVEN two tensor-parallel ranks and a third process that communicates with nobody
    trace = tensor_parallel_pair_and_a_third_process().write(tmp_path / "t.sqlite")
    # WHEN analysed
    run = analyze([trace])
    # THEN each cycle's all-reduce is matched between ranks 0 and 1: rank 0 waited from its start
    # b+320 to rank 1's arrival b+420 (100 us), rank 1 not at all
    rows = run.cross.collectives.to_pylist()
    assert [(r["collective"], r["rank"], r["wait_ns"] // U) for r in rows] == [(k, r, 100 if r == 0 else 0) for k in range(4) for r in (0, 1)]
    # and rank 1, the late one, gated every cycle, in verify
    assert [(c["cycle"], c["gating_rank"], c["gating_phase"]) for c in run.cross.critical_path.to_pylist()] == [(c, 1, "verify") for c in range(4)]
    # and rank 2 is still on the common timeline, with no collective, and said to be left out
    assert (run.cross.alignment_of(2).offset_ns, run.cross.comm_of(2).n_collectives) == (0, 0)
    assert any(w.startswith("rank 2 ran no communication kernels") for w in run.warnings)
    # and rank 0's verify counts its 100 us of waiting in every cycle
    assert [p["wait_ns"] // U for p in run.ranks[0].phases.to_pylist() if p["phase"] == "verify"] == [100] * 4


def test_the_report_prints_the_left_out_rank_and_the_matched_waits(tmp_path):
    # GIVEN the same three processes in one report
    trace = tensor_parallel_pair_and_a_third_process().write(tmp_path / "t.sqlite")
    # WHEN reported as JSON
    proc = run_cli("report", str(trace), "--json", "--no-cache")
    # THEN it succeeds, says which rank was left out, and rank 0 waited 4 x 100 us in all
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert any(w.startswith("rank 2 ran no communication kernels") for w in out["warnings"])
    nccl = {r["rank"]: r["nccl"] for r in out["ranks"]}
    assert (nccl[0]["wait_ms"], nccl[1]["wait_ms"], nccl[2]["n_collectives"]) == (0.4, 0.0, 0)


def test_whole_graph_traces_of_several_ranks_say_their_collectives_are_unseen(tmp_path):
    # GIVEN two ranks (two processes) whose verify replays a CUDA graph traced whole
    t = FakeTrace()
    for pid in (10, 11):
        for c in range(3):
            b = c * 1000
            t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, pid=pid)
            launch(t, b + 10, (b + 20, b + 80), pid=pid)
            t.graph(t.call("cudaGraphLaunch_v10000", (b + 110) * U, (b + 115) * U, pid=pid), (b + 120) * U, (b + 280) * U, pid=pid)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN no collective is matched, and the warning says why and what to do
    assert run.cross.collectives.num_rows == 0
    assert any("traced CUDA graphs whole" in w and "--cuda-graph-trace=node" in w for w in run.warnings)


def _cycles_on_thread_1(verify_end_us: int) -> FakeTrace:
    """Three cycles of b..b+600 us marked on thread 1; draft (b..b+300) and verify (b+300..b+
    ``verify_end_us``) on thread 2, each launching one kernel there."""
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("draft", b * U, (b + 300) * U, tid=2)
        t.range("verify", (b + 300) * U, (b + verify_end_us) * U, tid=2)
        launch(t, b + 10, (b + 20, b + 200), tid=2)
        launch(t, b + 310, (b + 320, b + 500), tid=2)
    return t


def test_a_phase_running_past_its_cycle_range_is_said_to_be_in_no_cycle(tmp_path):
    # GIVEN cycles marked on thread 1 and phases on thread 2; verify's range ends 100 us after
    # its cycle range (b+700 against b+600)
    t = _cycles_on_thread_1(verify_end_us=700)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN verify belongs to no cycle (as before), and now a warning counts its 3 ranges
    assert [(p["phase"], p["cycle"]) for p in run.ranks[0].phases.to_pylist()] == [("draft", c) if k == 0 else ("verify", None) for c in range(3) for k in (0, 1)]
    assert any("3 phase range(s) start inside a cycle range and end after it (first: 'verify')" in w for w in run.warnings)


def test_phases_inside_their_cycles_raise_no_such_warning(tmp_path):
    # GIVEN the same engine with verify ending with its cycle (b+600)
    t = _cycles_on_thread_1(verify_end_us=600)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN every phase is in its cycle and nothing is said about it
    assert [p["cycle"] for p in run.ranks[0].phases.to_pylist()] == [0, 0, 1, 1, 2, 2]
    assert not any("end after it" in w for w in run.warnings)


def test_launches_the_capture_ended_before_are_counted(tmp_path):
    # GIVEN three cycles whose kernels are all in the trace, then in the last cycle's verify two
    # more launch calls (at 2350 and 2360 us) whose kernels the capture never recorded; a launch
    # during a stream capture at 5 us (no kernel either) comes before any kernel ran
    t = FakeTrace()
    t.call("cudaLaunchKernel", 5 * U, 7 * U)
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 20, b + 80))
        launch(t, b + 110, (b + 120, b + 300))
    t.call("cudaLaunchKernel", 2350 * U, 2352 * U)
    t.call("cudaLaunchKernel_v7000", 2360 * U, 2362 * U)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN the two tail launches are counted (not the early one), and said
    tail = [w for w in run.warnings if "kernel launch(es)" in w]
    assert len(tail) == 1 and "the last 2 kernel launch(es)" in tail[0]


def test_a_complete_capture_says_nothing_of_unrun_launches(tmp_path):
    # GIVEN every launch's kernel in the trace
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 20, b + 80))
        launch(t, b + 110, (b + 120, b + 300))
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN no warning about launches without GPU work
    assert not any("kernel launch(es)" in w or "kernel launch call(s)" in w for w in run.warnings)


def test_launches_whose_kernels_the_trace_lost_mid_run_are_counted(tmp_path):
    # GIVEN three cycles of two launches each, whose kernels are in the trace but the second
    # cycle's draft kernel (CUPTI dropped its record), and a stream capture (cudaStreamBeginCapture
    # at 2500 us .. cudaStreamEndCapture at 2600 us) holding a launch at 2550 us that runs nothing,
    # then one more cycle whose kernels are all there
    t = FakeTrace()
    for c in range(4):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        if c == 1:
            t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U)
        else:
            launch(t, b + 10, (b + 20, b + 80))
        launch(t, b + 110, (b + 120, b + 300))
        if c == 2:
            t.call("cudaStreamBeginCapture_v10000", 2500 * U, 2502 * U)
            t.call("cudaLaunchKernel", 2550 * U, 2552 * U)
            t.call("cudaStreamEndCapture_v10000", 2600 * U, 2602 * U)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN the one lost kernel's launch is counted and said (it was not: only an empty kernel
    # table or a capture's tail was), not the launch inside the stream capture
    lost = [w for w in run.warnings if "kernel launch call(s) made before later ones whose GPU work is in the trace" in w]
    assert len(lost) == 1 and ": 1 kernel launch call(s)" in lost[0], run.warnings
    # and cycle 1's draft reads nothing of the kernel it lost (its timer alone)
    draft = [p for p in run.ranks[0].phases.to_pylist() if p["phase"] == "draft"]
    assert [p["n_gpu_ops"] for p in draft] == [1, 0, 1, 1]


def test_a_phase_that_launched_nothing_is_not_queued_behind(tmp_path):
    # GIVEN draft (CPU 0..100) launches a kernel running 10..500 us; bookkeeping (CPU 100..200)
    # launches nothing
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, names=("draft", "bookkeeping"))
        launch(t, b + 5, (b + 10, b + 500))
    # WHEN analysed with both as phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "bookkeeping"))).ranks
    # THEN bookkeeping's events on stream 7 both read b+500 (draft's kernel): 0 us of GPU time
    # against 100 us of CPU time, over-reported; it queued nothing, so no cause is given (draft
    # 500 us: its kernel ran past its timer)
    got = [(p["phase"], p["gpu_ns"] // U, p["verdict"], p["cause"]) for p in rank.phases.to_pylist()]
    assert got == [("draft", 500, "under", "async_tail"), ("bookkeeping", 0, "over", "none")] * 3


def test_whole_graph_traces_are_said_once_when_a_rank_is_also_left_out(tmp_path):
    # GIVEN three processes replaying whole-traced graphs; ranks 0 and 1 also run an eager
    # all-reduce each cycle, rank 2 none
    t = FakeTrace()
    for pid in (10, 11, 12):
        for c in range(3):
            b = c * 1000
            t.cycle(c, b * U, (b + 300) * U, (b + 600) * U, pid=pid)
            t.graph(t.call("cudaGraphLaunch_v10000", (b + 10) * U, (b + 12) * U, pid=pid), (b + 20) * U, (b + 200) * U, pid=pid)
            launch(t, b + 310, (b + 320, b + 500 if pid != 12 else b + 400), pid=pid, name=ALL_REDUCE if pid != 12 else "k")
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN one warning names all three ranks' whole graphs, one names rank 2 as left out
    whole = [w for w in run.warnings if "traced CUDA graphs whole" in w]
    assert len(whole) == 1 and whole[0].startswith("ranks 0, 1, 2 traced")
    assert sum(w.startswith("rank 2 ran no communication kernels") for w in run.warnings) == 1


def test_a_phase_inside_a_longer_cycle_of_another_thread_is_not_said_to_run_past_it(tmp_path):
    # GIVEN thread 1's cycle 0 (0..1000 us), thread 2's cycle 1 (100..400 us), and draft on thread
    # 3 from 500 to 700 us: inside cycle 0, though the latest cycle begun before it (cycle 1)
    # ended at 400
    t = FakeTrace()
    t.range("cycle 0", 0, 1000 * U, tid=1)
    t.range("cycle 1", 100 * U, 400 * U, tid=2)
    t.range("draft", 500 * U, 700 * U, tid=3)
    launch(t, 510, (520, 600), tid=3)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft",)))
    # THEN draft belongs to cycle 0, the latest-starting cycle that holds it, and nothing is said
    assert [(p["phase"], p["cycle"]) for p in run.ranks[0].phases.to_pylist()] == [("draft", 0)]
    assert not any("end after it" in w for w in run.warnings)


def test_the_unrun_launches_are_timed_from_the_earliest_of_them(tmp_path):
    # GIVEN the capture's tail: thread 1's launch at 2900 us is stored before thread 2's at 2350 us
    # (nsys writes each thread's buffer in turn), neither ran; the trace ends at 2902 us
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 20, b + 80))
        launch(t, b + 110, (b + 120, b + 300))
    t.call("cudaLaunchKernel", 2900 * U, 2902 * U, tid=1)
    t.call("cudaLaunchKernel", 2350 * U, 2352 * U, tid=2)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN both are counted, from 2902 - 2350 = 552 us before the end
    assert any("the last 2 kernel launch(es), from 0.552 ms before the trace's end" in w for w in run.warnings)


def test_a_host_function_is_no_kernel_launch(tmp_path):
    # GIVEN a complete capture whose every cycle ends with cuLaunchHostFunc (NCCL's proxy
    # callback after a collective), which puts no op in any trace
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 20, b + 80))
        launch(t, b + 110, (b + 120, b + 300))
        t.call("cuLaunchHostFunc", (b + 113) * U, (b + 114) * U)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN no launch is said to be missing its GPU work
    assert not any("kernel launch(es)" in w for w in run.warnings)


def test_an_op_without_its_launch_record_running_after_the_tail_hides_nothing(tmp_path):
    # GIVEN a CPU-ahead engine whose kernels run 600 us behind their launches; one op of the last
    # cycle lost its launch record (it runs at 2700..2780 us); the launches at 2350 and 2360 us
    # never ran
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U)
        launch(t, b + 10, (b + 610, b + 690))
        if c == 2:
            t.kernel(9001, (b + 700) * U, (b + 780) * U)
        else:
            launch(t, b + 110, (b + 700, b + 780))
    t.call("cudaLaunchKernel", 2350 * U, 2352 * U)
    t.call("cudaLaunchKernel", 2360 * U, 2362 * U)
    t.call("cudaStreamQuery", 2900 * U, 2902 * U)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN the two unrun launches are said (the GPU's lag makes the unlinked op's start no sign of
    # them), and so is the op without its call
    assert any("the last 2 kernel launch(es)" in w for w in run.warnings)
    assert any("1 GPU op(s) have no launching API call" in w for w in run.warnings)


def overlap_loop(prefetch: str | None = None, event_table: bool = True, gap_us: int = 30) -> FakeTrace:
    """SGLang's overlap loop marked at the scheduler's level, CPU one batch ahead, 4 batches:
    schedule (CPU T..T+50) runs a 5 us kernel on the default stream 7; forward (T+50..T+150)
    makes the forward stream 9 wait for 7 and queues a 400 us kernel on 9 behind the previous
    batch's; process (T+150..P) blocks until that previous forward is done, then works 50 us;
    the next batch starts ``gap_us`` later. Stream 7 never waits for 9. ``prefetch``:
    "before", a prefetch phase (T-20..T) copies 3 us on stream 11, which 7 then waits for;
    "ahead", batch c copies batch c+1's inputs on 11 and records them (T+30), 7 waits for that
    record before the next schedule, and the capture began after the first such record."""
    t = FakeTrace()
    T, prev_end = 0, 0
    for c in range(4):
        names, edges = ("schedule", "forward", "process"), [T, T + 50, T + 150]
        if prefetch == "before":
            t.copy(t.call("cudaMemcpyAsync", (T - 18) * U, (T - 16) * U), (T - 15) * U, (T - 12) * U, kind=1, stream=11)
            t.event_record(event=2, record=c + 1, start=(T - 10) * U, end=(T - 9) * U, stream=11)
            t.stream_wait(event=2, record=c + 1, start=(T - 8) * U, end=(T - 7) * U, stream=7)
            names, edges = ("prefetch",) + names, [T - 20] + edges
        launch(t, T + 10, (T + 12, T + 17))
        t.event_record(event=1, record=c + 1, start=(T + 52) * U, end=(T + 53) * U, stream=7)
        t.stream_wait(event=1, record=c + 1, start=(T + 54) * U, end=(T + 55) * U, stream=9)
        gpu = max(T + 62, prev_end)
        t.kernel(t.call("cudaLaunchKernel", (T + 60) * U, (T + 62) * U), gpu * U, (gpu + 400) * U, stream=9)
        if c:
            t.call("cudaEventSynchronize", (T + 151) * U, max(T + 152, prev_end) * U)
        if prefetch == "ahead":
            t.copy(t.call("cudaMemcpyAsync", (T + 20) * U, (T + 22) * U), (T + 23) * U, (T + 26) * U, kind=1, stream=11)
            if c:  # the first record was made before the capture began
                t.event_record(event=2, record=c + 2, start=(T + 30) * U, end=(T + 31) * U, stream=11)
        P = max(T + 150, prev_end) + 50
        t.cycle(c, *(e * U for e in edges + [P]), names=names)
        prev_end, T = gpu + 400, P + gap_us
        if prefetch == "ahead":
            t.stream_wait(event=2, record=c + 2, start=(T - 8) * U, end=(T - 7) * U, stream=7)
    if not event_table:
        t.events = []
    return t


def test_phases_tiled_behind_a_stream_they_never_wait_for_are_said(tmp_path):
    # GIVEN SGLang's overlap loop (``overlap_loop``), each batch starting when the last ends
    t = overlap_loop(gap_us=0)
    # WHEN analysed with those three phases
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process")))
    # THEN from the second batch on, schedule's boundaries wait for the previous forward on 9
    # (the tiling): it reads 0, where events on 7 would read b..b+50 = 50 us; said in a warning,
    # which says the cycles' GPU times are tiled with it (a cycle holds its phases' readings)
    assert [p["gpu_ns"] // U for p in run.ranks[0].phases.to_pylist() if p["phase"] == "schedule"] == [50, 0, 0, 0]
    said = [w for w in run.warnings if "never waits for" in w]
    assert len(said) == 1 and "'schedule': in 3 of 4 instances" in said[0] and "reads 0.000 ms (median) where events on its own stream would read 0.050 ms" in said[0]
    assert said[0].endswith("(streams that run at once and do not join there are tiled one after another, and so are the GPU times of the cycles they are in)")


def test_a_stream_that_waits_for_its_neighbours_stream_is_tiled_without_a_word(tmp_path):
    # GIVEN draft on input stream 9 and verify on 7, which waits for 9 within verify (the tiling
    # charges draft's tail to draft by design)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        launch(t, b + 10, (b + 20, b + 250), stream=9)
        t.event_record(event=1, record=c + 1, start=(b + 105) * U, end=(b + 106) * U, stream=9)
        t.stream_wait(event=1, record=c + 1, start=(b + 107) * U, end=(b + 108) * U, stream=7)
        launch(t, b + 110, (b + 250, b + 400))
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN nothing is said of tiling
    assert not any("never waits for" in w for w in run.warnings)


def test_a_wait_made_elsewhere_in_the_run_does_not_silence_the_tiling_line(tmp_path):
    # GIVEN LMDeploy's shape (a helper's event model, shrunk): per cycle (b = 100 + 2000c)
    # forward on stream 7 (b..b+100, a kernel b+20..b+1020), h2d with stream 20 said current
    # (b+100..b+200: a 18 us copy on 20, synchronized inside), sample on 7 (b+200..b+300, a
    # kernel b+1020..b+1100); stream 20 waits for 7 once, before the first cycle, for a record
    # of the idle stream 7
    from tracerecon.run_dir import STREAM_MARK

    t, n = FakeTrace(), 0

    def said(at: int, stream: int) -> None:  # what tracerecon.instrument.phase does as a phase begins
        nonlocal n
        n += 1
        t.event_record(900, n, at * U + 200, at * U + 500, stream=stream)
        t.mark(STREAM_MARK, at * U + 700)

    t.event_record(41, 1, 50 * U, 51 * U, stream=7)
    t.stream_wait(41, 1, 60 * U, 61 * U, stream=20)
    for c in range(3):
        b = 100 + 2000 * c
        t.range("forward", b * U, (b + 100) * U)
        said(b, 7)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 1020) * U, stream=7)
        t.range("h2d", (b + 100) * U, (b + 200) * U)
        said(b + 100, 20)
        t.copy(t.call("cudaMemcpyAsync", (b + 110) * U, (b + 113) * U), (b + 112) * U, (b + 130) * U, kind=1, stream=20)
        t.sync_record(t.call("cudaStreamSynchronize", (b + 140) * U, (b + 142) * U), (b + 140) * U, (b + 142) * U, sync_type=3, stream=20)
        t.range("sample", (b + 200) * U, (b + 300) * U)
        said(b + 200, 7)
        t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U), (b + 1020) * U, (b + 1100) * U, stream=7)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "h2d", "sample"), skip_cycles=0))
    # THEN h2d, on stream 20, is tiled behind forward's kernel (0: the later of the two streams'
    # events at each boundary), and the line says events on 20 alone read its 100 us: the one wait,
    # for a record made before forward's kernel was queued, orders nothing there
    assert [(p["phase"], p["stream_id"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist()][:3] == [("forward", 7, 1020), ("h2d", 20, 0), ("sample", 7, 80)]
    said_lines = [w for w in run.warnings if "never waits for" in w]
    assert len(said_lines) == 1 and "'h2d': in 3 of 3 instances" in said_lines[0] and "where events on its own stream would read 0.100 ms" in said_lines[0], run.warnings


def test_a_phase_joined_to_one_of_two_streams_that_pushed_it_is_not_said_whatever_their_numbers(tmp_path):
    # GIVEN per cycle forward on stream O (a kernel b+20..b+1020), aux on stream J (a kernel
    # b+62..b+1020, then a record at b+70), h2d on stream 20 waiting for that record at b+105,
    # sample on O; every phase says its stream; J numbered above O, then below (a review found
    # the verdict followed the numbering)
    from tracerecon.run_dir import STREAM_MARK

    def build(j: int, o: int, path) -> str:
        t, n = FakeTrace(), 0

        def said(at: int, stream: int) -> None:
            nonlocal n
            n += 1
            t.event_record(900, n, at * U + 200, at * U + 500, stream=stream)
            t.mark(STREAM_MARK, at * U + 700)

        for c in range(3):
            b = 100 + 2000 * c
            t.range("forward", b * U, (b + 50) * U)
            said(b, o)
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 1020) * U, stream=o)
            t.range("aux", (b + 50) * U, (b + 100) * U)
            said(b + 50, j)
            t.kernel(t.call("cudaLaunchKernel", (b + 60) * U, (b + 62) * U), (b + 62) * U, (b + 1020) * U, stream=j)
            t.event_record(41, c + 1, (b + 70) * U, (b + 71) * U, stream=j)
            t.range("h2d", (b + 100) * U, (b + 200) * U)
            said(b + 100, 20)
            t.stream_wait(41, c + 1, (b + 105) * U, (b + 106) * U, stream=20)
            t.copy(t.call("cudaMemcpyAsync", (b + 110) * U, (b + 113) * U), (b + 112) * U, (b + 130) * U, kind=1, stream=20)
            t.range("sample", (b + 200) * U, (b + 300) * U)
            said(b + 200, o)
            t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U), (b + 1020) * U, (b + 1100) * U, stream=o)
        return str(t.write(path))

    phases = PhaseConfig(phases=("forward", "aux", "h2d", "sample"), skip_cycles=0)
    # WHEN analysed both ways THEN neither says h2d is tiled behind a stream it never waits for:
    # it waited for J's record, queued after J's kernel, inside itself (aux, on J, which never
    # waits for O's forward, is said either way)
    for j in (9, 5):
        run = analyze([build(j, 7, tmp_path / f"j{j}.sqlite")], phases)
        assert not any("'h2d'" in w and "never waits for" in w for w in run.warnings), (j, run.warnings)


def test_the_stream_that_pushed_a_phase_decides_whether_it_is_said(tmp_path):
    # GIVEN the overlap loop with a prefetch phase whose copy stream 11 the default stream 7 waits
    # for; 7 still never waits for the forward stream 9, which pushes schedule's start boundary
    run = analyze([overlap_loop(prefetch="before").write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prefetch", "schedule", "forward", "process")))
    # THEN schedule is named (50 us on its own stream: CPU T..T+50, its kernel done at T+17), and
    # prefetch too (stream 11 never waits for 9 either; 20 us on its own stream)
    said = [w for w in run.warnings if "never waits for" in w]
    assert any("'schedule': in 3 of 4 instances" in w and "would read 0.050 ms" in w for w in said)
    assert any("'prefetch': in 3 of 4 instances" in w and "would read 0.020 ms" in w for w in said)


def test_without_the_event_records_nothing_is_claimed_of_what_a_stream_never_waits_for(tmp_path):
    # GIVEN the CPU one cycle ahead; draft's input stream 9 waits for 7 before its 200 us kernel,
    # verify's stream 7 waits for 9 before its 300 us kernel (both ways, every cycle); exported
    # with and without the CUDA event records the waits name
    def build(event_table: bool) -> FakeTrace:
        t = FakeTrace()
        for c in range(4):
            b, g = c * 300, max(c * 300 + 10, c * 500)
            t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
            t.event_record(event=2, record=c + 1, start=(b + 2) * U, end=(b + 3) * U, stream=7)
            t.stream_wait(event=2, record=c + 1, start=(b + 4) * U, end=(b + 5) * U, stream=9)
            launch(t, b + 10, (g, g + 200), stream=9)
            t.event_record(event=1, record=c + 1, start=(b + 105) * U, end=(b + 106) * U, stream=9)
            t.stream_wait(event=1, record=c + 1, start=(b + 107) * U, end=(b + 108) * U, stream=7)
            launch(t, b + 110, (g + 200, g + 500))
        if not event_table:
            t.events = []
        return t
    # WHEN analysed both ways
    # THEN neither says a stream never waits for the other: with the records the waits show it,
    # without them what each wait waited for is unknown
    for with_records in (True, False):
        run = analyze([build(with_records).write(tmp_path / f"t{with_records}.sqlite")])
        assert not any("never waits for" in w for w in run.warnings), with_records


def test_a_phase_shortened_by_its_own_stream_is_not_said_to_be_pushed_by_another(tmp_path):
    # GIVEN schedule (thread 1, b..b+100) overlapping forward (thread 2, from b+50) on stream 7
    # (the tiling ends schedule where forward begins: 50 us, against 250 us on 7 alone), and an
    # output phase copying on stream 12 after both
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=1)
        t.range("schedule", b * U, (b + 100) * U, tid=1)
        t.range("forward", (b + 50) * U, (b + 300) * U, tid=2)
        t.range("output", (b + 300) * U, (b + 350) * U, tid=1)
        launch(t, b + 10, (b + 12, b + 20), tid=1)
        launch(t, b + 60, (b + 62, b + 250), tid=2)
        t.copy(t.call("cudaMemcpyAsync", (b + 305) * U, (b + 307) * U, tid=1), (b + 308) * U, (b + 315) * U, kind=2, stream=12)
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "output")))
    # THEN nothing is said: no other stream moved schedule's boundaries
    assert not any("never waits for" in w for w in run.warnings)


def test_a_capture_begun_after_a_record_still_says_what_a_stream_never_waits_for(tmp_path):
    # GIVEN the overlap loop with its prefetch phase, the capture missing batch 0's record on
    # stream 11 (begun just after it): stream 7's first wait names a record the trace lacks
    t = overlap_loop(prefetch="before")
    t.events = [e for e in t.events if not (e["streamId"] == 11 and e["eventSyncId"] == 1)]
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prefetch", "schedule", "forward", "process")))
    # THEN schedule is still said (its later waits are all on 11, none on 9)
    assert any("'schedule': in 3 of 4 instances" in w and "would read 0.050 ms" in w for w in run.warnings)


def test_a_wait_on_a_record_made_before_the_capture_is_no_unknown(tmp_path):
    # GIVEN the overlap loop with a prefetcher one batch ahead: batch c copies batch c+1's inputs
    # on stream 11 and records them (T+30); stream 7 waits for that record before the next
    # schedule. The capture began after the first such record: its wait, made after stream 9's
    # first (resolved) wait, names a record the trace lacks, of an event recorded nowhere earlier
    t = overlap_loop(prefetch="ahead")
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process")))
    # THEN stream 7 is still known to wait only for 11, never for 9: schedule is said
    assert any("'schedule': in 3 of 4 instances" in w and "would read 0.050 ms" in w for w in run.warnings)


def test_phase_options_an_export_directory_ignores_are_said(tmp_path):
    from conftest import H200

    # GIVEN an export of the README's trace, analysed with the default options
    out = tmp_path / "exp"
    assert run_cli("export", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)).returncode == 0
    plain = run_cli("report", "--json", str(out))
    # WHEN reported and diffed with phase options, which an export cannot apply
    res = run_cli("report", "--json", str(out), "--skip-cycles", "3", "--phase", "verify")
    diff = run_cli("diff", "--json", str(out), str(out), "--phase-thread", "same", "--cycle", "step")
    # THEN the same numbers, and one warning per export read naming the options ignored and
    # what the export was analysed with, on stderr and in the JSON's warnings
    ignored = (f"{out}: --phase, --skip-cycles ignored: an export holds the analysis made when it was written "
               "(phases draft, verify, draft_re_extend, draft_extend, target_verify; cycle prefix 'cycle'; phase thread auto; "
               "left out of the medians: the warm-up cycles, and phase ranges in no cycle); export the traces again with these options to apply them")
    doc, plain_doc = json.loads(res.stdout), json.loads(plain.stdout)
    assert res.returncode == 0 and doc["ranks"] == plain_doc["ranks"] and doc["critical_path"] == plain_doc["critical_path"]
    assert doc["warnings"] == [ignored] + plain_doc["warnings"]
    said = [ln for ln in res.stderr.splitlines() if "ignored" in ln]
    assert said == [f"tracerecon: warning: {ignored}"], res.stderr
    assert diff.returncode == 0
    assert [ln.split(" ignored:")[0] for ln in diff.stderr.splitlines() if "ignored" in ln] == [f"tracerecon: warning: {side}: {out}: --cycle, --phase-thread"
                                                                                                for side in "AB"]
    # and without options nothing is said
    assert "ignored" not in plain.stderr


def test_a_phase_asked_for_that_matches_no_range_is_said():
    # GIVEN the README's trace and --phase verify plus a pattern that matches none of its ranges
    from conftest import H200

    asked = analyze([H200 / "eagle_gpu_bound.sqlite"], PhaseConfig(phases=("verify", "draft=glob:*propose*")))
    # THEN verify is reported, and a warning names the pattern that matched nothing
    assert {p["phase"] for p in asked.ranks[0].phases.to_pylist()} == {"verify"}
    assert any("no range matched --phase 'draft=glob:*propose*'" in w for w in asked.warnings)
    # AND phases recorded in a run directory (a preset's list for several engine versions) are not
    recorded = analyze([H200 / "eagle_gpu_bound.sqlite"], PhaseConfig(phases=("verify", "draft=glob:*propose*"), phases_recorded=True))
    assert not any("no range matched" in w for w in recorded.warnings)


def test_tokens_a_cpu_only_run_accepted_are_counted_though_no_gpu_time_is_there():
    import pyarrow as pa

    from tracerecon.analysis.summary import per_token

    # GIVEN three cycles of a CPU-only run (no GPU time) that each said they accepted 2 tokens,
    # and one that said nothing
    cycles = pa.table({"cycle": [0, 1, 2, 3], "gpu_ns": pa.array([None] * 4, pa.int64()), "accepted_tokens": [2, 2, 2, None]})
    # WHEN summed THEN 6 tokens, and no GPU time per token (there is none to divide)
    assert per_token(cycles, None) == (6, None, {})
    # and with GPU time, per token over the cycles that said both: (1 + 3 ms) / (2 + 2), the
    # tokens over every cycle that said them (a CPU-only cycle's 10 too)
    cycles = pa.table({"cycle": [0, 1, 2, 3], "gpu_ns": [1_000_000, 3_000_000, None, None], "accepted_tokens": [2, 2, None, 10]})
    assert per_token(cycles, None) == (14, 1.0, {})
    # and a GPU cycle that accepted none beside CPU-only ones: their tokens still count
    cycles = pa.table({"cycle": [0, 1], "gpu_ns": [1_000_000, None], "accepted_tokens": [0, 10]})
    assert per_token(cycles, None) == (10, None, {})


def test_phases_out_of_step_with_the_cycle_ranges_are_said(tmp_path):
    # GIVEN 12 cycle ranges on the loop thread (1 ms each), and a worker thread's draft ranges,
    # one per cycle in all but out of step: two in each even cycle, none in the odd ones
    from nsys_factory import FakeTrace
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    U = 1000
    t = FakeTrace()
    for c in range(12):
        t.range(f"cycle {c}", c * 1000 * U, (c + 1) * 1000 * U, tid=1)
    for c in range(0, 12, 2):
        for k in range(2):
            s = c * 1000 + 100 + k * 400
            t.range("draft", s * U, (s + 300) * U, tid=2)
    # WHEN analysed
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft",)))
    # THEN a warning says draft runs out of step with the cycles (it read 0.6 ms per cycle,
    # twice its 0.3 ms, in 6 cycles, with no word)
    assert any("'draft': no cycle range holds it in 6 of 12 cycles, two or more in 6" in w for w in a.warnings), a.warnings


def test_phases_run_in_some_cycles_only_or_twice_by_design_are_not_said(tmp_path):
    # GIVEN prefill cycles (0, 4, 8) holding a prefill phase once and decode cycles none; and a
    # draft phase run twice in every cycle
    from nsys_factory import FakeTrace
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    U = 1000
    t = FakeTrace()
    for c in range(12):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 1000) * U)
        if c % 4 == 0:
            t.range("prefill", (b + 50) * U, (b + 90) * U)
        t.range("draft", (b + 100) * U, (b + 300) * U)
        t.range("draft", (b + 400) * U, (b + 600) * U)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prefill", "draft")))
    # THEN no out-of-step warning
    assert not any("out of step" in w for w in a.warnings), a.warnings


def test_a_phase_run_twice_in_odd_cycles_on_the_cycles_own_thread_is_not_out_of_step(tmp_path):
    # GIVEN one thread, 12 cycles: even cycles run extend once, odd cycles draft twice, every
    # range inside its own cycle range
    from nsys_factory import FakeTrace
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    U = 1000
    t = FakeTrace()
    for c in range(12):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 1000) * U)
        for k in range(1 if c % 2 == 0 else 2):
            t.range("extend" if c % 2 == 0 else "draft", (b + 100 + 400 * k) * U, (b + 400 + 400 * k) * U)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "extend")))
    # THEN no out-of-step warning (the phases are the cycles' own thread's, by design)
    assert not any("out of step" in w for w in a.warnings), a.warnings


def test_a_stream_waiting_for_a_host_function_is_said_not_modelled(tmp_path):
    # GIVEN draft (b..b+100) that launches a kernel on 7 (b+10..b+50) and then a host function on
    # 7 (cudaLaunchHostFunc: the stream waits for the host, which no event records), then verify
    # (b+100..b+200) whose kernel starts only at b+300, behind the host function; and a trace
    # of the same loop without the host function
    def loop(host_func: bool) -> FakeTrace:
        t = FakeTrace()
        for c in range(3):
            b = 1000 * c
            t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 50) * U)
            if host_func:
                t.call("cudaLaunchHostFunc_v10000", (b + 8) * U, (b + 9) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 105) * U, (b + 107) * U), (b + 300) * U, (b + 320) * U)
        return t
    # WHEN analysed
    said = analyze([loop(True).write(tmp_path / "h.sqlite")]).warnings
    quiet = analyze([loop(False).write(tmp_path / "q.sqlite")]).warnings
    # THEN a warning counts the calls and says such waits are not modelled; none without them
    assert [w.split(": ", 1)[1] for w in said if "host function" in w] == [
        "3 cudaLaunchHostFunc_v10000: streams waited for a host function, a callback, a value in memory or an external semaphore, for which the trace records no "
        "event; such waits are not modelled: a phase whose stream waited so may read short, and the next one long"]
    assert not any("host function" in w for w in quiet)


def test_a_stream_waiting_for_an_external_semaphore_is_said_not_modelled(tmp_path):
    # GIVEN forward (b..b+100) launching a kernel on 7 (b+10..b+110) and then making 7 wait for an
    # external semaphore (cudaWaitExternalSemaphoresAsync: signalled at b+400, which the trace does
    # not record), then sample (b+100..b+200) whose kernel starts only at b+400, behind the wait
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 200) * U)
        t.range("forward", b * U, (b + 100) * U)
        t.range("sample", (b + 100) * U, (b + 200) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 110) * U)
        t.call("cudaWaitExternalSemaphoresAsync_v2_v11020", (b + 8) * U, (b + 9) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 105) * U, (b + 107) * U), (b + 400) * U, (b + 420) * U)
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "sample")))
    # THEN events at forward's end would read b+400 (forward 400 us, sample 20 us); the wait is not
    # modelled (forward reads b..b+110, sample b+110..b+420: 310 us), and a warning says so (there
    # was none: the call was not even read)
    by = {}
    for label, gpu in zip(a.ranks[0].phases["phase"].to_pylist(), a.ranks[0].phases["gpu_ns"].to_pylist()):
        by.setdefault(label, []).append(gpu)
    assert by == {"forward": [110 * U] * 3, "sample": [310 * U] * 3}, by
    assert [w.split(": ", 1)[1] for w in a.warnings if "semaphore" in w] == [
        "3 cudaWaitExternalSemaphoresAsync_v2_v11020: streams waited for a host function, a callback, a value in memory or an external "
        "semaphore, for which the trace records no event; such waits are not modelled: a phase whose stream waited so may read short, "
        "and the next one long"]


@pytest.mark.parametrize("own_records", [True, False])
def test_a_stream_waiting_on_another_process_event_is_said_not_modelled(tmp_path, own_records):
    # GIVEN torch's CUDA tensor sharing between two processes on one GPU (a fuzzing review's
    # shape): pid 10's forward (c..c+95 us) runs a 500 us kernel on its stream 20 (c+10..c+510) and
    # records its event 500 after it (c+30); pid 20 opened that event as its event 900
    # (cudaIpcOpenEventHandle), and in recv (c+40..c+60) its stream 20 waits on 900 (c+45);
    # its draft (c+60..c+100) launches a 30 us kernel there (running c+510..c+540, behind the
    # wait); its post (c+100..c+120) records an event of its own (or none)
    t = FakeTrace()
    t.stream_created(20, 2, pid=10)
    t.stream_created(20, 2, pid=20)
    t.call("cudaIpcOpenEventHandle_v4010", 900 * U, 905 * U, pid=20)
    for i in range(3):
        c = (1000 + i * 1000) * U
        t.range(f"cycle {i}", c, c + 95 * U, pid=10)
        t.range("forward", c, c + 95 * U, pid=10)
        t.kernel(t.call("cudaLaunchKernel", c + 5 * U, c + 8 * U, pid=10), c + 10 * U, c + 510 * U, pid=10, stream=20)
        t.event_record(500, i + 1, c + 30 * U, c + 32 * U, pid=10, stream=20)
        t.range(f"cycle {i}", c + 40 * U, c + 120 * U, pid=20)
        t.range("recv", c + 40 * U, c + 60 * U, pid=20)
        corr = t.call("cudaStreamWaitEvent_v3020", c + 45 * U, c + 47 * U, pid=20)
        t.syncs.append({"start": c + 45 * U, "end": c + 47 * U, "deviceId": 0, "contextId": 1, "streamId": 20, "correlationId": corr,
                        "globalPid": gpid(20), "syncType": 2, "eventId": 900})
        t.range("draft", c + 60 * U, c + 100 * U, pid=20)
        t.kernel(t.call("cudaLaunchKernel", c + 65 * U, c + 68 * U, pid=20), c + 510 * U, c + 540 * U, pid=20, stream=20)
        t.range("post", c + 100 * U, c + 120 * U, pid=20)
        if own_records:
            t.event_record(901, i + 1, c + 105 * U, c + 107 * U, pid=20, stream=20)
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "recv", "draft", "post"), skip_cycles=0))
    # THEN events on pid 20's stream would read recv 470 us (c+40..c+510) and draft 30 us; the
    # trace does not tie event 900 to pid 10's kernel, so recv reads 20 us and draft 480 us (as
    # before), and a warning counts the 3 waits and says why; where pid 20 records no event of its
    # own, the warning of a rank without event records says they may be another process's (it had
    # said the export holds none, where it holds pid 10's)
    pid20 = next(r for r in a.ranks if set(r.phases["phase"].to_pylist()) >= {"recv"})
    by = {}
    for label, gpu in zip(pid20.phases["phase"].to_pylist(), pid20.phases["gpu_ns"].to_pylist()):
        by.setdefault(label, []).append(gpu)
    assert by["recv"] == [20 * U] * 3 and by["draft"] == [480 * U] * 3, by
    said = [w.split(": ", 1)[1] for w in a.warnings if "another process's" in w]
    if own_records:
        assert said == ["3 stream wait(s) (cudaStreamWaitEvent) name events their process never recorded, and it opened another process's "
                        "events (cudaIpcOpenEventHandle): waits on another process's records, which this trace does not tie to the work they "
                        "wait for, are not modelled (taken as done): a phase whose stream only waited so may read short, and the next one long"], a.warnings
    else:
        assert said == ["streams waited for events on 1 stream(s), but the trace holds no CUDA event record of the rank's to say what they "
                        "waited for: the events may be another process's, which it opened (cudaIpcOpenEventHandle), whose records are not the "
                        "rank's, or the export holds none (CUPTI_ACTIVITY_KIND_CUDA_EVENT: nsys 2023 or later, --cuda-event-trace not false): "
                        "such waits are not modelled: a phase whose stream only waited may read short, and the next one long"], a.warnings
    assert not any("holds no CUDA event records" in w for w in a.warnings), a.warnings


def test_a_wait_on_its_own_event_recorded_before_the_capture_is_no_interprocess_wait(tmp_path):
    # GIVEN a process that opened another process's event (cudaIpcOpenEventHandle at 5 us) but
    # never waits on it: its stream 8 waits at 50 us on its own event 5, whose record #3 was made
    # before the capture, and at 400 us on record #4 of it, made in the trace at 395 us on stream
    # 7 (a fresh review's shape: the wait on #3 had been called one on an event it never recorded)
    t = FakeTrace()
    t.range("verify", 0, 1000 * U)
    t.call("cudaIpcOpenEventHandle_v4010", 5 * U, 6 * U)
    t.stream_wait(5, 3, 50 * U, 51 * U, stream=8)
    t.kernel(t.call("cudaLaunchKernel", 60 * U, 61 * U), 100 * U, 300 * U, stream=8)
    t.kernel(t.call("cudaLaunchKernel", 70 * U, 71 * U), 80 * U, 390 * U, stream=7)
    t.event_record(5, 4, 395 * U, 396 * U, stream=7)
    t.stream_wait(5, 4, 400 * U, 401 * U, stream=8)
    t.kernel(t.call("cudaLaunchKernel", 410 * U, 411 * U), 420 * U, 600 * U, stream=8)
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))
    # THEN nothing is said of another process's events: the process records event 5 in the trace
    assert not any("another process" in w for w in a.warnings), a.warnings


@pytest.mark.parametrize("threads", [(11, 12), (11, 11)])
def test_one_process_driving_two_gpus_is_said_to_be_one_rank_or_a_rank_per_gpu(tmp_path, threads):
    # GIVEN one process (pid 10) whose thread 11 drives GPU 0 and thread 12 GPU 1, each running
    # its own cycles with an all-reduce in verify, or whose one thread drives both
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        for tid, dev in dict(zip(threads, (0, 1))).items() if threads[0] != threads[1] else [(11, None)]:
            t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, tid=tid)
            for d in ((dev,) if dev is not None else (0, 1)):
                t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=tid), (b + 120) * U, (b + 200) * U, device=d)
                t.kernel(t.call("cudaLaunchKernel", (b + 120) * U, (b + 122) * U, tid=tid), (b + 200) * U, (b + 300) * U, device=d,
                         name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    a = analyze([t.write(tmp_path / "t.sqlite")])
    if threads[0] != threads[1]:
        # WHEN analysed THEN a thread per GPU is a rank per GPU, their all-reduces matched (each
        # reached at once: no wait), and a line says so
        assert len(a.ranks) == 2 and [c.n_collectives for c in a.cross.comm] == [3, 3]
        assert any("process 10 runs a loop of its own on a thread per GPU: read as a rank per GPU" in w for w in a.warnings)
    else:
        # THEN one thread driving both is one rank, with a warning that its GPUs' collectives
        # with each other are not matched
        assert len(a.ranks) == 1
        assert any("process 10 ran collectives on GPUs 0, 1: one process driving several GPUs is one rank" in w for w in a.warnings)


def test_a_pattern_that_is_no_pattern_is_said_with_how_to_write_it():
    # GIVEN the README's trace and specs a user writes: TensorRT-LLM's "[Executor] ..." names as
    # a glob (its [...] is a set of characters), and patterns with no phase name before them
    # (an exact range name then)
    from conftest import H200

    path = H200 / "eagle_gpu_bound.sqlite"
    bracket = analyze([path], PhaseConfig(phases=("verify", "x=glob:[Executor] *"))).warnings
    bare = analyze([path], PhaseConfig(phases=("re:draft.*",))).warnings
    plain = analyze([path], PhaseConfig(phases=("verify", "draft=glob:*propose*"))).warnings
    # THEN each warning says how to write it; one with neither mistake says neither
    (said,) = [w for w in bracket if w.startswith("no range matched")]
    assert said.endswith("; in a glob, [...] matches one character of a set: write [[] for a '[' itself (glob:[[]Executor] *) or use re:")
    assert bare[0].startswith("no range named as a phase (re:draft.*)")
    assert bare[0].endswith("; a pattern needs the phase's name first (draft=re:..., draft=glob:...): without one it is a range's exact name")
    assert not any("[[]" in w or "phase's name first" in w for w in plain)


def test_a_phase_asked_for_whose_ranges_all_sit_in_another_phase_is_said_so(tmp_path):
    # GIVEN cycles of draft (b..b+100) and verify (b+100..b+300), each verify holding a
    # target_verify range (b+150..b+250) that launches the cycle's second kernel
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        t.range("target_verify", (b + 150) * U, (b + 250) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 160) * U, (b + 162) * U), (b + 170) * U, (b + 240) * U)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN asked for draft, verify and target_verify, or for a name no range has
    nested = analyze([path], PhaseConfig(phases=("draft", "verify", "target_verify"))).warnings
    absent = analyze([path], PhaseConfig(phases=("draft", "verify", "nothing_here"))).warnings
    taken = analyze([path], PhaseConfig(phases=("draft", "v=re:verify", "t=re:^target"))).warnings  # v takes target_verify first
    # THEN the first says target_verify's ranges are read as part of verify (not that no range
    # matched it); the second that nothing matched; the third that its ranges matched but an
    # earlier spec takes them (a range is the first matching phase's), naming it
    assert any(w.startswith("--phase target_verify matched only ranges inside another phase's range") for w in nested), nested
    assert not any("no range matched" in w for w in nested)
    assert any(w.startswith("no range matched --phase nothing_here") for w in absent), absent
    assert any(w.startswith("--phase 't=re:^target' matched only ranges an earlier --phase takes (as 'v')") for w in taken), taken
    assert not any("no range matched" in w or "inside another" in w for w in taken), taken


def test_a_pattern_that_takes_ranges_of_several_names_is_said_so(tmp_path):
    # GIVEN cycles of draft_0, draft_1 (b..b+100, two ranges), verify (b+100..b+300) and
    # draft_re_extend (b+300..b+400), one kernel each
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.range("cycle %d" % c, b * U, (b + 400) * U)
        for i, (name, s, e) in enumerate([("draft_0", 0, 50), ("draft_1", 50, 100), ("verify", 100, 300), ("draft_re_extend", 300, 400)]):
            t.range(name, (b + s) * U, (b + e) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + s + 5) * U, (b + s + 7) * U), (b + s + 10) * U, (b + e - 10) * U)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN draft is asked for as re:draft (which also takes draft_re_extend), as glob:draft_* (the
    # numbered draft ranges alone), and as the exact names' pattern
    wide = analyze([path], PhaseConfig(phases=("draft=re:draft", "verify"))).warnings
    numbered = analyze([path], PhaseConfig(phases=("draft=glob:draft_[0-9]", "verify", "draft_re_extend"))).warnings
    taken_first = analyze([path], PhaseConfig(phases=("x=draft_re_extend", "draft=re:draft", "verify"))).warnings
    # THEN the first says its pattern takes ranges of two names, naming them; names that differ
    # only in their numbers are one kind; a name an earlier spec takes is not this one's
    assert [w for w in wide if "names" in w] == ["--phase 'draft=re:draft' takes ranges of 2 names, all read as phase 'draft': "
                                                 "'draft_0', 'draft_re_extend' (`tracerecon ranges` lists the names)"], wide
    assert not any("takes ranges of" in w for w in numbered + taken_first), (numbered, taken_first)
    # AND a name an earlier spec of the same phase takes is that spec's, not the pattern's
    same_label = analyze([path], PhaseConfig(phases=("draft=draft_re_extend", "draft=re:^draft_re|^verify$"))).warnings
    assert [w for w in same_label if "names" in w] == [], same_label


def test_a_phase_asked_for_that_takes_cycle_ranges_is_said_so(tmp_path):
    # GIVEN cycles 'cycle 0'..'cycle 3' of draft and verify, one kernel each
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 240) * U)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN asked for the phase 'cycle 1' (a user who wanted to see one cycle), or for a pattern
    # that takes every cycle range, or for draft and verify
    one = analyze([path], PhaseConfig(phases=("cycle 1",)))
    every = analyze([path], PhaseConfig(phases=("draft", "c=glob:cycle*")))
    plain = analyze([path], PhaseConfig(phases=("draft", "verify")))
    # THEN the range is read as that phase (one instance, 0..300 us), and a warning says the
    # ranges it takes are cycle ranges read as a phase; not for phases that take none
    assert [(p["phase"], p["gpu_ns"] // U) for p in one.ranks[0].phases.to_pylist()] == [("cycle 1", 300)]
    assert any(w.startswith("--phase 'cycle 1' matched ranges named as cycles (their names start with 'cycle'") for w in one.warnings), one.warnings
    assert any(w.startswith("--phase 'c=glob:cycle*' matched ranges named as cycles") for w in every.warnings), every.warnings
    assert not any("named as cycles" in w for w in plain.warnings), plain.warnings


def test_a_cycle_prefix_only_phases_have_is_not_said_to_be_in_another_process(tmp_path):
    # GIVEN one process's draft/verify cycles, analysed with --cycle draft (a phase's name)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
    warnings = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(cycle_prefix="draft")).warnings
    # THEN the warning says only phases' own names start with it, and names no other process
    assert any(w.startswith("no cycle range (a range whose name starts with 'draft', as 'draft 3' does; phase ranges are not)") for w in warnings), warnings
    assert not any("another process" in w for w in warnings)


def test_work_on_the_legacy_stream_beside_a_blocking_stream_reads_as_its_implicit_waits(tmp_path):
    # GIVEN draft/verify on the legacy default stream 7 (draft's kernel +20..100, verify's,
    # launched at +110, +400..480) and a helper thread's kernel on stream 13 (launched at +50,
    # run +100..400), in one trace created blocking (cudaStreamCreate: TARGET_INFO_CUDA_STREAM
    # flag 1), in another non-blocking (flag 2, as PyTorch's streams are)
    def trace(flag: int) -> str:
        t = FakeTrace()
        for c in range(3):
            b = 1000 * c
            t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 100) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 50) * U, (b + 52) * U, tid=20), (b + 100) * U, (b + 400) * U, stream=13)
            t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 400) * U, (b + 480) * U)
        t.stream_created(7, 3)
        t.stream_created(13, flag)
        return str(t.write(tmp_path / f"flag{flag}.sqlite"))

    def read(flag: int) -> tuple[list, list]:
        analysis = analyze([trace(flag)])
        return [(p["phase"], p["gpu_ns"] // U) for p in analysis.ranks[0].phases.to_pylist()], analysis.warnings
    # WHEN analysed
    blocking, blocking_warnings = read(1)
    non_blocking, non_blocking_warnings = read(2)
    # THEN with 13 blocking, an event on the NULL stream 7 waits for 13's work queued before it:
    # draft's end event (at +100) for the helper's kernel (done +400), so draft reads 400 us and
    # verify 80 (+400..480); with 13 non-blocking, draft reads its own kernel (100 us) and verify
    # the rest (+100..480: 380 us). Neither says the streams' implicit waits are not modelled (it
    # had said so, and read the blocking trace as the non-blocking one)
    assert blocking == [("draft", 400), ("verify", 80)] * 3
    assert non_blocking == [("draft", 100), ("verify", 380)] * 3
    assert not any("legacy default stream" in w for w in blocking_warnings + non_blocking_warnings), blocking_warnings


def test_ranges_does_not_send_a_user_to_run_ranges():
    # GIVEN a trace none of whose ranges has a default phase's name (TensorRT-LLM's loop)
    trace = str(SAMPLES / "probes_h200" / "trtllm_overlap" / "cpu_bound.sqlite.xz")
    # WHEN `report` and `ranges` read it
    report, ranges = run_cli("report", trace), run_cli("ranges", trace)
    # THEN report says no range is a phase and points at `ranges`; `ranges`, which lists them
    # whatever the phases, lists them and says neither
    assert report.returncode == 0 and "no range named as a phase" in report.stderr and "`tracerecon ranges`" in report.stderr
    assert ranges.returncode == 0 and "_sample_async" in ranges.stdout
    assert "no range named as a phase" not in ranges.stderr and "`tracerecon ranges`" not in ranges.stderr, ranges.stderr


def test_an_export_named_like_a_table_file_is_said_to_be_a_folder(tmp_path):
    # GIVEN a trace, exported to a name that reads as a CSV file
    out = tmp_path / "phases.csv"
    r = run_cli("export", str(SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"), "-o", str(out))
    # THEN the parquet folder is written there, and a warning says it is one
    assert r.returncode == 0 and (out / "manifest.json").is_file()
    assert "is named like a CSV file; writing a folder of parquet tables" in r.stderr, r.stderr


def test_an_export_named_like_a_picture_points_at_plot(tmp_path):
    # GIVEN a trace, exported to a name that reads as a picture (plot's -o, mixed up)
    out = tmp_path / "phases.png"
    r = run_cli("export", str(SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"), "-o", str(out))
    # THEN the parquet folder is written there, and a warning says so and names plot
    assert r.returncode == 0 and (out / "manifest.json").is_file()
    assert "is named like a PNG picture; writing a folder of parquet tables (`tracerecon plot TRACE -o FILE` draws the picture)" in r.stderr, r.stderr


def test_a_bad_phase_pattern_is_shown_as_typed():
    # GIVEN a pattern ending in one backslash
    r = run_cli("report", str(SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"), "--phase", "x=re:\\")
    # THEN the error shows it with one backslash, as typed (it said 'x=re:\\\\')
    assert r.returncode == 2 and "--phase 'x=re:\\': bad regular expression" in r.stderr, r.stderr


def test_work_before_a_cycles_first_phase_names_the_range_that_launched_it():
    # GIVEN vLLM V1 (bundled, recorded before the preset mapped preprocess to a phase): its
    # `gpu_model_runner: preprocess` range, in no phase, queues GPU work inside the cycle range
    # before verify
    # WHEN reported (with the preset its run directory names)
    r = run_cli("report", str(SAMPLES / "engines_h200" / "vllm_v1"))
    said = [w for w in r.stderr.splitlines() if "inside the cycle range before its first phase ('verify')" in w]
    # THEN the note names that range, as the note of work between two phases names its own
    assert len(said) == 1 and "it was launched in the range 'gpu_model_runner: preprocess': name it in --phase" in said[0], said


def test_a_stream_behind_at_the_captures_end_loses_no_launch_and_nested_captures_hold_theirs(tmp_path):
    # GIVEN six cycles (b = 1000c us) whose draft kernel on stream 7 runs 1.8 ms, behind more each
    # cycle, so that the capture ends (at 6000 us) before the last ones ran, while verify's
    # kernels on stream 9, launched after them, ran at once (a review's shape)
    t = FakeTrace()
    for c in range(6):
        b = c * 1000
        t.cycle(c, b * U, (b + 500) * U, (b + 1000) * U)
        call = t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U)
        if 20 + c * 1800 + 1800 <= 6000:
            t.kernel(call, (20 + c * 1800) * U, (20 + c * 1800 + 1800) * U, stream=7)
        launch(t, b + 510, (b + 520, b + 560), stream=9)
    # and, on a second trace, two stream captures open at once on one thread (begin A, begin B,
    # end B) with a launch still inside A's after B's end
    n = FakeTrace()
    for c in range(4):
        b = c * 1000
        n.cycle(c, b * U, (b + 500) * U, (b + 1000) * U)
        launch(n, b + 10, (b + 20, b + 100))
        launch(n, b + 510, (b + 520, b + 600))
        if c == 1:
            n.call("cudaStreamBeginCapture_v10000", (b + 700) * U, (b + 701) * U)
            n.call("cudaStreamBeginCapture_v10000", (b + 710) * U, (b + 711) * U)
            n.call("cudaLaunchKernel", (b + 720) * U, (b + 721) * U)
            n.call("cudaStreamEndCapture_v10000", (b + 730) * U, (b + 731) * U)
            n.call("cudaLaunchKernel", (b + 740) * U, (b + 741) * U)
            n.call("cudaStreamEndCapture_v10000", (b + 750) * U, (b + 751) * U)
    # WHEN analysed THEN neither says a record was lost mid-run (the first had 3, the second 1)
    for trace, name in ((t, "behind.sqlite"), (n, "nested.sqlite")):
        run = analyze([trace.write(tmp_path / name)])
        assert not any("have no GPU record of their own" in w for w in run.warnings), (name, run.warnings)
