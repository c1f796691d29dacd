#!/usr/bin/env bash
# Recipe: the engine shapes of issue 8 (CPU one cycle ahead, worker-thread launches, stragglers in
# several phases) under `tracerecon run --scrub`, with CUDA-event ground truth. Runs the
# single-GPU shapes on GPU 0 and, with two or more GPUs, the NCCL shapes on two.
# Writes the scrubbed exports, ground truth, nsys's own projection CSVs and the reports to
# $OUT/overlap_runs.tar.xz. Usage (GPU machine, repo root): bash launch/h200_overlap_batch.sh [CYCLES]
set -u
CYCLES=${1:-30}
source .devcarry/nsys-env.sh
# pyarrow, numpy, the ADBC driver and rich travel unpacked (see launch/h200_ab_now.sh), nvtx as a wheel.
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site || exit 1
# sqlite-utils (for --scrub) and its pure-Python dependencies, from a local virtualenv:
#   tar cf - -C SITE_PACKAGES sqlite_utils sqlite_fts4 click click_default_group.py tabulate dateutil pluggy | xz > .devcarry/site2.tar.xz
tar xJf .devcarry/site2.tar.xz -C /tmp/site || exit 1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NG=$(python3 -c 'import torch; print(torch.cuda.device_count())'); echo "gpus $NG"
D=/tmp/overlap_runs; rm -rf $D; mkdir -p $D
RUNS=${RUNS:-overlap_gpu_bound overlap_launch_bound worker_gpu_bound worker_launch_bound nccl_skew_phases nccl_overlap_skew}
run() {  # name, GPUs it needs, then the command after --
  local name=$1 need=$2; shift 2
  case " $RUNS " in *" $name "*) ;; *) return ;; esac
  [ "$NG" -ge "$need" ] || { echo "=== $name: skipped (needs $need GPUs)"; return; }
  echo "=== $name: $*"; local s=$SECONDS
  local graphs=()  # a *_graphtrace run: nsys's default graph records (one per launch), not node ones
  case $name in *_graphtrace) graphs=(--cuda-graph-trace graph) ;; esac
  timeout 180 python3 -m tracerecon run --scrub "${graphs[@]}" -o $D/$name -- "$@" > $D/$name.report.txt 2> $D/$name.stderr.txt
  echo "exit $? in $((SECONDS - s)) s"; head -c 3000 $D/$name.report.txt; grep -v "nsys-rep\|^Collecting\|^Generat\|^\s/tmp" $D/$name.stderr.txt | tail -4
  for db in $D/$name/*.sqlite; do  # nsys's own projection of the scrubbed export, for the ns-exact check
    [ -f "$db" ] && nsys stats -q -r nvtx_gpu_proj_trace -f csv -o "${db%.sqlite}" "$db" > /dev/null 2>&1
  done
}
E="launch/eagle_demo.py"; TR2="python3 -m torch.distributed.run --nproc_per_node=2"
G0="env CUDA_VISIBLE_DEVICES=0"
run overlap_gpu_bound    1 $G0 python3 $E --preset gpu-bound --overlap --cycles $CYCLES --gt $D/overlap_gpu_bound.gt.jsonl
run overlap_launch_bound 1 $G0 python3 $E --preset launch-bound --overlap --cycles $CYCLES --gt $D/overlap_launch_bound.gt.jsonl
run worker_gpu_bound     1 $G0 python3 $E --preset gpu-bound --worker-thread --cycles $CYCLES --gt $D/worker_gpu_bound.gt.jsonl
run worker_launch_bound  1 $G0 python3 $E --preset launch-bound --worker-thread --cycles $CYCLES --gt $D/worker_launch_bound.gt.jsonl
# Combinations of the shapes above (one GPU): CPU a cycle ahead with both phases replayed from
# CUDA graphs (vLLM's async scheduling with full graphs), a worker thread replaying them, and
# CPU a cycle ahead with every kernel launched eagerly.
run overlap_graphs_launch_bound 1 $G0 python3 $E --preset launch-bound --overlap --verify-graph --cycles $CYCLES --gt $D/overlap_graphs_launch_bound.gt.jsonl
run overlap_graphs_gpu_bound    1 $G0 python3 $E --preset gpu-bound --overlap --verify-graph --cycles $CYCLES --gt $D/overlap_graphs_gpu_bound.gt.jsonl
run worker_graphs_gpu_bound     1 $G0 python3 $E --preset gpu-bound --worker-thread --verify-graph --cycles $CYCLES --gt $D/worker_graphs_gpu_bound.gt.jsonl
run overlap_graphs_launch_bound_graphtrace 1 $G0 python3 $E --preset launch-bound --overlap --verify-graph --cycles $CYCLES --gt $D/overlap_graphs_launch_bound_graphtrace.gt.jsonl
run overlap_graphs_gpu_bound_graphtrace    1 $G0 python3 $E --preset gpu-bound --overlap --verify-graph --cycles $CYCLES --gt $D/overlap_graphs_gpu_bound_graphtrace.gt.jsonl
run worker_graphs_launch_bound  1 $G0 python3 $E --preset launch-bound --worker-thread --verify-graph --cycles $CYCLES --gt $D/worker_graphs_launch_bound.gt.jsonl
run overlap_eager_launch_bound  1 $G0 python3 $E --preset launch-bound --overlap --no-draft-graph --cycles $CYCLES --gt $D/overlap_eager_launch_bound.gt.jsonl
run nccl_skew_phases     2 $TR2 $E --preset launch-bound --tp-draft --cycles $CYCLES --skew 1:draft:3000:even --skew 0:verify:3000:odd --gt "$D/nccl_skew_phases.gt.r{rank}.jsonl"
run nccl_overlap_skew    2 $TR2 $E --preset launch-bound --tp-draft --overlap --cycles $CYCLES --skew 1:draft:3000:even --skew 0:verify:3000:odd --gt "$D/nccl_overlap_skew.gt.r{rank}.jsonl"
find $D -name '*.nsys-rep' -delete
tar -C /tmp -cJf $OUT/overlap_runs.tar.xz overlap_runs
ls -la $OUT
