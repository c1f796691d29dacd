#!/usr/bin/env bash
# Recipe: the engine shapes of launch/stream_shapes_probe.py under nsys 2025.3.1 on the lent H200
# (node-level graph tracing, as `tracerecon run` asks), each exported to SQLite beside its CUDA-event
# ground truth; all in $OUT/shapes.tar.xz, to be scrubbed (`tracerecon scrub`) before committing.
# Usage (GPU machine, repo root, carry .devcarry): [SHAPES="..."] [CYCLES=40] bash launch/h200_shapes_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
export PYTHONUNBUFFERED=1
D=/tmp/shapes; rm -rf $D; mkdir -p $D
for s in ${SHAPES:-side_join_same side_join_later copy_event_sync graph_fork_join}; do
  echo "=== $s"; t=$SECONDS
  timeout 240 nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none -o $D/$s -f true \
    python3 launch/stream_shapes_probe.py --shape $s --cycles ${CYCLES:-40} --gt $D/$s.gt.jsonl > $D/$s.log 2>&1
  echo "profile exit $? in $((SECONDS - t)) s"; tail -3 $D/$s.log
  nsys export --type sqlite -o $D/$s.sqlite -f true $D/$s.nsys-rep > /dev/null 2>&1; echo "export exit $?"
  rm -f $D/$s.nsys-rep
done
tar -C /tmp -cJf $OUT/shapes.tar.xz shapes
ls -la $OUT
