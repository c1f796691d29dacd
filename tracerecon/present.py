"""What every front end shows, worded once: the ``report --json`` document, the ``diff``
document, verdict and cause wording and colours, the "most misleading" line and the straggler
lines. Plain strings and dicts; the CLI (rich) and the TUI (Textual) only lay them out.

The wording needs no pyarrow: the analysis modules are imported by the functions that build
from an Analysis (``build_report``, ``diff_document``), so a warm report that lays out a cached
``Report`` never imports them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from tracerecon.json_text import gpu_label, one_line
from tracerecon.report_model import CycleSummary, PhaseSummary, RankReport, Report, lies_both_ways, most_misleading

if TYPE_CHECKING:
    from tracerecon.model import Analysis

__all__ = ["most_misleading"]

VERDICT_STYLE = {"under": "bold red", "over": "bold magenta", "agree": "green", "no_gpu_work": "dim"}
VERDICT_MEANING = {
    "under": "CPU timer under-reports",
    "over": "CPU timer over-reports",
    "agree": "CPU and GPU agree",
    "no_gpu_work": "no GPU work",
}
CAUSE_MEANING = {
    "async_tail": "its GPU work ran on past the timer",
    "absorbed_wait": "the timer holds a blocking wait on other phases' GPU work",
    "queued_behind": "its stream's events waited for earlier GPU work when the timer started (the CPU ran ahead)",
    "comm_wait": "its collectives waited for other ranks",
    "launch_bound": "the GPU sat idle over half its span while the CPU launched",
    "none": "",
}


def gpu_number(g) -> str:
    """A GPU (``GpuIdentity``) by number: ``2``, or ``2 (CUDA 0)`` where the process numbered
    the machine's GPU 2 otherwise."""
    return gpu_label(g.device, g.cuda_device)


def processes_text(pids, tid: int | None = None) -> str:
    """A rank's processes in a line: ``pid 10``, ``pid 10, 11``, and ``pid 10 thread 11`` where
    the rank is one GPU's part of a process (its loop thread: ``RankSource.tid``); empty where
    it has none."""
    if not pids:
        return ""
    return f"pid {', '.join(map(str, pids))}" + (f" thread {tid}" if tid is not None else "")


