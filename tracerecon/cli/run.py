"""``tracerecon run -- CMD``: profile a program under Nsight Systems, export, report."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from tracerecon.cli.common import add_phase_args, config_from, console, say as _say, warn_all
from tracerecon.errors import BadTraceError, LaunchError, TraceReconError
from tracerecon.run_dir import CPU_TIMERS_ENV, CPU_TIMERS_PREFIX, RUN_JSON


def add(sub) -> None:
    p = sub.add_parser(
        "run",
        help="profile a command under nsys (torchrun: one report per rank), export to SQLite, report",
        usage="tracerecon run [options] -- CMD [ARGS...]",
        description="Runs CMD under Nsight Systems with the options tracerecon needs (those you did not pass and this nsys "
                    "supports), one report per rank under torchrun, exports each to SQLite, writes run.json, and prints the report. "
                    "Exits with the program's exit code.",
    )
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: tracerecon-run-<timestamp>)")
    p.add_argument("--nsys", metavar="PATH", help="nsys executable (default: $TRACERECON_NSYS, PATH, usual install places)")
    p.add_argument("-t", "--trace", metavar="LIST", help="nsys --trace (default cuda,nvtx,osrt)")
    p.add_argument("-c", "--capture-range", metavar="KIND", help="nsys --capture-range (cudaProfilerApi, nvtx, ...)")
    p.add_argument("--capture-range-end", metavar="SPEC", help="nsys --capture-range-end")
    p.add_argument("-p", "--nvtx-capture", metavar="RANGE", help="nsys --nvtx-capture (with -c nvtx)")
    p.add_argument("--cuda-graph-trace", choices=["node", "graph"], help="nsys --cuda-graph-trace (default node)")
    p.add_argument("--nsys-arg", action="append", default=[], metavar="ARG", help="any other `nsys profile` option, e.g. --nsys-arg=--delay=5 (repeatable)")
    p.add_argument("--scrub", action="store_true", help="scrub the exports (environment, paths, host names, secrets)")
    p.add_argument("--wrap", action="append", default=[], metavar="MOD:QUAL=PHASE", help="wrap a callable in a phase range in every process (repeatable)")
    p.add_argument("--phases", action="append", default=[], metavar="PRESET", help="wrap an engine's phase methods: sglang-eagle, vllm-eagle")
    p.add_argument("--cpu-timers", action="store_true", help="engines using tracerecon.instrument also log naive perf_counter phase times")
    add_phase_args(p)
    p.add_argument("--no-report", action="store_true", help="profile and export only")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program to profile, after --")
    p.set_defaults(func=main)



def _nvtx_package_warning(nsys_version: tuple[int, ...]) -> str | None:
    """nsys 2022.4 records nothing from the nvtx package 0.2.11+ (measured): say so up front."""
    if not nsys_version or nsys_version[0] >= 2023:
        return None
    try:
        from importlib.metadata import version

        v = tuple(int(x) for x in version("nvtx").split(".")[:3])
    except Exception:
        return None
    if v >= (0, 2, 11):
        return f"nsys {'.'.join(map(str, nsys_version[:2]))} records no ranges from nvtx {'.'.join(map(str, v))}; pip install 'nvtx==0.2.10' for this nsys"
    return None


def main(args: argparse.Namespace) -> int:
    from tracerecon.nsys.launch import RunRequest, run_profiled
    from tracerecon.nsys.locate import find_nsys
    from tracerecon.wrap import ENV_SPEC, SITECUSTOMIZE, expand

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise TraceReconError("nothing to run: tracerecon run [options] -- CMD [ARGS...]")
    import shutil

    if shutil.which(command[0]) is None:
        what = "not executable" if Path(command[0]).exists() else "no such program"
        raise TraceReconError(f"cannot run {command[0]}: {what}")
    nsys = find_nsys(args.nsys)
    warn = _nvtx_package_warning(nsys.version_tuple)
    if warn:
        _say(f"warning: {warn}")
    out = Path(args.output or time.strftime("tracerecon-run-%Y%m%d-%H%M%S"))
    nsys_args = list(args.nsys_arg)
    for opt, val in (("--trace", args.trace), ("--capture-range", args.capture_range), ("--capture-range-end", args.capture_range_end),
                     ("--nvtx-capture", args.nvtx_capture), ("--cuda-graph-trace", args.cuda_graph_trace)):
        if val:
            nsys_args.append(f"{opt}={val}")
    env: list[tuple[str, str]] = []
    try:
        targets = expand(args.wrap, args.phases)
    except ValueError as exc:
        raise TraceReconError(str(exc)) from None
    if targets:
        site = out / ".tracerecon_site"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        pkg_parent = str(Path(__file__).resolve().parents[2])  # the directory holding the tracerecon package
        parts = [str(site.resolve()), pkg_parent] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        env += [("PYTHONPATH", os.pathsep.join(parts)), (ENV_SPEC, ";".join(t.spec() for t in targets))]
    if args.cpu_timers:
        env.append((CPU_TIMERS_ENV, str((out / CPU_TIMERS_PREFIX).resolve())))

    result = run_profiled(RunRequest(tuple(command), out, tuple(nsys_args), tuple(env)), nsys, _say)

    failed_import = [r for r in result.reports if r.error]
    for r in failed_import:
        _say(f"error: {r.error}")
    if not result.reports:
        _say("error: nsys produced no report (see its output above)")
    if result.program_exit_code != 0:
        _say(f"the profiled program exited with code {result.program_exit_code}; traces kept in {out}")
    if args.scrub:
        from tracerecon.nsys.scrub import scrub_export, scrub_run_dir

        for path in result.sqlite_files:
            tmp = Path(path).with_suffix(".scrubbing.sqlite")
            scrub_export(path, tmp)
            os.replace(tmp, path)
        removed = scrub_run_dir(out)
        _say(f"scrubbed {len(result.sqlite_files)} export(s) and {RUN_JSON}; removed the unscrubbed nsys reports ({', '.join(removed) or 'none'})")
    if result.sqlite_files and not args.no_report:
        from tracerecon import api
        from tracerecon.cli.render import print_report

        try:
            analysis = api.load([str(out)], config_from(args))
            warn_all(analysis.warnings)
            print_report(analysis, console())
        except BadTraceError as exc:
            _say(f"warning: no report: {exc}")
    _say(f"run directory: {out} ({RUN_JSON}, {len(result.sqlite_files)} SQLite export(s))")
    if result.program_exit_code != 0:
        return result.program_exit_code
    if failed_import or not result.reports:
        raise LaunchError("profiling finished but not every report could be imported and exported (see above)")
    if result.interrupted:
        return 130
    return 0
