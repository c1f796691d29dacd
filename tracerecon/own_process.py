"""What tracerecon's own processes (the ``tracerecon`` program and its ``--jobs`` worker
processes) set for themselves before they load anything. A library user's process is left as
it is: nothing here runs on import.

- No pandas (``tracerecon.no_pandas``): pyarrow would import it on its first conversion.
- OpenBLAS idle: numpy's OpenBLAS starts a thread per core at import, and each spins for about
  0.1 s before it sleeps. tracerecon never calls BLAS; on the 16-core H200 host those threads
  cost 1.9 core-seconds per process (a cold ``report`` of the 76 MB trace: 4.21 s of CPU time
  with them, 2.27 s without). ``OPENBLAS_NUM_THREADS=1`` is set unless the user set it, except
  for ``run``, whose engine inherits this process's environment and must keep the user's.
- Freed memory reused (``tracerecon.memory.reuse_freed_memory``).
- No cyclic garbage collection: their data are Arrow and numpy buffers, freed by reference
  counting, and the collector only walked the objects the imports made.
``view``, an interactive session that may stay open for hours, keeps the collector and glibc's
own malloc behaviour. The program sets these in ``tracerecon.cli.console_main``; calling
``tracerecon.cli.main`` in a process of one's own changes none of them.

All four against the code before them, a cold ``report`` of the 76 MB trace on the H200 host
(``launch/h200_ab_batch.sh``, alternating runs, medians): one rank 1.18 -> 1.06 s (CPU time
4.10 -> 2.12 s), 8 ranks 2.19 -> 1.88 s, a 1 GiB export's report 11.3 -> 9.8 s (2 runs each)
with its peak RSS 2,840 -> 2,753 MB. One at a time (same host, another lending): OpenBLAS
idle took the CPU time from 4.21 to 2.27 s, the collector off the wall time from 1.20 to
1.09 s, the malloc settings the page faults from 134,000 to 82,000. On the 2-core machine
(``benchmarks/bench_export.py``) ``export`` against the sqlite3 fetch went from 0.79 to
0.71-0.72; there OpenBLAS starts one thread only, and single A/B runs drowned in its noise.
"""

from __future__ import annotations

import gc
import os

from tracerecon.cores import set_worker_share
from tracerecon.interrupts import default_sigterm, ignore_ctrl_c
from tracerecon.memory import reuse_freed_memory
from tracerecon.no_pandas import keep_pandas_out

# Commands whose children inherit this process's environment (the engine under nsys).
_LAUNCHES_ENGINE = frozenset({"run"})
# Commands that stay open for the user (the collector stays on).
_INTERACTIVE = frozenset({"view"})


def prepare(command: str | None = None) -> None:
    """Settings for this process, before numpy is imported: see the module docstring.
    ``command``: the CLI command about to run; None for a worker process. Idempotent."""
    keep_pandas_out()
    if command not in _LAUNCHES_ENGINE:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if command not in _INTERACTIVE:
        reuse_freed_memory()
        gc.disable()


def prepare_worker(threads: int) -> None:
    """A ``--jobs`` worker process's start (the pool's initializer): its share of the cores
    (``threads``: what its reader connections and analysis threads are sized by) and
    ``prepare``'s settings. It lives here, in a module that imports no numpy, so
    that a worker started fresh (spawn, or Python 3.14's forkserver) makes the settings before
    the work's modules import numpy; a forked one has its parent's already."""
    set_worker_share(threads)
    ignore_ctrl_c()  # the parent stops its workers on Ctrl-C
    default_sigterm()  # and on SIGTERM, which ends a worker at once
    prepare()
