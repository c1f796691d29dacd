#!/usr/bin/env bash
# Recipe: the demo engine with real NCCL, one GPU per rank (nvidia-h200-x2 or larger), under `tracerecon run`.
# Writes scrubbed exports and CUDA-event ground truth to $OUT/h200x2_runs.tar.xz.
# Usage (on the GPU machine, repo root): bash launch/h200x2_batch.sh [CYCLES]
set -u
CYCLES=${1:-30}
source .devcarry/nsys-env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NG=$(python3 -c 'import torch; print(torch.cuda.device_count())'); echo "gpus $NG"
D=/tmp/h200x2_runs; rm -rf $D; mkdir -p $D
RUNS=${RUNS:-nccl_launch nccl_skew nccl_graph nccl_gpu_bound}
run() {
  local name=$1; shift
  case " $RUNS " in *" $name "*) ;; *) return ;; esac
  echo "=== $name: $*"; local s=$SECONDS
  timeout 150 python3 -m tracerecon run --scrub -o $D/$name -- "$@" > $D/$name.report.txt 2> $D/$name.stderr.txt
  echo "exit $? in $((SECONDS - s)) s"; cat $D/$name.report.txt; grep -v "nsys-rep\|^Collecting\|^Generat\|^\s/tmp" $D/$name.stderr.txt | tail -4
}
E="launch/eagle_demo.py"; TR="python3 -m torch.distributed.run --nproc_per_node=$NG"
run nccl_launch    $TR $E --preset launch-bound --cycles $CYCLES --gt "$D/nccl_launch.gt.r{rank}.jsonl"
run nccl_skew      $TR $E --preset launch-bound --cycles $CYCLES --skew-rank 1 --skew-us 3000 --gt "$D/nccl_skew.gt.r{rank}.jsonl"
run nccl_graph     $TR $E --preset launch-bound --verify-graph --cycles $CYCLES --gt "$D/nccl_graph.gt.r{rank}.jsonl"
run nccl_gpu_bound $TR $E --preset gpu-bound --cycles $CYCLES --gt "$D/nccl_gpu_bound.gt.r{rank}.jsonl"
find $D -name '*.nsys-rep' -delete
tar -C /tmp -cJf $OUT/h200x2_runs.tar.xz h200x2_runs
ls -la $OUT
