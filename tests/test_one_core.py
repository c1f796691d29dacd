"""One core, two front ends (issue 9): the layering holds, the export is lossless, and the CLI
and the TUI refuse the same bad input the same way."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import DEMO, DEMO2, H200, ROOT, SAMPLES, need_public, run_cli
from tracerecon import api

PKG = ROOT / "tracerecon"
SHAPES = SAMPLES / "demo_shapes_h200x2"

# Layers, bottom up. An import may go sideways or down, never up.
LAYERS = {
    "tracerecon.errors": 0, "tracerecon.schema": 0, "tracerecon.run_dir": 0, "tracerecon": 0,
    "tracerecon.report_model": 0, "tracerecon.no_pandas": 0, "tracerecon.handoff": 0, "tracerecon.memory": 0, "tracerecon.own_process": 0,
    "tracerecon.instrument": 1, "tracerecon.wrap": 1, "tracerecon.nsys": 1, "tracerecon.analysis": 1,
    "tracerecon.model": 2,
    "tracerecon.export": 3, "tracerecon.timeline_export": 3, "tracerecon.present": 3, "tracerecon.plot": 3, "tracerecon.cache": 3,
    "tracerecon.api": 4, "tracerecon.pipeline": 4,
    "tracerecon.cli": 5, "tracerecon.tui": 5, "tracerecon.__main__": 6, "tracerecon.program": 6,
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(mod: str) -> int:
    best = None
    for prefix, layer in LAYERS.items():
        if (mod == prefix or mod.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    assert best is not None, mod
    return best[1]


def imports_of(path: Path) -> set[str]:
    """Every tracerecon module ``path`` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracerecon"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if (ROOT / (full.replace(".", "/") + ".py")).exists() or (ROOT / full.replace(".", "/")).is_dir() else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tracerecon")}
    return out


def third_party_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
    return out


GRAPH = {module_name(p): imports_of(p) for p in PKG.rglob("*.py")}


def test_the_import_graph_has_no_cycle():
    seen, on_path = set(), []

    def visit(m):
        if m in on_path:
            raise AssertionError("import cycle: " + " -> ".join(on_path[on_path.index(m):] + [m]))
        if m in seen:
            return
        on_path.append(m)
        for dep in GRAPH.get(m, ()):
            if dep in GRAPH and dep != m:
                visit(dep)
        on_path.pop()
        seen.add(m)

    for m in GRAPH:
        visit(m)


def test_no_import_runs_back_up():
    up = [(m, d) for m, deps in GRAPH.items() for d in deps if d in GRAPH and layer_of(d) > layer_of(m)]
    assert up == []


def test_analysis_and_nsys_keep_to_themselves():
    for path in PKG.rglob("*.py"):
        m = module_name(path)
        deps, libs = GRAPH[m], third_party_of(path)
        if m.startswith("tracerecon.analysis"):
            assert not libs & {"sqlite3", "sqlite_utils", "textual", "torch", "rich"}, m
            # tracerecon.memory: malloc_trim after the analysis's own threads; tracerecon.cores:
            # how many threads it may use; tracerecon.kernel_names: a kernel name's parts, which
            # the reader needs too; tracerecon.json_text: how a name is written where a person
            # reads it, for the --phase values suggested (none holds data or does I/O)
            assert all(d.startswith("tracerecon.analysis") or d in ("tracerecon.schema", "tracerecon.errors", "tracerecon.report_model", "tracerecon.memory",
                                                                     "tracerecon.cores", "tracerecon.kernel_names", "tracerecon.json_text")
                       for d in deps), (m, deps)
        if m.startswith("tracerecon.nsys"):
            assert not any(d.startswith(("tracerecon.analysis", "tracerecon.api", "tracerecon.cli", "tracerecon.tui")) for d in deps), (m, deps)
        if "textual" in libs:
            assert m.startswith("tracerecon.tui"), m
        assert "torch" not in libs, m


# --- a lossless export -------------------------------------------------------------------------


@pytest.mark.parametrize("trace", [H200 / "eagle_gpu_bound.sqlite", DEMO2 / "nccl_skew", SHAPES / "nccl_skew_phases", SHAPES / "worker_gpu_bound"],
                         ids=lambda p: p.name)
