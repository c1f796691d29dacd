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


def named_view(rank: int, kernels: list[tuple[int, int, str]], cycles: int) -> cross_rank.RankView:
    """A rank of one report: a kernel per (start, end, name) ns, in the phase and cycle of its
    millisecond (cycle c: c ms to c ms + 0.9)."""
    n = len(kernels)
    ops = pa.table({"kind": pa.array(["kernel"] * n).dictionary_encode(), "name": pa.array([k[2] for k in kernels]).dictionary_encode(),
                    "start_ns": pa.array([k[0] for k in kernels], pa.int64()), "end_ns": pa.array([k[1] for k in kernels], pa.int64()),
                    "phase_id": pa.array([k[0] // PERIOD for k in kernels], pa.int64())})
    ends = [c * PERIOD + 900_000 for c in range(cycles)]
    phases = pa.table({"cycle": pa.array(range(cycles), pa.int64()), "phase": pa.array(["verify"] * cycles),
                       "gpu_end_ns": pa.array(ends, pa.int64()), "cpu_end_ns": pa.array(ends, pa.int64()),
                       "gpu_ns": pa.array([800_000] * cycles, pa.int64()), "cpu_ns": pa.array([1000] * cycles, pa.int64()),
                       "cpu_start_ns": pa.array([c * PERIOD for c in range(cycles)], pa.int64())})
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
    assert any(w.startswith(f"{AR}: the ranks run {len(groups)} communicators") and f": {said}; they are matched" in w
               for w in cross.warnings), cross.warnings
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
    # ... and each cycle is gated by the last rank at the collective whose lateness kept the
    # others waiting longest, summed over them (a rank runs only its group's kernels, one a
    # cycle, so none carries lateness in), then by its skew, where those are the only best
    rows = {row["cycle"]: row for row in cross.critical_path.to_pylist()}
    for k in range(max(len(x) for x in kernels)):
        scores = []
        for rs in groups.values():
            if k >= len(kernels[rs[0]]):
                continue
            starts = [kernels[o][k][0] for o in rs]
            last_rank = max(rs, key=lambda o: (kernels[o][k][0], o))
            if max(starts) - min(starts) > cross_rank.ARRIVED_TOGETHER_NS:
                scores.append((sum(max(starts) - t for t in starts), max(starts) - min(starts), last_rank))
        scores.sort(reverse=True)
        if scores and (len(scores) == 1 or scores[0][:2] != scores[1][:2]):
            assert rows[k]["gating_rank"] == scores[0][2] and rows[k]["how"] == "collectives"


def test_a_rank_whose_capture_began_later_counts_cycles_as_its_groups_first_rank():
    # GIVEN one machine, per-rank exports (session clocks agree): ranks 0, 1 all-reduce at k ms +
    # 400 us (k = 0..7, cycle k), rank 1 reaching each 50 us late; ranks 2, 3 another
    # communicator at k ms + 733 us, rank 3 reaching each 30 us late, 150 us late in k = 5;
    # rank 3's capture began a collective later: its kernels are k = 1..7, its cycles numbered
    # from 0 (its cycle c is the group's k = c + 1)
    def on_machine(rank: int, kernels: list[tuple[int, int]]) -> cross_rank.RankView:
        v = view(rank, kernels)
        return cross_rank.RankView(rank, f"rank{rank}.sqlite", 0, v.gpu_ops, v.phases, gpu_uuids=frozenset({"machine-A"}))

    def group(at: int, late: dict[int, int], first: int = 0) -> list[tuple[int, int]]:
        return [(k * PERIOD + at - 200_000 + late.get(k, 0), k * PERIOD + at) for k in range(first, 8)]

    cross = cross_rank.analyze_cross_rank([
        on_machine(0, group(400_000, {})), on_machine(1, group(400_000, dict.fromkeys(range(8), 50_000))),
        on_machine(2, group(733_000, {})), on_machine(3, group(733_000, {**dict.fromkeys(range(8), 30_000), 5: 150_000}, first=1))])
    # THEN rank 3's cycles count as rank 2's (+1), which count as rank 0's (+0, no collective
    # relates them); each cycle rank 1 held rank 0 50 us, rank 3 held rank 2 30 us (new each
    # cycle: a cycle's first collective carries no lateness in), 150 in cycle 5: rank 1 gates
    # every cycle but 5, rank 3's; rank 2 waited 30 us at k = 1..7 but 150 at k = 5 (its
    # kernels 200 us long)
    assert [cross.counted_cycle(3, c) for c in range(7)] == list(range(1, 8)) and cross.counted_cycle(2, 4) == 4
    assert cross.critical_path["gating_rank"].to_pylist() == [1, 1, 1, 1, 1, 3, 1, 1]
    assert cross.comm_of(2).wait_ns == 6 * 30_000 + 150_000
    assert cross.comm_of(0).wait_ns == 8 * 50_000


def test_a_rank_in_a_tensor_parallel_pair_and_a_world_group_waits_in_each():
    # GIVEN one report of four ranks, 10 cycles of 1 ms (b = c ms): two tensor-parallel pairs,
    # {0, 1} all-reducing at b+100 and b+250 us (rank 1 10 us late to each) and {2, 3} at b+600
    # and b+750 (on time), each all-reduce ending 60 us after it begins; and an all-gather of
    # all four at b+800..b+860, rank 3 reaching it 40 us late (an expert-parallel gather)
    ag = "ncclDevKernel_AllGather_RING_LL"
    kernels = {r: [] for r in range(4)}
    for c in range(10):
        b = c * PERIOD
        for r in range(4):
            for t in ((100_000, 250_000) if r < 2 else (600_000, 750_000)):
                kernels[r].append((b + t + (10_000 if r == 1 else 0), b + t + 60_000, AR))
            kernels[r].append((b + 800_000 + (40_000 if r == 3 else 0), b + 860_000, ag))
    views = [named_view(r, ks, 10) for r, ks in kernels.items()]
    cross = cross_rank.analyze_cross_rank(views)
    # THEN the all-reduces are two communicators' and the all-gather all four's: rank 0 waited
    # 10 us at each of its 20 all-reduces and 40 us at each of 10 all-gathers, ranks 1 and 2 the
    # all-gathers' 40 us, rank 3 never; each all-gather is four ranks', each all-reduce two's;
    # rank 3 gated every cycle: cycle 0 by its 40 us at the all-gather, new, against rank 1's 10
    # at the first all-reduce; after it no collective brings new lateness (each rank as late as
    # at its group's one before), and of those tied the all-gather's skew, 40 us, is the widest
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [20 * 10_000 + 10 * 40_000, 10 * 40_000, 10 * 40_000, 0]
    coll = cross.collectives.to_pydict()
    sizes: dict[tuple[int, str], int] = {}
    for c, name in zip(coll["collective"], coll["name"]):
        sizes[(c, name)] = sizes.get((c, name), 0) + 1
    assert sorted(sizes.values()) == [2] * 40 + [4] * 10 and {n for (_, n), k in sizes.items() if k == 4} == {ag}
    assert [w.split(":")[0] for w in cross.warnings] == [AR]
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 10


def test_a_name_only_some_ranks_run_is_matched_among_them():
    # GIVEN one report of five ranks, 10 cycles of 1 ms (b = c ms): all-reduce pairs {0, 1} at
    # b+100 us (rank 1 10 us late) and {2, 3} at b+600 (rank 3 20 us late), each ending 60 us
    # after it begins; rank 4 runs no all-reduce; an all-gather on ranks 2, 3 and 4 only (a last
    # pipeline stage's) at b+800..b+860, rank 2 reaching it 30 us late
    ag = "ncclDevKernel_AllGather_RING_LL"
    kernels = {r: [] for r in range(5)}
    for c in range(10):
        b = c * PERIOD
        for r in range(4):
            t = 100_000 if r < 2 else 600_000
            kernels[r].append((b + t + {1: 10_000, 3: 20_000}.get(r, 0), b + t + 60_000, AR))
        for r in (2, 3, 4):
            kernels[r].append((b + 800_000 + (30_000 if r == 2 else 0), b + 860_000, ag))
    cross = cross_rank.analyze_cross_rank([named_view(r, sorted(ks), 10) for r, ks in kernels.items()])
    # THEN the all-reduces are the two pairs' (rank 4, which ran none, in neither) and the
    # all-gather the three ranks' that ran it: rank 0 waited 10 us a cycle, rank 2 20 (at its
    # all-reduce), ranks 3 and 4 30 (at the all-gather); 70 rows; rank 2 gated every cycle: it
    # left the all-reduce with rank 3 (b+660) and reached the all-gather 170 us later, rank 3
    # 140, so its 30 us there are its own (the 20 it waited at the all-reduce made it no later
    # than rank 3), keeping ranks 3 and 4 waiting 30 each (60 us), where rank 3 kept rank 2
    # waiting 20 and rank 1 rank 0 10
    assert [cross.comm_of(r).wait_ns for r in range(5)] == [10 * 10_000, 0, 10 * 20_000, 10 * 30_000, 10 * 30_000]
    coll = cross.collectives.to_pydict()
    members: dict[int, set[int]] = {}
    for c, r in zip(coll["collective"], coll["rank"]):
        members.setdefault(c, set()).add(r)
    assert sorted(map(sorted, members.values())) == [[0, 1]] * 10 + [[2, 3]] * 10 + [[2, 3, 4]] * 10
    # ... said: the all-reduce's two groups, and which ranks alone ran each name
    assert [w.split(":")[0] for w in cross.warnings] == [AR, AR, "ncclDevKernel_AllGather_RING_LL"]
    assert "ranks 0, 1; ranks 2, 3;" in cross.warnings[0]
    assert "only ranks 0, 1, 2, 3 ran these kernels" in cross.warnings[1] and "only ranks 2, 3, 4 ran these kernels" in cross.warnings[2]
    assert cross.critical_path["gating_rank"].to_pylist() == [2] * 10
    assert cross.partners_of(2) == {3, 4} and cross.partners_of(4) == {2, 3} and cross.partners_of(0) == {1}


def test_a_rank_whose_ends_say_apart_from_one_group_and_cannot_tell_for_another_joins_the_other():
    # GIVEN one report of three all-reduce pairs, 12 cycles of 1 ms (k): A = {0, 1} ending at
    # k ms + 100 us, B = {2, 3} at + 500, C = {4, 5} at + 510 in even cycles, + 800 in odd ones
    # (half its ends with B's, half not: B's ends cannot tell); each kernel 100 us long, rank 1
    # reaching A's 30 us late, rank 3 B's 20, rank 5 C's 40
    ends = {0: 100_000, 1: 100_000, 2: 500_000, 3: 500_000}
    late = {1: 30_000, 3: 20_000, 5: 40_000}
    kernels = {r: [] for r in range(6)}
    for k in range(12):
        for r in range(6):
            e = k * PERIOD + ends.get(r, 510_000 if k % 2 == 0 else 800_000)
            kernels[r].append((e - 100_000 + late.get(r, 0), e, AR))
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 12) for r, ks in kernels.items()])
    # THEN ranks 4 and 5, apart from A, go with B, whose ends could not tell (not with A, which
    # said apart): A's waits are its own (rank 0 30 us a cycle, rank 1 none); B and C, one group
    # as where nothing tells them apart, are said to end apart (+155 us from rank 2's: the median
    # of six 10 us and six 300 us distances)
    assert "ranks 0, 1; ranks 2, 3, 4, 5;" in cross.warnings[0]
    assert cross.comm_of(0).wait_ns == 12 * 30_000 and cross.comm_of(1).wait_ns == 0
    said = [w for w in cross.warnings if "look like another communicator" in w]
    assert [w.split(" on one")[0] for w in said] == ["rank 4's collectives end +155 us from rank 2's", "rank 5's collectives end +155 us from rank 2's"]


def test_a_rank_of_the_first_ranks_report_keeps_its_clock_in_another_group():
    # GIVEN one machine, two reports: A holds ranks 0 and 2, B ranks 1 and 3, B's session begun
    # 5 ms after A's; the all-reduce pairs are {0, 3} (ending at k ms + 100 us) and {1, 2} (at
    # k ms + 600 us), 10 cycles, each kernel 80 us long, ranks 1 and 3 10 us late to theirs
    s0 = 5 * 10**18

    def rank(r: int) -> cross_rank.RankView:
        shift = 0 if r in (0, 2) else 5 * PERIOD  # B's own ns count from its later start
        at = 100_000 if r in (0, 3) else 600_000
        ks = [(k * PERIOD + at - 80_000 + (10_000 if r in (1, 3) else 0) - shift + 2 * PERIOD, k * PERIOD + at - shift + 2 * PERIOD, AR)
              for k in range(10)]
        v = named_view(r, ks, 0)
        return cross_rank.RankView(r, "A" if r in (0, 2) else "B", s0 + (0 if r in (0, 2) else 5 * PERIOD), v.gpu_ops, v.phases,
                                   gpu_uuids=frozenset({"gpu-x"}))

    cross = cross_rank.analyze_cross_rank([rank(r) for r in range(4)])
    # THEN rank 2, in report A, is on rank 0's clock as it is (shared, exact), not carried over
    # rank 1's session start; rank 1 (met no collective with rank 0) by its session start,
    # unknown uncertainty; rank 3 by its collectives with rank 0. Ranks 0 and 2 waited 10 us at
    # each of their 10
    assert [(a.offset_ns, a.offset_uncertainty_ns, a.method) for a in cross.alignment] == [
        (0, 0, "shared clock"), (5 * PERIOD, None, "session start"), (0, 0, "shared clock"), (5 * PERIOD, 0, "session start + collectives")]
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [100_000, 0, 100_000, 0]


def test_a_pairs_straggler_gates_the_world_all_gather_its_partner_reaches_last():
    # GIVEN one report of four ranks, 6 cycles of 1 ms (b = c ms): all-reduce pairs {0, 1}
    # (b+100..b+160, together) and {2, 3}, rank 3 reaching theirs 100 us late (rank 2 b+100, rank
    # 3 b+200, both ending b+260); then an all-gather of all four ending b+460: ranks 0 and 1 start
    # it at b+300, rank 3 at b+400, rank 2 at b+401 (it left the all-reduce with rank 3, and 1 us
    # behind it)
    ag = "ncclDevKernel_AllGather_RING_LL"
    kernels = {r: [] for r in range(4)}
    for c in range(6):
        b = c * PERIOD
        for r, (ar_start, ar_end, ag_start) in {0: (100, 160, 300), 1: (100, 160, 300), 2: (100, 260, 401), 3: (200, 260, 400)}.items():
            kernels[r] += [(b + ar_start * 1000, b + ar_end * 1000, AR), (b + ag_start * 1000, b + 460_000, ag)]
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in kernels.items()])
    # THEN rank 3 gated every cycle: rank 2, last at the all-gather (101 us after ranks 0 and 1),
    # brought 1 us of its own there, the 100 it waited for rank 3 carried (cycle 0: rank 3's 100
    # at the pair's first all-reduce against 101 - 100; later cycles: no new lateness at the
    # pair's all-reduce against -100 at the all-gather). Waits: ranks 0 and 1 101 us a cycle at
    # the all-gather, rank 2 100 at the all-reduce, rank 3 1; rank 3 met all three
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [6 * 101_000, 6 * 101_000, 6 * 100_000, 6 * 1_000]
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 6
    assert cross.partners_of(3) == {0, 1, 2} and cross.partners_of(0) == {1, 2, 3}


