"""`tracerecon view`: validate inputs up front (one-line errors), then hand loading to the app."""

from __future__ import annotations

import argparse
from pathlib import Path

import textual  # noqa: F401  (ImportError here means the tui extra is missing)

from tracerecon.errors import BadTraceError


def cmd_view(args: argparse.Namespace) -> int:
    from tracerecon.cli import BUNDLED_SAMPLE, _config, load
    from tracerecon.export import is_export_dir
    from tracerecon.pipeline import expand_inputs
    from tracerecon.tui.app import TraceReconApp

    traces = args.traces or [str(BUNDLED_SAMPLE)]
    if not (len(traces) == 1 and is_export_dir(traces[0])):
        for f in expand_inputs(traces):  # bad paths fail here, before the screen is taken
            if not Path(f).is_file():
                raise BadTraceError(f"{f}: no such file")
    config = _config(args)
    diff_loader = None
    if args.diff:
        other = [args.diff]
        if not is_export_dir(args.diff):
            expand_inputs(other)
        diff_loader = lambda: load(other, config)  # noqa: E731
    app = TraceReconApp(lambda: load(traces, config), source=", ".join(traces), diff_loader=diff_loader)
    app.run()
    return 0
