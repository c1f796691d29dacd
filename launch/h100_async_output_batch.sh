#!/usr/bin/env bash
# launch/async_output_probe.py under nsys 2025.3.1 on the lent GPU machine (one H100 or H200),
# in the shapes of sample_traces/probes_h100/async_output and the review's other ten: run with
# the device tool, carry [".devcarry"] (../shared/device/README.md), then `tracerecon scrub`.
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
D=/tmp/async_output; rm -rf $D; mkdir -p $D
one() {  # name, graph-trace mode, probe args...
  local name=$1 mode=$2; shift 2
  echo "=== $name ($mode): $*"
  timeout 90 nsys profile -t cuda,nvtx --cuda-graph-trace=$mode --sample=none --cpuctxsw=none -o $D/$name -f true \
    python3 launch/async_output_probe.py "$@" --gt $D/$name.gt.jsonl > $D/$name.log 2>&1
  echo "profile exit $?"; tail -1 $D/$name.log
  nsys export --type sqlite -o $D/$name.sqlite -f true $D/$name.nsys-rep > /dev/null 2>&1; echo "export exit $?"
  rm -f $D/$name.nsys-rep
}
C=${CYCLES:-80}
one instr             node --marks instr --cycles $C
one nvtx              node --marks nvtx --cycles $C
one instr_own         node --marks instr --own-stream --cycles $C
one nvtx_own          node --marks nvtx --own-stream --cycles $C
one instr_graphtrace  graph --marks instr --cycles $C
one instr_sleep       node --marks instr --out-work sleep --cycles $C
one nvtx_sleep        node --marks nvtx --out-work sleep --cycles $C
one instr_gpu         node --marks instr --out-work sleep --tokens 6144 --cycles $C
one nvtx_gpu          node --marks nvtx --out-work sleep --tokens 6144 --cycles $C
one instr_own_gpu     node --marks instr --own-stream --out-work sleep --tokens 6144 --cycles $C
one instr_outcycle    node --marks instr --out-cycle --out-work sleep --cycles $C
one nvtx_outcycle_gpu node --marks nvtx --out-cycle --out-work sleep --tokens 6144 --cycles $C
tar -C /tmp -cJf $OUT/async_output.tar.xz async_output
