"""Across ranks: one timeline, matched collectives, who waited for whom, and who gated each cycle.

Alignment never rewrites a trace's timestamps: each rank gets ``offset_ns`` (add it to the
rank's own ns to land on the common timeline of the lowest rank) and ``offset_uncertainty_ns``.
- Ranks from one report share one clock: offset 0, uncertainty 0.
- Otherwise the first guess is the difference of the reports' session start times
  (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``; 0 for exports made with ``--ts-normalize``,
  whose timestamps are UTC already), then it is refined with collectives: the same
  all-reduce ends at nearly the same moment on every rank, so the median end-time residual is
  removed and the median absolute deviation of what is left is the uncertainty. With no
  collectives to refine on, the uncertainty is unknown (None).

Collectives are matched across ranks by kernel name and order (the k-th ``ncclDevKernel_AllReduce...``
of every rank is one collective), or by end time where the ranks' clocks are one machine's and
their traces cover different stretches of the run (``_match_ordinals``), within each communicator
group: ranks whose collectives end apart on one machine's clock (the tensor-parallel groups of
pipeline stages or data-parallel replicas, kernels of the same names) are matched apart
(``communicator_groups``). For each: arrival skew = last start - first start, the last
rank to arrive, and per rank the time spent waiting (from its own start to the last arrival,
at most its kernel's duration); the rest of the kernel is communication.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.columns import thread_keys
from tracerecon.analysis.nccl import comm_mask, is_all_to_all, is_low_latency_ep, is_point_to_point
from tracerecon.schema import COLLECTIVES, CRITICAL_PATH
from tracerecon.analysis.projection import I64_MIN, distinct_values, equals, int64s


# How a cycle's gating rank was found (``critical_path.how``): the collective others waited for
# in it, or, where none joined the ranks, the rank whose GPU work ended last.
GATED_AT_COLLECTIVE = "collectives"
GATED_BY_LATEST_END = "latest end"
GATING_HOWS = (GATED_AT_COLLECTIVE, GATED_BY_LATEST_END)


@dataclass(frozen=True)
class RankView:
    """What cross-rank analysis needs of one rank."""

    rank: int
    clock: str  # ranks with the same clock id share a timeline (same report file)
    session_start_utc_ns: int | None
    gpu_ops: pa.Table
    phases: pa.Table
    absolute_time: bool = False  # exported with --ts-normalize: timestamps are already UTC epoch ns
    gpu_uuids: frozenset[str] = frozenset()  # the machine's GPUs: a GPU in common means one machine, one system clock
    syncs: pa.Table | None = None  # its blocking calls (schema.SYNCS): where its CPU waited for its GPU


@dataclass(frozen=True)
class RankAlignment:
    rank: int
    offset_ns: int
    offset_uncertainty_ns: int | None
    method: str  # "shared clock" | "session start" | "session start + collectives" | "collectives" | "none"


@dataclass(frozen=True)
class RankComm:
    rank: int
    comm_ns: int  # total time in communication kernels
    wait_ns: int  # the part of it spent waiting for other ranks
    n_collectives: int
    phase_wait_ns: np.ndarray = field(repr=False)  # per phase instance of this rank


@dataclass(frozen=True)
class CrossRank:
    alignment: tuple[RankAlignment, ...]
    comm: tuple[RankComm, ...]
    collectives: pa.Table  # one row per (collective, rank)
    critical_path: pa.Table  # one row per cycle
    warnings: tuple[str, ...] = ()  # what the matching of collectives could not take as given

    def alignment_of(self, rank: int) -> RankAlignment | None:
        return next((a for a in self.alignment if a.rank == rank), None)

    def comm_of(self, rank: int) -> RankComm | None:
        return next((c for c in self.comm if c.rank == rank), None)

    @functools.cached_property
    def _cycle_count(self) -> tuple[dict[int, int], CycleCount]:
        t = self.collectives
        if t.num_rows == 0:
            return {}, CycleCount((), ())
        rank, coll, cyc = int64s(t["rank"]), int64s(t["collective"]), int64s(t["cycle"], -1)
        ranks = np.unique(rank)
        grid = np.full((len(ranks), int(coll.max()) + 1), -1, dtype=np.int64)
        took_part = np.zeros(grid.shape, dtype=bool)
        grid[np.searchsorted(ranks, rank), coll] = cyc
        took_part[np.searchsorted(ranks, rank), coll] = True
        return {k: i for i, k in enumerate(ranks.tolist())}, cycle_counts(grid, took_part)

    def partners_of(self, rank: int) -> frozenset[int] | None:
        """The other ranks ``rank`` ran a matched collective with (of its communicator groups;
        every other rank matched, where the ranks are one group), from the collectives table
        alone; None where the table holds none of its collectives (not kept, or none matched)."""
        t = self.collectives
        if t.num_rows == 0:
            return None
        ranks, coll = int64s(t["rank"]), int64s(t["collective"])
        mine = ranks == rank
        if not mine.any():
            return None
        return frozenset(np.unique(ranks[np.isin(coll, coll[mine])]).tolist()) - {rank}

    def counted_cycles(self, rank: int, cycles: np.ndarray) -> np.ndarray:
        """``counted_cycle`` of each of ``cycles`` (int64; -1: none) of ``rank``."""
        rows, count = self._cycle_count
        cycles = np.asarray(cycles, dtype=np.int64)
        return count.counted(rows[rank], cycles) if rank in rows else cycles.copy()

    def counted_cycle(self, rank: int, cycle: int) -> int:
        """``rank``'s own cycle ``cycle`` (of its phases and cycles, its rows of ``collectives``)
        as ``critical_path`` counts it, the first matched rank's way (``cycle_counts``, from the
        collectives table alone, so an export read back has it too; -1 where that falls before
        the first rank's first cycle; unchanged for a rank matched in no collective)."""
        return int(self.counted_cycles(rank, np.array([cycle], np.int64))[0])

    def critical_path_json(self, leave_out: frozenset[int] = frozenset()) -> dict:
        """``rank_counts`` (cycles each rank gated: the others waited for it at a collective,
        or it finished last), ``waited_for_counts`` (of those, the cycles in which the others
        waited for it at a collective: a straggler, where finishing last may be a tie),
        ``phase_counts`` (over all ranks) and ``by_rank``: per gating rank its cycles and its own
        gating phases; the cycles ``leave_out`` (warm-up and incomplete cycles) are not counted."""
        cols = self.critical_path.select(["cycle", "gating_rank", "gating_phase", "how"]).to_pydict()
        kept = [c not in leave_out for c in cols["cycle"]]
        cols = {k: [x for x, keep in zip(v, kept) if keep] for k, v in cols.items()}
        gated = [(r, p) for r, p in zip(cols["gating_rank"], cols["gating_phase"]) if r is not None]
        by_rank: dict[str, dict] = {}
        for rank, phase in gated:
            d = by_rank.setdefault(str(rank), {"cycles": 0, "phase_counts": Counter()})
            d["cycles"] += 1
            if phase:
                d["phase_counts"][phase] += 1
        return {
            "rank_counts": {str(k): v for k, v in sorted(Counter(r for r, _ in gated).items())},
            "waited_for_counts": {str(k): v for k, v in sorted(Counter(r for r, h in zip(cols["gating_rank"], cols["how"])
                                                                      if r is not None and h == GATED_AT_COLLECTIVE).items())},
            "phase_counts": dict(Counter(p for p in cols["gating_phase"] if p).most_common()),
            "by_rank": {k: {"cycles": v["cycles"], "phase_counts": dict(v["phase_counts"].most_common())} for k, v in sorted(by_rank.items(), key=lambda kv: int(kv[0]))},
        }


