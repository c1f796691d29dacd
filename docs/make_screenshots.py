"""Regenerate the SVG screenshots in docs/ from the real app on the bundled sample traces (headless).

    python docs/make_screenshots.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tracerecon.api import PhaseConfig
from tracerecon.api import load
from tracerecon.tui.app import TraceReconApp

ROOT = Path(__file__).resolve().parent.parent
SHOTS = [
    ("overview", ROOT / "sample_traces/h200_nsys2025.3.1/eagle_gpu_bound.sqlite", []),
    ("timeline", ROOT / "sample_traces/h200_nsys2025.3.1/eagle_gpu_bound.sqlite", ["2", "n"]),
    ("cycles", ROOT / "sample_traces/h200_nsys2025.3.1/eagle_gpu_bound.sqlite", ["3"]),
    ("detail", ROOT / "sample_traces/h200_nsys2025.3.1/eagle_gpu_bound.sqlite", ["down", "down", "enter"]),
    ("ranks_stacked", ROOT / "sample_traces/demo_h200x2/nccl_skew", ["2", "a", "n", "n"]),
]


async def shoot(name: str, path: Path, keys: list[str]) -> None:
    app = TraceReconApp(lambda: load([str(path)], PhaseConfig()), source=path.name)
    async with app.run_test(size=(140, 40)) as pilot:
        # The load runs on a thread of its own (not a Textual worker): wait for it, then for
        # the messages it posted (and the cycles table's batches) to be handled.
        for _ in range(1200):
            if app.load_ended.is_set():
                break
            await pilot.pause(0.05)
        await app.workers.wait_for_complete()
        await pilot.pause(0.5)
        if keys:
            await pilot.press(*keys)
            await pilot.pause()
        app.save_screenshot(str(ROOT / "docs" / f"view_{name}.svg"))


if __name__ == "__main__":
    for shot in SHOTS:
        asyncio.run(shoot(*shot))
