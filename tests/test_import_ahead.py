"""Importing on a background thread (tracerecon.import_ahead) while the trace is read.

Its safety rests on one property of the code base, checked here on the sources: tracerecon's
module-level imports form no cycle, so two threads importing its modules at once can wait for
each other but never deadlock. The behaviour is checked in fresh interpreters.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracerecon"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _executed_imports(tree: ast.Module):
    """Import statements that run when the module is imported: its top level, inside try and
    if blocks, but not ``if TYPE_CHECKING:`` (never run) and not inside functions."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


def import_graph() -> dict[str, set[str]]:
    """module -> the tracerecon modules its import runs (parent packages included)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}

    def add(src: str, target: str) -> None:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b, then a.b.c
            name = ".".join(parts[:i])
            if name in modules and name != src:
                graph[src].add(name)

    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        add(mod, mod.rpartition(".")[0])  # a submodule's import runs its package's first
        for node in _executed_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(mod, alias.name)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            add(mod, base)
            for alias in node.names:  # `from pkg import submodule`
                add(mod, f"{base}.{alias.name}")
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (c := visit(n)):
                return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def reachable(graph: dict[str, set[str]], roots: list[str], loaded: set[str]) -> dict[str, set[str]]:
    """The part of ``graph`` that importing ``roots`` can run, with ``loaded`` (modules fully
    imported before any import-ahead thread starts) left out: their locks are never taken again."""
    seen: set[str] = set()
    todo = [r for r in roots if r not in loaded]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(n for n in graph[m] if n not in loaded)
    return {m: {n for n in graph[m] if n in seen} for m in seen}


def test_given_the_import_ahead_lists_then_what_they_import_forms_no_cycle():
    # GIVEN what the import-ahead threads import (the pipeline's analysis modules; the report
    # command's renderer, started from the already imported `tracerecon.cli` package, whose
    # __init__ imports its command modules: a package cycle, safe once it is imported)
    # WHEN the module-level import graph is walked from them THEN it has no cycle, so the
    # main thread importing the same modules meanwhile can wait but never deadlock.
    from tracerecon.pipeline import ANALYSIS_MODULES

    graph = import_graph()
    part = reachable(graph, [*ANALYSIS_MODULES, "tracerecon.cli.render"], loaded={"tracerecon", "tracerecon.cli"})
    assert {"tracerecon.analysis.rank", "tracerecon.analysis.projection", "tracerecon.present"} <= set(part)
    assert find_cycle(part) is None, " -> ".join(find_cycle(part) or [])
    # The same walk does see the cli package cycle when the package is not yet imported.
    assert find_cycle(reachable(graph, ["tracerecon.cli.render"], loaded=set())) is not None


def test_given_a_made_up_cycle_then_the_check_finds_it():
    # GIVEN a graph where a imports b and b imports a (through c) WHEN checked THEN the cycle is named
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_given_relative_and_submodule_imports_then_the_graph_has_them():
    # The graph of the real package: `from tracerecon.analysis.rank import own_rank` adds both
    # the package and the module; `from tracerecon import handoff` adds the submodule.
    graph = import_graph()
    assert {"tracerecon.analysis", "tracerecon.analysis.projection"} <= graph["tracerecon.analysis.rank"]
    assert "tracerecon.import_ahead" in graph["tracerecon.pipeline"]


def _python(code: str) -> str:
    # Cache off: a cached analysis of the export would import no analysis module at all.
    env = dict(os.environ, TRACERECON_NO_CACHE="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout


def _noting_importers(which: str, note: str = "threading.current_thread().name") -> str:
    """Script lines that keep in ``seen``, for each module whose ``name`` makes ``which`` true,
    ``note`` as its first import begins (by default the name of the thread importing it)."""
    return (
        "import sys, threading\n"
        "seen = {}\n"
        "class Hook:\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if {which}:\n"
        f"            seen.setdefault(name, {note})\n"
        "sys.meta_path.insert(0, Hook())\n"
    )


def test_given_import_ahead_when_joined_then_the_modules_are_imported_and_no_thread_is_left():
    out = _python(
        "import sys, threading\n"
        "from tracerecon.import_ahead import ImportAhead, join_all\n"
        "assert 'tracerecon.analysis.rank' not in sys.modules\n"
        "with ImportAhead(['tracerecon.analysis.rank', 'no_such_module_here']):\n"
        "    pass\n"
        "print('tracerecon.analysis.rank' in sys.modules, 'no_such_module_here' in sys.modules)\n"
        "a = ImportAhead(['tracerecon.present'])\n"
        "join_all()\n"
        "print('tracerecon.present' in sys.modules, [t.name for t in threading.enumerate() if t.name.startswith('tracerecon-import')])\n"
    )
    assert out.split("\n")[:2] == ["True False", "True []"]


def test_given_a_failing_import_ahead_then_the_callers_own_import_raises_it():
    # The background thread swallows the error; the caller's import raises it where it belongs.
    out = _python(
        "from tracerecon.import_ahead import ImportAhead\n"
        "with ImportAhead(['no_such_module_here']):\n"
        "    pass\n"
        "try:\n"
        "    import no_such_module_here\n"
        "except ImportError as e:\n"
        "    print('raised', type(e).__name__)\n"
    )
    assert out.strip() == "raised ModuleNotFoundError"


@pytest.mark.parametrize("modules", [["tracerecon.pipeline", "tracerecon.analysis.rank", "tracerecon.cli.render"]])
def test_given_two_threads_importing_the_same_modules_then_both_finish(modules):
    # GIVEN the main thread and an import-ahead thread importing the same modules at once
    # WHEN both run THEN neither deadlocks and each module is imported once.
    out = _python(
        "import importlib, sys\n"
        "from tracerecon.import_ahead import ImportAhead\n"
        f"mods = {modules!r}\n"
        "with ImportAhead(list(reversed(mods))):\n"
        "    for m in mods: importlib.import_module(m)\n"
        "print(all(m in sys.modules for m in mods))\n"
    )
    assert out.strip() == "True"


def test_given_one_export_when_loaded_then_the_analysis_modules_are_imported_during_the_read():
    # GIVEN a fresh interpreter that notes which thread imports each analysis module
    # WHEN it loads one export THEN the import-ahead thread imported them (not the main thread
    #      before the read, which would leave the thread nothing to do)
    from conftest import DEMO

    out = _python(
        _noting_importers("name.startswith('tracerecon.analysis.') or name == 'tracerecon.model'") +
        "from tracerecon import api\n"
        f"api.load([{str(DEMO / 'launch_bound' / 'report.sqlite')!r}])\n"
        "print(seen['tracerecon.analysis.rank'], seen['tracerecon.analysis.cross_rank'])\n"
    )
    assert out.split() == ["tracerecon-import-ahead", "tracerecon-import-ahead"]


def test_given_no_thread_to_spare_then_import_ahead_steps_aside():
    # GIVEN a process where no thread can start WHEN an ImportAhead is made THEN nothing is left
    #       registered: join_all (before any fork) and join return at once
    out = _python(
        "import threading\n"
        "def refuse(self): raise RuntimeError(\"can't start new thread\")\n"
        "threading.Thread.start = refuse\n"
        "from tracerecon.import_ahead import ImportAhead, join_all, _RUNNING\n"
        "a = ImportAhead(['tracerecon.analysis.rank'])\n"
        "join_all(); a.join()\n"
        "print(len(_RUNNING))\n"
    )
    assert out.strip() == "0"


def test_given_a_report_then_its_renderer_is_imported_on_a_thread_once_the_reads_have_started():
    # GIVEN a fresh interpreter that notes which thread imports the renderer, and whether the
    #       trace's reads had been started then (read_plan.start_ahead returned)
    from conftest import DEMO

    out = _python(
        "import io, contextlib\n"
        "started = []\n" +
        _noting_importers("name == 'tracerecon.cli.render'", "(threading.current_thread().name, bool(started))") +
        "from tracerecon.nsys import read_plan\n"
        "real = read_plan.start_ahead\n"
        "def spy(path):\n"
        "    keys = real(path)\n"
        "    started.append(path)\n"
        "    return keys\n"
        "read_plan.start_ahead = spy\n"
        "from tracerecon.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['report', {str(DEMO / 'launch_bound' / 'report.sqlite')!r}])\n"
        "print(*seen['tracerecon.cli.render'])\n"
    )
    # WHEN it prints a report THEN the import-ahead thread imported the renderer, after the reads
    #      started (before, it would only slow the command line and the read's plan)
    assert out.split() == ["tracerecon-import-ahead", "True"]


def test_given_once_reading_then_a_read_starts_the_import_once_and_a_forked_child_starts_none():
    # GIVEN a block waiting for a read to start
    out = _python(
        "import os, sys, threading\n"
        "from tracerecon import import_ahead\n"
        "with import_ahead.once_reading(['tracerecon.present']):\n"
        "    before = 'tracerecon.present' in sys.modules\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        # a worker process forked inside the block: its reads start no import thread
        "        import_ahead.reading_started()\n"
        "        os._exit(10 + threading.active_count())\n"
        "    child = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
        "    made = []\n"
        "    real = import_ahead.ImportAhead.__init__\n"
        "    import_ahead.ImportAhead.__init__ = lambda self, m: (made.append(m), real(self, m))[1]\n"
        "    import_ahead.reading_started(); import_ahead.reading_started()\n"
        "print(before, child, len(made) == 1, 'tracerecon.present' in sys.modules, len(import_ahead._WAITING))\n"
        # no read in a block (a cached result): nothing imported, nothing left waiting
        "with import_ahead.once_reading(['tracerecon.analysis.summary']):\n"
        "    pass\n"
        "print('tracerecon.analysis.summary' in sys.modules, len(import_ahead._WAITING))\n"
    )
    # WHEN the read starts here (twice) THEN one thread imports the modules, joined at the
    #      block's end; the child started none; a block without a read imports nothing
    assert out.split("\n")[:2] == ["False 11 True True 0", "False 0"]


def test_the_renderer_imported_while_numpy_may_be_importing_imports_neither_numpy_nor_pyarrow():
    # GIVEN the modules a report imports through once_reading (they may start beside the main
    # thread's import of numpy and pyarrow, which two threads must not import at once)
    # WHEN imported in a fresh interpreter THEN neither numpy nor pyarrow comes with them
    out = _python(
        "import sys\n"
        "import tracerecon.cli.render\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pyarrow')))\n"
    )
    assert out.strip() == "[]"


def test_given_blocks_waiting_for_the_same_modules_then_each_ends_its_own():
    # GIVEN two blocks, one inside the other, waiting for the same modules, and a read starting
    #       in the inner one
    out = _python(
        "import sys\n"
        "from tracerecon import import_ahead\n"
        "with import_ahead.once_reading(['tracerecon.present']):\n"
        "    with import_ahead.once_reading(['tracerecon.present']):\n"
        "        import_ahead.reading_started()\n"
        "        inner = [e.started is not None for e in import_ahead._WAITING]\n"
        "    left = len(import_ahead._WAITING)\n"
        "print(inner, left, len(import_ahead._WAITING), 'tracerecon.present' in sys.modules)\n"
    )
    # WHEN they end THEN each leaves with its own entry (the outer one's is still there after
    #      the inner one ended), none is left, and the modules were imported
    assert out.strip() == "[True, True] 1 0 True"


def test_a_child_forked_while_a_lock_here_is_held_is_not_stuck():
    # GIVEN another thread holding the lock of the waiting blocks while this one forks
    out = _python(
        "import os, threading, time\n"
        "from tracerecon import import_ahead\n"
        "held, go = threading.Event(), threading.Event()\n"
        "def hold():\n"
        "    with import_ahead._WAITING_LOCK:\n"
        "        held.set(); go.wait()\n"
        "t = threading.Thread(target=hold); t.start(); held.wait()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    with import_ahead.once_reading(['json']):\n"
        "        import_ahead.reading_started()\n"
        "    os._exit(7)\n"
        "go.set(); t.join()\n"
        "deadline = time.time() + 20\n"
        "while time.time() < deadline:\n"
        "    done, status = os.waitpid(pid, os.WNOHANG)\n"
        "    if done: break\n"
        "    time.sleep(0.05)\n"
        "else:\n"
        "    os.kill(pid, 9); os.waitpid(pid, 0); status = None\n"
        "print(None if status is None else os.waitstatus_to_exitcode(status))\n"
    )
    # WHEN the child opens a block and a read starts in it THEN it ends (the lock is its own)
    assert out.strip() == "7"


def test_given_ctrl_c_then_a_block_ends_without_waiting_for_its_import_thread(tmp_path):
    # GIVEN an import-ahead thread stuck in an import (as one waiting for an import lock that a
    #       KeyboardInterrupt on the main thread left held: 3 of 25 interrupted reports hung so)
    (tmp_path / "stuck_module_here.py").write_text("import time\ntime.sleep(60)\n")
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from tracerecon import import_ahead\n"
        "t = time.monotonic()\n"
        "for block in ('once_reading', 'ImportAhead'):\n"
        "    try:\n"
        "        if block == 'once_reading':\n"
        "            with import_ahead.once_reading(['stuck_module_here']):\n"
        "                import_ahead.reading_started(); time.sleep(0.2); raise KeyboardInterrupt\n"
        "        else:\n"
        "            with import_ahead.ImportAhead(['stuck_module_here']):\n"
        "                time.sleep(0.2); raise KeyboardInterrupt\n"
        "    except KeyboardInterrupt:\n"
        "        print(block, 'left')\n"
        "print(time.monotonic() - t < 30)\n"
    )
    # WHEN Ctrl-C leaves the block THEN it ends at once (the daemon thread is left to the exit)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=100).stdout
    assert out.split("\n")[:3] == ["once_reading left", "ImportAhead left", "True"], out


def test_the_program_ends_only_after_its_import_ahead_threads(tmp_path):
    # GIVEN a module that takes 0.5 s to import, imported ahead on a background thread, and a
    # command that fails at once (a missing input: exit 2)
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.5)\nDONE = True\n")
    code = ("import sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from tracerecon.import_ahead import ImportAhead\n"
            "ImportAhead(['slow_to_import'])\n"
            f"sys.argv = ['tracerecon', 'report', {str(tmp_path / 'missing.sqlite')!r}]\n"
            "from tracerecon.cli import console_main\n"
            "rc = console_main()\n"
            "print(rc, getattr(sys.modules.get('slow_to_import'), 'DONE', False))\n")
    # WHEN the program returns
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    # THEN it returned the error's exit status after the import finished: the interpreter's exit
    # beside a thread still importing crashed (exit 139) about one run in twenty
    assert res.stdout.split() == ["2", "True"], (res.stdout, res.stderr)


def test_ctrl_c_while_the_program_waits_for_its_import_ahead_threads_is_one_line(tmp_path):
    import signal

    # GIVEN a command that fails at once (a missing input) while a module takes 5 s to import
    # on an import-ahead thread, which the program waits for before it exits
    (tmp_path / "slow_to_import.py").write_text("import time\nprint('importing', flush=True)\ntime.sleep(5)\n")
    code = ("import sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from tracerecon.import_ahead import ImportAhead\n"
            "ImportAhead(['slow_to_import'])\n"
            f"sys.argv = ['tracerecon', 'report', {str(tmp_path / 'missing.sqlite')!r}]\n"
            "from tracerecon.program import main\n"
            "raise SystemExit(main())\n")
    for sig, code_, said in ((signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "importing"
        # WHEN the signal comes while it waits
        import time
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        # THEN it ends as a signal ends it elsewhere: its line, the signal's exit status, no traceback
        assert proc.returncode == code_ and err.endswith(f"tracerecon: {said}\n") and "Traceback" not in err, (proc.returncode, err)
