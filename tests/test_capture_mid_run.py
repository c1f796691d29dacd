"""A capture begun mid-run (``--delay``, ``--capture-range``) of an engine whose CPU runs a
cycle ahead of the GPU: the trace starts with GPU work queued before it began. CUDA events
recorded at the first phase boundaries wait for that work; tracerecon must too, and only where
the capture began mid-run (CUPTI's correlation ids say so: they count from the process's start).

Hand-computed cases (us): capture starts at 1000; cycle 0's forward kernel(s), launched before,
run on stream 7 until 2000. Cycle 1: prepare [1100, 1200] copies (launched 1110-1120, runs
2000-2010 behind them), forward [1200, 1400] launches a kernel (1210-1220, runs 2010-3010).
Cycle 2: prepare [3100, 3200] copies (3120-3130), forward [3200, 3400] (kernel 3220-4220).
Events on stream 7: cycle 1 prepare 2000 -> 2010 = 10, forward 2010 -> 3010 = 1000; cycle 2
prepare 3100 -> 3200 = 100, forward 3200 -> 4220 = 1020.
"""

from __future__ import annotations

import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000
PHASES = PhaseConfig(phases=("prepare", "forward"))


def visible_cycles(t: FakeTrace, first_copy_start: int = 2000) -> None:
    t.cycle(1, 1100 * U, 1200 * U, 1400 * U, names=("prepare", "forward"))
    c = t.call("cudaMemcpyAsync", 1110 * U, 1120 * U)
    t.copy(c, first_copy_start * U, (first_copy_start + 10) * U, kind=1)
    k = t.call("cudaLaunchKernel", 1210 * U, 1220 * U)
    t.kernel(k, (first_copy_start + 10) * U, (first_copy_start + 1010) * U)
    t.cycle(2, 3100 * U, 3200 * U, 3400 * U, names=("prepare", "forward"))
    c = t.call("cudaMemcpyAsync", 3110 * U, 3120 * U)
    t.copy(c, 3120 * U, 3130 * U, kind=1)
    k = t.call("cudaLaunchKernel", 3210 * U, 3220 * U)
    t.kernel(k, 3220 * U, 4220 * U)


def gpu_us(path) -> list[tuple[int, str, float]]:
    (rank,) = load([path], PHASES).ranks
    p = rank.phases.to_pydict()
    return [(c, n, g / U) for c, n, g in zip(p["cycle"], p["phase"], p["gpu_ns"])]


def test_work_queued_before_a_mid_run_capture_that_the_trace_lacks(tmp_path):
    # GIVEN a mid-run capture (correlation ids in the millions) whose trace lacks cycle 0's
    # kernel altogether (CUPTI saw neither its launch nor its run)
    t = FakeTrace(_corr=5_000_000)
    visible_cycles(t)
    path = t.write(tmp_path / "mid_run.sqlite")
    # THEN every phase of every cycle reads what the events read
    assert gpu_us(path) == [(0, "prepare", 10.0), (0, "forward", 1000.0), (1, "prepare", 100.0), (1, "forward", 1020.0)]
    a = load([path], PHASES)
    assert any("queued before the capture began, which the trace does not show" in w and "0.880 ms" in w for w in a.warnings)


@pytest.mark.parametrize("first_call", [20_000, 5_000_000])
def test_work_queued_before_a_mid_run_capture_without_its_launching_calls(tmp_path, first_call):
    # GIVEN the same, where the trace holds cycle 0's two kernels (900-1500, 1500-2000) but not
    # the calls that launched them, numbered before the first call the trace holds (a capture
    # begun after 20,000 calls, or after millions)
    t = FakeTrace(_corr=first_call)
    t.kernel(first_call - 10, 900 * U, 1500 * U)
    t.kernel(first_call - 9, 1500 * U, 2000 * U)
    visible_cycles(t)
    path = t.write(tmp_path / "mid_run_calls.sqlite")
    # THEN the kernel that started after prepare's start still counts before it (it was
    # launched before the capture): prepare 10, not 2010 - 1500 = 510
    assert gpu_us(path) == [(0, "prepare", 10.0), (0, "forward", 1000.0), (1, "prepare", 100.0), (1, "forward", 1020.0)]
    a = load([path], PHASES)
    assert any("2 GPU op(s) at the head of their streams have no launching call" in w for w in a.warnings)


def test_a_first_op_that_starts_late_in_a_capture_from_the_start(tmp_path):
    # GIVEN a capture from the process's start (correlation ids from 100) whose first copy
    # starts 180 us after its launch (a cold start: nothing was queued before it)
    t = FakeTrace()
    visible_cycles(t, first_copy_start=1300)
    path = t.write(tmp_path / "from_start.sqlite")
    # THEN prepare's start boundary is its CPU start on an idle GPU: 1100 -> 1310 = 210 us
    assert gpu_us(path)[:2] == [(0, "prepare", 210.0), (0, "forward", 1000.0)]
    a = load([path], PHASES)
    assert not any("capture began" in w for w in a.warnings)


def test_hidden_work_is_found_behind_a_stream_wait_whose_work_was_done_long_before(tmp_path):
    # GIVEN a capture begun mid-run (call numbers from 1,500,000), 6 cycles of 1 ms from 1000 us:
    # 'schedule' [b, b+50] copies inputs on stream 13 (b+10..b+15) and records event 1 there at
    # b+20; 'draft' [b+50, b+100] makes stream 7 wait for it (b+55) and launches a 300 us kernel
    # at b+60; 'process' [b+100, b+900] synchronizes 7. In cycle 0 work queued before the
    # capture (not in the trace) holds stream 7 until b+400: the kernel starts there, 340 us
    # after its launch, though the event it waits for was done at b+20
    t = FakeTrace()
    t._corr = 1_500_000
    for c in range(6):
        b = (1000 + 1000 * c) * U
        t.range(f"cycle {c}", b, b + 900 * U)
        t.range("schedule", b, b + 50 * U)
        t.range("draft", b + 50 * U, b + 100 * U)
        t.range("process", b + 100 * U, b + 900 * U)
        t.copy(t.call("cudaMemcpyAsync_v3020", b + 5 * U, b + 8 * U), b + 10 * U, b + 15 * U, kind=1, stream=13)
        t.event_record(1, c + 1, b + 20 * U, b + 22 * U, stream=13)
        t.stream_wait(1, c + 1, b + 55 * U, b + 57 * U, stream=7)
        start = b + (400 if c == 0 else 65) * U
        t.kernel(t.call("cudaLaunchKernel", b + 60 * U, b + 63 * U), start, start + 300 * U, stream=7)
        s = t.call("cudaStreamSynchronize_v3020", b + 110 * U, start + 302 * U)
        t.sync_record(s, b + 110 * U, start + 302 * U, stream=7)
    a = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "draft", "process"), skip_cycles=0))
    # THEN cycle 0 reads as events on stream 7 do: schedule 400 - 400 = 0 us (the hidden work
    # holds both its boundaries), draft from 400 to the kernel's end at 700 = 300 us, process
    # 700 .. 900 = 200 us (the wait had been taken to explain the late start: 50 and 650 us)
    got = {p["phase"]: p["gpu_ns"] for p in a.ranks[0].phases.to_pylist() if p["cycle"] == 0}
    assert got == {"schedule": 0, "draft": 300 * U, "process": 200 * U}
