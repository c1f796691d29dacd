"""Which event record a stream wait or an event synchronize names (``EventRecords``), checked
against brute force on small random record sets: the rule as its docstring states it, one
record and one ask at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis.stream_clock import RECORD_AFTER_WAIT_NS, EventRecords
from tracerecon.analysis.projection import I64_MIN

# (pid, event, record number or -1, stream row, CPU time): few values each, so that keys and
# instants repeat (re-recorded events, two records at one instant, repeated record numbers).
records = st.lists(st.tuples(st.integers(1, 2), st.integers(-1, 1), st.integers(-1, 2), st.integers(0, 5), st.integers(0, 6)), max_size=40)
asks = st.lists(st.tuples(st.integers(1, 2), st.integers(-1, 1), st.integers(-1, 2), st.integers(0, 7)), max_size=20)
# (asks far before the records too: a record made after the wait that names it)
asks = asks.map(lambda xs: [(p, e, s, t if t < 7 else -2 * RECORD_AFTER_WAIT_NS) for p, e, s, t in xs])


def brute_named_by(recs, pid, event, sync, t):
    """(stream row, CPU time) of the record named, else (-1, I64_MIN)."""
    if sync >= 0:
        same = [r for r in recs if (r[0], r[1], r[2]) == (pid, event, sync)]
        # the later row, unless its call began well after the ask (then none: a record comes first)
        return (same[-1][3], same[-1][4]) if same and same[-1][4] <= t + RECORD_AFTER_WAIT_NS else (-1, I64_MIN)
    made = [(r[4], i, r) for i, r in enumerate(recs) if (r[0], r[1]) == (pid, event) and r[4] <= t]
    if not made:
        return (-1, I64_MIN)
    _, _, r = max(made)  # the latest instant, the later row on a tie
    return (r[3], r[4])


def columns(rows, n):
    return [np.array([r[k] for r in rows], dtype=np.int64) for k in range(n)]


@given(records, asks)
@settings(max_examples=400, deadline=None)
def test_the_record_named_is_the_one_brute_force_finds(recs, wants):
    er = EventRecords.of(*columns(recs, 5))
    row, cpu = er.named_by(*columns(wants, 4))
    assert [(int(a), int(b)) for a, b in zip(row, cpu)] == [brute_named_by(recs, *w) for w in wants]


@given(records, asks)
@settings(max_examples=300, deadline=None)
def test_recorded_before_is_any_record_of_the_event_before(recs, wants):
    er = EventRecords.of(*columns(recs, 5))
    got = er.first_before(*(columns(wants, 4)[k] for k in (0, 1, 3)))
    assert got.tolist() == [any((r[0], r[1]) == (p, e) and r[4] < t for r in recs) for p, e, _, t in wants]


def test_given_a_re_recorded_event_when_a_wait_names_no_record_number_then_it_takes_the_latest_record_made_by_then():
    # GIVEN event 7 of process 1 recorded on stream rows 0, 1, 2 at 10, 20, 30 (no record numbers)
    er = EventRecords.of(np.array([1, 1, 1]), np.array([7, 7, 7]), np.array([-1, -1, -1]), np.array([0, 1, 2]), np.array([10, 20, 30]))
    # WHEN waits at 5, 20, 25 and 99 ask for it
    row, cpu = er.named_by(np.array([1, 1, 1, 1]), np.array([7, 7, 7, 7]), np.array([-1, -1, -1, -1]), np.array([5, 20, 25, 99]))
    # THEN none before the first record; the record made at the wait's instant counts
    assert row.tolist() == [-1, 1, 1, 2]
    assert cpu.tolist() == [I64_MIN, 20, 20, 30]


def test_given_record_numbers_when_a_wait_names_one_then_the_time_of_the_wait_does_not_matter():
    # GIVEN records 1 and 2 of event 7 (rows 0 and 1, at 10 and 20)
    er = EventRecords.of(np.array([1, 1]), np.array([7, 7]), np.array([1, 2]), np.array([0, 1]), np.array([10, 20]))
    # WHEN a wait at 15 names record 2 (its record call returned after the wait was asked), one names record 3
    row, cpu = er.named_by(np.array([1, 1]), np.array([7, 7]), np.array([2, 3]), np.array([15, 15]))
    # THEN record 2 is named; record 3 is in no row
    assert row.tolist() == [1, -1] and cpu.tolist() == [20, I64_MIN]


def test_given_two_records_of_an_event_at_one_instant_when_a_wait_names_the_event_then_the_later_row_is_named():
    # GIVEN event 7 recorded at 10 on stream row 0, then (a later row) at 10 on stream row 1
    er = EventRecords.of(np.array([1, 1]), np.array([7, 7]), np.array([-1, -1]), np.array([0, 1]), np.array([10, 10]))
    # WHEN a wait at 12 names the event
    row, _ = er.named_by(np.array([1]), np.array([7]), np.array([-1]), np.array([12]))
    # THEN the later row is the latest record, as it was in the per-wait lookup this replaced
    assert row.tolist() == [1]


def _waits_run(tmp_path, gap_us: int, record: dict[int, tuple[int, int, int]]):
    """5 cycles (b = gap_us * c): draft [b, b+100] runs a kernel on 20 (b+15..b+400) and records
    event 1 there (its record c+1; its call from b+20 to b+22 on the loop's thread, else as
    ``record`` gives it for that cycle: (start, end, thread) offsets from b); verify [b+100,
    b+200] makes 7 wait for that record (b+110) and runs a kernel on 7 (b+400..b+450). The run
    and its phases as (cycle, phase, GPU us)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_factory import FakeTrace
    from tracerecon.analysis.config import PhaseConfig
    from tracerecon.api import load

    U = 1000
    t = FakeTrace()
    for c in range(5):
        b = gap_us * c
        t.range(f"cycle {c}", b * U, (b + 200) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 15) * U, (b + 400) * U, stream=20)
        start, end, tid = record.get(c, (20, 22, None))
        t.event_record(1, c + 1, (b + start) * U, (b + end) * U, stream=20, tid=tid)
        t.range("verify", (b + 100) * U, (b + 200) * U)
        t.stream_wait(1, c + 1, (b + 110) * U, (b + 112) * U, stream=7)
        t.kernel(t.call("cudaLaunchKernel", (b + 120) * U, (b + 122) * U), (b + 400) * U, (b + 450) * U, stream=7)
    run = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify"), skip_cycles=0))
    return run, [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in run.ranks[0].phases.to_pylist()]


