"""A phase name with several instances in one cycle (a name several ranges map to, a step run
several times a cycle) is summarised per cycle: what CUDA events at its start and end would read
less what other phases held between, added up; hand-computed tables and traces."""

from __future__ import annotations

import pyarrow as pa
import pytest

from nsys_factory import FakeTrace
from tracerecon import schema
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.phases import phases_per_cycle
from tracerecon.analysis.summary import summarize_phases
from tracerecon.api import load

U = 1000


def phases_table(rows: list[dict]) -> pa.Table:
    zero = {f.name: 0 for f in schema.PHASES}
    zero.update(rank=0, pid=10, tid=10, attribution="same_thread", verdict="agree", cause="none", device_id=0, stream_id=7)
    full = [dict(zero, phase_id=i, range_id=i, **r) for i, r in enumerate(rows)]
    return pa.Table.from_pylist(full, schema=schema.PHASES)


def test_instances_of_one_name_in_a_cycle_fold_into_one():
    # GIVEN cycle 0: verify A (CPU 0-100, GPU boundaries 0-200, ops 10-190, 3 ops), draft
    # (CPU 100-150, GPU 200-260), verify B (CPU 150-250, GPU 260-290, ops 262-288, 1 op);
    # cycle 1: verify alone (CPU 1000-1100, GPU 1000-1105)
    rows = [
        dict(cycle=0, phase="verify", cpu_start_ns=0, cpu_end_ns=100, cpu_ns=100, gpu_start_ns=10, gpu_end_ns=190, gpu_span_ns=180,
             gpu_busy_ns=150, gpu_boundary_start_ns=0, gpu_boundary_end_ns=200, gpu_ns=200, error_ns=-100, n_gpu_ops=3, n_kernels=3, overrun_ns=90),
        dict(cycle=0, phase="draft", cpu_start_ns=100, cpu_end_ns=150, cpu_ns=50, gpu_start_ns=205, gpu_end_ns=255, gpu_span_ns=50,
             gpu_busy_ns=50, gpu_boundary_start_ns=200, gpu_boundary_end_ns=260, gpu_ns=60, error_ns=-10, n_gpu_ops=1, n_kernels=1, overrun_ns=105),
        dict(cycle=0, phase="verify", cpu_start_ns=150, cpu_end_ns=250, cpu_ns=100, gpu_start_ns=262, gpu_end_ns=288, gpu_span_ns=26,
             gpu_busy_ns=26, gpu_boundary_start_ns=260, gpu_boundary_end_ns=290, gpu_ns=30, error_ns=70, n_gpu_ops=1, n_kernels=1, overrun_ns=38),
        dict(cycle=1, phase="verify", cpu_start_ns=1000, cpu_end_ns=1100, cpu_ns=100, gpu_start_ns=1001, gpu_end_ns=1104, gpu_span_ns=103,
             gpu_busy_ns=103, gpu_boundary_start_ns=1000, gpu_boundary_end_ns=1105, gpu_ns=105, error_ns=-5, n_gpu_ops=1, n_kernels=1, overrun_ns=4),
    ]
    # WHEN folded per cycle
    out = phases_per_cycle(phases_table(rows)).to_pylist()
    # THEN cycle 0's verify is one row: CPU 200, GPU 230 (200 + 30, not the 290 its boundaries
    # span: draft's 60 is draft's), ops 10-288, its spans 180 + 26 = 206 (draft's op between them
    # is not verify's), busy 176, 4 ops, overrun 288 - 250; error -30 is within max(10 us,
    # 10 %): agree
    assert [(r["cycle"], r["phase"]) for r in out] == [(0, "verify"), (0, "draft"), (1, "verify")]
    v = out[0]
    assert (v["cpu_start_ns"], v["cpu_end_ns"], v["cpu_ns"]) == (0, 250, 200)
    assert (v["gpu_boundary_start_ns"], v["gpu_boundary_end_ns"], v["gpu_ns"], v["error_ns"]) == (0, 290, 230, -30)
    assert (v["gpu_start_ns"], v["gpu_end_ns"], v["gpu_span_ns"], v["gpu_busy_ns"]) == (10, 288, 206, 176)
    assert (v["n_gpu_ops"], v["n_kernels"], v["overrun_ns"], v["verdict"]) == (4, 4, 38, "agree")
    assert out[1] == dict(rows[1], **{k: out[1][k] for k in out[1] if k not in rows[1]})  # draft as it was
    assert out[2]["gpu_ns"] == 105 and out[2]["cpu_ns"] == 100