def test_a_name_of_four_kernels_is_told_apart_where_the_other_groups_last_ends_after_the_firsts():
    # GIVEN one report, a broadcast in two pairs once a cycle for 4 cycles (k ms): {0, 1} ending
    # at k ms + 500 us, {2, 3} at + 560 (the second pair's last ends after the first pair's
    # last); each 100 us long, rank 0 reaching its pair's 30 us late, rank 2 its pair's
    bc = "ncclDevKernel_Broadcast_RING_LL"
    kernels = {r: [(k * PERIOD + (500_000 if r < 2 else 560_000) - 100_000 + (30_000 if r in (0, 2) else 0),
                    k * PERIOD + (500_000 if r < 2 else 560_000), bc) for k in range(4)] for r in range(4)}
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 4) for r, ks in kernels.items()])
    # THEN the pairs are two communicators (all 4 of rank 2's ends compared, none within 25 us of
    # rank 0's): ranks 1 and 3 waited 30 us at each of theirs
    assert "ranks 0, 1; ranks 2, 3;" in cross.warnings[0]
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [0, 4 * 30_000, 0, 4 * 30_000]


def test_sends_and_receives_of_some_ranks_only_are_matched_among_them():
    # GIVEN one report, 10 cycles (b = c ms): all-reduce pairs {0, 1} (b+100..b+160) and {2, 3}
    # (b+400..b+460), all on time; a SendRecv on ranks 0 and 2 only: rank 0's b+700..b+760, rank
    # 2's b+650..b+760 (its receive waiting 50 us for rank 0's send)
    sr = "ncclDevKernel_SendRecv"
    kernels = {r: [(c * PERIOD + (100_000 if r < 2 else 400_000), c * PERIOD + (160_000 if r < 2 else 460_000), AR) for c in range(10)]
               for r in range(4)}
    for c in range(10):
        kernels[0].append((c * PERIOD + 700_000, c * PERIOD + 760_000, sr))
        kernels[2].append((c * PERIOD + 650_000, c * PERIOD + 760_000, sr))
    cross = cross_rank.analyze_cross_rank([named_view(r, sorted(ks), 10) for r, ks in kernels.items()])
    # THEN the k-th of rank 0's is matched with the k-th of rank 2's: rank 2 waited 50 us a cycle;
    # said as a name only those two ran
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [0, 0, 10 * 50_000, 0]
    assert any(w.startswith(f"{sr}: only ranks 0, 2 ran these kernels") for w in cross.warnings)


