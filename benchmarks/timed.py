"""Run one command and print its wall time and the peak RSS of its largest process, one line:

    python3 benchmarks/timed.py LABEL [--head N] -- CMD ARGS...

``--head N`` also prints the first N lines of the command's output. The shell benchmarks
(``bench_*.sh``, ``launch/h200_*_bench.sh``) all time their commands through this.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    label, rest = argv[0], argv[1:]
    head = 0
    if rest[:1] == ["--head"]:
        head, rest = int(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    t0 = time.perf_counter()
    rc = subprocess.run(rest, stdout=subprocess.PIPE if head else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    failed = f" {rc.stderr[-300:]}" if rc.returncode else ""
    print(f"{label}: {wall:.2f} s wall, {rss} MB peak RSS (largest process), exit {rc.returncode}{failed}", flush=True)
    if head:
        print("\n".join(rc.stdout.splitlines()[:head]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