# By hand, every cycle: draft b..b+400 (its kernel's end, where verify's boundary meets 20
# done), verify b+400..b+450 (its kernel).
EVERY_CYCLE = [(c, n, us) for c in range(5) for n, us in (("draft", 400), ("verify", 50))]


def test_a_wait_naming_a_record_made_long_after_it_is_not_modelled_and_said(tmp_path):
    # GIVEN _waits_run's cycles 1000 us apart, cycle 2's record call 50 ms late in the export,
    # after the wait that names it (times gone wrong in the export)
    run, got = _waits_run(tmp_path, 1000, {2: (50_000, 50_002, None)})
    # THEN every cycle reads as the others (cycle 2's wait had held 7 until the late record:
    # verify 2000 us, and cycle 3's phases 0)
    assert got == EVERY_CYCLE
    # and a warning says one wait named a record made after it
    assert any("1 stream wait(s) (cudaStreamWaitEvent) name an event record made after them" in w for w in run.warnings), run.warnings


def test_a_record_call_begun_before_the_wait_is_its_record_however_late_it_returned(tmp_path):
    # GIVEN _waits_run's cycles 10000 us apart, cycle 2's record made on another thread: its
    # call begins at b+20, before the wait (b+110), and returns only at b+2100 (preempted
    # inside the call; a review's shape)
    run, got = _waits_run(tmp_path, 10_000, {2: (20, 2100, 2)})
    # THEN every wait finds its record (none is said to be made after its wait: by the call's
    # return, cycle 2's was), and every cycle reads alike
    assert not any("made after them" in w for w in run.warnings), run.warnings
    assert got == EVERY_CYCLE
