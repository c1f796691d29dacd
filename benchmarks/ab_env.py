"""Interleaved A/B runs of one command under several environments: the median wall time, CPU
time (user + system, and the system part alone), peak RSS and minor page faults of each, from the child's own rusage.

    python3 benchmarks/ab_env.py N 'NAME|VAR=V,VAR=V|COMMAND ARGS' ['NAME|...|...' ...]

Each round runs every variant once, in alternating order, so that a machine that drifts (the
2-core one does, hour to hour) drifts under all of them alike. Analysis cache off in every run.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    n = int(argv[0])
    variants = []
    for spec in argv[1:]:
        name, envs, cmd = spec.split("|", 2)
        env = dict(os.environ, TRACERECON_NO_CACHE="1")
        for kv in filter(None, envs.split(",")):
            key, value = kv.split("=", 1)
            env[key] = value
        variants.append((name, env, shlex.split(cmd)))
    runs: dict[str, list[tuple[float, float, float, float, int]]] = {name: [] for name, _, _ in variants}
    for i in range(n):
        for name, env, cmd in variants if i % 2 == 0 else variants[::-1]:
            t = time.perf_counter()
            child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - t
            if status:
                print(f"{name}: exit status {status}", file=sys.stderr)
                return 1
            runs[name].append((wall, usage.ru_utime + usage.ru_stime, usage.ru_stime, usage.ru_maxrss / 1024, usage.ru_minflt))
    for name, rows in runs.items():
        wall, cpu, system, rss, faults = zip(*rows)
        print(f"{name}: wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f}), "
              f"CPU median {statistics.median(cpu):.3f} s (system {statistics.median(system):.3f} s), peak RSS median {statistics.median(rss):.0f} MB, "
              f"minor faults median {statistics.median(faults) / 1000:.0f}k, {len(rows)} runs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
