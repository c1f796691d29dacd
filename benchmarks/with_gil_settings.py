"""``python -m tracerecon ARGS`` with other GIL settings than tracerecon's own: the interpreter's
switch interval set first, and optionally no module imported ahead on a thread
(``tracerecon.import_ahead``: the analysis modules during the read, the renderer during the
load). For A/B runs with ``ab_env.py``; tracerecon itself is not changed.

    python with_gil_settings.py SECONDS AHEAD ARGS...

SECONDS: ``sys.setswitchinterval`` (0 keeps Python's 5 ms); AHEAD: 1 as tracerecon does, 0 none.
"""

import contextlib
import runpy
import sys

if float(sys.argv[1]) > 0:
    sys.setswitchinterval(float(sys.argv[1]))
if sys.argv[2] == "0":
    import tracerecon.cli.report
    import tracerecon.pipeline

    tracerecon.pipeline.ANALYSIS_MODULES = ()
    tracerecon.cli.report.ImportAhead = lambda modules: contextlib.nullcontext()
sys.argv = ["tracerecon"] + sys.argv[3:]
runpy.run_module("tracerecon", run_name="__main__", alter_sys=True)
