"""``tracerecon run``: profile a command under nsys, import, export to SQLite, keep everything.

- torchrun / ``python -m torch.distributed.run`` commands get one report per rank: nsys is
  inserted per worker through torchrun's ``--no-python`` and ``-o DIR/rank%q{RANK}``.
  Any other command gets one report for its whole process tree.
- When nsys leaves a ``.qdstrm`` (its importer missing or broken, as in Debian's package),
  the QdstrmImporter beside the install is run; if that fails too the ``.qdstrm`` is kept and
  the error says how to retry.
- The program's own failure is not ours: traces are kept, exported, and the exit code is the
  program's. Ctrl-C stops the profiled program alone (its process group), and nsys then writes the trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tracerecon.run_dir import RUN_JSON, rank_from_filename
from tracerecon.errors import LaunchError
from tracerecon.nsys.locate import NsysInstall, find_importer

Say = Callable[[str], None]

# Defaults added only when the user did not pass the option (and this nsys knows it).
PROFILE_DEFAULTS = (
    ("--trace", "cuda,nvtx,osrt"),
    ("--sample", "none"),
    ("--cpuctxsw", "none"),
    ("--cuda-graph-trace", "node"),  # every graph node kernel, so phases see graph work in detail
    ("--kill", "none"),
    ("--force-overwrite", "true"),
    # Worker processes forked without exec (Python multiprocessing's default on Linux, engines'
    # worker pools) are traced too: without it nsys leaves them out, and their ranks with them.
    ("--trace-fork-before-exec", "true"),
)
SHORT_OPTIONS = {"-t": "--trace", "-s": "--sample", "-c": "--capture-range", "-o": "--output", "-f": "--force-overwrite", "-x": "--stop-on-exit", "-p": "--nvtx-capture", "-d": "--duration", "-y": "--delay", "-b": "--backtrace", "-w": "--show-output", "-n": "--inherit-environment", "-e": "--env-var"}
# torchrun options that take no value.
TORCHRUN_FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path", "--use-env", "--use_env", "--use-env=True"})


@dataclass(frozen=True)
class RunRequest:
    command: tuple[str, ...]
    out_dir: Path
    nsys_args: tuple[str, ...] = ()  # passed to `nsys profile` as given, before the defaults
    extra_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ReportFiles:
    rank: int | None
    base: str  # path without extension
    nsys_rep: str | None = None
    sqlite: str | None = None
    qdstrm: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    request: RunRequest
    nsys: NsysInstall
    launched: tuple[str, ...]
    program_exit_code: int
    interrupted: bool
    reports: tuple[ReportFiles, ...]
    timings_s: dict = field(default_factory=dict)
    per_rank: bool = False

    @property
    def sqlite_files(self) -> list[str]:
        return [r.sqlite for r in self.reports if r.sqlite]


def _option_name(tok: str) -> str | None:
    if tok.startswith("--"):
        return tok.split("=", 1)[0]
    if tok.startswith("-") and len(tok) >= 2:
        return SHORT_OPTIONS.get(tok[:2], tok[:2])
    return None


def profile_args(user_args: Sequence[str], nsys: NsysInstall) -> list[str]:
    """The user's nsys options, plus each default they did not give and this nsys supports."""
    given = {n for n in (_option_name(t) for t in user_args) if n}
    out = list(user_args)
    for opt, value in PROFILE_DEFAULTS:
        if opt not in given and (not nsys.profile_options or nsys.supports(opt)):
            out.append(f"{opt}={value}")
    return out


@dataclass(frozen=True)
class TorchrunCommand:
    launcher: tuple[str, ...]  # ("torchrun",) or ("python", "-m", "torch.distributed.run")
    options: tuple[str, ...]
    module: bool
    no_python: bool
    program: tuple[str, ...]  # script (or module) and its arguments


def parse_torchrun(command: Sequence[str]) -> TorchrunCommand | None:
    """Recognise ``torchrun ...`` and ``python -m torch.distributed.run|launch ...``; None otherwise."""
    if not command:
        return None
    head = os.path.basename(command[0])
    if head == "torchrun":
        launcher, rest = tuple(command[:1]), list(command[1:])
    elif re.fullmatch(r"python[0-9.]*", head) and len(command) >= 3 and command[1] == "-m" and command[2] in ("torch.distributed.run", "torch.distributed.launch"):
        launcher, rest = tuple(command[:3]), list(command[3:])
    else:
        return None
    opts: list[str] = []
    module = no_python = False
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-"):
            break
        opts.append(tok)
        if tok in ("-m", "--module"):
            module = True
        elif tok in ("--no-python", "--no_python"):
            no_python = True
        elif "=" not in tok and tok not in TORCHRUN_FLAGS and i + 1 < len(rest):
            opts.append(rest[i + 1])
            i += 1
        i += 1
    program = tuple(rest[i:])
    if not program:
        return None
    return TorchrunCommand(launcher, tuple(opts), module, no_python, program)


