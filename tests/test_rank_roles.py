"""Ranks of several processes and files: which process is which rank, and which rank gated a
cycle where some ranks mark no phases or all arrive at once. Hand-built traces (FakeTrace):
per cycle (b = c * 1000 us) draft b..b+100 (kernel b+20..b+80), verify b+100..b+400 (compute
b+120..b+200+late, then an all-reduce from b+200+late to b+300 on every rank)."""

from __future__ import annotations

from nsys_factory import FakeTrace
from tracerecon.api import load

U = 1000
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], pid: int, device: int, name: str = "k") -> None:
    c = t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid)
    t.kernel(c, gpu_us[0] * U, gpu_us[1] * U, pid=pid, device=device, name=name)


def rank_cycles(t: FakeTrace, pid: int, device: int, n: int = 5, late_us: int = 0, phases: bool = True, mark: int | None = None) -> None:
    if mark is not None:
        t.mark(f"tracerecon.rank={mark}", 1, pid=pid)
    for c in range(n):
        b = c * 1000
        if phases:
            t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=pid)
        launch(t, b + 10, (b + 20, b + 80), pid, device)
        launch(t, b + 110, (b + 120, b + 200 + late_us), pid, device)
        launch(t, b + 120, (b + 200 + late_us, b + 300), pid, device, ALL_REDUCE)


def test_a_late_rank_without_phase_ranges_is_the_straggler(tmp_path):
    # GIVEN one report of three ranks; ranks 0 and 1 mark phases, rank 2 (device 2) marks none
    # and reaches every all-reduce 30 us after them
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1)
    rank_cycles(t, 30, 2, late_us=30, phases=False)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN ranks 0 and 1 waited 30 us per cycle (150 us over 5 cycles), and rank 2 gated
    # every cycle at the all-reduce, in no phase of its own
    assert [c.wait_ns for c in a.cross.comm] == [150 * U, 150 * U, 0]
    cp = a.cross.critical_path.to_pydict()
    assert cp["cycle"] == [0, 1, 2, 3, 4]
    assert cp["gating_rank"] == [2] * 5 and cp["how"] == ["collectives"] * 5 and cp["gating_phase"] == [None] * 5
    assert cp["max_wait_ns"] == [30 * U] * 5


def test_only_the_first_rank_marks_phases(tmp_path):
    # GIVEN two ranks where only rank 0 marks phases (a driver-worker-only annotation) and
    # rank 1 is 40 us late at every all-reduce
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1, late_us=40, phases=False)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN every cycle has rank 1 on its critical path, rank 0 having waited 40 us there
    cp = a.cross.critical_path.to_pydict()
    assert cp["gating_rank"] == [1] * 5 and cp["how"] == ["collectives"] * 5
    assert cp["waits_ns"] == ['{"0": 40000, "1": 0}'] * 5


def test_ranks_arriving_together_gate_nothing_at_their_collectives(tmp_path):
    # GIVEN two ranks reaching every all-reduce at the same nanosecond
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN no cycle is put down to a collective (none waited); each names the rank whose work
    # ended last, and the report calls nobody a straggler
    cp = a.cross.critical_path.to_pydict()
    assert cp["how"] == ["latest end"] * 5 and cp["max_wait_ns"] == [0] * 5
    from tracerecon.present import straggler_lines

    (line,) = straggler_lines(a)
    assert line.startswith("last to finish: rank") and "none waited for it" in line
