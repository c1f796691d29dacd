"""vLLM V1's GPU model runner with async scheduling and EAGLE speculative decoding, an engine shape
checked per cycle against what CUDA events at each phase boundary read (``vllm_spec_model``, an
event model written from vLLM's source apart from tracerecon), and steps that end inside their
first phase (``phases.empty_steps``): ``execute_model`` with nothing scheduled returns inside its
preprocess range and samples nothing (a P/D decode instance waiting for KV, a server between
requests). Without cycle ranges those were one cycle with the next real step, whose prepare
read the whole streak (1170 us where events read 0, 44, 44, 44, 44 and 196), with no warning.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.presets import VLLM
from vllm_spec_model import U, vllm_spec

PRESET_PHASES = VLLM.phases  # what a user of `--preset vllm` reads with

VARIANTS = {
    "gpu_bound": dict(fwd=(3000,), draft_first=(400,), draft_step=(300,), sample=(120,)),
    "cpu_bound": dict(fwd=(300,), draft_first=(40,), draft_step=(30,), prep_cpu=800, sched=300, update_cpu=200),
    "rejected_varying": dict(fwd=(600, 1500, 500, 2500), sample=(40, 150, 60, 200), draft_first=(90, 200, 60, 300),
                             draft_step=(40, 250, 30, 120), prep_cpu=(300, 900, 200, 500)),
    "out_copy_lag": dict(fwd=(500,), draft_first=(80,), draft_step=(60,), out_copy=(3000,)),
    "node_mode_cpu_bound": dict(fwd=(300,), draft_first=(40,), draft_step=(30,), prep_cpu=800, node_mode=True, piecewise=True),
    "multiproc": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), multiproc=True),
    "no_draft_every4": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), no_draft_every=4, steps=16),
    "empty_every5": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), empty_every=5, steps=16),
    "empty_every5_cpu_bound": dict(fwd=(200,), draft_first=(30,), draft_step=(20,), prep_cpu=600, empty_every=5, steps=16),
    "idle_streak": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), empty_steps=tuple(range(5, 25)), steps=30),
    "idle_streak_multiproc": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), empty_steps=tuple(range(5, 25)), steps=30, multiproc=True),
    # (idle until the capture ended: the streak's last step is followed by no other; a review's case)
    "idle_tail": dict(fwd=(900,), draft_first=(100,), draft_step=(80,), empty_steps=tuple(range(10, 30)), steps=30),
}
EMPTY = {"empty_every5": 3, "empty_every5_cpu_bound": 3, "idle_streak": 20, "idle_streak_multiproc": 20, "idle_tail": 20}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_phase_of_every_step_reads_as_events_do(tmp_path, name):
    # GIVEN the model's steps (per step and phase, what events on the current stream read)
    m, truth = vllm_spec(**VARIANTS[name])
    # WHEN read with the vLLM preset's phases, no cycle ranges (vLLM has none)
    run = load([str(m.t.write(tmp_path / "t.sqlite"))], PhaseConfig(phases=PRESET_PHASES, skip_cycles=0))
    (rank,) = run.ranks
    got = defaultdict(int)
    for p in rank.phases.to_pylist():
        got[(p["cycle"], p["phase"])] += p["gpu_ns"]
    # THEN every step is a cycle and each of its phases reads the events' time within 1 us
    assert rank.cycles.num_rows == len({c for c, _ in truth})
    assert sorted(got) == sorted(truth)
    off = [(k, truth[k], got[k] / U) for k in truth if abs(got[k] - truth[k] * U) > 1000]
    assert not off, off
    # AND the steps that ran nothing are said, counted (the ones followed by another step)
    said = [w for w in run.warnings if "cycles are a lone 'prepare' during which its process launched no GPU work" in w]
    assert [w.split(": ", 1)[1].split(" cycles")[0] for w in said] == ([f"{EMPTY[name]} of {rank.cycles.num_rows}"] if name in EMPTY else [])
    # AND they, and only they, are empty cycles, left out of the medians
    assert sum(rank.cycles["empty"].to_pylist()) == EMPTY.get(name, 0)


def _steps(t: FakeTrace, plan: list[str]) -> None:
    """One thread; per step (b = 1000 * i us) its prepare [b, b+50]; a step "run" launches a
    kernel in prepare (b+10, running b+20..b+40) and has a forward [b+100, b+300] with a kernel
    (b+110, running b+120..b+280); "empty" ends there; "draft3" is three prepare ranges (b,
    b+60, b+120, each 50 us and launching a kernel) then a forward [b+200, b+300]."""
    for i, kind in enumerate(plan):
        b = 1000 * i
        if kind == "draft3":
            for j in range(3):
                s = b + 60 * j
                t.range("prepare", s * U, (s + 50) * U)
                t.kernel(t.call("cudaLaunchKernel", (s + 10) * U, (s + 12) * U), (s + 20) * U, (s + 40) * U)
            t.range("forward", (b + 200) * U, (b + 300) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U), (b + 220) * U, (b + 280) * U)
            continue
        t.range("prepare", b * U, (b + 50) * U)
        if kind == "run":
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 40) * U)
            t.range("forward", (b + 100) * U, (b + 300) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 280) * U)


def _read(t: FakeTrace, tmp_path):
    run = load([str(t.write(tmp_path / "t.sqlite"))], PhaseConfig(phases=("prepare", "forward"), skip_cycles=0))
    return run, [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist()]


def test_steps_that_ran_nothing_are_cycles_of_their_own(tmp_path):
    # GIVEN steps run, empty, empty, run, run
    t = FakeTrace()
    _steps(t, ["run", "empty", "empty", "run", "run"])
    # WHEN read
    run, got = _read(t, tmp_path)
    # THEN five cycles (by hand: each run step's prepare reads b..b+100, the forward's start; its
    # forward b+100..b+300; an empty one its own range, b..b+50, the GPU idle, and the 950 us to
    # the next step in no phase: it read 2,100 us, 1000..3100, as one prepare)
    assert got == [(0, "prepare", 100), (0, "forward", 200), (1, "prepare", 50), (2, "prepare", 50),
                   (3, "prepare", 100), (3, "forward", 200), (4, "prepare", 100), (4, "forward", 200)]
    assert any("2 of 5 cycles are a lone 'prepare'" in w for w in run.warnings)


def test_a_first_phase_run_every_step_is_one_step(tmp_path):
    # GIVEN steps whose first phase is three ranges every step (a drafter's three steps), each
    # launching work, and one step among them with nothing to run
    t = FakeTrace()
    _steps(t, ["draft3", "draft3", "empty", "draft3", "draft3"])
    # WHEN read
    run, got = _read(t, tmp_path)
    # THEN the three prepare ranges of a step stay one step's (most cycles open with three, not
    # one: the rule does not apply, and the empty step's prepare joins the next step as before)
    assert [c for c, ph, _ in got if ph == "forward"] == [0, 1, 2, 3]
    assert not any("lone 'prepare'" in w for w in run.warnings)


def test_a_step_whose_first_phase_launched_work_is_not_split(tmp_path):
    # GIVEN run steps, one of them with two prepare ranges that both launched work (a chunked
    # prepare, say) before its forward
    t = FakeTrace()
    _steps(t, ["run", "run", "run", "run"])
    t.range("prepare", 2060 * U, 2090 * U)
    t.kernel(t.call("cudaLaunchKernel", 2065 * U, 2067 * U), 2070 * U, 2080 * U)
    # WHEN read
    run, got = _read(t, tmp_path)
    # THEN four cycles: a range that launched work is part of its step
    assert sorted({c for c, _, _ in got}) == [0, 1, 2, 3]
    assert not any("lone 'prepare'" in w for w in run.warnings)


def test_a_first_phase_whose_work_another_thread_launches_is_not_split(tmp_path):
    # GIVEN prepare ranges on thread 11 whose kernels a worker thread 12 launches inside them,
    # step 2's prepare in two ranges (a chunked prepare), each with a kernel of the worker's
    t = FakeTrace()
    for i in range(4):
        b = 1000 * i
        for s, e in ([(b, b + 50), (b + 60, b + 90)] if i == 2 else [(b, b + 50)]):
            t.range("prepare", s * U, e * U, tid=11)
            t.kernel(t.call("cudaLaunchKernel", (s + 10) * U, (s + 12) * U, tid=12), (s + 20) * U, (s + 40) * U)
        t.range("forward", (b + 100) * U, (b + 300) * U, tid=11)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=11), (b + 120) * U, (b + 280) * U)
    # WHEN read
    run, got = _read(t, tmp_path)
    # THEN four steps: the first chunk's process launched work in it (a step of its own, 50 us,
    # and a warning that it launched nothing, before); step 2's prepare is its two ranges, 60 + 40
    assert sorted({c for c, _, _ in got}) == [0, 1, 2, 3]
    assert [g for g in got if g[0] == 2] == [(2, "prepare", 60), (2, "prepare", 40), (2, "forward", 200)]
    assert not any("lone 'prepare'" in w for w in run.warnings)


def test_a_first_phase_that_never_launches_work_is_not_split(tmp_path):
    # GIVEN a CPU-only first phase, schedule, run twice in every other step (a retry), forward
    # after it with a kernel
    t = FakeTrace()
    for i in range(6):
        b = 1000 * i
        for s, e in ([(b, b + 40), (b + 60, b + 90)] if i % 2 else [(b, b + 40)]):
            t.range("schedule", s * U, e * U)
        t.range("forward", (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 280) * U)
    # WHEN read
    run = load([str(t.write(tmp_path / "t.sqlite"))], PhaseConfig(phases=("schedule", "forward"), skip_cycles=0))
    # THEN six steps: a phase that launches nothing as a rule says nothing by launching nothing
    # (and half the steps opening with one range is no "most"); each schedule reads to the
    # forward's start, 60 + 40 in the steps with two
    (rank,) = run.ranks
    assert rank.cycles.num_rows == 6
    assert [p["gpu_ns"] // U for p in rank.phases.to_pylist() if p["cycle"] == 1] == [60, 40, 200]
    assert not any("lone 'schedule'" in w for w in run.warnings)