def test_an_export_reports_exactly_like_its_traces(tmp_path, trace):
    # GIVEN the report of the traces, and an export of them (with the engine's own timers beside)
    src = tmp_path / "run"
    shutil.copytree(trace, src) if trace.is_dir() else (src.mkdir(), shutil.copy(trace, src / trace.name))
    (src / "cpu_timers.rank0.jsonl").write_text("".join(json.dumps({"rank": 0, "cycle": c, "phase": "verify", "cpu_ms": 1.0 + c}) + "\n" for c in range(3)))
    direct = run_cli("report", "--json", str(src))
    assert direct.returncode == 0, direct.stderr
    assert run_cli("export", str(src), "-o", str(tmp_path / "out")).returncode == 0
    # WHEN the export is reported
    again = run_cli("report", "--json", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    a, b = json.loads(direct.stdout), json.loads(again.stdout)
    # THEN every field is the same: NCCL totals, engine timers, alignment, verdicts, causes, warnings
    assert a["ranks"][0]["phases"][1].get("engine_cpu_ms_median") == 2.0
    assert a == b
    if "nccl" in trace.name:
        assert all(r["nccl"]["n_collectives"] > 1000 and r["nccl"]["comm_ms"] > 0 for r in b["ranks"])


# --- the same answer to bad and odd input -------------------------------------------------------


def test_view_refuses_a_bad_file_like_report(tmp_path):
    for cmd in (["report"], ["view"]):
        res = run_cli(*cmd, str(ROOT / "README.md"))
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "README.md: not an SQLite file" in res.stderr, (cmd, res.stderr)


def test_view_refuses_a_trace_without_nvtx_like_report(tmp_path):
    import sqlite3

    # GIVEN a copy of the README's trace with its NVTX table dropped
    p = tmp_path / "t.sqlite"
    p.write_bytes((H200 / "eagle_gpu_bound.sqlite").read_bytes())
    with sqlite3.connect(p) as conn:
        conn.execute("drop table NVTX_EVENTS")
    # WHEN viewed (no terminal) or reported THEN both say what report says, not "needs a terminal"
    for cmd in ("report", "view"):
        res = run_cli(cmd, str(p))
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no NVTX ranges in the trace" in res.stderr, (cmd, res.stderr)


def test_view_without_a_terminal_says_so():
    res = run_cli("view", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 2 and "needs a terminal" in res.stderr


def test_a_directory_of_separate_runs_is_refused():
    res = run_cli("report", str(H200))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "4 separate runs" in res.stderr and "eagle_gpu_rank0.sqlite, eagle_gpu_rank1.sqlite" in res.stderr


def test_the_ranks_a_run_directory_lists_are_one_run_however_their_captures_lie(tmp_path):
    # GIVEN a `tracerecon run` directory whose run.json lists two rank exports whose sessions do
    # not overlap (a torchrun rank's nsys began after the other rank's short program ended: seen
    # in 1 of 2 runs of a tiny program), and the same two files in a plain folder
    import json

    run = tmp_path / "run"
    run.mkdir()
    for r, src in enumerate(("eagle_gpu_bound.sqlite", "eagle_graph_verify.sqlite")):
        (run / f"rank{r}.sqlite").write_bytes((H200 / src).read_bytes())
    (run / "run.json").write_text(json.dumps({"reports": [{"sqlite": "rank0.sqlite"}, {"sqlite": "rank1.sqlite"}], "one_report_per_rank": True}))
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in ("rank0.sqlite", "rank1.sqlite"):
        (plain / f).write_bytes((run / f).read_bytes())
    # WHEN reported THEN the run directory reads as its two ranks; the plain folder is refused
    res = run_cli("report", "--json", str(run))
    assert res.returncode == 0, res.stderr
    assert [r["rank"] for r in json.loads(res.stdout)["ranks"]] == [0, 1]
    refused = run_cli("report", str(plain))
    assert refused.returncode == 2 and "2 separate runs" in refused.stderr


def test_a_time_normalised_export_of_another_run_is_refused_too(tmp_path):
    from conftest import need_public

    # GIVEN a rank directory holding an H200 capture of 2026 and a public export of 2024 made with
    # --ts-normalize (its timestamps are UTC already: 1726746484647774619 ns is 2024-09-19)
    ring = need_public() / "ZhiyiHu1999__DistributedSysLab_FS24" / "Ring_Simple_2MB_2nodes_2GPUs__ault43_483927.sqlite"
    (tmp_path / "rank0.sqlite").write_bytes((H200 / "eagle_gpu_rank0.sqlite").read_bytes())
    (tmp_path / "rank1.sqlite").write_bytes(ring.read_bytes())
    # (and an export that does not say when its session began, which stopped the check)
    (tmp_path / "rank2.sqlite").write_bytes((need_public() / "GindaChen__nsys-ai" / "healthy_1pct.sqlite").read_bytes())
    # WHEN reported
    res = run_cli("report", str(tmp_path))
    # THEN refused as two runs (the normalised export's session was taken as unknown, and the
    # two read as ranks of one run, 1,795,937 s apart)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "2 separate runs" in res.stderr, res.stderr
    assert "rank2.sqlite, whose session time the export does not say" in res.stderr


def test_an_export_of_unknown_session_beside_one_run_is_said(tmp_path):
    # GIVEN two files: an H200 capture, and another capture whose export lost its session start
    import sqlite3

    (tmp_path / "r0.sqlite").write_bytes((H200 / "eagle_gpu_bound.sqlite").read_bytes())
    (tmp_path / "r1.sqlite").write_bytes((H200 / "eagle_graph_verify.sqlite").read_bytes())
    con = sqlite3.connect(tmp_path / "r1.sqlite")
    con.execute("drop table TARGET_INFO_SESSION_START_TIME")
    con.commit()
    con.close()
    # WHEN reported
    res = run_cli("report", str(tmp_path))
    # THEN read as two ranks, and a warning says r1's run could not be checked (it was silent)
    assert res.returncode == 0, res.stderr
    assert "r1.sqlite: the export does not say when its session began" in res.stderr


def test_separate_runs_are_named_by_their_folders_and_the_worker_pool_is_closed_before_the_error(monkeypatch):
    import threading

    from conftest import DEMO
    from tracerecon import api
    from tracerecon.errors import BadTraceError

    # GIVEN three run directories of three separate runs, each holding a report.sqlite, read
    # anew in three worker processes
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    runs = [str(DEMO / d) for d in ("gpu_bound", "launch_bound", "verify_graph")]
    # WHEN loaded
    with pytest.raises(BadTraceError) as err:
        api.load(runs, jobs=3)
    # THEN refused, each run named with its folder (three "report.sqlite" could not be told apart)
    assert "3 separate runs" in str(err.value)
    assert "gpu_bound/report.sqlite | launch_bound/report.sqlite | verify_graph/report.sqlite" in str(err.value), str(err.value)
    # AND the workers' pool is closed by then: a program exiting on the error has nothing
    # closing it meanwhile (which printed an OSError traceback after the error line)
    assert not [t for t in threading.enumerate() if t.name == "tracerecon-pool-close"]


def test_a_piped_report_is_80_columns_wide_unless_columns_says_otherwise():
    import os

    # GIVEN the README's trace, whose header line (rank, absolute path, pid, GPU, nsys version)
    # is longer than 80 characters
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    header = f"rank 0  {trace}  pid 1115  GPU 0 NVIDIA H200  nsys 2025.3.2.0"
    assert len(header) > 80
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    # WHEN reported into a pipe, without COLUMNS and with COLUMNS=400
    narrow = run_cli("report", trace, env=env)
    wide = run_cli("report", trace, env={**env, "COLUMNS": "400"})
    # THEN no line is wider than 80 (the header is wrapped), and COLUMNS wins where set
    assert narrow.returncode == 0 and wide.returncode == 0
    assert max(len(ln.rstrip()) for ln in narrow.stdout.splitlines()) <= 80
    assert narrow.stdout.splitlines()[0].rstrip() != header
    # (wrapped between its fields: the GPU's name stays whole)
    assert " ".join(narrow.stdout.split("\n", 2)[:2]).split() == header.split()
    assert "GPU 0 NVIDIA H200" in narrow.stdout.splitlines()[1] or "GPU 0 NVIDIA H200" in narrow.stdout.splitlines()[0]
    assert wide.stdout.splitlines()[0].rstrip() == header
    # and COLUMNS that is no positive number counts as unset (it had laid the report out 40 wide)
    for bad in ("0", "-5", "abc"):
        assert run_cli("report", trace, env={**env, "COLUMNS": bad}).stdout == narrow.stdout, bad


def test_a_narrow_output_folds_names_and_keeps_every_number_whole():
    # GIVEN report, diff and ranges of real traces, into a pipe 40 columns wide (the narrowest
    # COLUMNS taken), where the tables' columns need more
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    for args in (("report", trace), ("ranges", trace), ("diff", str(DEMO / "gpu_bound"), str(DEMO / "launch_bound"))):
        # WHEN printed at 40 and at 400 columns
        narrow, wide = (run_cli(*args, env={**env, "COLUMNS": c}) for c in ("40", "400"))
        # THEN the narrow tables hold the same numbers as the wide ones, none cut short with "…"
        # (diff's -3.484 printed as "-3.4…")
        assert narrow.returncode == wide.returncode == 0, args
        numbers = re.compile(r"[-+]?\d+\.\d+")
        assert "…" not in narrow.stdout and numbers.findall(narrow.stdout) == numbers.findall(wide.stdout), args


def test_the_core_uses_the_phases_a_run_directory_recorded_as_the_cli_does(tmp_path, monkeypatch):
    # GIVEN vLLM's run directory, whose run.json recorded `--preset vllm` (draft, verify: 39 cycles)
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path))
    run = SAMPLES / "engines_h200" / "vllm_v1"
    cli = {p["phase"]: p["n"] for p in json.loads(run_cli("report", "--json", str(run)).stdout)["ranks"][0]["phases"]}
    # WHEN a library user calls the core with no options, as report and load
    rep = api.report([str(run)])
    (rank,) = api.load([str(run)]).ranks
    # THEN the recorded phases, as the CLI reads them (the core once read the default ones: none)
    assert cli == {"draft": 39, "verify": 39}
    assert {p.phase: p.n for p in rep.ranks[0].phases} == cli
    assert set(rank.phases["phase"].to_pylist()) == {"draft", "verify"}
    # AND explicit phases win over the recorded ones
    assert api.phase_config([str(run)], phases=("verify",)).phases == ("verify",)