@pytest.mark.parametrize("cycle_ranges", [True, False])
def test_a_phase_two_ranges_map_to_reads_per_cycle_in_the_report(tmp_path, cycle_ranges):
    # GIVEN three cycles (b = 1000c us) on one stream, in vLLM V1's order: forward [b, b+100]
    # launches a kernel running b+10..b+300; sample [b+100, b+150] one running b+300..b+320;
    # draft [b+150, b+200] one running b+320..b+370; --phase verify maps both forward and
    # sample; with cycle ranges, or without (a cycle starts at each forward)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        if cycle_ranges:
            t.cycle(c, b * U, (b + 100) * U, (b + 150) * U, (b + 200) * U, names=("forward", "sample", "draft"))
        else:
            for name, lo, hi in (("forward", b, b + 100), ("sample", b + 100, b + 150), ("draft", b + 150, b + 200)):
                t.range(name, lo * U, hi * U)
        for at, (s, e) in ((b + 10, (b + 10, b + 300)), (b + 110, (b + 300, b + 320)), (b + 160, (b + 320, b + 370))):
            k = t.call("cudaLaunchKernel", at * U, (at + 2) * U)
            t.kernel(k, s * U, e * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify=re:^(forward|sample)$", "draft"), cycle_prefix="cycle")).ranks
    # WHEN summarised
    by = {p.phase: p for p in summarize_phases(rank.phases, ("verify", "draft"), rank.cycles)}
    # THEN verify is, per cycle, forward's 0..300 plus sample's 300..320: 0.32 ms GPU, CPU
    # 0.1 + 0.05 = 0.15 ms, in 3 cycles; draft 320..370: 0.05 ms
    assert (by["verify"].n, by["verify"].gpu_ms_median, by["verify"].cpu_ms_median) == (3, 0.32, 0.15)
    assert (by["draft"].n, by["draft"].gpu_ms_median) == (3, 0.05)
    # and the phases table keeps every instance
    assert rank.phases["phase"].to_pylist().count("verify") == 6
    # and the terminal UI's detail of the phase reads per cycle too
    from tracerecon.analysis.detail import phase_detail

    d = phase_detail(rank.phases, rank.gpu_ops, rank.syncs, phase="verify", cycles=rank.cycles)
    assert (d.title, d.gpu_ms, d.cpu_ms) == ("verify (all 3 cycles, 6 ranges)", 0.32, 0.15)


def test_diff_counts_cycles_and_says_when_a_phase_is_only_in_left_out_cycles():
    # GIVEN side A with verify in cycles 0 and 1 (two ranges in cycle 0: 200 + 30 us GPU; 105 in
    # cycle 1), side B whose verify ranges are all in cycles it leaves out (none counted)
    from tracerecon.analysis.diff import diff_rank

    a = phases_table([
        dict(cycle=0, phase="verify", cpu_ns=100 * U, gpu_ns=200 * U, gpu_boundary_start_ns=0, gpu_boundary_end_ns=200 * U),
        dict(cycle=0, phase="verify", cpu_ns=100 * U, gpu_ns=30 * U, gpu_boundary_start_ns=260 * U, gpu_boundary_end_ns=290 * U),
        dict(cycle=1, phase="verify", cpu_ns=100 * U, gpu_ns=105 * U, gpu_boundary_start_ns=1000 * U, gpu_boundary_end_ns=1105 * U),
    ])
    empty = phases_table([]).slice(0, 0)
    ops = pa.table({"phase_id": pa.array([], pa.int64())})
    # WHEN diffed (B's phase names in every cycle: verify)
    (d,) = diff_rank(0, a, ops, empty, ops, ("verify",), ({"verify"}, {"verify"}))
    # THEN A counts 2 cycles, median of 230 and 105 us; the line says B left its verify out
    assert d.a.n == 2 and d.a.gpu_ms == 0.1675
    assert d.explanation == "verify: only in cycles B leaves out (warm-up, --skip-cycles); A: 2 cycles, GPU 0.168 ms"


def step_cycles(t: FakeTrace, period: int, edges: tuple[int, ...], names: tuple[str, ...], kernels: tuple, n: int = 3, tid: int | None = None,
                stream: int = 7, shift: int = 0) -> None:
    """``n`` cycles (b = period * c + shift us): a cycle range over ``edges`` (us after b) with the
    phase ranges ``names`` between them, and per (launch at, (start, end)) of ``kernels`` (us
    after b) a kernel launched in a 2 us call on ``stream``."""
    for c in range(n):
        b = c * period + shift
        t.cycle(c, *((b + e) * U for e in edges), names=names, tid=tid)
        for at, (lo, hi) in kernels:
            t.kernel(t.call("cudaLaunchKernel", (b + at) * U, (b + at + 2) * U, tid=tid), (b + lo) * U, (b + hi) * U, stream=stream)


# forward [b, b+100] (kernel b+10..b+300), postprocess [b+100, b+310] (b+300..b+305), draft
# [b+310, b+400] (b+315..b+390)
FORWARD_POSTPROCESS_EDGES = (0, 100, 310, 400)
FORWARD_POSTPROCESS_KERNELS = ((5, (10, 300)), (105, (300, 305)), (312, (315, 390)))


def test_a_folded_phase_queued_behind_another_keeps_its_cause(tmp_path):
    # GIVEN cycles (b = 2000c us): verify A [b, b+100] (kernel b+10..b+100), draft [b+100, b+200]
    # (kernel b+110..b+1100), sample [b+200, b+300] mapped to verify too (kernel launched
    # b+205, queued behind draft's: b+1100..b+1150)
    t = FakeTrace()
    step_cycles(t, 2000, (0, 100, 200, 300), ("verify", "draft", "sample"), ((5, (10, 100)), (105, (110, 1100)), (205, (1100, 1150))))
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify", "verify=sample", "draft"))).ranks
    # WHEN summarised
    by = {p.phase: p for p in summarize_phases(rank.phases, ("verify", "draft"), rank.cycles)}
    # THEN per cycle verify reads 100 + 50 us GPU, CPU 200, spans 90 + 50, busy 140 (never
    # idle: no launch_bound), and its CPU timer over-reports because its second part waited
    # 900 us behind draft: queued_behind
    v = by["verify"]
    assert (v.n, v.gpu_ms_median, v.cpu_ms_median, v.gpu_span_ms_median, v.gpu_busy_ms_median) == (3, 0.15, 0.2, 0.14, 0.14)
    assert v.verdicts == {"over": 3} and v.causes == {"queued_behind": 3}


def test_overlapping_ranges_of_one_phase_count_their_cpu_time_once():
    # GIVEN cycle 0's verify as two ranges open at once (0..200 and 100..300: start/end ranges,
    # or two threads), GPU 200 + 120
    # (the first range's ops 10..200 and 200..320; the second's 200..320, the kernel launched
    # while both were open, which each range's projection holds)
    rows = [
        dict(cycle=0, phase="verify", cpu_start_ns=0, cpu_end_ns=200 * U, cpu_ns=200 * U, gpu_ns=200 * U,
             gpu_boundary_start_ns=0, gpu_boundary_end_ns=200 * U, n_gpu_ops=2, gpu_start_ns=10 * U, gpu_end_ns=320 * U,
             gpu_span_ns=310 * U, gpu_busy_ns=310 * U),
        dict(cycle=0, phase="verify", cpu_start_ns=100 * U, cpu_end_ns=300 * U, cpu_ns=200 * U, gpu_ns=120 * U,
             gpu_boundary_start_ns=200 * U, gpu_boundary_end_ns=320 * U, n_gpu_ops=1, gpu_start_ns=200 * U, gpu_end_ns=320 * U,
             gpu_span_ns=120 * U, gpu_busy_ns=120 * U),
    ]
    # WHEN folded THEN its CPU time is the 300 us some range of it was open, GPU 320: agree; its
    # span the 310 us from its first op to its last, its busy time no more than that
    (v,) = phases_per_cycle(phases_table(rows)).to_pylist()
    assert (v["cpu_ns"], v["gpu_ns"], v["verdict"]) == (300 * U, 320 * U, "agree")
    assert (v["gpu_span_ns"], v["gpu_busy_ns"]) == (310 * U, 310 * U)


def test_the_worst_cycle_is_worst_per_cycle():
    # GIVEN cycle 0's verify as two ranges whose timers miss by +100 and -100 us (together: CPU
    # 200, GPU 200), cycle 1's one range missing by 50 us
    from tracerecon.analysis.summary import worst_cycle

    rows = [
        dict(cycle=0, phase="verify", cpu_start_ns=0, cpu_end_ns=200 * U, cpu_ns=200 * U, gpu_ns=100 * U, error_ns=100 * U,
             gpu_boundary_start_ns=0, gpu_boundary_end_ns=100 * U),
        dict(cycle=0, phase="verify", cpu_start_ns=200 * U, cpu_end_ns=200 * U, cpu_ns=0, gpu_ns=100 * U, error_ns=-100 * U,
             gpu_boundary_start_ns=100 * U, gpu_boundary_end_ns=200 * U),
        dict(cycle=1, phase="verify", cpu_start_ns=1000 * U, cpu_end_ns=1100 * U, cpu_ns=100 * U, gpu_ns=150 * U, error_ns=-50 * U,
             gpu_boundary_start_ns=1000 * U, gpu_boundary_end_ns=1150 * U),
    ]
    # WHEN the worst cycle is asked for THEN it is cycle 1: cycle 0's phase took what its timer said
    assert worst_cycle(phases_table(rows)) == 1


def test_without_cycle_ranges_a_phase_under_alternating_names_starts_each_cycle(tmp_path):
    # GIVEN six steps without cycle ranges (b = 1000s us): a forward range, forward_extend in
    # step 0 and forward_decode after (both verify), b..b+300 with a kernel b+10..b+300; then
    # draft b+300..b+400 (kernel b+310..b+400)
    t = FakeTrace()
    for step in range(6):
        b = step * 1000
        t.range("forward_extend" if step == 0 else "forward_decode", b * U, (b + 300) * U)
        t.range("draft", (b + 300) * U, (b + 400) * U)
        for at, (s, e) in ((b + 5, (b + 10, b + 300)), (b + 305, (b + 310, b + 400))):
            t.kernel(t.call("cudaLaunchKernel", at * U, (at + 2) * U), s * U, e * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify=re:^forward_(extend|decode)$", "draft"), skip_cycles=0)).ranks
    # THEN each step is a cycle (its first range's name is on 1 of 6 verify ranges: the phase
    # starts cycles, not the name): 6 cycles of 0.4 ms, verify 0.3 and draft 0.1 ms in each
    assert rank.cycles.num_rows == 6 and set(rank.cycles["gpu_ns"].to_pylist()) == {400 * U}
    assert rank.phases["cycle"].to_pylist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_a_folded_phase_waiting_behind_its_own_earlier_range_is_not_queued(tmp_path):
    # GIVEN cycles (b = 1000c us): forward [b, b+100] (kernel b+10..b+300) and postprocess
    # [b+100, b+310] (kernel b+300..b+305), both verify; draft [b+310, b+400] (b+315..b+390)
    t = FakeTrace()
    step_cycles(t, 1000, FORWARD_POSTPROCESS_EDGES, ("forward", "postprocess", "draft"), FORWARD_POSTPROCESS_KERNELS)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify=forward", "verify=postprocess", "draft"))).ranks
    # THEN verify reads b..b+310 per cycle, as its CPU timers add up (310): agree, and nothing of
    # it waited behind another phase (postprocess waited 200 us behind forward: verify's own)
    by = {p.phase: p for p in summarize_phases(rank.phases, ("verify", "draft"), rank.cycles)}
    assert (by["verify"].gpu_ms_median, by["verify"].cpu_ms_median) == (0.31, 0.31)
    assert by["verify"].verdicts == {"agree": 3} and by["verify"].causes == {"none": 3}


@pytest.mark.parametrize("names", [("draft_0", "draft_1", "draft_2"), ("draft_first", "draft_next", "draft_next")])
def test_without_cycle_ranges_a_phase_of_several_steps_starts_one_cycle(tmp_path, names):
    # GIVEN six steps without cycle ranges (b = 1000s us): three draft ranges of 50 us each (both
    # draft: a pattern maps them), then verify b+150..b+400; a kernel fills each range
    t = FakeTrace()
    for step in range(6):
        b = step * 1000
        for k, name in enumerate(names):
            t.range(name, (b + 50 * k) * U, (b + 50 * k + 50) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 50 * k) * U, (b + 50 * k + 1) * U), (b + 50 * k + 2) * U, (b + 50 * k + 50) * U)
        t.range("verify", (b + 150) * U, (b + 400) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 150) * U, (b + 151) * U), (b + 152) * U, (b + 400) * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft=re:^draft_", "verify"), skip_cycles=0)).ranks
    # THEN each step is a cycle of 400 us: draft 150, verify 250
    assert rank.cycles["gpu_ns"].to_pylist() == [400 * U] * 6
    by = {p.phase: p for p in summarize_phases(rank.phases, ("draft", "verify"), rank.cycles)}
    assert (by["draft"].n, by["draft"].gpu_ms_median, by["verify"].gpu_ms_median) == (6, 0.15, 0.25)


