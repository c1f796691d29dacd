"""``tracerecon ranges``: every NVTX range name per rank, with its GPU time (to find --phase)."""

from __future__ import annotations

import argparse

from tracerecon.cli.common import add_analysis_command, config_from, console, load, said_warnings, say
from tracerecon.json_text import json_text, shown_names

WIDTHS = {"name": 48, "domain": 20}  # the text columns' widths (folded within, NAME_LINES lines at most)


def add(sub) -> None:
    p = add_analysis_command(
        sub, "ranges", help="list the NVTX range names per rank: count, CPU median, GPU span median, GPU busy total (to choose --phase)",
        description="Like `nsys stats -r nvtx_sum`, with GPU time: per rank and range name (and domain), how many instances, the "
                    "CPU median, the median projected GPU span, the GPU busy time in total and the GPU ops launched; most GPU time first.",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tracerecon.api import range_summaries
    from tracerecon.cli.render import NAME_LINES, print_table, print_wrapped
    from tracerecon.present import fmt_ms, processes_text

    # Every range name is listed whatever the phases: only --cycle (which ranges are the cycle
    # row) changes the listing. The others are taken (one shared option set) and said unused.
    unused = [flag for flag, value in (("--phase", args.phase), ("--preset", getattr(args, "preset", None)), ("--skip-cycles", args.skip_cycles),
                                       ("--phase-thread", args.phase_thread)) if value not in (None, [], ())]
    unused_note = (f"{', '.join(unused)}: not used by `ranges`, which lists every range name with the CPU and GPU times of all "
                   "its instances (`report` takes them)") if unused else None
    if unused_note:
        say(f"warning: {unused_note}")
    # (loaded as without them: their own warnings, GPU work queued before the first phase given,
    # said nothing of this listing)
    plain = argparse.Namespace(**{**vars(args), "phase": None, "preset": None, "skip_cycles": None, "phase_thread": None})
    analysis = load(args.traces, config_from(plain), args.jobs, args.dask, phases_unused=True)
    out = console()
    if args.json:
        # (each rank's file and processes under `report --json`'s names: a file may hold several ranks)
        # (and the warnings said on stderr, as `report --json` carries them)
        doc = {"ranks": [{"rank": r.rank, "source": r.source.path, "pids": list(r.source.pids), "tid": r.source.tid, "ranges": [s.to_json() for s in range_summaries(r)]}
                         for r in analysis.ranks],
               "warnings": ([unused_note] if unused_note else []) + said_warnings(analysis, phases_unused=True)}
        out.file.write(json_text(doc) + "\n")
        return 0
    # The cycle ranges as one row, and each family of names that differ only in their numbers.
    rows = {r.rank: range_summaries(r, analysis.config.cycle_prefix, families=True) for r in analysis.ranks}
    # (one name reads the same in every rank's table)
    names = [s.name for ss in rows.values() for s in ss]
    domains = [s.domain for ss in rows.values() for s in ss]
    shown_name = dict(zip(names, shown_names(names, NAME_LINES * WIDTHS["name"])))
    shown_domain = dict(zip(domains, shown_names(domains, NAME_LINES * WIDTHS["domain"])))
    for r in analysis.ranks:
        # (headed by its file and processes as `report` heads a rank: a file may hold several
        # ranks, and a path wider than the table stays whole)
        pids = f"  {processes_text(r.source.pids, r.source.tid)}" if r.source.pids else ""
        print_wrapped(out, f"rank {r.rank}  {r.source.path}{pids}", indent="", hanging="    ", fields=True, bold=len(f"rank {r.rank}"))
        t = Table(header_style="bold", box=None, padding=(0, 1, 0, 0), pad_edge=False)
        for col in ("name", "domain", "n", "CPU ms", "GPU span", "GPU busy total", "ops"):
            # Long names fold within a bounded width: the numbers stay in view (past four lines
            # a name is cut in the middle; --json keeps it whole).
            t.add_column(col, justify="left" if col in ("name", "domain") else "right", overflow="fold",
                         max_width=WIDTHS.get(col))
        for s in rows[r.rank]:
            t.add_row(shown_name[s.name], shown_domain[s.domain], str(s.n), fmt_ms(s.cpu_ms_median), fmt_ms(s.gpu_ms_median), f"{s.gpu_busy_ms_total:.3f}", str(s.n_gpu_ops))
        print_table(out, t)
        out.print()
    return 0
