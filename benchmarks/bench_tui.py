"""`tracerecon view` responsiveness, headless (Textual's test driver, real app):
time to the first screen with data, and per keystroke, on the large trace.

    python benchmarks/bench_tui.py [TRACE.sqlite|.xz]
"""

from __future__ import annotations

import time

PROCESS_T0 = time.perf_counter()  # before the imports: "from start" counts them

import asyncio
import json
import statistics
import sys

from bench_export import trace_path

from tracerecon.own_process import prepare

prepare("view")  # as `tracerecon view` does

from tracerecon import api
from tracerecon.analysis.config import PhaseConfig
from tracerecon.tui.app import TraceReconApp

KEYS = ["2", "n", "n", "p", "w", "plus", "plus", "minus", "right", "left", "0", "a", "3", "1"]


async def main(path: str) -> dict:
    # As `tracerecon view` builds it: the overview from the cached report, then the analysis.
    config = PhaseConfig()
    cached = api.cached_report([path], config)
    if cached is None:
        api.check_inputs([path])
    report_loader = (lambda: cached) if cached is not None else (lambda: api.report([path], config))
    app = TraceReconApp(lambda: api.load([path], config), source=path, report_loader=report_loader)
    t0 = time.perf_counter()
    out: dict = {}
    async with app.run_test(size=(160, 48)) as pilot:
        # Polled, not `pilot.pause()`: that waits for the whole app to go idle, the analysis
        # loading in the background included.
        while not app.query("#loading-text"):
            await asyncio.sleep(0.002)
        out["first_paint_s"] = round(time.perf_counter() - t0, 3)  # loading screen composed
        table = app.query_one("#overview-table")
        while not table.row_count:  # ReportReady handled: the overview holds the numbers
            await asyncio.sleep(0.002)
        await pilot._wait_for_screen()  # its layout done ...
        app.screen._on_timer_update()  # ... and the screen painted, as pilot.pause does
        out["first_screen_with_data_s"] = round(time.perf_counter() - t0, 3)
        out["first_screen_with_data_from_process_start_s"] = round(time.perf_counter() - PROCESS_T0, 3)
        await app.workers.wait_for_complete()
        await pilot.pause(0)
        out["timeline_ready_from_process_start_s"] = round(time.perf_counter() - PROCESS_T0, 3)
        cycles = app.query_one("#cycles-table")
        while app.pending_cycle_rows or not cycles.row_count:
            await pilot.pause(0.02)
        await pilot.pause()
        out["cycles_table_filled_s"] = round(time.perf_counter() - t0, 3)
        per = {}
        for key in KEYS:
            t = time.perf_counter()
            await pilot.press(key)
            await pilot.pause()
            per.setdefault(key, []).append((time.perf_counter() - t) * 1e3)
        out["keystroke_ms"] = {k: round(statistics.median(v), 1) for k, v in per.items()}
        out["keystroke_ms_max"] = round(max(x for v in per.values() for x in v), 1)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(str(trace_path(sys.argv[1] if len(sys.argv) > 1 else None)))), indent=2))