def build_command(request: RunRequest, nsys: NsysInstall, python: str = sys.executable) -> tuple[list[str], bool]:
    """The argv to run, and whether it yields one report per rank."""
    args = profile_args(request.nsys_args, nsys)
    out = request.out_dir
    tr = parse_torchrun(request.command)
    if tr is not None:
        worker = list(tr.program) if tr.no_python else [python] + (["-m"] if tr.module else []) + list(tr.program)
        opts = [o for o in tr.options if o not in ("-m", "--module")]
        if not tr.no_python:
            opts.append("--no-python")
        argv = list(tr.launcher) + opts + [nsys.path, "profile", *args, "-o", str(out / "rank%q{RANK}"), *_nameable(worker)]
        return argv, True
    return [nsys.path, "profile", *args, "-o", str(out / "report"), *_nameable(list(request.command))], False


def _nameable(command: list[str]) -> list[str]:
    """``command``, run through ``sh -c 'exec "$0" "$@"'`` where its program's file name holds
    whitespace: nsys names its session after that file name and then cannot find a session whose
    name holds a space (2022.4: "Failed to find session: profile-run me.sh-5029", and no
    report); the shell execs the program in the same process, which nsys goes on tracing. (Not
    ``env``: it would read a path holding "=" as a variable to set.)"""
    if command and any(c.isspace() for c in os.path.basename(command[0])):
        return [shutil.which("sh") or "/bin/sh", "-c", 'exec "$0" "$@"', *command]
    return command


def _run_program(argv: list[str], env: dict, say: Say) -> tuple[int, bool]:
    """Run argv in its own process group and wait for it. A Ctrl-C (SIGINT/SIGTERM) goes to the
    profiled program alone (``_stop_programs``), so that it stops while nsys still records, and
    nsys writes the trace once it has ended (a SIGINT to nsys itself stops the recording first:
    the program's last ~0.3 s of ranges were lost); a second one goes to the program again where
    it still runs, never to nsys (which may be writing the trace); a third goes to nsys's whole
    process group, which stops nsys (the trace is lost, and said so)."""
    interrupts = 0
    proc = subprocess.Popen(argv, env=env, start_new_session=False, process_group=0)

    def forward(signum, _frame):
        nonlocal interrupts
        interrupts += 1
        try:
            if interrupts == 1:
                say("interrupt: stopping the profiled program; nsys writes the trace once it has ended")
                if not _stop_programs(proc.pid):  # nsys's process tree not readable (or nothing under it yet)
                    os.killpg(proc.pid, signal.SIGINT)
            elif interrupts == 2:
                # The program again where it still runs; never nsys, which may be writing the trace.
                still = _stop_programs(proc.pid)
                say(("interrupt: stopping the profiled program again" if still else "interrupt: nsys is writing the trace")
                    + "; press Ctrl-C once more to stop nsys (the trace is then lost)")
            else:
                say("interrupt: stopping nsys; the trace will be incomplete or missing")
                os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    old_int = signal.signal(signal.SIGINT, forward)
    old_term = signal.signal(signal.SIGTERM, forward)
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return rc, interrupts > 0


def _stop_programs(root: int) -> bool:
    """SIGINT to each profiled program under ``root`` (``_profiled_programs``): to its whole
    process group where it has one apart from nsys's (nsys runs the program in a group of its
    own: a shell or wrapper script's children get it too), else to it alone. False where none
    was found."""
    programs = _profiled_programs(root)
    try:
        ours = os.getpgid(root)
    except ProcessLookupError:
        return False
    for pid in programs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != ours:
                os.killpg(group, signal.SIGINT)
            else:
                os.kill(pid, signal.SIGINT)
    return bool(programs)


def _profiled_programs(root: int) -> list[int]:
    """The processes nsys runs the program as, under ``root``: each process whose parent is one
    of nsys's own (``nsys``, ``nsys-launcher``: the program runs in a process group of its own)
    and which is none of them; under ``torchrun ... nsys profile ... python`` the ranks' Python
    processes. Read from /proc; empty where it cannot be read."""
    procs: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, up to the last ")"
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].lstrip("-").isdigit():
            procs[int(e)] = (int(fields[1]), comm)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    is_nsys = lambda pid: procs.get(pid, (0, ""))[1].startswith("nsys")  # noqa: E731
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if is_nsys(pid) and not is_nsys(child):
                found.append(child)  # the program: its own children get the signal from it
            else:
                todo.append(child)
    return sorted(found)


def import_qdstrm(qdstrm: Path, importer: str | None) -> tuple[Path | None, str | None]:
    """Run QdstrmImporter on a .qdstrm; return (the .nsys-rep, None) or (None, the error)."""
    if importer is None:
        return None, "no QdstrmImporter found beside this nsys (set QDSTRM_IMPORTER=/path/to/QdstrmImporter)"
    # The importer loads its libraries relative to its own directory: run it from there.
    try:
        res = subprocess.run([importer, "-i", str(qdstrm.resolve())], cwd=os.path.dirname(importer), capture_output=True, text=True)
    except OSError as exc:
        return None, f"{importer}: {exc.strerror}"
    rep = qdstrm.with_suffix(".nsys-rep")
    if res.returncode == 0 and rep.exists():
        return rep, None
    text = (res.stderr or res.stdout or "").strip().splitlines()
    detail = next((ln for ln in reversed(text) if ln.strip() and "Processing [" not in ln), f"exit code {res.returncode}")
    return None, detail.strip()


