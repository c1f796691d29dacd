"""Ctrl-C: one line, exit status 130, nothing left running or written, and no wait for the reads
(``tracerecon.interrupts``). The CLI cases interrupt the real program the way a terminal does
(SIGINT to its whole process group) once it is reading."""

from __future__ import annotations

import lzma
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import BIG, H200, SAMPLES

from tracerecon.interrupts import thread_pool


def test_a_pool_left_by_ctrl_c_waits_for_none_of_its_tasks():
    # GIVEN a pool with one task under way (it waits until released) and one not yet started
    release, started = threading.Event(), threading.Event()

    def blocked():
        started.set()
        release.wait(60)
        return "done"

    # WHEN Ctrl-C arrives while the block waits for it
    with pytest.raises(KeyboardInterrupt):
        with thread_pool(1) as pool:
            running = pool.submit(blocked)
            queued = pool.submit(lambda: "never")
            started.wait(60)
            raise KeyboardInterrupt
    # THEN the block is left with the task still under way and the other cancelled
    try:
        assert not running.done()
        assert queued.cancelled()
    finally:
        release.set()
    assert running.result(60) == "done"


def test_a_pool_left_by_an_error_still_waits_for_its_tasks():
    # GIVEN a task under way that ends on its own shortly after the block fails
    started = threading.Event()

    def slow():
        started.set()
        time.sleep(0.3)
        return "done"

    # WHEN the block raises an ordinary error
    with pytest.raises(ValueError):
        with thread_pool(1) as pool:
            running = pool.submit(slow)
            started.wait(60)
            raise ValueError("bad input")
    # THEN the task had finished when the block was left (an error is not Ctrl-C)
    assert running.done() and running.result() == "done"


def _exe() -> str:
    return shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")


