#!/usr/bin/env bash
# Recipe: issue 11's measurements on the lent H200 host in one call: benchmarks/bench_scale.sh
# (cold/warm report, export, nsys stats, TUI from cache, 8 ranks) and benchmarks/bench_big.sh
# (1 GiB per rank, 64 ranks on a Dask LocalCluster). Output: $OUT/scale.txt.
# Usage (on the GPU machine, repo root, carry .devcarry and .whl): bash launch/h200_scale_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl .whl/scale/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import tracerecon.nsys.native_read as n, pyarrow, numpy; print('native reads', n.available(), 'threads', n.read_threads(), 'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__)"
{
  echo "== bench_scale $(date -u +%FT%TZ)"
  bash benchmarks/bench_scale.sh .devcarry/big_launch.sqlite.xz 3
  echo "== bench_big $(date -u +%FT%TZ)"
  bash benchmarks/bench_big.sh .devcarry/big_launch.sqlite.xz 1 64
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee $OUT/scale.txt
