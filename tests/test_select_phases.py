"""``phases.select_phases`` on whole columns against the per-range version it replaced
(``tests/reference_phases.py``, kept as it was): the same phase rows, cycles and labels on every
sample export under several phase options, and on random forests of nested ranges with phases
inside phases, phases inside cycles inside cycles, ties in start times and missing names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_phases as reference
from conftest import SAMPLES

from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.phases import select_phases
from tracerecon.analysis.ranges import nest
from tracerecon.nsys.sqlite_export import read_export

CONFIGS = [
    PhaseConfig(),
    PhaseConfig(cycle_prefix=""),
    PhaseConfig(phases=("verify=re:verif", "draft=glob:*draft*", "step")),
    PhaseConfig(phases=("decode", "prefill", "sample"), cycle_prefix="step"),
]


def _same(ranges: pa.Table, config: PhaseConfig) -> None:
    got = select_phases(ranges, config)
    want = reference.select_phases(ranges, config)
    assert got[0].tolist() == want[0].tolist(), "phase rows"
    assert got[1].tolist() == want[1].tolist(), "cycle of each phase"
    assert got[2].tolist() == want[2].tolist(), "cycle rows"
    assert got[3] == want[3], "labels"


@pytest.mark.parametrize("path", sorted(SAMPLES.rglob("*.sqlite")), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_real_exports_give_the_phases_the_per_range_version_gave(path: Path):
    # GIVEN a real export's nested ranges WHEN phases are picked under several options THEN same
    ranges = nest(read_export(path).nvtx_ranges)
    for config in CONFIGS:
        _same(ranges, config)


# (Range names are never null: the reader makes a missing name "".)
NAMES = ["verify", "draft", "target_verify", "cycle 1", "cycle", "step 3", "other", "draft_extend", ""]


@st.composite
def forests(draw):
    n = draw(st.integers(0, 60))
    # Each range's parent is an earlier range or none, as nest makes them (a forest).
    parents = [None if i == 0 else draw(st.one_of(st.none(), st.integers(0, i - 1))) for i in range(n)]
    names = [draw(st.sampled_from(NAMES)) for _ in range(n)]
    domains = [draw(st.sampled_from(["", "", "eng", None])) for _ in range(n)]
    starts = [draw(st.integers(0, 8)) for _ in range(n)]  # ties on purpose
    return pa.table({
        "name": pa.array(names, pa.string()),
        "domain": pa.array(domains, pa.string()),
        "start_ns": pa.array(starts, pa.int64()),
        "parent_id": pa.array(parents, pa.int64()),
    })


@settings(max_examples=300, deadline=None)
@given(ranges=forests(), config=st.sampled_from(CONFIGS))
def test_random_forests_give_what_the_per_range_version_gave(ranges, config):
    # GIVEN nested ranges with phases in phases, cycles in cycles and tied starts
    # WHEN phases are picked THEN rows, cycles and labels are the per-range version's
    _same(ranges, config)


@st.composite
def loops(draw):
    """Flat phase ranges without cycle ranges, as an engine's loop leaves them: steps that run
    the first phase k times (0 too) and then a usual sequence of other phases, some steps
    another (a prefill step, a phase run twice, one dropped), and now and then a stray range."""
    usual = draw(st.sampled_from([("verify",), ("verify", "accept"), ("output",), ("sample", "output"), ("verify", "sample", "verify", "sample")]))
    names: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        names += ["draft"] * draw(st.integers(0, 4))
        kind = draw(st.sampled_from(["usual", "usual", "usual", "prefill", "twice", "short", "stray"]))
        names += {"usual": list(usual), "prefill": ["prefill", *usual], "twice": [*usual, *usual], "short": list(usual[:-1]),
                  "stray": [*usual, draw(st.sampled_from(["draft", "verify", "accept", "output", "sample"]))]}[kind]
    return pa.table({
        "name": pa.array(names, pa.string()),
        "domain": pa.array([""] * len(names), pa.string()),
        "start_ns": pa.array(range(len(names)), pa.int64()),
        "parent_id": pa.array([None] * len(names), pa.int64()),
    })


@settings(max_examples=400, deadline=None)
@given(ranges=loops(), first=st.sampled_from(["draft", "prefill"]))
def test_random_loops_without_cycle_ranges_give_what_the_per_range_version_gave(ranges, first):
    # GIVEN an engine loop's phase ranges, no cycle ranges (steps drafting any number of times,
    #       prefill steps, steps running their phases twice or short)
    # WHEN its cycles are worked out from the phases THEN rows, cycles and labels are the
    #      per-range version's
    others = ("verify", "accept", "sample", "output")
    _same(ranges, PhaseConfig(phases=("prefill", "draft", *others) if first == "prefill" else ("draft", "prefill", *others)))


def test_a_phase_in_a_phase_is_part_of_it_and_takes_its_innermost_cycle():
    # GIVEN cycle > cycle > verify > target_verify, and a draft in the outer cycle only
    ranges = pa.table({
        "name": ["cycle 0", "cycle 0.1", "verify", "target_verify", "draft"],
        "domain": [""] * 5,
        "start_ns": [0, 1, 2, 3, 9],
        "parent_id": pa.array([None, 0, 1, 2, 0], pa.int64()),
    })
    rows, cycle_of, cycles, labels = select_phases(ranges, PhaseConfig())
    # THEN target_verify is no phase; verify is in the inner cycle (1), draft in the outer (0)
    assert rows.tolist() == [2, 4] and labels == ["verify", "draft"]
    assert cycles.tolist() == [0, 1] and cycle_of.tolist() == [1, 0]
    assert np.asarray(cycle_of).dtype == np.int64


def test_a_glob_matches_the_whole_name_as_a_shell_glob():
    # GIVEN phase maps by glob WHEN names are matched THEN a glob covers the whole name
    from tracerecon.analysis.config import PhaseConfig

    cfg = PhaseConfig(phases=("x=glob:raft", "d=glob:*draft*", "e=glob:e*"))
    assert cfg.label_of("draft") == "d" and cfg.label_of("raft") == "x"
    assert cfg.label_of("draft_re_extend") == "d" and cfg.label_of("extend") == "e"
    assert cfg.label_of("cycle 3") is None and cfg.label_of("verify") is None


def test_a_phase_inside_a_start_end_phase_on_its_thread_is_part_of_it():
    # GIVEN on thread 1: draft (push/pop, 0..100), verify (start/end, 100..300) holding
    # target_verify (push/pop, 110..200); then verify (push/pop, 400..600) holding target_verify
    # (start/end, 410..500); an unclosed start/end verify (700.., to the trace end) before a
    # push/pop draft (800..900); on thread 2, a draft inside the first verify's span
    rows = [
        ("draft", 0, 100, "push_pop", True, 1), ("verify", 100, 300, "start_end", True, 1), ("target_verify", 110, 200, "push_pop", True, 1),
        ("verify", 400, 600, "push_pop", True, 1), ("target_verify", 410, 500, "start_end", True, 1),
        ("verify", 700, 10_000, "start_end", False, 1), ("draft", 800, 900, "push_pop", True, 1), ("draft", 150, 160, "push_pop", True, 2),
    ]
    ranges = pa.table({
        "name": [r[0] for r in rows], "domain": [""] * len(rows), "start_ns": pa.array([r[1] for r in rows], pa.int64()),
        "end_ns": pa.array([r[2] for r in rows], pa.int64()), "style": [r[3] for r in rows], "closed": [r[4] for r in rows],
        "pid": pa.array([10] * len(rows), pa.int64()), "tid": pa.array([r[5] for r in rows], pa.int64()),
        "parent_id": pa.array([None] * len(rows), pa.int64()),
    })
    # WHEN phases are picked (no cycle ranges)
    got, _, _, labels = select_phases(ranges, PhaseConfig(cycle_prefix=""))
    # THEN each target_verify is part of the verify that holds it on its thread (whichever range
    # kind each is); the never-closed verify holds nothing; thread 2's draft is its own
    assert sorted(got.tolist()) == [0, 1, 3, 5, 6, 7]


@pytest.mark.parametrize("base", [0, 2**41 - 1500, 1_764_000_000 * 10**9], ids=["session-ns", "across-2**41-ns", "utc-ns"])
@pytest.mark.parametrize("with_cycles", [True, False], ids=["cycle-ranges", "no-cycle-ranges"])
def test_a_start_end_phase_held_open_into_the_next_cycle_holds_none_of_its_phases(with_cycles, base):
    # GIVEN an overlap scheduler on thread 1: each cycle (b = 1000c) a push/pop draft (b..b+100)
    # and a start/end verify opened at b+100 and closed when its result is used, at b+1150,
    # after the next cycle's draft began; with push/pop cycle ranges (b..b+1000), or none; on a
    # trace's own clock, across 2**41 ns (37 minutes into a capture), or in UTC ns (--ts-normalize)
    rows = []
    for c in range(3):
        b = base + 1000 * c
        if with_cycles:
            rows.append((f"cycle {c}", b, b + 1000, "push_pop"))
        rows += [("draft", b, b + 100, "push_pop"), ("verify", b + 100, b + 1150, "start_end")]
    ranges = pa.table({
        "name": [r[0] for r in rows], "domain": [""] * len(rows), "start_ns": pa.array([r[1] for r in rows], pa.int64()),
        "end_ns": pa.array([r[2] for r in rows], pa.int64()), "style": [r[3] for r in rows], "closed": [True] * len(rows),
        "pid": pa.array([10] * len(rows), pa.int64()), "tid": pa.array([1] * len(rows), pa.int64()),
        "parent_id": pa.array([None] * len(rows), pa.int64()),
    })
    # WHEN phases are picked
    got, _, _, labels = select_phases(ranges, PhaseConfig())
    # THEN every draft and every verify is a phase: a cycle began between the verify and the
    # draft it spans (a cycle range, or the phase that starts cycles)
    assert sorted(labels) == ["draft"] * 3 + ["verify"] * 3


def test_without_cycle_ranges_cycles_start_at_the_first_configured_phase_among_the_phases_not_the_ranges():
    # GIVEN no cycle ranges; draft (first in --phase order) only as a range nested in a verify,
    # so no draft is a phase; a target_verify range before the first verify
    ranges = pa.table({
        "name": ["verify", "target_verify", "draft", "verify"],
        "domain": [""] * 4,
        "start_ns": [10, 0, 11, 20],
        "parent_id": pa.array([None, None, 0, None], pa.int64()),
    })
    # WHEN phases are picked with draft, verify, target_verify in that order
    rows, cycle_of, cycles, labels = select_phases(ranges, PhaseConfig(phases=("draft", "verify", "target_verify")))
    # THEN verify starts the cycles (the first configured phase that is a phase), so the
    # target_verify before the first verify is in no cycle (it started one, with draft taken
    # for the start, and the two verifies back to back are one step of one cycle)
    assert rows.tolist() == [1, 0, 3] and labels == ["target_verify", "verify", "verify"]
    assert cycle_of.tolist() == [-1, 0, 0] and cycles.tolist() == []


@pytest.mark.parametrize("names,cycles", [
    # a step counter in every name (TensorRT-LLM's `[Executor] _forward_step N: ...`): no name
    # comes twice, so names compare with their numbers aside: a step each
    (["_forward_step 7: 1 ctx reqs", "_forward_step 8: 0 ctx reqs", "_forward_step 9: 0 ctx reqs"], [0, 1, 2]),
    # numbered names that do come again (draft_0..draft_2 every step): exact names, as before
    (["draft_0", "draft_1", "draft_2", "draft_0", "draft_1", "draft_2"], [0, 0, 0, 1, 1, 1]),
    # two names of one step, numbered by step: each step's two ranges one cycle
    (["forward 1", "post 1", "forward 2", "post 2"], [0, 0, 1, 1]),
    # steps of one or two ranges, the counter first in each name: a cycle where it changes (a
    # review's case: compared with their numbers aside, `step 3 prefill` joined step 2)
    (["step 1 prefill", "step 1 decode", "step 2 decode", "step 3 prefill", "step 3 decode", "step 4 decode"], [0, 0, 1, 2, 2, 3]),
    # a name without a number goes with the numbered one before it
    (["step 1 forward", "prefill", "step 2 forward", "step 3 forward"], [0, 0, 1, 2]),
    # the counter not the first number (a review's cases): a rank, a batch size that goes down
    ([f"[rank 0] step {i}" for i in range(1, 5)], [0, 1, 2, 3]),
    ([f"decode bs={bs} iter {i}" for i, bs in enumerate([32, 32, 16, 8], 1)], [0, 1, 2, 3]),
])
def test_a_lone_phase_whose_range_names_never_repeat_starts_a_cycle_where_their_step_counter_changes(names, cycles):
    # (the step counter: the first of the names' numbers that never goes down and goes up)
    # GIVEN no cycle ranges and one phase taking ranges of these names, one after another
    ranges = pa.table({"name": names, "domain": [""] * len(names), "start_ns": [10 * i for i in range(len(names))],
                       "parent_id": pa.array([None] * len(names), pa.int64())})
    # WHEN phases are picked with a pattern that takes them all
    rows, cycle_of, _, labels = select_phases(ranges, PhaseConfig(phases=("step=re:.",)))
    # THEN the cycles are the steps
    assert rows.tolist() == list(range(len(names))) and cycle_of.tolist() == cycles


def test_the_phase_a_wait_waited_for_is_named_as_the_phases_table_names_it():
    from conftest import H200
    from tracerecon.api import load

    # GIVEN the H200 EAGLE trace with its verify ranges mapped to a phase named target
    # (``--phase target=glob:verify``: the ranges keep their names)
    (rank,) = load([H200 / "eagle_gpu_bound.sqlite"], PhaseConfig(phases=("draft", "target=glob:verify", "draft_re_extend"))).ranks
    # WHEN its blocking calls are read THEN each one's waited_for_phase is the label of the phase
    # instance waited_for_phase_id points to (target, never the range name verify)
    labels = dict(zip(rank.phases["phase_id"].to_pylist(), rank.phases["phase"].to_pylist()))
    waited = [(s["waited_for_phase_id"], s["waited_for_phase"]) for s in rank.syncs.to_pylist() if s["waited_for_phase_id"] is not None]
    assert waited and all(name == labels[pid] for pid, name in waited)
    assert "target" in {name for _, name in waited} and "verify" not in {name for _, name in waited}


def test_a_cycle_range_is_any_range_whose_name_starts_with_the_prefix():
    from tracerecon.analysis.config import is_cycle_name

    # GIVEN the default prefix, and --cycle iter (a prefix, as --help says)
    # THEN every name starting with it is a cycle range's, and none without a prefix
    assert all(is_cycle_name(n, "cycle") for n in ["cycle 3", "cycle3", "cycle_prefill 0", "cycle_decode 7", "cycle"])
    assert not any(is_cycle_name(n, "cycle") for n in ["bicycle 3", "Cycle 3", "", None])
    assert is_cycle_name("iteration 5", "iter") and not is_cycle_name("cycle 3", "")


def test_a_helper_range_named_like_a_cycle_inside_a_cycle_is_said_and_a_longer_prefix_leaves_it_out(tmp_path):
    from nsys_factory import FakeTrace
    from tracerecon.api import load

    U = 1000
    # GIVEN cycles (b..b+300) of draft (b..b+100) and verify (b+100..b+300), each draft inside a
    # helper range cycle_draft_loop (b..b+100), each phase launching one kernel
    t = FakeTrace()
    for c in range(6):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range("cycle_draft_loop", b * U, (b + 100) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 100) * U, (b + 300) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (b + 290) * U)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN analysed with the default prefix, and with --cycle 'cycle '
    plain = load([path])
    longer = load([path], PhaseConfig(cycle_prefix="cycle "))
    # THEN the helper ranges are cycles of their own (draft takes the innermost), and a warning
    # names them and those they lie in (and no GPU work is said to be in no phase: draft's is
    # the inner cycles'); with --cycle 'cycle ', 6 cycles of 300 us, draft 100 and verify 200
    assert any("6 cycle range(s) (names starting with 'cycle': 'cycle_draft_loop') lie within other cycle ranges "
               "('cycle 0', 'cycle 1', 'cycle 2')" in w for w in plain.warnings), plain.warnings
    assert not any("in no phase" in w for w in plain.warnings), plain.warnings
    (rank,) = longer.ranks
    assert [(c["cycle"], c["gpu_ns"] // U) for c in rank.cycles.to_pylist()] == [(c, 300) for c in range(6)]
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()] == [
        (c, n, v) for c in range(6) for n, v in (("draft", 100), ("verify", 200))]
    assert not any("lie within other cycle ranges" in w for w in longer.warnings)


@pytest.mark.parametrize("shape", ["start_end", "other_thread", "whole_run"])
def test_cycle_ranges_within_cycle_ranges_are_said_however_they_nest(tmp_path, shape):
    from nsys_factory import FakeTrace
    from tracerecon.api import load

    U = 1000
    # GIVEN cycles of draft (b..b+100) and verify (b+100..b+300): cycle N marked with start/end
    # ranges around a push/pop cycle_draft_loop (b..b+100); or cycle N on thread 11 and the
    # phases with their cycle_draft_loop on thread 12; or a whole-run "cycle loop" range around
    # cycle 0..5
    t = FakeTrace()
    phase_tid = 12 if shape == "other_thread" else None
    if shape == "whole_run":
        t.range("cycle loop", 0, 5_400 * U)
    for c in range(6):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=11 if shape == "other_thread" else None, push_pop=shape != "start_end")
        if shape != "whole_run":
            t.range("cycle_draft_loop", b * U, (b + 100) * U, tid=phase_tid)
        t.range("draft", b * U, (b + 100) * U, tid=phase_tid)
        t.range("verify", (b + 100) * U, (b + 300) * U, tid=phase_tid)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, tid=phase_tid), (b + 20) * U, (b + 80) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=phase_tid), (b + 120) * U, (b + 290) * U)
    # WHEN analysed THEN a warning names the cycle ranges that lie within others, whether or not
    # they nest as push/pop ranges on one thread
    warnings = load([t.write(tmp_path / "t.sqlite")]).warnings
    inner = "'cycle 0', 'cycle 1', 'cycle 2'" if shape == "whole_run" else "'cycle_draft_loop'"
    assert any(f"cycle range(s) (names starting with 'cycle': {inner}) lie within other cycle ranges" in w for w in warnings), warnings


@pytest.mark.parametrize("shape", ["ended_late", "threads_of_their_own", "never_ended"])
def test_cycle_ranges_of_one_kind_that_overlap_are_not_said_to_nest(tmp_path, shape):
    from nsys_factory import FakeTrace
    from tracerecon.api import load

    U = 1000
    # GIVEN cycle N ranges (b..b+300) of draft and verify, each cycle queuing 100 us of work
    # before draft: cycle 1's range ended late on another thread (to b+1500, past cycle 2's
    # whole span); or two threads each running cycles of their own, one inside the other's in
    # time; or cycle 1's range never ended
    t = FakeTrace()
    for c in range(4):
        for tid, off in ((11, 0), (12, 20)) if shape == "threads_of_their_own" else ((11, 0),):
            b = 1000 * c + off
            end = {"ended_late": b + 1500 if c == 1 else b + 300, "never_ended": None if c == 1 else b + 300}.get(shape, b + 250)
            t.range(f"cycle {c}", b * U, None if end is None else end * U, tid=tid, end_tid=14 if shape == "ended_late" else None,
                    push_pop=shape != "ended_late")
            t.range("draft", (b + 50) * U, (b + 150) * U, tid=tid)
            t.range("verify", (b + 150) * U, (b + 240) * U, tid=tid)
            stream = 7 if tid == 11 else 8
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U, tid=tid), (b + 10) * U, (b + 40) * U, stream=stream)
            t.kernel(t.call("cudaLaunchKernel", (b + 55) * U, (b + 57) * U, tid=tid), (b + 60) * U, (b + 140) * U, stream=stream)
            t.kernel(t.call("cudaLaunchKernel", (b + 155) * U, (b + 157) * U, tid=tid), (b + 160) * U, (b + 230) * U, stream=stream)
    # WHEN analysed THEN no cycle range is said to lie within another, and every cycle's work
    # before its first phase is said, in all of its cycles
    warnings = load([t.write(tmp_path / "t.sqlite")]).warnings
    n = 8 if shape == "threads_of_their_own" else 4
    assert not any("lie within other cycle ranges" in w for w in warnings), warnings
    assert any(f"queued inside the cycle range before its first phase ('draft') in {n} of {n} cycles" in w for w in warnings), warnings
    assert not any("after its last phase" in w for w in warnings), warnings