def test_a_folded_phase_on_two_threads_is_not_queued_behind_the_other_threads_range(tmp_path):
    # GIVEN the forward / postprocess case on two threads (10 and 11) of one process, thread 11
    # a microsecond later each time, each thread on its own stream
    t = FakeTrace()
    for tid, stream, d in ((10, 7, 0), (11, 9, 1)):
        step_cycles(t, 1000, FORWARD_POSTPROCESS_EDGES, ("forward", "postprocess", "draft"), FORWARD_POSTPROCESS_KERNELS, tid=tid, stream=stream, shift=d)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify=forward", "verify=postprocess", "draft"))).ranks
    # THEN as on one thread: verify agrees with its timers and waited behind no other phase
    by = {p.phase: p for p in summarize_phases(rank.phases, ("verify", "draft"), rank.cycles)}
    assert by["verify"].verdicts == {"agree": by["verify"].n} and by["verify"].causes == {"none": by["verify"].n}


def test_without_cycle_ranges_a_warm_up_prefill_seen_first_decides_no_cycle(tmp_path):
    # GIVEN a warm-up prefill step first (forward_extend as verify, then draft_extend), then six
    # decode steps (b = 1000 + 1000s us): draft b..b+20 (kernel b+5..b+105), target_verify as
    # verify b+20..b+40 (b+105..b+305), draft_extend b+40..b+60 (b+305..b+355); the GPU idles
    # ~645 us after each step; phases given as draft, verify, draft_extend
    t = FakeTrace()
    t.range("forward_extend", 0, 20 * U)
    t.kernel(t.call("cudaLaunchKernel", 1 * U, 2 * U), 5 * U, 300 * U)
    t.range("draft_extend", 20 * U, 40 * U)
    t.kernel(t.call("cudaLaunchKernel", 21 * U, 22 * U), 300 * U, 350 * U)
    for step in range(6):
        b = 1000 + 1000 * step
        for name, lo, (s, e) in (("draft", b, (b + 5, b + 105)), ("target_verify", b + 20, (b + 105, b + 305)), ("draft_extend", b + 40, (b + 305, b + 355))):
            t.range(name, lo * U, (lo + 20) * U)
            t.kernel(t.call("cudaLaunchKernel", (lo + 1) * U, (lo + 2) * U), s * U, e * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify=re:^(forward_extend|target_verify)$", "draft_extend"),
                                                                 skip_cycles=0)).ranks
    # THEN cycles start at draft: six of 355 us (the prefill before the first draft is in none),
    # draft_extend 50 us each, not 50 us plus the idle gap before the next draft
    assert rank.cycles["gpu_ns"].to_pylist() == [355 * U] * 6
    by = {p.phase: p for p in summarize_phases(rank.phases, ("draft", "verify", "draft_extend"), rank.cycles)}
    assert (by["draft"].gpu_ms_median, by["verify"].gpu_ms_median, by["draft_extend"].gpu_ms_median) == (0.105, 0.2, 0.05)


