#!/usr/bin/env bash
# Recipe: where a cold one-rank `report` of the 76 MB trace spends its time on the H200 host:
# benchmarks/stage_timeline.py (stages per thread), the import times, and (PYSPY=path) a py-spy
# profile of all threads. Then, with BASE=DIR, the alternating A/B of h200_ab_batch.sh.
# Output: $OUT/stages.txt (+ $OUT/pyspy.json). Carry .devcarry and .whl.
#   [BASE=.devcarry/base] [PYSPY=.devcarry/py-spy] [SWEEP=1] bash launch/h200_stage_batch.sh
# With BASE: benchmarks/bench_project.py (and on a 1 GiB export with WITH_BIG=1), then the A/B.
# RANKS8=1 adds the stages of an 8-rank report (8 copies). SWEEP=1 alternates reader-thread counts per table (TRACERECON_READ_THREADS).
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl .whl/scale/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 tracerecon /tmp/site > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
{
  echo "== stage batch $(date -u +%FT%TZ)"
  lscpu | grep -E "^(CPU\(s\)|Model name)" | tr -s ' ' | paste -sd';'
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
  for i in 1 2; do python3 -P benchmarks/stage_timeline.py $W/rank0.sqlite; done
  echo "== stages from the process start (imports where the report makes them)"
  for i in 1 2 3; do python3 -P benchmarks/stage_timeline.py --as-imported $W/rank0.sqlite; done
  if [ "${RANKS8:-0}" = 1 ]; then
    echo "== 8 ranks (copies), stages of the main process and the workers"
    for r in 1 2 3 4 5 6 7; do cp $W/rank0.sqlite $W/rank$r.sqlite; done
    for i in 1 2; do python3 -P benchmarks/stage_timeline.py --as-imported $W/rank{0..7}.sqlite | grep -v "_query\|open_readonly\|fetch_int\|innermost_owner\|index_launches\|read_info\|read_strings"; done
    rm -f $W/rank[1-7].sqlite
  fi
  echo "== imports (cumulative us, top level)"
  TRACERECON_NO_CACHE=1 python3 -P -X importtime -m tracerecon report $W/rank0.sqlite 2>&1 >/dev/null | awk -F'|' '{n=match($3,/[^ ]/); if (n<=3) print}' | sort -t'|' -k2 -n | tail -12
  for i in 1 2 3; do /usr/bin/time -f "cold report %e s wall %U user %S sys %M KB" env TRACERECON_NO_CACHE=1 python3 -P -m tracerecon report $W/rank0.sqlite > /dev/null; done
  if [ -n "${PYSPY:-}" ]; then
    TRACERECON_NO_CACHE=1 $PYSPY record -r 2000 --threads -f speedscope -o $OUT/pyspy.json -- python3 -P -m tracerecon report $W/rank0.sqlite > /dev/null 2>$OUT/pyspy.err || echo "py-spy failed: $(tail -2 $OUT/pyspy.err)"
  fi
  if [ -n "${BASE:-}" ]; then
    echo "== projection, this code against BASE's, and chunk x thread settings (benchmarks/bench_project.py)"
    python3 -P benchmarks/bench_project.py $W/rank0.sqlite $BASE 9 100000x4 250000x8 1000000x4 1000000000x1
    if [ "${WITH_BIG:-0}" = 1 ]; then
      python3 benchmarks/make_big_export.py $W/rank0.sqlite $W/big.sqlite --size-gb 1 | tail -1
      python3 -P benchmarks/bench_project.py $W/big.sqlite $BASE 3 100000x4 1000000x4 1000000000x1
      rm -f $W/big.sqlite
    fi
  fi
  if [ "${SWEEP:-0}" = 1 ]; then
    echo "== reader threads per table (TRACERECON_READ_THREADS), 1 rank"
    V=(); for t in 4 6 8 12 16; do V+=("threads-$t|TRACERECON_READ_THREADS=$t|python3 -P -m tracerecon report $W/rank0.sqlite"); done
    python3 benchmarks/ab_env.py "${ROUNDS:-5}" "${V[@]}"
  fi
} 2>&1 | tee $OUT/stages.txt
rm -rf $W
if [ -n "${BASE:-}" ]; then ROUNDS=${ROUNDS:-5} ROUNDS8=${ROUNDS8:-3} BASE=$BASE bash launch/h200_ab_batch.sh; fi
