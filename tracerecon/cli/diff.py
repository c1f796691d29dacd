"""``tracerecon diff A B``: two runs phase by phase, explained at kernel level."""

from __future__ import annotations

import argparse

from tracerecon.cli.common import add_load_args, add_phase_args, config_from, console, load
from tracerecon.json_text import json_text


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
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from tracerecon import api
    from tracerecon.cli.render import print_diff

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
    return 0