def comm_kernels(ops: pa.Table) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """The communication kernels of ``ops`` (``comm_mask``), in start order: their rows, the
    names they ran under (short names), each one's code among those names, and the codes of
    names whose kernels keep their order rather than end together on every rank (sends and
    receives, whose ends lie apart by the transfer; DeepEP's low-latency dispatch and combine,
    by their demangled names: a name is so where any of its kernels is, as a bare ``dispatch``
    of both DeepEP modes). Each name's test runs once, not once a kernel."""
    idx = np.flatnonzero(comm_mask(ops)) if ops.num_rows else np.zeros(0, np.int64)
    if len(idx) == 0:
        return idx, [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = idx[np.argsort(int64s(ops["start_ns"])[idx], kind="stable")]
    # (names are never null: the reader reads a NULL name as "", and exports write none)
    listed, code = distinct_values(ops["name"], idx)
    p2p = np.array([is_point_to_point(n) for n in listed], dtype=bool)[code]
    if "demangled_name" in ops.column_names:  # (nsys's short name drops DeepEP's namespaces)
        full, full_code = distinct_values(ops["demangled_name"], idx)
        p2p |= np.array([n is not None and is_low_latency_ep(n) for n in full], dtype=bool)[full_code]
    return idx, listed, code, np.unique(code[p2p])


def _comm_ops(view: RankView, name_codes: dict[str, int]) -> dict[str, np.ndarray]:
    """One rank's communication kernels in start order (``comm_kernels``): start, end, phase
    (-1: none) and each one's key, which packs the global code of its name (``name_codes`` grows
    as names are met) with the kernel's place among the rank's kernels of that name (the k-th
    ``ncclDevKernel_AllReduce...`` of every rank is one collective); and ``in_order``, the codes
    of names whose kernels keep their order (sends and receives, DeepEP's low-latency ones)."""
    ops = view.gpu_ops
    idx, listed, local, in_order_local = comm_kernels(ops)
    if len(idx) == 0:  # (a rank that ran no communication kernel: no column is read)
        empty = np.zeros(0, np.int64)
        return {"start": empty, "end": empty, "phase": empty, "key": empty, "in_order": empty}
    glob = np.asarray([name_codes.setdefault(n, len(name_codes)) for n in listed], dtype=np.int64)
    code = glob[local]
    start, end = int64s(ops["start_ns"])[idx], int64s(ops["end_ns"])[idx]
    in_order = np.unique(glob[in_order_local])
    p2p = np.isin(code, in_order)  # a name's kernels all counted one way (a bare `dispatch` of both DeepEP modes)
    # The k-th kernel of each name: its rank within its name's kernels, in end order for
    # collectives (one collective's kernels end together on every rank, while ranks may start
    # two of them in either order: one NCCL stream on a rank, two at once on another), in start
    # order for sends and receives (their ends differ by the transfer).
    by_name = np.lexsort((np.where(p2p, start, end), code))
    sorted_code = code[by_name]
    group_first = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
    nth = np.empty(len(code), np.int64)
    nth[by_name] = np.arange(len(code)) - np.repeat(group_first, np.diff(np.r_[group_first, len(code)]))
    return {"start": start, "end": end, "phase": int64s(ops["phase_id"].take(pa.array(idx)), -1), "key": code << 40 | nth,
            "in_order": in_order}


def _lacked(rank: int, n: int, first: int, n_first: int) -> str:
    """What matching two ranks' kernels of a name in order leaves out, said: the last of the
    one that holds more, which the other lacks, are matched among no ranks (a collective one
    rank lacks is), so no one's wait in them counts."""
    more, lacking, extra = (first, rank, n_first - n) if n_first > n else (rank, first, n - n_first)
    return f"; rank {more}'s last {extra}, which rank {lacking} lacks, are matched among no ranks (no wait in them counts)"


def analyze_cross_rank(views: list[RankView]) -> CrossRank:
    """Alignment, collective matching, waiting and the per-cycle critical path for ``views``.

    Columnar throughout (ranks x collectives arrays): an 8-GPU tensor-parallel run has hundreds
    of collectives per cycle, and 8 ranks x 2,500 cycles x 120 collectives (2.4 M rows) take
    2.0-2.4 s on 2 cores, where one Python dict per row took 70 s (19-29 us a row)."""
    views = sorted(views, key=lambda v: v.rank)
    whole = [v.rank for v in views if v.gpu_ops.num_rows and equals(v.gpu_ops["kind"], "graph").any()] if len(views) > 1 else []
    unseen = (f"rank{'s' if len(whole) > 1 else ''} {', '.join(map(str, whole))} traced CUDA graphs whole (nsys --cuda-graph-trace=graph): "
              "collectives inside graphs are not seen, so they are neither matched nor waited for (trace with --cuda-graph-trace=node)",) if whole else ()
    name_codes: dict[str, int] = {}
    comm = [_comm_ops(v, name_codes) for v in views]
    names = sorted(name_codes, key=name_codes.get)
    silent = [len(c["key"]) == 0 for c in comm]
    if any(silent) and len(views) - sum(silent) >= 2:
        cross = _without_silent_ranks(views, comm, names, silent)
    else:
        cross = _matched(views, comm, names)
        if any(silent) and not all(silent):
            # One rank communicated, alone: no collective relates the ranks, so every cycle's
            # critical path goes by the latest end, as where none communicated (said, as the
            # collectives the one rank ran are matched with nobody's).
            quiet = [v.rank for v, q in zip(views, silent) if q]
            talking = next(v.rank for v, q in zip(views, silent) if not q)
            cross = replace(cross, warnings=(f"rank{'s' if len(quiet) > 1 else ''} {', '.join(map(str, quiet))} ran no communication kernels, "
                                             f"rank {talking} alone did: its collectives are matched with nobody's (no waits), and the critical path "
                                             "goes by which rank's work ended last",) + cross.warnings)
    return replace(cross, warnings=unseen + cross.warnings) if unseen else cross


def _matched(views: list[RankView], comm: list[dict[str, np.ndarray]], names: list[str]) -> CrossRank:
    """``analyze_cross_rank`` of ranks in rank order, given their communication kernels
    (``_comm_ops``) and the names their name codes stand for. The kernels of each name are
    matched within each of its communicator groups (``communicator_groups``: all ranks, unless
    one machine's clock shows several), collectives every rank of the group ran; the
    collectives table, the waits and the critical path hold every group's."""
    # Per name code: whose kernels keep their order (sends and receives, DeepEP's low-latency
    # kernels), as ``_comm_ops`` found them on any rank.
    p2p = np.zeros(len(names), dtype=bool)
    for c in comm:
        p2p[c["in_order"]] = True
    by_name = communicator_groups(views, comm, p2p)
    warnings = _groups_note(views, by_name, names)
    # Each group of ranks, with the names matched among them (every name's, where all ranks are
    # one group: the kernels of all names matched at once, as before groups were told).
    names_of_group: dict[tuple[int, ...], list[int]] = {}
    for code, groups in by_name.items():
        for g in groups:
            names_of_group.setdefault(tuple(g), []).append(code)
    n_ranks = len(views)
    # Per group: its rows, each row's kernel (start, end, phase) of each collective the group
    # ran, in the group's first rank's start order, and the collectives' keys.
    blocks: list[tuple[tuple[int, ...], list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]] = []
    # Per rank row, the phases of its sends and receives matched with nothing (a pipeline's
    # middle stage's): those cycles' ends say nothing of who held whom up (``_critical_path``).
    unpaired: list[list[np.ndarray]] = [[] for _ in views]
    for rows, codes in names_of_group.items():
        g_comm = [_of_names(comm[i], codes) for i in rows]
        before = g_comm
        g_comm, said = _match_ordinals([views[i] for i in rows], g_comm, names, p2p)
        warnings += said
        for i, b, c in zip(rows, before, g_comm):
            lone = (c["key"] < 0) & p2p[b["key"] >> 40]
            if lone.any():
                unpaired[i].append(b["phase"][lone])
        # Collectives every rank of the group ran, each rank's kernel of it (pos[r]).
        if len(rows) > 1:
            common = g_comm[0]["key"]
            for c in g_comm[1:]:
                common = np.intersect1d(common, c["key"], assume_unique=True)  # keys are unique per rank
        else:
            common = np.zeros(0, np.int64)
        pos = [_positions(c["key"], common) for c in g_comm]
        order = np.argsort(g_comm[0]["start"][pos[0]], kind="stable")
        pos = [p[order] for p in pos]
        blocks.append((rows, [(c["start"][p], c["end"][p], c["phase"][p]) for c, p in zip(g_comm, pos)], common[order]))

    # Ranks x collectives, group after group; ``part``: the rank took part (its group's).
    m = sum(len(common) for _, _, common in blocks)
    start, end = np.zeros((n_ranks, m), np.int64), np.zeros((n_ranks, m), np.int64)
    phase = np.full((n_ranks, m), -1, np.int64)
    part = np.zeros((n_ranks, m), bool)
    opens_group = np.zeros(m, bool)
    at = 0
    for rows, kernels, common in blocks:
        span = slice(at, at + len(common))
        for r, (s_r, e_r, ph_r) in zip(rows, kernels):
            start[r, span], end[r, span], phase[r, span], part[r, span] = s_r, e_r, ph_r, True
        if len(common):
            opens_group[at] = True
        at += len(common)
    keys = np.concatenate([common for _, _, common in blocks]) if blocks else np.zeros(0, np.int64)
    in_order = p2p[keys >> 40]
    all_to_all = np.array([is_all_to_all(n) for n in names], dtype=bool)[keys >> 40] if m else np.zeros(0, bool)
    alignment, moved = _align(views, start, end, part, in_order, all_to_all)
    warnings += moved + _other_communicators(views, end, part, in_order, all_to_all)
    offset = np.array([a.offset_ns for a in alignment], dtype=np.int64)
    drifts, alignment, said = _clock_drifts(views, alignment, end, part, in_order, offset, all_to_all)
    warnings += said

    aligned = _drift_out(start + offset[:, None], drifts)
    aligned_end = _drift_out(end + offset[:, None], drifts)
    first = np.where(part, aligned, np.iinfo(np.int64).max).min(axis=0) if m else np.zeros(0, np.int64)
    arrived = np.where(part, aligned, I64_MIN)
    last = arrived.max(axis=0) if m else np.zeros(0, np.int64)
    # The last to arrive; of ranks arriving together, the highest.
    last_pos = (n_ranks - 1 - np.argmax(arrived[::-1], axis=0)) if m else np.zeros(0, np.int64)
    rank_ids = np.array([v.rank for v in views], dtype=np.int64)
    one_clock = np.array([[_one_machines_clock(v, q) for q in views] for v in views], dtype=bool)
    wait = rank_waits(aligned, aligned_end, part, last, in_order, one_clock)

    per_rank_wait, cycle = [], np.full((n_ranks, m), -1, dtype=np.int64)
    for r, v in enumerate(views):
        n_ph = v.phases.num_rows
        waits = np.zeros(n_ph, dtype=np.int64)
        ok = (phase[r] >= 0) & (phase[r] < n_ph)
        np.add.at(waits, phase[r][ok], wait[r][ok])
        per_rank_wait.append(waits)
        if n_ph:
            cycle[r, ok] = int64s(v.phases["cycle"], -1)[phase[r][ok]]
    # One row per (collective, rank of its group), collective by collective.
    if part.all():
        flat = lambda a: a.T.reshape(-1)  # noqa: E731
    else:  # (each (collective, rank) its group ran, collective by collective: one gather per column)
        at_coll, at_rank = np.nonzero(part.T)
        flat = lambda a: a[at_rank, at_coll]  # noqa: E731
    per_coll = lambda a: flat(np.broadcast_to(a, (n_ranks, m)))  # noqa: E731
    ci = per_coll(np.arange(m, dtype=np.int64))
    ph_flat, cyc_flat = flat(phase), flat(cycle)
    collectives = pa.table({
        "collective": ci,
        "name": pa.DictionaryArray.from_arrays(pa.array((keys >> 40)[ci], pa.int32()), pa.array(names, pa.string())).cast(pa.string()),
        "rank": pa.array(flat(np.broadcast_to(rank_ids[:, None], (n_ranks, m))), pa.int32()),
        "start_ns": flat(start), "end_ns": flat(end),
        "aligned_start_ns": flat(aligned), "aligned_end_ns": flat(aligned_end),
        "phase_id": pa.array(ph_flat, mask=ph_flat < 0),
        "cycle": pa.array(cyc_flat, mask=cyc_flat < 0),
        "skew_ns": per_coll(last - first),
        "last_rank": pa.array(per_coll(rank_ids[last_pos]), pa.int32()),
        "wait_ns": flat(wait), "comm_ns": flat(end - start - wait),
    }, schema=COLLECTIVES)
    comm_stats = tuple(
        RankComm(rank=v.rank, comm_ns=int((c["end"] - c["start"]).sum()), wait_ns=int(wait[r].sum()), n_collectives=len(c["key"]),
                 phase_wait_ns=per_rank_wait[r])
        for r, (v, c) in enumerate(zip(views, comm))
    )
    arrivals = _Arrivals(rank_ids, aligned, aligned_end, start, end, in_order, first, last, last_pos, wait, phase, cycle, part, opens_group)
    unpaired_cycles = [_cycles_of_phases(v, np.concatenate(u)) if u else np.zeros(0, np.int64) for v, u in zip(views, unpaired)]
    return CrossRank(tuple(alignment), comm_stats, collectives, _critical_path(views, arrivals, offset, unpaired_cycles, drifts), tuple(warnings))


def rank_waits(began: np.ndarray, ended: np.ndarray, part: np.ndarray, last: np.ndarray, in_order: np.ndarray | None = None,
               one_clock: np.ndarray | None = None) -> np.ndarray:
    """Each rank's wait at each matched collective (ranks x collectives: aligned ``began`` and
    ``ended`` of its kernel, ``part``: it took part, ``last``: the last arrival): from its
    kernel's start until the last arrival began, at most its kernel's length; 0 where it took
    no part. But a rank waits only for the ranks that began before its kernel ended (within
    ``APART_AT_TIMES_NS``), where both are on one machine's clock (``one_clock``: ranks x
    ranks; none given: all are) and the kernels are a collective's (not ``in_order``: sends and
    receives, DeepEP's low-latency halves, whose receive launched after other work ends once the
    peer's send landed, before the peer's receive began). In one collective every rank began
    before any ended: a kernel that ended before another rank's of its ordinal began was not
    waiting for that one. Two tensor-parallel pairs held in step by a world collective, matched
    as one communicator where their all-reduces end together, charged the pair on time the
    other pair's lateness (a review's shape: 15 us at each all-reduce, 75 us where events read
    60); a broadcast's root or a reduce's senders, which may end first, wait for nobody that came
    after. Across machines, clocks aligned by collectives may be off by more than the tolerance
    (a drift of 10 ppm over a capture): the wait runs to the last arrival there, as before."""
    wait = np.where(part, np.minimum(np.maximum(last[None, :] - began, 0), ended - began), 0)
    first_end = np.where(part, ended, np.iinfo(np.int64).max).min(axis=0) if part.size else np.zeros(0, np.int64)
    odd = first_end + APART_AT_TIMES_NS < last
    if in_order is not None:
        odd &= ~in_order
    odd = np.flatnonzero(odd)
    same = np.ones((part.shape[0], part.shape[0]), bool) if one_clock is None else one_clock
    # (rare: those where a kernel ended before the last began; ranks x ranks x a block of them at
    # a time, so 64 ranks hold 32 MB at most)
    block = max(1, (1 << 22) // max(1, part.shape[0] ** 2))
    for at in range(0, len(odd), block):
        cols = odd[at:at + block]
        b = np.where(part[:, cols], began[:, cols], I64_MIN)
        e = ended[:, cols]
        waited_for = (b[None, :, :] <= e[:, None, :] + APART_AT_TIMES_NS) | ~same[:, :, None]
        mine = np.where(waited_for, b[None, :, :], I64_MIN).max(axis=1)
        wait[:, cols] = np.where(part[:, cols], np.minimum(np.maximum(mine - began[:, cols], 0), e - began[:, cols]), 0)
    return wait


def _cycles_of_phases(v: RankView, phase: np.ndarray) -> np.ndarray:
    """The cycles (the rank's own numbers) of its phase instances ``phase`` (-1: none), each once."""
    n_ph = v.phases.num_rows
    ok = phase[(phase >= 0) & (phase < n_ph)]
    if not len(ok):
        return np.zeros(0, np.int64)
    cyc = int64s(v.phases["cycle"], -1)[ok]
    return np.unique(cyc[cyc >= 0])


def _of_names(c: dict[str, np.ndarray], codes: list[int]) -> dict[str, np.ndarray]:
    """One rank's communication kernels (``_comm_ops``) of the names ``codes`` only (all of
    them, as they are, where it ran no other)."""
    keep = np.isin(c["key"] >> 40, codes)
    if keep.all():
        return c
    return {"start": c["start"][keep], "end": c["end"][keep], "phase": c["phase"][keep], "key": c["key"][keep],
            "in_order": c["in_order"][np.isin(c["in_order"], codes)]}


def _chained(a: RankAlignment, via: RankAlignment) -> RankAlignment:
    """``a``, a rank's offset onto another rank's timeline, carried onto the first rank's by
    ``via``, that other rank's own: where ``a`` is that rank's clock ("shared clock") it is
    ``via``'s; else the offsets add, and ``a``'s uncertainty holds where ``via``'s is exact (0),
    else it is unknown."""
    if a.method == "shared clock":
        return replace(via, rank=a.rank)
    return replace(a, offset_ns=a.offset_ns + via.offset_ns, offset_uncertainty_ns=a.offset_uncertainty_ns if via.offset_uncertainty_ns == 0 else None)


def _without_silent_ranks(views: list[RankView], comm: list[dict[str, np.ndarray]], names: list[str], silent: list[bool]) -> CrossRank:
    """Collectives matched among the ranks that ran communication kernels, where some ran none
    (a process of another role traced with the tensor-parallel ranks, a trace taken without its
    NCCL kernels): matched against every rank, each collective would be one no rank lacks, and
    there would be none. The silent ranks are left out of the collectives and the critical path
    (said in a warning), keep their alignment on the same timeline (their clock's, collectives
    cannot refine it) and count no communication. Offsets stay on the first rank's timeline,
    silent or not: the talking ranks' offsets onto the first talking rank's are carried over by
    that rank's clock base (``_clock_base``), which no collective refines."""
    talking = [v for v, quiet in zip(views, silent) if not quiet]
    quiet_views = [v for v, quiet in zip(views, silent) if quiet]
    cross = _matched(talking, [c for c, quiet in zip(comm, silent) if not quiet], names)  # silent ranks added no names
    stats = list(cross.comm)
    via = RankAlignment(talking[0].rank, *_unrefined(talking[0], views[0]))
    alignment = [RankAlignment(v.rank, *_unrefined(v, views[0])) for v in quiet_views] + [_chained(a, via) for a in cross.alignment]
    hop = via.offset_ns
    for v in quiet_views:
        stats.append(RankComm(rank=v.rank, comm_ns=0, wait_ns=0, n_collectives=0, phase_wait_ns=np.zeros(v.phases.num_rows, dtype=np.int64)))
    warning = (f"rank{'s' if len(quiet_views) > 1 else ''} {', '.join(str(v.rank) for v in quiet_views)} ran no communication kernels: "
               f"collectives, waits and the critical path are those of rank{'s' if len(talking) > 1 else ''} {', '.join(str(v.rank) for v in talking)}")
    collectives = cross.collectives
    if hop and collectives.num_rows:  # aligned times on the same timeline as the offsets
        collectives = collectives.set_column(collectives.schema.get_field_index("aligned_start_ns"), "aligned_start_ns",
                                             pc.add(collectives["aligned_start_ns"], hop))
        collectives = collectives.set_column(collectives.schema.get_field_index("aligned_end_ns"), "aligned_end_ns",
                                             pc.add(collectives["aligned_end_ns"], hop))
    return CrossRank(tuple(sorted(alignment, key=lambda a: a.rank)), tuple(sorted(stats, key=lambda c: c.rank)), collectives,
                     cross.critical_path, (warning,) + cross.warnings)


def _unrefined(v: RankView, ref: RankView) -> tuple[int, int | None, str]:
    """``v``'s offset onto ``ref``'s timeline, its uncertainty and method, from the clocks alone
    (``_clock_base``; 0 and "none" where nothing relates them)."""
    base, method = _clock_base(v, ref) or (0, "none")
    return base, 0 if method == "shared clock" else None, method


def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` (all present, keys unique) sits in ``keys``."""
    order = np.argsort(keys, kind="stable")
    return order[np.searchsorted(keys[order], wanted)] if len(wanted) else np.zeros(0, np.int64)


def _clock_base(v: RankView, ref: RankView) -> tuple[int, str] | None:
    """What to add to ``v``'s ns to land on ``ref``'s timeline before collectives refine it, and
    how that is known; None where nothing relates the two clocks."""
    if v.clock == ref.clock:
        return 0, "shared clock"

    # Each rank's timestamps count from its own session start, unless the export made them
    # UTC already (--ts-normalize); the base offset brings both to the reference rank's clock.
    def epoch(x: RankView) -> int | None:
        return 0 if x.absolute_time else x.session_start_utc_ns

    if epoch(v) is not None and epoch(ref) is not None:
        return epoch(v) - epoch(ref), ("utc timestamps" if v.absolute_time and ref.absolute_time else "session start")
    return None


def _one_machines_clock(v: RankView, ref: RankView) -> bool:
    """Whether ``v``'s times, on ``ref``'s clock (``_clock_base``), are good to a small fraction
    of a collective: the same report, or exports with session start times (or UTC timestamps)
    taken on one machine (they list a GPU in common), whose system clock both read. Across
    machines the clocks disagree by up to milliseconds, as much as several collectives."""
    if v.clock == ref.clock:
        return True
    return _clock_base(v, ref) is not None and bool(v.gpu_uuids & ref.gpu_uuids)


def _match_ordinals(views: list[RankView], comm: list[dict[str, np.ndarray]], names: list[str], p2p: np.ndarray) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Which kernel of each rank is which collective. The k-th kernel of a name is one
    collective on every rank where the ranks' traces cover the same stretch of the run; a trace
    begun later (``--delay``, a timed capture) holds its k-th as another rank's (k+d)-th.

    Where a rank's times are good on the first rank's clock (``_one_machines_clock``), its
    kernels of each name are matched by end time (a collective's kernels end together on every
    rank): renumbered by the most common distance, in kernels, from each one's end to the
    nearest end of the first rank's, when that shift fits their ends at least 4x better than
    none; where no one shift fits (a record dropped mid-run), each kernel is paired with the one
    that ends with it (``_paired_by_end``). Each renumbering is a warning, and so is a rank whose ends fit neither. Ranks of
    one report share its capture, which no rank began later: their kernels keep the order
    (renumbering them by ends paired another communicator's collectives, a pipeline stage's
    tensor-parallel group, with the first rank's). Sends and receives (ends apart by the
    transfer) keep the order, with a warning where their counts differ, unless a renumbering by
    ends fits clearly (per-rank reports on one machine: an all-to-all's ``SendRecv`` kernels do
    end together); a rank with half again as many as another or more, and 4 more at least (a
    pipeline's middle stage, which receives and sends under one name), has its kernels of the
    name matched with nothing, with a warning. Elsewhere (other machines, no session
    times) a later start cannot be told from a clock offset: the order is kept, with a warning
    where the counts differ. Kernels that fall before the first rank's first are matched with
    nothing."""
    warnings: list[str] = []
    if len(views) < 2:
        return comm, warnings
    ref = comm[0]
    ref_code, ref_nth = ref["key"] >> 40, ref["key"] & ((1 << 40) - 1)
    out = [ref]
    for v, c in zip(views[1:], comm[1:]):
        code, nth = c["key"] >> 40, c["key"] & ((1 << 40) - 1)
        new_nth = nth.copy()
        alone = np.zeros(len(nth), dtype=bool)  # kernels matched with nothing
        timed = _one_machines_clock(v, views[0])
        same_report = v.clock == views[0].clock
        base = _clock_base(v, views[0])
        for k in np.unique(code).tolist():
            mine = np.flatnonzero(code == k)
            theirs = np.flatnonzero(ref_code == k)
            if len(theirs) == 0:
                continue
            label = f"rank {v.rank} holds {len(mine)} {names[k]} kernels, rank {views[0].rank} {len(theirs)}"
            if p2p[k]:
                if len(mine) == len(theirs):
                    continue
                if max(len(mine), len(theirs)) >= P2P_STAGE_RATIO * min(len(mine), len(theirs)) and \
                        abs(len(mine) - len(theirs)) >= P2P_STAGE_MIN_EXTRA:
                    alone[mine] = True
                    warnings.append(f"{label}: sends and receives not matched (a pipeline stage that receives and sends under one name): "
                                    "their waits are not counted")
                    continue
                by_nth = mine[np.argsort(nth[mine])]
                shift = _ordinal_shift(ref["end"][theirs][np.argsort(ref_nth[theirs])], c["end"][by_nth] + base[0]) if timed and not same_report else 0
                if shift:
                    new_nth[by_nth] = np.arange(len(by_nth)) + shift
                    warnings.append(f"{label} (their traces cover different stretches of the run): matched by end time (the k-th with "
                                    f"rank {views[0].rank}'s (k{shift:+d})-th)")
                else:
                    warnings.append(f"{label}: matched in order (the k-th with the k-th); a send and its receive do not end together")
                continue
            if not timed:
                if len(mine) != len(theirs):
                    warnings.append(f"{label}: matched in order (the k-th with the k-th); the traces come from different machines "
                                    "or carry no session times, so a later start cannot be told from a clock offset"
                                    + _lacked(v.rank, len(mine), views[0].rank, len(theirs)))
                continue
            e_ref = ref["end"][theirs][np.argsort(ref_nth[theirs])]
            by_nth = mine[np.argsort(nth[mine])]
            paired, within = _paired_by_end(e_ref, c["end"][by_nth] + base[0])
            if paired is None and same_report:
                if len(mine) != len(theirs):
                    warnings.append(f"{label}: matched in order (the k-th with the k-th); one report's ranks share its capture"
                                    + _lacked(v.rank, len(mine), views[0].rank, len(theirs)))
                continue
            if paired is not None:
                # A kernel missing here or there mid-run (CUPTI drops records when its buffers
                # overflow): no one renumbering fits the whole run, each is paired by its end.
                new_nth[by_nth] = paired
                lone = int((paired < 0).sum())
                warnings.append(f"{label}: matched each to the one of rank {views[0].rank}'s that ends with it (within "
                                f"{within / 1000:g} us); {len(theirs) - (len(mine) - lone)} of rank {views[0].rank}'s and {lone} of "
                                f"rank {v.rank}'s have no partner (a record dropped from a trace?)")
                continue
            shift = _ordinal_shift(e_ref, c["end"][by_nth] + base[0])
            if shift is None:
                warnings.append(f"{label}: matched in order (the k-th with the k-th); their ends fit no numbering clearly better")
            elif shift:
                new_nth[by_nth] = np.arange(len(by_nth)) + shift
                first = f"its first is rank {views[0].rank}'s #{shift + 1}" if shift > 0 else f"its #{1 - shift} is rank {views[0].rank}'s first"
                # As many kernels on both, shifted: a capture begun and ended later, or the kernels
                # of another communicator that runs at other times (a PP=2 x TP=2 stage's
                # all-reduces matched with the other stage's, told "different stretches" alone)
                why = ("their traces cover different stretches of the run" if len(mine) != len(theirs) else
                       "their traces cover different stretches of the run, or these are another communicator's kernels, "
                       "as another pipeline stage's, matched as one group")
                warnings.append(f"{label} ({why}): matched by end time ({first})")
        if (new_nth == nth).all() and not alone.any():
            out.append(c)
            continue
        # Renumbered before the first rank's first, or matched with nothing: a key of its own.
        key = np.where((new_nth >= 0) & ~alone, code << 40 | np.maximum(new_nth, 0), -1 - np.arange(len(nth)))
        out.append(dict(c, key=key))
    return out, warnings


def _paired_by_end(e_ref: np.ndarray, e_me: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Where no single renumbering fits: per kernel of a rank (ends ``e_me``, on the first rank's
    clock, in order), the position of the first rank's kernel (ends ``e_ref``, in order) that
    ends with it, -1 where none does. Ending with it: within ``ONE_COLLECTIVE_END_SPREAD_NS``
    and a tenth of the first rank's median spacing (so that the kernels of another communicator,
    which fall anywhere between, rarely pass). Only when most of its kernels have such a
    partner, the pairs keep the order (each of the first rank's taken once) and their distance
    in kernels changes a few times (a record dropped here or there), not never (that is
    ``_ordinal_shift``'s case) nor often (chance); else None. With the distance taken as ending
    together."""
    if len(e_ref) < PAIRED_MIN_KERNELS or len(e_me) < PAIRED_MIN_KERNELS:
        return None, 0
    at = np.clip(np.searchsorted(e_ref, e_me), 1, len(e_ref) - 1)
    at = np.where(np.abs(e_ref[at - 1] - e_me) <= np.abs(e_ref[at] - e_me), at - 1, at)
    within = min(ONE_COLLECTIVE_END_SPREAD_NS, int(np.median(np.diff(e_ref))) // 10)
    if within < PAIRED_MIN_WITHIN_NS:  # collectives closer than 10 us apart: ends tell too little
        return None, within
    close = np.abs(e_ref[at] - e_me) <= within
    if 2 * close.sum() <= len(e_me):
        return None, within
    pos = at[close]
    steps = int((np.diff(pos - np.flatnonzero(close)) != 0).sum())
    if (np.diff(pos) <= 0).any() or steps == 0 or steps > max(2, len(e_me) // 20):
        return None, within
    return np.where(close, at, -1), within


def _ordinal_shift(e_ref: np.ndarray, e_me: np.ndarray) -> int | None:
    """By how many kernels to renumber a rank's kernels of one name (ends ``e_me``, on the first
    rank's clock, in order) to match the first rank's (``e_ref``): the most common distance from
    each to the nearest end of the first rank's: 0 where that is 0; the shift where it fits the
    ends at least 4x better than the order (median absolute difference of matched ends); else
    None: no numbering fits clearly better than another (evenly spaced collectives and a clock
    off by more than half their spacing, or kernels of other communicators)."""
    if len(e_ref) == 0 or len(e_me) == 0:
        return 0
    at = np.clip(np.searchsorted(e_ref, e_me), 1, len(e_ref) - 1) if len(e_ref) > 1 else np.zeros(len(e_me), np.int64)
    if len(e_ref) > 1:
        at = np.where(np.abs(e_ref[at - 1] - e_me) <= np.abs(e_ref[at] - e_me), at - 1, at)
    dist, counts = np.unique(at - np.arange(len(e_me)), return_counts=True)
    shift = int(dist[np.argmax(counts)])
    if shift == 0:
        return 0

    def misfit(d: int) -> float:
        k = np.arange(len(e_me))
        ok = (k + d >= 0) & (k + d < len(e_ref))
        return float(np.median(np.abs(e_me[ok] - e_ref[k[ok] + d]))) if ok.any() else float("inf")

    return shift if misfit(shift) * 4 < misfit(0) else None


# A rank with this many times another's send/receive kernels of one name is a pipeline stage
# that both receives and sends (under one name): its kernels pair with nobody's k-th.
P2P_STAGE_RATIO = 1.5
# ... and this many more at least (a short capture's one extra kernel, 3 against 2, is no stage).
P2P_STAGE_MIN_EXTRA = 4

# Ranks reaching a collective within this of each other arrived together: none gated it (a
# nanosecond's lead is no straggler).
ARRIVED_TOGETHER_NS = 1_000

# Pairing kernels one by one by their ends (_paired_by_end) wants a few of them, at least a
# microsecond of room each: a collective every 10 us or more.
PAIRED_MIN_KERNELS = 4
PAIRED_MIN_WITHIN_NS = 1_000

# On one machine's clock the kernels of one collective end within a few us of each other on
# every rank (the 2-H200 NCCL samples: the session clocks and the matched ends agree to 5 ns);
# a send and its receive do not (22 us apart in a public 2-H100 trace), so they are not looked at.
ONE_COLLECTIVE_END_SPREAD_NS = 50_000
# How far matching collectives may move one machine's session clock: its error (the 2-H200
# samples' refinements moved it 5, 53, 91 and 641 ns). Another communicator's kernels matched as
# one group (a data-parallel attention pair 12 us behind the other, held in step by a world
# all-to-all) would move it by their distance, claiming +-0.
ONE_MACHINE_CLOCK_ERROR_NS = 2_000


def _other_communicators(views: list[RankView], end: np.ndarray, part: np.ndarray, in_order: np.ndarray, all_to_all: np.ndarray) -> list[str]:
    """Ranks whose collectives (rows of ``end`` and ``part``, ranks x matched collectives; sends
    and receives, ``in_order``, left out) do not end with those of the first rank they were
    matched with (the first rank, or their group's first; median more than
    ``ONE_COLLECTIVE_END_SPREAD_NS`` apart on one machine's clock): kernels of other
    communicators (the tensor-parallel group of another pipeline stage or data-parallel
    replica), which matching by name and order pairs anyway where ``communicator_groups`` could
    not split them (a rank alone in ending its collectives so, groups in near lockstep). Their
    waits are not waits for each other: said, not hidden. Where those are all all-to-alls
    (``all_to_all``, per collective), the line says they may be one communicator's too: an
    all-to-all's kernels end on each rank once its own share has landed (a hot expert's rank
    later every step, its numbers right; a review's)."""
    out: list[str] = []
    counted = part & ~in_order
    for r, v in enumerate(views[1:], start=1):
        q = _first_met(counted, r)
        if q is None or not _one_machines_clock(v, views[q]):
            continue
        both = counted[q] & counted[r]
        off = _ends_apart(end[r, both] + _clock_base(v, views[q])[0] - end[q, both])
        if off is None:
            continue
        apart, distance = off
        how = (f"end {apart / 1000:+.0f} us from rank {views[q].rank}'s on one machine's clock (median)" if abs(apart) > ONE_COLLECTIVE_END_SPREAD_NS else
               f"end {distance / 1000:.0f} us from rank {views[q].rank}'s, either way, on one machine's clock (median distance; "
               f"{apart / 1000:+.0f} us by the signed median: they drift past each other)")
        if all_to_all[both].all():
            out.append(f"rank {v.rank}'s all-to-alls {how}: the kernels of another communicator (another expert-parallel group's), or of one "
                       "whose ranks' shares differ (a rank receiving more tokens, a hot expert's, ends later each time); ranks are matched as one "
                       "group, so where they are another communicator's, waits and stragglers across the two groups do not hold")
            continue
        out.append(f"rank {v.rank}'s collectives {how}, where one collective's kernels end together: they look like another communicator's (a tensor-parallel "
                   "group of another pipeline stage or data-parallel replica); ranks are matched as one group, so waits and "
                   "stragglers across the two groups do not hold")
    return out


def _ends_apart(d: np.ndarray) -> tuple[int, int] | None:
    """Whether matched collectives' kernels of two ranks on one machine's clock do not end
    together (``d``: their ends' differences, ns): the signed median and the median distance
    where either is over ``ONE_COLLECTIVE_END_SPREAD_NS`` (by the distance too: a group that
    drifts past the other, from 400 us behind to 400 us ahead, reads +0 by the signed median),
    None where they end together."""
    apart, distance = int(np.median(d)), int(np.median(np.abs(d)))
    return (apart, distance) if max(abs(apart), distance) > ONE_COLLECTIVE_END_SPREAD_NS else None


def communicator_groups(views: list[RankView], comm: list[dict[str, np.ndarray]], p2p: np.ndarray) -> dict[int, list[list[int]]]:
    """Per name code of the ranks' communication kernels, in code order: the ranks (rows of
    ``views``, in rank order) split into the communicator groups that ran kernels of that name,
    each a list of rows in order, the groups by their first rows. One collective's kernels end
    together on every rank of its communicator (within a few us on one machine's clock), where
    another communicator's kernels of the same name (the tensor-parallel group of another
    pipeline stage or data-parallel replica) end anywhere between; a rank may share one name's
    communicator with every rank (an expert-parallel all-gather) and another's with a few (the
    tensor-parallel all-reduce). Rank by rank, each joins the first group whose first rank's
    kernels of the name its own end with, or whose ends cannot tell (``ends_together``: another
    machine's clock, too few kernels, kernels under 80 us apart, ends neither mostly together
    nor mostly apart), or starts a group where each group's ends say apart. A communicator shows as two
    ranks or more ending together: a rank whose ends fit nobody's (a clock off by part of a
    collective reads so as well) joins the first such group, and with fewer than two such groups
    the name's ranks are one group, matched as where nothing shows another communicator
    (``_other_communicators`` says what their ends look like). Only the ranks that ran kernels
    of the name are grouped: a name of some ranks only (a pipeline stage's own all-gather) is
    matched among them. Sends and receives (``p2p``) are one group of the ranks that ran them:
    their ends are apart by the transfer."""
    codes = np.unique(np.concatenate([c["key"] >> 40 for c in comm])) if comm else np.zeros(0, np.int64)
    everyone = list(range(len(views)))
    out: dict[int, list[list[int]]] = {}
    for code in codes.tolist():
        have = [i for i in everyone if ((comm[i]["key"] >> 40) == code).any()]
        groups: list[list[int]] = []
        refs: dict[int, tuple[np.ndarray, int] | None] = {}  # per group's first row: its ends to compare with
        for i in have if not p2p[code] else ():
            for g in groups:
                if g[0] not in refs:
                    refs[g[0]] = _end_reference(comm[g[0]], code)
                if ends_together(views[i], comm[i], views[g[0]], refs[g[0]], code) is not False:
                    g.append(i)
                    break
            else:
                groups.append([i])
        shared = [g for g in groups if len(g) > 1]
        if len(shared) < 2:
            out[code] = [everyone if len(have) == len(everyone) else have]
            continue
        shared[0] = sorted(shared[0] + [i for g in groups if len(g) == 1 for i in g])
        out[code] = sorted(shared, key=lambda g: g[0])
    return out


def _end_reference(lead_c: dict[str, np.ndarray], code: int) -> tuple[np.ndarray, int] | None:
    """``end_reference`` of a rank's kernels of the name ``code`` (``lead_c``, from ``_comm_ops``)."""
    mine = (lead_c["key"] >> 40) == code
    return end_reference(lead_c["start"][mine], lead_c["end"][mine])


def end_reference(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int] | None:
    """One rank's kernels of one name as others' are compared with (``ends_agree``): their ends
    in order and the tolerance (``GROUP_END_TOLERANCE_NS``, or a quarter of their median length
    where that is more: a large collective's kernels end a step of its pipeline apart); None
    where they tell nothing: fewer than ``PAIRED_MIN_KERNELS``, or under four tolerances apart
    (median), where another communicator's kernels, at any time between, would pass the
    tolerance half the time."""
    e_ref = np.sort(end)
    if len(e_ref) < PAIRED_MIN_KERNELS:
        return None
    tol = max(GROUP_END_TOLERANCE_NS, int(np.median(end - start)) // 4)
    return (e_ref, tol) if np.median(np.diff(e_ref)) >= 4 * tol else None


def ends_together(v: RankView, c: dict[str, np.ndarray], lead: RankView, reference: tuple[np.ndarray, int] | None,
                  code: int) -> bool | None:
    """Whether ``v``'s kernels of the name ``code`` (``c``, from ``_comm_ops``) end with
    ``lead``'s (``reference``: ``_end_reference`` of them), on one machine's clock: of those
    within the span of ``lead``'s, give or take half their spacing (a trace begun or ended
    elsewhere in the run), the share that end within the tolerance of one of ``lead``'s: True
    at three quarters or more; False at a quarter of the way from ``chance`` to all, or less.
    ``chance`` is the share of the time within half a spacing of one of ``lead``'s ends that is
    within the tolerance of one: what kernels of another communicator, at any other time, pass
    by. Where the ends are far apart for the tolerance it is near 0, and the cut a quarter; two
    data-parallel replicas' all-reduces 220 us apart, drifting past each other, ended within
    20 us of the other's 26 % of the time (chance a fifth: cut 40 %). None where that
    cannot be told: in between, or the two are not on one machine's clock
    (``_one_machines_clock``), or ``lead``'s kernels tell nothing (``reference`` None), or fewer
    than ``PAIRED_MIN_KERNELS`` of ``v``'s fall in their span."""
    if reference is None or not _one_machines_clock(v, lead):
        return None
    return ends_agree(reference, c["end"][(c["key"] >> 40) == code] + _clock_base(v, lead)[0])  # (one machine's clock: its base is known)


def ends_agree(reference: tuple[np.ndarray, int], e: np.ndarray) -> bool | None:
    """``ends_together``'s rule on bare ends: whether kernels ending at ``e`` end with those of
    ``reference`` (``end_reference``), on the same clock."""
    e_ref, tol = reference
    margin = int(np.median(np.diff(e_ref))) // 2  # (another group's last may end after the lead's last, within a spacing)
    e = e[(e >= e_ref[0] - margin) & (e <= e_ref[-1] + margin)]
    if len(e) < PAIRED_MIN_KERNELS:
        return None
    at = np.clip(np.searchsorted(e_ref, e), 1, len(e_ref) - 1)
    close = int((np.minimum(np.abs(e_ref[at - 1] - e), np.abs(e_ref[at] - e)) <= tol).sum())
    if 4 * close >= 3 * len(e):
        return True
    # Of the time within half a spacing of one of the ends (not the idle stretches between
    # bursts of collectives, where another group's kernels do not fall either), the share within
    # the tolerance of one.
    spacing, gaps = 2 * margin, np.diff(e_ref)
    chance = (2 * tol + int(np.minimum(gaps, 2 * tol).sum())) / (spacing + int(np.minimum(gaps, spacing).sum()))
    if 4 * close <= len(e) * (1 + 3 * chance):
        return False
    return None


# Kernels of one collective end within this of each other on every rank of its communicator, on
# one machine's clock (the real 2-H200 NCCL samples: 0.5 us in the median, 2.6 us at the 99th
# percentile, 3.1 us at most; a margin for rings of 8 GPUs); kernels of one name further apart
# than this (or than a quarter of the kernel) on most collectives are another communicator's
# (``ends_together``).
GROUP_END_TOLERANCE_NS = 20_000
# One collective's kernel ends on every rank after every rank's began (the 2-H200 samples' ends
# within 3.1 us of each other): a rank whose kernel ended this long before another's began did
# not wait for that one (``rank_waits``).
APART_AT_TIMES_NS = 10_000


def _groups_note(views: list[RankView], by_name: dict[int, list[list[int]]], names: list[str]) -> list[str]:
    """One line per way the ranks split into communicator groups (``communicator_groups``),
    naming the kernels matched so, and one per set of two ranks or more that alone ran some
    kernels (the others ran none of them; a name of one rank is matched with nobody, unsaid as
    before groups were told): none where every name's ranks are all the ranks, one group."""
    splits: dict[tuple[tuple[int, ...], ...], list[str]] = {}
    partial: dict[tuple[int, ...], list[str]] = {}
    for code, groups in by_name.items():
        if len(groups) > 1:
            splits.setdefault(tuple(map(tuple, groups)), []).append(names[code])
        ran = tuple(sorted(i for g in groups for i in g))
        if 1 < len(ran) < len(views):
            partial.setdefault(ran, []).append(names[code])

    def ranks(g: tuple[int, ...]) -> str:
        return f"ranks {', '.join(str(views[i].rank) for i in g)}"

    def why(kernels: list[str]) -> str:  # (an all-to-all's kernels end apart by each rank's share as well)
        if all(is_all_to_all(k) for k in kernels):
            return ("(an expert-parallel group each; or one all-to-all whose ranks' shares differ, a hot expert's ranks ending later each "
                    "time: then each rank waited for all, not for its group alone)")
        return "(a tensor-parallel group of each pipeline stage or data-parallel replica)"

    return [f"{', '.join(kernels)}: the ranks run {len(groups)} communicators of these kernels (told apart by when their kernels end on "
            f"one machine's clock): {'; '.join(ranks(g) for g in groups)}; they are matched, waited for and gate cycles within each "
            f"{why(kernels)}" for groups, kernels in splits.items()] + \
           [f"{', '.join(kernels)}: only {ranks(ran)} ran these kernels: they are matched among those (a pipeline stage's own, or traces "
            "that lack them)" for ran, kernels in partial.items()]


def _align(views: list[RankView], start: np.ndarray, end: np.ndarray, part: np.ndarray,
           in_order: np.ndarray, all_to_all: np.ndarray) -> tuple[list[RankAlignment], list[str]]:
    """Each rank's offset onto the first rank's timeline, from the matched collectives (rows of
    ``start``, ``end`` and ``part``: ranks x collectives; ``in_order``: sends and receives;
    ``all_to_all``: all-to-alls, whose ends a rank's share moves, used where no other collective
    was matched). A
    rank of the first rank's report shares its clock; one that ran collectives with the first
    rank is aligned on it (``_aligned_on``); one that ran none with it, on the first rank before
    it that it ran some with (of another communicator group), whose offset it is then carried
    by (``_chained``); one that met nobody, by its clock alone (``_unrefined``); the ranks of
    each other machine then on one offset (``_one_offset_per_machine``). Returned with the
    warnings of offsets moved far off another machine's clock (``_moved_clock_notes``)."""
    out: list[RankAlignment] = []
    moved: list[tuple[int, int, int, str]] = []
    chains = _Chains({}, {}, set(), {})
    for r, v in enumerate(views):
        if v.clock == views[0].clock:
            out.append(RankAlignment(v.rank, 0, 0, "shared clock"))
            continue
        q = _first_met(part, r)
        if q is None:
            out.append(RankAlignment(v.rank, *_unrefined(v, views[0])))
            continue
        a, shift = _aligned_on(v, views[q], start[r], end[r], start[q], end[q], part[q] & part[r], in_order, all_to_all)
        if shift is not None:
            moved.append((v.rank, *shift))
            chains.moved.add(r)
        chains.tier[r] = _refiners(part[q] & part[r], in_order, all_to_all)[1]
        if q:
            chains.direct[r], chains.parent[r] = a, q
        out.append(_chained(a, out[q]) if q else a)
    return _one_offset_per_machine(views, out, chains), _moved_clock_notes(moved)


@dataclass(frozen=True)
class _Chains:
    """How ``_align`` placed the ranks it did not place on the first rank: per row aligned on
    another rank, its offset onto that rank's timeline (``direct``) and that rank (``parent``);
    the rows whose refinement moved their clock far (``moved``, said), and what refined each
    (``tier``): collectives other than all-to-alls 0, all-to-alls alone 1 (their ends moved by a
    rank's share), sends and receives alone 2 (apart by the transfer)."""
    direct: dict[int, RankAlignment]
    parent: dict[int, int]
    moved: set[int]
    tier: dict[int, int]

    def worst_tier(self, r: int) -> int:
        """``tier`` of row ``r`` and of every rank it was aligned through: a rank placed on one
        refined by sends and receives alone is no better placed than that one (it had outvoted a
        rank placed exactly by all-reduces, moving its machine 11 us)."""
        worst = self.tier.get(r, 2)
        while r in self.parent:
            r = self.parent[r]
            worst = max(worst, self.tier.get(r, 0))  # (a rank of rank 0's machine, not refined: exact)
        return worst

    def carried(self, out: list[RankAlignment], fixed: set[int]) -> list[RankAlignment]:
        """``out`` with each row aligned on another rank carried by that rank's offset as it now
        is (``_chained``), in rank order (a row's parent comes before it), but the ``fixed``."""
        out = list(out)
        for r in sorted(self.parent):
            if r not in fixed:
                out[r] = _chained(self.direct[r], out[self.parent[r]])
        return out


def _other_machines(views: list[RankView]) -> list[list[int]]:
    """The ranks (rows of ``views``) not on the first rank's machine, a list per machine (rows
    sharing one clock, ``_one_machines_clock``: one report, or one machine's session starts), in
    rank order."""
    machines: list[list[int]] = []
    for q in range(1, len(views)):
        if _one_machines_clock(views[q], views[0]):
            continue
        home = next((m for m in machines if _one_machines_clock(views[q], views[m[0]])), None)
        if home is None:
            machines.append([q])
        else:
            home.append(q)
    return machines


def _one_offset_per_machine(views: list[RankView], alignment: list[RankAlignment], chains: _Chains) -> list[RankAlignment]:
    """``alignment`` with the ranks of each other machine on one offset: their clocks are one
    (one report, or one machine's session starts), so they stand apart from each other exactly by
    their bases, where each one's collectives refine it apart by their ends' scatter (a ring's by
    its order, an all-to-all's by each rank's share: four ranks of one report 2.4 us apart, a
    review's, their waits at each other's collectives off by up to 7 us). The machine's offset,
    on its first rank's clock, is the median of those its ranks refined on another machine's rank
    put it at (by collectives other than all-to-alls where any was, else by all-to-alls: one
    refined by sends and receives carries their transfer, one by all-to-alls a rank's share),
    its uncertainty the largest of theirs (unknown if one is) or half their spread;
    every rank of the machine takes it
    but those moved far (``chains.moved``, said); ranks aligned through another rank carry its
    offset as it then is (``_Chains.carried``). A machine none of whose ranks was refined
    directly keeps its offsets."""
    out = list(alignment)
    fixed: set[int] = set()
    for machine in _other_machines(views):
        out = chains.carried(out, fixed)
        # (a rank aligned on a rank of another machine is refined directly too: on rank 0's
        # machine, whose clock is exact, or on a machine already placed; one aligned on a rank of
        # its own machine says nothing more than that rank)
        refined = [q for q in machine if chains.parent.get(q) not in machine and q not in chains.moved and "collectives" in out[q].method
                   and (out[q].offset_uncertainty_ns is not None or q in chains.parent)]
        best = min((chains.worst_tier(q) for q in refined), default=2)
        voters = [q for q in refined if chains.worst_tier(q) == best]
        if len(machine) < 2 or not voters:
            continue
        lead = views[machine[0]]
        # (each rank's offset less its base on the machine's first rank's clock: the lead's offset it implies)
        implied = [out[q].offset_ns - _clock_base(views[q], lead)[0] for q in voters]
        at = int(np.median(np.array(implied, dtype=np.int64)))
        each = [out[q].offset_uncertainty_ns for q in voters]  # (None: unknown, carried from another machine's refined clock)
        uncertainty = None if None in each else max(max(each), (max(implied) - min(implied)) // 2)
        for q in machine:
            if q in chains.moved:
                continue
            a = out[q]
            out[q] = replace(a, offset_ns=at + _clock_base(views[q], lead)[0], offset_uncertainty_ns=uncertainty,
                             method=a.method if "collectives" in a.method else a.method + " + collectives")
            fixed.add(q)
    return chains.carried(out, fixed)


# A clock of another machine whose collectives' ends drift from the first rank's by more than
# this over the capture (and by four times their scatter about the line, and six standard errors)
# is read with the drift taken out at each collective; below it, one offset holds.
DRIFT_MIN_NS = 2_000
# ... fitted over this many collectives at least, both ranks' (a line through a few ends tells
# nothing).
DRIFT_MIN_COLLECTIVES = 8
# ... and by this many standard errors of the line's move (with 8 collectives jittered by +-3 us
# and no drift, a review's trials read a drift in 6 % of them by the other tests alone).
DRIFT_SIGNIFICANCE = 6
# Clocks run at rates ppm apart (tens of ppm); ends whose line runs 10 % off are no clock's.
DRIFT_MAX_RATE = 0.1


def _clock_drifts(views: list[RankView], alignment: list[RankAlignment], end: np.ndarray, part: np.ndarray, in_order: np.ndarray,
                  offset: np.ndarray, all_to_all: np.ndarray | None = None) -> tuple[dict[int, tuple[float, float, int]], list[RankAlignment], list[str]]:
    """The drift of each other machine's clock against the first rank's (two clocks run at
    rates ppm apart: one offset fits the middle of a capture, not its ends; a drift of 80 us
    over 4 ms invented waits of up to 20 us where both ranks arrived together, and named
    stragglers). One collective's kernels end together, so the residuals of a rank's
    collectives' ends, aligned (``offset``; ``end``, ``part``: ranks x collectives), against
    the first rank's are the two clocks' difference at each: fitted with a line over the first
    rank's time, per machine (its ranks share one clock, ``_one_machines_clock``), on the one
    of its ranks that ran the most collectives with the first rank, ``DRIFT_MIN_COLLECTIVES``
    or more (sends and receives, ``in_order``, left out: their ends lie apart by the
    transfer), and taken as drift where the line moves over the capture more than
    ``DRIFT_MIN_NS``, four times the residuals' scatter about it (median; that scatter within ``GROUP_END_TOLERANCE_NS``: ends that lie on
    no line are no one collective's) and ``DRIFT_SIGNIFICANCE`` standard errors of that move
    (a few collectives' jitter of a few us draws a slope by chance). Each rank of that machine
    gets the fit, those that met the first rank only through another rank too (a node's
    tensor-parallel pair, one of which joins a cross-node group: the other's waits at their
    own collectives had been read off one offset each, one corrected and one not), its mean
    residual moved by how far that rank's offset was refined apart from the fitted one's. Per
    row so drifting: (rate, the residuals' mean, the ns the line is centred on), which ``_drift_out``
    takes out; none for ranks on the first rank's machine. Returned with the alignment, whose
    uncertainty then holds half the drift (one offset's error at the capture's ends), and a
    warning per drifting machine."""
    fits: dict[int, tuple[float, float, int]] = {}
    notes: list[str] = []
    out = list(alignment)
    for machine in _other_machines(views):
        # Fitted on the rank that ran the most collectives with the first rank (the first such),
        # all-to-alls left out where any other was matched (a hot expert's rank ends later by its
        # share: its ends scatter, and a fit on them fails or moves the offset the others gave).
        a2a = all_to_all if all_to_all is not None else np.zeros(part.shape[1], bool)
        usable = ~in_order
        if max(int((part[0] & part[q] & ~in_order & ~a2a).sum()) for q in machine) >= DRIFT_MIN_COLLECTIVES:
            usable = ~in_order & ~a2a
        met = [int((part[0] & part[q] & usable).sum()) for q in machine]
        r = machine[int(np.argmax(met))]
        v = views[r]
        both = part[0] & part[r] & usable
        if int(both.sum()) < DRIFT_MIN_COLLECTIVES:
            continue
        # (in float64 from the first end on: a clock's ns counts reach 1e18, past its 53 bits)
        t0 = int(end[0, both].min())
        t = (end[0, both] - t0).astype(np.float64)
        resid = (end[r, both] + offset[r] - end[0, both]).astype(np.float64)
        # All-to-alls beside fewer than 8 other collectives: the rate is fitted on all, each kind
        # about its own mean (a hot expert's share moves an all-to-all's ends by as much each
        # step), the line centred on the others' (the offset they gave: 50 dispatches had moved
        # it 9 us; left out, a 500-ppm drift went unfitted, a review's).
        kind = a2a[both]
        lead = ~kind if (~kind).any() else kind
        t_mid = float(t.mean())
        dt, dr = t.copy(), resid.copy()
        for g in (kind, ~kind):
            if g.any():
                dt[g] -= t[g].mean()
                dr[g] -= resid[g].mean()
        spread = float((dt ** 2).sum())
        if spread == 0:
            continue
        rate = float((dt * dr).sum()) / spread
        r_mid = float(resid[lead].mean()) + rate * (t_mid - float(t[lead].mean()))
        span = float(t.max() - t.min())
        over = rate * span
        about = dr - rate * dt
        scatter = float(np.median(np.abs(about)))
        # (the move's standard error: the residuals' spread about the line over the times' spread)
        error = float(np.sqrt((about ** 2).sum() / max(len(t) - 1 - int(kind.any()) - int((~kind).any()), 1) / spread)) * span
        if abs(over) <= max(DRIFT_MIN_NS, 4 * scatter, DRIFT_SIGNIFICANCE * error) or scatter > GROUP_END_TOLERANCE_NS or abs(rate) > DRIFT_MAX_RATE:
            continue  # (no drift; ends that do not lie on a line, or run at a rate no clock does: not one collective's, matched)
        for q in machine:
            # (a rank of the machine whose offset was refined apart from r's stands apart from
            # it by the two refinements: its line's mean residual moves by that; one machine's
            # clocks are related, also within one report without session times)
            to_r = _clock_base(views[q], v)
            fits[q] = (rate, r_mid + (int(offset[q]) - int(offset[r]) - (to_r[0] if to_r is not None else 0)), t0 + round(t_mid))
            a = out[q]
            if a.offset_uncertainty_ns is not None:
                out[q] = replace(a, offset_uncertainty_ns=max(a.offset_uncertainty_ns, int(abs(over)) // 2))
        who = f"rank {v.rank}'s clock" if len(machine) == 1 else f"the clock of ranks {', '.join(str(views[q].rank) for q in machine)} (one machine's)"
        notes.append(f"{who} drifts {over / 1000:+.1f} us against rank {views[0].rank}'s over the capture ({rate * 1e6:+.1f} ppm, "
                     f"from the ends of the {int(both.sum())} collectives rank {v.rank} and rank {views[0].rank} both ran, which end together): "
                     f"collectives' arrivals and waits there are read with the drift taken out; one offset holds at the capture's middle, "
                     f"so other times on rank {views[0].rank}'s timeline (phases, timeline exports) are off by up to {abs(over) / 2000:.1f} us at its ends")
    return fits, out, notes


def _drift_out(aligned: np.ndarray, fits: dict[int, tuple[float, float, int]]) -> np.ndarray:
    """``aligned`` (ranks x collectives, on the first rank's timeline by one offset each) with
    each drifting rank's drift (``_clock_drifts``: rate, mean residual ``m``, and ``t_mid``,
    the ns its line is centred on) taken out at each time: an aligned time ``a`` is the first
    rank's ``t`` plus the residual there, ``a = t + m + rate (t - t_mid)``, so ``t - t_mid =
    (a - t_mid - m) / (1 + rate)``, worked in ns from ``t_mid`` (whole ns counts reach 1e18,
    past float64's 53 bits)."""
    if not fits:
        return aligned
    out = aligned.copy()
    for r, (rate, r_mid, t_mid) in fits.items():
        u = (aligned[r] - t_mid - round(r_mid)).astype(np.float64) / (1 + rate)
        out[r] = aligned[r] - np.rint(r_mid + rate * u).astype(np.int64)
    return out


def _refiners(both: np.ndarray, in_order: np.ndarray, all_to_all: np.ndarray | None) -> tuple[np.ndarray, int]:
    """Of the collectives two ranks both ran (``both``), those that place one's clock on the
    other's, and how well (the tier): collectives other than all-to-alls where any (0); else
    all-to-alls (1: a rank's share moves their ends, a hot expert's had moved a machine's clock
    30 us); else sends and receives (2: apart by the transfer)."""
    others = both & ~in_order
    if all_to_all is not None and (others & ~all_to_all).any():
        return others & ~all_to_all, 0
    if others.any():
        return others, 0 if all_to_all is None else 1
    return both, 2


def _aligned_on(v: RankView, ref: RankView, start: np.ndarray, end: np.ndarray, ref_start: np.ndarray, ref_end: np.ndarray,
                both: np.ndarray, in_order: np.ndarray, all_to_all: np.ndarray | None = None) -> tuple[RankAlignment, tuple[int, int, str] | None]:
    """``v``'s offset onto ``ref``'s timeline: its clock's base (``_clock_base``), refined by the
    median end-time residual of the collectives both ran (``both``, over the kernels' ``start``
    and ``end``, ``v``'s and ``ref``'s). Sends and receives (``in_order``) end apart by the
    transfer, so they refine only clocks of other machines (off by far more than a transfer)
    and only where no collective was matched: on one machine's clock (``_one_machines_clock``)
    they would move an exact base by the transfer time; where they refine it, the uncertainty is
    at least the shorter kernel of a pair (median), which holds the transfer their ends are
    apart by, the same each time and so not in their spread. Where that refinement moves a
    session-start base (another machine's clock) by more than half ``ref``'s median spacing
    between matched collectives, the match in order may be off by whole collectives (a capture
    begun later there reads the same): the offset's uncertainty is unknown (None), and the
    second value is (ns moved, that spacing, the base's method) for the warning."""
    if v.clock == ref.clock:
        return RankAlignment(v.rank, 0, 0, "shared clock"), None
    base, method = _clock_base(v, ref) or (0, "none")
    use, tier = _refiners(both, in_order, all_to_all)
    if tier == 2 and _one_machines_clock(v, ref):
        use = np.zeros_like(both)
    if not use.any():
        return RankAlignment(v.rank, base, None, method), None
    resid = (end[use] + base) - ref_end[use]
    shift = int(np.median(resid))
    if _one_machines_clock(v, ref) and (abs(shift) > ONE_MACHINE_CLOCK_ERROR_NS or _ends_apart(resid) is not None):
        # One machine's clock is exact (the 2-H200 samples' session clocks agree to 5 ns): its
        # matched collectives' ends lying further off than its error, one way or either way,
        # are another communicator's kernels matched as one group (said by
        # ``_other_communicators`` past 50 us), which would move an exact clock by their
        # distance (a pair 300 us behind the other read -286 us, +-0; one 12 us behind, -12 us,
        # +-0; one drifting past it by up to 50 us): the base is kept, unrefined.
        return RankAlignment(v.rank, base, None, method), None
    left = resid - shift
    mad = int(np.median(np.abs(left - np.median(left)))) if len(left) > 1 else None
    if (tier == 2 or tier == 1 and not _one_machines_clock(v, ref)) and mad is not None:
        # A send's end and its receive's are apart by the transfer, the same each time, and two
        # ranks' all-to-alls by their shares (a hot expert's rank ends later each step): their
        # spread leaves it out. It is within the shorter kernel of each pair.
        mad = max(mad, int(np.median(np.minimum(end[use] - start[use], ref_end[use] - ref_start[use]))))
    spacing = int(np.median(np.diff(np.sort(ref_end[use])))) if use.sum() > 1 else 0
    moved = None
    if method != "none" and not _one_machines_clock(v, ref) and spacing > 0 and 2 * abs(shift) > spacing:
        mad = None
        moved = (-shift, spacing, method)
    return RankAlignment(v.rank, base - shift, mad, method + " + collectives" if method != "none" else "collectives"), moved


def _moved_clock_notes(moved: list[tuple[int, int, int, str]]) -> list[str]:
    """One line for the ranks whose collectives, matched in order, moved another machine's
    clock by more than half the spacing between collectives: (rank, ns moved, spacing, what the
    clock came from) each (``_align``)."""
    if not moved:
        return []
    if len(moved) == 1:
        rank, by, spacing, method = moved[0]
        who, what = f"rank {rank}: matching its collectives in order moved its clock {by / 1e6:+.3f} ms from its {method} time", "its"
    else:
        rank, by, spacing, method = max(moved, key=lambda m: abs(m[1]))
        who = (f"ranks {', '.join(str(m[0]) for m in moved)}: matching their collectives in order moved their clocks from their {method} "
               f"times by up to {by / 1e6:+.3f} ms (rank {rank})")
        what = "their"
    return [f"{who}, more than half the {spacing / 1e6:.3f} ms between collectives (median): on another machine a capture begun later "
            f"reads the same as clocks that far apart, so {what} waits and the critical path may be off by whole collectives; {what} "
            "offset's uncertainty is unknown"]


@dataclass(frozen=True)
class _Arrivals:
    """The matched collectives, rank by rank (rows: ranks in order; columns: collectives)."""

    rank_ids: np.ndarray
    aligned: np.ndarray  # aligned start of each rank's kernel
    aligned_end: np.ndarray  # and its aligned end (each clock's drift taken out, ``_drift_out``)
    start: np.ndarray  # each rank's kernel on its own clock
    end: np.ndarray
    in_order: np.ndarray  # per collective: of a name matched in order (sends and receives, DeepEP's kernels)
    first: np.ndarray  # per collective: first and last aligned arrival
    last: np.ndarray
    last_pos: np.ndarray  # per collective: the row of the last rank to arrive
    wait: np.ndarray
    phase: np.ndarray  # phase instance (-1: none)
    cycle: np.ndarray  # its cycle (-1: none)
    part: np.ndarray  # the rank took part (the collective is its communicator group's)
    opens_group: np.ndarray  # per collective: the first of its group's (none of that group before it)

    def in_start_order(self, r: int) -> np.ndarray:
        """The collectives rank row ``r`` ran, in the order it started its kernels of them."""
        mine = np.flatnonzero(self.part[r])
        return mine[np.argsort(self.start[r, mine], kind="stable")]


def _first_met(took_part: np.ndarray, r: int) -> int | None:
    """The first row before ``r`` that took part in a collective with it (rows of ``took_part``:
    ranks x collectives): the first rank, or, for a rank of another communicator group, that
    group's first; None where none did."""
    return next((q for q in range(r) if (took_part[q] & took_part[r]).any()), None)


# The shift of a rank's cycles that have no number in the first rank's count.
UNCOUNTED = -(2 ** 62)


@dataclass(frozen=True)
class CycleCount:
    """Per rank row, how its own cycle numbers count as the first rank's: a step function, from
    each of ``starts[r]`` on (and before the first) adding ``shifts[r]`` (none: add 0;
    ``UNCOUNTED``: no number)."""

    starts: tuple[np.ndarray, ...]
    shifts: tuple[np.ndarray, ...]

    def shift(self, r: int, cycles: np.ndarray) -> np.ndarray:
        """What to add to each of rank row ``r``'s ``cycles``."""
        cycles = np.asarray(cycles, dtype=np.int64)
        s = self.starts[r] if r < len(self.starts) else np.zeros(0, np.int64)
        if len(s) == 0:
            return np.zeros(len(cycles), np.int64)
        return self.shifts[r][np.maximum(np.searchsorted(s, cycles, side="right") - 1, 0)]

    def counted(self, r: int, cycles: np.ndarray) -> np.ndarray:
        """Rank row ``r``'s ``cycles`` (int64, -1: none) as the first rank counts them (-1: none,
        also where that falls before the first rank's first cycle)."""
        cycles = np.asarray(cycles, dtype=np.int64)
        out = cycles + self.shift(r, cycles)
        return np.where((cycles >= 0) & (out >= 0), out, -1)


# Weights of the path of differences (``cycle_path``): each collective a cycle's difference
# counts as the first rank does gains VOTE; each change of difference costs CHANGE (a change
# must be borne out by more than one collective: one launch deferred into the next cycle's
# range, twice, does not renumber a rank whose steps hold one collective each).
PATH_VOTE, PATH_CHANGE = 4, 3


# The differences a cycle may take in ``cycle_path``: those its collectives or those of the
# cycles this many before and after it bear out (a long data-parallel capture whose idle steps
# go unmarked has a new difference after each: all of them at every cycle took 0.95 s and
# 353 MB for 5,000 cycles and 2,500 differences).
PATH_WINDOW = 32


def cycle_path(at: np.ndarray, diff: np.ndarray, unmarked: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per cycle of a rank (``own``: their numbers, ascending; ``unmarked``: per cycle, how many
    of its collectives the other rank ran in no cycle of its own; ``at`` and ``diff``: each other
    collective's cycle, by its place in ``own``, and how many cycles on the other rank counts
    it), the chosen difference, ``UNCOUNTED`` for none (a step the other rank left unmarked).
    The path of differences of the highest score: ``PATH_VOTE`` per collective counted as chosen
    (for none, per collective the other rank ran unmarked), less ``PATH_CHANGE`` per change of
    difference (none between two keeps the one before); two cycles numbered one after the other
    keep their order (no cycle counts as the one before it or earlier: a difference drops only
    across a none, or as far as the cycles between allow). Of paths of the same score, the
    first to choose, cycle by cycle, the difference of the cycle before, then none, then the
    smallest (before any, the smallest, then none). A cycle chooses among the differences of
    the cycles within ``PATH_WINDOW`` of it (one borne out by none of them counts as one borne
    out by no cycle after). A collective the other rank alone launched between its ranges
    reads as a step it left unmarked: none (a difference either side of it would also fit the
    two ranks' each leaving one step unmarked, a cycle apart)."""
    n = len(unmarked)
    none_gain = unmarked.astype(np.int64) * PATH_VOTE
    gap = np.r_[np.diff(own), 1].astype(np.int64)  # own cycles from each to the next
    if len(at):
        key, inv = np.unique(np.stack([at, diff]).astype(np.int64), axis=1, return_inverse=True)
        counts = np.bincount(inv.ravel(), minlength=key.shape[1]).astype(np.int64)
    else:
        key, counts = np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
    bounds = np.searchsorted(key[0], np.arange(n + 1))
    voted = [key[1][bounds[i]:bounds[i + 1]] for i in range(n)]  # (sorted)
    gains = [counts[bounds[i]:bounds[i + 1]] * PATH_VOTE for i in range(n)]
    cand = [np.unique(key[1][bounds[max(i - PATH_WINDOW, 0)]:bounds[min(i + PATH_WINDOW + 1, n)]]) for i in range(n)]
    low = np.iinfo(np.int64).min // 4

    def gain_on(i: int, c: np.ndarray) -> np.ndarray:
        out = np.zeros(len(c), np.int64)
        out[np.searchsorted(c, voted[i])] = gains[i]
        return out

    # What the cycles after i can still add, given the difference carried, the cycle numbered
    # (wm) or none (wn), over cand[i]; d for a difference none near bears out; w0 before any.
    wm: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    wn: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    d = np.zeros(n, np.int64)
    w0 = np.zeros(n, np.int64)
    wm[n - 1] = wn[n - 1] = np.zeros(len(cand[n - 1]), np.int64)
    for i in range(n - 2, -1, -1):
        c1, c = cand[i + 1], cand[i]
        x = gain_on(i + 1, c1) + wm[i + 1]
        best_x = max(int(x.max()) if len(x) else int(d[i + 1]), int(d[i + 1]))
        # the best next choice of a difference at least k - gap + 1 (from a numbered cycle)
        suffix = np.maximum.accumulate(x[::-1])[::-1] if len(x) else x
        first_ok = np.searchsorted(c1, c - gap[i] + 1)
        allowed = np.where(first_ok < len(c1), suffix[np.minimum(first_ok, max(len(c1) - 1, 0))] if len(c1) else low, low)
        pos = np.minimum(np.searchsorted(c1, c), max(len(c1) - 1, 0))
        inside = (c1[pos] == c) if len(c1) else np.zeros(len(c), bool)
        xk = np.where(inside, x[pos] if len(c1) else 0, d[i + 1])
        wk = np.where(inside, wn[i + 1][pos] if len(c1) else 0, d[i + 1])
        onward = none_gain[i + 1] + wk
        wm[i] = np.maximum(np.maximum(xk, np.maximum(allowed, d[i + 1]) - PATH_CHANGE), onward)
        wn[i] = np.maximum(np.maximum(xk, best_x - PATH_CHANGE), onward)
        d[i] = max(int(d[i + 1]), best_x - PATH_CHANGE, int(none_gain[i + 1] + d[i + 1]))
        w0[i] = max(best_x, int(none_gain[i + 1] + w0[i + 1]))
    out = np.full(n, UNCOUNTED, np.int64)
    carried: int | None = None
    numbered = False  # whether the cycle before was numbered
    for i in range(n):
        c = cand[i]
        mapped = gain_on(i, c) + wm[i] - (PATH_CHANGE if carried is not None else 0)
        if carried is not None and numbered:
            mapped = np.where(c >= carried - gap[i - 1] + 1, mapped, low)
        at_carried = int(np.searchsorted(c, carried)) if carried is not None else -1
        held = carried is not None and at_carried < len(c) and c[at_carried] == carried
        if held:
            mapped[at_carried] = gain_on(i, c)[at_carried] + wm[i][at_carried]
            stay = int(mapped[at_carried])
            unmapped = int(none_gain[i] + wn[i][at_carried])
        elif carried is not None:
            stay = int(d[i])  # (a difference none of the cycles near bears out: as one no cycle after does)
            unmapped = int(none_gain[i] + d[i])
        else:
            stay = None
            unmapped = int(none_gain[i] + w0[i])
        best = max([unmapped] + ([int(mapped.max())] if len(mapped) else []) + ([stay] if stay is not None else []))
        if stay is not None and stay == best:
            out[i], numbered = carried, True
        elif unmapped == best and (carried is not None or not len(mapped) or mapped.max() < best):
            out[i], numbered = UNCOUNTED, False
        else:
            carried = int(c[int(np.argmax(mapped == best))])
            out[i], numbered = carried, True
    return out


# A start below every cycle: the shift of a rank's cycles before its first with collectives.
BEFORE_ALL_CYCLES = -(2 ** 40)


def _cycle_steps(mine: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A rank's step function (``CycleCount``'s starts and shifts) from its cycles holding
    collectives both ranks ran (``mine``, in order) and their shifts (``total``; ``UNCOUNTED``:
    none, a step the first rank left unmarked). Each such cycle takes its own; the cycles
    between, without them, count on from the numbered one before, less one for each unnumbered
    one since (it took a number of this rank's but none of the first rank's), else back from
    the numbered one after, plus one for each unnumbered one before it; none where that would
    count as the next numbered one or later (a drop: the first rank left a step unmarked that
    this rank marked), and none after the last where none is numbered."""
    real = total > UNCOUNTED // 2
    if real.all() and (total == total[0]).all():  # (one difference throughout: the usual case)
        return np.array([BEFORE_ALL_CYCLES], np.int64), total[:1].copy()
    if not real.any():
        return np.array([BEFORE_ALL_CYCLES], np.int64), np.array([UNCOUNTED], np.int64)
    n = len(mine)
    nones = np.cumsum(~real)  # unnumbered ones up to each, itself included
    idx = np.arange(n)
    prev_real = np.maximum.accumulate(np.where(real, idx, -1))
    next_real = np.minimum.accumulate(np.where(real, idx, n)[::-1])[::-1]
    after = np.r_[next_real[1:], n]  # the first numbered one after each
    first = int(next_real[0])
    # The gap after each: from the numbered one before, else the one after.
    m = np.maximum(prev_real, 0)
    f = np.minimum(after, n - 1)
    gap = np.where(prev_real >= 0, total[m] - (nones - nones[m]), np.where(after < n, total[f] + (nones[f] - nones), UNCOUNTED))
    points: list[tuple[int, int]] = [(BEFORE_ALL_CYCLES, int(total[first] + nones[first]))]
    for e in range(n):
        points.append((int(mine[e]), int(total[e])))
        end = int(mine[e + 1]) if e + 1 < n else None
        lo = int(mine[e]) + 1
        if end is not None and lo >= end:
            continue
        g = int(gap[e])
        points.append((lo, g))
        if g > UNCOUNTED // 2 and after[e] < n:  # (then a cycle with collectives follows: ``end`` is one)
            clash = max(int(mine[after[e]] + total[after[e]]) - g, lo)
            if clash < end:
                points.append((clash, UNCOUNTED))
    at = np.array([p[0] for p in points], np.int64)
    by = np.array([p[1] for p in points], np.int64)
    keep = np.r_[True, by[1:] != by[:-1]]
    return at[keep], by[keep]


def cycle_counts(cycle: np.ndarray, took_part: np.ndarray) -> CycleCount:
    """How each rank's cycles count as the first rank's (rows of ``cycle``: each rank's cycle at
    each matched collective, -1 none, and ``took_part``: whether it ran that collective). Each
    rank's cycles are related to those of the first rank that ran a collective with it (the
    first rank; in another communicator group, that group's first, itself counted as the first
    rank: no collective relates groups), cycle by cycle (``cycle_path``): each of the rank's
    cycles that holds a collective both ran takes the difference most of its collectives bear
    out, a change only where more than one collective does, or none where that rank ran them
    unmarked. So a rank that ran a step without marking it (a data-parallel rank's idle batch
    left unmarked) counts on in step after it, where one difference for the whole capture
    counted its cycles before that step one too many; a launch deferred into the next cycle's
    range renumbers nothing. A cycle that would count as the one before it or earlier has no
    number; those without such collectives count on from the numbered one before, past the
    unnumbered (``_cycle_steps``)."""
    n = cycle.shape[0]
    starts: list[np.ndarray] = [np.zeros(0, np.int64)]
    shifts: list[np.ndarray] = [np.zeros(0, np.int64)]
    has = cycle >= 0
    for r in range(1, n):
        q = _first_met(took_part, r)
        both = took_part[q] & has[r] if q is not None else np.zeros(cycle.shape[1], bool)
        if not (both & has[q]).any():
            starts.append(np.zeros(0, np.int64))
            shifts.append(np.zeros(0, np.int64))
            continue
        own, theirs = cycle[r][both], cycle[q][both]
        mine = np.unique(own)
        diff = np.where(theirs >= 0, theirs - own, 0)
        if (theirs >= 0).all() and (diff == diff[0]).all():  # (one difference throughout: the usual case)
            local = np.full(len(mine), diff[0], np.int64)
        else:
            row = np.searchsorted(mine, own)
            local = cycle_path(row[theirs >= 0], diff[theirs >= 0], np.bincount(row[theirs < 0], minlength=len(mine)), mine)
        # onto the first rank's count through the rank it was related to
        real = local > UNCOUNTED // 2
        total = np.where(real, local + CycleCount(tuple(starts), tuple(shifts)).shift(q, mine + np.where(real, local, 0)), UNCOUNTED)
        # A cycle counted as the one before it or earlier: none (its collectives count where
        # the other ranks put them).
        real = total > UNCOUNTED // 2
        counted = np.where(real, mine + total, I64_MIN)
        before = np.maximum.accumulate(np.r_[I64_MIN, counted[:-1]])
        total = np.where(real & (counted <= before), UNCOUNTED, total)
        at, by = _cycle_steps(mine, total)
        starts.append(at)
        shifts.append(by)
    return CycleCount(tuple(starts), tuple(shifts))


def _cycle_ends(view: RankView, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str | None]]:
    """Per cycle of one rank, in cycle order: (cycles, the aligned start of its first phase's
    CPU range, the aligned end of its GPU work, else of its CPU ranges, its longest phase: the
    first of the largest GPU time, else CPU time where it has no GPU time; None where that is
    negative)."""
    ph = view.phases
    empty = np.zeros(0, np.int64)
    if ph.num_rows == 0:
        return empty, empty, empty, []
    cyc = int64s(ph["cycle"], -1)
    rows = np.flatnonzero(cyc >= 0)
    if len(rows) == 0:
        return empty, empty, empty, []
    gpu_end = int64s(ph["gpu_end_ns"], I64_MIN)[rows]
    cpu_end = int64s(ph["cpu_end_ns"])[rows]
    gpu = int64s(ph["gpu_ns"], I64_MIN)[rows]
    value = np.where(gpu != I64_MIN, gpu, int64s(ph["cpu_ns"])[rows])
    # By cycle, in table order within each (a stable sort: the rows come in time order, so
    # this is nearly free); each cycle's longest is its first row of the largest value.
    order = np.argsort(cyc[rows], kind="stable")
    c = cyc[rows][order]
    firsts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    last_gpu = np.maximum.reduceat(gpu_end[order], firsts)
    last_cpu = np.maximum.reduceat(cpu_end[order], firsts)
    # (a view without CPU starts: each cycle taken as begun at once with the others')
    starts = (np.minimum.reduceat(int64s(ph["cpu_start_ns"])[rows][order], firsts) + offset if "cpu_start_ns" in ph.column_names
              else np.full(len(firsts), I64_MIN, dtype=np.int64))
    ends = np.where(last_gpu != I64_MIN, last_gpu, last_cpu) + offset
    v = value[order]
    top = np.repeat(np.maximum.reduceat(v, firsts), np.diff(np.r_[firsts, len(v)]))
    longest = order[np.minimum.reduceat(np.where(v == top, np.arange(len(v)), len(v)), firsts)]
    names = ph["phase"].take(pa.array(rows[longest])).to_pylist()
    return c[firsts], starts, ends, [n if x >= 0 else None for n, x in zip(names, value[longest].tolist())]


def _waited_elsewhere(arr: _Arrivals) -> np.ndarray:
    """Per collective: how much longer its last rank waited at other communicator groups'
    collectives than the group's rank that waited least there, since the group's collective
    before (since the start of the rank's cycle, at a group's first): lateness it brought only
    because it waited for a straggler of another group (a tensor-parallel pair's slow rank,
    whose partner then reaches the world all-gather as late), where a wait every rank of the
    group shared made none of them late. Each rank's collectives taken in the order it started
    them; 0 throughout where the ranks are one group."""
    n_ranks, m = arr.aligned.shape
    if m == 0 or not arr.opens_group[1:].any():
        return np.zeros(m, dtype=np.int64)
    # Per rank and collective: its waits at the collectives it started before that one, all of
    # them and those of the same cycle.
    before = np.zeros((n_ranks, m), dtype=np.int64)
    this_cycle = np.zeros((n_ranks, m), dtype=np.int64)
    for r in range(n_ranks):
        in_time = arr.in_start_order(r)
        waits = arr.wait[r, in_time]
        prefix = np.cumsum(waits) - waits
        before[r, in_time] = prefix
        cyc = arr.cycle[r, in_time]
        opens = np.r_[True, cyc[1:] != cyc[:-1]] if len(cyc) else np.zeros(0, bool)
        first = np.maximum.accumulate(np.where(opens, np.arange(len(cyc)), 0))
        this_cycle[r, in_time] = np.where(cyc >= 0, prefix - prefix[first], 0)
    cols = np.arange(m)
    prev = np.where(arr.opens_group, -1, cols - 1)  # its group's collective before (all its ranks ran it)
    at = np.maximum(prev, 0)
    since = np.where(prev[None, :] >= 0, before - before[:, at] - arr.wait[:, at], this_cycle)
    least = np.where(arr.part, since, np.iinfo(np.int64).max).min(axis=0)
    return np.maximum(since[arr.last_pos, cols] - least, 0)


def collective_cycles(cycle: np.ndarray, part: np.ndarray, last_pos: np.ndarray, unnumbered: np.ndarray | None = None) -> np.ndarray:
    """Per collective (columns of ``cycle``: each rank's cycle at it, -1 none; ``part``: the ranks
    that ran it; ``last_pos``: the row of its last arrival): the cycle it counts in, the one most
    of its ranks' phases put it in (-1: none has one). Of cycles as common as each other, its last
    arrival's, else the earliest. A rank whose CPU launched one cycle's collective only in its
    next cycle (a deferred launch) leaves it in the cycle the others waited in; one whose CPU ran a
    cycle ahead of the others likewise; with two ranks, the last arrival's phase says, or, where
    that rank marks no phase there (traced without phase ranges), the other's. Ranks whose own
    cycle there has no number in the first rank's count (``unnumbered``: a step the first rank
    left unmarked) vote for none: where they are as many as the votes for any cycle, it has none
    (one rank that launched it late, in a cycle that has a number, does not decide it)."""
    n_ranks, m = cycle.shape
    if m == 0:
        return np.zeros(0, np.int64)
    cols = np.arange(m)
    valid = part & (cycle >= 0)
    lo = np.where(valid, cycle, np.iinfo(np.int64).max).min(axis=0)
    hi = np.where(valid, cycle, -1).max(axis=0)
    out = np.where(valid[last_pos, cols], cycle[last_pos, cols], np.where(hi >= 0, lo, -1))
    split = np.flatnonzero((hi >= 0) & (lo != hi))  # (the ranks disagree: counted there only)
    if len(split):
        c, v = cycle[:, split], valid[:, split]
        votes = np.stack([((c == c[r]) & v).sum(axis=0) for r in range(n_ranks)])
        votes[~v] = 0
        top = votes.max(axis=0)
        last_c = c[last_pos[split], np.arange(len(split))]
        last_top = v[last_pos[split], np.arange(len(split))] & (votes[last_pos[split], np.arange(len(split))] == top)
        earliest = np.where(v & (votes == top[None, :]), c, np.iinfo(np.int64).max).min(axis=0)
        out[split] = np.where(last_top, last_c, earliest)
    if unnumbered is not None and (unnumbered & part).any():
        top = np.zeros(m, np.int64)
        whole = np.flatnonzero((hi >= 0) & (lo == hi))
        top[whole] = valid[:, whole].sum(axis=0)
        if len(split):
            top[split] = votes.max(axis=0)
        none = (unnumbered & part).sum(axis=0)
        out = np.where((none > 0) & (none >= top), -1, out)
    return out


def _second_arrival(arr: _Arrivals) -> np.ndarray:
    """Per collective: the row of the rank that arrived just before its last (of ranks arriving
    together, the highest)."""
    n_ranks, m = arr.aligned.shape
    if m == 0:
        return np.zeros(0, np.int64)
    arrived = np.where(arr.part, arr.aligned, I64_MIN)
    arrived[arr.last_pos, np.arange(m)] = I64_MIN
    return n_ranks - 1 - np.argmax(arrived[::-1], axis=0)


def _last_end_before(arr: _Arrivals, rows: np.ndarray) -> np.ndarray:
    """Per collective k: when rank ``rows[k]``'s kernels of the collectives, of any group, that
    it started before its kernel of k had all ended (its own clock; I64_MIN: none before)."""
    n_ranks, m = arr.aligned.shape
    out = np.full(m, I64_MIN, dtype=np.int64)
    for r in np.unique(rows).tolist():
        order = arr.in_start_order(r)
        starts, reach = arr.start[r, order], np.maximum.accumulate(arr.end[r, order])
        asked = np.flatnonzero(rows == r)
        before = np.searchsorted(starts, arr.start[r, asked], side="left") - 1  # (started strictly before)
        out[asked] = np.where(before >= 0, reach[np.maximum(before, 0)], I64_MIN)
    return out


def _idle_since(busy: _GpuBusy, arr: _Arrivals, rows: np.ndarray, since: np.ndarray) -> np.ndarray:
    """Per collective k with ``since[k]`` (rank ``rows[k]``'s own clock) not I64_MIN: how long
    that rank's GPU did nothing from then to the start of its kernel of k; 0 elsewhere."""
    out = np.zeros(len(rows), dtype=np.int64)
    k = np.flatnonzero(since != I64_MIN)
    for r in np.unique(rows[k]).tolist():
        mine = k[rows[k] == r]
        lo, hi = since[mine], arr.start[r, mine]
        out[mine] = np.maximum(hi - lo - busy.of(r).between(lo, hi), 0)
    return out


def _waiting_through(views, busy: "_GpuBusy", arr: _Arrivals, rows: np.ndarray, at: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per collective k where ``valid``: whether rank ``rows[k]``'s CPU was blocked waiting for
    its GPU when its kernel of collective ``at[k]`` ended (its own clock): a blocking call (a
    stream or device synchronize, a copy to the host) of a thread that launched its
    communication kernels, begun by then, that returned with no op of that GPU (``busy``'s)
    ending after that kernel and by its return: it waited for that collective, not for work
    queued after it, which may itself have run late (a copy launched late after the
    all-reduce); a helper thread's synchronize (a KV offload's) says nothing of the thread that
    launches the collectives. Its CPU was then caught up with its GPU, not behind it."""
    out = np.zeros(len(rows), dtype=bool)
    for r in np.unique(rows[valid]).tolist():
        syncs, ops = views[r].syncs, views[r].gpu_ops
        if syncs is None or not syncs.num_rows or not ops.num_rows or "launch_tid" not in ops.column_names or "pid" not in ops.column_names:
            continue
        comm = busy.comm(r)
        launchers = np.unique(thread_keys(int64s(ops["pid"], -1)[comm], int64s(ops["launch_tid"], -1)[comm]))
        keep = np.isin(thread_keys(int64s(syncs["pid"], -1), int64s(syncs["tid"], -1)), launchers)
        s, e = int64s(syncs["start_ns"])[keep], int64s(syncs["end_ns"])[keep]
        if not len(s):
            continue
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        mine = np.flatnonzero(valid & (rows == r))
        t = arr.end[r, at[mine]]
        # (a thread's blocking calls follow each other: the one begun last by then is the one)
        i = np.maximum(np.searchsorted(s, t, side="right") - 1, 0)
        ends = busy.op_ends(r)
        nothing_after = np.searchsorted(ends, e[i], side="right") == np.searchsorted(ends, t, side="right")
        out[mine] = (s[i] <= t) & (e[i] >= t) & nothing_after
    return out


class _GpuBusy:
    """Each rank's GPU busy time, built on first use: the union of its ops on the (process,
    device) that ran most of its communication kernels (another GPU's work, a draft worker's on
    its own GPU, fills no idle time of this one), every stream."""

    def __init__(self, views) -> None:
        self.views = views
        self.built: dict[int, _BusyTime] = {}
        self.ends: dict[int, np.ndarray] = {}
        self.comms: dict[int, np.ndarray] = {}

    def comm(self, r: int) -> np.ndarray:
        """Per op of rank ``r``: whether it is a communication kernel (``comm_mask``, once)."""
        if r not in self.comms:
            self.comms[r] = comm_mask(self.views[r].gpu_ops)
        return self.comms[r]

    def op_ends(self, r: int) -> np.ndarray:
        """Rank ``r``'s ops' ends (those of ``of``), sorted."""
        self.of(r)
        return self.ends[r]

    def of(self, r: int) -> _BusyTime:
        if r not in self.built:
            ops = self.views[r].gpu_ops
            start, end = int64s(ops["start_ns"]), int64s(ops["end_ns"])
            if ops.num_rows and "pid" in ops.column_names and "device_id" in ops.column_names:
                gpu = (int64s(ops["pid"], -1) << 8) | (int64s(ops["device_id"], -1) & 0xFF)
                comm = self.comm(r)
                if comm.any() and len(np.unique(gpu)) > 1:
                    values, counts = np.unique(gpu[comm], return_counts=True)
                    here = gpu == values[np.argmax(counts)]
                    start, end = start[here], end[here]
            self.built[r] = _BusyTime(start, end)
            self.ends[r] = np.sort(end)
        return self.built[r]


class _BusyTime:
    """Ops' union, for the time it covers in windows."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        if len(start) == 0:
            self.starts = self.ends = self.before = np.zeros(1, np.int64)
            return
        order = np.argsort(start, kind="stable")
        s, e = start[order], np.maximum.accumulate(end[order])
        # The union as disjoint pieces: a new piece where an op starts past all before it.
        new = np.r_[True, s[1:] > e[:-1]]
        self.starts, self.ends = s[new], np.r_[e[np.flatnonzero(new)[1:] - 1], e[-1]]
        self.before = np.r_[0, np.cumsum(self.ends - self.starts)]  # covered time of the pieces before each

    def covered_to(self, t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.starts, t, side="right") - 1
        j = np.maximum(i, 0)
        return np.where(i >= 0, self.before[j] + np.clip(t - self.starts[j], 0, self.ends[j] - self.starts[j]), 0)

    def between(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per window [lo, hi): the time some op covers in it."""
        return np.maximum(self.covered_to(hi) - self.covered_to(lo), 0)


def _critical_path(views, arr: _Arrivals, offset: np.ndarray, unpaired: list[np.ndarray] | None = None,
                   drifts: dict[int, tuple[float, float, int]] | None = None) -> pa.Table:
    """Per cycle: the (rank, phase) the others waited for, and how long. Times on the first
    rank's timeline are by each rank's ``offset``, with its clock's drift (``drifts``,
    ``_clock_drifts``) taken out.

    With collectives (over every communicator group's in the cycle): the rank whose new
    lateness kept the others waiting longest, summed over them and over the collectives it came
    last to, at its collective that brought the most (of those, the earliest); where none
    brought any, the collective that brought the most, the earliest. A collective's new
    lateness: its skew, minus what its last rank waited beyond its group's other ranks at other
    groups' collectives since (``_waited_elsewhere``; only for the part of its lateness that is
    not its GPU standing idle after its last collective longer than the first arrival's did),
    and minus the lateness it carried in from its group's collective before in the cycle
    (across cycles too for sends, receives and DeepEP's kernels): how much later than the rank
    that arrived just before it it left that one, and then how much longer its GPU stood idle
    (but where its CPU waited for its GPU through that one's end: caught up, any idle after is
    new), at most how late it already was there.
    What it kept a rank waiting: that rank's wait there, at most the new lateness. The rank and,
    by the phase it was in there, the phase are named (none where that rank marks no phase).
    Collectives every rank reached at once (within a microsecond) count for nobody. A straggler
    held up on its CPU shows as a jump in lateness where it was held up; it arrives late again
    later (its GPU waiting for its launches while the others' ran work queued ahead), but
    without a new jump. A slower GPU, busy all along, is late anew at each collective (the one
    before ended on every rank at once). Summing skews over all collectives instead would pick
    whichever rank happens to launch more slowly; summing the new lateness, carried lateness
    taken out, does not. Without collectives (or with every one reached at once): the
    rank whose GPU work ended last, in its longest phase, where it ended last by more than
    ARRIVED_TOGETHER_NS and, without collectives, the ranks ran that cycle at the same time (the
    last one began it before every other ended it); otherwise nobody gated it (ranks that never meet, or a capture
    begun later, compared cycle k with cycle k of another time, and blamed whoever's clock ran
    behind; ends 0.3 us apart named a straggler). Nor does a cycle in which a rank's sends and
    receives were matched with nothing (``unpaired``: per rank row, those cycles in its own
    numbers): a pipeline's stages pass each batch along, so the last stage ends every cycle
    last by construction, and who held whom up is in the waits that were not matched.
    """
    # Cycles are numbered in the first rank's count: another rank's cycle k counts as its
    # collectives show, cycle by cycle (``cycle_counts``: a capture begun cycles later numbers
    # its cycles from 0 all the same; an idle step left unmarked numbers the rest one behind).
    count = cycle_counts(arr.cycle, arr.part)
    counted = np.stack([count.counted(r, arr.cycle[r]) for r in range(arr.cycle.shape[0])]) if arr.cycle.shape[0] else arr.cycle
    # A cycle of its own the first rank's count has no number for, at a collective its group's
    # first rank ran in no cycle either (a step it left unmarked; not two ranges of one step).
    if arr.cycle.shape[0] and arr.cycle.shape[1]:
        lead = np.argmax(arr.part, axis=0)  # each collective's group's first rank
        unnumbered = (arr.cycle >= 0) & (counted < 0) & (arr.cycle[lead, np.arange(arr.cycle.shape[1])] < 0)[None, :]
    else:
        unnumbered = arr.cycle >= 0
    arr = replace(arr, cycle=counted)  # (before the first rank's first: none)
    cycles: set[int] = set()
    for r, v in enumerate(views):
        if v.phases.num_rows:
            own = np.unique(int64s(v.phases["cycle"], -1))
            own = count.counted(r, own[own >= 0])
            cycles.update(own[own >= 0].tolist())
    n_ranks, m = arr.aligned.shape
    cols = np.arange(m)
    # A collective counts in the cycle most of its ranks' phases put it in (``collective_cycles``;
    # cycles are counted as the first rank does); each rank's wait in it also counts there, or,
    # where the collective has no cycle, in the cycle of the rank's own phase.
    coll_cycle = collective_cycles(arr.cycle, arr.part, arr.last_pos, unnumbered)
    row_cycle = np.where(coll_cycle[None, :] >= 0, coll_cycle[None, :], arr.cycle)
    waits_by_cycle: dict[int, dict[int, int]] = {}
    has = (row_cycle >= 0) & arr.part
    if has.any():
        rows, ks = np.nonzero(has)
        packed = row_cycle[rows, ks] * n_ranks + rows
        uniq, inv = np.unique(packed, return_inverse=True)
        sums = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(sums, inv.ravel(), arr.wait[rows, ks])
        for key, total in zip(uniq.tolist(), sums.tolist()):
            waits_by_cycle.setdefault(key // n_ranks, {})[int(arr.rank_ids[key % n_ranks])] = total
    # Per cycle, the collective that names the rank and phase that gated it.
    worst: dict[int, int] = {}
    if m and n_ranks > 1:
        # A collective's new lateness: its skew, less what its last rank waited beyond its
        # group's other ranks at other groups' collectives since (``_waited_elsewhere``), and
        # less the lateness that rank carried in from its group's collective before in the same
        # cycle: how much later than the rank that arrived before it there it left that one (an
        # all-reduce ends on every rank at once; DeepEP's kernels and sends and receives need
        # not), and then how much longer its GPU stood idle, waiting for launches a hold-up of
        # its CPU delayed (a spin in draft keeps it late into verify's collectives: draft is
        # where it was held up), at most how late it already was there. A GPU busy all along,
        # after an all-reduce, brings its lateness anew (a slower GPU is late at every
        # collective); so does a rank at its cycle's first collective (a CPU behind every cycle
        # is late anew each cycle). Sends and receives between two ranks (a pipeline's stages),
        # matched in order, not each send with its receive, carry their lateness in from the one
        # before, across cycles too (a pipeline's receive waits for the stage before every
        # cycle by design; only a change is new). Those that three ranks or more ran alike (an
        # all-to-all, whose grouped sends and receives end for every rank once the last
        # arrived; DeepEP's dispatch and combine) are read as a collective's: a slower GPU is
        # late anew at each (a review's shape: a rank 30 us late at every all-to-all was
        # outweighed by another's one 50-us hiccup, its lateness taken as carried).
        pairwise = arr.in_order & (arr.part.sum(axis=0) <= 2)
        second_pos = _second_arrival(arr)
        group_before = np.where(arr.opens_group, -1, cols - 1)
        at = np.maximum(group_before, 0)
        group_before = np.where((group_before >= 0) & ((coll_cycle[at] == coll_cycle) | pairwise), group_before, -1)
        late_before = np.where(group_before >= 0, arr.aligned[arr.last_pos, at] - arr.first[at], 0)
        busy = _GpuBusy(views)
        ended_after = np.where(group_before >= 0, arr.aligned_end[arr.last_pos, at] - arr.aligned_end[second_pos, at], 0)
        left = lambda rows: np.where(group_before >= 0, arr.end[rows, at], I64_MIN)  # noqa: E731  (when it left the one before)
        idle_more = _idle_since(busy, arr, arr.last_pos, left(arr.last_pos)) - _idle_since(busy, arr, second_pos, left(second_pos))
        # A CPU that waited for its GPU through the end of the one before (a synchronize of the
        # thread that launches the collectives, returning once it ended) was caught up there:
        # its GPU's idle time after it is a new hold-up (a spin in verify after draft's
        # `.item()`), not one carried in.
        idle_more = np.where(_waiting_through(views, busy, arr, arr.last_pos, at, group_before >= 0), 0, idle_more)
        carried = np.clip(ended_after + idle_more, 0, np.maximum(late_before, 0))
        carried = np.where(pairwise, np.maximum(late_before, 0), carried)
        # What it waited elsewhere made it late only where its lateness is not its GPU standing
        # idle after its last collective (of any group) longer than the first arrival's did
        # after theirs: a wait that slack absorbed (a stall in draft, verify launched later
        # anyway) leaves a later hold-up of its CPU its own.
        elsewhere = _waited_elsewhere(arr)
        if elsewhere.any():
            first_pos = np.argmin(np.where(arr.part, arr.aligned, np.iinfo(np.int64).max), axis=0)
            idle_more = _idle_since(busy, arr, arr.last_pos, _last_end_before(arr, arr.last_pos)) - _idle_since(busy, arr, first_pos, _last_end_before(arr, first_pos))
            elsewhere = np.minimum(elsewhere, np.maximum(arr.last - arr.first - np.maximum(idle_more, 0), 0))
        score = (arr.last - arr.first) - carried - elsewhere
        # A collective every rank reached at once (within ARRIVED_TOGETHER_NS) gated nobody.
        counted = np.flatnonzero((coll_cycle >= 0) & (arr.last - arr.first > ARRIVED_TOGETHER_NS))
        # Per cycle, the rank whose new lateness kept the others waiting longest, summed over
        # them and over the collectives it came last to (a slower GPU late at five all-reduces
        # holds the others longer than another rank's one hiccup; a world all-gather's straggler
        # keeps three ranks waiting where a pair's keeps one), at its collective that brought
        # the most, of those the earliest (where none brought any, each carrying its lateness
        # in, likewise over all the cycle's collectives).
        held = np.where(arr.part, np.minimum(arr.wait, np.maximum(score, 0)[None, :]), 0).sum(axis=0)
        key = coll_cycle[counted] * n_ranks + arr.last_pos[counted]
        uniq, inv = np.unique(key, return_inverse=True)
        summed = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(summed, inv.ravel(), held[counted])
        rank_held = np.zeros(m, dtype=np.int64)
        rank_held[counted] = summed[inv.ravel()]
        best = counted[np.lexsort((counted, -score[counted], -rank_held[counted], coll_cycle[counted]))]
        firsts = np.r_[True, coll_cycle[best][1:] != coll_cycle[best][:-1]] if len(best) else np.zeros(0, bool)
        worst = dict(zip(coll_cycle[best][firsts].tolist(), best[firsts].tolist()))
    cyc = np.array(sorted(cycles), dtype=np.int64)
    n_c = len(cyc)
    # Without collectives in a cycle: the rank whose work ended last, in its longest phase (ranks
    # ending together: below, nobody). Rows are ranks in rank order.
    starts = np.full((n_ranks, n_c), I64_MIN, dtype=np.int64)
    ends = np.full((n_ranks, n_c), I64_MIN, dtype=np.int64)
    has = np.zeros((n_ranks, n_c), dtype=bool)
    longest = np.full((n_ranks, n_c), None, dtype=object)
    for r, v in enumerate(views):
        c_r, s_r, e_r, names_r = _cycle_ends(v, int(offset[r]))
        if drifts and r in drifts:  # (a start unknown, I64_MIN, stays so)
            s_r = np.where(s_r != I64_MIN, _drift_out(s_r[None, :], {0: drifts[r]})[0], s_r)
            e_r = _drift_out(e_r[None, :], {0: drifts[r]})[0]
        c_r = count.counted(r, c_r)
        keep_r = c_r >= 0
        c_r, s_r, e_r, names_r = c_r[keep_r], s_r[keep_r], e_r[keep_r], [n for n, k in zip(names_r, keep_r.tolist()) if k]
        at = np.searchsorted(cyc, c_r)
        starts[r, at], ends[r, at], has[r, at], longest[r, at] = s_r, e_r, True, names_r
    ended = np.where(has, ends, I64_MIN)
    latest = np.argmax(ended, axis=0) if n_c else np.zeros(0, np.int64)
    gating_row = latest.copy()
    gating_phase = longest[latest, np.arange(n_c)] if n_c else np.zeros(0, object)
    how = np.full(n_c, GATED_BY_LATEST_END, dtype=object)
    # A cycle of one rank alone has no critical path, unless the ranks met at a collective in it
    # (the others marking no phases); nor one its ranks did not run at once (a collective in it
    # says they did), nor one they ended together (also where they met: every collective
    # reached at once, the ends within a microsecond, nobody gated it).
    keep = (has.sum(axis=0) >= min(2, n_ranks)) if n_ranks else np.zeros(n_c, bool)
    if n_c and n_ranks > 1:
        cols_c = np.arange(n_c)
        runner_up = np.sort(ended, axis=0)[-2]
        others_end = np.where(has, ends, np.iinfo(np.int64).max)
        others_end[latest, cols_c] = np.iinfo(np.int64).max
        at_once = starts[latest, cols_c] < others_end.min(axis=0)
        several = has.sum(axis=0) >= 2
        apart = ~several | (np.where(several, ended[latest, cols_c], 0) - np.where(several, runner_up, 0) > ARRIVED_TOGETHER_NS)
        met = np.isin(cyc, coll_cycle[coll_cycle >= 0]) if m else np.zeros(n_c, bool)
        passed_along = np.zeros(n_c, bool)
        for r, u in enumerate(unpaired or ()):
            passed_along |= np.isin(cyc, count.counted(r, u))
        keep = ((keep & at_once) | met) & apart & ~passed_along
    # With collectives: the last rank at the one chosen above, in the phase it ran there.
    if worst:
        at = np.searchsorted(cyc, np.fromiter(worst.keys(), np.int64, len(worst)))
        k = np.fromiter(worst.values(), np.int64, len(worst))
        row = arr.last_pos[k]
        gating_row[at] = row
        ph = arr.phase[row, k]
        n_ph = np.array([v.phases.num_rows for v in views], dtype=np.int64)[row]
        phase_names = [v.phases["phase"].to_pylist() if v.phases.num_rows else [] for v in views]
        gating_phase[at] = [phase_names[rw][p] if 0 <= p < n else None for rw, p, n in zip(row.tolist(), ph.tolist(), n_ph.tolist())]
        how[at] = GATED_AT_COLLECTIVE
        keep[at] = True
    # Each cycle's waits as JSON ({rank: ns}, ranks in order), and the longest of them.
    max_wait = np.zeros(n_c, dtype=np.int64)
    parts: list[list[str]] = [[] for _ in range(n_c)]
    if has_waits := bool(waits_by_cycle):
        for c, waits in waits_by_cycle.items():
            c_i = int(np.searchsorted(cyc, c))
            if c_i < n_c and cyc[c_i] == c:  # (every such cycle is one of the phases')
                parts[c_i] = [f'"{k}": {w}' for k, w in sorted(waits.items())]
                max_wait[c_i] = max(waits.values())
    waits_json = ["{" + ", ".join(p) + "}" for p in parts] if has_waits else ["{}"] * n_c
    sel = np.flatnonzero(keep)
    return pa.table({
        "cycle": pa.array(cyc[sel]),
        "gating_rank": pa.array(arr.rank_ids[gating_row[sel]] if n_ranks else np.zeros(0, np.int64), pa.int32()),
        "gating_phase": pa.array(gating_phase[sel].tolist(), pa.string()),
        "how": pa.array(how[sel].tolist(), pa.string()),
        "max_wait_ns": pa.array(max_wait[sel]),
        "waits_ns": pa.array([waits_json[i] for i in sel.tolist()], pa.string()),
    }, schema=CRITICAL_PATH)
