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

from tracerecon.api import PhaseConfig
from tracerecon.api import load
from tracerecon.tui.app import TraceReconApp

KEYS = ["2", "n", "n", "p", "w", "plus", "plus", "minus", "right", "left", "0", "a", "3", "1"]


async def main(path: str) -> dict:
    app = TraceReconApp(lambda: load([path], PhaseConfig()), source=path)
    t0 = time.perf_counter()
    out: dict = {}
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        out["first_paint_s"] = round(time.perf_counter() - t0, 3)  # loading screen up
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["first_screen_with_data_s"] = round(time.perf_counter() - t0, 3)
        out["first_screen_with_data_from_process_start_s"] = round(time.perf_counter() - PROCESS_T0, 3)
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
