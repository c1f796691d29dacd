"""``tracerecon run -- CMD``: profile a program under Nsight Systems, export, report."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracerecon.cli.common import add_phase_args, config_from, console, output_path, say as _say, warn_all
from tracerecon.errors import BadTraceError, LaunchError, TraceReconError, UsageError
from tracerecon.presets import LEGACY_ALIASES, PRESETS as PRESET_NAMES
from tracerecon.run_dir import CPU_TIMERS_ENV, CPU_TIMERS_PREFIX, RUN_JSON, record_phase_options


def add(sub) -> None:
    p = sub.add_parser(
        "run",
        help="profile a command under nsys (torchrun: one report per rank), export to SQLite, report",
        usage="tracerecon run [options] -- CMD [ARGS...]",
        description="Runs CMD under Nsight Systems with the options tracerecon needs (those you did not pass and this nsys "
                    "supports), one report per rank under torchrun, exports each to SQLite, writes run.json, and prints the report. "
                    "Exits with the program's exit code.",
    )
    p.add_argument("-o", "--output", type=output_path, metavar="DIR", help="output directory (default: tracerecon-run-<timestamp>)")
    p.add_argument("--nsys", metavar="PATH", help="nsys executable (default: $TRACERECON_NSYS, PATH, usual install places)")
    p.add_argument("-t", "--trace", metavar="LIST", help="nsys --trace (default cuda,nvtx,osrt)")
    p.add_argument("-c", "--capture-range", metavar="KIND", help="nsys --capture-range (cudaProfilerApi, nvtx, ...)")
    p.add_argument("--capture-range-end", metavar="SPEC", help="nsys --capture-range-end")
    p.add_argument("-p", "--nvtx-capture", metavar="RANGE", help="nsys --nvtx-capture (with -c nvtx)")
    p.add_argument("--cuda-graph-trace", choices=["node", "graph"], help="nsys --cuda-graph-trace (default node)")
    p.add_argument("--nsys-arg", action="append", default=[], metavar="ARG", help="any other `nsys profile` option, e.g. --nsys-arg=--delay=5 (repeatable)")
    p.add_argument("--scrub", action="store_true", help="scrub the exports (environment, paths, host names, secrets)")
    p.add_argument("--wrap", action="append", default=[], metavar="MOD:QUAL=PHASE",
                   help="wrap a callable in a phase range in every process (repeatable; PHASE:begin / :end / :stop make a "
                        "range span calls, @cycle marks one cycle per call: see tracerecon.wrap); a target the installed "
                        "package does not have is an error before profiling starts")
    p.add_argument("--preset", action="append", default=[], metavar="ENGINE",
                   help=f"an engine's phases with no code edits ({', '.join(sorted(PRESET_NAMES))}): sets its NVTX switches, maps "
                        "its own ranges and wraps the methods of the installed version that it does not mark; recorded in run.json")
    p.add_argument("--phases", action="append", default=[], metavar="PRESET",
                   help=f"old name of --preset ({', '.join(f'{k} = {v}' for k, v in sorted(LEGACY_ALIASES.items()))})")
    p.add_argument("--cpu-timers", action="store_true", help="engines using tracerecon.instrument also log naive perf_counter phase times")
    add_phase_args(p, presets=False)
    p.add_argument("--no-report", action="store_true", help="profile and export only")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program to profile, after --")
    p.set_defaults(func=main)



def _nvtx_package_warning(nsys_version: tuple[int, ...], nvtx_version: str | None = None) -> str | None:
    """nsys 2022.4 records nothing from the nvtx package 0.2.11+ (measured): say so up front.
    ``nvtx_version``: the version in the launch environment when known, else this one's."""
    if not nsys_version or nsys_version[0] >= 2023:
        return None
    try:
        from importlib.metadata import version

        v = tuple(int(x) for x in (nvtx_version or version("nvtx")).split(".")[:3])
    except Exception:
        return None
    if v >= (0, 2, 11):
        return f"nsys {'.'.join(map(str, nsys_version[:2]))} records no ranges from nvtx {'.'.join(map(str, v))}; pip install 'nvtx==0.2.10' for this nsys"
    return None