def gpus_text(gpus) -> str:
    """A rank's GPUs (``GpuIdentity``) in a line: ``GPU 0 NVIDIA H200``, ``GPUs 0, 1 NVIDIA
    H200`` (one name), ``GPUs 0 NVIDIA H200, 1 NVIDIA L4``, ``GPU 2 (CUDA 0) NVIDIA H200`` (a
    process given GPU 2 alone by CUDA_VISIBLE_DEVICES); empty where it ran none."""
    if not gpus:
        return ""
    names = {g.name for g in gpus}
    ids = ", ".join(gpu_number(g) for g in gpus)
    word = "GPU" if len(gpus) == 1 else "GPUs"
    if len(names) == 1:
        (name,) = names
        return f"{word} {ids}" + (f" {one_line(name)}" if name else "")
    return f"{word} " + ", ".join(gpu_number(g) + (f" {one_line(g.name)}" if g.name else "") for g in gpus)


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def build_report(analysis: Analysis) -> Report:
    """The report's values for ``analysis`` (engine timers as the analysis holds them)."""
    from tracerecon.analysis.summary import summarize_cycles, summarize_phases

    ranks = []
    cross = analysis.cross
    for r in analysis.ranks:
        al = cross.alignment_of(r.rank) if cross else None
        cm = cross.comm_of(r.rank) if cross else None
        ranks.append(RankReport(
            rank=r.rank,
            source=r.source.path,
            pids=tuple(r.source.pids),
            nsys_version=r.info.nsys_version,
            gpus=r.gpus,
            offset_ns=al.offset_ns if al else 0,
            offset_uncertainty_ns=al.offset_uncertainty_ns if al else 0,
            alignment=al.method if al else "shared clock",
            comm_ms=round(cm.comm_ns / 1e6, 6) if cm else 0.0,
            wait_ms=round(cm.wait_ns / 1e6, 6) if cm else 0.0,
            n_collectives=cm.n_collectives if cm else 0,
            phases=tuple(summarize_phases(r.phases, analysis.config.labels(), r.cycles)),
            cycles=summarize_cycles(r.cycles, r.phases),
            tid=r.source.tid,
        ))
    # Warm-up cycles are left out of the stragglers' counts, as out of every median; the critical
    # path counts cycles as the first rank does, so its warm-up cycles are the ones. So are the
    # cycles any rank has incomplete (its capture ended inside them: a rank whose capture went on
    # is no straggler there), counted the first rank's way (``counted_cycle``).
    first = analysis.ranks[0] if analysis.ranks else None
    left_out = frozenset(c for c, w in zip(first.cycles["cycle"].to_pylist(), first.cycles["warmup"].to_pylist()) if w) \
        if first is not None and first.cycles.num_rows and "warmup" in first.cycles.column_names else frozenset()
    if cross:
        left_out |= frozenset(cross.counted_cycle(r.rank, c) for r in analysis.ranks if "incomplete" in r.cycles.column_names
                              for c, k in zip(r.cycles["cycle"].to_pylist(), r.cycles["incomplete"].to_pylist()) if k)
        # And those every rank ran empty (no GPU work: nobody gated them).
        empty = [frozenset(cross.counted_cycle(r.rank, c) for c, e in zip(r.cycles["cycle"].to_pylist(), r.cycles["empty"].to_pylist()) if e)
                 if "empty" in r.cycles.column_names else frozenset() for r in analysis.ranks]
        left_out |= frozenset.intersection(*empty) if empty else frozenset()
    critical = cross.critical_path_json(left_out) if cross else {"rank_counts": {}, "waited_for_counts": {}, "phase_counts": {}, "by_rank": {}}
    return Report(ranks=tuple(ranks), critical_path=critical, straggler_lines=tuple(straggler_lines(analysis, critical, left_out)),
                  warnings=tuple(analysis.warnings), engine_timers=dict(analysis.engine_timers), cross_rank=cross is not None,
                  skip_cycles=analysis.config.skip_cycles)


def _dominant(counts: dict[str, int], name: str, n: int) -> str:
    k = counts.get(name, 0)
    return name if k == n else f"{name} {k}/{n}"


def verdict_label(p: PhaseSummary) -> str:
    """The dominant verdict, with its share when the instances disagree: ``over 23/24``."""
    return _dominant(p.verdicts, p.dominant_verdict, p.n)


def verdict_cause_label(p: PhaseSummary) -> str:
    """``over 23/24: absorbed_wait``: the dominant verdict and its cause
    (``report_model.dominant_cause``: the most common among the causes the verdict's instances
    have), the cause's own share where it differs from the verdict's: ``agree 19/30:
    launch_bound 13/30`` (a verdict's share is not its cause's); a cause as common as its
    verdict has none of its own (``over 27/30: absorbed_wait``, not ``absorbed_wait 27/30``
    again, which at 80 columns wrapped onto a line of its own); ``none`` is left out."""
    cause = p.dominant_cause
    if cause == "none":
        return verdict_label(p)
    k, of_verdict = p.causes.get(cause, 0), p.verdicts.get(p.dominant_verdict, 0)
    # (no share only where the cause is the verdict's cycles' and theirs alone: a count equal by
    # chance, agree 18/30 beside comm_wait in 18 cycles of which 7 agree, keeps it)
    alike = k == of_verdict and (p.verdict_causes is None or p.verdict_causes.get(cause, 0) == of_verdict)
    return verdict_label(p) + ": " + (cause if alike else f"{cause} {k}/{p.n}")


