#!/usr/bin/env bash
# Recipe: stage timelines (benchmarks/stage_timeline.py --as-imported) of a cold `report` of the
# 76 MB trace on the H200 host, one rank (3 runs) and eight copies (2 runs: the main process's
# stages after its workers, and each worker's read, link and analysis). Output: $OUT/stages.txt.
# Carry .devcarry (site.tar.xz, nsys-env.sh, big_launch.sqlite.xz: see h200_ab_now.sh).
# Usage (GPU machine, repo root): [BASE=.devcarry/base] bash launch/h200_tail_stages.sh
# BASE: the same runs of an older copy of the package too, alternating with this one's.
[ -d /tmp/site/pyarrow ] || { mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 tracerecon /tmp/site ${BASE:-} > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
for r in $(seq 1 7); do cp $W/rank0.sqlite $W/rank$r.sqlite; done
{
  echo "== tail stages $(date -u +%FT%TZ) $(git log -1 --format=%h 2>/dev/null) $(nproc) CPUs"
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
  for f in $W/rank*.sqlite; do cat $f > /dev/null; done
  TREES="$PWD"; [ -n "${BASE:-}" ] && TREES="$PWD $PWD/$BASE"
  for i in 1 2 3; do
    for T in $TREES; do
      echo "-- one rank, run $i, $T"
      PYTHONPATH=/tmp/site:$T python3 -P benchmarks/stage_timeline.py --as-imported $W/rank0.sqlite | grep -E "process start|MainThread|start_ahead" | grep -v "innermost_owner\|index_launches\|_parts\|_execute_all\|read_info\|read_strings\|open_readonly"
    done
  done
  for i in 1 2; do
    for T in $TREES; do
      echo "-- eight ranks, run $i, $T"
      PYTHONPATH=/tmp/site:$T python3 -P benchmarks/stage_timeline.py --as-imported $W/rank{0..7}.sqlite | grep -E "process start|_file_work_here|_read_tables|read_export|_link|own_rank|handed_off|analyze_cross_rank|finish_rank|build_report|print_report|take"
    done
  done
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee -a $OUT/stages.txt
rm -rf $W