def test_without_cycle_ranges_work_between_cycles_is_said(tmp_path):
    # GIVEN vLLM V1's scopes without cycle ranges, six steps (b = 1000s us): preprocess
    # b..b+20 (copies b+5..b+105, in no phase), forward b+20..b+40 (b+105..b+305), draft
    # b+40..b+60 (b+305..b+355), bookkeep b+60..b+80 (b+355..b+455, in no phase)
    t = FakeTrace()
    for step in range(6):
        b = 1000 * step
        for name, lo, (s, e) in (("gpu_model_runner: preprocess", b, (b + 5, b + 105)), ("gpu_model_runner: forward", b + 20, (b + 105, b + 305)),
                                 ("gpu_model_runner: draft", b + 40, (b + 305, b + 355)), ("gpu_model_runner: bookkeep", b + 60, (b + 355, b + 455))):
            t.range(name, lo * U, (lo + 20) * U)
            t.kernel(t.call("cudaLaunchKernel", (lo + 1) * U, (lo + 2) * U), s * U, e * U)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify=gpu_model_runner: forward", "draft=gpu_model_runner: draft")))
    # THEN the 100 us after draft and the next step's 100 us before forward are said: 200 us in
    # each of the 5 cycles that have a next one
    assert any("between cycles after its last phase ('draft') in 5 of 6 cycles, 0.200 ms" in w for w in a.warnings), a.warnings


