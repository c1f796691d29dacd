#!/usr/bin/env bash
# Recipe: the engine shapes of launch/stream_shapes_probe.py under nsys 2025.3.1 on the lent H200
# (node-level graph tracing, as `tracerecon run` asks; GRAPH_TRACE=graph for nsys's own default,
# one record per graph launch, written as S_graphtrace), each exported to SQLite beside its
# CUDA-event ground truth; all in $OUT/shapes.tar.xz, to be scrubbed (`tracerecon scrub`) before
# committing. KEEP=1 adds to the files of an earlier call in the same command.
# MARKED=1: each phase says its current stream as tracerecon.instrument's phase does (--marked),
# written as S_marked.
# Usage (GPU machine, repo root, carry .devcarry): [SHAPES="..."] [CYCLES=40] [GRAPH_TRACE=graph] [MARKED=1] bash launch/h200_shapes_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
export PYTHONUNBUFFERED=1
marked=""
if [ "${MARKED:-0}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl
  export PYTHONPATH=/tmp/site:$PWD
  marked="--marked"
fi
D=/tmp/shapes; [ "${KEEP:-0}" = 1 ] || rm -rf $D; mkdir -p $D
mode=${GRAPH_TRACE:-node}
for s in ${SHAPES:-side_join_same side_join_later copy_event_sync graph_fork_join}; do
  name=$s; [ "$mode" = node ] || name=${s}_graphtrace; [ -z "$marked" ] || name=${name}_marked
  echo "=== $name"; t=$SECONDS
  timeout 240 nsys profile -t cuda,nvtx --cuda-graph-trace=$mode --sample=none --cpuctxsw=none -o $D/$name -f true \
    python3 launch/stream_shapes_probe.py --shape $s $marked --cycles ${CYCLES:-40} --gt $D/$name.gt.jsonl > $D/$name.log 2>&1
  echo "profile exit $? in $((SECONDS - t)) s"; grep -E "cycles|Error|error" $D/$name.log | head -3
  nsys export --type sqlite -o $D/$name.sqlite -f true $D/$name.nsys-rep > /dev/null 2>&1; echo "export exit $?"
  rm -f $D/$name.nsys-rep
done
tar -C /tmp -cJf $OUT/shapes.tar.xz shapes
ls -la $OUT