@dataclass(frozen=True)
class WrapPlan:
    """What ``run`` adds to the profiled program, decided before it starts."""

    targets: tuple = ()  # wrap.WrapTarget, each once
    env: tuple[tuple[str, str], ...] = ()  # the engines' NVTX switches
    messages: tuple[str, ...] = ()  # for stderr, in order
    phase_options: dict = field(default_factory=dict)  # for run.json (empty: record nothing)
    nvtx_version: str | None = None  # the nvtx package in the launch environment, when looked up


def _plan_wraps(args: argparse.Namespace, command: list[str]) -> WrapPlan:
    """What to wrap, the environment to add and the phase options to record, checked against the
    launch environment before anything runs. UsageError for a ``--wrap`` target the installed
    package does not have, or a preset none of whose name sets the installed engine has."""
    from tracerecon import presets
    from tracerecon.wrap import check_targets, command_python, import_roots, launch_python, parse_all, probe, scripts_run

    try:
        targets = parse_all(args.wrap)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    chosen_presets = [presets.get(n) for n in args.preset]
    messages = []
    for name in args.phases:
        preset = presets.get(name)
        messages.append(f"--phases {name} is now --preset {preset.name} (version-aware); using that")
        chosen_presets.append(preset)
    chosen_presets = list(dict.fromkeys(chosen_presets))
    options: dict = {}
    if args.phase or args.cycle is not None:
        options = {"phases": list(args.phase or []), **({"cycle_prefix": args.cycle} if args.cycle is not None else {})}
    # How the run's own report read the phases, for `report DIR` to read them so too (an empty
    # --cycle "" included: no cycle ranges).
    analysed = {k: v for k, v in (("phase_thread", args.phase_thread), ("skip_cycles", args.skip_cycles)) if v is not None}
    if not targets and not chosen_presets:
        return WrapPlan(messages=tuple(messages), phase_options={**{k: v for k, v in options.items() if k != "phases" or v}, **analysed})
    python = launch_python(command)
    lookups = [t.target for t in targets] + [presets.target_of(s) for p in chosen_presets for s in presets.all_specs(p)]
    dists = ["nvtx"] + [p.dist for p in chosen_presets] + [t.module.split(".")[0] for t in targets]
    found = probe(python, dict(os.environ), list(dict.fromkeys(dists)), list(dict.fromkeys(lookups)), import_roots(command))
    messages.extend(f"warning: {w}" for w in check_targets(targets, found, interpreter_known=command_python(command) is not None,
                                                           scripts=scripts_run(command)))
    env: list[tuple[str, str]] = []
    phases: list[str] = []
    recorded_presets = []
    for p in chosen_presets:
        # (a command that names no Python, `bash serve.sh`, was looked up in tracerecon's own)
        told = python if command_python(command) is not None else f"{python} (tracerecon's own: {command[0] if command else 'the command'} names no Python interpreter)"
        choice = presets.choose(p, found.versions.get(p.dist), found.found, told)
        shown = f"{p.dist} {choice.version}" if choice.version else f"{p.dist} (version unknown)"
        messages.extend(f"warning: {w}" for w in choice.warnings)
        if choice.missing_optional:
            messages.append(f"warning: preset {p.name}: no accepted-token count from {shown}: {', '.join(choice.missing_optional)} not there")
        for key, value in p.env:
            if key in os.environ and os.environ[key] != value:
                messages.append(f"warning: preset {p.name}: keeping {key}={os.environ[key]} from your environment (the preset sets {value})")
            else:
                env.append((key, value))
        if p.name == "vllm" and os.environ.get("VLLM_CUSTOM_SCOPES_FOR_PROFILING", "0") not in ("", "0"):
            messages.append("warning: VLLM_CUSTOM_SCOPES_FOR_PROFILING is set: vLLM emits torch scopes instead of NVTX ones")
        messages.append(f"preset {p.name}: {shown} in {python}: the {choice.name_set.name} names; "
                        f"{', '.join(f'{k}={v}' for k, v in p.env)}")
        targets += parse_all(choice.wraps)
        phases += p.phases
        recorded_presets.append({"name": p.name, "engine": p.dist, "version": choice.version, "names": choice.name_set.name})
    options = {"phases": list(args.phase) if args.phase else list(dict.fromkeys(phases)),
               **({"cycle_prefix": args.cycle} if args.cycle is not None else {}), "presets": recorded_presets, **analysed}
    return WrapPlan(tuple(dict.fromkeys(targets)), tuple(env), tuple(messages), options, found.versions.get("nvtx"))