def _pairs_and_world(cycles: int, late: dict[int, dict[int, int]], broadcast_late: dict[int, dict[int, int]] | None = None,
                     broadcast_from: int | None = None) -> list[cross_rank.RankView]:
    """Four ranks of one report, a cycle a millisecond (b = c ms): all-reduce pairs {0, 1} at
    b+100 us and {2, 3} at b+350, each rank ``late[c][r]`` us late to its pair's, the pair's
    ending 20 us after its last rank's start; a world all-gather, each pair starting it when its
    all-reduce let it (b+600 + its pair's lateness), ending 50 us after the last pair's start;
    from cycle ``broadcast_from`` a broadcast in groups {0, 2} at b+770 and {1, 3} at b+850,
    each rank ``broadcast_late[c][r]`` us late, ending 20 us after its group's last start."""
    kernels: dict[int, list] = {r: [] for r in range(4)}
    for c in range(cycles):
        b, lt = c * PERIOD, late.get(c, {})
        pair_late = [max(lt.get(2 * p, 0), lt.get(2 * p + 1, 0)) for p in (0, 1)]
        for r in range(4):
            p = r // 2
            at = b + 100_000 + 250_000 * p
            kernels[r].append((at + lt.get(r, 0) * 1000, at + (pair_late[p] + 20) * 1000, AR))
            kernels[r].append((b + 600_000 + pair_late[p] * 1000, b + 600_000 + (max(pair_late) + 50) * 1000, "ncclDevKernel_AllGather_RING_LL"))
            if broadcast_from is not None and c >= broadcast_from:
                bl = (broadcast_late or {}).get(c, {})
                at = b + (770_000 if r % 2 == 0 else 850_000)
                group_late = max(bl.get(r % 2, 0), bl.get(r % 2 + 2, 0))
                kernels[r].append((at + bl.get(r, 0) * 1000, at + (group_late + 20) * 1000, "ncclDevKernel_Broadcast_RING_LL"))
    return [named_view(r, sorted(ks), cycles) for r, ks in kernels.items()]


