"""Where one cold ``tracerecon report`` spends its wall time, thread by thread: the stages of the
read and the analysis are timed where they run and printed in start order with the thread that
ran them, after the time the imports took.

    python benchmarks/stage_timeline.py [--as-imported] TRACE.sqlite [MORE.sqlite ...]

Cache off. Each stage is a library function, wrapped wherever the library holds a reference to it
(``from x import f`` included), so the timings are of the unchanged code. With several inputs the
worker processes (forked, so wrapped too) report their stages as well, under their process ids.
By default the report's modules are imported first and their import time printed apart;
``--as-imported`` leaves the imports where the report makes them (some run during the read)
and wraps each module's stages as it is imported: times are then from the process start.
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
    "tracerecon.nsys.native_read:fetch_int_columns", "tracerecon.nsys.native_read:_execute_all",
    "tracerecon.nsys.native_read:_int64_columns", "tracerecon.nsys.native_read:_parts", "tracerecon.nsys.read_plan:start_ahead",
    "tracerecon.import_ahead:join_all",
    "tracerecon.pipeline:_read_tables", "tracerecon.pipeline:_link", "tracerecon.analysis.projection:link_launches",
    "tracerecon.analysis.rank:own_rank", "tracerecon.analysis.ranges:build_ranges",
    "tracerecon.analysis.projection:project", "tracerecon.analysis.cross_rank:analyze_cross_rank",
    "tracerecon.analysis.rank:finish_rank", "tracerecon.analysis.ranges:nest", "tracerecon.analysis.projection:index_launches",
    "tracerecon.analysis.phases:select_phases", "tracerecon.analysis.projection:innermost_owner",
    "tracerecon.analysis.syncs:attribute_waits", "tracerecon.analysis.rank:_build_syncs", "tracerecon.analysis.phase_streams:phase_streams",
    "tracerecon.analysis.boundaries:phase_boundaries", "tracerecon.analysis.phase_streams:busiest_streams",
    "tracerecon.analysis.nccl:phase_comm_split", "tracerecon.analysis.rank:_graph_launch_counts", "tracerecon.analysis.rank:_build_gpu_ops",
    "tracerecon.analysis.phases:build_phases", "tracerecon.analysis.stream_clock:stream_clock", "tracerecon.analysis.syncs:find_blocking_calls",
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


_ORIGINALS: dict[int, tuple] = {}


def _wrap_module(m) -> None:
    """``m``'s own stages wrapped, and every reference tracerecon's modules hold to a stage."""
    for spec in STAGES:
        mod, name = spec.split(":")
        if mod == m.__name__ and hasattr(m, name) and id(getattr(m, name)) not in _ORIGINALS:
            _ORIGINALS[id(getattr(m, name))] = (getattr(m, name), _timed(name, getattr(m, name)))
            setattr(m, name, _ORIGINALS[id(getattr(m, name))][1])
    _rewire()


def _rewire() -> None:
    originals = _ORIGINALS
    for m in list(sys.modules.values()):
        if not getattr(m, "__name__", "").startswith("tracerecon"):
            continue
        for attr, value in list(vars(m).items()):
            if id(value) in originals and value is originals[id(value)][0]:
                setattr(m, attr, originals[id(value)][1])


def _wrap_everywhere() -> None:
    import importlib

    for spec in STAGES:
        _wrap_module(importlib.import_module(spec.split(":")[0]))


class _WrapOnImport:
    """A meta-path finder that wraps a tracerecon module's stages as soon as it is imported
    (before any other module can take a reference to them)."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("tracerecon"):
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _wrap_module(module)

        loader.exec_module = exec_module
        return spec


def pipeline_analysis_modules() -> tuple[str, ...]:
    from tracerecon.pipeline import ANALYSIS_MODULES

    return ANALYSIS_MODULES


def main() -> None:
    import importlib

    as_imported = "--as-imported" in sys.argv[1:]
    inputs = [a for a in sys.argv[1:] if a != "--as-imported"]
    if as_imported:
        sys.meta_path.insert(0, _WrapOnImport())
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith("tracerecon"):
                _wrap_module(m)
    else:
        for module in ("tracerecon.api", "tracerecon.pipeline", "tracerecon.cli.render", *pipeline_analysis_modules()):
            importlib.import_module(module)  # the report's own imports, timed here as a whole
    t_imports = time.perf_counter()
    if not as_imported:
        _wrap_everywhere()
    from tracerecon.cli import main as cli_main

    t = T0 if as_imported else time.perf_counter()
    with open(os.devnull, "w") as devnull:
        real, sys.stdout = sys.stdout, devnull
        try:
            cli_main(["report", *inputs])
        finally:
            sys.stdout = real
    end = time.perf_counter()
    if as_imported:
        print(f"from the process start (imports where the report makes them): {end - t:.3f} s")
    else:
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
