"""``tracerecon diff A B``: two runs phase by phase, explained at kernel level."""

from __future__ import annotations

import argparse

from tracerecon.cli.common import add_load_args, add_phase_args, config_from, console, load, output_path
from tracerecon.json_text import json_text, one_line


def add(sub) -> None:
    p = sub.add_parser(
        "diff", help="two runs phase by phase: GPU and CPU deltas explained at kernel level",
        description="Pairs the ranks of A and B by number and compares every phase's CPU and GPU medians, with one explanation "
                    "per phase (kernels added or removed, launch counts, graph replay vs eager, GPU idle, waits) and the "
                    "whole-trace kernel time changes.",
    )
    p.add_argument("a", metavar="A", help="the first run: traces, a run directory or an export directory")
    p.add_argument("b", metavar="B", help="the second run, the same kinds")
    add_load_args(p)
    add_phase_args(p)
    p.add_argument("--json", action="store_true", help="print the JSON document instead of tables")
    p.add_argument("--plot", type=output_path, metavar="FILE.svg|png|pdf",
                   help="also write a picture of the two runs, A above B (as `plot A --diff B`; needs the `plot` extra)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import os
    import sys

    from tracerecon import api
    from tracerecon.cli.plot import check_picture_path, write_picture
    from tracerecon.cli.render import print_diff
    from tracerecon.present import side_label

    if args.plot:
        check_picture_path(args.plot, [args.a, args.b], "--plot")
    # Each side with its own phase maps where its run directory recorded them (runs of two
    # engines); each side's warnings say which side they are about.
    a = load([args.a], config_from(args, [args.a]), args.jobs, args.dask, side="A")
    b = load([args.b], config_from(args, [args.b]), args.jobs, args.dask, side="B")
    result = api.compare(a, b, [args.a], [args.b])
    out = console()
    if args.json:
        out.file.write(json_text(result) + "\n")
    else:
        print_diff(result, out)
    if args.plot:
        write_picture([(side_label("A", [args.a]), a), (side_label("B", [args.b]), b)], args.plot)
        # (with --json, standard output holds the document alone)
        print(f"wrote {one_line(os.fsdecode(args.plot))}", file=sys.stderr if args.json else sys.stdout)
    return 0
