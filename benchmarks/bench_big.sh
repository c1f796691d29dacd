#!/usr/bin/env bash
# 1 GB per rank (issue 11): make a 1 GiB export from the 76 MB one (benchmarks/make_big_export.py),
# then cold `report` and `export` of it, with wall time and peak RSS; then many ranks on a Dask
# LocalCluster (benchmarks/bench_dask.py). Usage (repo root):
#   bash benchmarks/bench_big.sh big_launch.sqlite.xz [SIZE_GB] [DASK_RANKS]
set -u
SRC=$(realpath "$1")  # bench_dask.py runs from benchmarks/
SIZE=${2:-1}
RANKS=${3:-64}
W=$(mktemp -d); trap 'rm -rf $W' EXIT
echo "cores $(nproc)  $(python3 -V 2>&1)  $(free -g | awk '/Mem/ {print $2 " GiB"}')"
python3 benchmarks/make_big_export.py "$SRC" $W/big.sqlite --size-gb $SIZE
t() { local label=$1; shift; python3 benchmarks/timed.py "$label" --head 6 -- "$@"; }
export TRACERECON_NO_CACHE=1
for i in 1 2; do
  t "cold report, $SIZE GiB" python3 -m tracerecon report $W/big.sqlite
done
t "cold export, $SIZE GiB" python3 -m tracerecon export $W/big.sqlite -o $W/exp --force
rm -rf $W/exp $W/big.sqlite
if python3 -c "import distributed" 2> /dev/null; then
  (cd benchmarks && python3 bench_dask.py "$SRC" --ranks $RANKS --workers $(nproc) 2> /dev/null | tr -d '\n'; echo)
fi