def left_out_note(cycles: CycleSummary, hint: bool = False, skip_cycles: int | None = None) -> str:
    """What a rank's medians leave out, as "; N warm-up cycle(s) left out; M phase range(s) in
    no cycle left out" (empty when nothing); ``hint``: how to keep the warm-up cycles;
    ``skip_cycles``: the ``--skip-cycles`` given (the leading cycles it leaves out are said as
    such, not as warm-up)."""
    if skip_cycles is not None:
        leading = f"; {cycles.n_warmup} leading cycle(s) left out (--skip-cycles {skip_cycles})" if cycles.n_warmup else ""
    else:
        leading = f"; {cycles.n_warmup} warm-up cycle(s) left out" + (" (--skip-cycles 0 keeps them)" if hint else "") if cycles.n_warmup else ""
    return "".join([
        leading,
        f"; {cycles.n_incomplete} incomplete cycle(s) left out (not whole in the trace)" if cycles.n_incomplete else "",
        f"; {cycles.n_empty} empty cycle(s) left out (no GPU work launched in them)" if cycles.n_empty else "",
        f"; {cycles.n_outside_cycles} phase range(s) in no cycle left out" if cycles.n_outside_cycles else "",
    ])


def groups_apart_lines(phases) -> list[str]:
    """One line per phase and clock (CPU, GPU) whose median no cycle reads near: the two groups
    its cycles split into (``PhaseSummary.cpu_ms_groups`` / ``gpu_ms_groups``)."""
    out = []
    for p in phases:
        for clock, median, groups in (("CPU", p.cpu_ms_median, p.cpu_ms_groups), ("GPU", p.gpu_ms_median, p.gpu_ms_groups)):
            if groups:
                (a, b, n), (c, d, k) = groups
                out.append(f"{p.phase}: no cycle's {clock} ms is near its median {fmt_ms(median)}: its cycles split into "
                           f"{fmt_ms(a)}-{fmt_ms(b)} ms ({n}) and {fmt_ms(c)}-{fmt_ms(d)} ms ({k})")
    return out


# A cycle whose phases hold less than this share of its CPU time (median against median) is said
# to have its GPU time from its phases alone.
PHASES_HOLD_LITTLE = 0.8


def rank_notes(r: RankReport, skip_cycles: int | None = None, hint: bool = False) -> list[tuple[str, str]]:
    """What every front end says under a rank's table, in order, each (line, the verdict it
    speaks of or ""): its cycle totals, accepted tokens, the phase whose CPU timer misleads most,
    and phases whose median no cycle reads near. ``hint``: how to keep warm-up cycles."""
    c, phases = r.cycles, r.phases
    out: list[tuple[str, str]] = []
    if c.n:
        # (with no GPU time at all there is nothing to add up: "0 of N" read as a failure)
        adds_up = f"; phases add up in {c.n_add_up} of {c.n}" if c.gpu_ms_median is not None else "; no GPU time"
        # Phases that hold little of a cycle's CPU time (some left out of --phase): its GPU time
        # is theirs, first start to last end, which beside the whole cycle's CPU time reads short.
        held = (c.phases_cpu_ms_median or 0) / c.cpu_ms_median if c.cpu_ms_median else 1.0
        partial = (f"; its phases hold {held:.0%} of its CPU time, and its GPU time runs from the first one's start to the last one's end"
                   if held < PHASES_HOLD_LITTLE and c.gpu_ms_median is not None else "")
        out.append((f"cycles: {c.n}  CPU {fmt_ms(c.cpu_ms_median)} ms  GPU {fmt_ms(c.gpu_ms_median)} ms (median)"
                    + adds_up + partial + left_out_note(c, hint=hint, skip_cycles=skip_cycles), ""))
    elif c.n_warmup or c.n_incomplete or c.n_empty:  # every cycle left out: why the table is empty
        out.append(("cycles: none counted" + left_out_note(c, hint=hint, skip_cycles=skip_cycles), ""))
    if c.phases_in_no_cycle:
        # (a one-off range named as a phase, a 734 ms init beside 1.5 ms cycles: its row is no cycle's)
        names, one = ", ".join(c.phases_in_no_cycle), len(c.phases_in_no_cycle) == 1
        out.append((f"{names}: in no cycle: {'its row counts its' if one else 'their rows count their'} ranges (n), each read alone, "
                    "not per cycle, and in no cycle's time", ""))
    if c.gpu_ms_per_accepted_token is not None:
        # (each phase's share in the order of the table's rows, a phase it lacks after them)
        row = {p.phase: i for i, p in enumerate(phases)}
        shares = sorted(c.phase_ms_per_accepted_token.items(), key=lambda kv: row.get(kv[0], len(row)))
        out.append((f"accepted tokens: {c.accepted_tokens} in the cycles counted; GPU {c.gpu_ms_per_accepted_token:.3f} ms per accepted token ("
                    + ", ".join(f"{k} {v:.3f}" for k, v in shares) + ")", ""))
    elif c.accepted_tokens:
        out.append((f"accepted tokens: {c.accepted_tokens} (no GPU time in the cycles that said them)", ""))
    elif c.accepted_tokens is not None:
        out.append(("accepted tokens: 0", ""))
    worst = most_misleading(phases)
    if worst is not None:
        # (in the colour of the way its timer errs: one that errs both ways may agree most often)
        over, under = worst.verdicts.get("over", 0), worst.verdicts.get("under", 0)
        out.append((misleading_line(worst), ("over" if over >= under else "under") if lies_both_ways(worst) else worst.dominant_verdict))
    out += [(line, "") for line in groups_apart_lines(phases)]
    return out