def _captures_on_nvtx(nsys_args: list[str]) -> bool:
    """Whether nsys is told to record from an NVTX range on (``--capture-range=nvtx``)."""
    for i, a in enumerate(nsys_args):
        if a in ("-c", "--capture-range") and i + 1 < len(nsys_args):
            a = f"--capture-range={nsys_args[i + 1]}"
        if a.startswith(("--capture-range=", "-c=")) and a.split("=", 1)[1].strip().lower() == "nvtx":
            return True
    return False


def _say_kept(kept: list[str]) -> None:
    """``run --scrub``'s word on the nsys reports it kept: no export was made from them."""
    if kept:
        _say(f"warning: kept the unscrubbed nsys report(s) {', '.join(kept)}: no SQLite export was made from them (see above), and they are "
             "the trace's only copy; they hold everything scrub removes: do not share them")


def _refuse_used_output(out: Path) -> None:
    """A run never writes into a directory that holds anything (an earlier run's traces would
    be replaced), nor over a file, nor into one whose name holds ``%``, which nsys expands in its
    output names (the report went to a folder of another name, or to /tmp)."""
    if "%" in str(out):
        raise UsageError(f"-o {out}: nsys would read the '%' as one of its own expansions (%p: its process id, %h: the host name); choose a name without '%'")
    if out.is_dir():
        try:
            used = next(out.iterdir(), None) is not None
        except OSError as exc:
            raise UsageError(f"-o {out}: cannot list it ({exc.strerror or exc})") from None
        if used:
            raise UsageError(f"-o {out}: the directory is not empty (an earlier run's traces would be replaced); choose a new one")
    elif out.exists() or out.is_symlink():
        raise UsageError(f"-o {out}: exists and is no directory; choose a new one")


def _new_run_dir() -> Path:
    """A run directory of its own, made now: ``tracerecon-run-<time>``, or ``...-2``, ``-3`` where
    a run started in the same second has that one (two runs sharing one overwrote each other)."""
    base = time.strftime("tracerecon-run-%Y%m%d-%H%M%S")
    for n in range(1, 10_000):
        out = Path(base if n == 1 else f"{base}-{n}")
        try:
            out.mkdir()
            return out
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot create a run directory here ({exc.strerror or exc}); give one with -o") from None
    raise UsageError(f"{base}-*: no free run directory name; give one with -o")