def test_ranks_of_one_run_are_one_run():
    res = run_cli("report", "--json", str(H200 / "eagle_gpu_rank0.sqlite"), str(H200 / "eagle_gpu_rank1.sqlite"))
    assert res.returncode == 0 and [r["rank"] for r in json.loads(res.stdout)["ranks"]] == [0, 1]


def test_a_cycle_prefix_that_matches_nothing_is_a_warning():
    res = run_cli("report", "--cycle", "step", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 0 and "no cycle range (a range whose name starts with 'step', as 'step 3' does; " in res.stderr


def test_every_option_of_every_command_is_described():
    import argparse

    from tracerecon.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"report", "ranges", "export", "plot", "diff", "view", "run", "scrub"}
    for name, p in sub.choices.items():
        assert p.description, name  # what the command does, beyond its one-line summary
        for action in p._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, (name, action.dest)
    assert "Keys:" in sub.choices["view"].description and "bundled sample" in sub.choices["view"].description
    assert all(t in sub.choices["export"].description for t in ("ranges", "phases", "cycles", "gpu_ops", "syncs", "collectives", "critical_path"))


def test_ranks_in_worker_processes_give_the_same_report():
    from tracerecon import api
    from conftest import report_json

    one = report_json(api.load([SHAPES / "nccl_skew_phases"], jobs=1))
    two = report_json(api.load([SHAPES / "nccl_skew_phases"], jobs=2))
    assert one == two and len(one["ranks"]) == 2


