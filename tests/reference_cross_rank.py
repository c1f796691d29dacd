"""The cross-rank step as it was before it was vectorised (tracerecon 052fe16,
``tracerecon/analysis/cross_rank.py``): one Python dict per (collective, rank). Kept only as
the reference ``test_cross_rank_vectorised.py`` compares the library with; its numbers were
the ones checked against planted stragglers and CUDA events on the H200 traces. The data
classes, which the rewrite left as they were, and each rank's cycle ends come from the
library; ``_cycle_ends`` here only turns the latter into the dict the per-cycle loop looked up."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from tracerecon.analysis.cross_rank import CrossRank, RankAlignment, RankComm, RankView
from tracerecon.analysis.cross_rank import _cycle_ends as library_cycle_ends
from tracerecon.analysis.nccl import comm_mask, is_low_latency_ep, is_point_to_point
from tracerecon.analysis.projection import int64s
from tracerecon.schema import COLLECTIVES, CRITICAL_PATH


def _comm_ops(view: RankView) -> dict[str, np.ndarray]:
    ops = view.gpu_ops
    if ops.num_rows == 0:
        return {"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64), "name": [], "phase": np.zeros(0, np.int64)}
    m = comm_mask(ops)
    idx = np.flatnonzero(m)
    start = int64s(ops["start_ns"])[idx]
    order = np.argsort(start, kind="stable")
    idx = idx[order]
    names = ops["name"].take(pa.array(idx)).cast(pa.string()).to_pylist() if len(idx) else []
    return {"start": start[order], "end": int64s(ops["end_ns"])[idx], "name": names, "phase": int64s(ops["phase_id"], -1)[idx]}


def _keys(names: list[str], start: np.ndarray, end: np.ndarray) -> list[tuple[str, int]]:
    """(name, k): the k-th kernel of its name, counted in end order for collectives (their
    kernels end together on every rank) and in start order for sends and receives (the rule
    changed on 2026-12-01 from start order for all)."""
    out: list[tuple[str, int] | None] = [None] * len(names)
    rows: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        rows.setdefault(n, []).append(i)
    for n, idx in rows.items():
        by = sorted(idx, key=lambda i: ((int(start[i]) if is_point_to_point(n) else int(end[i])), i))
        for k, i in enumerate(by):
            out[i] = (n, k)
    return out


def analyze_cross_rank(views: list[RankView]) -> CrossRank:
    """Alignment, collective matching, waiting and the per-cycle critical path for ``views``."""
    views = sorted(views, key=lambda v: v.rank)
    comm = {v.rank: _comm_ops(v) for v in views}
    silent = [v for v in views if not comm[v.rank]["name"]]
    if silent and len(views) - len(silent) >= 2:
        # (Rule added on 2026-12-01) ranks that ran no communication kernel are left out of
        # the matching; they keep their clock's alignment and count no communication.
        # (Changed on 2026-12-02: every offset onto the first rank's timeline, the talking ranks'
        # carried over by their first one's clock base, and their collectives' aligned times too.)
        talking = [v for v in views if comm[v.rank]["name"]]
        cross = analyze_cross_rank(talking)

        def unrefined(v: RankView) -> RankAlignment:
            return _align([views[0], v], comm, {}, [])[1] if v is not views[0] else RankAlignment(v.rank, 0, 0, "shared clock")

        hop = unrefined(talking[0])
        exact = hop.offset_uncertainty_ns == 0
        moved = [RankAlignment(a.rank, a.offset_ns + hop.offset_ns, a.offset_uncertainty_ns if exact else None,
                               a.method if exact or a.rank != talking[0].rank else hop.method) for a in cross.alignment]
        extra = [unrefined(v) for v in silent]
        comm_extra = [RankComm(rank=v.rank, comm_ns=0, wait_ns=0, n_collectives=0, phase_wait_ns=np.zeros(v.phases.num_rows, dtype=np.int64)) for v in silent]
        rows = [{**r, "aligned_start_ns": r["aligned_start_ns"] + hop.offset_ns, "aligned_end_ns": r["aligned_end_ns"] + hop.offset_ns}
                for r in cross.collectives.to_pylist()]
        return CrossRank(tuple(sorted(moved + extra, key=lambda a: a.rank)), tuple(sorted(list(cross.comm) + comm_extra, key=lambda c: c.rank)),
                         pa.Table.from_pylist(rows, schema=COLLECTIVES), cross.critical_path)
    keyed = {r: {k: i for i, k in enumerate(_keys(c["name"], c["start"], c["end"]))} for r, c in comm.items()}
    common = set.intersection(*(set(k) for k in keyed.values())) if len(views) > 1 else set()
    common_sorted = sorted(common, key=lambda k: comm[views[0].rank]["start"][keyed[views[0].rank][k]]) if common else []

    alignment = _align(views, comm, keyed, common_sorted)
    offsets = {a.rank: a.offset_ns for a in alignment}

    rows = []
    per_rank_wait: dict[int, np.ndarray] = {v.rank: np.zeros(v.phases.num_rows, dtype=np.int64) for v in views}
    wait_total = {v.rank: 0 for v in views}
    phase_cycle = {v.rank: (int64s(v.phases["cycle"], -1) if v.phases.num_rows else np.zeros(0, np.int64)) for v in views}
    by_rank = {v.rank: v for v in views}
    for ci, key in enumerate(common_sorted):
        starts = {r: int(comm[r]["start"][keyed[r][key]]) + offsets[r] for r in comm}
        first, last = min(starts.values()), max(starts.values())
        last_rank = max(starts, key=lambda r: (starts[r], r))
        for r in comm:
            i = keyed[r][key]
            s, e = int(comm[r]["start"][i]), int(comm[r]["end"][i])
            # (2026-12-06) it waited only for ranks that began before its kernel ended (10 us
            # given): one that began after was another collective's (two communicators matched
            # as one); asked of a collective's kernels (not sends and receives, nor DeepEP's
            # low-latency halves) between ranks whose times one machine's clock gives
            def counts(q: int) -> bool:
                if starts[q] <= e + offsets[r] + 10_000 or is_point_to_point(key[0]) or is_low_latency_ep(key[0]):
                    return True
                a, b = by_rank[r], by_rank[q]
                if a.clock == b.clock:
                    return False
                known = all((x.absolute_time or x.session_start_utc_ns is not None) for x in (a, b))
                return not (known and a.gpu_uuids & b.gpu_uuids)

            mine = max(starts[q] for q in starts if counts(q))
            wait = min(max(mine - starts[r], 0), e - s)
            ph = int(comm[r]["phase"][i])
            if ph >= 0 and ph < len(per_rank_wait[r]):
                per_rank_wait[r][ph] += wait
            wait_total[r] += wait
            cyc = int(phase_cycle[r][ph]) if 0 <= ph < len(phase_cycle[r]) else -1
            rows.append({
                "collective": ci, "name": key[0], "rank": r, "start_ns": s, "end_ns": e,
                "aligned_start_ns": s + offsets[r], "aligned_end_ns": e + offsets[r],
                "phase_id": ph if ph >= 0 else None, "cycle": cyc if cyc >= 0 else None,
                "skew_ns": last - first, "last_rank": last_rank, "wait_ns": wait, "comm_ns": (e - s) - wait,
            })
    collectives = pa.Table.from_pylist(rows, schema=COLLECTIVES)
    comm_stats = tuple(
        RankComm(
            rank=v.rank,
            comm_ns=int((comm[v.rank]["end"] - comm[v.rank]["start"]).sum()),
            wait_ns=int(wait_total[v.rank]),
            n_collectives=len(comm[v.rank]["name"]),
            phase_wait_ns=per_rank_wait[v.rank],
        )
        for v in views
    )
    return CrossRank(tuple(alignment), comm_stats, collectives, _critical_path(views, collectives, offsets))


def _align(views, comm, keyed, common_sorted) -> list[RankAlignment]:
    ref = views[0]
    out = []
    for v in views:
        if v.clock == ref.clock:
            out.append(RankAlignment(v.rank, 0, 0, "shared clock"))
            continue
        base, method = 0, "none"
        # Each rank's timestamps count from its own session start, unless the export made them
        # UTC already (--ts-normalize); the base offset brings both to the reference rank's clock.
        def epoch(x: RankView) -> int | None:
            return 0 if x.absolute_time else x.session_start_utc_ns

        if epoch(v) is not None and epoch(ref) is not None:
            base = epoch(v) - epoch(ref)
            method = "utc timestamps" if v.absolute_time and ref.absolute_time else "session start"
        # (Rule added on 2026-12-02) sends and receives end apart by the transfer: they refine
        # only another machine's clock, and only where no collective was matched.
        used = [k for k in common_sorted if not is_point_to_point(k[0])]
        if not used and not (method != "none" and v.gpu_uuids & ref.gpu_uuids):
            used = common_sorted
        if used:
            ends_v = np.array([comm[v.rank]["end"][keyed[v.rank][k]] for k in used], dtype=np.int64)
            ends_r = np.array([comm[ref.rank]["end"][keyed[ref.rank][k]] for k in used], dtype=np.int64)
            resid = (ends_v + base) - ends_r
            shift = int(np.median(resid))
            left = resid - shift
            mad = int(np.median(np.abs(left - np.median(left)))) if len(left) > 1 else None
            out.append(RankAlignment(v.rank, base - shift, mad, method + " + collectives" if method != "none" else "collectives"))
        else:
            out.append(RankAlignment(v.rank, base, None, method))
    return out


def _critical_path(views, collectives: pa.Table, offsets: dict[int, int]) -> pa.Table:
    """Per cycle: the (rank, phase) the others waited for, and how long.

    With collectives: the cycle's collective whose last rank brought the most new lateness
    (``_new_lateness``, 2026-12-05; before: its arrival skew minus how late that rank already
    was at the collective before) names the rank and, by the phase that rank was in, the phase. A straggler shows as a jump in
    lateness where it was held up; it may arrive late again later (when the others had queued
    their work ahead), but without a new jump. Summing small lags over all collectives instead
    picks whichever rank happens to launch more slowly. Without collectives: the
    rank whose GPU work ended last, in its longest phase.
    """
    import json

    col = collectives.to_pylist()
    # Cycles counted as the first rank counts them (2026-12-01): rank r's cycle + its shift, the
    # most common difference between the first rank's cycle and its own at the collectives.
    # (2026-12-06: cycle by cycle. Of the paths of differences over the rank's cycles that hold
    # a collective the first rank ran (each cycle a difference, or none), the highest score: 4
    # per collective the first rank counts as the chosen difference says (for none, that it ran
    # in no cycle), less 3 per change (none keeps the difference before), no cycle numbered right
    # after a numbered one counting as it or earlier; of those, the first
    # met choosing, cycle by cycle, the difference before, then none, then the smallest. Found
    # by trying every path. A cycle counted as one before it or earlier: none; one without such
    # collectives keeps the difference before (else after), none where that counts as the next
    # such cycle or later.)
    first_rank = views[0].rank if views else None
    by_coll: dict[int, dict[int, int | None]] = {}
    for row in col:
        by_coll.setdefault(row["collective"], {})[row["rank"]] = row["cycle"]
    votes: dict[int, dict[int, Counter]] = {}  # rank -> its cycle -> difference (None: unmarked there) -> collectives
    for cyc_of in by_coll.values():
        if first_rank not in cyc_of:
            continue
        c0 = cyc_of[first_rank]
        for rk, c in cyc_of.items():
            if rk != first_rank and c is not None:
                votes.setdefault(rk, {}).setdefault(c, Counter())[None if c0 is None else c0 - c] += 1

    def best_path(seen: list[int], v: dict[int, Counter]) -> list[int | None]:
        from functools import lru_cache

        @lru_cache(maxsize=None)
        def rest(i: int, carried: int | None, numbered: bool) -> tuple[int, tuple]:
            """The best score of cycles i on, and its path, given the difference carried and
            whether the cycle before was numbered (then no cycle may count as it or earlier)."""
            if i == len(seen):
                return 0, ()
            here = v[seen[i]]
            # (any difference the rank's collectives bear out anywhere; before any, the smallest
            # first, none last)
            options = ([carried, "none"] + [d for d in every if d != carried]) if carried is not None else every + ["none"]
            best = None
            for o in options:
                if o == "none":
                    after, path = rest(i + 1, carried, False)
                    got = (4 * here[None] + after, (None,) + path)
                else:
                    if numbered and o != carried and seen[i] + o <= seen[i - 1] + carried:
                        continue  # (it would count as the cycle before or earlier)
                    after, path = rest(i + 1, o, True)
                    got = (4 * here[o] - (3 if carried is not None and o != carried else 0) + after, (o,) + path)
                if best is None or got[0] > best[0]:
                    best = got
            return best

        every = sorted({d for n in v.values() for d in n if d is not None})
        return list(rest(0, None, False)[1])

    shift_by: dict[int, dict[int, int | None]] = {}
    for rk, v in votes.items():
        if all(set(n) == {None} for n in v.values()):
            continue  # (the first rank counted none of them: its own numbers)
        seen = sorted(v)
        path = best_path(seen, v)
        last = None
        for c, d in zip(seen, path):
            if d is not None and (last is not None and c + d <= last):
                d = None
            if d is not None:
                last = c + d
            shift_by.setdefault(rk, {})[c] = d

    def counted(rank: int, c: int | None) -> int | None:
        if c is None:
            return None
        seen = shift_by.get(rank)
        if not seen:
            return c
        if c in seen:
            d = seen[c]
        else:
            # (2026-12-06: a cycle without such collectives counts on from the numbered one before,
            # less one per unnumbered one since; else back from the numbered one after, plus one
            # per unnumbered one before that; none where that reaches the next numbered one)
            numbered = sorted(k for k in seen if seen[k] is not None)
            if not numbered:
                return None
            before = [k for k in numbered if k < c]
            if before:
                m = before[-1]
                d = seen[m] - sum(1 for k in seen if m < k < c and seen[k] is None)
            else:
                f = numbered[0]
                d = seen[f] + sum(1 for k in seen if c < k < f and seen[k] is None)
            nxt = [k for k in numbered if k > c]
            if c > min(seen) and nxt and c + d >= nxt[0] + seen[nxt[0]]:
                return None
        if d is None or c + d < 0:
            return None
        return c + d

    col = [{**row, "cycle": counted(row["rank"], row["cycle"]), "own_cycle": row["cycle"]} for row in col]
    cycles: set[int] = set()
    for v in views:
        if v.phases.num_rows:
            cycles |= {counted(v.rank, c) for c in v.phases["cycle"].to_pylist() if counted(v.rank, c) is not None}
    phase_names = {v.rank: v.phases["phase"].to_pylist() if v.phases.num_rows else [] for v in views}
    # One entry per collective: where its last arrival was (rank, phase instance, cycle).
    by_cycle: dict[int, list[dict]] = {}
    waits_by_cycle: dict[int, Counter] = {}
    last_row = {}
    for row in col:
        if row["rank"] == row["last_rank"]:
            last_row[row["collective"]] = row
    # The collective's cycle: its last arrival's, else (that rank marks no phase there: 2026-12-01)
    # the first rank's in rank order that has one.
    # (2026-12-05: the cycle most of its ranks' rows say; of as common ones, the last arrival's,
    # else the earliest)
    coll_cycle: dict[int, int | None] = {}
    said: dict[int, Counter] = {}
    for row in col:
        said.setdefault(row["collective"], Counter())
        if row["cycle"] is not None:
            said[row["collective"]][row["cycle"]] += 1
    # (2026-12-06: rows whose own cycle the first rank's count has no number for vote for none,
    # where the first rank ran the collective in no cycle either; none wins where as many as the
    # votes of any cycle)
    lowest: dict[int, dict] = {}
    for row in col:
        if row["collective"] not in lowest or row["rank"] < lowest[row["collective"]]["rank"]:
            lowest[row["collective"]] = row
    first_own = {k: row["own_cycle"] for k, row in lowest.items()}  # (each collective's group's first rank)
    unnumbered = Counter(row["collective"] for row in col if row["own_cycle"] is not None and row["cycle"] is None
                         and first_own.get(row["collective"]) is None)
    for k, votes in said.items():
        top = [c for c, n in votes.items() if n == max(votes.values())]
        lr = last_row.get(k)
        coll_cycle[k] = (lr["cycle"] if lr is not None and lr["cycle"] in top else min(top)) if top else None
        if unnumbered[k] and unnumbered[k] >= max(votes.values(), default=0):
            coll_cycle[k] = None
    for row in col:
        lr = last_row.get(row["collective"])
        cc = coll_cycle.get(row["collective"])
        c = cc if cc is not None else row["cycle"]
        if c is None:
            continue
        waits_by_cycle.setdefault(c, Counter())[row["rank"]] += row["wait_ns"]
        if lr is row and cc is not None and row["skew_ns"] > 1_000:  # all at once (within 1 us): it gated nobody (2026-12-01)
            by_cycle.setdefault(c, []).append(row)
    per_cycle = {v.rank: {counted(v.rank, c): x for c, x in _cycle_ends(v, offsets.get(v.rank, 0)).items() if counted(v.rank, c) is not None} for v in views}
    # Each rank's lateness at each collective (its arrival after the first rank's), to see
    # how much lateness a collective's last rank newly brought: its skew minus the lateness
    # that rank already had at the collective before.
    first_start: dict[int, int] = {}
    for row in col:
        k = row["collective"]
        first_start[k] = min(first_start.get(k, row["aligned_start_ns"]), row["aligned_start_ns"])
    lateness = {(row["collective"], row["rank"]): row["aligned_start_ns"] - first_start[row["collective"]] for row in col}
    by_key = {(row["collective"], row["rank"]): row for row in col}
    ops_of = {v.rank: sorted(zip(v.gpu_ops["start_ns"].to_pylist(), v.gpu_ops["end_ns"].to_pylist())) for v in views}
    # (2026-12-06) each rank's blocking calls, of the threads that launched its communication kernels
    syncs_of = {}
    for v in views:
        ops = v.gpu_ops.to_pylist() if v.gpu_ops.num_rows and "launch_tid" in v.gpu_ops.column_names else []
        talking = {(o["pid"], o["launch_tid"]) for o, c in zip(ops, comm_mask(v.gpu_ops).tolist() if ops else []) if c}
        rows = v.syncs.to_pylist() if v.syncs is not None else []
        syncs_of[v.rank] = [(x["start_ns"], x["end_ns"]) for x in rows if (x["pid"], x["tid"]) in talking]
    out = []
    for c in sorted(cycles):
        rows = by_cycle.get(c, [])
        waits = waits_by_cycle.get(c, Counter())
        if rows and len(views) > 1:
            # (2026-12-05) each collective's new lateness, the waits of its ranks it caused (each
            # at most that much), summed per last rank; then that rank's collective that brought
            # the most, the earliest
            score = {r["collective"]: _new_lateness(r, by_key, lateness, ops_of, coll_cycle, syncs_of) for r in rows}
            waits_at = {r["collective"]: [w["wait_ns"] for (c, _), w in by_key.items() if c == r["collective"]] for r in rows}
            held = {k: sum(min(w, max(score[k], 0)) for w in ws) for k, ws in waits_at.items()}
            summed = Counter()
            for r in rows:
                summed[r["last_rank"]] += held[r["collective"]]
            worst = max(rows, key=lambda r: (summed[r["last_rank"]], score[r["collective"]], -r["collective"]))
            gating = worst["last_rank"]
            ph = worst["phase_id"]
            phase = phase_names[gating][ph] if ph is not None and ph < len(phase_names[gating]) else None
            how = "collectives"
        else:
            ends = {rk: per_cycle[rk][c][0] for rk in per_cycle if c in per_cycle[rk]}
            met = any(cc == c for cc in coll_cycle.values())  # the ranks met at a collective in it (2026-12-01)
            if len(ends) < min(2, len(views)) and not (met and len(views) > 1):  # a cycle of one rank alone (2026-12-01)
                continue
            gating = max(ends, key=lambda k: (ends[k], -k))
            if len(ends) > 1:
                # (2026-12-02) only ranks that ran the cycle at once (a collective in it says
                # they did), the last ending last by more than 1 us (2026-12-06: where they met too)
                others = [e for k, e in ends.items() if k != gating]
                if (not met and per_cycle[gating][c][2] >= min(others)) or ends[gating] - max(others) <= 1_000:
                    continue
            phase = per_cycle[gating][c][1]
            how = "latest end"
        out.append({
            "cycle": c, "gating_rank": gating, "gating_phase": phase, "how": how,
            "max_wait_ns": max(waits.values()) if waits else 0,
            "waits_ns": json.dumps({str(k): int(v) for k, v in sorted(waits.items())}),
        })
    return pa.Table.from_pylist(out, schema=CRITICAL_PATH)


def _new_lateness(last: dict, by_key: dict, lateness: dict, ops_of: dict, coll_cycle: dict, syncs_of: dict | None = None) -> int:
    """(2026-12-05) The lateness the last rank of a collective brought: its skew, less what it
    carried in from the collective before in the same cycle: how much later than the rank that
    arrived before it (of ranks arriving together, the highest) it left that one, and then how
    much longer its GPU stood idle, at most how late it already was there. Each cycle names the
    rank whose such lateness (none below 0) sums highest, at its collective that brought most."""
    k, rank = last["collective"], last["rank"]
    others = [row for (c, r), row in by_key.items() if c == k and r != rank]
    if not others:
        return 0
    second = max(others, key=lambda row: (row["aligned_start_ns"], row["rank"]))
    if is_point_to_point(last["name"]) or is_low_latency_ep(last["name"]):
        return last["skew_ns"] - max(lateness.get((k - 1, rank), 0), 0)
    if coll_cycle.get(k - 1) != coll_cycle.get(k):
        return last["skew_ns"]
    before_l, before_s = by_key.get((k - 1, rank)), by_key.get((k - 1, second["rank"]))
    left_later = before_l["aligned_end_ns"] - before_s["aligned_end_ns"] if before_l is not None and before_s is not None else 0
    more_idle = _idle(rank, k, by_key, ops_of) - _idle(second["rank"], k, by_key, ops_of)
    if before_l is not None:
        # (2026-12-06) its CPU waited for its GPU through that end (a synchronize of a thread
        # that launched its collectives, begun by then, returning before any op ended after it:
        # the last begun by then): caught up, its idle after is new
        t = before_l["end_ns"]
        begun = [(a, b) for a, b in (syncs_of or {}).get(rank, ()) if a <= t]
        if begun:
            a, b = max(begun)
            if b >= t and not any(t < e <= b for _, e in ops_of[rank]):
                more_idle = 0
    return last["skew_ns"] - min(max(left_later + more_idle, 0), max(lateness.get((k - 1, rank), 0), 0))


def _idle(rank: int, k: int, by_key: dict, ops_of: dict) -> int:
    """How long the rank's GPU ran no op between the end of its kernel of collective k - 1 and
    the start of its kernel of k (its own clock; 0 without the one before)."""
    before = by_key.get((k - 1, rank))
    if before is None:
        return 0
    lo, hi = before["end_ns"], by_key[(k, rank)]["start_ns"]
    covered, reach = 0, lo
    for s, e in ops_of[rank]:  # (by start: each op counts past what the ones before covered)
        a, b = max(s, reach), min(e, hi)
        if b > a:
            covered += b - a
        reach = max(reach, min(e, hi))
    return max(hi - lo - covered, 0)


def _cycle_ends(view: RankView, offset: int) -> dict[int, tuple[int, str, int]]:
    """The per-cycle loop's lookup: {cycle: (aligned end, longest phase, aligned start)}, from the
    library's per-rank computation (which the rewrite left as it was, returning arrays instead)."""
    cycles, starts, ends, names = library_cycle_ends(view, offset)
    return {c: (e, n, s) for c, s, e, n in zip(cycles.tolist(), starts.tolist(), ends.tolist(), names)}
