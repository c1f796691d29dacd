"""Cycles not whole in the trace: a capture that ends inside a cycle (``nsys profile
--duration``, a capture range stopped mid-run) leaves the ranges still open with no end, the
kernels not yet run out of the trace, and the phases not yet begun out altogether. Such a
cycle's numbers are no cycle's: it is left out of the medians as a warm-up cycle is, kept in
the tables with ``incomplete`` set, and said.

Hand-computed case (us, b = 1000c): cycle c [b, b+300] holds draft [b, b+100] (a kernel launched
at b+10, running b+20..b+80) and verify [b+100, b+300] (a kernel launched at b+110, running
b+120..b+280). Events on stream 7 in whole cycles: draft b..b+100 (100), verify b+100..b+300 (200).
"""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000
PHASES = PhaseConfig(phases=("draft", "verify"), skip_cycles=0)
ARGS = ("--phase", "draft", "--phase", "verify", "--skip-cycles", "0")


def cut_in_cycle(n: int, cycle_ranges: bool = True, pid: int = 10, collective: bool = False, how: str = "open", later_us: int = 0) -> FakeTrace:
    """``n`` cycles (see the module doc), the capture ending in the last: ``open``, inside its
    verify (its verify and cycle range never closed, verify's kernel not in the trace);
    ``unrun``, after its ranges closed but before verify's kernel ran; ``before verify``, after
    its draft, before its verify began. With ``collective``, verify's kernel is an all-reduce;
    ``later_us``: a kernel of that long after it (launched at 114 us) in each whole cycle."""
    t = FakeTrace()
    for c in range(n):
        b, last = 1000 * c, c == n - 1
        if cycle_ranges:
            t.range(f"cycle {c}", b * U, None if last and how in ("open", "before verify") else (b + 300) * U, pid=pid)
        t.range("draft", b * U, (b + 100) * U, pid=pid)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=pid), (b + 20) * U, (b + 80) * U, pid=pid)
        if last and how == "before verify":
            continue
        t.range("verify", (b + 100) * U, None if last and how == "open" else (b + 300) * U, pid=pid)
        call = t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid)
        if not last:
            t.kernel(call, (b + 120) * U, (b + 280) * U, pid=pid, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if collective else "k")
            if later_us:
                t.kernel(t.call("cudaLaunchKernel", (b + 114) * U, (b + 116) * U, pid=pid), (b + 280) * U, (b + 280 + later_us) * U, pid=pid)
    return t


@pytest.mark.parametrize("cycle_ranges, how", [(True, "open"), (False, "open"), (True, "unrun"), (False, "unrun"), (True, "before verify")])
def test_a_cycle_the_capture_ended_inside_is_kept_marked_and_left_out_of_the_medians(tmp_path, cycle_ranges, how):
    # GIVEN 4 cycles, the capture ending inside the last: inside its verify (ranges never
    # closed), or after its ranges closed but before verify's kernel ran (its launch has no
    # GPU work in the trace), or after its draft, before its verify began (its cycle range
    # never closed; without cycle ranges nothing tells that cycle from a short one: not here)
    path = cut_in_cycle(4, cycle_ranges, how=how).write(tmp_path / "t.sqlite")
    # WHEN analysed
    (rank,) = load([path], PHASES).ranks
    # THEN every cycle is kept, the last marked incomplete (and not warm-up)
    cycles = rank.cycles.to_pydict()
    assert cycles["cycle"] == [0, 1, 2, 3] and cycles["incomplete"] == [False, False, False, True] and not any(cycles["warmup"])
    # and the report counts the 3 whole cycles only: verify 0.200 ms in each (its events), where
    # the last cycle's verify read short (or was missing)
    res = run_cli("report", str(path), *ARGS, "--json")
    (r,) = json.loads(res.stdout)["ranks"]
    assert r["cycles"]["n"] == 3 and r["cycles"]["n_incomplete"] == 1 and r["cycles"]["n_warmup"] == 0
    assert r["cycles"]["gpu_ms_median"] == pytest.approx(0.300)
    assert {p["phase"]: (p["n"], p["gpu_ms_median"]) for p in r["phases"]} == {"draft": (3, pytest.approx(0.100)), "verify": (3, pytest.approx(0.200))}
    text = run_cli("report", str(path), *ARGS)
    assert "1 incomplete cycle(s) left out (not whole in the trace)" in " ".join(text.stdout.split())


