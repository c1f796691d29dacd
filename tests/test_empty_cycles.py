"""Empty cycles: a cycle none of whose phases launched GPU work, where the rank's other cycles
did (an engine step with nothing to run: vLLM's ``execute_model`` with nothing scheduled, a
server loop's turn with no batch, a P/D decode instance waiting for KV). Its numbers are what
events would read (tiny), but a server idle through most of a capture would read its steps'
medians off its idle turns: it is left out of the medians, flagged ``empty`` and counted, where such cycles are fewer than half of the rank's or
the trace shows them as steps that ended inside their first phase (``phases.empty_steps``).

Hand-computed case (us, b = 3000c): cycle c [b, b+300] holds draft [b, b+100] and verify
[b+100, b+300]; a cycle that runs launches a kernel in each (draft's at b+10, running
b+20..b+80; verify's at b+110, running b+120..b+280), an empty one launches nothing. Events on
stream 7: a cycle that runs reads draft 100, verify 200, the cycle 300; an empty one, the GPU
idle, draft b..b+100 (100) and verify b+100..b+300 (200) too, with its CPU ranges.
"""

from __future__ import annotations

import json

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.present import build_report

U = 1000
PHASES = PhaseConfig(phases=("draft", "verify"), skip_cycles=0)


def cycles(plan: str, cpu_only: bool = False, verify_us=200, elsewhere: str = "") -> FakeTrace:
    """One cycle per letter of ``plan``: ``r`` runs, ``e`` is empty (see the module doc); a
    cycle that runs takes ``verify_us`` of verify (its kernel 40 us shorter; a list: per cycle);
    a cycle whose letter in ``elsewhere`` is ``p`` also runs a ``prefill`` range (no phase) at
    b+300..b+350 that launches a 2 ms kernel."""
    t = FakeTrace()
    for c, kind in enumerate(plan):
        b = 3000 * c
        v = verify_us[c] if isinstance(verify_us, (list, tuple)) else verify_us
        end = b + 100 + (v if kind == "r" else 200)
        t.cycle(c, b * U, (b + 100) * U, end * U)
        if kind == "r" and not cpu_only:
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 20) * U, (b + 80) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 120) * U, (end - 20) * U)
        if elsewhere[c:c + 1] == "p":
            t.range("prefill", (end - 50) * U, end * U)
            t.kernel(t.call("cudaLaunchKernel", (end - 40) * U, (end - 38) * U), (end - 30) * U, (end + 1970) * U)
    return t


VERIFY = [500, 600, 200, 200, 200, 700, 800, 900]  # (the empty cycles' 200: not run)


