#!/usr/bin/env bash
# Recipe: TensorRT-LLM's overlap loop in miniature (launch/trtllm_overlap_probe.py) under
# `tracerecon run --scrub`, with CUDA-event ground truth, in four shapes: CPU-bound, steps short
# and long by turns, GPU-bound, a heavy sampler with long CPU phases. Writes the scrubbed exports
# and ground truth to $OUT/trtllm_runs.tar.xz. Carry .devcarry (site.tar.xz and site2.tar.xz as in
# launch/h200_overlap_batch.sh). Usage (GPU machine, repo root): bash launch/h200_trtllm_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site && tar xJf .devcarry/site2.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=/tmp/trtllm_runs; rm -rf $D; mkdir -p $D
run() {  # name, then the probe's options
  local name=$1; shift
  echo "=== $name: $*"; local s=$SECONDS
  timeout 150 python3 -m tracerecon run --scrub -o $D/$name -- python3 launch/trtllm_overlap_probe.py --gt $D/$name.gt.jsonl "$@" > $D/$name.report.txt 2> $D/$name.stderr.txt
  echo "exit $? in $((SECONDS - s)) s"; head -c 1500 $D/$name.report.txt; tail -3 $D/$name.stderr.txt
}
run cpu_bound --fwd 2 --sample-mm 1 --jitter --seed 1
run by_turns --fwd 1,10 --sample-mm 1 --jitter --seed 2
run gpu_bound --fwd 12 --sample-mm 1 --jitter --seed 3
run heavy_sampler --fwd 1 --sample-mm 3 --schedule-ms 0.1,0.6 --prepare-ms 0.1,0.5 --jitter --seed 4
find $D -name '*.nsys-rep' -delete
tar -C /tmp -cJf $OUT/trtllm_runs.tar.xz trtllm_runs
ls -la $OUT
