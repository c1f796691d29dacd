"""`diff` core shared by the CLI and the TUI: two Analyses in, one JSON-ready document out."""

from __future__ import annotations

from tracerecon.analysis.diff import cycle_delta, diff_rank, kernel_changes
from tracerecon.pipeline import Analysis


def compare(a: Analysis, b: Analysis) -> dict:
    """``{"phases": [...per rank and phase...], "cycles": {...}, "kernels": [...per rank...]}``.

    Ranks are paired by number; a rank on one side only is listed under ``unpaired_ranks``.
    """
    a_ranks = {r.rank: r for r in a.ranks}
    b_ranks = {r.rank: r for r in b.ranks}
    phases = []
    per_rank_cycles = []
    kernels = []
    for rank in sorted(set(a_ranks) & set(b_ranks)):
        ra, rb = a_ranks[rank], b_ranks[rank]
        phases += [d.to_json() for d in diff_rank(rank, ra.phases, ra.gpu_ops, rb.phases, rb.gpu_ops, a.config.phases)]
        per_rank_cycles.append({"rank": rank, **cycle_delta(ra.cycles, rb.cycles)})
        kernels.append({"rank": rank, "changes": kernel_changes(ra.gpu_ops, rb.gpu_ops)})
    first = per_rank_cycles[0] if per_rank_cycles else {}
    cycles = {k: first.get(k) for k in ("a_cpu_ms", "b_cpu_ms", "a_gpu_ms", "b_gpu_ms", "delta_gpu_ms", "delta_cpu_ms")}
    cycles["per_rank"] = per_rank_cycles
    return {
        "a": list(a.inputs),
        "b": list(b.inputs),
        "phases": phases,
        "cycles": cycles,
        "kernels": kernels,
        "unpaired_ranks": sorted(set(a_ranks) ^ set(b_ranks)),
    }