def test_whole_cycles_are_never_marked_incomplete(tmp_path):
    # GIVEN 3 whole cycles, and 4 cycles (no cycle ranges) of which the last ran only its draft,
    # every range closed and every kernel launched run
    t = FakeTrace().phase_cycles(("draft", "verify"), cycles=3)
    short = cut_in_cycle(4, cycle_ranges=False, how="before verify")
    # WHEN analysed
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PHASES).ranks
    (four,) = load([short.write(tmp_path / "four.sqlite")], PHASES).ranks
    # THEN no cycle is incomplete: a step that ran fewer phases is no sign of the capture's end
    assert rank.cycles["incomplete"].to_pylist() == [False] * 3
    assert four.cycles["incomplete"].to_pylist() == [False] * 4


def test_a_helper_process_whose_last_launch_never_ran_marks_no_cycle_of_the_worker(tmp_path):
    # GIVEN two rank files; rank 0's holds its worker (pid 10: 5 whole cycles, the capture
    # ending inside a sixth) and a helper process (pid 11) whose last launch, at 1.5 ms, put
    # no op in the trace (its own tail); rank 1's a worker of its own
    t = cut_in_cycle(6, how="open")
    t.kernel(t.call("cudaLaunchKernel", 500 * U, 502 * U, pid=11), 505 * U, 600 * U, pid=11)
    t.call("cudaLaunchKernel", 1500 * U, 1502 * U, pid=11)
    paths = [t.write(tmp_path / "rank0.sqlite"), cut_in_cycle(6, pid=20).write(tmp_path / "rank1.sqlite")]
    # WHEN analysed
    rank0 = load(paths, PHASES).ranks[0]
    # THEN only the worker's last cycle, cut inside its verify, is incomplete: the helper's
    # launch came before the worker's later launches ran (the capture went on)
    assert rank0.cycles["incomplete"].to_pylist() == [False] * 5 + [True]


def test_a_range_never_closed_mid_run_marks_its_cycle_incomplete(tmp_path):
    # GIVEN 5 cycles whose cycle 2's verify range (start/end) never closed, the run going on
    t = FakeTrace()
    for c in range(5):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 100) * U, None if c == 2 else (b + 300) * U, push_pop=False)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 280) * U)
    # WHEN analysed
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PHASES).ranks
    # THEN that cycle is incomplete (its verify runs to the trace's end), the others are not
    assert rank.cycles["incomplete"].to_pylist() == [False, False, True, False, False]


def test_a_capture_whose_only_cycle_was_cut_says_why_nothing_is_counted(tmp_path):
    # GIVEN a capture holding one cycle, cut inside its verify
    path = cut_in_cycle(1).write(tmp_path / "t.sqlite")
    # WHEN reported
    res = run_cli("report", str(path), "--phase", "draft", "--phase", "verify")
    # THEN it succeeds and says that its one cycle was left out (not an empty table alone)
    assert res.returncode == 0, res.stderr
    assert "cycles: none counted; 1 incomplete cycle(s) left out (not whole in the trace)" in " ".join(res.stdout.split())


