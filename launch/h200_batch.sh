#!/usr/bin/env bash
# Recipe: the demo engine under `tracerecon run` on one H200 (see ../shared/device/README.md).
# Writes scrubbed SQLite exports, CUDA-event ground truth and the reports to $OUT/h200_runs.tar.xz.
# Usage (on the GPU machine, repo root): bash launch/h200_batch.sh [CYCLES]
set -u
CYCLES=${1:-30}
source .devcarry/nsys-env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
D=/tmp/h200_runs; rm -rf $D; mkdir -p $D
TR="python3 -m tracerecon"
run() {  # name, then the command after --
  local name=$1; shift
  echo "=== $name: $*"
  local s=$SECONDS
  $TR run --scrub -o $D/$name -- "$@" > $D/$name.report.txt 2> $D/$name.stderr.txt
  echo "exit $? in $((SECONDS - s)) s"
  cat $D/$name.report.txt; tail -5 $D/$name.stderr.txt
}
E="launch/eagle_demo.py"
run gpu_bound      python3 $E --preset gpu-bound --cycles $CYCLES --gt $D/gpu_bound.gt.jsonl
run launch_bound   python3 $E --preset launch-bound --cycles $CYCLES --gt $D/launch_bound.gt.jsonl
run verify_graph   python3 $E --preset launch-bound --verify-graph --cycles $CYCLES --gt $D/verify_graph.gt.jsonl
run tp2_gloo       python3 -m torch.distributed.run --nproc_per_node=2 $E --preset launch-bound --cycles $CYCLES --gt "$D/tp2_gloo.gt.r{rank}.jsonl"
run tp2_skew       python3 -m torch.distributed.run --nproc_per_node=2 $E --preset launch-bound --cycles $CYCLES --skew-rank 1 --skew-us 3000 --gt "$D/tp2_skew.gt.r{rank}.jsonl"
run exit3          python3 $E --preset launch-bound --cycles 3 --exit-code 3
# keep what tests need: exports, ground truth, run.json, reports (not the .nsys-rep files)
find $D -name '*.nsys-rep' -delete
tar -C /tmp -cJf $OUT/h200_runs.tar.xz h200_runs
ls -la $OUT