def test_a_wait_every_rank_of_a_group_shared_made_none_of_them_late():
    # GIVEN the pairs and world all-gather of _pairs_and_world, 10 cycles: in even ones rank 3 is
    # 100 us late to its pair's all-reduce (so ranks 0 and 1 both wait 100 us at the all-gather);
    # in odd ones rank 1 is 60 us late to its pair's, rank 2 40 us to its
    cross = cross_rank.analyze_cross_rank(_pairs_and_world(10, {c: ({3: 100} if c % 2 == 0 else {1: 60, 2: 40}) for c in range(10)}))
    # THEN rank 3 gates the even cycles (its 100 us, new) and rank 1 the odd ones: its 60 us is
    # new, the 100 us it had waited at the all-gather before being rank 0's too (rank 2's 40 us
    # less, the all-gather's 20 us skew less). Waits: rank 0 100 + 60, rank 1 100, rank 2 100 +
    # 20 (at the odd all-gathers), rank 3 40 + 20, five cycles each
    assert cross.critical_path["gating_rank"].to_pylist() == [3, 1] * 5
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [5 * 160_000, 5 * 100_000, 5 * 120_000, 5 * 60_000]


def test_a_groups_first_collective_leaves_out_waits_of_earlier_cycles():
    # GIVEN the pairs and world all-gather of _pairs_and_world, 10 cycles: rank 3 100 us late to
    # its pair's all-reduce in cycles 0, 2 and 4 (ranks 0 and 1 waiting 100 us at each
    # all-gather), rank 2 10 us late to its pair's in cycle 5; a broadcast in groups {0, 2} and
    # {1, 3} from cycle 5, rank 1 80 us late to its group's first
    late = {0: {3: 100}, 2: {3: 100}, 4: {3: 100}, 5: {2: 10}}
    cross = cross_rank.analyze_cross_rank(_pairs_and_world(10, late, {5: {1: 80}}, broadcast_from=5))
    # THEN cycle 5 is rank 1's: its 80 us at the broadcast is new (the 10 us it waited at that
    # cycle's all-gather rank 3 waited too, for rank 2; its 300 us of waits in cycles 0-4 are
    # not this cycle's), rank 2's 10 us less; cycles 0, 2 and 4 are rank 3's
    gated = {r["cycle"]: r["gating_rank"] for r in cross.critical_path.to_pylist() if r["how"] == "collectives"}
    assert gated == {0: 3, 2: 3, 4: 3, 5: 1}