def misleading_line(p: PhaseSummary) -> str:
    """One sentence for the phase whose CPU timer misleads most. A timer that errs both ways
    (``lies_both_ways``) is said so, with how far it is off in the median cycle and the causes
    of its cycles: its CPU and GPU medians can read alike."""
    if lies_both_ways(p):
        v = p.verdicts
        causes = ", ".join(f"{c} {k}" for c, k in p.causes.items() if c != "none")
        return (f"most misleading: {p.phase}: CPU timer off its GPU time by {fmt_ms(p.abs_error_ms_median)} ms in the median cycle - "
                f"it over-reports in {v['over']} and under-reports in {v['under']} of {p.n}" + (f" ({causes})" if causes else ""))
    why = CAUSE_MEANING.get(p.dominant_cause, "")
    return (f"most misleading: {p.phase}: CPU {fmt_ms(p.cpu_ms_median)} ms vs GPU {fmt_ms(p.gpu_ms_median)} ms - "
            f"{VERDICT_MEANING[p.dominant_verdict]}" + (f": {why}" if why else ""))


def straggler_lines(analysis: Analysis, critical_path: dict | None = None, leave_out: frozenset[int] = frozenset()) -> list[str]:
    """One line per rank that gated cycles: its own most frequent gating phase, and how long
    the other ranks of its communicators (``CrossRank.partners_of``) waited in collectives in
    the cycles it gated. ``critical_path``: the run's
    ``critical_path_json(leave_out)``, when the caller has it; cycles ``leave_out`` (warm-up, incomplete)
    are not counted. Where no collective related the ranks in a rank's cycles, the line says
    it only ended last (nobody waited for it: no collective between them, or all reached
    them at once)."""
    cross = analysis.cross
    if cross is None or len(analysis.ranks) < 2 or cross.critical_path.num_rows == 0:
        return []
    per_rank = (critical_path or cross.critical_path_json(leave_out))["by_rank"]
    cols = cross.critical_path.select(["cycle", "gating_rank", "gating_phase", "waits_ns", "how"]).to_pydict()
    rows = [i for i, c in enumerate(cols["cycle"]) if c not in leave_out]
    total = len(rows)
    waited: dict[str, int] = {}
    gated: dict[str, int] = {}  # cycles a rank gated at a collective
    last: dict[str, int] = {}  # cycles it only finished last in (no collective related the ranks)
    phases_in: dict[tuple[str, bool], Counter] = {}  # (rank, gated at a collective): its phases there
    met: dict[str, frozenset[int] | None] = {}  # per gating rank: the ranks it met at collectives (None: not known, all)

    def others(rank: str, other: int) -> bool:  # whether ``other``'s waits count in ``rank``'s line
        return other != int(rank) and (met[rank] is None or other in met[rank])

    for i in rows:
        gating = cols["gating_rank"][i]
        if gating is None:
            continue
        key = str(gating)
        at_collective = cols["how"][i] == "collectives"
        if at_collective:  # what the others of its communicators waited in the cycles it gated
            if key not in met:
                met[key] = cross.partners_of(gating)
            waited[key] = waited.get(key, 0) + sum(v for k, v in json.loads(cols["waits_ns"][i] or "{}").items() if others(key, int(k)))
        counts = gated if at_collective else last
        counts[key] = counts.get(key, 0) + 1
        if cols["gating_phase"][i] is not None:
            phases_in.setdefault((key, at_collective), Counter())[cols["gating_phase"][i]] += 1
    lines = []
    for rank, d in sorted(per_rank.items(), key=lambda kv: (-kv[1]["cycles"], int(kv[0]))):
        g, n_last = gated.get(rank, 0), last.get(rank, 0)
        # Its phase most often, among the cycles the line counts (those it gated, else those it ended last).
        # (phases as often as each other all named: the first alone read as the one)
        common = phases_in.get((rank, bool(g)), Counter()).most_common()
        tied = [p for p, n in common if n == common[0][1]] if common else []
        k = common[0][1] if common else 0
        where = (f", mostly in {tied[0]} ({k} of them)" if len(tied) == 1 else
                 f", mostly in {', '.join(tied[:-1])} and {tied[-1]} ({k} of them each)" if tied else "")
        if not g:
            # (ranks whose clocks no collective aligned: which ended last is only as good as their clocks' agreement)
            clocks = "; told by clocks no collective aligned" if any(a.offset_uncertainty_ns is None for a in cross.alignment) else ""
            lines.append(f"last to finish: rank {rank} in {n_last} of {total} cycles{where} (none waited for it at a collective{clocks})")
            continue
        w = waited.get(rank, 0)
        # The across-ranks table's wait column counts every collective of the capture (warm-up
        # and cycles left out too): where that differs, both are said, so neither reads as the other.
        whole = sum(c.wait_ns for c in cross.comm if others(rank, c.rank))
        also = f" ({whole / 1e6:.3f} ms over the whole capture)" if cross.comm and round(whole / 1e3) != round(w / 1e3) else ""
        wait = f"; in those cycles the other ranks waited {w / 1e6:.3f} ms in collectives{also}" if w > 0 else ""
        more = f"; last to finish in {n_last} more, where none waited for it at a collective" if n_last else ""
        lines.append(f"straggler: rank {rank} gated {g} of {total} cycles{where}{wait}{more}")
    return lines


