#!/usr/bin/env bash
# Recipe: the SGLang and vLLM stand-ins (tests/engines) on one H200 under `tracerecon run --preset`,
# with their model work on the GPU (--device cuda): the presets' wrapped and native ranges must give
# draft / verify / draft_extend per rank, and accepted tokens per cycle must match the engines' logs.
# Writes scrubbed SQLite exports, the engines' acceptance logs, run.json and the reports to
# $OUT/h200_engines.tar.xz. Usage (on the GPU machine, repo root): bash launch/h200_engines_batch.sh [STEPS]
set -u
STEPS=${1:-40}
source .devcarry/nsys-env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/tests/engines:$PWD PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
D=/tmp/h200_engines; rm -rf $D; mkdir -p $D
TR="python3 -m tracerecon"
run() {  # name, preset, then the command after --
  local name=$1 preset=$2; shift 2
  echo "=== $name (--preset $preset): $*"
  local s=$SECONDS
  STANDIN_ACCEPT_LOG=$D/$name.accepted.jsonl $TR run --scrub --preset $preset -o $D/$name -- "$@" > $D/$name.report.txt 2> $D/$name.stderr.txt
  echo "exit $? in $((SECONDS - s)) s"
  cat $D/$name.report.txt; grep -E "preset|warning|error" $D/$name.stderr.txt | tail -8
  # The report with no flags: run.json holds the preset's phase maps.
  $TR report $D/$name --json > $D/$name.report.json 2>> $D/$name.stderr.txt
  python3 - "$D/$name" "$D/$name.accepted.jsonl" <<'PY'
import json, sys
from tracerecon import api
from tracerecon.analysis.config import PhaseConfig
from tracerecon.run_dir import recorded_phase_options
run, log = sys.argv[1], sys.argv[2]
opts = recorded_phase_options([run])
a = api.load([run], PhaseConfig(phases=tuple(opts["phases"])))
logged = [json.loads(l)["accepted"] for l in open(log)]
for r in a.ranks:
    got = [t for t in r.cycles["accepted_tokens"].to_pylist() if t is not None]
    print(f"rank {r.rank}: phases {sorted(set(r.phases['phase'].to_pylist()))}, cycles {r.cycles.num_rows}, "
          f"accepted tokens match the engine's log: {got == logged} ({len(got)} cycles with a count, {len(logged)} logged)")
PY
}
run sglang_overlap   sglang python3 -m sglang.launch_server --device cuda --num-batches $STEPS
run sglang_normal    sglang python3 -m sglang.launch_server --device cuda --num-batches $STEPS --disable-overlap-schedule
run vllm_mrv2        vllm   python3 -m vllm.entrypoints.openai.api_server --device cuda --num-steps $STEPS
run vllm_mrv2_sync   vllm   python3 -m vllm.entrypoints.openai.api_server --device cuda --num-steps $STEPS --no-async-scheduling
export VLLM_USE_V2_MODEL_RUNNER=0
run vllm_v1          vllm   python3 -m vllm.entrypoints.openai.api_server --device cuda --num-steps $STEPS
unset VLLM_USE_V2_MODEL_RUNNER
find $D -name '*.nsys-rep' -delete
tar -C /tmp -cJf $OUT/h200_engines.tar.xz h200_engines
ls -la $OUT
