"""Issue 12, discovery: on every public trace (made by other people's tools and engines),
`ranges` lists the NVTX names the trace holds, and `report` with no matching phase suggests
`--phase` flags that, pasted, give a non-empty phase table."""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PUBLIC, run_cli
from nsys_factory import FakeTrace

from tracerecon.analysis.summary import phase_candidates

U = 1000

PUBLIC_TRACES = sorted(PUBLIC.rglob("*.sqlite")) if PUBLIC.is_dir() else []


def nvtx_names(path: Path) -> set[str]:
    """Range names straight from the export with SQL (the independent side)."""
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in db.execute("select name from sqlite_master")}
        if "NVTX_EVENTS" not in tables:
            return set()
        cols = {r[1] for r in db.execute("pragma table_info(NVTX_EVENTS)")}
        text = "coalesce(e.text, s.value)" if "textId" in cols and "StringIds" in tables else "e.text"
        join = "left join StringIds s on s.id = e.textId" if "textId" in cols and "StringIds" in tables else ""
        return {r[0] for r in db.execute(f"select distinct {text} from NVTX_EVENTS e {join} where e.eventType in (59, 60, 70, 71)") if r[0]}
    finally:
        db.close()


@pytest.mark.skipif(not PUBLIC_TRACES, reason="public traces not found (set TRACERECON_SHARED)")
@pytest.mark.parametrize("path", PUBLIC_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ranges_lists_the_names_and_report_suggests_flags_that_work(path):
    expected = nvtx_names(path)
    res = run_cli("ranges", "--json", str(path), "--no-cache")
    if not expected:
        assert res.returncode == 2 and res.stderr.count("\n") == 1  # one line: no NVTX ranges / empty trace
        return
    # GIVEN a trace with NVTX ranges WHEN `ranges` lists them THEN every name it lists is in the trace
    assert res.returncode == 0, res.stderr
    listed = {r["name"] for rank in json.loads(res.stdout)["ranks"] for r in rank["ranges"]}
    assert listed and listed <= expected
    with_gpu = [r for rank in json.loads(res.stdout)["ranks"] for r in rank["ranges"] if r["n_gpu_ops"] > 0]
    # WHEN report finds none of the default phases THEN it suggests flags, which pasted give phases
    rep = run_cli("report", str(path), "--no-cache")
    assert rep.returncode == 0, rep.stderr
    if not with_gpu:
        return  # nothing launched GPU work from a range: nothing to suggest
    hint = rep.stderr.split("the likely phases here: ")[1].split(" (`tracerecon ranges`")[0]
    again = run_cli("report", "--json", *shlex.split(hint), str(path), "--no-cache")
    assert again.returncode == 0, again.stderr
    assert any(rank["phases"] for rank in json.loads(again.stdout)["ranks"])
    # and none of them is set aside as nested in another (each suggested flag gives phases)
    assert "matched only ranges inside another phase's range" not in again.stderr, again.stderr


def test_names_that_differ_only_in_numbers_are_one_pattern():
    # GIVEN torch-profiler style names with op ids, and a plain repeated phase
    import pyarrow as pa

    rows = [("aten::mm, op_id = 11", 3), ("aten::mm, op_id = 12", 1), ("aten::mm, op_id = 13", 1), ("decode", 1), ("decode", 1), ("decode", 1), ("a = b", 1)]
    n = len(rows)
    table = pa.table({
        "domain": [""] * n, "name": [name for name, _ in rows], "start_ns": list(range(n)), "end_ns": list(range(1, n + 1)),
        "gpu_start_ns": list(range(n)), "gpu_end_ns": list(range(1, n + 1)),
        "gpu_busy_ns": [10**6 * ops for _, ops in rows], "n_gpu_ops": [ops for _, ops in rows],
    })
    names = [name for name, _ in rows]
    # WHEN candidates are asked for THEN the op-id family is one pattern and it matches its members
    got = phase_candidates(table)
    assert got[0] == r"aten::mm=re:^aten::mm, op_id = \d+$"
    import re

    assert all(re.match(got[0].split("=re:", 1)[1], name) for name in names[:3])
    assert "decode" in got


@pytest.mark.parametrize("trace, phases", [
    ("probes_h200/stream_shapes/idle_sample.sqlite.xz", ["prepare", "forward", "sample"]),  # sample launches nothing
    ("probes_h200/stream_shapes/worker_stream_handoff.sqlite.xz", ["prepare", "forward", "sample"]),  # forward's work on a worker thread
    ("probes_h200/stream_shapes/model_thread.sqlite.xz", ["prepare", "forward", "sample"]),  # forward and sample on another thread
    ("probes_h200/overlap_loop/report.sqlite.xz", ["schedule", "forward", "process"]),  # process launches nothing
])
def test_in_a_trace_with_cycle_ranges_the_suggested_phases_are_what_the_cycles_hold(trace, phases):
    # GIVEN a real trace whose cycle ranges each hold the engine's phases, some launching nothing,
    # beside a ``warmup`` range around each warm-up iteration (which holds GPU work)
    from conftest import SAMPLES

    path = SAMPLES / trace
    # WHEN report finds none of the default phases
    res = run_cli("report", str(path))
    hint = res.stderr.split("the likely phases here: ")[1].split(" (`tracerecon ranges`")[0]
    # THEN it suggests the ranges inside the cycles, in their order, and not the warm-up range
    assert shlex.split(hint) == [x for p in phases for x in ("--phase", p)]
    # AND the rank shows no table of headers alone, nor the note on its columns (read as a
    # result), but says there is no phase to show
    lines = [" ".join(line.split()) for line in run_cli("report", str(path), env={**os.environ, "COLUMNS": "200"}).stdout.splitlines()]
    assert lines[1] == "no phase to show: no range was named as a phase, or none ran in a cycle counted (`tracerecon ranges` lists every range name)", lines
    assert not any(line.startswith("phase n CPU ms") or line.startswith("GPU ms:") for line in lines), lines


def test_a_report_that_skips_every_cycle_blames_no_range():
    from conftest import SAMPLES

    # GIVEN the bundled sample (24 cycles of draft, verify, draft_re_extend)
    path = SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite"
    # WHEN --skip-cycles leaves out more cycles than it has
    res = run_cli("report", "--skip-cycles", "100", str(path), env={**os.environ, "COLUMNS": "200"})
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    # THEN it says every cycle is left out (it had said no range was named as a phase, beside
    # the phases the trace does have)
    assert res.returncode == 0 and lines[1] == "no phase to show: every cycle is left out (below)", lines
    assert lines[2] == "cycles: none counted; 24 leading cycle(s) left out (--skip-cycles 100)", lines


def test_ranges_lists_the_numbered_cycle_ranges_as_one_row():
    from conftest import SAMPLES

    # GIVEN a trace of 40 `cycle N` ranges around prepare, forward and sample (and 5 warm-ups)
    trace = SAMPLES / "probes_h200" / "stream_shapes" / "plan_joined.sqlite.xz"
    # WHEN its ranges are listed
    text = run_cli("ranges", str(trace)).stdout
    json_doc = json.loads(run_cli("ranges", "--json", str(trace)).stdout)
    # THEN the table has one `cycle N` row of 40 beside the phases (40 rows buried them), while
    # the JSON keeps every name
    rows = {line.split()[0] + (" " + line.split()[1] if line.startswith("cycle") else ""): line.split() for line in text.splitlines() if line.strip()}
    assert rows["cycle N"][2] == "40" and "cycle 0" not in rows and {"prepare", "forward", "sample"} <= set(rows)
    assert sum(1 for r in json_doc["ranks"][0]["ranges"] if r["name"].startswith("cycle ")) == 40


def test_ranges_names_its_span_as_report_does_and_says_which_options_it_does_not_use():
    from conftest import SAMPLES

    # GIVEN the README's trace (verify: 24 ranges)
    trace = str(SAMPLES / "h200_nsys2025.3.1" / "eagle_gpu_bound.sqlite")
    # WHEN its ranges are listed as JSON, with options that change nothing there
    res = run_cli("ranges", "--json", trace, "--skip-cycles", "0", "--phase", "verify")
    verify = next(r for r in json.loads(res.stdout)["ranks"][0]["ranges"] if r["name"] == "verify")
    # THEN the span has report's name for it (gpu_ms_median, kept, is report's boundary time)
    assert verify["gpu_span_ms_median"] == verify["gpu_ms_median"] and verify["n"] == 24
    # AND one line says the options are not used, and no other: the listing and the warnings are
    # those of a plain `ranges` (a --phase verify had warned of GPU work queued in the cycle
    # range before and after verify, its first and last phase, in a listing that has no phases)
    assert res.returncode == 0 and "--phase, --skip-cycles: not used by `ranges`" in res.stderr, res.stderr
    plain = run_cli("ranges", "--json", trace)
    doc, plain_doc = json.loads(res.stdout), json.loads(plain.stdout)
    assert doc["ranks"] == plain_doc["ranks"] and doc["warnings"][1:] == plain_doc["warnings"] == [], doc["warnings"]
    assert res.stderr.splitlines()[1:] == plain.stderr.splitlines() == [], res.stderr


@pytest.mark.skipif(not (PUBLIC / "GindaChen__nsys-ai" / "h100_2gpu_1s.sqlite").is_file(), reason="public traces not found (set TRACERECON_SHARED)")
def test_ranges_gives_names_that_differ_only_in_numbers_one_row():
    import re

    # GIVEN a PyTorch-annotated public trace (a name per op call: `aten::copy_, op_id = 317175`;
    # the table had 17,586 lines)
    trace = str(PUBLIC / "GindaChen__nsys-ai" / "h100_2gpu_1s.sqlite")
    # WHEN its ranges are listed, as a table and as JSON
    text = run_cli("ranges", trace).stdout
    doc = json.loads(run_cli("ranges", "--json", trace).stdout)
    json_rows = doc["ranks"][0]["ranges"]
    # THEN the table is short, and its `aten::copy_, op_id = N` row counts every range the JSON
    # lists under a name of that shape
    assert len(text.splitlines()) < 1000 < len(json_rows)
    copies = [r for r in json_rows if re.fullmatch(r"aten::copy_, op_id = \d+", r["name"])]
    row = next(line for line in text.splitlines() if line.startswith("aten::copy_, op_id = N"))
    assert int(row.split()[4]) == sum(r["n"] for r in copies) and len(copies) >= 3


def test_ranges_says_nothing_of_work_queued_outside_the_default_phases():
    # GIVEN the vLLM V1 sample, whose `verify` range (one of the default phases) leaves the
    # sampler's work between verify and draft and the preprocess work before verify: `report`
    # warns of both (they are of the phases it reads)
    from conftest import SAMPLES

    trace = str(SAMPLES / "engines_h200" / "vllm_v1")
    rep = run_cli("report", trace, "--no-cache")
    assert "GPU work was queued between 'verify' and 'draft'" in rep.stderr, rep.stderr
    # WHEN `ranges` lists its ranges (it takes no phases) THEN it says neither: the listing
    # holds every range's GPU time, that work's too
    res = run_cli("ranges", trace, "--no-cache")
    assert res.returncode == 0 and "GPU work was queued" not in res.stderr, res.stderr
    assert "gpu_model_runner: sample" in res.stdout and "gpu_model_runner: preprocess" in res.stdout


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab_.1é ,=:(-\t")), max_size=24))
def test_a_trailing_key_is_taken_off_a_name_as_the_pattern_it_replaced_took_it(name):
    # GIVEN any short name of letters, digits, dots, blanks, commas and "="
    # WHEN its trailing "key =" is taken off THEN the result is what the anchored regex it
    # replaced gave (the regex, tried from every position, took minutes on a long name)
    from tracerecon.analysis.summary import _without_trailing_key

    assert _without_trailing_key(name) == re.sub(r",?\s*[\w.]+\s*=\s*$", "", name)


def test_a_range_name_of_a_million_characters_is_reported(tmp_path):
    # GIVEN a phase range of one cycle whose name is a million characters long (shapes or JSON put
    # in a name; a fuzzing review's: report, ranges, export and diff ran for minutes, for hours at
    # 1 MB, in the hint naming it)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 300) * U, (b + 700) * U, names=("draft" + ("_" + "x" * 1_000_000 if c == 1 else ""), "verify"))
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 15) * U, (b + 200) * U)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN its ranges are listed and it is reported THEN both end (exit 0), each well within two
    # minutes (a run past them fails the test rather than hanging the suite)
    assert run_cli("ranges", str(path), timeout=120).returncode == 0
    assert run_cli("report", "--json", str(path), timeout=120).returncode == 0


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(["_v", "1", "٣", "²", "_ptds", "_ptsz", "_pt", "sz", "cuda", "_", "v", "x"]), max_size=12).map("".join))
def test_an_api_names_suffixes_are_taken_off_as_the_pattern_they_replaced_took_them(pieces):
    # GIVEN any short name of version and per-thread-stream suffixes, their pieces and other text
    # WHEN its suffixes are taken off THEN the result is what the anchored regex it replaced gave
    # (the regex, tried from every position, took 0.8 s on a crafted 15,000-character name)
    from tracerecon.analysis.syncs import base_api_name

    assert base_api_name(pieces) == re.sub(r"(_v\d+|_ptds|_ptsz)+$", "", pieces)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(["nccl_ep_jit_", "NCCL_EP_JIT_", "nccl", "_scan", "_SCAN", "_kernel", "Kernel", "_", "ht", "é", "-", "x"]), max_size=10).map("".join))
