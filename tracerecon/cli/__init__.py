"""Command line: one small module per command (parse, call ``tracerecon.api``, render).

Every analysing command takes the same trace and phase options (``common``); only this package
turns a ``TraceReconError`` into one line on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Sequence

from tracerecon import __version__
from tracerecon.cli import diff, export, plot, ranges, report, run, scrub, view
from tracerecon.errors import EXIT_INTERNAL, TraceReconError
from tracerecon.own_process import prepare

COMMANDS = (report, ranges, export, plot, diff, view, run, scrub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracerecon", description="True GPU-side phase times from Nsight Systems traces, per rank, and where CPU timers lie.")
    parser.add_argument("--version", action="version", version=f"tracerecon {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.add(sub)
    return parser


def console_main() -> int:
    """The ``tracerecon`` program (and ``python -m tracerecon``): ``main``, then every object
    left is frozen, so that the interpreter's exit does not walk them all for cycles (on the
    2-core machine that full collection took 0.08 s of a 2-s report)."""
    try:
        return main()
    finally:
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prepare(args.subcommand)  # no pandas, OpenBLAS idle, malloc and the collector: see tracerecon.own_process
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