def kernel_at(t: FakeTrace, at_us: int, gpu_us: tuple[int, int]) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U), gpu_us[0] * U, gpu_us[1] * U, stream=7)


def test_without_cycle_ranges_a_step_lacking_the_first_phase_is_a_cycle_of_its_own(tmp_path):
    # GIVEN no cycle ranges; a step every 1000 us (s): a [s, s+100] (kernel s+20..300), b
    # [s+100, s+150] (nothing), c [s+150, s+250] (kernel s+300..400); but step 2 has no a (a
    # prefill step with no draft: b runs a kernel s+120..200), and the engine idles ~750 us
    # between steps
    t = FakeTrace()
    for step in range(5):
        s = 1000 * step
        if step != 2:
            t.range("a", s * U, (s + 100) * U)
            kernel_at(t, s + 10, (s + 20, s + 300))
        else:
            kernel_at(t, s + 110, (s + 120, s + 200))
        t.range("b", (s + 100) * U, (s + 150) * U)
        t.range("c", (s + 150) * U, (s + 250) * U)
        kernel_at(t, s + 160, (s + 300, s + 400))
    # WHEN analysed with a, b, c (a starts cycles)
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b", "c"))).ranks[0]
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]
    # THEN step 2 is a cycle of its own (b 2100..done(2150) = 2200, c 2200..2400), and step 1's c
    # ends at its own end (done(1250) = 1400: 100 us), not at step 2's b, 750 us of idle later
    want = []
    for step in range(5):
        want += [(step, "a", 300), (step, "b", 0), (step, "c", 100)] if step != 2 else [(2, "b", 100), (2, "c", 200)]
    assert got == want


