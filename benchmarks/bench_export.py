"""Time `tracerecon export` of the large trace against the raw floor, in the same run.

Floor: reading the columns the analysis needs with Python's sqlite3 into lists (fetchall):
kernels (start, end, correlationId, streamId, deviceId, shortName, globalPid), runtime calls
(start, end, correlationId, globalTid, nameId), NVTX (start, end, globalTid, eventType, text, textId).
Each side runs in a fresh subprocess (cold Python, warm page cache), alternating, N times;
peak RSS is the child's ru_maxrss. Both clocks start after the modules are imported (the floor's
`sqlite3`; tracerecon's pyarrow and numpy); the time with tracerecon's imports is reported too.

    python benchmarks/bench_export.py [TRACE.sqlite|.xz] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "traces" / "big" / "big_launch.sqlite.xz"

FLOOR = r"""
import resource, sqlite3, sys, time
t = time.perf_counter()
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
k = c.execute("select start, end, correlationId, streamId, deviceId, shortName, globalPid from CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
r = c.execute("select start, end, correlationId, globalTid, nameId from CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
n = c.execute("select start, end, globalTid, eventType, text, textId from NVTX_EVENTS").fetchall()
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(k), len(r), len(n))
"""

TOOL = r"""
import resource, sys, time
t_imports = time.perf_counter()
from tracerecon.own_process import prepare
prepare("export")  # as the CLI does, before numpy is imported
from tracerecon.api import export as export_parquet, load as analyze
import tracerecon.pipeline, tracerecon.export  # noqa: F401  (tracerecon's modules, imported before the clock as before)
import pyarrow.parquet, pyarrow.compute  # what the run below would import on first use
t = time.perf_counter()
a = analyze([sys.argv[1]])
t_analyzed = time.perf_counter()
export_parquet(a, sys.argv[2])
end = time.perf_counter()
print(end - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, sum(r.gpu_ops.num_rows for r in a.ranks), sum(r.ranges.num_rows for r in a.ranks), sum(r.phases.num_rows for r in a.ranks), end - t_imports, t_analyzed - t)
"""


def trace_path(arg: str | None) -> Path:
    p = Path(arg) if arg else DEFAULT
    if p.suffix == ".xz":
        out = HERE / "_work" / p.name[:-3]
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(p) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return out
    return p


def run(code: str, *args: str) -> list[float]:
    # Cold means cold: tracerecon's analysis cache is off (a warm report is measured apart).
    env = dict(os.environ, TRACERECON_NO_CACHE="1")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    return [float(x) for x in res.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = trace_path(args.trace)
    floors, tools = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            floors.append(run(FLOOR, str(trace)))
            tools.append(run(TOOL, str(trace), os.path.join(tmp, f"out{i}")))
    f_s = statistics.median(x[0] for x in floors)
    t_s = statistics.median(x[0] for x in tools)
    t_all = statistics.median(x[5] for x in tools)
    t_an = statistics.median(x[6] for x in tools)
    result = {
        "trace": trace.name,
        "size_mb": round(trace.stat().st_size / 1e6, 1),
        "floor_s_median": round(f_s, 2),
        "tracerecon_export_s_median": round(t_s, 2),
        "ratio": round(t_s / f_s, 2),
        "import_and_reconstruction_s_median": round(t_an, 2),
        "ratio_import_and_reconstruction": round(t_an / f_s, 2),
        "tracerecon_with_module_imports_s_median": round(t_all, 2),
        "ratio_with_module_imports": round(t_all / f_s, 2),
        "floor_peak_rss_mb": round(max(x[1] for x in floors) / 1024),
        "tracerecon_peak_rss_mb": round(max(x[1] for x in tools) / 1024),
        "floor_runs_s": [round(x[0], 2) for x in floors],
        "tracerecon_runs_s": [round(x[0], 2) for x in tools],
        "gpu_ops": int(tools[0][2]), "ranges": int(tools[0][3]), "phases": int(tools[0][4]),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