def test_ranges_lists_the_names_and_report_suggests_flags_that_work(tmp_path):
    # GIVEN a trace whose phases are not named as tracerecon's defaults
    doc = json.loads(run_cli("ranges", "--json", str(H200 / "eagle_gpu_bound.sqlite")).stdout)
    names = {r["name"]: r for r in doc["ranks"][0]["ranges"]}
    assert names["verify"]["n"] == 24 and names["verify"]["n_gpu_ops"] > 0 and names["verify"]["gpu_ms_median"] > 1
    # WHEN report is asked for phases that do not exist
    res = run_cli("report", "--phase", "no_such_phase", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 0
    hint = res.stderr.split("the likely phases here: ")[1].split(" (`tracerecon ranges`")[0]
    # THEN the flags it suggests, pasted, give a table
    again = run_cli("report", "--json", *hint.split(), str(H200 / "eagle_gpu_bound.sqlite"))
    assert again.returncode == 0 and json.loads(again.stdout)["ranks"][0]["phases"]


def test_the_cache_returns_the_same_analysis_and_never_trusts_a_bad_entry(tmp_path, monkeypatch):
    import os
    import time

    from tracerecon import api
    from conftest import report_json

    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    cold = report_json(api.load([src]))
    entries = list((tmp_path / "cache").glob("*.pickle"))
    assert len(entries) == 1
    # GIVEN a warm cache: the same document, and nothing new written beside the input
    assert report_json(api.load([src])) == cold
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "t.sqlite"]
    # WHEN the entry is corrupt THEN it is rebuilt, not trusted
    entries[0].write_bytes(b"garbage")
    assert report_json(api.load([src])) == cold
    # WHEN another trace's entry is put in its place (swapped, copied over it) THEN it is rebuilt:
    # an entry holds its own key (it printed the other trace's numbers and name)
    other = tmp_path / "u.sqlite"
    shutil.copy(H200 / "eagle_graph_verify.sqlite", other)
    before = set((tmp_path / "cache").glob("*.pickle"))
    theirs = report_json(api.load([other]))
    (new,) = set((tmp_path / "cache").glob("*.pickle")) - before
    entries[0].write_bytes(new.read_bytes())
    assert report_json(api.load([src])) == cold != theirs
    other.unlink()
    new.unlink()
    # WHEN the trace changes THEN the cache misses
    os.utime(src, ns=(time.time_ns(), time.time_ns() + 10**9))
    api.load([src])
    assert len(list((tmp_path / "cache").glob("*.pickle"))) == 2
    # and --no-cache reads the trace itself
    monkeypatch.setenv("TRACERECON_NO_CACHE", "1")
    assert report_json(api.load([src])) == cold


def test_a_cache_entry_whose_bytes_changed_is_rebuilt_even_where_it_still_reads(tmp_path, monkeypatch):
    import struct

    from tracerecon import api

    # GIVEN a cached report of one export
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    cold = api.report([src]).to_json()
    gpu = cold["ranks"][0]["phases"][0]["gpu_ms_median"]
    # WHEN one number in its report entry is changed on disk, the entry still a valid pickle
    #      (a pickled float is its 8 bytes, big-endian: one flipped bit of its mantissa)
    (entry,) = [p for p in (tmp_path / "cache").glob("*.pickle") if struct.pack(">d", gpu) in p.read_bytes()]
    data = entry.read_bytes()
    at = data.index(struct.pack(">d", gpu)) + 7
    entry.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    # THEN the next report has the numbers of the export, not of the changed bytes, and the
    #      entry is written again
    assert api.report([src]).to_json() == cold
    assert struct.pack(">d", gpu) in entry.read_bytes()


