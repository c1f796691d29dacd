"""Rich layout of the documents ``tracerecon.present`` words: tables sized for 80 columns.

It lays out a ``report_model.Report`` (plain values), so a warm ``report`` imports no pyarrow.
"""

from __future__ import annotations

import textwrap

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tracerecon.present import VERDICT_STYLE, diff_notes, diff_title, fmt_ms, gpus_text, processes_text, rank_notes, verdict_cause_label
from tracerecon.report_model import Report
from tracerecon.json_text import json_text, one_line, shown_names


# A table's name column: this wide, folded onto at most this many lines (``shown_names`` cuts
# a longer name in the middle; JSON and parquet keep it whole).
NAME_COLUMN = 32
NAME_LINES = 4


def print_wrapped(console: Console, text: str, indent: str = "  ", hanging: str = "      ", style: str | None = None, bold: int = 0,
                  fields: bool = False) -> None:
    """One line of prose at the console's width, wrapped at spaces under a hanging indent (a
    path or a name longer than the width stays whole); its first ``bold`` characters bold. With
    ``fields``, the text is fields apart by two spaces, each kept on one line ("GPU 0 NVIDIA
    H200" is not cut after "NVIDIA")."""
    # (names from the trace in it: control characters as escapes, as on stderr)
    text = one_line(text)
    if fields:  # (the fields' own spaces as a character one_line never leaves, put back after)
        text = "  ".join(f.replace(" ", "\x00") for f in text.split("  "))
    lines = textwrap.wrap(text, width=max(20, console.width), initial_indent=indent, subsequent_indent=hanging,
                          break_long_words=False, break_on_hyphens=False) or [indent]
    lines = [line.replace("\x00", " ") for line in lines]
    for i, line in enumerate(lines):
        head = len(indent) + bold if i == 0 else 0
        console.print(Text.assemble((line[:head], "bold"), line[head:], style=style or ""), soft_wrap=True)


def print_table(console: Console, table: Table) -> None:
    """A table at the console's width, or as wide as its columns need where that is more: in a
    narrower one rich cuts numbers short ("-3.4…" for -3.484) and folds words a letter a line;
    lines wider than a terminal wrap there, whole."""
    width = console.width
    need = Measurement.get(console, console.options.update(width=max(width, 10_000)), table).minimum
    if need <= width:
        console.print(table)
        return
    console.width = need  # (print's own width is capped at the console's)
    try:
        console.print(table)
    finally:
        console.width = width


def print_json(report: Report, console: Console) -> None:
    console.file.write(json_text(report.to_json()) + "\n")


def print_report(report: Report, console: Console, hints: bool = True) -> None:
    """The report's tables and lines; ``hints``: how to change what it leaves out (``--skip-cycles``)."""
    every = [p.phase for r in report.ranks for p in r.phases]  # (one name reads the same in every rank's table)
    shown = dict(zip(every, shown_names(every, NAME_LINES * NAME_COLUMN)))
    for r in report.ranks:
        phases = r.phases
        on = gpus_text(r.gpus)
        pids = f"{processes_text(r.pids, r.tid)}  " if r.pids else ""
        print_wrapped(console, f"rank {r.rank}  {r.source}  {pids}{on + '  ' if on else ''}nsys {r.nsys_version or '?'}", indent="", fields=True,
                      hanging="    ", bold=len(f"rank {r.rank}"))
        engine = report.engine_timers.get(r.rank, {})
        # A label wider than what the other columns leave of the terminal is split at its ": "
        # (it wrapped where it overflowed: "under 26/30: comm_wait" above "30/30" read as two
        # numbers of one cause)
        header = "verdict: cause"
        others = Measurement.get(console, console.options.update(width=10_000), _phase_table(phases, shown, engine, [""] * len(phases))).maximum - len(header)
        room = max(console.width - others, len(header))
        labels = [label if len(label) <= room else label.replace(": ", ":\n", 1) for label in map(verdict_cause_label, phases)]
        table = _phase_table(phases, shown, engine, labels)
        if phases:
            print_table(console, table)
        else:
            # (a table of headers alone, and the note on its columns, had read as a result; where
            # every cycle is left out, `--skip-cycles` past them, no range is to blame)
            c = r.cycles
            print_wrapped(console, "no phase to show: every cycle is left out (below)" if c.n == 0 and (c.n_warmup or c.n_incomplete) else
                          "no phase to show: no range was named as a phase, or none ran in a cycle counted (`tracerecon ranges` lists every range name)")
        for line, _ in rank_notes(r, report.skip_cycles, hint=hints):
            print_wrapped(console, line)
        console.print()
    print_straggler_summary(report, console)
    if any(r.phases for r in report.ranks):
        print_wrapped(console, "GPU ms: CUDA-event time between phase boundaries; each column a median over cycles (CPU-GPU: of each cycle's own difference).", style="dim")


