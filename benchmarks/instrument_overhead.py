"""Cost of `tracerecon.instrument.phase` with no profiler attached, against an empty loop.

    python benchmarks/instrument_overhead.py [N] [--cuda]

``--cuda``: torch imported and CUDA initialised, as in an engine: each phase then also marks
its current stream and records an event there (``tracerecon.instrument``'s module doc); timed
with the declaration on and off (``declare_streams``), alternating, in one process.
"""

from __future__ import annotations

import sys
import time

from tracerecon import instrument
from tracerecon.instrument import cycle, phase


def per_phase(n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        pass
    empty = time.perf_counter() - t
    t = time.perf_counter()
    with cycle(0):
        for _ in range(n):
            with phase("verify"):
                pass
    return ((time.perf_counter() - t) - empty) / n


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 200_000
    if "--cuda" not in sys.argv:
        print(f"{n} phase ranges: {per_phase(n) * 1e9:.0f} ns each")
        return
    import torch

    torch.zeros(1, device="cuda")  # CUDA initialised, as in an engine
    per_phase(1000)  # the thread's event made
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(5):
        for on in (True, False):
            instrument.declare_streams(on)
            runs[on].append(per_phase(n))
    torch.cuda.synchronize()
    # What one declaration is made of, each part timed alone (the same calls mark_current_stream makes)
    import nvtx

    stream, event = torch.cuda.current_stream(), torch.cuda.Event()
    parts = {"torch.cuda.is_initialized()": torch.cuda.is_initialized, "torch.cuda.is_current_stream_capturing()": torch.cuda.is_current_stream_capturing,
             "torch.cuda.current_stream()": torch.cuda.current_stream, "nvtx.mark(...)": lambda: nvtx.mark(message="tracerecon.stream", domain="tracerecon"),
             "event.record(stream)": lambda: event.record(stream),
             "the cached stream and event (instrument._current_stream_and_event)": lambda: instrument._current_stream_and_event(torch)}
    for name, call in parts.items():
        t = time.perf_counter()
        for _ in range(n // 10):
            call()
        print(f"  {name}: {(time.perf_counter() - t) / (n // 10) * 1e9:.0f} ns")
    torch.cuda.synchronize()
    for on in (True, False):
        ts = sorted(runs[on])
        print(f"{n} phase ranges, stream declared {'on ' if on else 'off'}: median {ts[2] * 1e9:.0f} ns each (runs {', '.join(f'{t * 1e9:.0f}' for t in ts)})")


if __name__ == "__main__":
    main()
