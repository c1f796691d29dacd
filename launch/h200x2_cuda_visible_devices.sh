#!/usr/bin/env bash
# Recipe: what nsys records for a process given its GPUs by CUDA_VISIBLE_DEVICES (nvidia-h200-x2
# or larger): a kernel's deviceId (the process's CUDA device, or the machine's GPU?), the
# export's TARGET_INFO_CUDA_DEVICE (pid, cudaId, gpuId) and TARGET_INFO_GPU rows, beside
# nvidia-smi's list, and what `tracerecon report --json` says each rank ran on. Settles the
# reading tests/test_cuda_visible_devices.py builds on (no renumbered real export here yet).
# Usage (on the GPU machine, repo root, with .devcarry as in launch/h200x2_batch.sh):
#   bash launch/h200x2_cuda_visible_devices.sh      -> $OUT/cvd_probe.txt, $OUT/cvd_*.sqlite.xz
set -u
source .devcarry/nsys-env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
NG=$(python3 -c 'import torch; print(torch.cuda.device_count())'); echo "gpus $NG"
[ "$NG" -ge 2 ] || { echo "needs two GPUs"; exit 2; }
D=/tmp/cvd; rm -rf $D; mkdir -p $D
cat > $D/prog.py <<'EOF'
import sys, torch, nvtx
for cycle in range(3):
    with nvtx.annotate(f"cycle {cycle}"):
        for dev in range(torch.cuda.device_count()):
            with nvtx.annotate("verify"):
                x = torch.ones(1 << 20, device=f"cuda:{dev}")
                (x * 2).sum().item()
EOF
probe() {  # name, CUDA_VISIBLE_DEVICES
  local name=$1 cvd=$2
  CUDA_VISIBLE_DEVICES=$cvd nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o $D/$name -f true python3 $D/prog.py > /dev/null 2>&1
  nsys export --type sqlite -o $D/$name.sqlite $D/$name.nsys-rep > /dev/null 2>&1
  echo "=== $name: CUDA_VISIBLE_DEVICES=$cvd"
  python3 - $D/$name.sqlite <<'EOF'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print("kernels by deviceId:", c.execute("select deviceId, count(*) from CUPTI_ACTIVITY_KIND_KERNEL group by deviceId").fetchall())
print("TARGET_INFO_CUDA_DEVICE (pid, cudaId, gpuId):", c.execute("select pid, cudaId, gpuId from TARGET_INFO_CUDA_DEVICE").fetchall())
cols = [r[1] for r in c.execute("pragma table_info(TARGET_INFO_GPU)")]
want = [k for k in ("id", "cuDevice", "uuid", "busLocation") if k in cols]
print("TARGET_INFO_GPU", want, c.execute(f"select {', '.join(want)} from TARGET_INFO_GPU").fetchall())
EOF
  python3 -m tracerecon report $D/$name.sqlite --json --no-cache 2>/dev/null | python3 -c 'import json,sys; print("tracerecon gpus:", [r["gpus"] for r in json.load(sys.stdin)["ranks"]])'
  python3 -m tracerecon scrub $D/$name.sqlite -o $D/cvd_$name.sqlite.xz > /dev/null
}
{
  nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv
  probe one_gpu_1 1
  probe swapped 1,0
  probe both 0,1
} | tee $OUT/cvd_probe.txt
cp $D/cvd_*.sqlite.xz $OUT/