def test_cycles_that_launched_nothing_are_left_out_of_the_medians(tmp_path):
    # GIVEN 8 cycles, of which 3 (cycles 2-4) launch nothing; the 5 that run take 500, 600, 700,
    # 800 and 900 us of verify
    t = cycles("rreeerrr", verify_us=VERIFY)
    # WHEN read
    a = load([str(t.write(tmp_path / "t.sqlite"))], PHASES)
    (rank,) = a.ranks
    # THEN the 3 are flagged empty, and still hold their own numbers (draft 100, verify 200)
    assert rank.cycles["empty"].to_pylist() == [False, False, True, True, True, False, False, False]
    per = {(p["cycle"], p["phase"]): p["gpu_ns"] // U for p in rank.phases.to_pylist()}
    assert per[(2, "draft")] == 100 and per[(2, "verify")] == 200
    # AND the medians are the 5 running cycles' (verify 700, the cycle 800 us on both clocks),
    # where the 8 together read verify 550 and the cycle 650; the report counts the 3 left out
    (r,) = build_report(a).ranks
    verify = next(p for p in r.phases if p.phase == "verify")
    assert (verify.n, verify.gpu_ms_median, verify.cpu_ms_median) == (5, 0.7, 0.7)
    assert (r.cycles.n, r.cycles.n_empty, r.cycles.gpu_ms_median, r.cycles.cpu_ms_median) == (5, 3, 0.8, 0.8)


def test_the_report_says_how_many_empty_cycles_it_left_out(tmp_path):
    # GIVEN the same trace
    path = str(cycles("rreeerrr", verify_us=VERIFY).write(tmp_path / "t.sqlite"))
    # WHEN reported, as text and JSON
    text = run_cli("report", path, "--phase", "draft", "--phase", "verify", "--skip-cycles", "0")
    doc = json.loads(run_cli("report", "--json", path, "--phase", "draft", "--phase", "verify", "--skip-cycles", "0").stdout)
    # THEN the cycles line says 3 empty cycles were left out, and the JSON counts them
    assert "3 empty cycle(s) left out (no GPU work launched in them)" in " ".join(text.stdout.split()), text.stdout
    assert doc["ranks"][0]["cycles"]["n_empty"] == 3 and doc["ranks"][0]["cycles"]["n"] == 5


def test_cycles_whose_work_ran_outside_their_phases_are_not_empty(tmp_path):
    # GIVEN the same cycles, where the 3 whose phases launch nothing each run a prefill range (no
    # phase) inside the cycle range that launches a 2 ms kernel (a review's case)
    a = load([str(cycles("rreeerrr", verify_us=VERIFY, elsewhere="..ppp...").write(tmp_path / "t.sqlite"))], PHASES)
    # THEN none is empty: their GPU work is in the cycle, only in no phase
    assert a.ranks[0].cycles["empty"].to_pylist() == [False] * 8


def test_cycles_that_launch_nothing_as_a_rule_are_not_empty(tmp_path):
    # GIVEN 8 cycles, 5 of which launch nothing (a process whose GPU work another one runs,
    # launching its own copies now and then: a review's case)
    a = load([str(cycles("reeeeerr", verify_us=500).write(tmp_path / "t.sqlite"))], PHASES)
    # THEN none is empty: cycles that launch nothing are its usual cycle, all counted
    assert a.ranks[0].cycles["empty"].to_pylist() == [False] * 8
    assert build_report(a).ranks[0].cycles.n == 8


def test_a_cpu_only_run_has_no_empty_cycles(tmp_path):
    # GIVEN 4 cycles none of which launches GPU work (a CPU-only program)
    a = load([str(cycles("rrrr", cpu_only=True).write(tmp_path / "t.sqlite"))], PHASES)
    # THEN none is empty: all 4 are counted
    assert a.ranks[0].cycles["empty"].to_pylist() == [False] * 4
    assert build_report(a).ranks[0].cycles.n == 4


def test_an_export_keeps_the_flag_and_reads_back_as_the_same_report(tmp_path):
    # GIVEN the trace with 3 empty cycles, exported
    path = str(cycles("rreeerrr", verify_us=VERIFY).write(tmp_path / "t.sqlite"))
    flags = ["--phase", "draft", "--phase", "verify", "--skip-cycles", "0"]
    assert run_cli("export", path, "-o", str(tmp_path / "out"), *flags).returncode == 0
    # WHEN the export is reported THEN it reads as the trace does
    direct = json.loads(run_cli("report", "--json", path, *flags).stdout)
    back = json.loads(run_cli("report", "--json", str(tmp_path / "out")).stdout)
    assert back["ranks"][0]["cycles"] == direct["ranks"][0]["cycles"]
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "out" / "cycles").column("empty").to_pylist() == [False, False, True, True, True, False, False, False]


def test_a_cycle_the_capture_cut_is_incomplete_not_empty(tmp_path):
    # GIVEN 6 cycles that run, then cycle 6, cut by the capture: its range and verify's never
    # closed, and verify's kernel launch has no GPU work in the trace (a review's case)
    t = cycles("rrrrrr", verify_us=500)
    b = 3000 * 6
    t.range("cycle 6", b * U, None)
    t.range("draft", b * U, (b + 100) * U)
    t.range("verify", (b + 100) * U, None)
    t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U)
    # WHEN read, with its cycle ranges and without
    for prefix in ("cycle", ""):
        a = load([str(t.write(tmp_path / f"t{prefix}.sqlite"))], PhaseConfig(phases=("draft", "verify"), skip_cycles=0, cycle_prefix=prefix))
        last = a.ranks[0].cycles.to_pylist()[-1]
        # THEN it is incomplete, and not empty: it launched a kernel the capture did not record
        assert (last["cycle"], last["incomplete"], last["empty"]) == (6, True, False), (prefix, last)
