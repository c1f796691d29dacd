"""How the host itself scales: the same single-threaded job run alone, then as K copies at once.

    python3 benchmarks/host_scaling.py ROUNDS K[,K...] 'NAME|COMMAND {i}' ['NAME|...' ...]

For each job and each K, every round starts K copies together (``{i}`` in the command becomes
the copy's number, 0..K-1, so copies can read files of their own) and records the batch's wall
time (until the last copy ends) and each copy's CPU time. The ratio of a K-copy batch to one copy
alone is what the hardware allows a K-rank run against a one-rank run when each rank's work
neither waits for nor shares anything with another: shared caches, memory bandwidth, the
all-core clock against the one-core turbo clock, and SMT siblings all show in it. Rounds
alternate the order of K values so a drifting machine drifts under all of them alike.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time


def batch(cmd: str, k: int) -> tuple[float, list[float]]:
    """Start k copies of ``cmd`` at once; (wall until the last ends, each copy's CPU seconds)."""
    t = time.perf_counter()
    children = [subprocess.Popen(shlex.split(cmd.replace("{i}", str(i))), stdout=subprocess.DEVNULL) for i in range(k)]
    cpu = []
    for child in children:
        _, status, usage = os.wait4(child.pid, 0)
        if status:
            raise SystemExit(f"{cmd!r}: exit status {status}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - t, cpu


def main(argv: list[str]) -> int:
    rounds, ks = int(argv[0]), [int(k) for k in argv[1].split(",")]
    for spec in argv[2:]:
        name, cmd = spec.split("|", 1)
        walls: dict[int, list[float]] = {k: [] for k in ks}
        cpus: dict[int, list[float]] = {k: [] for k in ks}
        for r in range(rounds):
            for k in ks if r % 2 == 0 else ks[::-1]:
                wall, cpu = batch(cmd, k)
                walls[k].append(wall)
                cpus[k].extend(cpu)
        alone = statistics.median(walls[ks[0]])
        for k in ks:
            w = statistics.median(walls[k])
            print(f"{name}: {k} at once: wall median {w:.3f} s (min {min(walls[k]):.3f}, max {max(walls[k]):.3f}), "
                  f"{w / alone:.2f}x {ks[0]} at once; CPU per copy median {statistics.median(cpus[k]):.3f} s, {rounds} rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
