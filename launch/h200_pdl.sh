#!/usr/bin/env bash
# Recipe: launch/pdl_probe.cu (programmatic dependent launch) built with the machine's nvcc and
# run under the nsys bundled there, in both modes ("events": an event at every phase boundary;
# "cycle": events around the cycle only), each exported to SQLite beside its CUDA-event ground
# truth (one JSON line per cycle) and nsys's own projection (`nsys stats -r nvtx_gpu_proj_trace`),
# all in $OUT/pdl.tar.xz (scrub with `tracerecon scrub` before committing); then how many kernels
# of one stream overlap in nsys's table, the launch calls' names, and tracerecon's report.
# Usage (GPU machine, repo root, carry .devcarry): [CYCLES=40] bash launch/h200_pdl.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
D=/tmp/pdl; rm -rf $D; mkdir -p $D
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
$NVCC --version | tail -1
$NVCC -O2 -arch=sm_90 -o $D/probe launch/pdl_probe.cu -ldl || exit 1
for mode in events cycle; do
  nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o $D/pdl_$mode -f true $D/probe ${CYCLES:-40} $mode $D/pdl_$mode.gt.jsonl > $D/profile_$mode.log 2>&1
  echo "$mode: profile exit $?"; head -2 $D/pdl_$mode.gt.jsonl
  nsys export --type sqlite -o $D/pdl_$mode.sqlite -f true $D/pdl_$mode.nsys-rep > /dev/null 2>&1; echo "export exit $?"
  nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $D/pdl_$mode $D/pdl_$mode.sqlite > /dev/null 2>&1; echo "stats exit $?"
  rm -f $D/pdl_$mode.nsys-rep
  python3 - $D/pdl_$mode.sqlite <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
k = c.execute("select start, end, streamId, correlationId from CUPTI_ACTIVITY_KIND_KERNEL order by start").fetchall()
print("kernels", len(k), "starting before the one before ends:", sum(1 for a, b in zip(k, k[1:]) if b[0] < a[1] and a[2] == b[2]))
print(c.execute("select s.value, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId group by s.value").fetchall())
PY
done
rm -f $D/probe
ls $D
tar -C /tmp -cJf $OUT/pdl.tar.xz pdl
if [ -f .devcarry/site.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site
  for mode in events cycle; do PYTHONPATH=/tmp/site:$PWD TRACERECON_NO_CACHE=1 COLUMNS=120 python3 -m tracerecon report $D/pdl_$mode.sqlite 2>&1 | head -30; done
fi
ls -la $OUT
