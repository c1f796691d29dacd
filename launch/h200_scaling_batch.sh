#!/usr/bin/env bash
# Recipe: how far the H200 host lets 8 ranks come to one (issue 11's 1.5x target), beside the
# current numbers. Output: $OUT/scaling.txt.
#  1. the host's cores (SMT, clocks);
#  2. benchmarks/host_scaling.py: a pure-Python loop, a bare SQLite scan of the 76 MB trace's two
#     big tables, and a whole one-rank `tracerecon report`, each alone and as 8 (and 16) copies at once;
#  3. benchmarks/ab_env.py: cold `report` of 1 rank and of 8 ranks, and `nsys stats`, alternating.
# Usage (GPU machine, repo root, carry .devcarry and .whl):  [ROUNDS=8] bash launch/h200_scaling_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl .whl/scale/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
python3 -m compileall -q -j 0 tracerecon /tmp/site > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
for r in $(seq 1 15); do cp $W/rank0.sqlite $W/rank$r.sqlite; done
RANKS8="$(echo $W/rank{0..7}.sqlite)"
LOOP="python3 -c 's=0
for i in range(30_000_000): s+=i'"
SCAN="python3 -c \"import sqlite3; c=sqlite3.connect('file:$W/rank{i}.sqlite?mode=ro', uri=True); c.execute('select total(start), total(end), total(correlationId), total(nameId), total(globalTid) from CUPTI_ACTIVITY_KIND_RUNTIME').fetchall(); c.execute('select total(start), total(end), total(deviceId), total(streamId), total(correlationId), total(globalPid), total(contextId), total(shortName) from CUPTI_ACTIVITY_KIND_KERNEL').fetchall()\""
{
  echo "== scaling batch $(date -u +%FT%TZ) $(git log -1 --format=%h 2>/dev/null)"
  lscpu | grep -E "^(CPU\(s\)|Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|CPU max MHz|CPU min MHz|NUMA node\(s\))" | tr -s ' ' | paste -sd';'
  nproc; python3 -V
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
  for f in $W/rank*.sqlite; do cat $f > /dev/null; done
  echo "== the host: one job alone against copies at once"
  python3 benchmarks/host_scaling.py "${SROUNDS:-3}" 1,8,16 "python-loop|$LOOP" "sqlite-scan|$SCAN"
  python3 benchmarks/host_scaling.py "${SROUNDS:-3}" 1,8 "report-1-rank|python3 -P -m tracerecon report $W/rank{i}.sqlite"
  echo "== tracerecon and nsys stats"
  python3 benchmarks/ab_env.py "${ROUNDS:-8}" "report-1|PYTHONPATH=/tmp/site:$PWD|python3 -P -m tracerecon report $W/rank0.sqlite" \
    "report-8|PYTHONPATH=/tmp/site:$PWD|python3 -P -m tracerecon report $RANKS8" \
    "nsys-stats||nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite"
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee $OUT/scaling.txt
rm -rf $W
