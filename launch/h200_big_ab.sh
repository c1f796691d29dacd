#!/usr/bin/env bash
# Recipe: 1 GiB per rank (issue 11's "<= 20 s, <= 3 GB RSS"), this tree against BASE: a 1 GiB
# export made from the 76 MB one (benchmarks/make_big_export.py), then cold `report` of it with
# each tree in turn (ROUNDS rounds, alternating), wall time and peak RSS (benchmarks/timed.py).
# Output: $OUT/big_ab.txt. Carry .devcarry (site.tar.xz, big_launch.sqlite.xz: see h200_ab_now.sh).
# Usage (GPU machine, repo root): [BASE=.devcarry/base] [ROUNDS=3] bash launch/h200_big_ab.sh
[ -d /tmp/site/pyarrow ] || { mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site; }
unset PYTHONDONTWRITEBYTECODE
export PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
PYTHONPATH=/tmp/site python3 -m compileall -q -j 0 tracerecon /tmp/site ${BASE:-} > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/src.sqlite
{
  echo "== big ab $(date -u +%FT%TZ) $(nproc) CPUs"
  python3 benchmarks/make_big_export.py $W/src.sqlite $W/big.sqlite --size-gb 1 | tail -1
  rm $W/src.sqlite
  cat $W/big.sqlite > /dev/null  # page cache warm
  TREES="$PWD"; [ -n "${BASE:-}" ] && TREES="$PWD $PWD/$BASE"
  for i in $(seq 1 ${ROUNDS:-3}); do
    for T in $TREES; do
      PYTHONPATH=/tmp/site:$T python3 benchmarks/timed.py "cold report, 1 GiB, $(basename $T)" -- python3 -P -m tracerecon report $W/big.sqlite
    done
  done
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee -a $OUT/big_ab.txt
rm -rf $W