def test_a_rank_whose_capture_went_on_is_no_straggler_in_the_cycle_anothers_capture_cut(tmp_path):
    # GIVEN two rank files of one run, each 4 cycles whose verify is an all-reduce (reached
    # together), rank 1 running a 10-us kernel after it; rank 0's capture ended inside
    # cycle 3 (its all-reduce not in the trace), rank 1's went on (its cycle 3 whole: 5 cycles
    # written, the fifth cut)
    paths = [cut_in_cycle(4, pid=100, collective=True).write(tmp_path / "rank0.sqlite"),
             cut_in_cycle(5, pid=101, collective=True, later_us=10).write(tmp_path / "rank1.sqlite")]
    # WHEN reported
    doc = json.loads(run_cli("report", *map(str, paths), *ARGS, "--json").stdout)
    # THEN rank 0 counts 3 cycles, rank 1 4 (each leaves its own incomplete one out), and the
    # critical path counts cycles 0-2 only, rank 1 last to finish in each: no rank gated or
    # ended last in cycle 3, which rank 0's capture cut (before: 4 cycles, rank 1 "last to
    # finish" in cycle 3)
    assert [(r["cycles"]["n"], r["cycles"]["n_incomplete"]) for r in doc["ranks"]] == [(3, 1), (4, 1)]
    assert doc["critical_path"]["rank_counts"] == {"1": 3}


def test_ranks_numbering_cycles_apart_leave_out_the_same_cycle_of_the_run(tmp_path):
    # GIVEN two rank files of one run on one clock, 5 cycles of it (b = 1000c); rank 1's capture
    # began a cycle later (its cycle 0 is the run's cycle 1) and both ended inside the run's
    # cycle 4; rank 1 reaches every all-reduce late (its draft kernel runs to b+130, rank 0's
    # all-reduce waits for it from b+115)
    paths = []
    for r, first in ((0, 0), (1, 1)):
        t = FakeTrace()
        for c in range(first, 5):
            b, last = 1000 * c, c == 4
            t.range(f"cycle {c - first}", b * U, None if last else (b + 300) * U, pid=100 + r)
            t.range("draft", b * U, (b + 100) * U, pid=100 + r)
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=100 + r), (b + 20) * U, (b + (130 if r else 80)) * U, pid=100 + r)
            t.range("verify", (b + 100) * U, None if last else (b + 300) * U, pid=100 + r)
            call = t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=100 + r)
            if not last:
                t.kernel(call, (b + (130 if r else 115)) * U, (b + 280) * U, pid=100 + r, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        paths.append(t.write(tmp_path / f"rank{r}.sqlite"))
    # WHEN reported
    doc = json.loads(run_cli("report", *map(str, paths), *ARGS, "--json").stdout)
    # THEN the critical path counts the run's cycles 1-3, those both ranks have whole (rank 1's
    # incomplete cycle 3 is the run's 4, not rank 0's 3): rank 1 gated all three
    assert [(r["cycles"]["n"], r["cycles"]["n_incomplete"]) for r in doc["ranks"]] == [(4, 1), (3, 1)]
    assert doc["critical_path"]["rank_counts"].get("1") == 3


def test_one_ranks_unrun_tail_counts_whatever_another_rank_of_the_file_launched_later(tmp_path):
    # GIVEN one file of two ranks (pid 10 on GPU 0, pid 20 on GPU 1, 150 us later), 4 cycles
    # each (see the module doc); pid 10's last verify launch (3110 us) has no kernel in the
    # trace, while pid 20 launched until 3262 us, every kernel recorded
    t = FakeTrace()
    for pid, dev, off in ((10, 0, 0), (20, 1, 150)):
        for c in range(4):
            b = 1000 * c + off
            t.range(f"cycle {c}", b * U, (b + 300) * U, pid=pid)
            t.range("draft", b * U, (b + 100) * U, pid=pid)
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=pid), (b + 20) * U, (b + 80) * U, pid=pid, device=dev)
            t.range("verify", (b + 100) * U, (b + 300) * U, pid=pid)
            call = t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid)
            if not (c == 3 and pid == 10):
                t.kernel(call, (b + 120) * U, (b + 280) * U, pid=pid, device=dev)
    # WHEN analysed
    ranks = load([t.write(tmp_path / "t.sqlite")], PHASES).ranks
    # THEN pid 10's last cycle is incomplete (its capture ended before that verify's work was
    # recorded: another rank's later launches say nothing of it), and none of pid 20's
    got = {int(r.phases["pid"][0].as_py()): r.cycles["incomplete"].to_pylist() for r in ranks}
    assert got == {10: [False, False, False, True], 20: [False] * 4}