def test_ranks_of_another_report_than_a_silent_rank_0_are_placed_by_its_session_start():
    # GIVEN one machine, two reports: A holds rank 0, which ran no communication kernel; B,
    # begun 3 ms later, holds ranks 1 and 2, all-reducing together 10 times
    s0 = 5 * 10**18
    ks = [(k * PERIOD + 100_000, k * PERIOD + 160_000, AR) for k in range(10)]

    def rank(r: int) -> cross_rank.RankView:
        v = named_view(r, ks if r else [], 10)
        return cross_rank.RankView(r, "B" if r else "A", s0 + (3 * PERIOD if r else 0), v.gpu_ops, v.phases, gpu_uuids=frozenset({"gpu-x"}))

    cross = cross_rank.analyze_cross_rank([rank(r) for r in range(3)])
    # THEN ranks 1 and 2 are 3 ms on, by B's session start, its uncertainty unknown (no
    # collective relates A and B); rank 2, on rank 1's clock, is said to be placed so too, not
    # as on rank 0's clock ("shared clock", as before groups were told)
    assert [(a.offset_ns, a.offset_uncertainty_ns, a.method) for a in cross.alignment] == [
        (0, 0, "shared clock"), (3 * PERIOD, None, "session start"), (3 * PERIOD, None, "session start")]


def test_the_straggler_whose_lateness_kept_more_ranks_waiting_longer_gates_the_cycle():
    # GIVEN one report, 10 cycles (b = c ms): pair {0, 1} all-reducing b+100..b+210, rank 1 50 us
    # late to each (rank 0 waits 50 us); pair {2, 3} at b+350..b+410, on time; a world
    # all-gather b+800..b+900, rank 3 40 us late to each (ranks 0, 1 and 2 wait 40 us each)
    ag = "ncclDevKernel_AllGather_RING_LL"
    kernels: dict[int, list] = {0: [(100_000, 210_000, AR)], 1: [(150_000, 210_000, AR)], 2: [(350_000, 410_000, AR)],
                                3: [(350_000, 410_000, AR)]}
    for r in range(4):
        kernels[r].append((800_000 + (40_000 if r == 3 else 0), 900_000, ag))
    cycles = {r: [(c * PERIOD + s, c * PERIOD + e, n) for c in range(10) for s, e, n in ks] for r, ks in kernels.items()}
    cross = cross_rank.analyze_cross_rank([named_view(r, sorted(ks), 10) for r, ks in cycles.items()])
    # THEN rank 3 gates every cycle: its 40 us at the world all-gather kept three ranks waiting
    # (120 us), rank 1's 50 us at its pair's all-reduce one (50 us; the cycle's end waited for
    # rank 3, not rank 1). Waits: rank 0 50 + 40, ranks 1 and 2 40, rank 3 none, a cycle
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 10
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [900_000, 400_000, 400_000, 0]


def _two_pairs(a_ends: list[int], b_ends: list[int]) -> dict[int, list[tuple[int, int, str]]]:
    """Two all-reduce pairs' 40 us kernels: A = {0, 1} ending at ``a_ends``, B = {2, 3} at
    ``b_ends``; rank 1 reaches A's 30 us late, rank 3 B's 10 us late."""
    late = {0: 0, 1: 30_000, 2: 0, 3: 10_000}
    return {r: [(e - 40_000 + late[r], e, AR) for e in (a_ends if r < 2 else b_ends)] for r in range(4)}


def test_groups_whose_ends_meet_more_often_than_a_quarter_by_chance_alone_are_told_apart():
    # GIVEN one report of two all-reduce pairs, 40 collectives each, 200 us apart, each kernel
    # 40 us long (tolerance 20 us): A = {0, 1} ending at k * 200 us + 10 us; B = {2, 3}, a
    # data-parallel replica drifting past A, ending 15 us after A's k-th in 12 of them (k % 10 < 3)
    # and 100 us after it in the other 28: 12 of 40 (30 %) within the tolerance of one of A's,
    # where ends at any other time would be within it a fifth of the time (A's ends cover 40
    # windows of 40 us, 1,600 us, of the 8,000 us from half a spacing before the first to half
    # a spacing after the last: 20 %). Rank 1 reaches A's 30 us late, rank 3 B's 10 us late
    a = [k * 200_000 + 10_000 for k in range(40)]
    b = [e + (15_000 if k % 10 < 3 else 100_000) for k, e in enumerate(a)]
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 8) for r, ks in _two_pairs(a, b).items()])
    # THEN 30 % is under a quarter of the way from 20 % to all (40 %): B's ends say apart from
    # A's, and each pair waits within itself only (as one group of four, rank 0 "waited" for B)
    assert "ranks 0, 1; ranks 2, 3;" in cross.warnings[0], cross.warnings
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [40 * 30_000, 0, 40 * 10_000, 0]


