#!/usr/bin/env bash
# Recipe: a cold `report` of the 76 MB trace (1 and 8 ranks) on the H200 host, this checkout
# against BASE (an older `tracerecon` package tree, default .devcarry/base) and `nsys stats`,
# and under other GIL settings (benchmarks/with_gil_settings.py: a 1 ms switch interval, no
# import-ahead threads); then the interpreter's start and exit around one report
# (benchmarks/outside_the_report.py) and an 8-rank stage timeline. Output: $OUT/gil_and_exit.txt.
# Carry .devcarry (site.tar.xz, nsys-env.sh, big_launch.sqlite.xz: see launch/h200_ab_now.sh).
#   [BASE=.devcarry/base] [N1=10] [N8=8] bash launch/h200_gil_and_exit.sh
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
source .devcarry/nsys-env.sh > /dev/null
BASE=${BASE:-.devcarry/base}
python3 -m compileall -q -j 0 tracerecon /tmp/site $BASE benchmarks > /dev/null 2>&1
W=$(mktemp -d); xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
for r in $(seq 1 7); do cp $W/rank0.sqlite $W/rank$r.sqlite; done
R1=$W/rank0.sqlite; R8="$(echo $W/rank{0..7}.sqlite)"; B=PYTHONPATH=/tmp/site:$PWD/$BASE; X="python3 -P benchmarks/with_gil_settings.py"
python3 -m tracerecon report $R8 > /dev/null 2>&1; nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $R1 > /dev/null 2>&1
{ echo "== $(date -u +%FT%TZ) $(nproc) cpus $(git log -1 --format=%h 2>/dev/null)"
python3 benchmarks/ab_env.py ${N1:-10} "head||python3 -P -m tracerecon report $R1" "base|$B|python3 -P -m tracerecon report $R1" "si1ms||$X 0.001 1 report $R1" "noahead||$X 0 0 report $R1" "nsys||nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $R1"
python3 benchmarks/ab_env.py ${N8:-8} "head8||python3 -P -m tracerecon report $R8" "base8|$B|python3 -P -m tracerecon report $R8" "si1ms8||$X 0.001 1 report $R8"
for i in 1 2 3; do /usr/bin/time -f "python3 -c pass %e s" python3 -c pass; /usr/bin/time -f "tracerecon --version %e s" python3 -P -m tracerecon --version > /dev/null; done
python3 benchmarks/outside_the_report.py 5 $R1
python3 -P benchmarks/stage_timeline.py --as-imported $R8 | grep -v "ThreadPool\|_int64\|_execute_all\|_parts\|open_readonly\|innermost\|index_launches\|fetch_int"
echo "== $(date -u +%FT%TZ)"; } 2>&1 | grep -v warning > $OUT/gil_and_exit.txt
head -12 $OUT/gil_and_exit.txt
rm -rf $W