def test_a_phase_range_never_closed_marks_its_own_threads_cycle_beside_anothers_cycles(tmp_path):
    # GIVEN one process whose threads run cycles of their own: thread 1 cycle c [b, b+300] with
    # draft [b, b+100] and verify [b+100, b+300] (b = 1000c), whose cycle 2 verify (a start/end
    # range) never closes; thread 2 cycle c [b+50, b+80] with draft2 inside
    t = FakeTrace()
    for c in range(5):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=1)
        t.range("draft", b * U, (b + 100) * U, tid=1)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, tid=1), (b + 20) * U, (b + 80) * U)
        t.range("verify", (b + 100) * U, None if c == 2 else (b + 300) * U, tid=1, push_pop=c != 2)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=1), (b + 120) * U, (b + 280) * U)
        t.range(f"cycle {c}", (b + 50) * U, (b + 80) * U, tid=2)
        t.range("draft2", (b + 50) * U, (b + 80) * U, tid=2)
        t.kernel(t.call("cudaLaunchKernel", (b + 55) * U, (b + 57) * U, tid=2), (b + 60) * U, (b + 70) * U, stream=9)
    # WHEN analysed
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "draft2"), skip_cycles=0)).ranks
    # THEN thread 1's cycle 2 (the cycle range holding the open verify's start, [2000, 2300]) is
    # incomplete and no other is: thread 2's cycle 2 began later ([2050, 2080]) but ended before
    by_start = sorted((c["cpu_start_ns"] // U, c["incomplete"]) for c in rank.cycles.to_pylist())
    assert [s for s, k in by_start if k] == [2000]


@pytest.mark.parametrize("version, trigger_note, incomplete", [("2022.4.2.1", False, True), ("2025.3.2.0", False, False), ("2022.4.2.1", True, False)])
def test_a_range_ending_at_the_captures_end_is_never_closed_in_nsys_2022(tmp_path, version, trigger_note, incomplete):
    # GIVEN three cycles whose last cycle range ends at the capture's very end, 5 ms after its
    # verify (ANALYSIS_DETAILS.duration): nsys 2022.4's end for a range still open when the
    # capture stopped (an engine that never ended it); in a later nsys, or where an NVTX range
    # stopped the capture (nsys notes it: that range's own end is there), a range closed then
    import sqlite3

    t = FakeTrace()
    t.meta["EXPORT_PRODUCT_VERSION"] = version
    for c in range(3):
        b = 1000 * c
        end = 8000 if c == 2 else b + 300
        t.range(f"cycle {c}", b * U, end * U)
        t.range("draft", b * U, (b + 100) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
        t.range("verify", (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 280) * U)
    if trigger_note:
        t.sid("Stopping the profiling session using NVTX trigger.")
    path = t.write(tmp_path / "t.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("create table ANALYSIS_DETAILS (globalVid integer, duration integer, startTime integer, stopTime integer)")
        db.execute("insert into ANALYSIS_DETAILS values (1, ?, 0, ?)", (8000 * U, 8000 * U))
    # WHEN analysed THEN under nsys 2022 that cycle is incomplete, left out of the medians (a
    # 6.3 ms CPU cycle among 0.3 ms ones otherwise), and whole elsewhere
    analysis = load([str(path)], PHASES)
    cycles = analysis.ranks[0].cycles.to_pylist()
    assert [c["incomplete"] for c in cycles] == [False, False, incomplete]
    assert any("never closed" in w for w in analysis.warnings) == incomplete
