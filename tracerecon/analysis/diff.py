"""Two runs of the same engine, phase by phase: what changed on the GPU, and why, at kernel level.

Per rank and phase name, each side is summarised over its cycles (medians per cycle, a name's
instances in one cycle taken together): CPU and GPU time, eager launches, CUDA-graph replays, kernels by name, GPU idle
inside the phase (1 - busy / span) and blocking waits. The explanation is one line a person
can act on, e.g. ``verify +9.8 ms GPU: graph replay gone, 183 eager launches per cycle instead, GPU idle 61%``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from tracerecon.analysis.columns import eager_launches, median_ms, quantile_ms
from tracerecon.analysis.projection import I64_MAX, I64_MIN, int64s, string_mask
from tracerecon.analysis.phases import adds_up_tolerance, first_in_cycle, phases_per_cycle
from tracerecon.analysis.summary import steady_cycles, summarize_cycles

# A change is worth a word when it moves more than this (fraction of the larger side) ...
RELATIVE_CHANGE = 0.10
# ... and more than this absolute amount (ns), above timer and launch jitter.
ABSOLUTE_CHANGE_NS = 20_000
# Below this share of a phase's change accounted for by the factors found with a time (waits,
# kernels added, gone or slower), where the rest lies is said too.
UNEXPLAINED_SHARE = 0.5
# GPU idle inside a phase is worth saying when above this fraction.
IDLE_WORTH_SAYING = 0.25


@dataclass(frozen=True)
class PhaseSide:
    """One phase on one side, over its counted cycles (a name's ranges in one cycle taken
    together, as ``report`` does): medians per cycle unless said."""
    n: int  # cycles
    cpu_ms: float | None
    gpu_ms: float | None
    gpu_ms_p90: float | None
    eager_launches: float  # median per cycle
    graph_launches: float
    idle_fraction: float | None  # median of 1 - busy/span
    blocked_ms: float
    kernels: dict[str, float] = field(default_factory=dict)  # mean count per cycle, by kernel name
    wait_ms: float = 0.0  # median per cycle: its collectives waiting for other ranks
    kernel_ms: dict[str, float] = field(default_factory=dict)  # mean time per cycle, by kernel name
    lead_ms: float | None = None  # median per cycle: the GPU idle from its start boundary to its first op (the CPU not yet launching)


@dataclass(frozen=True)
class PhaseDelta:
    rank: int
    phase: str
    a: PhaseSide | None
    b: PhaseSide | None
    explanation: str

    def to_json(self) -> dict:
        a, b = self.a, self.b
        def g(side, attr):
            return getattr(side, attr) if side is not None else None
        d_gpu = (b.gpu_ms - a.gpu_ms) if a and b and a.gpu_ms is not None and b.gpu_ms is not None else None
        d_cpu = (b.cpu_ms - a.cpu_ms) if a and b and a.cpu_ms is not None and b.cpu_ms is not None else None
        return {
            "rank": self.rank,
            "phase": self.phase,
            "a_gpu_ms": g(a, "gpu_ms"),
            "b_gpu_ms": g(b, "gpu_ms"),
            "delta_gpu_ms": round(d_gpu, 6) if d_gpu is not None else None,
            "a_cpu_ms": g(a, "cpu_ms"),
            "b_cpu_ms": g(b, "cpu_ms"),
            "delta_cpu_ms": round(d_cpu, 6) if d_cpu is not None else None,
            "a_n": g(a, "n"),
            "b_n": g(b, "n"),
            "a_gpu_ms_p90": g(a, "gpu_ms_p90"),
            "b_gpu_ms_p90": g(b, "gpu_ms_p90"),
            "a_eager_launches": g(a, "eager_launches"),
            "b_eager_launches": g(b, "eager_launches"),
            "a_graph_launches": g(a, "graph_launches"),
            "b_graph_launches": g(b, "graph_launches"),
            "a_gpu_idle": g(a, "idle_fraction"),
            "b_gpu_idle": g(b, "idle_fraction"),
            "explanation": self.explanation,
        }


def summarize_side(phases: pa.Table, gpu_ops: pa.Table) -> dict[str, PhaseSide]:
    """Per phase name: a PhaseSide over its cycles (the rows of ``phases``, a rank's phases
    table or some of its rows, with a name's instances in one cycle taken together:
    ``phases_per_cycle``; ``gpu_ops`` name them by ``phase_id``)."""
    if phases.num_rows == 0:
        return {}
    # Each op counts for the first instance of its phase's name in its cycle (the folded row).
    to_first = dict(zip(phases["phase_id"].to_pylist(), phases["phase_id"].take(pa.array(first_in_cycle(phases))).to_pylist()))
    phases = phases_per_cycle(phases)
    ph = phases.select(["phase", "phase_id", "cpu_ns", "gpu_ns", "gpu_span_ns", "gpu_busy_ns", "blocked_ns", "n_graph_launches",
                        "gpu_start_ns", "gpu_boundary_start_ns"]).to_pydict()
    ph["wait_ns"] = phases["wait_ns"].to_pylist() if "wait_ns" in phases.column_names else [0] * phases.num_rows
    # Per phase id (a row of the rank's whole phases table: ``phases`` may hold some of them).
    ids = [int(i) for i in ph["phase_id"]]
    op_ids = int64s(gpu_ops["phase_id"], -1) if gpu_ops.num_rows else np.zeros(0, np.int64)
    if any(k != v for k, v in to_first.items()) and len(op_ids):
        lookup = np.arange(max(max(to_first) + 1, int(op_ids.max()) + 1), dtype=np.int64)
        lookup[list(to_first)] = list(to_first.values())
        op_ids = np.where(op_ids >= 0, lookup[np.maximum(op_ids, 0)], -1)
    n_ids = max(max(ids) + 1, int(op_ids.max()) + 1 if len(op_ids) else 0)
    eager = np.zeros(n_ids, dtype=np.int64)
    kernels: list[Counter] = [Counter() for _ in range(n_ids)]
    kernel_ns: list[Counter] = [Counter() for _ in range(n_ids)]
    if gpu_ops.num_rows:
        pid = op_ids
        keep = pid >= 0
        eager = eager_launches(gpu_ops, op_ids, n_ids)
        is_kernel = string_mask(gpu_ops["kind"], lambda k: k == "kernel")
        ks = np.flatnonzero(keep & is_kernel)
        if len(ks):
            names = gpu_ops["name"].take(pa.array(ks)).cast(pa.string()).to_pylist()
            dur = (int64s(gpu_ops["end_ns"]) - int64s(gpu_ops["start_ns"]))[ks]
            for p, name, d in zip(pid[ks], names, dur):
                kernels[p][name] += 1
                kernel_ns[p][name] += int(d)
    out: dict[str, PhaseSide] = {}
    by: dict[str, list[int]] = {}
    for i, name in enumerate(ph["phase"]):
        by.setdefault(name, []).append(i)
    for name, idx in by.items():
        n = len(idx)
        idle = []
        for i in idx:
            span, busy = ph["gpu_span_ns"][i], ph["gpu_busy_ns"][i]
            if span:
                idle.append(1 - busy / span)
        kc: Counter = Counter()
        kt: Counter = Counter()
        for i in idx:
            kc.update(kernels[ids[i]])
            kt.update(kernel_ns[ids[i]])
        out[name] = PhaseSide(
            n=n,
            cpu_ms=quantile_ms([ph["cpu_ns"][i] for i in idx], 0.5),
            gpu_ms=quantile_ms([ph["gpu_ns"][i] for i in idx], 0.5),
            gpu_ms_p90=quantile_ms([ph["gpu_ns"][i] for i in idx], 0.9),
            eager_launches=float(np.median(eager[[ids[i] for i in idx]])),
            graph_launches=float(np.median([ph["n_graph_launches"][i] for i in idx])),
            idle_fraction=round(float(np.median(idle)), 4) if idle else None,
            blocked_ms=median_ms([ph["blocked_ns"][i] for i in idx]),
            wait_ms=median_ms([ph["wait_ns"][i] or 0 for i in idx]) or 0.0,
            kernels={k: v / n for k, v in kc.items()},
            kernel_ms={k: v / n / 1e6 for k, v in kt.items()},
            lead_ms=median_ms([max(0, ph["gpu_start_ns"][i] - ph["gpu_boundary_start_ns"][i]) for i in idx
                               if ph["gpu_start_ns"][i] is not None and ph["gpu_boundary_start_ns"][i] is not None]),
        )
    return out


def _changed(a: float, b: float, absolute: float) -> bool:
    return abs(b - a) > absolute and abs(b - a) > RELATIVE_CHANGE * max(abs(a), abs(b))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def explain(phase: str, a: PhaseSide | None, b: PhaseSide | None, left_out: str = "", counted: tuple[int, int] = (0, 0)) -> str:
    """The one-line explanation of a phase's change from A to B. ``left_out``: "A" or "B" where
    the side without the phase has it only in cycles it does not count (warm-up, --skip-cycles).
    ``counted``: each side's counted cycles, where known (a phase run in fewer of them moves
    the cycle, not its own median)."""
    if a is None:
        if left_out == "A":
            return f"{phase}: only in cycles A leaves out (warm-up, --skip-cycles); B: {b.n} cycles, GPU {_ms(b.gpu_ms)} ms"
        return f"{phase}: new in B ({b.n} cycles, GPU {_ms(b.gpu_ms)} ms)"
    if b is None:
        if left_out == "B":
            return f"{phase}: only in cycles B leaves out (warm-up, --skip-cycles); A: {a.n} cycles, GPU {_ms(a.gpu_ms)} ms"
        return f"{phase}: gone in B (was {a.n} cycles, GPU {_ms(a.gpu_ms)} ms)"
    if a.gpu_ms is None or b.gpu_ms is None:
        cpu = f"{((b.cpu_ms or 0) - (a.cpu_ms or 0)):+.3f} ms CPU"
        if a.gpu_ms is None and b.gpu_ms is None:
            return f"{phase} {cpu} (no GPU work)"
        side, gpu = ("B", b.gpu_ms) if a.gpu_ms is None else ("A", a.gpu_ms)
        return f"{phase}: GPU work only in {side} ({gpu:.3f} ms), {cpu}"
    delta = b.gpu_ms - a.gpu_ms
    head = f"{phase} {delta:+.3f} ms GPU"
    why: list[str] = []
    explained = 0.0  # of the change, ms the factors said with a time account for
    ca, cb = counted
    # (a name whose instances are in no cycle counts instances, not cycles: not said so)
    if ca and cb and a.n <= ca and b.n <= cb and abs(b.n / cb - a.n / ca) > RELATIVE_CHANGE * max(a.n / ca, b.n / cb):
        # Its numbers are medians over the cycles it ran in: where it ran in fewer or more of
        # them, the cycle moved by that, its median perhaps not at all.
        why.append(f"ran in {b.n} of {cb} counted cycles (A: {a.n} of {ca})")
    if _changed(a.wait_ms, b.wait_ms, ABSOLUTE_CHANGE_NS / 1e6):
        # Said first: time its collectives waited for other ranks is no kernel of its own.
        waited = b.wait_ms - a.wait_ms
        against = f" (against the change: the rest of the phase {delta - waited:+.3f} ms)" if waited * delta < 0 else ""
        why.append(f"waiting for other ranks in collectives {a.wait_ms:.3f} -> {b.wait_ms:.3f} ms{against}")
        explained += waited
    if a.graph_launches > 0 and b.graph_launches == 0:
        why.append(f"graph replay gone, {b.eager_launches:.0f} eager launches per cycle instead")
    elif a.graph_launches == 0 and b.graph_launches > 0:
        why.append(f"now a CUDA-graph replay ({a.eager_launches:.0f} eager launches per cycle before, {b.eager_launches:.0f} now)")
    elif _changed(a.eager_launches, b.eager_launches, 2):
        why.append(f"{b.eager_launches:.0f} launches per cycle instead of {a.eager_launches:.0f}")
    added = sorted((k for k in b.kernels if k not in a.kernels), key=lambda k: -b.kernel_ms.get(k, 0))
    removed = sorted((k for k in a.kernels if k not in b.kernels), key=lambda k: -a.kernel_ms.get(k, 0))
    if added:
        why.append("new kernels: " + ", ".join(f"{k} ({b.kernel_ms[k]:.3f} ms)" for k in added[:3]))
        explained += sum(b.kernel_ms[k] for k in added)
    if removed:
        why.append("kernels gone: " + ", ".join(f"{k} ({a.kernel_ms[k]:.3f} ms)" for k in removed[:3]))
        explained -= sum(a.kernel_ms[k] for k in removed)
    # The kernel of both sides whose time per cycle moved most the phase's way (beside kernels
    # that came or went: a new 25 us kernel had hidden another's 100 us), with how many times a
    # cycle it ran where that changed (one more draft step is no slower kernel).
    # Where the median did not move, the two kernels that moved most either way, on average per
    # cycle (slower in some cycles only, which the median does not show, or one kernel's time
    # traded for another's), with the p90.
    moved = abs(delta) * 1e6 >= ABSOLUTE_CHANGE_NS
    both = set(a.kernel_ms) & set(b.kernel_ms)
    changed = [(b.kernel_ms[k] - a.kernel_ms[k], k) for k in sorted(both) if _changed(a.kernel_ms[k], b.kernel_ms[k], ABSOLUTE_CHANGE_NS / 1e6)]

    def said(d: float, k: str) -> str:
        na, nb = a.kernels.get(k, 0), b.kernels.get(k, 0)
        return f"{k} {d:+.3f} ms per cycle" + (f" ({nb:.3g} times a cycle, was {na:.3g})" if _changed(na, nb, 0.5) else "")

    if moved:
        way = [dk for dk in changed if dk[0] * delta > 0]
        if way:
            d, k = max(way, key=lambda dk: (abs(dk[0]), dk[1]))
            why.append(said(d, k))
            explained += d
    elif changed:
        most = sorted(changed, key=lambda dk: (-round(abs(dk[0]), 6), dk[1]))[:2]
        why.append(", ".join(said(d, k) for d, k in most) + f" on average, the median {delta:+.3f} ms (p90 {_ms(a.gpu_ms_p90)} -> {_ms(b.gpu_ms_p90)} ms)")
    if a.lead_ms is not None and b.lead_ms is not None and _changed(a.lead_ms, b.lead_ms, ABSOLUTE_CHANGE_NS / 1e6):
        # The GPU idle from the phase's start until its first op: the CPU launched later into
        # the phase (a straggler's CPU work, a sync that drained the queue first).
        lead = b.lead_ms - a.lead_ms
        why.append(f"GPU idle before its first op {a.lead_ms:.3f} -> {b.lead_ms:.3f} ms (CPU {_ms(a.cpu_ms)} -> {_ms(b.cpu_ms)} ms)")
        explained += lead
    idle_changed = a.idle_fraction is not None and b.idle_fraction is not None and abs(b.idle_fraction - a.idle_fraction) > 0.1
    # A high idle share is a cause only of a change (a phase that did not move keeps its idle),
    # and only where A's share is unknown: one that moved by more than 10 points is said as a
    # change above, one that moved less explains nothing ("GPU idle 96% (was 96%)").
    if b.idle_fraction is not None and (idle_changed or (moved and b.idle_fraction >= IDLE_WORTH_SAYING and a.idle_fraction is None)):
        why.append(f"GPU idle {b.idle_fraction:.0%}" + (f" (was {a.idle_fraction:.0%})" if a.idle_fraction is not None else ""))
    if _changed(a.blocked_ms, b.blocked_ms, ABSOLUTE_CHANGE_NS / 1e6):
        why.append(f"blocking waits {a.blocked_ms:.3f} -> {b.blocked_ms:.3f} ms")
    if not why:
        why.append(_same_kernels(a, b, delta) if moved else "no kernel-level change found")
    elif moved and not idle_changed and not (explained * delta > 0 and abs(explained) >= UNEXPLAINED_SHARE * abs(delta)):
        # What was found with a time accounts for under half of the change (a new 1 us kernel
        # beside a 2 ms move), or goes the other way (waits up, the phase down): where the
        # rest is, said as for a phase in which nothing changed.
        why.append("and " + _same_kernels(a, b, delta - explained))
    return f"{head}: " + ", ".join(why)


def _same_kernels(a: PhaseSide, b: PhaseSide, delta: float) -> str:
    """Why a phase's median moved when its kernels, launches, idle share and waits did not: the
    kernels together took longer (or less) per cycle; or, where their time per cycle is about
    the same, it moved outside them (gaps between them, queueing before the first) or between
    unlike cycles (a phase whose cycles alternate between two lengths: its median jumps with
    their mix, its kernels' time does not)."""
    ka, kb = sum(a.kernel_ms.values()), sum(b.kernel_ms.values())
    changed = _changed(ka, kb, ABSOLUTE_CHANGE_NS / 1e6)
    if changed and (kb - ka) * delta > 0:
        if set(a.kernel_ms) != set(b.kernel_ms):  # (kernels came or went: not the same ones)
            return f"the kernels' time per cycle {ka:.3f} -> {kb:.3f} ms"
        return f"same kernels, each took longer ({ka:.3f} -> {kb:.3f} ms per cycle)" if delta > 0 else f"same kernels, each ran faster ({ka:.3f} -> {kb:.3f} ms per cycle)"
    p90 = f"; p90 {_ms(a.gpu_ms_p90)} -> {_ms(b.gpu_ms_p90)} ms" if a.gpu_ms_p90 is not None or b.gpu_ms_p90 is not None else ""
    how = "the other way" if changed else "about the same"
    return f"kernels' time per cycle {how} ({ka:.3f} -> {kb:.3f} ms): the change is outside the kernels (gaps, queueing) or in the mix of unlike cycles{p90}"


def diff_rank(rank: int, a_phases: pa.Table, a_ops: pa.Table, b_phases: pa.Table, b_ops: pa.Table, order: tuple[str, ...] = (),
              all_names: tuple[set, set] = (set(), set()), counted: tuple[int, int] = (0, 0)) -> list[PhaseDelta]:
    """Per phase name of the two sides' counted phases (``steady_phases``) of one rank, its
    change; ``all_names``: each side's phase names in every cycle, counted or not; ``counted``:
    each side's counted cycles (``steady_cycles``)."""
    sa, sb = summarize_side(a_phases, a_ops), summarize_side(b_phases, b_ops)
    names = [n for n in order if n in sa or n in sb] + [n for n in list(sa) + list(sb) if n not in order]
    seen = []
    for n in names:
        if n not in seen:
            seen.append(n)

    def left_out(n: str) -> str:
        return "A" if n not in sa and n in all_names[0] else "B" if n not in sb and n in all_names[1] else ""

    return [PhaseDelta(rank, n, sa.get(n), sb.get(n), explain(n, sa.get(n), sb.get(n), left_out(n), counted)) for n in seen]


def cycle_delta(a_cycles: pa.Table, b_cycles: pa.Table) -> dict:
    def med(t, col):
        return median_ms(t[col].to_pylist() if t.num_rows else [])

    out = {"a_cpu_ms": med(a_cycles, "cpu_ns"), "b_cpu_ms": med(b_cycles, "cpu_ns"), "a_gpu_ms": med(a_cycles, "gpu_ns"), "b_gpu_ms": med(b_cycles, "gpu_ns")}
    out["delta_gpu_ms"] = round(out["b_gpu_ms"] - out["a_gpu_ms"], 6) if out["a_gpu_ms"] is not None and out["b_gpu_ms"] is not None else None
    out["delta_cpu_ms"] = round(out["b_cpu_ms"] - out["a_cpu_ms"], 6) if out["a_cpu_ms"] is not None and out["b_cpu_ms"] is not None else None
    out["a_n"], out["b_n"] = a_cycles.num_rows, b_cycles.num_rows
    return out


def token_delta(ra, rb) -> dict:
    """Per accepted token, two ranks (``RankAnalysis``: A's and B's), and whether a change is
    slower steps or fewer tokens, worded (``per_token_explanation``); empty where either side
    has no accepted-token count."""
    sa, sb = summarize_cycles(ra.cycles, ra.phases), summarize_cycles(rb.cycles, rb.phases)
    if sa.gpu_ms_per_accepted_token is None or sb.gpu_ms_per_accepted_token is None:
        return {}
    ta, tb = sa.accepted_tokens / max(sa.n, 1), sb.accepted_tokens / max(sb.n, 1)
    tokens = tb / ta - 1 if ta else 0.0
    per_tok = sb.gpu_ms_per_accepted_token / sa.gpu_ms_per_accepted_token - 1 if sa.gpu_ms_per_accepted_token else 0.0
    # GPU per cycle as the tokens per cycle are taken, over the counted cycles, by its mean: the
    # median cycle had stayed put where 16 of 40 cycles slowed ("mostly faster steps (GPU per
    # cycle +0%)" for a 15% slowdown per token).
    ga, gb = _mean_cycle_gpu(ra), _mean_cycle_gpu(rb)
    step = gb / ga - 1 if ga and gb is not None else 0.0

    def size(change: float) -> float:  # how far a ratio moved, either way alike
        return abs(math.log1p(change)) if change > -1 else math.inf

    if abs(per_tok) < 0.05:
        why = "GPU time per accepted token is about the same"
    elif size(step) >= size(tokens):
        why = f"per accepted token {per_tok:+.0%}: mostly {'slower' if step > 0 else 'faster'} steps (GPU per cycle {step:+.0%}, tokens per cycle {tokens:+.0%})"
    else:
        why = f"per accepted token {per_tok:+.0%}: mostly {'fewer' if tokens < 0 else 'more'} accepted tokens (tokens per cycle {tokens:+.0%}, GPU per cycle {step:+.0%})"
    return {"a_gpu_ms_per_accepted_token": sa.gpu_ms_per_accepted_token, "b_gpu_ms_per_accepted_token": sb.gpu_ms_per_accepted_token,
            "a_tokens_per_cycle": round(ta, 3), "b_tokens_per_cycle": round(tb, 3), "per_token_explanation": why}


def _mean_cycle_gpu(rank) -> float | None:
    """A rank's GPU ns per counted cycle, on average (None where none has GPU time)."""
    gpu = [g for g in steady_cycles(rank.cycles)["gpu_ns"].to_pylist() if g is not None] if rank.cycles.num_rows else []
    return sum(gpu) / len(gpu) if gpu else None


def launch_cycles(ops: pa.Table, cycles: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op of ``ops``: the row of ``cycles`` that began last before its launch call (-1: none),
    whether that cycle's CPU span holds the launch, and whether any cycle's does (cycles of two
    threads overlap: a short one begun inside a long one does not end the long one's span)."""
    t = int64s(ops["launch_start_ns"], -1)
    if cycles.num_rows == 0:
        none = np.zeros(len(t), dtype=bool)
        return np.full(len(t), -1, np.int64), none, none
    lo, hi = int64s(cycles["cpu_start_ns"], I64_MAX), int64s(cycles["cpu_end_ns"], I64_MIN)
    order = np.argsort(lo, kind="stable")
    at = np.searchsorted(lo[order], t, side="right") - 1
    ok = (t >= 0) & (at >= 0)
    row = np.where(ok, order[np.maximum(at, 0)], -1)
    holds = ok & (t < hi[np.maximum(row, 0)])
    any_holds = ok & (t < np.maximum.accumulate(hi[order])[np.maximum(at, 0)])
    return row, holds, any_holds


def leaves_work_out(rank) -> bool:
    """Whether a rank's cycle GPU time (its phases' first boundary to their last) leaves out GPU
    work of its cycles in the median counted cycle: work launched inside a counted cycle's CPU
    span (its cycle range) in no phase that ran before the cycle's first boundary or after its
    last, by more than ``adds_up_tolerance`` (what the warnings of work in no phase go by), in
    more than half of the counted cycles (the medians compared). vLLM V1's unnamed preprocess,
    0.353 ms a cycle, had read as a 9 % slowdown against a run whose phases held it."""
    counted = steady_cycles(rank.cycles)
    ops = rank.gpu_ops
    if counted.num_rows == 0 or ops.num_rows == 0:
        return False
    b_lo, b_hi = int64s(counted["gpu_boundary_start_ns"], I64_MAX), int64s(counted["gpu_boundary_end_ns"], I64_MIN)
    row, holds, _ = launch_cycles(ops, counted)
    mine = ~ops["phase_id"].is_valid().to_numpy(zero_copy_only=False) & holds
    if not mine.any():
        return False
    c = row[mine]
    start, end = int64s(ops["start_ns"])[mine], int64s(ops["end_ns"])[mine]
    outside = np.clip(b_lo[c] - start, 0, end - start) + np.clip(end - b_hi[c], 0, end - start)
    per_cycle = np.bincount(c, weights=outside, minlength=counted.num_rows)
    gpu = np.where(b_hi > b_lo, b_hi - b_lo, 0)
    return 2 * int((per_cycle > adds_up_tolerance(gpu)).sum()) > counted.num_rows


def kernel_changes(a_ops: pa.Table, b_ops: pa.Table, top: int = 10, cycles: tuple[pa.Table, pa.Table] | None = None) -> list[dict]:
    """Whole-rank kernel time by name on both sides (also for traces without phase ranges): the
    totals over the whole trace (``a_ms``, ``b_ms``, ``delta_ms``) and launch counts, and, where
    both sides count cycles (``cycles``: each side's cycles table; warm-up, incomplete and empty
    cycles are left out of the counted), the time of the kernels launched in the counted cycles
    (their CPU spans) per cycle (``a_ms_per_cycle``, ``b_ms_per_cycle``, ``delta_ms_per_cycle``)
    and that of the kernels launched in no cycle at all (set-up, between cycle ranges:
    ``a_ms_outside_cycles``, ``b_ms_outside_cycles``; a left-out cycle's are in neither); None
    without. The largest changes per cycle first, then in total, and then the largest changes
    outside the cycles (captures of 30 and 2,500 cycles of one engine had put first a kernel 83x
    the launches whose time per cycle fell; a set-up kernel is none of the cycles')."""
    def totals(ops, cyc):
        if ops.num_rows == 0:
            return {}, {}, {}, {}
        idx = np.flatnonzero(string_mask(ops["kind"], lambda x: x == "kernel"))
        names = ops["name"].take(pa.array(idx)).cast(pa.string()).to_pylist()
        dur = (int64s(ops["end_ns"]) - int64s(ops["start_ns"]))[idx].tolist()
        counted = launch_cycles(ops, steady_cycles(cyc))[2][idx].tolist() if cyc is not None else [False] * len(idx)
        anywhere = launch_cycles(ops, cyc)[2][idx].tolist() if cyc is not None else [True] * len(idx)
        t, c, per, out = Counter(), Counter(), Counter(), Counter()
        for n, d, ins, any_ in zip(names, dur, counted, anywhere):
            t[n] += d
            c[n] += 1
            if ins:
                per[n] += d
            if not any_:
                out[n] += d
        return t, c, per, out

    na = steady_cycles(cycles[0]).num_rows if cycles is not None else 0
    nb = steady_cycles(cycles[1]).num_rows if cycles is not None else 0
    per_cycle = na > 0 and nb > 0
    ta, ca, pa_, oa = totals(a_ops, cycles[0] if per_cycle else None)
    tb, cb, pb, ob = totals(b_ops, cycles[1] if per_cycle else None)

    def ms(ns: float | None) -> float | None:
        return round(ns / 1e6, 6) if ns is not None and per_cycle else None

    rows = [
        {"kernel": k, "a_ms": round(ta.get(k, 0) / 1e6, 6), "b_ms": round(tb.get(k, 0) / 1e6, 6),
         "delta_ms": round((tb.get(k, 0) - ta.get(k, 0)) / 1e6, 6), "a_count": ca.get(k, 0), "b_count": cb.get(k, 0),
         "a_ms_per_cycle": ms(pa_.get(k, 0) / na if per_cycle else None), "b_ms_per_cycle": ms(pb.get(k, 0) / nb if per_cycle else None),
         "delta_ms_per_cycle": round(pb.get(k, 0) / nb / 1e6 - pa_.get(k, 0) / na / 1e6, 6) if per_cycle else None,
         "a_ms_outside_cycles": ms(oa.get(k, 0)), "b_ms_outside_cycles": ms(ob.get(k, 0))}
        for k in set(ta) | set(tb)
    ]
    rows.sort(key=lambda r: (-abs(r["delta_ms_per_cycle"] or 0), -abs(r["delta_ms"]), r["kernel"]))
    if not per_cycle:
        return rows[:top]
    outside = sorted(rows, key=lambda r: (-abs(outside_delta_ms(r)), r["kernel"]))
    return rows[:top] + [r for r in outside[:top] if outside_delta_ms(r) != 0 and r not in rows[:top]]


def outside_delta_ms(row: dict) -> float:
    """A ``kernel_changes`` row's change in the time launched in no cycle, ms (0 without)."""
    return round((row["b_ms_outside_cycles"] or 0) - (row["a_ms_outside_cycles"] or 0), 6)
