"""GPU ops whose times cannot be (an edited or corrupt export) are dropped and said, never left
to move every phase's boundaries: one kernel moved 5 s later made a stream look busy until
then, and every later phase read 0 GPU ms, with no word. The expected numbers are worked out
by hand from the ops' times."""

from __future__ import annotations

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000  # 1 us


def three_cycles(t: FakeTrace, moved: dict | None = None, tid: int | None = None) -> None:
    """draft (b..b+100) with a kernel b+10..b+90, verify (b+100..b+200) with b+110..b+180;
    ``moved``: {(cycle, phase): (start_us, end_us)} gives that kernel other times."""
    moved = moved or {}
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        for name, at, (s, e) in (("draft", b + 5, (b + 10, b + 90)), ("verify", b + 105, (b + 110, b + 180))):
            s, e = moved.get((c, name), (s, e))
            t.kernel(t.call("cudaLaunchKernel", at * U, (at + 2) * U, tid=tid), s * U, e * U, name=name)


def per_cycle(rank):
    return [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]


EXPECTED = [(c, n, 100) for c in range(3) for n in ("draft", "verify")]


def test_a_kernel_moved_seconds_later_is_dropped_and_said(tmp_path):
    # GIVEN cycle 0's draft kernel moved 5 s later (after every later kernel on its stream)
    t = FakeTrace()
    three_cycles(t, {(0, "draft"): (5_000_010, 5_000_090)})
    # WHEN analysed
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN it is dropped with a warning, and the other phases read what their own kernels say:
    # events at b, b+100, b+200 on the idle-between-phases stream (cycle 0's draft, now with no
    # kernel, reads its CPU time: 100); kept, stream 7 looked busy until 5 s and every later
    # phase read 0
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_a_kernel_lasting_an_hour_is_dropped(tmp_path):
    # GIVEN cycle 1's verify kernel ending an hour after it started (later kernels end first)
    t = FakeTrace()
    three_cycles(t, {(1, "verify"): (1110, 3_600_000_000)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN dropped: verify of cycle 1 reads its CPU time (100), the rest their kernels
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_a_kernel_starting_before_its_launch_is_dropped(tmp_path):
    # GIVEN cycle 2's draft kernel starting 105 us before its launch call (at b+5) began (10 us
    # would be spared: a drift between the CPU and GPU clocks)
    t = FakeTrace()
    three_cycles(t, {(2, "draft"): (1900, 1990)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_overlapping_launch_calls_and_dependent_launch_overlap_drop_nothing(tmp_path):
    # GIVEN two threads whose launch calls overlap in time on one stream (either may be queued
    # first: the second call's kernel runs first), and a kernel that starts before the one
    # launched before it ends (programmatic dependent launch)
    t = FakeTrace()
    t.range("cycle 0", 0, 1000 * U)
    t.range("draft", 0, 500 * U)
    t.range("verify", 500 * U, 1000 * U)
    t.kernel(t.call("cudaLaunchKernel", 10 * U, 40 * U, tid=1), 60 * U, 100 * U)           # called first, ran second
    t.kernel(t.call("cudaLaunchKernel", 20 * U, 30 * U, tid=2), 35 * U, 55 * U)            # called second, ran first
    t.kernel(t.call("cudaLaunchKernel", 510 * U, 512 * U), 520 * U, 700 * U)
    t.kernel(t.call("cudaLaunchKernel", 514 * U, 516 * U), 690 * U, 800 * U)               # starts 10 us before the one before it ends
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN nothing is dropped
    assert a.ranks[0].gpu_ops.num_rows == 4
    assert not any("cannot be" in w for w in a.warnings)


def test_a_short_dependent_kernel_ending_before_a_long_one_drops_nothing(tmp_path):
    # GIVEN a long kernel (b+10..b+2500) and one launched 4 us later that starts 10 us after it
    # and ends long before it (programmatic dependent launch without a wait)
    t = FakeTrace()
    t.range("cycle 0", 0, 3000 * U)
    t.range("verify", 0, 3000 * U)
    t.kernel(t.call("cudaLaunchKernel", 2 * U, 4 * U), 10 * U, 2500 * U)
    t.kernel(t.call("cudaLaunchKernel", 6 * U, 8 * U), 20 * U, 90 * U)
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",)))
    # THEN both are kept, and verify reads until the long one's end
    assert a.ranks[0].gpu_ops.num_rows == 2 and not any("cannot be" in w for w in a.warnings)


def test_a_dropped_op_is_not_also_said_to_have_never_run(tmp_path):
    # GIVEN the trace's last kernel starting 105 us before its launch call
    t = FakeTrace()
    three_cycles(t, {(2, "verify"): (2000, 2090)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN one warning says it was dropped, none that the last launch never ran
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)
    assert not any("have no GPU work in the trace" in w for w in a.warnings), a.warnings


def test_a_kernel_ending_milliseconds_after_later_ones_is_dropped(tmp_path):
    # GIVEN cycle 0's verify kernel ending at 5 ms: after the four kernels launched after it,
    # which all ended first (one dependent kernel may end first, never every later one)
    t = FakeTrace()
    three_cycles(t, {(0, "verify"): (110, 5000)})
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig())
    # THEN dropped and said: kept, every later phase read 0 (verify 4900 us), with no word
    assert per_cycle(a.ranks[0]) == EXPECTED
    assert any("dropped 1 GPU op(s) whose times cannot be" in w for w in a.warnings)


def test_process_codes_hold_a_process_the_sample_missed():
    # GIVEN one op of process 7 among 20,000 of process 5 (the sample of every 4th... value skips it)
    import numpy as np

    from tracerecon.analysis.columns import _stream_codes

    pid = np.array([5] * 10_001 + [7] + [5] * 10_000, dtype=np.int64)
    codes = _stream_codes(pid, np.zeros(len(pid), np.int64), np.full(len(pid), 7, np.int64))
    # THEN its stream code differs from the others', which all agree
    assert len(set(codes.tolist())) == 2 and codes[10_001] != codes[0]