def diff_document(a: Analysis, b: Analysis, a_given: Sequence[str] | None = None, b_given: Sequence[str] | None = None) -> dict:
    """``{"phases": [...per rank and phase...], "cycles": {...}, "kernels": [...per rank...]}``.

    Ranks are paired by number (``rank_pairs``; a phase row's ``rank`` is A's); a rank on one
    side only is listed under ``unpaired_ranks``. ``a`` and ``b`` are the traces each side
    analysed (an export directory's: those it was made from); ``a_given`` and ``b_given``, where
    the caller passes them, what was given for each side (a run or export directory's path).
    """
    from tracerecon.analysis.diff import cycle_delta, diff_rank, kernel_changes, leaves_work_out, token_delta
    from tracerecon.analysis.summary import steady_cycles, steady_phases

    a_ranks = {r.rank: r for r in a.ranks}
    b_ranks = {r.rank: r for r in b.ranks}
    pairs = rank_pairs(sorted(a_ranks), sorted(b_ranks))
    phases = []
    per_rank_cycles = []
    kernels = []
    other_gpus = []  # pairs whose ranks ran on other GPU models
    for rank, rank_b in pairs:
        ra, rb = a_ranks[rank], b_ranks[rank_b]
        # The cycles and phase instances `report` takes its medians over: warm-up cycles left out.
        phases += [d.to_json() for d in diff_rank(rank, steady_phases(ra.phases, ra.cycles), ra.gpu_ops, steady_phases(rb.phases, rb.cycles), rb.gpu_ops,
                                                  a.config.labels(), (set(ra.phases["phase"].to_pylist()), set(rb.phases["phase"].to_pylist())),
                                                  (steady_cycles(ra.cycles).num_rows, steady_cycles(rb.cycles).num_rows))]
        per_rank_cycles.append({"rank": rank, **cycle_delta(steady_cycles(ra.cycles), steady_cycles(rb.cycles)), **token_delta(ra, rb)})
        kernels.append({"rank": rank, "a_cycles": steady_cycles(ra.cycles).num_rows, "b_cycles": steady_cycles(rb.cycles).num_rows,
                        "changes": kernel_changes(ra.gpu_ops, rb.gpu_ops, cycles=(ra.cycles, rb.cycles))})
        models = _gpu_models(ra.gpus), _gpu_models(rb.gpus)
        if models[0] and models[1] and models[0] != models[1]:
            other_gpus.append({"rank": rank, "a": models[0], "b": models[1]})
    first = per_rank_cycles[0] if per_rank_cycles else {}
    cycles = {k: first.get(k) for k in ("a_cpu_ms", "b_cpu_ms", "a_gpu_ms", "b_gpu_ms", "delta_gpu_ms", "delta_cpu_ms")}
    cycles["per_rank"] = per_rank_cycles
    # The sides whose cycle GPU time leaves out work of their cycles in no phase (``leaves_work_out``,
    # of a paired rank): their cycle lines compare what the phases cover.
    cycles["leave_work_out"] = [side for side, ranks, i in (("a", a_ranks, 0), ("b", b_ranks, 1))
                                if any(leaves_work_out(ranks[p[i]]) for p in pairs)]
    paired_a, paired_b = {ra for ra, _ in pairs}, {rb for _, rb in pairs}
    return {
        "a": list(a.inputs),
        "b": list(b.inputs),
        **({"a_given": list(a_given)} if a_given is not None else {}),
        **({"b_given": list(b_given)} if b_given is not None else {}),
        "phases": phases,
        "cycles": cycles,
        "kernels": kernels,
        "rank_pairs": [list(p) for p in pairs],
        "other_gpu_models": other_gpus,
        "unpaired_ranks": sorted({r for r in a_ranks if r not in paired_a} | {r for r in b_ranks if r not in paired_b}),
        "a_ranks": sorted(a_ranks),
        "b_ranks": sorted(b_ranks),
    }


