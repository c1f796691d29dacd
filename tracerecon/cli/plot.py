"""``tracerecon plot``: a picture of the report to paste (needs the ``plot`` extra)."""

from __future__ import annotations

import argparse
import os

from tracerecon.cli.common import add_analysis_command, config_from, load, output_path, warn_all
from tracerecon.json_text import one_line


def add(sub) -> None:
    p = add_analysis_command(
        sub, "plot", help="write an SVG/PNG: per rank CPU vs GPU per phase with verdicts, and GPU time per cycle by phase",
        description="Per rank: each phase's CPU timer against its GPU time (medians; the hatch shows the verdict) and every "
                    "cycle's GPU time stacked by phase. --diff B plots a second run below. Needs the `plot` extra (matplotlib).",
    )
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE.svg|png|pdf", help="the picture to write (format from the suffix: .svg, .png or .pdf)")
    p.add_argument("--diff", metavar="B", help="a second run (traces, run or export directory) plotted below the first")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from tracerecon.present import side_label

    check_picture_path(args.output, list(args.traces) + ([args.diff] if args.diff else []))
    # Each side named by what was given (a run's folder, a trace's file name), as `diff` says A and
    # B, and read with its own run directory's recorded phases, as `diff` reads them.
    runs = [(side_label("A", args.traces) if args.diff else "", load(args.traces, config_from(args, args.traces), args.jobs, args.dask, side="A" if args.diff else ""))]
    if args.diff:
        runs.append((side_label("B", [args.diff]), load([args.diff], config_from(args, [args.diff]), args.jobs, args.dask, side="B")))
    write_picture(runs, args.output)
    print(f"wrote {one_line(os.fsdecode(args.output))}")
    return 0


def check_picture_path(output: str, inputs: list[str], flag: str = "-o") -> None:
    """Refuse a picture's path that names no known format (UsageError), or that would overwrite
    an input, a special file or another trace (a mistyped ``flag``), and a plot without the
    `plot` extra: asked before any trace is read."""
    import importlib.util
    from pathlib import Path

    from tracerecon.errors import UsageError, plot_extra_missing
    from tracerecon.nsys.read_plan import refuse_file_over_a_trace
    from tracerecon.run_dir import refuse_output_over_inputs, refuse_special_output

    if not str(output).lower().endswith((".svg", ".png", ".pdf")):
        raise UsageError(f"{output}: the picture's name must end in .svg, .png or .pdf")
    refuse_output_over_inputs(Path(output), inputs)
    refuse_special_output(Path(output))
    refuse_file_over_a_trace(Path(output), "a picture", flag)
    # (looked up, not imported: the traces' reads start before the heavy modules are imported)
    if importlib.util.find_spec("matplotlib") is None:
        raise plot_extra_missing()


def write_picture(runs: list, output: str) -> None:
    """Write the picture of ``runs`` ((label, analysis) pairs, one panel row each) to ``output``;
    its drawing's warnings on stderr."""
    from tracerecon.plot import plot_runs

    warn_all(plot_runs(runs, output))
