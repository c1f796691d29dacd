#!/usr/bin/env bash
# Recipe: cold `report` of the 76 MB trace, one rank against `nsys stats -r nvtx_gpu_proj_trace`
# (and against BASE, an older copy of the `tracerecon` package, when given), then 8 ranks; all
# alternating (benchmarks/ab_env.py). Output: $OUT/ab_now.txt. Carry .devcarry.
#
# The lent machine's Python (3.12) lacks pyarrow, numpy and the ADBC driver, and their wheels are
# over the 64 MiB a call carries, so they travel unpacked and xz-compressed (36 MB):
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#     --implementation cp -d W pyarrow numpy adbc-driver-sqlite adbc-driver-manager rich
#   unzip every wheel into S; remove pyarrow's Flight, S3 and test libraries (keep
#   libarrow_substrait: lib links it); tar cf - -C S . | xz > .devcarry/site.tar.xz
# and .devcarry/big_launch.sqlite.xz, nsys-env.sh from ../shared (see ../shared/device/README.md).
# Usage (GPU machine, repo root): [BASE=.devcarry/base] [WITH_ENV=VAR=V,VAR=V] [ROUNDS=12 ROUNDS8=6] [CPUS=0-15] bash launch/h200_ab_now.sh
# WITH_ENV: this code once more, under those environment settings (ab_env.py's form), as "env-1"/"env-8".
# CPUS: run every command under `taskset -c CPUS` (a 32-core host measured as a 16-core one).
# Output is appended, so several calls in one command (other CPUS) add up in one file.
mkdir -p /tmp/site && tar xJf .devcarry/site.tar.xz -C /tmp/site && { [ -f .devcarry/site2.tar.xz ] && tar xJf .devcarry/site2.tar.xz -C /tmp/site; true; }
source .devcarry/nsys-env.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRACERECON_NO_CACHE=1
# (BASE too: a copy left uncompiled compiles its modules on every run where it cannot write them)
python3 -m compileall -q -j 0 tracerecon /tmp/site .devcarry/base ${BASE:-} > /dev/null 2>&1
W=$(mktemp -d)
xz -dc .devcarry/big_launch.sqlite.xz > $W/rank0.sqlite
for r in $(seq 1 7); do cp $W/rank0.sqlite $W/rank$r.sqlite; done
RANKS8="$(echo $W/rank{0..7}.sqlite)"
P=""; [ -n "${CPUS:-}" ] && P="taskset -c $CPUS "
{
  echo "== ab now $(date -u +%FT%TZ) $(git log -1 --format=%h 2>/dev/null) cpus ${CPUS:-all} ($(${P}nproc) of $(nproc --all))"
  echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null); $(ldd --version 2>/dev/null | head -1)"
  python3 -m tracerecon report $W/rank0.sqlite > /dev/null
  for f in $W/rank*.sqlite; do cat $f > /dev/null; done
  nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite > /dev/null 2>&1
  V=("report-1||${P}python3 -P -m tracerecon report $W/rank0.sqlite" "nsys-stats||${P}nsys stats -q -r nvtx_gpu_proj_trace -f csv -o $W/p --force-overwrite true $W/rank0.sqlite")
  [ -n "${BASE:-}" ] && V+=("base-1|PYTHONPATH=/tmp/site:$PWD/$BASE|${P}python3 -P -m tracerecon report $W/rank0.sqlite")
  [ -n "${WITH_ENV:-}" ] && V+=("env-1|$WITH_ENV|${P}python3 -P -m tracerecon report $W/rank0.sqlite")
  python3 benchmarks/ab_env.py "${ROUNDS:-10}" "${V[@]}"
  V=("report-8||${P}python3 -P -m tracerecon report $RANKS8")
  [ -n "${BASE:-}" ] && V+=("base-8|PYTHONPATH=/tmp/site:$PWD/$BASE|${P}python3 -P -m tracerecon report $RANKS8")
  [ -n "${WITH_ENV:-}" ] && V+=("env-8|$WITH_ENV|${P}python3 -P -m tracerecon report $RANKS8")
  python3 benchmarks/ab_env.py "${ROUNDS8:-6}" "${V[@]}"
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee -a $OUT/ab_now.txt
rm -rf $W