def test_without_cycle_ranges_a_step_lacking_the_first_phase_is_found_however_many_it_runs_elsewhere(tmp_path):
    # GIVEN no cycle ranges; a step every 1000 us (s) that drafts k = 2, 4, 1, 0, 3 times: each
    # draft a 50 us range (kernel +10..+40), then b [x, x+50] (x = s + 50k; kernel x+10..x+200)
    # and c [x+50, x+150] (kernel x+200..x+300); the step with no draft is like a prefill step
    t = FakeTrace()
    drafts = (2, 4, 1, 0, 3)
    for step, k in enumerate(drafts):
        s = 1000 * step
        for i in range(k):
            t.range("a", (s + 50 * i) * U, (s + 50 * i + 50) * U)
            kernel_at(t, s + 50 * i + 5, (s + 50 * i + 10, s + 50 * i + 40))
        x = s + 50 * k
        t.range("b", x * U, (x + 50) * U)
        kernel_at(t, x + 5, (x + 10, x + 200))
        t.range("c", (x + 50) * U, (x + 150) * U)
        kernel_at(t, x + 60, (x + 200, x + 300))
    # WHEN analysed with a, b, c (a starts cycles)
    rank = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b", "c"))).ranks[0]
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]
    # THEN five cycles, one per step: each draft 50 us, b from its start to its kernel's end
    # (200), c from there to its kernel's end (100); the step without a draft is cycle 3, not
    # the tail of cycle 2 (the most common number of phases a step runs, drafts counted, was
    # that merged step's: 1 + 2 + 2)
    want = []
    for step, k in enumerate(drafts):
        want += [(step, "a", 50)] * k + [(step, "b", 200), (step, "c", 100)]
    assert got == want


