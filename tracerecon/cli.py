"""Command line: parse, call one library function, render. No analysis here."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, Sequence

from tracerecon import __version__
from tracerecon.analysis.attribution import parse_phase_thread
from tracerecon.analysis.phases import DEFAULT_CYCLE, DEFAULT_PHASES, PhaseConfig
from tracerecon.errors import EXIT_INTERNAL, TraceReconError, UsageError

BUNDLED_SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"


def _add_analysis_args(p: argparse.ArgumentParser, traces_required: bool = True) -> None:
    p.add_argument("traces", nargs="+" if traces_required else "*", metavar="TRACE", help="nsys .sqlite export(s) (or .sqlite.xz), or a directory of them")
    add_phase_args(p)


def add_phase_args(p: argparse.ArgumentParser) -> None:
    """The options that say what a phase is: every analysing command takes the same ones."""
    p.add_argument("--phase", action="append", metavar="NAME", help=f"NVTX range name of an engine phase (repeatable; default: {', '.join(DEFAULT_PHASES)})")
    p.add_argument("--cycle", default=DEFAULT_CYCLE, metavar="PREFIX", help="name prefix of the range enclosing one cycle (default: %(default)s)")
    p.add_argument("--phase-thread", default="auto", metavar="TID|auto|same",
                   help="GPU work launched by threads with no phase open goes to the phase open on this thread: "
                        "auto = for phases that launch nothing themselves (default), same = never (nsys's rule), or a thread id")


def _config(args: argparse.Namespace) -> PhaseConfig:
    try:
        thread = parse_phase_thread(args.phase_thread)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return PhaseConfig(phases=tuple(args.phase) if args.phase else DEFAULT_PHASES, cycle_prefix=args.cycle, phase_thread=thread)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracerecon", description="True GPU-side phase times from Nsight Systems traces, per rank.")
    parser.add_argument("--version", action="version", version=f"tracerecon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("report", help="per rank x phase: CPU timer vs true GPU time, verdicts, cycle totals")
    _add_analysis_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="per-rank parquet datasets (ranges, phases, cycles, gpu_ops, syncs) + manifest.json")
    _add_analysis_args(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("diff", help="two runs phase by phase: GPU and CPU deltas explained at kernel level")
    p.add_argument("a", metavar="A", help="traces / run directory / export directory of the first run")
    p.add_argument("b", metavar="B", help="the same for the second run")
    add_phase_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_diff)

    from tracerecon.nsys import cli_commands  # launcher / scrub subcommands live with nsys knowledge

    cli_commands.add_subcommands(sub)

    try:
        from tracerecon.tui import cli_command as tui_cli
    except ImportError:  # the tui extra is not installed
        tui_cli = None
    p = sub.add_parser("view", help="terminal UI: browse phases, cycles and timelines (needs the `tui` extra)")
    _add_analysis_args(p, traces_required=False)
    p.add_argument("--diff", metavar="B", help="also compare with B (traces, run or export directory) in a Diff tab")
    p.set_defaults(func=(tui_cli.cmd_view if tui_cli else _no_tui))
    return parser


def output_width() -> int | None:
    """The terminal's width; when piped, $COLUMNS or 100 (reports are laid out for 80)."""
    if sys.stdout.isatty():
        return None
    try:
        return max(40, int(os.environ.get("COLUMNS", "100")))
    except ValueError:
        return 100


def _no_tui(args: argparse.Namespace) -> int:
    raise TraceReconError("the terminal UI needs the `tui` extra: pip install 'tracerecon[tui]'")


@contextlib.contextmanager
def progress_reporter() -> Iterator:
    """A rich spinner on stderr when it is a terminal; silent otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("starting")
        yield lambda msg: prog.update(task, description=msg)


def load(paths, config, say=None):
    """Traces, run directories, or one parquet export directory -> Analysis."""
    from tracerecon.export import is_export_dir, read_parquet_export
    from tracerecon.pipeline import analyze

    if len(paths) == 1 and is_export_dir(paths[0]):
        return read_parquet_export(paths[0])
    return analyze(paths, config, progress=say)


def run_analysis(args: argparse.Namespace):
    with progress_reporter() as say:
        analysis = load(args.traces, _config(args), say)
    for w in analysis.warnings:
        print(f"tracerecon: warning: {w}", file=sys.stderr)
    return analysis


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tracerecon.render import print_json, print_report

    analysis = run_analysis(args)
    console = Console(highlight=False, soft_wrap=False, width=output_width())
    if args.json:
        print_json(analysis, console)
    else:
        print_report(analysis, console)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tracerecon.export import export_parquet

    analysis = run_analysis(args)
    manifest = export_parquet(analysis, args.output)
    rows = {t: (sum(v["rows_per_rank"].values()) if "rows_per_rank" in v else v["rows"]) for t, v in manifest["tables"].items()}
    print(f"wrote {args.output}: {len(analysis.ranks)} rank(s); " + ", ".join(f"{t} {n}" for t, n in rows.items()))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tracerecon.comparison import compare
    from tracerecon.render import print_diff

    config = _config(args)
    with progress_reporter() as say:
        a = load([args.a], config, say)
        b = load([args.b], config, say)
    for w in a.warnings + b.warnings:
        print(f"tracerecon: warning: {w}", file=sys.stderr)
    result = compare(a, b)
    console = Console(highlight=False, width=output_width())
    if args.json:
        import json

        console.file.write(json.dumps(result, indent=2) + "\n")
    else:
        print_diff(result, console)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TraceReconError as exc:
        print(f"tracerecon: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tracerecon: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # never a traceback for a user; TRACERECON_DEBUG=1 shows it
        if os.environ.get("TRACERECON_DEBUG"):
            raise
        print(f"tracerecon: internal error: {type(exc).__name__}: {exc} (set TRACERECON_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL
