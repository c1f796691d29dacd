"""Shapes where a number used to change or vanish without a word: a process with no NCCL
kernels among tensor-parallel ranks, collectives hidden inside whole-graph traces, phases that
run past their cycle range, a capture that ends before the last launches ran, and a phase that
launched nothing named as queued behind. Each expected value is worked out by hand from the
ops' times."""

from __future__ import annotations

import json

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.api import load as analyze

U = 1000  # 1 us
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], pid: int = 10, tid: int | None = None, name: str = "k") -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid, tid=tid), gpu_us[0] * U, gpu_us[1] * U, pid=pid, name=name)


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


def test_a_phase_running_past_its_cycle_range_is_said_to_be_in_no_cycle(tmp_path):
    # GIVEN cycles marked on thread 1 and phases on thread 2; verify's range ends 100 us after
    # its cycle range (b+700 against b+600)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("draft", b * U, (b + 300) * U, tid=2)
        t.range("verify", (b + 300) * U, (b + 700) * U, tid=2)
        launch(t, b + 10, (b + 20, b + 200), tid=2)
        launch(t, b + 310, (b + 320, b + 500), tid=2)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN verify belongs to no cycle (as before), and now a warning counts its 3 ranges
    assert [(p["phase"], p["cycle"]) for p in run.ranks[0].phases.to_pylist()] == [("draft", c) if k == 0 else ("verify", None) for c in range(3) for k in (0, 1)]
    assert any("3 phase range(s) start inside a cycle range and end after it (first: 'verify')" in w for w in run.warnings)


def test_phases_inside_their_cycles_raise_no_such_warning(tmp_path):
    # GIVEN the same engine with verify ending with its cycle (b+600)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("draft", b * U, (b + 300) * U, tid=2)
        t.range("verify", (b + 300) * U, (b + 600) * U, tid=2)
        launch(t, b + 10, (b + 20, b + 200), tid=2)
        launch(t, b + 310, (b + 320, b + 500), tid=2)
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
    assert not any("kernel launch(es)" in w for w in run.warnings)


def test_a_phase_that_launched_nothing_is_not_queued_behind(tmp_path):
    # GIVEN draft (CPU 0..100) launches a kernel running 10..500 us; bookkeeping (CPU 100..200)
    # launches nothing
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, names=("draft", "bookkeeping"))
        launch(t, b + 5, (b + 10, b + 500))
    # WHEN analysed with both as phases
    from tracerecon.analysis.config import PhaseConfig

    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "bookkeeping"))).ranks
    # THEN bookkeeping's events on stream 7 both read b+500 (draft's kernel): 0 us of GPU time
    # against 100 us of CPU time, over-reported; it queued nothing, so no cause is given (draft
    # 500 us: its kernel ran past its timer)
    got = [(p["phase"], p["gpu_ns"] // U, p["verdict"], p["cause"]) for p in rank.phases.to_pylist()]
    assert got == [("draft", 500, "under", "async_tail"), ("bookkeeping", 0, "over", "none")] * 3