def test_nccl_ep_scans_are_told_as_the_pattern_they_replaced_told_them(name):
    # GIVEN any short function name of NCCL EP's name pieces and other text
    # WHEN it is asked whether it is an NCCL-named communication kernel THEN the answer is the
    # anchored pattern's it replaced, whose look-ahead for NCCL EP's local scans took 0.8 s on a
    # crafted 15,000-character name
    from tracerecon.analysis.nccl import NCCL_NAMED, _is_nccl_ep_scan

    replaced = re.compile(r"^(?!nccl_ep_jit_\w*_scan(_\w+)?_kernel$)nccl\w*Kernel", re.I)
    assert (bool(NCCL_NAMED.search(name)) and not _is_nccl_ep_scan(name)) == bool(replaced.search(name))


def test_crafted_long_api_and_kernel_names_are_told_at_once():
    # GIVEN names built to make the anchored patterns backtrack: 300,000 characters of version
    # suffixes before a letter, and an NCCL EP name of 60,000 scans that does not end in _kernel
    # (the patterns took 0.8 s at 15,000 characters, growing with the square: minutes here)
    code = (
        "from tracerecon.analysis.nccl import is_comm_kernel\n"
        "from tracerecon.analysis.syncs import base_api_name\n"
        "assert base_api_name('_v1' * 100_000 + 'x') == '_v1' * 100_000 + 'x'\n"
        "assert base_api_name('cudaMemcpyAsync' + '_ptsz_v7000' * 30_000) == 'cudaMemcpyAsync'\n"
        "assert is_comm_kernel('nccl_ep_jit_' + '_scan' * 60_000 + '_kernelx') is True\n"
    )
    # WHEN they are told THEN the answers are the patterns' (what is kept; an NCCL name, not a
    # scan), well within a minute (a run past it fails the test rather than hanging the suite)
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_ranges_json_carries_the_warnings_it_says(tmp_path):
    # GIVEN one rank's export of a two-rank NCCL run: its communication kernels ran with a rank
    # whose trace is not in the input, which `ranges` says on stderr (a newcomer's review:
    # `ranges --json` had no warnings, `report --json` has them)
    from conftest import SAMPLES

    trace = str(SAMPLES / "demo_h200x2" / "nccl_skew" / "rank0.sqlite")
    # WHEN its ranges are listed as JSON, with and without a --phase it does not use
    for extra in ((), ("--phase", "verify")):
        res = run_cli("ranges", "--json", "--no-cache", trace, *extra)
        # THEN the document holds every warning said on stderr, and the stderr lines are those
        # (the --phase one too: a fresh review's)
        doc = json.loads(res.stdout)
        said = [line.removeprefix("tracerecon: warning: ") for line in res.stderr.splitlines() if line.startswith("tracerecon: warning: ")]
        assert res.returncode == 0 and said and doc["warnings"] == said, (said, doc.get("warnings"))
        assert any(w.startswith("--phase: not used by `ranges`") for w in said) == bool(extra), said


