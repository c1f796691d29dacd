"""``tracerecon report``: per rank x phase, the CPU timer against the GPU time, verdict and cause."""

from __future__ import annotations

import argparse

from tracerecon.cli.common import add_analysis_command, config_from, console, load_report
from tracerecon.import_ahead import once_reading


def add(sub) -> None:
    p = add_analysis_command(
        sub, "report", help="per rank x phase: CPU timer vs true GPU time, verdict and cause, cycle totals",
        description="Per rank and phase: how many instances, the CPU timer (median ms), the GPU time (what CUDA events at the phase "
                    "boundaries read), its span and busy time, CPU minus GPU, and which way the CPU timer errs and why. "
                    "Several ranks add alignment, communication, waiting and the straggler per cycle.",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document instead of tables (see the README for its fields)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # The renderer (rich: 0.03 s on the H200 host) is imported while the traces are read.
    with once_reading(["tracerecon.cli.render"]):
        report = load_report(args.traces, config_from(args), args.jobs, args.dask)
    from tracerecon.cli.render import print_json, print_report
    from tracerecon.run_dir import holds_manifest

    if args.json:
        print_json(report, console())
    else:
        # (an export holds the analysis it was made with: no --skip-cycles hint for it)
        print_report(report, console(), hints=not (len(args.traces) == 1 and holds_manifest(args.traces[0])))
    return 0
