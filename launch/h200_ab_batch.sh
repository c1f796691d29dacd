#!/usr/bin/env bash
# Recipe: alternating A/B runs (benchmarks/ab_env.py) of a cold `report` on the H200 host, where
# the 2-core machine's noise is larger than the effects. Output: $OUT/ab.txt.
#   WITH_ENV=1   process-level settings one at a time, on the code in BASE (code from before
#                tracerecon/own_process.py, which makes three of them itself): glibc malloc
#                thresholds, malloc huge pages, OpenBLAS's idle threads, the cyclic collector
#   BASE=DIR     the current code against an older one (DIR holds its `tracerecon` package),
#                with `nsys stats -r nvtx_gpu_proj_trace` in the same alternation (one rank),
#                then 8 ranks, then a 1 GiB export (WITH_BIG=1)
# Usage (GPU machine, repo root, carry .devcarry and .whl; DIR inside a carried path):
#   [ROUNDS=6 ROUNDS8=4] [WITH_ENV=1] [BASE=.devcarry/base] [WITH_BIG=1] bash launch/h200_ab_batch.sh
set -u
source .devcarry/nsys-env.sh > /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devcarry/wheels/*.whl .whl/*.whl .whl/scale/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 tracerecon /tmp/site ${BASE:+$BASE} > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
for r in 1 2 3 4 5 6 7; do cp $W/rank0.sqlite $W/rank$r.sqlite; done
RANKS8="$(echo $W/rank{0..7}.sqlite)"
if [ "${WITH_ENV:-0}" = 1 ] && [ -z "${BASE:-}" ]; then echo "WITH_ENV=1 needs BASE (code without own_process)" >&2; exit 2; fi
NOGC="python3 -P -c 'import gc, sys; gc.disable(); from tracerecon.cli import main; sys.exit(main())'"
MALLOC="MALLOC_MMAP_THRESHOLD_=33554432,MALLOC_TRIM_THRESHOLD_=268435456"
env_variants() {  # $1: the trace arguments; every variant runs BASE's code
  local on="PYTHONPATH=/tmp/site:$PWD/${BASE:-}"
  echo "default|$on|python3 -P -m tracerecon report $1"
  echo "malloc-thresholds|$on,$MALLOC|python3 -P -m tracerecon report $1"
  echo "malloc-hugepages|$on,GLIBC_TUNABLES=glibc.malloc.hugetlb=1|python3 -P -m tracerecon report $1"
  echo "openblas-1-thread|$on,OPENBLAS_NUM_THREADS=1|python3 -P -m tracerecon report $1"
  echo "gc-off|$on|$NOGC report $1"
  echo "all|$on,$MALLOC,GLIBC_TUNABLES=glibc.malloc.hugetlb=1,OPENBLAS_NUM_THREADS=1|$NOGC report $1"
}
code_variants() {  # $1: the trace arguments. -P: `python -m` would put the working directory
  # (this checkout) first on the path, ahead of BASE.
  echo "base|PYTHONPATH=/tmp/site:$PWD/$BASE|python3 -P -m tracerecon report $1"
  echo "new||python3 -P -m tracerecon report $1"
}
{
  echo "== ab batch $(date -u +%FT%TZ) $(git log -1 --format=%h 2>/dev/null) base=${BASE:-none}"
  lscpu | grep -E "^(CPU\(s\)|Model name)" | tr -s ' ' | paste -sd';'
  echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag); $(ldd --version | head -1); python $(python3 -V)"
  python3 -c "import pyarrow as pa; print('arrow pool', pa.default_memory_pool().backend_name, pa.__version__)"
  [ -n "${BASE:-}" ] && PYTHONPATH=/tmp/site:$PWD/$BASE python3 -P -c "import tracerecon; print('base code from', tracerecon.__file__)"
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null  # page cache warm
  if [ "${WITH_ENV:-0}" = 1 ]; then
    echo "== settings, 1 rank"
    mapfile -t V < <(env_variants "$W/rank0.sqlite"); python3 benchmarks/ab_env.py "${ROUNDS:-6}" "${V[@]}"
    echo "== settings, 8 ranks"
    mapfile -t V < <(env_variants "$RANKS8"); python3 benchmarks/ab_env.py "${ROUNDS8:-4}" "${V[@]}"
  fi
  if [ -n "${BASE:-}" ]; then
    echo "== code, 1 rank, nsys stats in the same alternation"
    mapfile -t V < <(code_variants "$W/rank0.sqlite")
    V+=("nsys-stats||nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite")
    python3 benchmarks/ab_env.py "${ROUNDS:-6}" "${V[@]}"
    echo "== code, 8 ranks"
    mapfile -t V < <(code_variants "$RANKS8"); python3 benchmarks/ab_env.py "${ROUNDS8:-4}" "${V[@]}"
    if [ "${WITH_BIG:-0}" = 1 ]; then
      echo "== code, report of a 1 GiB export"
      rm -f $W/rank[1-7].sqlite
      python3 benchmarks/make_big_export.py $W/rank0.sqlite $W/big.sqlite --size-gb 1 | tail -1
      mapfile -t V < <(code_variants "$W/big.sqlite"); python3 benchmarks/ab_env.py 2 "${V[@]}"
    fi
  fi
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee $OUT/ab.txt
rm -rf $W
