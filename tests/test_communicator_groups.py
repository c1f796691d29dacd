"""Ranks of several communicators on one clock: each collective matched within its own group.

A tensor-parallel group per pipeline stage or data-parallel replica runs kernels of the same
names as the others, at other times. Matched by name and order across all ranks, the k-th of one
group was taken for the k-th of another, and each rank "waited" for ranks it never meets. On one
machine's clock one collective's kernels end together on every rank of its communicator, so the
ends tell the groups apart (``cross_rank.communicator_groups``). Expected waits, collectives and
gating ranks are worked out here by brute force from the kernels drawn.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis import cross_rank

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
PERIOD = 1_000_000  # each group's collectives 1 ms apart


def view(rank: int, kernels: list[tuple[int, int]]) -> cross_rank.RankView:
    """A rank of one report: an all-reduce per (start, end) ns, the k-th in phase k, cycle k."""
    n = len(kernels)
    ops = pa.table({"kind": pa.array(["kernel"] * n).dictionary_encode(), "name": pa.array([AR] * n).dictionary_encode(),
                    "start_ns": pa.array([s for s, _ in kernels], pa.int64()), "end_ns": pa.array([e for _, e in kernels], pa.int64()),
                    "phase_id": pa.array(range(n), pa.int64())})
    phases = pa.table({"cycle": pa.array(range(n), pa.int64()), "phase": pa.array(["verify"] * n),
                       "gpu_end_ns": pa.array([e for _, e in kernels], pa.int64()), "cpu_end_ns": pa.array([e for _, e in kernels], pa.int64()),
                       "gpu_ns": pa.array([e - s for s, e in kernels], pa.int64()), "cpu_ns": pa.array([1000] * n, pa.int64()),
                       "cpu_start_ns": pa.array([s - 500_000 for s, _ in kernels], pa.int64())})
    return cross_rank.RankView(rank, "one report", None, ops, phases)


@st.composite
def runs(draw):
    """2-3 groups of 2-3 ranks, ranks dealt to groups in any order; group g's k-th collective
    ends at k ms + g/3 ms on all its ranks (groups a third of a period apart); each rank reaches
    it 20-300 us before its end, 5-10 collectives a group (4 at least ending within the span of
    another group's tell the two apart)."""
    n_groups = draw(st.integers(2, 3))
    sizes = [draw(st.integers(2, 3)) for _ in range(n_groups)]
    deal = draw(st.permutations([g for g, size in enumerate(sizes) for _ in range(size)]))
    counts = [draw(st.integers(5, 10)) for _ in range(n_groups)]
    kernels = []
    for g in deal:
        ends = [k * PERIOD + g * PERIOD // 3 + 400_000 for k in range(counts[g])]
        lead = draw(st.lists(st.integers(20_000, 300_000), min_size=counts[g], max_size=counts[g]))
        kernels.append([(e - d, e) for e, d in zip(ends, lead)])
    return deal, kernels


@settings(max_examples=60, deadline=None)
@given(runs())
def test_each_groups_collectives_are_matched_within_it(run):
    deal, kernels = run
    cross = cross_rank.analyze_cross_rank([view(r, k) for r, k in enumerate(kernels)])
    # THEN the groups are said as dealt (in rank order, groups by their first rank)
    groups: dict[int, list[int]] = {}
    for r, g in enumerate(deal):
        groups.setdefault(g, []).append(r)
    said = "; ".join(f"ranks {', '.join(map(str, rs))}" for rs in sorted(groups.values()))
    assert any(f"the ranks run {len(groups)} communicators" in w and f": {said}; collectives" in w for w in cross.warnings), cross.warnings
    # ... each collective is one group's k-th, all of its ranks' and no other's
    coll = cross.collectives.to_pydict()
    members: dict[int, set[int]] = {}
    for c, r in zip(coll["collective"], coll["rank"]):
        members.setdefault(c, set()).add(r)
    expected = sorted((tuple(rs), k) for rs in groups.values() for k in range(len(kernels[rs[0]])))
    got = sorted((tuple(sorted(members[c])), cyc) for c, cyc in {(c, y) for c, y in zip(coll["collective"], coll["cycle"])})
    assert got == expected
    # ... and each rank waited, at each, from its own start to its group's last start (at most
    # its kernel's length)
    for r, g in enumerate(deal):
        mine = kernels[r]
        want = 0
        for k, (s, e) in enumerate(mine):
            last = max(kernels[o][k][0] for o in groups[g])
            want += min(max(last - s, 0), e - s)
        assert cross.comm_of(r).wait_ns == want
    # ... and each cycle is gated by the last rank at the collective that brought the most new
    # lateness over all groups (its skew less how late that rank already was at its group's one
    # before), where that one is the only best
    rows = {row["cycle"]: row for row in cross.critical_path.to_pylist()}
    for k in range(max(len(x) for x in kernels)):
        scores = []
        for rs in groups.values():
            if k >= len(kernels[rs[0]]):
                continue
            starts = [kernels[o][k][0] for o in rs]
            last_rank = max(rs, key=lambda o: (kernels[o][k][0], o))
            before = kernels[last_rank][k - 1][0] - min(kernels[o][k - 1][0] for o in rs) if k else 0
            if max(starts) - min(starts) > cross_rank.ARRIVED_TOGETHER_NS:
                scores.append((max(starts) - min(starts) - before, last_rank))
        scores.sort(reverse=True)
        if scores and (len(scores) == 1 or scores[0][0] != scores[1][0]):
            assert rows[k]["gating_rank"] == scores[0][1] and rows[k]["how"] == "collectives"
