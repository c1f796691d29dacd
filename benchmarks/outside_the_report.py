"""Where a cold ``tracerecon report``'s wall time goes outside the report itself: from the
spawn to the first line of Python (the interpreter's start), the run (``console_main``, output
flushed), and from its end to the process's exit (the interpreter's finalization and the
kernel's teardown); each also ended with ``os._exit`` (no finalization), alternating.

    python outside_the_report.py N TRACE
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

CODE = r'''
import os, time
os.write(2, f"START {time.time()}\n".encode())
import sys
from tracerecon.cli import console_main
sys.argv = ["tracerecon"] + sys.argv[1:]
rc = console_main()
sys.stdout.flush()
os.write(2, f"DONE {time.time()}\n".encode())
if os.environ.get("FAST"):
    os._exit(rc)
sys.exit(rc)
'''
rows = {"": [], "1": []}
for i in range(int(sys.argv[1])):
    for fast in ("", "1"):
        env = dict(os.environ, TRACERECON_NO_CACHE="1", FAST=fast)
        t0 = time.time()
        p = subprocess.Popen([sys.executable, "-P", "-c", CODE, "report", sys.argv[2]], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = p.communicate()[1].decode()
        t3 = time.time()
        marks = {l.split()[0]: float(l.split()[1]) for l in err.splitlines() if l.startswith(("START", "DONE"))}
        rows[fast].append((marks["START"] - t0, marks["DONE"] - marks["START"], t3 - marks["DONE"], t3 - t0))
for fast, r in rows.items():
    cols = list(zip(*r))
    print(f"{'os._exit' if fast else 'normal  '}: start {statistics.median(cols[0])*1000:.0f} ms, run {statistics.median(cols[1])*1000:.0f} ms, "
          f"exit {statistics.median(cols[2])*1000:.0f} ms, wall {statistics.median(cols[3])*1000:.0f} ms ({len(r)} runs)")
