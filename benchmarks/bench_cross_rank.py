"""The cross-rank step on synthetic tensor-parallel runs: R ranks x C cycles x K collectives
per cycle (two NCCL kernel names, 3 phases per cycle, jittered starts), timed for the library
and, with ``--old``, for the per-row code it replaced (``tests/reference_cross_rank.py``).

    python benchmarks/bench_cross_rank.py R C K [--old]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from tracerecon.analysis.cross_rank import RankView, analyze_cross_rank


def synthetic_views(ranks: int, cycles: int, per_cycle: int, phases: int = 3, seed: int = 0) -> list[RankView]:
    rng = np.random.default_rng(seed)
    out = []
    names = ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_AllGather_RING_LL"]
    for r in range(ranks):
        n = cycles * per_cycle
        cyc = np.repeat(np.arange(cycles), per_cycle)
        k = np.tile(np.arange(per_cycle), cycles)
        start = cyc * 10_000_000 + k * 20_000 + rng.integers(0, 5_000, n)
        ops = pa.table({
            "kind": pa.array(["kernel"] * n).dictionary_encode(),
            "name": pa.array([names[i % 2] for i in range(per_cycle)] * cycles).dictionary_encode(),
            "start_ns": pa.array(start), "end_ns": pa.array(start + 10_000 + rng.integers(0, 3_000, n)),
            "phase_id": pa.array(cyc * phases + k * phases // per_cycle),
        })
        pcyc = np.repeat(np.arange(cycles), phases)
        table = pa.table({
            "cycle": pa.array(pcyc), "phase": pa.array(["draft", "verify", "draft_extend"][:phases] * cycles),
            "gpu_end_ns": pa.array(pcyc * 10_000_000 + 9_000_000), "cpu_end_ns": pa.array(pcyc * 10_000_000 + 9_500_000),
            "gpu_ns": pa.array(np.full(cycles * phases, 3_000_000)), "cpu_ns": pa.array(np.full(cycles * phases, 3_100_000)),
        })
        out.append(RankView(r, "one report", None, ops, table))
    return out


def main(argv: list[str]) -> int:
    ranks, cycles, per_cycle = (int(x) for x in argv[:3])
    views = synthetic_views(ranks, cycles, per_cycle)
    rows = ranks * cycles * per_cycle
    t = time.perf_counter()
    analyze_cross_rank(views)
    took = time.perf_counter() - t
    print(f"{ranks} ranks x {cycles} cycles x {per_cycle} collectives = {rows:,} rows: {took:.2f} s ({took / rows * 1e6:.2f} us a row)")
    if "--old" in argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import reference_cross_rank as old

        t = time.perf_counter()
        old.analyze_cross_rank(views)
        took = time.perf_counter() - t
        print(f"  the per-row code it replaced: {took:.2f} s ({took / rows * 1e6:.2f} us a row)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