def test_a_well_formed_entry_of_another_kind_is_rebuilt(tmp_path, monkeypatch):
    import os
    import pickle
    import struct
    import zlib

    from tracerecon import api

    def planted(entry, value):  # a well-formed entry: its own key, a right checksum
        body = pickle.dumps((entry.stem, value), protocol=pickle.HIGHEST_PROTOCOL)
        entry.write_bytes(struct.pack("<8sIQ", b"TRCACHE\x03", zlib.crc32(body), len(body)) + body)

    # GIVEN a cached report of two ranks (entries for the report, the run and each file)
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    srcs = [tmp_path / f"rank{r}.sqlite" for r in (0, 1)]
    for r, src in enumerate(srcs):
        shutil.copy(H200 / f"eagle_gpu_rank{r}.sqlite", src)
    cold = api.report(srcs).to_json()
    entries = sorted((tmp_path / "cache").glob("*.pickle"))
    assert len(entries) == 4
    # WHEN every entry holds a value of another kind THEN each command rebuilds it: the
    #      exports' numbers, no internal error
    for value in ({"x": 1}, ([1], [], ()), ([(1, 2, 3)], [], ())):
        for entry in entries:
            planted(entry, value)
        assert api.report(srcs).to_json() == cold
        for entry in entries:
            planted(entry, value)
        res = run_cli("export", "-o", str(tmp_path / "out"), *map(str, srcs), env=dict(os.environ, TRACERECON_CACHE_DIR=str(tmp_path / "cache")))
        assert res.returncode == 0, res.stderr
    assert api.report(srcs).to_json() == cold


