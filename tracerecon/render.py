"""Terminal rendering of a report (rich). Numbers come from analysis.summary; none are made here."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracerecon.analysis.summary import summarize_cycles, summarize_phases
from tracerecon.pipeline import Analysis

VERDICT_STYLE = {"under": "bold red", "over": "bold magenta", "launch_bound": "yellow", "agree": "green", "no_gpu_work": "dim"}
VERDICT_MEANING = {
    "under": "CPU timer under-reports (GPU work ran past it)",
    "over": "CPU timer over-reports (it waited for earlier phases' GPU work)",
    "launch_bound": "GPU mostly idle while the CPU launched",
    "agree": "CPU and GPU agree",
    "no_gpu_work": "no GPU work",
}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def report_json(analysis: Analysis) -> dict:
    """The ``report --json`` document."""
    ranks = []
    cross = analysis.cross
    for r in analysis.ranks:
        al = cross.alignment_of(r.rank) if cross else None
        cm = cross.comm_of(r.rank) if cross else None
        ranks.append(
            {
                "rank": r.rank,
                "source": r.source.path,
                "pids": list(r.source.pids),
                "offset_ns": al.offset_ns if al else 0,
                "offset_uncertainty_ns": al.offset_uncertainty_ns if al else 0,
                "alignment": al.method if al else "shared clock",
                "nccl": {
                    "comm_ms": round(cm.comm_ns / 1e6, 6) if cm else 0.0,
                    "wait_ms": round(cm.wait_ns / 1e6, 6) if cm else 0.0,
                    "n_collectives": cm.n_collectives if cm else 0,
                },
                "phases": [
                    {**p.to_json(), **({"engine_cpu_ms_median": analysis.engine_timers[r.rank][p.phase]} if p.phase in analysis.engine_timers.get(r.rank, {}) else {})}
                    for p in summarize_phases(r.phases, analysis.config.phases)
                ],
                "cycles": summarize_cycles(r.cycles).to_json(),
            }
        )
    critical = cross.critical_path_json() if cross else {"rank_counts": {}, "phase_counts": {}}
    return {"ranks": ranks, "critical_path": critical, "warnings": list(analysis.warnings)}


def print_json(analysis: Analysis, console: Console) -> None:
    console.file.write(json.dumps(report_json(analysis), indent=2) + "\n")


def verdict_text(verdicts: dict[str, int]) -> Text:
    t = Text()
    for i, (v, n) in enumerate(verdicts.items()):
        if i:
            t.append(", ")
        t.append(f"{v} {n}", style=VERDICT_STYLE.get(v, ""))
    return t


def print_report(analysis: Analysis, console: Console) -> None:
    for r in analysis.ranks:
        phases = summarize_phases(r.phases, analysis.config.phases)
        cycles = summarize_cycles(r.cycles)
        title = f"rank {r.rank}  ({r.source.path}, pid {', '.join(map(str, r.source.pids))}; nsys {r.info.nsys_version or '?'})"
        table = Table(title=title, title_justify="left", header_style="bold")
        table.add_column("phase")
        table.add_column("n", justify="right")
        engine = analysis.engine_timers.get(r.rank, {})
        if engine:
            table.add_column("engine ms", justify="right")  # the engine's own perf_counter timer
        table.add_column("CPU ms", justify="right")
        table.add_column("GPU ms", justify="right")
        table.add_column("GPU span", justify="right")
        table.add_column("GPU busy", justify="right")
        table.add_column("CPU-GPU", justify="right")
        table.add_column("verdicts")
        for p in phases:
            cells = [p.phase, str(p.n)] + ([_ms(engine.get(p.phase))] if engine else [])
            table.add_row(
                *cells, _ms(p.cpu_ms_median), _ms(p.gpu_ms_median), _ms(p.gpu_span_ms_median),
                _ms(p.gpu_busy_ms_median), _ms(p.error_ms_median), verdict_text(p.verdicts),
            )
        console.print(table)
        if cycles.n:
            console.print(
                f"  cycles: {cycles.n}   CPU {_ms(cycles.cpu_ms_median)} ms   GPU {_ms(cycles.gpu_ms_median)} ms (median)   "
                f"phases add up to the GPU cycle in {cycles.n_add_up} of {cycles.n}"
            )
        worst = max((p for p in phases if p.error_ms_median is not None), key=lambda p: abs(p.error_ms_median), default=None)
        if worst is not None and worst.dominant_verdict in ("under", "over"):
            console.print(
                f"  most misleading: [bold]{worst.phase}[/bold]: CPU {_ms(worst.cpu_ms_median)} ms vs GPU {_ms(worst.gpu_ms_median)} ms "
                f"- {VERDICT_MEANING[worst.dominant_verdict]}"
            )
        console.print()
    print_straggler_summary(analysis, console)
    console.print("  GPU ms = the phase's share of the GPU timeline (what CUDA events at phase boundaries measure); medians over cycles.", style="dim")


def print_straggler_summary(analysis: Analysis, console: Console) -> None:
    """Across ranks: alignment, communication vs waiting, and who gated the cycles."""
    cross = analysis.cross
    if cross is None or len(analysis.ranks) < 2:
        return
    t = Table(title="across ranks", title_justify="left", header_style="bold")
    for col in ("rank", "offset ms", "± ms", "alignment", "collectives", "comm ms", "waiting ms", "cycles gated"):
        t.add_column(col, justify="left" if col in ("alignment",) else "right")
    gated = cross.critical_path_json()["rank_counts"]
    for r in analysis.ranks:
        a, c = cross.alignment_of(r.rank), cross.comm_of(r.rank)
        unc = "?" if a.offset_uncertainty_ns is None else f"{a.offset_uncertainty_ns / 1e6:.3f}"
        t.add_row(str(r.rank), f"{a.offset_ns / 1e6:.3f}", unc, a.method, str(c.n_collectives), f"{c.comm_ns / 1e6:.3f}", f"{c.wait_ns / 1e6:.3f}", str(gated.get(str(r.rank), 0)))
    console.print(t)
    cp = cross.critical_path_json()
    if cp["rank_counts"]:
        top_rank, n = max(cp["rank_counts"].items(), key=lambda kv: kv[1])
        phase = next(iter(cp["phase_counts"]), "?")
        others = [c for c in cross.comm if str(c.rank) != top_rank]
        waited = max((c.wait_ns for c in others), default=0)
        console.print(
            f"  straggler: rank {top_rank} gated {n} of {cross.critical_path.num_rows} cycles, mostly in {phase}; "
            f"the other ranks waited up to {waited / 1e6:.3f} ms in collectives in all"
        )
    console.print()


def print_diff(result: dict, console: Console) -> None:
    """The `diff` table and one explanation line per phase."""
    t = Table(title="A -> B", title_justify="left", header_style="bold")
    for col in ("rank", "phase", "A GPU ms", "B GPU ms", "delta GPU", "A CPU ms", "B CPU ms"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    for p in result["phases"]:
        d = p["delta_gpu_ms"]
        t.add_row(str(p["rank"]), p["phase"], _ms(p["a_gpu_ms"]), _ms(p["b_gpu_ms"]), Text("-" if d is None else f"{d:+.3f}", style="red" if (d or 0) > 0 else "green"), _ms(p["a_cpu_ms"]), _ms(p["b_cpu_ms"]))
    console.print(t)
    c = result["cycles"]
    if c.get("a_gpu_ms") is not None:
        console.print(f"  cycle (rank {c['per_rank'][0]['rank']}): GPU {_ms(c['a_gpu_ms'])} -> {_ms(c['b_gpu_ms'])} ms ({c['delta_gpu_ms']:+.3f}), CPU {_ms(c['a_cpu_ms'])} -> {_ms(c['b_cpu_ms'])} ms")
    for p in result["phases"]:
        console.print(f"  rank {p['rank']}: {p['explanation']}")
    for k in result.get("kernels", []):
        top = [c for c in k["changes"] if abs(c["delta_ms"]) > 0][:3]
        if top:
            console.print(f"  rank {k['rank']} kernel time A -> B (whole trace): " + "; ".join(
                f"{c['kernel'][:48]} {c['a_ms']:.3f} -> {c['b_ms']:.3f} ms ({c['a_count']} -> {c['b_count']} launches)" for c in top))
    if result["unpaired_ranks"]:
        console.print(f"  ranks on one side only: {result['unpaired_ranks']}", style="yellow")
