"""tracerecon's own processes set themselves up (``tracerecon.own_process``): OpenBLAS idle but
never for the engine ``run`` launches, the collector off except in ``view``, freed memory kept
for reuse. Each case runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def in_fresh_python(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**clean, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_one_shot_command_starts_numpy_without_blas_threads():
    # GIVEN the settings of `report`, made before numpy is imported
    # WHEN numpy is imported
    # THEN OpenBLAS started no threads of its own (stock numpy starts one per core) and the
    #      collector is off
    code = ("import os, gc; from tracerecon.own_process import prepare; prepare('report'); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')), gc.isenabled())")
    assert in_fresh_python(code) == "1 1 False"


def test_run_leaves_the_engine_environment_as_the_user_had_it():
    # GIVEN `run`, whose engine inherits this process's environment
    # WHEN the settings are made
    # THEN OPENBLAS_NUM_THREADS is neither added nor changed
    code = "import os; from tracerecon.own_process import prepare; prepare('run'); print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert in_fresh_python(code) == "None"
    code = "import os; from tracerecon.own_process import prepare; prepare('report'); print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert in_fresh_python(code, OPENBLAS_NUM_THREADS="4") == "4"


def test_view_keeps_the_collector():
    # GIVEN the interactive command WHEN the settings are made THEN the collector stays on
    assert in_fresh_python("import gc; from tracerecon.own_process import prepare; prepare('view'); print(gc.isenabled())") == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc, /proc")
def test_freed_blocks_stay_for_reuse_only_when_asked():
    # GIVEN a 16 MB block allocated, written and freed
    # WHEN malloc runs with stock settings, then with reuse_freed_memory
    # THEN stock glibc returns its pages at once (a mapped block), the tuned one keeps them
    code = (
        "import os, sys\n"
        "from tracerecon.memory import reuse_freed_memory\n"
        "if sys.argv[1] == 'reuse': reuse_freed_memory()\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20\n"
        "b = bytearray(16 << 20); before = rss(); del b; print(before - rss())\n"
    )
    def returned_mb(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)
    assert returned_mb("stock") >= 15
    assert returned_mb("reuse") <= 1