def main(args: argparse.Namespace) -> int:
    from tracerecon.nsys.launch import RunRequest, run_profiled
    from tracerecon.nsys.locate import find_nsys
    from tracerecon.wrap import ENV_SPEC, SITECUSTOMIZE, SPEC_SEPARATOR

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise TraceReconError("nothing to run: tracerecon run [options] -- CMD [ARGS...]")
    import shutil

    if shutil.which(command[0]) is None:
        what = "not executable" if Path(command[0]).exists() else "no such program"
        raise TraceReconError(f"cannot run {command[0]}: {what}")
    if args.output:
        _refuse_used_output(Path(args.output))
    # Checked before nsys is even looked for: a wrong name is the user's to fix first, and a
    # bad --phase, --phase-thread or --skip-cycles before hours of profiling (and never recorded).
    config_from(args, [])
    plan = _plan_wraps(args, command)
    for m in plan.messages:
        _say(m)
    targets, env = plan.targets, list(plan.env)
    nsys = find_nsys(args.nsys)
    warn = _nvtx_package_warning(nsys.version_tuple, plan.nvtx_version)
    if warn:
        _say(f"warning: {warn}")
    out = Path(args.output) if args.output else _new_run_dir()
    nsys_args = list(args.nsys_arg)
    for opt, val in (("--trace", args.trace), ("--capture-range", args.capture_range), ("--capture-range-end", args.capture_range_end),
                     ("--nvtx-capture", args.nvtx_capture), ("--cuda-graph-trace", args.cuda_graph_trace)):
        if val:
            nsys_args.append(f"{opt}={val}")
    if targets:
        site = out / ".tracerecon_site"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        pkg_parent = str(Path(__file__).resolve().parents[2])  # the directory holding the tracerecon package
        parts = [str(site.resolve()), pkg_parent] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        env += [("PYTHONPATH", os.pathsep.join(parts)), (ENV_SPEC, SPEC_SEPARATOR.join(t.spec() for t in targets))]
    if args.cpu_timers:
        env.append((CPU_TIMERS_ENV, str((out / CPU_TIMERS_PREFIX).resolve())))

    shown = list
    if args.scrub:  # what is printed (the command line echoed) is shared like the run directory
        from tracerecon.nsys.scrub import redact_command

        shown = redact_command
    result = run_profiled(RunRequest(tuple(command), out, tuple(nsys_args), tuple(env)), nsys, _say, shown=shown)
    if plan.phase_options:
        try:
            record_phase_options(out, plan.phase_options)
        except (OSError, ValueError) as exc:
            _say(f"warning: phase options not recorded in {out / RUN_JSON} ({exc}); give --phase again to report")

    if not result.reports:  # nsys failed before the program ran, or left no trace
        if args.scrub:  # run.json holds the command line all the same
            from tracerecon.nsys.scrub import scrub_run_dir

            _say_kept(scrub_run_dir(out)[1])
        if result.interrupted:
            _say(f"error: interrupted before nsys wrote a report: no trace; run directory: {out}")
            return 130
        # Recording from an NVTX range on that never began ends so too: say how such a range is named.
        hint = ("; with --capture-range nvtx nsys records only once a range --nvtx-capture names begins, a domain's "
                "as NAME@DOMAIN (tracerecon.instrument's phases: -p 'verify@tracerecon')") if _captures_on_nvtx(nsys_args) else ""
        raise LaunchError(f"nsys produced no report (exit code {result.program_exit_code}; see its output above){hint}; run directory: {out}")
    failed_import = [r for r in result.reports if r.error]
    for r in failed_import:
        _say(f"error: {r.error}")
    if result.program_exit_code != 0:
        _say(f"the profiled program exited with code {result.program_exit_code}; traces kept in {out}")
    if args.scrub:
        from tracerecon.nsys.scrub import scrub_export, scrub_run_dir

        for path in result.sqlite_files:
            tmp = Path(path).with_suffix(".scrubbing.sqlite")
            tmp.unlink(missing_ok=True)  # (an interrupted earlier --scrub's)
            scrub_export(path, tmp)
            os.replace(tmp, path)
        removed, kept = scrub_run_dir(out)
        _say(f"scrubbed {len(result.sqlite_files)} export(s) and {RUN_JSON}; removed the unscrubbed nsys reports ({', '.join(removed) or 'none'})")
        _say_kept(kept)
    if result.sqlite_files and not args.no_report:
        from tracerecon import api
        from tracerecon.cli.render import print_report

        try:
            report = api.report([str(out)], config_from(args, [str(out)]))
            warn_all(report.warnings)
            print_report(report, console())
        except BadTraceError as exc:
            _say(f"warning: no report: {exc}")
    _say(f"run directory: {out} ({RUN_JSON}, {len(result.sqlite_files)} SQLite export(s))")
    if result.program_exit_code != 0:
        return result.program_exit_code
    if failed_import:
        raise LaunchError("profiling finished but not every report could be imported and exported (see above)")
    if result.interrupted:
        return 130
    return 0