def test_a_planted_entry_that_would_run_code_is_rebuilt_and_runs_nothing(tmp_path, monkeypatch):
    import os
    import pickle
    import struct
    import sys
    import zlib

    from tracerecon import api

    class RunsCode:  # unpickled by calling os.system (what a planted entry would do)
        def __init__(self, marker):
            self.marker = marker

        def __reduce__(self):
            return (os.system, (f"touch {self.marker}",))

    class ImportsAModule:  # unpickled by a tracerecon class that is no value: it imports a module
        def __reduce__(self):
            from tracerecon.import_ahead import ImportAhead

            return (ImportAhead, (["planted_module"],))


    # GIVEN a cached report, each of its entries replaced by a well-formed one (its own key, a
    #       right checksum: what anyone who can write the folder can make) whose value, when
    #       unpickled, runs a command
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    cold = api.report([src]).to_json()
    marker = tmp_path / "ran"
    (tmp_path / "planted_module.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for payload in (RunsCode(marker), ImportsAModule(), None):
        for entry in (tmp_path / "cache").glob("*.pickle"):
            body = pickle.dumps((entry.stem, payload), protocol=pickle.HIGHEST_PROTOCOL)
            if payload is None:  # (key, the global tracerecon.__main__.main): importing that module runs the program
                stem = entry.stem.encode()
                body = b"\x80\x02X" + struct.pack("<I", len(stem)) + stem + b"ctracerecon.__main__\nmain\n\x86."
            entry.write_bytes(struct.pack("<8sIQ", b"TRCACHE\x03", zlib.crc32(body), len(body)) + body)
        # WHEN reported again THEN nothing ran, no module was imported, and the report is the export's
        assert api.report([src]).to_json() == cold
        assert not marker.exists() and not (tmp_path / "imported").exists() and "tracerecon.__main__" not in sys.modules
    # and the cache's folder is its owner's only
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0


def test_a_fresh_process_reads_the_entries_another_one_wrote(tmp_path):
    import os
    import subprocess
    import sys

    # GIVEN two ranks reported and exported in one process (entries for each file, the run, the report)
    env = {**os.environ, "TRACERECON_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRACERECON_NO_CACHE", None)
    srcs = [str(tmp_path / f"rank{r}.sqlite") for r in (0, 1)]
    for r, src in enumerate(srcs):
        shutil.copy(H200 / f"eagle_gpu_rank{r}.sqlite", src)
    assert run_cli("export", "-o", str(tmp_path / "out"), *srcs, env=env).returncode == 0
    assert run_cli("report", *srcs, env=env).returncode == 0
    # WHEN a fresh process, which has imported nothing else of tracerecon, looks them up
    code = ("import sys\n"
            "from tracerecon import api\n"
            "from tracerecon.analysis.config import PhaseConfig\n"
            "print(api.cached_report(sys.argv[1:], PhaseConfig()) is not None)\n")
    res = subprocess.run([sys.executable, "-c", code, *srcs], capture_output=True, text=True, env=env, timeout=120)
    # THEN the report is served from the cache (an unpickler that refused a class of a module not
    # yet imported made every warm report a cold one), and every entry reads back
    assert res.stdout.split() == ["True"], (res.stdout, res.stderr)
    check = ("import sys, pathlib\n"
             "from tracerecon import cache\n"
             "for e in sorted(pathlib.Path(sys.argv[1]).glob('*.pickle')):\n"
             "    fh = open(e, 'rb'); fh.seek(cache._HEADER.size); cache._SafeUnpickler(fh).load()\n"
             "print('read')\n")
    res = subprocess.run([sys.executable, "-c", check, str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    assert res.stdout.split() == ["read"], res.stderr
    assert len(list((tmp_path / "cache").glob("*.pickle"))) >= 4


def test_a_cache_that_can_be_read_but_not_written_still_serves(tmp_path, monkeypatch):
    from tracerecon import cache

    # GIVEN a warm cache whose entries cannot be touched (os.utime fails: a read-only mount,
    #       another user's folder; root passes permission bits, so the failure is planted)
    monkeypatch.setenv("TRACERECON_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "t.sqlite"
    shutil.copy(H200 / "eagle_gpu_bound.sqlite", src)
    from tracerecon import api

    cold = api.report([src]).to_json()
    kept = sorted((tmp_path / "cache").glob("*.pickle"))
    refused = []

    def read_only(path, *args, **kwargs):
        refused.append(path)
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(cache.os, "utime", read_only)
    monkeypatch.setattr(cache.os, "unlink", read_only)
    # WHEN the report is asked again THEN it comes from the cache, the same, with no error
    assert api.report([src]).to_json() == cold
    assert refused  # the entry was found (and its time not updated)
    assert sorted((tmp_path / "cache").glob("*.pickle")) == kept


def test_phase_maps_and_warmup(tmp_path):
    from tracerecon import api
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.analysis.phases import warmup_cycles
    from conftest import report_json

    # GIVEN the engine's own names mapped by pattern
    cfg = PhaseConfig(phases=("checking=re:^ver", "proposing=glob:draft", "tail=draft_re_extend"))
    doc = report_json(api.load([H200 / "eagle_gpu_bound.sqlite"], cfg))
    plain = report_json(api.load([H200 / "eagle_gpu_bound.sqlite"]))
    # THEN they are the same phases under the user's labels, with the same numbers
    assert [p["phase"] for p in doc["ranks"][0]["phases"]] == ["checking", "proposing", "tail"]
    assert [p["gpu_ms_median"] for p in doc["ranks"][0]["phases"]] == [p["gpu_ms_median"] for p in plain["ranks"][0]["phases"]][1::-1] + [plain["ranks"][0]["phases"][2]["gpu_ms_median"]]
    # warm-up: a leading outlier is left out, --skip-cycles N leaves out N, 0 keeps all
    assert warmup_cycles(np.array([80, 10, 11, 9, 10, 12, 10, 11, 10, 10]), None).tolist() == [True] + [False] * 9
    assert warmup_cycles(np.array([10, 80, 11, 9]), None).tolist() == [False] * 4
    # a first cycle of 2.8x the median (SGLang's first prefill) before a 6x one: both left out
    assert warmup_cycles(np.array([14, 32, 5, 5, 5, 5, 5, 5, 5, 5]), None).tolist() == [True, True] + [False] * 8
    assert warmup_cycles(np.array([10, 11, 12]), 2).tolist() == [True, True, False]
    # in a run of 3-9 cycles, one (a fifth of them would be none): a first cycle 10x the rest
    assert warmup_cycles(np.array([38, 4, 4]), None).tolist() == [True, False, False]
    assert warmup_cycles(np.array([38, 38, 4, 4, 4]), None).tolist() == [True, False, False, False, False]
    assert warmup_cycles(np.array([38, 4]), None).tolist() == [False, False]  # (two: no median to tell them by)
    # a leading long cycle that comes back as long (9/10 of it or more) after the leading run is
    # the same work again, not a one-time cost (chunked prefill every fifth cycle): kept; a 3x
    # longer first one before it still is warm-up
    assert warmup_cycles(np.array([100, 10, 10, 10, 10, 100, 10, 10, 10, 10]), None).tolist() == [False] * 10
    assert warmup_cycles(np.array([100, 10, 10, 10, 10, 91, 10, 10, 10, 10]), None).tolist() == [False] * 10
    assert warmup_cycles(np.array([100, 10, 10, 10, 10, 89, 10, 10, 10, 10]), None).tolist() == [True] + [False] * 9
    assert warmup_cycles(np.array([300, 100, 10, 10, 10, 10, 100, 10, 10, 10]), None).tolist() == [True] + [False] * 9
    # ... as does a later stall longer still (the first long cycle is not alone), but not a cycle
    # the capture cut (not whole: 20x, an open range run to the trace's end)
    assert warmup_cycles(np.array([100, 10, 10, 10, 10, 1000, 10, 10, 10, 10]), None).tolist() == [False] * 10
    assert warmup_cycles(np.array([100, 10, 10, 10, 10, 10, 10, 10, 10, 2000]), None, np.array([True] * 9 + [False])).tolist() == [True] + [False] * 9
    assert plain["ranks"][0]["cycles"]["n_warmup"] == 1 and plain["ranks"][0]["cycles"]["n"] == 23
    kept = report_json(api.load([H200 / "eagle_gpu_bound.sqlite"], PhaseConfig(skip_cycles=0)))
    assert kept["ranks"][0]["cycles"]["n"] == 24 and kept["ranks"][0]["phases"][0]["n"] == 24
    res = run_cli("report", "--phase", "x=re:(", str(H200 / "eagle_gpu_bound.sqlite"))
    assert res.returncode == 2 and "bad regular expression" in res.stderr
    # (patterns Python's re rejects with OverflowError or RecursionError, not re.error, too)
    for pattern in ("a{99999999999}", "(" * 2000 + ")" * 2000):
        res = run_cli("report", "--phase", f"x=re:{pattern}", str(H200 / "eagle_gpu_bound.sqlite"))
        assert res.returncode == 2 and "bad regular expression" in res.stderr and "Traceback" not in res.stderr


def test_a_reader_that_leaves_early_is_no_error():
    # `tracerecon report ... | head -1`
    import subprocess
    import sys

    exe = shutil.which("tracerecon") or str(Path(sys.executable).parent / "tracerecon")
    for extra in ([], ["--json"]):
        p = subprocess.Popen([exe, "report", *extra, str(SHAPES / "nccl_skew_phases")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.readline()
        p.stdout.close()
        assert p.wait(timeout=120) == 0
        assert b"Traceback" not in p.stderr.read()


def test_a_cached_rank_is_named_by_the_path_given_now(tmp_path):
    # GIVEN a two-rank run directory reported from the repository root (its ranks cached)
    import os

    from conftest import DEMO2, ROOT

    env = dict(os.environ, TRACERECON_CACHE_DIR=str(tmp_path / "cache"))
    first = run_cli("report", "--json", str((DEMO2 / "nccl_skew").relative_to(ROOT)), env=env, cwd=str(ROOT))
    # WHEN reported again from its parent folder, by another relative path
    again = run_cli("report", "--json", "nccl_skew", env=env, cwd=str(DEMO2))
    # THEN each rank is named as given now, with the same numbers
    import json

    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert [r["source"] for r in b["ranks"]] == ["nccl_skew/rank0.sqlite", "nccl_skew/rank1.sqlite"]
    assert [r["phases"] for r in a["ranks"]] == [r["phases"] for r in b["ranks"]]


def test_piped_report_lines_fit_80_columns_and_wrapped_prose_hangs_under_its_line():
    # GIVEN a two-rank report, piped (80 columns), whose rank headers, "most misleading" and
    # straggler lines are longer than 80 columns
    res = run_cli("report", str((SHAPES / "nccl_skew_phases").relative_to(ROOT)), cwd=str(ROOT))  # as the README runs it
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # THEN no line is wider than 80 columns, and every line a sentence wrapped onto is indented
    # under it: a line starts at column 0 only for a rank header, a table header or a table row
    assert max(len(line) for line in lines) <= 80
    starts = {line.split()[0] for line in lines if line and not line.startswith(" ")}
    assert starts <= {"rank", "phase", "draft", "verify", "draft_re_extend", "across", "0", "1"}, starts
    wrapped = [line for line in lines if line.startswith("      ") and not line.strip().startswith(("collectives",))]
    assert any("under-reports" in line for line in wrapped) and any("those cycles the other ranks waited" in line for line in wrapped)


@pytest.mark.parametrize("columns", [60, 80])
def test_a_narrow_across_ranks_table_folds_the_alignment_between_words_and_cuts_nothing(columns):
    # GIVEN two ranks whose alignment reads "session start + collectives"
    res = run_cli("report", str(DEMO2 / "nccl_skew"), env={**os.environ, "COLUMNS": str(columns)})
    lines = res.stdout.splitlines()
    table = lines[lines.index("across ranks") + 1:]
    table = table[:next(i for i, line in enumerate(table) if line.startswith("  straggler"))]
    # WHEN printed at 60 or 80 columns THEN nothing in it is cut ("alignme…", "collect…" at 60)
    # and its words are whole: the header, each rank's numbers and gated count, the alignment
    # folded between its words
    assert not any("…" in line for line in table), table
    assert table[0].split() == ["rank", "offset", "ms", "±", "ms", "alignment", "coll.", "comm", "ms", "wait", "ms", "gated"]
    words = " ".join(table[1:]).split()
    assert "collectives" in words and "session" in words and words.count("30") == 1, table
    folded = [line.strip() for line in table[1:] if not line.lstrip()[:1].isdigit()]
    assert all(w in ("clock", "start +", "collectives", "start + collectives", "+ collectives") for w in folded), folded


def test_a_label_too_wide_for_the_terminal_is_split_at_its_colon_not_before_its_count():
    # GIVEN a rank whose verify label, "under 26/30: comm_wait 30/30", is wider than the 80
    # columns the other columns leave it 27 of
    res = run_cli("report", str(DEMO2 / "nccl_skew"), env={**os.environ, "COLUMNS": "80"})
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("verify"))
    # WHEN printed THEN it is split at its ": ", the cause with its count on the next line (it
    # had wrapped before "30/30", read as a number of its own), and the labels that fit stay whole
    assert lines[at].endswith("under 26/30:") and lines[at + 1].strip() == "comm_wait 30/30", lines[at:at + 2]
    assert any(line.startswith("draft ") and line.endswith("under: async_tail") for line in lines)
    assert any(line.startswith("draft_re_extend") and line.endswith("over 27/30: absorbed_wait") for line in lines)


def test_a_cycle_line_says_when_its_phases_hold_little_of_the_cycle():
    # GIVEN the README's trace, read with verify alone (draft and draft_re_extend left out)
    trace = str(H200 / "eagle_gpu_bound.sqlite")
    part = run_cli("report", trace, "--phase", "verify", env={**os.environ, "COLUMNS": "400"})
    doc = json.loads(run_cli("report", "--json", trace, "--phase", "verify").stdout)["ranks"][0]["cycles"]
    # WHEN its cycle line is read
    (line,) = [ln for ln in part.stdout.splitlines() if ln.strip().startswith("cycles:")]
    # THEN it says how much of the cycle's CPU time the phases hold (GPU 2.165 ms beside CPU
    # 2.751 ms read as a faster GPU), and that its GPU time is theirs
    share = round(100 * doc["phases_cpu_ms_median"] / doc["cpu_ms_median"])
    assert share < 80 and f"its phases hold {share}% of its CPU time, and its GPU time runs from the first one's start" in line, line
    # AND with every phase (96 %), nothing is added
    whole = run_cli("report", trace, env={**os.environ, "COLUMNS": "400"}).stdout
    assert "its phases hold" not in whole


@pytest.mark.parametrize("verdicts,causes,verdict_causes,label", [
    ({"over": 30}, {"absorbed_wait": 30}, {"absorbed_wait": 30}, "over: absorbed_wait"),
    # the cause of all the verdict's cycles: no share of its own (it wrapped at 80 columns)
    ({"over": 27, "agree": 3}, {"absorbed_wait": 27, "launch_bound": 3}, {"absorbed_wait": 27}, "over 27/30: absorbed_wait"),
    # a cause less common than its verdict keeps its own share
    ({"agree": 19, "over": 11}, {"launch_bound": 13, "comm_wait": 11, "queued_behind": 6}, {"launch_bound": 13, "none": 6},
     "agree 19/30: launch_bound 13/30"),
    ({"agree": 30}, {"none": 30}, {"none": 30}, "agree"),
    # the cause most common over all cycles belongs to other verdicts' cycles only (a public
    # 2-GPU export's aten::copy_: under 134/290, every one async_tail; queued_behind 148, all
    # agree or over): the verdict is shown with a cause of its own cycles
    ({"under": 134, "agree": 129, "over": 27}, {"queued_behind": 148, "async_tail": 134, "none": 8}, {"async_tail": 134},
     "under 134/290: async_tail"),
    # ... but a cause some of its cycles share with other verdicts counts all its cycles
    # (nccl_skew_phases rank 1's verify: agree 18 = launch_bound 11 + comm_wait 7, under 12 comm_wait)
    ({"agree": 18, "under": 12}, {"comm_wait": 19, "launch_bound": 11}, {"launch_bound": 11, "comm_wait": 7},
     "agree 18/30: comm_wait 19/30"),
    # ... its share kept where it equals the verdict's by chance (7 of the 18 agreeing cycles)
    ({"agree": 18, "under": 12}, {"comm_wait": 18, "launch_bound": 11, "none": 1}, {"launch_bound": 11, "comm_wait": 7},
     "agree 18/30: comm_wait 18/30"),
    # no verdict's causes given: the cause over all cycles
    ({"over": 30}, {"absorbed_wait": 30}, None, "over: absorbed_wait"),
])
def test_the_verdict_label_gives_a_cause_of_its_own_cycles_and_a_share_only_where_it_is_not_the_verdicts(verdicts, causes, verdict_causes, label):
    # GIVEN a phase's verdict and cause counts WHEN labelled THEN as the table shows it
    from tracerecon.present import verdict_cause_label
    from tracerecon.report_model import PhaseSummary

    p = PhaseSummary("verify", sum(verdicts.values()), 1.0, 1.0, 1.0, 1.0, 0.0, verdicts, causes, verdict_causes=verdict_causes)
    assert verdict_cause_label(p) == label


def test_a_real_phase_is_shown_with_the_cause_of_its_own_verdicts_cycles(tmp_path):
    # GIVEN a public 2-GPU export whose aten::copy_ ranges disagree cycle to cycle (under, agree,
    # over), exported to parquet
    import pyarrow.dataset as ds

    trace = str(need_public() / "GindaChen__nsys-ai" / "h100_2gpu_1s.sqlite")
    phase = ["--phase", r"aten::copy_=re:^aten::copy_, op_id = \d+$"]
    assert run_cli("export", trace, *phase, "-o", str(tmp_path / "exp")).returncode == 0
    # WHEN its report is printed
    text = run_cli("report", trace, *phase, "--no-cache", env={**os.environ, "COLUMNS": "200"}).stdout
    # THEN each rank's label pairs the most common verdict over its counted cycles with the
    #      most common cause of those the verdict's cycles have, as the per-cycle rows say
    cycles = ds.dataset(tmp_path / "exp" / "cycles", partitioning="hive").to_table().to_pylist()
    counted = {(c["rank"], c["cycle"]) for c in cycles if not (c["warmup"] or c["incomplete"] or c["empty"])}
    rows = [r for r in ds.dataset(tmp_path / "exp" / "phases", partitioning="hive").to_table().to_pylist() if (r["rank"], r["cycle"]) in counted]
    labels = [ln.split()[-3:] for ln in text.splitlines() if ln.startswith("aten::copy_")]
    assert len(labels) == 2
    for rank, label in enumerate(labels):
        mine = [r for r in rows if r["rank"] == rank]
        verdict, k = Counter(r["verdict"] for r in mine).most_common(1)[0]
        own = {r["cause"] for r in mine if r["verdict"] == verdict}
        cause, c = Counter(r["cause"] for r in mine if r["cause"] in own).most_common(1)[0]
        assert k < len(mine) and c == k  # (the case: a cause of all the verdict's cycles and no other's)
        assert label == [verdict, f"{k}/{len(mine)}:", cause], (label, Counter((r["verdict"], r["cause"]) for r in mine))
