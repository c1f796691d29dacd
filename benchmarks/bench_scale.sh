#!/usr/bin/env bash
# Issue 11 in one run: cold `report`/`export` of the 76 MB trace beside `nsys stats -r
# nvtx_gpu_proj_trace` (alternating), the same with the sqlite3 reader, warm (cached) `report`
# beside the bare interpreter, the TUI's first screen from the cache, and 8 ranks in worker
# processes. Wall time and peak RSS of the largest process. Usage (repo root; nsys on PATH if
# available; tracerecon importable by python3):
#   bash benchmarks/bench_scale.sh big_launch.sqlite.xz [ROUNDS]
set -u
SRC=$1
ROUNDS=${2:-3}
W=$(mktemp -d); trap 'rm -rf $W' EXIT
xz -dc "$SRC" > $W/rank0.sqlite
for r in 1 2 3 4 5 6 7; do cp $W/rank0.sqlite $W/rank$r.sqlite; done
echo "cores $(nproc)  $(python3 -V 2>&1)  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
t() { local label=$1; shift; python3 benchmarks/timed.py "$label" -- "$@"; }
for i in $(seq $ROUNDS); do
  TRACERECON_NO_CACHE=1 t "cold report, 1 rank" python3 -m tracerecon report $W/rank0.sqlite
  if command -v nsys > /dev/null; then
    t "nsys stats nvtx_gpu_proj_trace, 1 rank" nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite
  fi
  TRACERECON_NO_CACHE=1 t "cold export, 1 rank" python3 -m tracerecon export $W/rank0.sqlite -o $W/exp --force
  TRACERECON_NO_CACHE=1 TRACERECON_READER=sqlite3 t "cold report, 1 rank, sqlite3 reader" python3 -m tracerecon report $W/rank0.sqlite
done
export TRACERECON_CACHE_DIR=$W/cache
python3 -m tracerecon report $W/rank0.sqlite > /dev/null
for i in $(seq $ROUNDS); do
  t "warm report, 1 rank" python3 -m tracerecon report $W/rank0.sqlite
  t "interpreter + pyarrow, numpy, rich imports" python3 -c "import pyarrow, pyarrow.compute, numpy, rich.console"
  t "bare interpreter" python3 -c pass
done
if python3 -c "import textual" 2> /dev/null; then
  (cd benchmarks && python3 bench_tui.py $W/rank0.sqlite | tr -d '\n' ; echo) 2>&1 | sed 's/^/TUI from cache: /'
fi
unset TRACERECON_CACHE_DIR
for i in 1 2; do
  TRACERECON_NO_CACHE=1 t "cold report, 8 ranks, default jobs" python3 -m tracerecon report $W/rank{0..7}.sqlite
done
