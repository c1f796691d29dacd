#!/usr/bin/env bash
# Recipe: how the two bulk reads of a cold `report` scale with their connections on the H200 host
# (benchmarks/read_scaling.py), then where one cold report spends its time from the process start
# (benchmarks/stage_timeline.py --as-imported). Output: $OUT/read_scaling.txt. Carry .devcarry
# (site.tar.xz, big_launch.sqlite.xz, nsys-env.sh: see launch/h200_ab_now.sh).
#   [ROUNDS=3] [THREADS=1,2,4,7,14] bash launch/h200_read_scaling.sh
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
python3 -m compileall -q -j 0 tracerecon /tmp/site > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
{
  echo "== read scaling $(date -u +%FT%TZ) $(git log -1 --format=%h 2>/dev/null)"
  lscpu | grep -E "^(CPU\(s\)|Model name|Thread|Core|Socket)" | tr -s ' ' | paste -sd';'
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
  python3 -P benchmarks/read_scaling.py $W/rank0.sqlite "${ROUNDS:-3}" "${THREADS:-1,2,4,7,14}"
  echo "== stages from the process start"
  for i in 1 2 3; do python3 -P benchmarks/stage_timeline.py --as-imported $W/rank0.sqlite | grep -v "_parts\|open_readonly\|innermost_owner\|index_launches"; done
  for i in 1 2 3; do /usr/bin/time -f "cold report %e s wall %U user %S sys %M KB %R minor faults" python3 -P -m tracerecon report $W/rank0.sqlite > /dev/null; done
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee -a $OUT/read_scaling.txt
rm -rf $W