def _steps_trace(steps: list[list[str]]) -> FakeTrace:
    """One thread, no cycle ranges: each step's phase ranges 100 us each, back to back, steps
    1 ms apart, a 20 us kernel in each range."""
    t = FakeTrace()
    for n, step in enumerate(steps):
        for i, name in enumerate(step):
            at = 1000 * n + 100 * i
            t.range(name, at * U, (at + 100) * U)
            kernel_at(t, at + 5, (at + 10, at + 30))
    return t


@pytest.mark.parametrize("steps, phases", [
    # one other phase: a step with no draft is an output right after an output
    ([["draft", "output"], ["draft", "output"], ["output"], ["draft", "output"], ["draft", "output"]], ("draft", "output")),
    # a prefill step opening with a phase of its own, then the decode step's sample
    ([["draft", "sample"], ["draft", "sample"], ["prefill", "sample"], ["draft", "sample"]], ("draft", "prefill", "sample")),
    # steps without a draft after drafting ones of 1, 2 and 1 drafts, plain steps between
    ([["draft", "verify", "sample"], ["verify", "sample"], ["draft", "draft", "verify", "sample"], ["draft", "verify", "sample"],
      ["verify", "sample"], ["draft", "verify", "sample"], ["draft", "verify", "sample"]], ("draft", "verify", "sample")),
    # a step drafting 4 times beside steps without a draft: not 4 steps (the phases' totals
    # matched the 4-way split by chance: verify and sample ran 5 times each outside a warm-up)
    ([["prefill", "verify", "sample"], ["draft", "verify", "sample"], ["draft"] * 4 + ["verify", "sample"], ["verify", "sample"],
      ["verify", "sample"], ["draft", "verify", "sample"]], ("draft", "prefill", "verify", "sample")),
    # the usual step (sample, output) as common as a cut one (sample) and a merged one: the one
    # whose repeats make up the most cycles is the usual step
    ([["draft", "sample", "output"], ["sample", "output"], ["sample", "output"], ["draft", "sample", "output"], ["draft", "sample"],
      ["draft", "draft", "sample"]], ("draft", "sample", "output")),
])
def test_without_cycle_ranges_each_step_is_a_cycle_whatever_it_lacks(tmp_path, steps, phases):
    # GIVEN an engine loop's phase ranges, no cycle ranges, where some steps lack the first phase
    # WHEN analysed
    analysis = load([_steps_trace(steps).write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases))
    got = [p["cycle"] for p in sorted(analysis.ranks[0].phases.to_pylist(), key=lambda p: p["cpu_start_ns"])]
    # THEN each step is a cycle, numbered in order from the first that runs the first phase
    #      (a step before it, a warm-up prefill, in none)
    first = next(n for n, step in enumerate(steps) if phases[0] in step)
    assert got == [n - first if n >= first else None for n, step in enumerate(steps) for _ in step]
    # AND a warning counts the cycles without it, read from the phases' order alone
    lacking = sum(phases[0] not in step for step in steps[first:])
    assert any(f"{lacking} of {len(steps) - first} cycles run no {phases[0]!r}" in w and "give the loop cycle ranges" in w
               for w in analysis.warnings), analysis.warnings


