#!/usr/bin/env bash
# Recipe: launch/stream_marks_probe.py's shapes under nsys 2025.3.1 on the lent H200, each with
# tracerecon.instrument's stream marks (S) and without them (S_unmarked, TRACERECON_STREAM_MARKS=0),
# exported to SQLite beside the CUDA-event ground truth, all in $OUT/marks.tar.xz (scrub with
# `tracerecon scrub` before committing); then benchmarks/instrument_overhead.py --cuda.
# The CPU-ahead shapes: SHAPES="ahead_switch_outside ahead_switch_inside ahead_alternate".
# Usage (GPU machine, repo root, carry .devcarry): [SHAPES="..."] [MARKS="1 0"] [CYCLES=40] bash launch/h200_marks_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
D=/tmp/marks; rm -rf $D; mkdir -p $D
for s in ${SHAPES-switch_outside switch_inside alternate}; do
  for marks in ${MARKS:-1 0}; do
    name=$s; [ $marks = 1 ] || name=${s}_unmarked
    echo "=== $name"; t=$SECONDS
    TRACERECON_STREAM_MARKS=$marks timeout 240 nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none -o $D/$name -f true \
      python3 launch/stream_marks_probe.py --shape $s --cycles ${CYCLES:-40} --gt $D/$name.gt.jsonl > $D/$name.log 2>&1
    echo "profile exit $? in $((SECONDS - t)) s"; grep -E "cycles|Error|error" $D/$name.log | head -3
    nsys export --type sqlite -o $D/$name.sqlite -f true $D/$name.nsys-rep > /dev/null 2>&1; echo "export exit $?"
    rm -f $D/$name.nsys-rep
  done
done
tar -C /tmp -cJf $OUT/marks.tar.xz marks
echo "=== instrument overhead (no profiler)"
for k in 1 2; do python3 benchmarks/instrument_overhead.py 100000 --cuda; done
nsys profile --help | grep -A6 -- "--cuda-event-trace" | head -12
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, nvtx; print('torch', torch.__version__, 'nvtx', nvtx.__version__ if hasattr(nvtx, '__version__') else '?')"
ls -la $OUT
