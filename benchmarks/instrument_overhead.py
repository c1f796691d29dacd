"""Cost of `tracerecon.instrument.phase` with no profiler attached, against an empty loop.

    python benchmarks/instrument_overhead.py [N]
"""

from __future__ import annotations

import sys
import time

from tracerecon.instrument import cycle, phase


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    t = time.perf_counter()
    for _ in range(n):
        pass
    empty = time.perf_counter() - t
    t = time.perf_counter()
    with cycle(0):
        for _ in range(n):
            with phase("verify"):
                pass
    ranged = time.perf_counter() - t
    print(f"{n} phase ranges: {(ranged - empty) / n * 1e9:.0f} ns each (empty loop {empty / n * 1e9:.0f} ns per iteration)")


if __name__ == "__main__":
    main()