def test_the_detail_of_a_phase_of_several_steps_says_how_long_its_work_ran_past_all_its_timers(tmp_path):
    # GIVEN 4 cycles (b = 2000c us) of three `draft` steps each, 300 us apart: step k's range
    # [b+300k, b+300k+100], its kernel launched at +5 running +10..+260 (stream idle before it);
    # between the steps, outside any phase, a bookkeeping kernel launched at +150 (it runs
    # +260..+265, after the step's), and a `verify` step after them
    t = FakeTrace()
    for c in range(4):
        b = 2000 * c
        t.range(f"cycle {c}", b * U, (b + 1200) * U)
        for k in range(3):
            s = b + 300 * k
            t.range("draft", s * U, (s + 100) * U)
            t.kernel(t.call("cudaLaunchKernel", (s + 5) * U, (s + 8) * U), (s + 10) * U, (s + 260) * U)
            t.kernel(t.call("cudaLaunchKernel", (s + 150) * U, (s + 153) * U), (s + 260) * U, (s + 265) * U)
        t.range("verify", (b + 1000) * U, (b + 1100) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 1005) * U, (b + 1008) * U), (b + 1010) * U, (b + 1050) * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify"), skip_cycles=0)).ranks
    from tracerecon.analysis.detail import phase_detail

    # WHEN the detail of draft (every cycle) is asked for
    d = phase_detail(rank.phases, rank.gpu_ops, rank.syncs, phase="draft", cycles=rank.cycles)
    # THEN per cycle: each step's events read 260 us (its start to its kernel's end: the
    # bookkeeping kernel is in no phase), its timer 100: the GPU 780 us against 300, and its work ran 160 us past each of three timers, 480 us
    # in all (the explanation had the last step's 160 alone, short of the 480 it explains)
    assert (d.cpu_ms, d.gpu_ms) == (0.3, 0.78)
    assert "its GPU work ran on for 0.480 ms past its timers (its ranges in a cycle taken together)" in d.explanation, d.explanation
    # and one step's own detail keeps its own overrun
    one = phase_detail(rank.phases, rank.gpu_ops, rank.syncs, phase_id=int(rank.phases["phase_id"][0].as_py()))
    assert "ran on for 0.160 ms after the timer stopped" in one.explanation, one.explanation
