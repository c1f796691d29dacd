"""Where one cold ``tracerecon report`` spends its wall time, thread by thread: the stages of the
read and the analysis are timed where they run and printed in start order with the thread that
ran them, after the time the imports took.

    python benchmarks/stage_timeline.py TRACE.sqlite [MORE.sqlite ...]

Cache off. Each stage is a library function, wrapped wherever the library holds a reference to it
(``from x import f`` included), so the timings are of the unchanged code. With several inputs the
worker processes (forked, so wrapped too) report their stages as well, under their process ids.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import functools  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

os.environ["TRACERECON_NO_CACHE"] = "1"
from tracerecon.own_process import prepare  # noqa: E402

prepare("report")

STAGES = [
    "tracerecon.nsys.sqlite_export:open_readonly", "tracerecon.nsys.sqlite_export:read_info",
    "tracerecon.nsys.sqlite_export:read_strings", "tracerecon.nsys.sqlite_export:read_api_calls",
    "tracerecon.nsys.sqlite_export:read_gpu_ops", "tracerecon.nsys.sqlite_export:fetch_nvtx_rows",
    "tracerecon.nsys.sqlite_export:_read_small_tables", "tracerecon.nsys.sqlite_export:parse_nvtx",
    "tracerecon.nsys.sqlite_export:_fill_missing_process", "tracerecon.nsys.sqlite_export:read_export",
    "tracerecon.nsys.native_read:fetch_int_columns", "tracerecon.nsys.native_read:_query",
    "tracerecon.pipeline:_read_tables", "tracerecon.pipeline:_link", "tracerecon.analysis.projection:link_launches",
    "tracerecon.analysis.rank:own_rank", "tracerecon.analysis.ranges:build_ranges",
    "tracerecon.analysis.projection:project", "tracerecon.analysis.cross_rank:analyze_cross_rank",
    "tracerecon.analysis.rank:finish_rank", "tracerecon.analysis.ranges:nest", "tracerecon.analysis.projection:index_launches",
    "tracerecon.analysis.phases:select_phases", "tracerecon.analysis.projection:innermost_owner",
    "tracerecon.analysis.syncs:attribute_waits", "tracerecon.analysis.rank:_build_syncs", "tracerecon.analysis.boundaries:phase_streams",
    "tracerecon.analysis.boundaries:phase_boundaries", "tracerecon.analysis.boundaries:busiest_streams",
    "tracerecon.analysis.nccl:phase_comm_split", "tracerecon.analysis.rank:_graph_launch_counts", "tracerecon.analysis.rank:_build_gpu_ops",
    "tracerecon.analysis.phases:build_phases", "tracerecon.analysis.boundaries:stream_clock", "tracerecon.analysis.syncs:find_blocking_calls",
    "tracerecon.memory:release_free_memory", "tracerecon.analysis.phases:build_cycles", "tracerecon.pipeline:_file_work_here",
    "tracerecon.api:load", "tracerecon.cli.render:print_report", "tracerecon.api:report",
    "tracerecon.pipeline:_file_work_handed_off", "tracerecon.handoff:put", "tracerecon.handoff:take",
    "tracerecon.pipeline:_analyse_file", "tracerecon.present:build_report",
]
# One line per stage, appended by whichever process ran it (forked workers included); the clock
# (CLOCK_MONOTONIC) is the same in all of them.
_LOG = os.open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"stage_timeline.{os.getpid()}.log"), os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_APPEND, 0o600)
MAIN_PID = os.getpid()


def _timed(label: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            os.write(_LOG, f"{t}\t{time.perf_counter()}\t{os.getpid()}\t{threading.current_thread().name}\t{label}\n".encode())

    return wrapper


def _wrap_everywhere() -> None:
    import importlib

    originals = {}
    for spec in STAGES:
        mod, name = spec.split(":")
        m = importlib.import_module(mod)
        originals[id(getattr(m, name))] = (getattr(m, name), _timed(name, getattr(m, name)))
    for m in list(sys.modules.values()):
        if not getattr(m, "__name__", "").startswith("tracerecon"):
            continue
        for attr, value in list(vars(m).items()):
            if id(value) in originals and value is originals[id(value)][0]:
                setattr(m, attr, originals[id(value)][1])


def pipeline_analysis_modules() -> tuple[str, ...]:
    from tracerecon.pipeline import ANALYSIS_MODULES

    return ANALYSIS_MODULES


def main() -> None:
    import importlib

    for module in ("tracerecon.api", "tracerecon.pipeline", "tracerecon.cli.render", *pipeline_analysis_modules()):
        importlib.import_module(module)  # the report's own imports, timed here as a whole

    t_imports = time.perf_counter()
    _wrap_everywhere()
    from tracerecon.cli import main as cli_main

    t = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        real, sys.stdout = sys.stdout, devnull
        try:
            cli_main(["report", *sys.argv[1:]])
        finally:
            sys.stdout = real
    end = time.perf_counter()
    print(f"imports {t_imports - T0:.3f} s; report {end - t:.3f} s")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"stage_timeline.{MAIN_PID}.log")
    with open(path) as f:
        events = sorted((float(a), float(b), int(pid), thread, label) for a, b, pid, thread, label in (line.rstrip("\n").split("\t") for line in f))
    os.unlink(path)
    for s, e, pid, thread, label in events:
        who = thread if pid == MAIN_PID else f"pid {pid} {thread}"
        print(f"{s - t:7.3f} {e - t:7.3f} {e - s:7.3f}  {who:<32} {label}")


if __name__ == "__main__":
    main()