def _phase_table(phases, shown: dict, engine: dict, labels: list[str]) -> Table:
    """A rank's table of phases, each with its ``verdict: cause`` label as given."""
    table = Table(header_style="bold", box=None, padding=(0, 1, 0, 0), pad_edge=False)
    # A long phase name folds onto more lines within a bounded width: the numbers stay in
    # view, and names that differ only at their end stay told apart (cut with "…" at the
    # width, SGLang's EagleDraftWorker._draft_extend_for_decode and _for_prefill read the
    # same). Past four lines it is cut in the middle (a 5,000-character name took 160 lines).
    table.add_column("phase", max_width=NAME_COLUMN, overflow="fold")
    table.add_column("n", justify="right")
    if engine:
        table.add_column("engine", justify="right")  # the engine's own perf_counter timer, ms
    for col in ("CPU ms", "GPU ms", "span", "busy", "CPU-GPU"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("verdict: cause", overflow="fold")
    for p, label in zip(phases, labels):
        cells = [shown[p.phase], str(p.n)] + ([fmt_ms(engine.get(p.phase))] if engine else [])
        table.add_row(
            *cells, fmt_ms(p.cpu_ms_median), fmt_ms(p.gpu_ms_median), fmt_ms(p.gpu_span_ms_median),
            fmt_ms(p.gpu_busy_ms_median), fmt_ms(p.error_ms_median), Text(label, style=VERDICT_STYLE.get(p.dominant_verdict, "")),
        )
    return table


def print_straggler_summary(report: Report, console: Console) -> None:
    """Across ranks: alignment, communication vs waiting, and who gated the cycles."""
    if len(report.ranks) < 2 or not report.cross_rank:
        return
    t = Table(title="across ranks", title_justify="left", header_style="bold", box=None, padding=(0, 1), pad_edge=False)
    gated = report.critical_path["rank_counts"]
    rows = [(str(r.rank), f"{r.offset_ns / 1e6:.3f}", "?" if r.offset_uncertainty_ns is None else f"{r.offset_uncertainty_ns / 1e6:.3f}", r.alignment,
             str(r.n_collectives), f"{r.comm_ms:.3f}", f"{r.wait_ms:.3f}", str(gated.get(str(r.rank), 0))) for r in report.ranks]
    for i, col in enumerate(("rank", "offset ms", "± ms", "alignment", "coll.", "comm ms", "wait ms", "gated")):
        # Narrow, the alignment folds between its words, never inside one nor cut ("session start
        # + collect…" hid how the clocks were aligned); the numbers and headers stay whole (a
        # table that cannot fit is printed wider: ``print_table``).
        widest = max([len(w) for row in rows for w in row[i].split()] + [len(col)])
        t.add_column(col, justify="left" if col == "alignment" else "right", overflow="fold", min_width=widest, no_wrap=col != "alignment")
    for row in rows:
        t.add_row(*row)
    print_table(console, t)
    for line in report.straggler_lines:
        print_wrapped(console, line)
    console.print()


def print_diff(result: dict, console: Console) -> None:
    """The `diff` table and one explanation line per phase."""
    t = Table(title=Text(diff_title(result)), title_justify="left", header_style="bold", box=None, padding=(0, 1, 0, 0), pad_edge=False)
    for col in ("rank", "phase", "A GPU ms", "B GPU ms", "delta GPU", "A CPU ms", "B CPU ms"):
        t.add_column(col, justify="left" if col == "phase" else "right", **({"max_width": NAME_COLUMN, "overflow": "fold"} if col == "phase" else {}))
    for p, name in zip(result["phases"], shown_names([p["phase"] for p in result["phases"]], NAME_LINES * NAME_COLUMN)):
        d = p["delta_gpu_ms"]
        t.add_row(str(p["rank"]), name, fmt_ms(p["a_gpu_ms"]), fmt_ms(p["b_gpu_ms"]), Text("-" if d is None else f"{d:+.3f}", style="red" if (d or 0) > 0 else "green"), fmt_ms(p["a_cpu_ms"]), fmt_ms(p["b_cpu_ms"]))
    print_table(console, t)
    for text, style in diff_notes(result):
        print_wrapped(console, text, style=style or None)
