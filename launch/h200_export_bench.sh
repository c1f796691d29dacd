#!/usr/bin/env bash
# Recipe: the timeline exports (issue 13) of the 76 MB trace on the lent H200 host, beside report and
# the parquet export: wall time and peak RSS, cache off. Usage (GPU machine, repo root, carry .devcarry .whl):
#   bash launch/h200_export_bench.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/scale/*.whl 2>&1 | grep -v WARN | tail -2
export PYTHONPATH=/tmp/site:$PWD TRACERECON_NO_CACHE=1
W=$(mktemp -d); xz -dc .devcarry/big_launch.sqlite.xz > $W/big.sqlite
t() { local label=$1; shift; python3 benchmarks/timed.py "$label" --head 1 -- "$@"; }
for i in 1 2; do
  t "report" python3 -m tracerecon report $W/big.sqlite
  t "export --format perfetto" python3 -m tracerecon export $W/big.sqlite --format perfetto -o $W/big.pftrace
  t "export --format chrome-json" python3 -m tracerecon export $W/big.sqlite --format chrome-json -o $W/big.json
  t "export parquet" python3 -m tracerecon export $W/big.sqlite -o $W/pq --force
done
ls -la $W
