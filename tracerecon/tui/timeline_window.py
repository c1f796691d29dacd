"""The timeline's geometry as plain values: a window of the trace's time, the lanes and
segments drawn in it, and the ruler. No pyarrow or numpy: the Timeline widget and the app's
first screen import this, the data behind it (``timeline_model``) comes with the analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    start_ns: int
    end_ns: int
    label: str
    kind: str  # phase name for phase lanes; kernel | memcpy | memset | graph | nccl | sync
    verdict: str | None = None  # phase lanes: the verdict of that phase instance
    ref: int | None = None  # phase_id (phase lanes, syncs: the phase waited for) or op row
    ops: int = 1  # GPU-op lanes: how many ops the segment stands for (a merged run: its first op is ref)


@dataclass(frozen=True)
class Lane:
    title: str
    segments: tuple[Segment, ...]
    gpu_phases: bool = False  # a lane of GPU phases (one per GPU where a rank's phases are read on several)


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int

    @property
    def span(self) -> int:
        return max(self.end_ns - self.start_ns, 1)

    def zoom(self, factor: float, center: float = 0.5, within: "Window | None" = None) -> "Window":
        """factor < 1 zooms in; ``center`` is the fixed point as a fraction of the window. Zoomed
        out, it never gets wider than ``within`` (the whole trace), and is ``within`` once as wide."""
        new = max(int(self.span * factor), 1_000)
        if within is not None and new >= within.span:
            return within
        anchor = self.start_ns + center * self.span
        start = int(anchor - center * new)
        return Window(start, start + new)

    def pan(self, fraction: float) -> "Window":
        d = int(self.span * fraction)
        return Window(self.start_ns + d, self.end_ns + d)


def ruler_ticks(w: Window, width: int, target: int = 8) -> list[tuple[int, str]]:
    """Tick positions (columns) and labels with units for a ruler ``width`` cells wide."""
    raw = w.span / max(target, 1)
    mag = 10 ** math.floor(math.log10(max(raw, 1)))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    # Ticks at round offsets from the window's start, labelled with those offsets.
    out = []
    rel = step
    while rel < w.span:
        out.append((int(rel / w.span * width), format_duration(rel)))
        rel += step
    return out


def format_duration(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g}s"
    if a >= 1e6:
        return f"{ns / 1e6:.3g}ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3g}us"
    return f"{ns:.0f}ns"
