#!/usr/bin/env bash
# Recipe: the stages of a cold one-rank `report` of the 76 MB trace (benchmarks/stage_timeline.py
# --as-imported), this code and BASE (an older copy of the package) alternating, N rounds; the
# median of each stage's duration per variant, side by side. Output: $OUT/stage_ab.txt.
# Usage (GPU machine, repo root, carry .devcarry): BASE=.devcarry/base [N=6] bash launch/h200_stage_ab.sh
set -u
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site
export PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
PYTHONPATH=/tmp/site python3 -m compileall -q -j 0 tracerecon /tmp/site $BASE > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
PYTHONPATH=/tmp/site:$PWD python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
for i in $(seq 1 ${N:-6}); do
  for v in new base; do
    P=$PWD; [ $v = base ] && P=$PWD/$BASE
    PYTHONPATH=/tmp/site:$P:$PWD/benchmarks python3 -P benchmarks/stage_timeline.py --as-imported $W/rank0.sqlite 2>&1 | awk -v v=$v '{print v, $0}' >> $W/stages.txt
  done
done
python3 - $W/stages.txt <<'PY' | tee $OUT/stage_ab.txt
import collections, statistics, sys
d, total = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 4 and p[1].lower() == "from":
        total[p[0]].append(float(p[-2]))
    elif len(p) >= 5:
        try:
            d[(p[0], p[-1], p[4])].append(float(p[3]))
        except ValueError:
            pass
print("whole report from process start: " + ", ".join(f"{v} {statistics.median(t):.3f} s" for v, t in total.items()))
keys = sorted({(k[1], k[2]) for k in d})
for stage, thread in keys:
    a, b = d.get(("new", stage, thread), []), d.get(("base", stage, thread), [])
    if a and b and max(statistics.median(a), statistics.median(b)) >= 0.005:
        print(f"{stage:28s} {thread:28s} new {statistics.median(a):.3f} base {statistics.median(b):.3f} ({statistics.median(a) - statistics.median(b):+.3f})")
PY
rm -rf $W