def test_groups_bursting_together_between_idle_stretches_are_told_apart():
    # GIVEN one report of two all-reduce pairs, six steps of 5 ms, each step 20 collectives
    # 100 us apart then 3.1 ms idle (kernels 40 us: tolerance 20 us): A = {0, 1} ending at
    # step * 5 ms + i * 100 us + 10 us; B = {2, 3} 15 us after A's i-th where i % 5 < 2 and 50 us
    # after it otherwise: 40 % of B's within the tolerance of one of A's, as by chance within the
    # bursts (A's windows cover 40 us of every 100; counted over the whole span, idle stretches
    # included, 18 %: cut 38 %). Rank 1 reaches A's 30 us late, rank 3 B's 10 us late
    a = [step * 5 * PERIOD + i * 100_000 + 10_000 for step in range(6) for i in range(20)]
    b = [e + (15_000 if i % 5 < 2 else 50_000) for e, i in zip(a, list(range(20)) * 6)]
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 30) for r, ks in _two_pairs(a, b).items()])
    # THEN 40 % is chance within the bursts (the apart cut there: 55 %): two groups, each pair
    # waiting within itself only
    assert "ranks 0, 1; ranks 2, 3;" in cross.warnings[0], cross.warnings
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [120 * 30_000, 0, 120 * 10_000, 0]


def test_a_name_held_twice_in_the_dictionary_is_one_name():
    # GIVEN one report's kernels whose name column's dictionary holds the all-reduce's name twice
    # (two StringIds of one text), each process's kernels coded by another copy, and a send
    codes = [0, 1, 0, 1, 2]
    names = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array([AR, AR, "ncclDevKernel_SendRecv"]))
    ops = pa.table({"kind": pa.array(["kernel"] * 5).dictionary_encode(), "name": names,
                    "start_ns": pa.array([0, 1, 2, 3, 4], pa.int64()), "end_ns": pa.array([10, 11, 12, 13, 14], pa.int64())})
    # WHEN its communication kernels are coded
    idx, listed, code, in_order = cross_rank.comm_kernels(ops)
    # THEN the all-reduce is one name of one code, the send another, kept in order
    assert listed == [AR, "ncclDevKernel_SendRecv"] and code.tolist() == [0, 0, 0, 0, 1] and in_order.tolist() == [1]


def test_what_a_rank_of_one_barrier_leaves_unmatched_is_said():
    # GIVEN one report: ranks 0-2 a tensor-parallel group of 8 all-reduces (k ms + 500 us, each
    # reached 100 us before its end, rank 1 30 us late), and rank 3, a process of another role
    # whose only kernel of the name is one barrier all-reduce with them, the first
    kernels = {r: [] for r in range(4)}
    for k in range(8):
        e = k * PERIOD + 500_000
        for r in range(3):
            kernels[r].append((e - 100_000 + (30_000 if r == 1 else 0), e, AR))
    kernels[3].append((400_000, 500_000, AR))
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 8) for r, ks in kernels.items()])
    # THEN the barrier is matched among all four (ranks 0, 2, 3 wait 30 us for rank 1 there),
    # the other seven among none, and the warning says so
    assert [cross.comm_of(r).wait_ns for r in range(4)] == [30_000, 0, 30_000, 30_000]
    assert any(w.endswith("one report's ranks share its capture; rank 0's last 7, which rank 3 lacks, are matched among no ranks "
                          "(no wait in them counts)") for w in cross.warnings), cross.warnings


def _slower_gpu(layers: int, hiccup_us: int) -> dict[int, list[tuple[int, int, str]]]:
    """Four tensor-parallel ranks, 6 cycles of 1 ms (b = c ms), verify ``layers`` layers from
    b+100 us: each rank computes (a GEMM right after the all-reduce before ends, the GPU busy
    throughout), then all-reduces; ranks 0-2 compute 80 us a layer, rank 3 (a slower GPU) 100;
    in odd cycles rank 0's third layer takes ``hiccup_us``. An all-reduce ends 20 us after its
    last rank starts it, on every rank at once."""
    kernels: dict[int, list] = {r: [] for r in range(4)}
    for c in range(6):
        at = c * PERIOD + 100_000
        for layer in range(layers):
            compute = {r: 80_000 for r in range(3)} | {3: 100_000}
            if c % 2 and layer == 2:
                compute[0] = hiccup_us * 1000
            end = at + max(compute.values()) + 20_000
            for r in range(4):
                kernels[r] += [(at, at + compute[r], "gemm"), (at + compute[r], end, AR)]
            at = end
    return kernels


def test_a_slower_gpu_late_at_every_all_reduce_gates_each_cycle_over_another_ranks_one_hiccup():
    # GIVEN _slower_gpu's four ranks, four layers, rank 0's hiccup 110 us
    kernels = _slower_gpu(4, 110)
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in kernels.items()])
    # THEN rank 3 gated every cycle: at each all-reduce it arrived 20 us after the others, new
    # each time (its GPU never stood idle: the all-reduce before ended on every rank at once),
    # 80 us a cycle; rank 0's hiccup held the third all-reduce of odd cycles 10 us past rank 3
    # (its own share of that one's 30 us skew). Waits per cycle, by hand: even cycles ranks 0-2
    # 4 x 20 = 80 us, rank 3 none; odd cycles rank 0 3 x 20 = 60, ranks 1 and 2 60 + 30 = 90,
    # rank 3 10 (where the rule before it counted rank 3's lateness as carried from the
    # all-reduce before, and named rank 0 in odd cycles)
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 6
    assert cross.critical_path["waits_ns"].to_pylist() == ['{"0": 80000, "1": 80000, "2": 80000, "3": 0}', '{"0": 60000, "1": 90000, "2": 90000, "3": 10000}'] * 3


