"""Many ranks on a Dask distributed cluster against worker processes of this machine, same run.

    python benchmarks/bench_dask.py TRACE.sqlite[.xz] --ranks 64 --workers 16

The trace is hard-linked as rank0..rankN-1 of one run (synthetic ranks: same bytes, distinct
paths, so nothing is shared through the cache, which is off). Measured: wall time of
``api.load`` on a ``LocalCluster`` (one thread per worker process) and with ``--jobs`` worker
processes, the peak RSS of every Dask worker and of this (client) process, and whether both
give the same report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRACERECON_NO_CACHE"] = "1"  # before the workers start: they inherit it

from bench_export import trace_path  # noqa: E402

from tracerecon import api  # noqa: E402
from tracerecon.present import report_json  # noqa: E402


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    src = trace_path(args.trace)
    work = Path(__file__).resolve().parent / "_work"
    work.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        files = []
        for r in range(args.ranks):
            f = Path(tmp) / f"rank{r}.sqlite"
            try:
                os.link(src, f)
            except OSError:  # another file system: a copy
                shutil.copyfile(src, f)
            files.append(f)
        out: dict = {"ranks": args.ranks, "workers": args.workers, "cores": os.cpu_count(), "trace_mb": round(src.stat().st_size / 1e6)}
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=0) as cluster, Client(cluster) as client:
            t = time.perf_counter()
            on_dask = api.load(files, scheduler=cluster.scheduler_address)
            out["dask_wall_s"] = round(time.perf_counter() - t, 2)
            rss = client.run(peak_rss_mb)
            out["dask_worker_peak_rss_mb"] = {"max": max(rss.values()), "min": min(rss.values())}
        out["client_peak_rss_mb_after_dask"] = peak_rss_mb()
        t = time.perf_counter()
        local = api.load(files, jobs=args.workers)
        out["local_processes_wall_s"] = round(time.perf_counter() - t, 2)
        out["same_report"] = report_json(local) == report_json(on_dask)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
