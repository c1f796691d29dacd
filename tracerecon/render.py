"""Terminal rendering of a report (rich). Numbers come from analysis.summary; none are made here."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracerecon.analysis.summary import PhaseSummary, most_misleading, summarize_cycles, summarize_phases
from tracerecon.pipeline import Analysis

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
    "queued_behind": "its work waited behind earlier work on the stream",
    "comm_wait": "its collectives waited for other ranks",
    "launch_bound": "the GPU sat idle over half its span while the CPU launched",
    "none": "",
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
    critical = cross.critical_path_json() if cross else {"rank_counts": {}, "phase_counts": {}, "by_rank": {}}
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


def _dominant(counts: dict[str, int], name: str, n: int) -> str:
    k = counts.get(name, 0)
    return name if k == n else f"{name} {k}/{n}"


def verdict_cell(p: PhaseSummary) -> Text:
    """The dominant verdict, with its share when the instances disagree."""
    return Text(_dominant(p.verdicts, p.dominant_verdict, p.n), style=VERDICT_STYLE.get(p.dominant_verdict, ""))


def cause_cell(p: PhaseSummary) -> str:
    return "" if p.dominant_cause == "none" and p.causes.get("none", 0) == p.n else _dominant(p.causes, p.dominant_cause, p.n)


def verdict_cause_cell(p: PhaseSummary) -> Text:
    """``over 23/24: absorbed_wait``: the dominant verdict (with its share when instances
    disagree) and its cause."""
    t = Text(_dominant(p.verdicts, p.dominant_verdict, p.n), style=VERDICT_STYLE.get(p.dominant_verdict, ""))
    if p.dominant_cause != "none":
        t.append(f": {p.dominant_cause}")
    return t


def misleading_line(p: PhaseSummary) -> str:
    """One sentence for the phase whose CPU timer misleads most."""
    why = CAUSE_MEANING.get(p.dominant_cause, "")
    return (f"most misleading: {p.phase}: CPU {_ms(p.cpu_ms_median)} ms vs GPU {_ms(p.gpu_ms_median)} ms - "
            f"{VERDICT_MEANING[p.dominant_verdict]}" + (f": {why}" if why else ""))


def print_report(analysis: Analysis, console: Console) -> None:
    for r in analysis.ranks:
        phases = summarize_phases(r.phases, analysis.config.phases)
        cycles = summarize_cycles(r.cycles)
        console.print(f"[bold]rank {r.rank}[/bold]  {r.source.path}  pid {', '.join(map(str, r.source.pids))}  nsys {r.info.nsys_version or '?'}", overflow="fold")
        table = Table(header_style="bold", box=None, padding=(0, 1, 0, 0), pad_edge=False)
        table.add_column("phase", no_wrap=True)
        table.add_column("n", justify="right")
        engine = analysis.engine_timers.get(r.rank, {})
        if engine:
            table.add_column("engine", justify="right")  # the engine's own perf_counter timer, ms
        for col in ("CPU ms", "GPU ms", "span", "busy", "CPU-GPU"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("verdict: cause", overflow="fold")
        for p in phases:
            cells = [p.phase, str(p.n)] + ([_ms(engine.get(p.phase))] if engine else [])
            table.add_row(
                *cells, _ms(p.cpu_ms_median), _ms(p.gpu_ms_median), _ms(p.gpu_span_ms_median),
                _ms(p.gpu_busy_ms_median), _ms(p.error_ms_median), verdict_cause_cell(p),
            )
        console.print(table)
        if cycles.n:
            console.print(
                f"  cycles: {cycles.n}  CPU {_ms(cycles.cpu_ms_median)} ms  GPU {_ms(cycles.gpu_ms_median)} ms (median); "
                f"phases add up in {cycles.n_add_up} of {cycles.n}"
            )
        worst = most_misleading(phases)
        if worst is not None:
            console.print("  " + misleading_line(worst))
        console.print()
    print_straggler_summary(analysis, console)
    console.print("  GPU ms: CUDA-event time between phase boundaries; medians over cycles.", style="dim")


def straggler_lines(analysis: Analysis) -> list[str]:
    """One line per rank that gated cycles: its own most frequent gating phase, and how long
    the other ranks waited in collectives in the cycles it gated."""
    import json

    cross = analysis.cross
    if cross is None or len(analysis.ranks) < 2 or cross.critical_path.num_rows == 0:
        return []
    per_rank = cross.critical_path_json()["by_rank"]
    total = cross.critical_path.num_rows
    waited: dict[str, int] = {}
    for row in cross.critical_path.to_pylist():
        if row["gating_rank"] is None:
            continue
        others = {k: v for k, v in json.loads(row["waits_ns"] or "{}").items() if k != str(row["gating_rank"])}
        waited[str(row["gating_rank"])] = waited.get(str(row["gating_rank"]), 0) + sum(others.values())
    lines = []
    for rank, d in sorted(per_rank.items(), key=lambda kv: (-kv[1]["cycles"], int(kv[0]))):
        phase, k = next(iter(d["phase_counts"].items()), (None, 0))
        where = f", mostly in {phase} ({k} of them)" if phase else ""
        w = waited.get(rank, 0)
        wait = f"; in those cycles the other ranks waited {w / 1e6:.3f} ms in collectives" if w > 0 else ""
        lines.append(f"straggler: rank {rank} gated {d['cycles']} of {total} cycles{where}{wait}")
    return lines


def print_straggler_summary(analysis: Analysis, console: Console) -> None:
    """Across ranks: alignment, communication vs waiting, and who gated the cycles."""
    cross = analysis.cross
    if cross is None or len(analysis.ranks) < 2:
        return
    t = Table(title="across ranks", title_justify="left", header_style="bold", box=None, padding=(0, 1), pad_edge=False)
    for col in ("rank", "offset ms", "± ms", "alignment", "coll.", "comm ms", "wait ms", "gated"):
        t.add_column(col, justify="left" if col in ("alignment",) else "right")
    gated = cross.critical_path_json()["rank_counts"]
    for r in analysis.ranks:
        a, c = cross.alignment_of(r.rank), cross.comm_of(r.rank)
        unc = "?" if a.offset_uncertainty_ns is None else f"{a.offset_uncertainty_ns / 1e6:.3f}"
        t.add_row(str(r.rank), f"{a.offset_ns / 1e6:.3f}", unc, a.method, str(c.n_collectives), f"{c.comm_ns / 1e6:.3f}", f"{c.wait_ns / 1e6:.3f}", str(gated.get(str(r.rank), 0)))
    console.print(t)
    for line in straggler_lines(analysis):
        console.print("  " + line)
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
