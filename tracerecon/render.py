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
    for r in analysis.ranks:
        ranks.append(
            {
                "rank": r.rank,
                "source": r.source.path,
                "pids": list(r.source.pids),
                "phases": [p.to_json() for p in summarize_phases(r.phases, analysis.config.phases)],
                "cycles": summarize_cycles(r.cycles).to_json(),
            }
        )
    return {"ranks": ranks, "warnings": list(analysis.warnings)}


def print_json(analysis: Analysis, console: Console) -> None:
    console.file.write(json.dumps(report_json(analysis), indent=2) + "\n")


def verdict_text(verdicts: dict[str, int]) -> Text:
    t = Text()
    for i, (v, n) in enumerate(verdicts.items()):
        if i:
            t.append(" ")
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
        table.add_column("CPU ms", justify="right")
        table.add_column("GPU ms", justify="right")
        table.add_column("GPU span", justify="right")
        table.add_column("GPU busy", justify="right")
        table.add_column("CPU-GPU", justify="right")
        table.add_column("verdicts")
        for p in phases:
            table.add_row(
                p.phase, str(p.n), _ms(p.cpu_ms_median), _ms(p.gpu_ms_median), _ms(p.gpu_span_ms_median),
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
    console.print("  GPU ms = the phase's share of the GPU timeline (what CUDA events at phase boundaries measure); medians over cycles.", style="dim")
