#!/usr/bin/env bash
# Recipe: issue 11's speed targets on the lent H200 host in one call (under 10 minutes):
# benchmarks/bench_scale.sh (cold report/export beside `nsys stats`, sqlite3 reader, warm
# report, TUI from cache, 8 ranks), the TUI's first screen three more times, and where one cold
# report and the main process of an 8-rank one spend their time (cProfile). WITH_THREADS=1 adds
# a sweep of reader threads; WITH_RANK_SWEEP=1 one of reader threads per worker for 8 ranks.
# Output: $OUT/speed.txt.
# With WITH_BIG=1 also benchmarks/bench_big.sh (1 GiB per rank, 64 ranks on Dask; 90 s more).
# Usage (on the GPU machine, repo root, carry .devcarry and .whl): [WITH_BIG=1] bash launch/h200_speed_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl .whl/scale/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# As an installed package is: its modules and its dependencies' compiled once (the image sets
# PYTHONDONTWRITEBYTECODE, which made every process compile tracerecon's sources again).
# KEEP_NO_BYTECODE=1 keeps the image's setting (how lendings before 2026-11-30 08:50 measured).
if [ "${KEEP_NO_BYTECODE:-0}" != 1 ]; then
  unset PYTHONDONTWRITEBYTECODE
  python3 -m compileall -q -j 0 tracerecon /tmp/site > /dev/null 2>&1
fi
t() { local label=$1; shift; python3 benchmarks/timed.py "$label" -- "$@"; }
{
  echo "== speed batch $(date -u +%FT%TZ) PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
  python3 -c "import tracerecon.nsys.native_read as n, pyarrow, numpy, importlib.util as u; print('native reads', n.available(), 'threads', n.read_threads(), 'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__, 'pandas installed', u.find_spec('pandas') is not None)"
  lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name)" | tr -s ' ' | paste -sd';'
  bash benchmarks/bench_scale.sh .devcarry/big_launch.sqlite.xz 3
  W=$(mktemp -d)
  xz -dc .devcarry/big_launch.sqlite.xz > $W/r.sqlite
  if [ "${WITH_RANK_SWEEP:-0}" = 1 ]; then
    echo "== 8 ranks, reader threads per worker"
    for r in 0 1 2 3 4 5 6 7; do cp $W/r.sqlite $W/rank$r.sqlite; done
    for th in 1 2 4; do
      for i in 1 2; do TRACERECON_NO_CACHE=1 TRACERECON_READ_THREADS=$th t "cold report, 8 ranks, $th reader threads each" python3 -m tracerecon report $W/rank{0..7}.sqlite; done
    done
  fi
  if [ "${WITH_THREADS:-0}" = 1 ]; then
    echo "== reader threads"
    for th in 2 4 8 16; do
      for i in 1 2; do TRACERECON_NO_CACHE=1 TRACERECON_READ_THREADS=$th t "cold report, $th reader threads" python3 -m tracerecon report $W/r.sqlite; done
    done
  fi
  echo "== 8 ranks, main process profiled"
  python3 benchmarks/profile_ranks.py $W/r.sqlite 8 2>&1 | grep -v "^$" | head -32
  echo "== TUI from cache, 3 more"
  export TRACERECON_CACHE_DIR=$W/cache
  python3 -m tracerecon report $W/r.sqlite > /dev/null
  for i in 1 2 3; do (cd benchmarks && python3 bench_tui.py $W/r.sqlite | tr -d '\n ' ; echo); done
  unset TRACERECON_CACHE_DIR
  echo "== cold report profile"
  TRACERECON_NO_CACHE=1 python3 -c "
import cProfile, pstats, sys, time
t0 = time.perf_counter()
from tracerecon.no_pandas import keep_pandas_out; keep_pandas_out()
from tracerecon.api import load
t1 = time.perf_counter()
pr = cProfile.Profile(); pr.enable(); load([sys.argv[1]]); pr.disable()
print('imports', round(t1 - t0, 3), 'load', round(time.perf_counter() - t1, 3))
pstats.Stats(pr).sort_stats('cumulative').print_stats('tracerecon', 30)" $W/r.sqlite 2>&1 | grep -v "^$" | head -45
  rm -rf $W
  if [ "${WITH_BIG:-0}" = 1 ]; then
    echo "== bench_big $(date -u +%FT%TZ)"
    bash benchmarks/bench_big.sh .devcarry/big_launch.sqlite.xz 1 64
  fi
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee $OUT/speed.txt
