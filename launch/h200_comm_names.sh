#!/usr/bin/env bash
# Recipe: launch/comm_names_probe.cu built with the machine's nvcc and run under the nsys bundled there (2025.3.2 on 2026-12-02)
# on the lent H200, exported to SQLite beside its CUDA-event ground truth (one JSON line per
# cycle), all in $OUT/comm_names.tar.xz (scrub with `tracerecon scrub` before committing); then
# what nsys's own kernel table says of the kernels' names, and tracerecon's report of it.
# Usage (GPU machine, repo root, carry .devcarry): [CYCLES=30] bash launch/h200_comm_names.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
D=/tmp/comm_names; rm -rf $D; mkdir -p $D
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
$NVCC --version | tail -2
$NVCC -O2 -arch=sm_90 -o $D/probe launch/comm_names_probe.cu -ldl || exit 1
nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o $D/deepep_names -f true $D/probe ${CYCLES:-30} $D/deepep_names.gt.jsonl > $D/profile.log 2>&1
echo "profile exit $?"; head -2 $D/deepep_names.gt.jsonl
nsys export --type sqlite -o $D/deepep_names.sqlite -f true $D/deepep_names.nsys-rep > /dev/null 2>&1; echo "export exit $?"
rm -f $D/deepep_names.nsys-rep $D/probe
python3 - $D/deepep_names.sqlite <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for row in c.execute("select distinct s.value, d.value from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName join StringIds d on d.id = k.demangledName"):
    print(row)
PY
tar -C /tmp -cJf $OUT/comm_names.tar.xz comm_names
if [ -f .devcarry/site.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site
  PYTHONPATH=/tmp/site:$PWD TRACERECON_NO_CACHE=1 python3 -m tracerecon report $D/deepep_names.sqlite
fi
ls -la $OUT