def export_sqlite(nsys: NsysInstall, rep: Path) -> tuple[Path | None, str | None]:
    out = rep.with_suffix(".sqlite")
    res = subprocess.run(
        # (absolute: a run directory named "-weird" would read as an option)
        [nsys.path, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out.absolute()), str(rep.absolute())], capture_output=True, text=True
    )
    if res.returncode == 0 and out.exists():
        return out, None
    lines = [ln for ln in (res.stderr + res.stdout).splitlines() if ln.strip() and "Exporting" not in ln]
    return None, (lines[-1] if lines else f"nsys export exited {res.returncode}")


def collect_reports(out_dir: Path, nsys: NsysInstall, say: Say, timings: dict) -> list[ReportFiles]:
    """Import every .qdstrm left without a report, export every report to SQLite."""
    importer = None
    bases = sorted({p.with_suffix("") for p in out_dir.glob("*.nsys-rep")} | {p.with_suffix("") for p in out_dir.glob("*.qdstrm")})
    reports = []
    for base in bases:
        rep, qd = base.with_suffix(".nsys-rep"), base.with_suffix(".qdstrm")
        error = None
        if not rep.exists() and qd.exists():
            importer = importer or find_importer(nsys.path)
            say(f"nsys left {qd.name} unimported (an 'Importer error' above is that); importing it with {importer or 'QdstrmImporter (not found)'}")
            t0 = time.monotonic()
            got, error = import_qdstrm(qd, importer)
            timings[f"import {qd.name}"] = round(time.monotonic() - t0, 3)
            if got is not None:
                qd.unlink()  # as nsys does after its own import: the .nsys-rep holds it all
                say(f"imported {qd.name} with the fallback importer: the trace is complete")
            else:
                # (the importer as found: $QDSTRM_IMPORTER may name it otherwise; quoted for the shell)
                retry = (f"(cd {shlex.quote(os.path.dirname(importer))} && ./{shlex.quote(os.path.basename(importer))} -i {shlex.quote(str(qd.resolve()))})"
                         if importer else "QdstrmImporter -i " + shlex.quote(str(qd.resolve())))
                error = f"{qd}: import failed: {error}; retry with: {retry}"
        sqlite = None
        if rep.exists():
            say(f"exporting {rep.name} to SQLite")
            t0 = time.monotonic()
            got_sql, err = export_sqlite(nsys, rep)
            timings[f"export {rep.name}"] = round(time.monotonic() - t0, 3)
            sqlite = str(got_sql) if got_sql else None
            if err:
                error = f"{rep}: nsys export failed: {err}"
        reports.append(
            ReportFiles(
                rank=rank_from_filename(base.name),
                base=str(base),
                nsys_rep=str(rep) if rep.exists() else None,
                sqlite=sqlite,
                qdstrm=str(qd) if qd.exists() and not rep.exists() else None,
                error=error,
            )
        )
    return reports


def run_profiled(request: RunRequest, nsys: NsysInstall, say: Say, env: dict | None = None,
                 shown: Callable[[list[str]], list[str]] = list) -> RunResult:
    """Profile, import, export. Writes ``run.json`` into the output directory. The command line
    is said as ``shown`` gives it (``scrub.redact_command`` under ``run --scrub``)."""
    out = request.out_dir
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"{out}: cannot create output directory ({exc.strerror})") from None
    argv, per_rank = build_command(request, nsys)
    env = dict(os.environ if env is None else env)
    env.update(dict(request.extra_env))
    say(f"nsys {nsys.version or '?'} at {nsys.path}")
    say("running: " + shlex.join(shown(argv)))
    timings: dict = {}
    t0 = time.monotonic()
    try:
        rc, interrupted = _run_program(argv, env, say)
    except FileNotFoundError as exc:
        raise LaunchError(f"cannot run {exc.filename}: not found") from None
    timings["profile"] = round(time.monotonic() - t0, 3)
    reports = collect_reports(out, nsys, say, timings)
    result = RunResult(request, nsys, tuple(argv), rc, interrupted, tuple(reports), timings, per_rank)
    write_run_json(result)
    return result


def write_run_json(result: RunResult) -> Path:
    out = result.request.out_dir
    doc = {
        "command": list(result.request.command),
        "launched": list(result.launched),
        "one_report_per_rank": result.per_rank,
        "nsys": {"path": result.nsys.path, "version": result.nsys.version},
        "nsys_args": list(result.request.nsys_args),
        "exit_code": result.program_exit_code,
        "interrupted": result.interrupted,
        "reports": [
            {k: (os.path.basename(v) if isinstance(v, str) and k in ("nsys_rep", "sqlite", "qdstrm", "base") else v) for k, v in asdict(r).items()}
            for r in result.reports
        ],
        "timings_s": result.timings_s,
    }
    path = out / RUN_JSON
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