def test_a_collective_one_rank_launched_a_cycle_late_counts_in_the_cycle_the_others_waited_in():
    # GIVEN one report of four tensor-parallel ranks, 6 cycles of 1 ms (b = c ms), an all-reduce
    # each cycle starting at b+200 us on every rank and ending 40 us after its last rank starts
    # it; but rank 1's CPU launched cycle 2's only in its next cycle, the kernel starting at
    # 3.02 ms (in its cycle 3's phase), and rank 2 reaches cycle 3's 300 us late (b+500)
    starts = {r: [c * PERIOD + 200_000 for c in range(6)] for r in range(4)}
    starts[1][2] = 3 * PERIOD + 20_000
    starts[2][3] = 3 * PERIOD + 500_000
    kernels = {r: [(s, max(starts[o][k] for o in range(4)) + 40_000, AR) for k, s in enumerate(starts[r])] for r in range(4)}
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in kernels.items()])
    # THEN cycle 2's all-reduce counts in cycle 2, where three of its four ranks' phases put it:
    # rank 1 gated cycle 2, ranks 0, 2 and 3 waiting 3020 - 2200 = 820 us there; rank 2 gated
    # cycle 3, the others waiting 300 us at that cycle's own (counted in the last arrival's
    # cycle, the late launch gated no cycle 2 and merged both waits into cycle 3, naming rank 1)
    rows = {row["cycle"]: row for row in cross.critical_path.to_pylist()}
    assert (rows[2]["gating_rank"], rows[2]["how"], rows[2]["waits_ns"]) == (1, "collectives", '{"0": 820000, "1": 0, "2": 820000, "3": 820000}')
    assert (rows[3]["gating_rank"], rows[3]["how"], rows[3]["waits_ns"]) == (2, "collectives", '{"0": 300000, "1": 300000, "2": 0, "3": 300000}')


def test_a_slower_gpu_late_at_five_all_reduces_gates_over_a_larger_hiccup_at_one():
    # GIVEN _slower_gpu's four ranks, six layers, rank 0's hiccup 150 us: at the third all-reduce
    # of odd cycles rank 0 arrives 70 us after ranks 1 and 2, 50 after rank 3
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in _slower_gpu(6, 150).items()])
    # THEN rank 3 gates every cycle: it kept three ranks waiting 20 us at five all-reduces (300
    # us), where rank 0's hiccup kept ranks 1 and 2 waiting 70 and rank 3 50 (190 us), though 70
    # us is the larger single lateness (the rule before this named rank 0 in odd cycles)
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 6


def test_two_ranks_held_up_at_one_all_reduce_name_the_later_over_another_ranks_small_hiccup():
    # GIVEN one report of four ranks, 6 cycles of 1 ms (b = c ms), two all-reduces a cycle, each
    # ending 20 us after its last rank starts it: the first at b+100 us, rank 1 30 us late; the
    # second at b+200, ranks 2 and 3 held up on their CPUs, starting it at b+700 and b+710
    kernels: dict[int, list] = {r: [] for r in range(4)}
    for c in range(6):
        b = c * PERIOD
        first = {0: 100_000, 1: 130_000, 2: 100_000, 3: 100_000}
        second = {0: 200_000, 1: 200_000, 2: 700_000, 3: 710_000}
        for r in range(4):
            kernels[r] += [(b + first[r], b + 150_000, AR), (b + second[r], b + 730_000, AR)]
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in kernels.items()])
    # THEN rank 3 gates every cycle: ranks 0 and 1 waited 510 us for it and rank 2 10 (1,030 us
    # in all; without rank 3 they would still have waited 500 for rank 2, but its lateness is
    # its own, not rank 2's doing), where rank 1's 30 us kept three ranks waiting 90
    assert cross.critical_path["gating_rank"].to_pylist() == [3] * 6
    assert cross.critical_path["waits_ns"].to_pylist() == ['{"0": 540000, "1": 510000, "2": 40000, "3": 30000}'] * 6


def test_a_wait_at_another_groups_collective_that_slack_absorbed_leaves_a_later_hold_up_its_own():
    # GIVEN one report of two pairs, {0, 1} and {2, 3}, 6 cycles of 1 ms (b = c ms); each pair
    # all-reduces at b+50 (ending b+70; in {2, 3} rank 3 held up, starting at b+350: rank 2 waits
    # 300 us, both end b+370) and, after idling, {0, 1} at b+600 and {2, 3} at b+640 (all on
    # time, ending 20 us later); then a world all-gather, ranks 0, 1 and 3 at b+700, rank 2 held
    # up on its CPU until b+850, all ending b+870
    ag = "ncclDevKernel_AllGather_RING_LL"
    kernels: dict[int, list] = {r: [] for r in range(4)}
    for c in range(6):
        b = c * PERIOD
        for r in range(4):
            first_end = 70_000 if r < 2 else 370_000
            second = 600_000 if r < 2 else 640_000
            kernels[r] += [(b + (350_000 if r == 3 else 50_000), b + first_end, AR), (b + second, b + second + 20_000, AR),
                           (b + (850_000 if r == 2 else 700_000), b + 870_000, ag)]
    cross = cross_rank.analyze_cross_rank([named_view(r, ks, 6) for r, ks in kernels.items()])
    # THEN rank 2 gates every cycle: its 300 us wait at its pair's first all-reduce was absorbed
    # by the idle time before the second (which it reached on time), and it stood idle 190 us
    # after that one where rank 0 stood 80: its 150 us at the all-gather are its own, keeping
    # three ranks waiting 150 each (450 us), where rank 3 kept rank 2 waiting 300 (the rule
    # before this took the 300 as what made rank 2 late there, and named rank 3)
    assert "ranks 0, 1; ranks 2, 3;" in cross.warnings[0]
    assert cross.critical_path["gating_rank"].to_pylist() == [2] * 6