def _gpu_models(gpus) -> list[str]:
    """The GPU models (names) a rank ran on, sorted; empty where any of them has no name (a
    model unknown is not told apart from another)."""
    names = {g.name for g in gpus}
    return [] if None in names else sorted(names)


def rank_pairs(a_ranks: Sequence[int], b_ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Which rank of A is compared with which of B: each rank number both sides have; where they
    have none in common and each side has one rank (a single rank's file, numbered by its
    ``tracerecon.rank`` mark or name, against another run's), those two."""
    common = sorted(set(a_ranks) & set(b_ranks))
    if common:
        return [(r, r) for r in common]
    if len(a_ranks) == 1 and len(b_ranks) == 1:
        return [(a_ranks[0], b_ranks[0])]
    return []


def side_label(side: str, given: Sequence[str] | None) -> str:
    """``A (nccl_skew)``: a side of a comparison named by what was given for it (a run
    directory's or a trace's name, not its whole path); the side alone where nothing was."""
    if not given:
        return side
    return f"{side} ({', '.join(os.path.basename(os.path.normpath(g)) or str(g) for g in given)})"


def diff_title(result: dict) -> str:
    """``A (...) -> B (...)``: the sides as the document names them (``a_given``, ``b_given``)."""
    return one_line(f"{side_label('A', result.get('a_given'))} -> {side_label('B', result.get('b_given'))}")


def diff_notes(result: dict) -> list[tuple[str, str]]:
    """The lines under the ``diff`` table, as (text, style), for every front end: ranks compared
    under other numbers (or none compared), the cycle, the GPU time per accepted token, each
    phase's explanation, the kernels whose time changed most, and the ranks only one side has."""
    out: list[tuple[str, str]] = []
    # First: which ranks were compared, where that is not each with its own number.
    pairs = result.get("rank_pairs", [])
    for ra, rb in pairs:
        if ra != rb:
            out.append((f"A's rank {ra} is compared with B's rank {rb}: the only rank on each side (ranks pair by number)", "yellow"))
    if not pairs and result.get("a_ranks") and result.get("b_ranks"):
        out.append((f"no rank in common, nothing compared: A has rank(s) {result['a_ranks']}, B has {result['b_ranks']} (ranks pair by number)", "yellow"))
    for g in result.get("other_gpu_models", []):
        out.append((f"rank {g['rank']} ran on {one_line(', '.join(g['a']))} in A and {one_line(', '.join(g['b']))} in B: its times are of different GPUs", "yellow"))
    c = result["cycles"]
    for r in c.get("per_rank", []):  # each rank's (rank 1 alone was left to the JSON)
        if r.get("a_gpu_ms") is not None or r.get("b_gpu_ms") is not None:
            delta = "-" if r.get("delta_gpu_ms") is None else f"{r['delta_gpu_ms']:+.3f}"
            out.append((f"cycle (rank {r['rank']}): GPU {fmt_ms(r.get('a_gpu_ms'))} -> {fmt_ms(r.get('b_gpu_ms'))} ms ({delta}), "
                        f"CPU {fmt_ms(r.get('a_cpu_ms'))} -> {fmt_ms(r.get('b_cpu_ms'))} ms", "bold"))
    left_out = c.get("leave_work_out", [])
    if left_out:
        sides = " and ".join(x.upper() for x in left_out)
        their = "their" if len(left_out) > 1 else "its"
        out.append((f"{sides}: GPU work launched inside {their} cycle ranges in no phase ran outside {their} cycle GPU time in most cycles "
                    f"counted ({sides}'s warnings say where): the cycle lines compare what each side's phases cover; name that work as a phase "
                    "on both sides (the same --preset, or --phase) to compare whole cycles", "yellow"))
    for r in c.get("per_rank", []):
        if r.get("per_token_explanation"):
            out.append((f"rank {r['rank']}: GPU per accepted token {r['a_gpu_ms_per_accepted_token']:.3f} -> "
                        f"{r['b_gpu_ms_per_accepted_token']:.3f} ms; {r['per_token_explanation']}", ""))
    for p in result["phases"]:
        out.append((f"rank {p['rank']}: {p['explanation']}", ""))
    for k in result.get("kernels", []):
        if k["changes"] and k["changes"][0].get("delta_ms_per_cycle") is not None:
            from tracerecon.analysis.diff import outside_delta_ms

            # (per counted cycle: captures of other lengths compare their lengths in totals)
            top = [x for x in k["changes"] if x["delta_ms_per_cycle"] != 0][:3]
            if top:
                out.append((f"rank {k['rank']} kernel time per cycle A -> B (launched in the {k['a_cycles']} and {k['b_cycles']} cycles counted): " + "; ".join(
                    f"{x['kernel'][:48]} {x['a_ms_per_cycle']:.3f} -> {x['b_ms_per_cycle']:.3f} ms ({x['a_count']} -> {x['b_count']} launches in the trace)"
                    for x in top), ""))
            # (and what was launched in no cycle: set-up, work between cycle ranges)
            rest = sorted((x for x in k["changes"] if abs(outside_delta_ms(x)) >= 0.0005), key=lambda x: -abs(outside_delta_ms(x)))[:3]
            if rest:
                out.append((f"rank {k['rank']} kernel time launched in no cycle A -> B (whole trace): " + "; ".join(
                    f"{x['kernel'][:48]} {x['a_ms_outside_cycles']:.3f} -> {x['b_ms_outside_cycles']:.3f} ms" for x in rest), ""))
            continue
        top = [x for x in k["changes"] if abs(x["delta_ms"]) > 0][:3]
        if top:
            out.append((f"rank {k['rank']} kernel time A -> B (whole trace): " + "; ".join(
                f"{x['kernel'][:48]} {x['a_ms']:.3f} -> {x['b_ms']:.3f} ms ({x['a_count']} -> {x['b_count']} launches)" for x in top), ""))
    if result["unpaired_ranks"] and result.get("rank_pairs", True):
        paired = {side: {p[i] for p in result.get("rank_pairs", [])} for i, side in enumerate("ab")}
        only = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} in {side.upper()} alone"
                for side in "ab" if (rs := [r for r in result.get(f"{side}_ranks", []) if r not in paired[side]])]
        out.append((f"ranks on one side only: {'; '.join(only) or ', '.join(map(str, result['unpaired_ranks']))} (not compared)", "yellow"))
    return out

