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
- No cyclic garbage collection for one-shot commands: their data are Arrow and numpy buffers,
  freed by reference counting, and the collector only walked the objects the imports made;
  ``view``, an interactive session, keeps it.

All four against the code before them, a cold ``report`` of the 76 MB trace on the H200 host
(``launch/h200_ab_batch.sh``, alternating runs, medians): one rank 1.18 -> 1.06 s (CPU time
4.10 -> 2.12 s), 8 ranks 2.19 -> 1.88 s, a 1 GiB export's report 11.3 -> 9.8 s with its peak
RSS 2,840 -> 2,753 MB. One at a time (same host, another lending): OpenBLAS idle took the CPU
time from 4.21 to 2.27 s, the collector off the wall time from 1.20 to 1.09 s, the malloc
settings the page faults from 134,000 to 82,000. On the 2-core machine none of them showed
beyond its noise (OpenBLAS starts one thread there).
"""

from __future__ import annotations

import gc
import os

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
    reuse_freed_memory()
    if command not in _INTERACTIVE:
        gc.disable()