def test_a_phase_never_in_a_cycle_is_named_under_the_table(tmp_path):
    # GIVEN a one-off 'init' range (0..700 us, a kernel 10..600) before three cycles of draft and
    # verify, each of 300 us, and 'init' given as a phase beside them (a newcomer's review: report
    # suggests such ranges, and a 734 ms one had sat beside 1.5-ms cycles unmarked)
    t = FakeTrace()
    t.range("init", 0, 700 * U)
    t.kernel(t.call("cudaLaunchKernel", 5 * U, 7 * U), 10 * U, 600 * U)
    for c in range(3):
        b = 1000 * (c + 1)
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
    path = str(t.write(tmp_path / "t.sqlite"))
    # WHEN reported, as JSON and as text
    doc = json.loads(run_cli("report", "--json", "--no-cache", "--skip-cycles", "0", path, "--phase", "init", "--phase", "draft", "--phase", "verify").stdout)
    text = run_cli("report", "--no-cache", "--skip-cycles", "0", path, "--phase", "init", "--phase", "draft", "--phase", "verify").stdout
    # THEN the cycles name it as in no cycle, and a line under the table says its row counts its
    # ranges, not cycles
    assert doc["ranks"][0]["cycles"]["phases_in_no_cycle"] == ["init"]
    assert "init: in no cycle: its row counts its ranges (n), each read alone, not per cycle, and in no cycle's time" in " ".join(text.split()), text
