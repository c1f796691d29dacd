"""The projection (``analysis.projection.project``) of one export, this checkout's against an
older tree's, alternating in one process on the same tables: median wall time of each.

    python benchmarks/bench_project.py TRACE.sqlite OLD_TREE [ROUNDS] [PAIRS_PER_CHUNKxTHREADS ...]

Each PAIRS_PER_CHUNKxTHREADS (e.g. 500000x8) adds this checkout's code with those settings to
the alternation. OLD_TREE holds an older ``tracerecon`` package (``git archive <commit> tracerecon | tar -x -C
OLD_TREE``); its ``analysis/projection.py`` is loaded under another name beside this one.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TRACERECON_NO_CACHE"] = "1"


def main() -> None:
    trace, old_tree = Path(sys.argv[1]), Path(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    from tracerecon import pipeline
    from tracerecon.cores import usable_cores
    from tracerecon.analysis import projection
    from tracerecon.analysis.ranges import nest

    spec = importlib.util.spec_from_file_location("old_projection", old_tree / "tracerecon" / "analysis" / "projection.py")
    old = importlib.util.module_from_spec(spec)
    sys.modules["old_projection"] = old  # (its dataclasses look their module up)
    spec.loader.exec_module(old)
    tables = pipeline._read_tables(trace)
    tables, ops, _, _ = pipeline._link(trace, tables)
    nested = nest(tables.nvtx_ranges)
    index = projection.index_launches(ops)
    same = old.project(nested, ops, index).equals(projection.project(nested, ops, index))
    default = (projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS)
    variants = [("old", old, default), ("new", projection, default)]
    for v in sys.argv[4:]:
        chunk, threads = (int(x) for x in v.split("x"))
        variants.append((f"new {v}", projection, (chunk, threads)))
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for i in range(rounds):
        for name, mod, (chunk, threads) in (variants if i % 2 == 0 else variants[::-1]):
            projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS = chunk, threads
            t = time.perf_counter()
            mod.project(nested, ops, index)
            times[name].append(time.perf_counter() - t)
    projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS = default
    print(f"project, {trace.name}: {ops.num_rows} ops, {nested.num_rows} ranges, same table: {same}; "
          + ", ".join(f"{k} median {statistics.median(v):.4f} s (min {min(v):.4f})" for k, v in times.items()) + f", {rounds} rounds, {usable_cores()} cores")


if __name__ == "__main__":
    main()