def two_pairs_on_one_machine(tmp_path, lag_us) -> list[str]:
    """Four per-rank exports of one machine (GPU UUIDs in common), rank r's session begun 7r us
    after rank 0's (its timestamps counted from there). Pairs {0, 1} and {2, 3} each run 8
    cycles of 4 all-reduces (same name), 50 us apart: a rank's 20 us gemm launched at t+3 on its
    stream, then the all-reduce from its gemm's end to the pair's last arrival + 10 us, t moving
    by 50 us; pair {2, 3}'s cycle c starts ``lag_us(c)`` us after pair {0, 1}'s (1000 + 2000c).
    Too close together to tell the pairs apart by their ends (documented): matched as one group."""
    import sqlite3

    from nsys_factory import FakeTrace

    U = 1000
    traces = [FakeTrace() for _ in range(4)]
    for c in range(8):
        for pair in ((0, 1), (2, 3)):
            b = 1000 + 2000 * c + (0 if pair == (0, 1) else lag_us(c))
            t = b + 10
            tail = {r: 0 for r in pair}
            for _ in range(4):
                arrived = {}
                for r in pair:
                    g0 = max(t + 3, tail[r])
                    traces[r].kernel(traces[r].call("cudaLaunchKernel", t * U, (t + 2) * U, pid=10 + r), g0 * U, (g0 + 20) * U, pid=10 + r, device=r, name="gemm")
                    arrived[r] = g0 + 20
                end = max(arrived.values()) + 10
                for r in pair:
                    traces[r].kernel(traces[r].call("cudaLaunchKernel", (t + 4) * U, (t + 6) * U, pid=10 + r), arrived[r] * U, end * U, pid=10 + r,
                                     device=r, name=AR)
                    tail[r] = end
                t += 50
            for r in pair:
                e = max(t, max(tail.values())) + 30
                traces[r].range(f"cycle {c}", b * U, e * U, pid=10 + r)
                traces[r].range("forward", b * U, e * U, pid=10 + r)
    paths = []
    tmp_path.mkdir(parents=True, exist_ok=True)
    for r, tr in enumerate(traces):
        p = tr.write(tmp_path / f"rank{r}.sqlite")
        with sqlite3.connect(p) as db:
            for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
                db.execute(f"update {table} set start = start - ?, end = end - ?", (7000 * r, 7000 * r))
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             + "".join(f"insert into TARGET_INFO_GPU values ({i}, 'H200', 'A-gpu{i}', '{i}', 132);" for i in range(4))
                             + "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); "
                             f"insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18 + 7000 * r});")
        paths.append(str(p))
    return paths


def test_one_machines_exact_clock_is_not_moved_by_another_pairs_collectives(tmp_path):
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    # GIVEN pair {2, 3} always 300 us behind pair {0, 1}, matched with it as one group (their
    # kernels end 300 us apart: another communicator's, said)
    a = load(two_pairs_on_one_machine(tmp_path, lambda c: 300), PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN each rank's offset is its session clock's, 7r us (the wrong matches had moved ranks 2
    # and 3 by -300 us and claimed +-0: -286 and -279 us), and the warning says +300 us
    assert {x.rank: x.offset_ns for x in a.cross.alignment} == {0: 0, 1: 7000, 2: 14000, 3: 21000}
    assert {x.rank: x.method for x in a.cross.alignment}[2] == "session start"
    said = [w for w in a.warnings if "look like another communicator" in w]
    assert [w.split(" on one")[0] for w in said] == ["rank 2's collectives end +300 us from rank 0's", "rank 3's collectives end +300 us from rank 0's"]
    # AND a pair only 12 us behind (a data-parallel attention pair held in step, its attention
    # longer), too near for the warning, leaves the exact clocks as they are too (it had moved
    # ranks 2 and 3 by -12 us, +-0: the median distance of their ends)
    near = load(two_pairs_on_one_machine(tmp_path / "near", lambda c: 12), PhaseConfig(phases=("forward",), skip_cycles=0))
    assert {x.rank: x.offset_ns for x in near.cross.alignment} == {0: 0, 1: 7000, 2: 14000, 3: 21000}
    assert not any("look like another communicator" in w for w in near.warnings)


def test_a_pair_drifting_past_the_other_is_said_to_end_apart(tmp_path):
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    # GIVEN pair {2, 3} drifting from 400 us behind pair {0, 1} to 400 us ahead over 8 cycles
    # (-400 + 800c/7 us: -400, -286, -172, -58, +57, +171, +285, +400), matched as one group
    a = load(two_pairs_on_one_machine(tmp_path, lambda c: int(-400 + 800 * c / 7)), PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN ranks 2 and 3 are said to end apart from rank 0's, either way: the signed median of
    # their ends' distances is near 0 (the lags -400 .. +400 us balance), which had said nothing,
    # while every distance is 57 us or more (the smallest lag), so their median is over 50 us
    said = [w for w in a.warnings if "look like another communicator" in w]
    assert [w.split("'s collectives")[0] for w in said] == ["rank 2", "rank 3"], a.warnings
    for w in said:
        distance = int(w.split("collectives end ")[1].split(" us")[0])
        assert distance >= 57 and "either way" in w and "they drift past each other" in w
    # and their exact session clocks (7r us) are not moved by those matches (a review's -440 ..
    # +360 us drift had moved them by 40 us, said +-228 us)
    assert {x.rank: (x.offset_ns, x.method) for x in a.cross.alignment if x.rank >= 2} == {2: (14000, "session start"), 3: (21000, "session start")}
    drifting = load(two_pairs_on_one_machine(tmp_path / "b", lambda c: int(-440 + 800 * c / 7)), PhaseConfig(phases=("forward",), skip_cycles=0))
    assert {x.rank: x.offset_ns for x in drifting.cross.alignment} == {0: 0, 1: 7000, 2: 14000, 3: 21000}
