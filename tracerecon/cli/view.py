"""``tracerecon view``: the terminal UI over the same core as ``report``."""

from __future__ import annotations

import argparse
import sys

from tracerecon.cli.common import BUNDLED_SAMPLE, add_analysis_command, config_from, warn_all
from tracerecon.errors import EXIT_INTERNAL, TraceReconError, UsageError, install_hint
from tracerecon.interrupts import WorkAbandoned

KEYS = "Keys: 1-5 tabs (5: --diff), n/p cycles, g go to cycle, w worst cycle, +/- zoom, 0 whole cycle, left/right pan, a all ranks, r next rank, s sort, / search, ? help, q quit."


def add(sub) -> None:
    p = add_analysis_command(
        sub, "view", help="terminal UI: browse phases, cycles and timelines (needs the `tui` extra)",
        description="Opens the traces (no TRACE: the bundled sample) in a terminal UI: an overview of ranks x phases, a timeline of "
                    "CPU phases against GPU phases, waits and streams, a table of cycles, and phase detail. " + KEYS, traces_required=False,
    )
    p.add_argument("--diff", metavar="B", help="also compare with B (traces, run or export directory) in a Diff tab")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from tracerecon import api

    traces = args.traces or [str(BUNDLED_SAMPLE)]
    config = config_from(args, traces)
    # Bad input fails here, like `report`, before the screen is taken. A report cached for
    # these very files says they were read before (and checking would import pyarrow).
    cached = api.cached_report(traces, config)
    if cached is None:
        api.check_inputs(traces)
    if args.diff:
        api.check_inputs([args.diff])
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("tracerecon view needs a terminal (use `tracerecon report` when the output is not one)")
    try:
        from tracerecon.tui.app import TraceReconApp
    except ImportError:
        raise TraceReconError(f"the terminal UI needs the `tui` extra: {install_hint('tui')}") from None

    diff_config = config_from(args, [args.diff]) if args.diff else None  # B's own phase maps, as `diff` takes them
    diff_loader = (lambda: api.load([args.diff], diff_config, jobs=args.jobs, scheduler=args.dask)) if args.diff else None
    # A cached report puts the overview up before the analysis loads; without one, the report
    # is made from the analysis once loaded, and cached for the next time (asking api.report
    # first would analyse twice when the cache cannot keep the entry: read-only, over its cap).
    app = TraceReconApp(lambda: api.load(traces, config, jobs=args.jobs, scheduler=args.dask), source=", ".join(traces), diff_loader=diff_loader,
                        report_loader=(lambda: cached) if cached is not None else None,
                        report_of=lambda analysis: api.report(traces, config, analysis=analysis))
    app.run()
    if app.return_code:  # the app stopped on an error of its own (Textual printed it): no success
        return EXIT_INTERNAL
    if app.load_failure is not None:
        # Shown in the app; said again as `report` says it (one line, its exit status).
        raise app.load_failure
    if not app.load_ended.is_set():
        # Quit while loading: the load cannot be stopped (a started read cannot be cancelled)
        # and the interpreter would wait for it (16 s after `q` for a 1 GiB export, 2 cores).
        raise WorkAbandoned()
    if app.report is not None:
        # The overview had room for a few: every one is said once the screen is given back, with
        # what this load alone said where the report came from the cache (``--dask`` not asked).
        this_load = [n for n in (app.analysis.load_notices if app.analysis is not None else ()) if n not in app.report.warnings]
        warn_all(this_load + list(app.report.warnings))
    return 0
