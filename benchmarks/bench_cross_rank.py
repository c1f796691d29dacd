"""The cross-rank step on synthetic tensor-parallel runs: R ranks x C cycles x K collectives
per cycle (two NCCL kernel names, 3 phases per cycle, jittered starts), timed for the library
and, with ``--old``, for the per-row code it replaced (``tests/reference_cross_rank.py``).
With ``--groups G`` the ranks are G communicators (rank r in group r mod G; the K collectives
spread over each 10 ms cycle, group g's a (g / G)-th of their spacing later), told apart by
their ends (``cross_rank.communicator_groups``).

    python benchmarks/bench_cross_rank.py R C K [--old] [--groups G]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from tracerecon.analysis.cross_rank import RankView, analyze_cross_rank


def synthetic_views(ranks: int, cycles: int, per_cycle: int, phases: int = 3, seed: int = 0, groups: int = 0) -> list[RankView]:
    rng = np.random.default_rng(seed)
    out = []
    names = ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_AllGather_RING_LL"]
    spacing = 10_000_000 // per_cycle if groups else 20_000
    for r in range(ranks):
        n = cycles * per_cycle
        cyc = np.repeat(np.arange(cycles), per_cycle)
        k = np.tile(np.arange(per_cycle), cycles)
        start = cyc * 10_000_000 + k * spacing + rng.integers(0, 5_000, n) + ((r % groups) * spacing // groups if groups else 0)
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
    groups = int(argv[argv.index("--groups") + 1]) if "--groups" in argv else 0
    views = synthetic_views(ranks, cycles, per_cycle, groups=groups)
    rows = ranks * cycles * per_cycle
    t = time.perf_counter()
    cross = analyze_cross_rank(views)
    took = time.perf_counter() - t
    told = any("communicators of these kernels" in w for w in cross.warnings)
    print(f"{ranks} ranks x {cycles} cycles x {per_cycle} collectives = {rows:,} rows: {took:.2f} s ({took / rows * 1e6:.2f} us a row)"
          + ((f"; told apart as {groups} communicators" if told else "; not told apart") if groups else ""))
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
