"""A capture that ends inside a cycle (``nsys profile --duration``, a capture range stopped
mid-run): nsys writes the ranges still open with no end, and the kernels not yet run are not in
the trace. That cycle is no whole one: its last phase reads short (or runs to the trace's end),
so it is left out of the medians as a warm-up cycle is, kept in the tables with ``cut`` set,
and said.

Hand-computed case (us, b = 1000c): cycle c [b, b+300] holds draft [b, b+100] (a kernel launched
at b+10, running b+20..b+80) and verify [b+100, b+300] (a kernel launched at b+110, running
b+120..b+280). The capture ends inside cycle 3: its cycle range and verify never close, and
verify's kernel is not in the trace. Events on stream 7 in cycles 0-2: draft b..b+100 (100),
verify b+100..b+300 (200); cycle 3's verify has no end event at all.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000
PHASES = PhaseConfig(phases=("draft", "verify"), skip_cycles=0)


def cut_in_cycle(n: int, cycle_ranges: bool = True, pid: int = 10, collective: bool = False) -> FakeTrace:
    """``n`` cycles (see the module doc), the last cut by the capture's end; with
    ``collective``, verify's kernel is an all-reduce."""
    t = FakeTrace()
    for c in range(n):
        b, cut = 1000 * c, c == n - 1
        if cycle_ranges:
            t.range(f"cycle {c}", b * U, None if cut else (b + 300) * U, pid=pid)
        t.range("draft", b * U, (b + 100) * U, pid=pid)
        t.range("verify", (b + 100) * U, None if cut else (b + 300) * U, pid=pid)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=pid), (b + 20) * U, (b + 80) * U, pid=pid)
        call = t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid)
        if not cut:
            t.kernel(call, (b + 120) * U, (b + 280) * U, pid=pid, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if collective else "k")
    return t


@pytest.mark.parametrize("cycle_ranges", [True, False])
def test_a_cycle_the_capture_ended_inside_is_kept_marked_and_left_out_of_the_medians(tmp_path, cycle_ranges):
    # GIVEN 4 cycles, the capture ending inside the last (its verify, and its cycle range where
    # there are cycle ranges, never closed; verify's kernel not in the trace)
    path = cut_in_cycle(4, cycle_ranges).write(tmp_path / "t.sqlite")
    # WHEN analysed
    (rank,) = load([path], PHASES).ranks
    # THEN every cycle is kept, the last marked cut (and not warm-up)
    cycles = rank.cycles.to_pydict()
    assert cycles["cycle"] == [0, 1, 2, 3] and cycles["cut"] == [False, False, False, True] and not any(cycles["warmup"])
    # and the report counts the 3 whole cycles only: verify 0.200 ms in each (its events), where
    # the cut cycle's verify read short before (3100 -> the trace's end)
    res = run_cli("report", str(path), "--phase", "draft", "--phase", "verify", "--skip-cycles", "0", "--json")
    (r,) = json.loads(res.stdout)["ranks"]
    assert r["cycles"]["n"] == 3 and r["cycles"]["n_cut"] == 1 and r["cycles"]["n_warmup"] == 0
    assert r["cycles"]["gpu_ms_median"] == pytest.approx(0.300)
    assert {p["phase"]: (p["n"], p["gpu_ms_median"]) for p in r["phases"]} == {"draft": (3, pytest.approx(0.100)), "verify": (3, pytest.approx(0.200))}
    text = run_cli("report", str(path), "--phase", "draft", "--phase", "verify", "--skip-cycles", "0")
    assert "1 cycle(s) cut by the capture's end left out" in " ".join(text.stdout.split())


def test_whole_cycles_are_never_marked_cut(tmp_path):
    # GIVEN 3 cycles whose ranges all closed (a cycle ranges' trace whose last cycle is whole)
    t = FakeTrace().phase_cycles(("draft", "verify"), cycles=3)
    # WHEN analysed
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PHASES).ranks
    # THEN no cycle is cut
    assert rank.cycles["cut"].to_pylist() == [False] * rank.cycles.num_rows and rank.cycles.num_rows == 3


def test_a_rank_whose_capture_went_on_is_no_straggler_in_the_cycle_anothers_capture_cut(tmp_path):
    # GIVEN two rank files of one run, each 4 cycles whose verify is an all-reduce; rank 0's
    # capture ended inside cycle 3 (its all-reduce not in the trace), rank 1's went on (its
    # cycle 3 whole: 5 cycles written, the fifth cut)
    paths = [cut_in_cycle(4, pid=100, collective=True).write(tmp_path / "rank0.sqlite"),
             cut_in_cycle(5, pid=101, collective=True).write(tmp_path / "rank1.sqlite")]
    # WHEN reported
    res = run_cli("report", *map(str, paths), "--phase", "draft", "--phase", "verify", "--skip-cycles", "0", "--json")
    doc = json.loads(res.stdout)
    # THEN rank 0 counts 3 cycles, rank 1 4 (each leaves its own cut one out), and the critical
    # path counts cycles 0-2 only: no rank gated or ended last in cycle 3, which rank 0's capture
    # cut (before: 4 cycles, rank 1 "last to finish" in cycle 3)
    assert [(r["cycles"]["n"], r["cycles"]["n_cut"]) for r in doc["ranks"]] == [(3, 1), (4, 1)]
    assert sum(doc["critical_path"]["rank_counts"].values()) == 3