def _threads(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _interrupt_when(args: list[str], ready, env: dict, timeout: float = 120, sig: int = signal.SIGINT):
    """Run the program in a session of its own, send ``sig`` (SIGINT: Ctrl-C) to the whole group
    once ``ready(pid)`` holds, and return (exit status, stdout, stderr, what ``ready`` returned, pid)."""
    proc = subprocess.Popen([_exe(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = None
    try:
        end = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < end:
            seen = ready(proc.pid)
            if seen:
                os.killpg(proc.pid, sig)
                break
            time.sleep(0.002)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err, seen, proc.pid


@pytest.fixture(scope="module")
def big_export(tmp_path_factory) -> Path:
    if not BIG.is_file():
        pytest.skip(f"{BIG} not found (set TRACERECON_SHARED)")
    out = tmp_path_factory.mktemp("big") / "big_launch.sqlite"
    with lzma.open(BIG) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def test_ctrl_c_during_a_read_says_so_in_one_line_and_leaves_nothing(big_export, tmp_path):
    # GIVEN a cold report of the 76 MB export, its temporary files in a folder of their own
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = tmp_path / "cache"
    env = dict(os.environ, TMPDIR=str(tmp), TRACERECON_CACHE_DIR=str(cache))
    # WHEN Ctrl-C arrives once its reads run on threads of their own
    code, out, err, seen, _ = _interrupt_when(["report", str(big_export)], lambda pid: _threads(pid) >= 3, env)
    # THEN it was interrupted while reading, said so in one line and exited 130, leaving no
    # temporary or half-written cache file and nothing beside the input
    assert seen, "the report ended before its reads were seen running"
    assert code == 130, err
    assert err == "tracerecon: interrupted\n"
    assert out == ""
    assert not list(tmp.iterdir())
    assert not cache.exists() or not list(cache.glob("*.tmp"))
    assert sorted(p.name for p in big_export.parent.iterdir()) == ["big_launch.sqlite"]


def test_ctrl_c_during_a_load_of_several_ranks_stops_the_workers(tmp_path):
    # GIVEN a cold report of two ranks, read in two worker processes (each of which would
    # cache its rank's analysis once done)
    cache = tmp_path / "cache"
    env = dict(os.environ, TRACERECON_CACHE_DIR=str(cache))
    files = [str(H200 / "eagle_gpu_rank0.sqlite"), str(H200 / "eagle_gpu_rank1.sqlite")]
    # WHEN Ctrl-C arrives (to the whole process group, as from a terminal) once a worker runs
    code, out, err, workers, pid = _interrupt_when(["report", "--jobs", "2", *files], _children, env)
    # THEN one line, exit 130; the workers were stopped, not waited for (neither cached a
    # result), and neither they nor a hand-off file of this load is left
    assert workers, "the report ended before a worker process was seen"
    assert code == 130, err
    assert err == "tracerecon: interrupted\n"
    end = time.monotonic() + 30
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
    assert not cache.exists() or not list(cache.iterdir())
    assert not list(Path("/dev/shm").glob(f"tracerecon-handoff-{pid}-*"))


def test_quitting_view_while_it_loads_leaves_the_load_behind(big_export, tmp_path):
    # GIVEN `view` of the 76 MB export in a terminal, with a cache (a load that runs to its end
    # caches the analysis)
    import pty
    import select

    cache = tmp_path / "cache"
    env = dict(os.environ, TRACERECON_CACHE_DIR=str(cache), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the program, on the terminal
        try:
            os.execve(_exe(), [_exe(), "view", str(big_export)], env)
        finally:
            os._exit(127)
    screen = b""
    status = None
    try:
        # WHEN `q` is pressed as soon as it says it is loading
        end = time.monotonic() + 120
        while b"loading" not in screen and time.monotonic() < end:
            if select.select([fd], [], [], 0.05)[0]:
                screen += os.read(fd, 65536)
        assert b"loading" in screen, screen[-500:]
        os.write(fd, b"q")
        while status is None and time.monotonic() < end:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:  # the terminal closed: the program ended
                    pass
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    # THEN it exited 0 without finishing the load (nothing was cached)
    assert status is not None and os.waitstatus_to_exitcode(status) == 0
    assert not cache.exists() or not list(cache.iterdir())


@pytest.mark.parametrize("sig, said, status", [(signal.SIGINT, "interrupted", 130), (signal.SIGTERM, "terminated", 143)])
def test_stopped_while_workers_decompress_xz_exports_leaves_no_copy_and_no_worker(tmp_path, sig, said, status):
    # GIVEN a cold report of two .xz-compressed ranks, each decompressed by a worker process
    # into the temporary directory (a folder of its own here)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), TRACERECON_NO_CACHE="1")
    run = SAMPLES / "demo_shapes_h200x2" / "nccl_overlap_skew"
    copies = lambda pid: list(tmp.glob("tracerecon-*.sqlite")) and _children(pid)  # noqa: E731
    # WHEN Ctrl-C or SIGTERM reaches the whole process group once a copy is being written
    code, out, err, workers, pid = _interrupt_when(["report", "--jobs", "2", str(run)], copies, env, sig=sig)
    # THEN one line and the signal's status; no worker outlives it and no decompressed copy is
    # left (before, a worker stopped mid-file left its copy: 5-25 MB in /tmp per interrupt)
    assert workers, "the report ended before a copy was seen"
    assert (code, err, out) == (status, f"tracerecon: {said}\n", "")
    end = time.monotonic() + 30
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)
    assert not list(tmp.iterdir())


def _program_patched(patch: str, argv: list[str]) -> subprocess.CompletedProcess:
    """The ``tracerecon`` program (``console_main``) run with ``argv``, in a Python process that
    first runs ``patch`` (with os, signal and sys imported): to send a signal from a given place."""
    code = (f"import os, signal, sys\n{patch}from tracerecon.cli import console_main\n"
            f"sys.argv = ['tracerecon', *{argv!r}]\nsys.exit(console_main())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_sigterm_inside_scrubs_sql_is_said_as_terminated(tmp_path):
    # GIVEN scrub, with SIGTERM sent for real from inside its SQL text function, where most of a
    # scrub's time goes (SQLite reports the signal's exception as a failed function: it was
    # said as Ctrl-C, "interrupted", 130)
    out = tmp_path / "out.sqlite"
    patch = ("import tracerecon.nsys.scrub as s\n"
             "orig, sent = s.scrub_text, []\n"
             "def scrub_text(v, hosts=()):\n"
             "    if not sent:\n"
             "        sent.append(1)\n"
             "        os.kill(os.getpid(), signal.SIGTERM)\n"
             "    return orig(v, hosts)\n"
             "s.scrub_text = scrub_text\n")
    # WHEN run THEN "terminated", 143, and no output or half-scrubbed copy is left
    res = _program_patched(patch, ["scrub", str(H200 / "eagle_gpu_bound.sqlite"), "-o", str(out)])
    assert (res.returncode, res.stderr) == (143, "tracerecon: terminated\n")
    assert not list(tmp_path.iterdir())


def test_a_signal_swallowed_where_it_landed_is_still_what_the_program_says(tmp_path):
    # GIVEN a report during which SIGTERM lands where its exception is swallowed (as inside the
    # import machinery's callbacks: "Exception ignored in ..."), after which the work fails
    # another way (its workers, stopped by the same signal, broke the pool: an internal error)
    patch = ("import tracerecon.cli.report as r\n"
             "def fake(args):\n"
             "    class Swallows:\n"
             "        def __del__(self):\n"
             "            os.kill(os.getpid(), signal.SIGTERM)\n"
             "    Swallows()\n"
             "    raise RuntimeError('A process in the process pool was terminated abruptly')\n"
             "r.main = fake\n")
    # WHEN run THEN one line says it was terminated, 143: no "Exception ignored" traceback and
    # no internal error
    res = _program_patched(patch, ["report", str(H200 / "eagle_gpu_bound.sqlite")])
    assert (res.returncode, res.stderr) == (143, "tracerecon: terminated\n")


def test_a_block_left_by_an_error_does_not_wait_for_its_imports():
    # GIVEN a once_reading block whose import thread cannot finish (a module whose import waits
    # on an event: as one waiting for an import lock the main thread kept)
    import types

    from tracerecon.import_ahead import once_reading, reading_started

    gate = threading.Event()
    finder_name = "tracerecon_test_waits_forever"

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name != finder_name:
                return None
            import importlib.machinery

            class Loader:
                def create_module(self, spec):
                    return types.ModuleType(name)

                def exec_module(self, module):
                    gate.wait(30)

            return importlib.machinery.ModuleSpec(name, Loader())

    sys.meta_path.insert(0, Finder())
    try:
        began = time.monotonic()
        # WHEN the block is left by an error once its import thread has started
        with pytest.raises(ValueError):
            with once_reading([finder_name]):
                reading_started()
                time.sleep(0.05)
                raise ValueError("the pool broke")
        # THEN it returns at once, not after the import (30 s, or never)
        assert time.monotonic() - began < 5
    finally:
        gate.set()
        sys.meta_path.pop(0)
        sys.modules.pop(finder_name, None)


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_130(tmp_path):
    import signal as _signal
    import subprocess as _subprocess
    import sys as _sys

    # GIVEN the program started as `python -m tracerecon` does, with the import of one of its
    # command modules held up for 5 s (as a slow disk or a cold cache would)
    code = ("import sys, time, importlib.abc\n"
            "class Slow(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'tracerecon.cli.report':\n"
            "            print('loading', flush=True)\n"
            "            time.sleep(5)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Slow())\n"
            "sys.argv = ['tracerecon', '--help']\n"
            "from tracerecon.program import main\n"
            "raise SystemExit(main())\n")
    proc = _subprocess.Popen([_sys.executable, "-c", code], stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, text=True)
    # WHEN Ctrl-C comes while that import runs
    assert proc.stdout.readline().strip() == "loading"
    proc.send_signal(_signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    # THEN the program ends at once as it does later: one line, exit 130, no traceback
    assert (proc.returncode, err) == (130, "tracerecon: interrupted\n"), err
