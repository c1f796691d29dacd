from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
H200 = SAMPLES / "h200_nsys2025.3.1"
DEMO = SAMPLES / "demo_h200"
DEMO2 = SAMPLES / "demo_h200x2"
SHARED = Path(os.environ.get("TRACERECON_SHARED", ROOT.parent / "shared"))
PUBLIC = SHARED / "traces" / "public"
BIG = SHARED / "traces" / "big" / "big_launch.sqlite.xz"

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests (and the CLI they run) cache into a folder of this session, not ~/.cache."""
    os.environ["TRACERECON_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


def need_public() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip(f"public traces not found at {PUBLIC} (set TRACERECON_SHARED)")
    return PUBLIC


def run_cli(*args: str, env: dict | None = None, cwd: str | None = None, timeout: int = 600):
    """Run the installed `tracerecon` console script for real, as a user would."""
    import shutil
    import subprocess

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def run_profiled(*args: str, env: dict | None = None, timeout: int = 240, attempts: int = 2):
    """``run_cli`` for commands that profile under nsys. Debian's nsys 2022.4 now and then leaves a
    profiled Python hung in ``fork`` while it spawns a child process (its injection's at-fork
    handlers; seen twice in full-suite runs, never in 8 runs of the test alone): each attempt
    runs in its own session, a hung one is killed whole (nsys, its agent, the program and its
    children), its outputs removed (the run directory, a stand-in engine's acceptance log) and
    it is tried again, with a warning; a second hang fails."""
    import shutil
    import subprocess
    import warnings

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    for attempt in range(1, attempts + 1):
        proc = subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            _kill_profiled_tree(proc.pid)
            proc.communicate()
            if attempt == attempts:
                raise
            if "-o" in args:  # the hung attempt's output directory
                shutil.rmtree(args[args.index("-o") + 1], ignore_errors=True)
            if env and env.get("STANDIN_ACCEPT_LOG"):  # and what its engine logged (the retry logs again)
                Path(env["STANDIN_ACCEPT_LOG"]).unlink(missing_ok=True)
            warnings.warn(f"profiled run hung for {timeout} s (nsys 2022.4 at fork); killed and tried again: {' '.join(args)}")


def _kill_profiled_tree(session: int) -> None:
    """SIGKILL everything a profiled run started: the processes of its session, their
    descendants (nsys puts the program in sessions of its own) and the nsys agents named after
    any of them (they are re-parented to init)."""
    import signal

    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(entry)] = (int(fields[1]), int(fields[3]), cmd)  # ppid, session id, command line
    victims = {pid for pid, (_, sid, _) in procs.items() if sid == session}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in victims} - victims
        grew = bool(more)
        victims |= more
    victims |= {pid for pid, (_, _, cmd) in procs.items() if "--session-name=profile-" in cmd and any(cmd.split("--session-name=")[1].split()[0].endswith(f"-{v}") for v in victims)}
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def report_json(analysis) -> dict:
    """The ``report --json`` document of a loaded run."""
    from tracerecon.present import build_report

    return build_report(analysis).to_json()
