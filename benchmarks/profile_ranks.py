"""Where the main process of a multi-rank cold ``report`` spends its time: a cProfile of
``api.report`` over N copies of one export (rank0..rankN-1), cache off. Worker processes are not
profiled; their share shows as the wait in ``_file_work_here``.

    python benchmarks/profile_ranks.py TRACE.sqlite[.xz] [N]
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["TRACERECON_NO_CACHE"] = "1"
from tracerecon.own_process import prepare  # noqa: E402

prepare("report")  # as `tracerecon report` does, before numpy is imported

from bench_export import trace_path  # noqa: E402

from tracerecon import api  # noqa: E402


def main() -> None:
    src = trace_path(sys.argv[1] if len(sys.argv) > 1 else None)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for r in range(n):
            f = Path(tmp) / f"rank{r}.sqlite"
            shutil.copyfile(src, f)
            files.append(str(f))
        t = time.perf_counter()
        prof = cProfile.Profile()
        prof.enable()
        api.report(files)
        prof.disable()
        print(f"{n} ranks: api.report {time.perf_counter() - t:.2f} s")
        stats = pstats.Stats(prof)
        stats.sort_stats(os.environ.get("SORT", "cumulative")).print_stats(os.environ.get("FILTER", "tracerecon|pickle|concurrent"), int(os.environ.get("TOP", "25")))


if __name__ == "__main__":
    main()
