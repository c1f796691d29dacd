#!/usr/bin/env bash
# Ranks in parallel (issue 11): `tracerecon report` of 1 and of 8 copies of the 76 MB trace
# (as rank0..rank7 of one run), serial (--jobs 1) and in worker processes (default), beside
# `nsys stats -r nvtx_gpu_proj_trace` of one copy, in the same run. Wall time, and the peak RSS
# of the largest process (getrusage of the children). Usage (repo root, with the trace at $1, nsys on PATH if available):
#   bash benchmarks/bench_ranks.sh big_launch.sqlite.xz
set -u
SRC=$1
W=$(mktemp -d); trap 'rm -rf $W' EXIT
xz -dc "$SRC" > $W/rank0.sqlite
for r in 1 2 3 4 5 6 7; do cp $W/rank0.sqlite $W/rank$r.sqlite; done
echo "cores $(nproc)  python $(python3 -V 2>&1)"
t() { local label=$1; shift; python3 benchmarks/timed.py "$label" -- "$@"; }
for i in 1 2; do
  t "report, 1 rank" python3 -m tracerecon report $W/rank0.sqlite
  t "report, 8 ranks, --jobs 1" python3 -m tracerecon report --jobs 1 $W/rank{0..7}.sqlite
  t "report, 8 ranks, default jobs" python3 -m tracerecon report $W/rank{0..7}.sqlite
  if command -v nsys > /dev/null; then
    t "nsys stats nvtx_gpu_proj_trace, 1 rank" nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite
  fi
done
