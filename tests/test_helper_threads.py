"""A helper thread that holds no phase (a KV-cache offload thread) copying on a stream of its
own, forked off the default stream the engine's threads share, and joined into the loop's
stream later. Events on a phase's current stream see the helper's copies only through such a
join; which stream a phase that launched nothing of its own is read on decides whether it does.
Every expected number is worked out by hand from the ops' times: an event recorded on a stream
at a CPU instant completes at the later of that instant and the work queued there by then
(and what the stream was made to wait for)."""

from __future__ import annotations

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us
WORKER, HELPER = 12, 14


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, tid: int | None = None) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def wait_stream(t: FakeTrace, event: int, record: int, at_us: int, waiter: int, src: int, tid: int | None = None) -> None:
    """``waiter.wait_stream(src)`` at ``at_us`` on thread ``tid``."""
    t.event_record(event=event, record=record, start=at_us * U, end=(at_us + 1) * U, stream=src, tid=tid)
    t.stream_wait(event=event, record=record, start=(at_us + 1) * U, end=(at_us + 2) * U, stream=waiter, tid=tid)


def per_cycle(t: FakeTrace, tmp_path, phases: tuple[str, ...]) -> list[tuple[int, str, int, int]]:
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases)).ranks
    return [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist()]


def offload_engine(warm_up_in_a_cycle: bool = True) -> FakeTrace:
    """A scheduler loop (schedule, process) on stream 7 and a worker thread whose forward runs on
    stream 20 (forked off 7, joined back by process); process launches nothing of its own,
    schedule only in the warm-up cycle (``warm_up_in_a_cycle``: that cycle has a cycle range);
    while process runs, a helper thread forks stream 16 off 7 and copies the KV cache off (3.5
    ms), and the next cycle's schedule joins 16 into 7 before the worker's forward may reuse the
    blocks."""
    t = FakeTrace()
    copy = [(460, 3960), (4260, 7760)]
    forward = [(120, 420), (3960, 4260), (7760, 8060)]
    for c in range(3):
        b = c * 3000
        if c or warm_up_in_a_cycle:
            t.range(f"cycle {c}", b * U, (b + 600) * U)
        t.range("schedule", b * U, (b + 100) * U)
        t.range("forward", (b + 100) * U, (b + 400) * U, tid=WORKER)
        t.range("process", (b + 400) * U, (b + 600) * U)
        if c == 0:
            launch(t, b + 5, (10, 60))
        else:
            wait_stream(t, 3, c, b + 20, waiter=7, src=16)
        wait_stream(t, 1, c + 1, b + 101, waiter=20, src=7, tid=WORKER)
        launch(t, b + 110, forward[c], stream=20, tid=WORKER)
        wait_stream(t, 2, c + 1, b + 401, waiter=7, src=20)
        if c < 2:
            wait_stream(t, 4, c + 1, b + 450, waiter=16, src=7, tid=HELPER)
            t.copy(t.call("cudaMemcpyAsync", (b + 455) * U, (b + 457) * U, tid=HELPER), copy[c][0] * U, copy[c][1] * U, kind=2, stream=16)
    return t


def test_a_loop_phase_that_only_joins_the_helpers_stream_is_read_on_the_loops_stream(tmp_path):
    # GIVEN a scheduler loop beside a worker thread and a KV-offload helper thread (``offload_engine``)
    t = offload_engine()
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward", "process"))
    # THEN by hand: cycle 0: schedule 0..100 (its kernel ends at 60; the hand-off to the worker
    # is read at schedule's CPU end), forward 100..420, process 420 (7 waits for forward) ..
    # 600 (its CPU end, the cycle's last phase); cycle 1: schedule 3000 .. 3960 (7 waits for
    # the helper's copy, joined at 3021): 960 us, forward 3960..4260, process 4260..4260 (7
    # done by its CPU end); cycle 2: schedule 6000..7760: 1760 us. Read on forward's stream 20
    # (the phase before it, of another thread), schedule would be 100 us every cycle
    assert got == [
        (0, "schedule", 100, 7), (0, "forward", 320, 20), (0, "process", 180, 7),
        (1, "schedule", 960, 7), (1, "forward", 300, 20), (1, "process", 0, 7),
        (2, "schedule", 1760, 7), (2, "forward", 300, 20), (2, "process", 0, 7),
    ]


def token_copy_engine(worker_forks_at: int, loop_forks_at: int, loop_wait_calls_lost: bool = False) -> FakeTrace:
    """A loop thread (schedule, process on stream 7) and a worker (forward on stream 20, forked
    off 7); both take results off on one copy stream 12: the worker forks 12 off 20 ``b +
    worker_forks_at`` us into each cycle and copies there, the loop thread forks 12 off 7 ``b +
    loop_forks_at`` us in; process copies a token off on 12 (b+315, nothing else of its own);
    the worker launches a 1 ms kernel on 20 at b+350, outside its phase (the next batch).
    ``loop_wait_calls_lost``: the loop's ``cudaStreamWaitEvent`` calls are not in the trace
    (their synchronization records are): which thread forked is unknown there."""
    t = FakeTrace()
    lost: list[int] = []
    for c in range(3):
        b = c * 5000
        t.range(f"cycle {c}", b * U, (b + 500) * U)
        t.range("schedule", b * U, (b + 100) * U)
        t.range("forward", (b + 100) * U, (b + 300) * U, tid=WORKER)
        t.range("process", (b + 300) * U, (b + 500) * U)
        launch(t, b + 5, (b + 10, b + 60))
        wait_stream(t, 1, c + 1, b + 101, waiter=20, src=7, tid=WORKER)
        launch(t, b + 110, (b + 120, b + 250), stream=20, tid=WORKER)
        wait_stream(t, 2, c + 1, b + worker_forks_at, waiter=12, src=20, tid=WORKER)
        at = b + worker_forks_at + 5
        t.copy(t.call("cudaMemcpyAsync", at * U, (at + 2) * U, tid=WORKER), (at + 5) * U, (at + 15) * U, kind=2, stream=12)
        t.event_record(event=3, record=c + 1, start=(b + loop_forks_at) * U, end=(b + loop_forks_at + 1) * U, stream=7)
        lost.append(t.stream_wait(event=3, record=c + 1, start=(b + loop_forks_at + 1) * U, end=(b + loop_forks_at + 2) * U, stream=12))
        t.copy(t.call("cudaMemcpyAsync", (b + 315) * U, (b + 317) * U), (b + 320) * U, (b + 330) * U, kind=2, stream=12)
        launch(t, b + 350, (b + 360, b + 1360), stream=20, tid=WORKER)
    if loop_wait_calls_lost:
        t.runtime = [call for call in t.runtime if call["correlationId"] not in lost]
    return t


def test_a_copy_only_phase_is_read_on_the_stream_it_forked_its_copy_stream_off(tmp_path):
    # GIVEN a loop thread (schedule, process on stream 7) and a worker (forward on stream 20);
    # both take results off on one copy stream 12: forward forks 12 off 20, then process forks
    # 12 off 7 and copies a token off (process launches nothing else); while process runs, the
    # worker launches a 1 ms kernel on 20 outside its phase (the next batch's preparation)
    t = token_copy_engine(worker_forks_at=260, loop_forks_at=310)
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward", "process"))
    # THEN process is read on 7, the stream it forked 12 off (not 20, which the worker forked 12
    # off before): schedule b..b+100 (handed to the worker at its CPU end; its kernel ended at
    # b+60), forward b+100..b+300 (its kernel on 20 ended at b+250), process b+300..b+500 (its
    # CPU end: nothing queued on 7). On 20 process would end at b+1360, the worker's kernel: 1060 us
    assert got == [(c, n, us, s) for c in range(3) for n, us, s in (("schedule", 100, 7), ("forward", 200, 20), ("process", 200, 7))]


def test_another_threads_fork_inside_a_copy_only_phase_does_not_move_it(tmp_path):
    # GIVEN the loop thread forks copy stream 12 off 7 in schedule, and process (loop thread)
    # only copies a token off on 12; while process runs, the worker, outside its phase, forks
    # 12 off its stream 20, copies there and queues a 1 ms kernel on 20 (the next batch)
    t = token_copy_engine(worker_forks_at=340, loop_forks_at=50)
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward", "process"))
    # THEN process is read on 7, the stream its own thread forked 12 off: b+300..b+500 (its CPU
    # end; nothing queued on 7). On the worker's 20 it would end at b+1360: 1060 us
    assert got == [(c, n, us, s) for c in range(3) for n, us, s in (("schedule", 100, 7), ("forward", 200, 20), ("process", 200, 7))]


def test_a_phase_read_alone_that_launched_nothing_takes_its_own_threads_stream(tmp_path):
    # GIVEN a worker's forward range held whole inside the loop's schedule range (so read alone);
    # cycle 0's forward launches on 20 (done at 1050 us), later cycles' launch nothing; schedule
    # queues 1 ms on 7 each cycle
    t = FakeTrace()
    for c in range(3):
        b = c * 5000
        t.range(f"cycle {c}", b * U, (b + 500) * U)
        t.range("schedule", b * U, (b + 500) * U)
        t.range("forward", (b + 100) * U, (b + 300) * U, tid=WORKER)
        launch(t, b + 5, (b + 10, b + 1010))
        if c == 0:
            launch(t, b + 110, (b + 1020, b + 1050), stream=20, tid=WORKER)
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward"))
    # THEN forward in cycles 1 and 2 is read on the worker's stream 20, idle: its CPU span,
    # 200 us (on schedule's stream 7 it reads 0: its range ends before 7's kernel does);
    # schedule b..b+1010 every cycle; cycle 0's forward 100..1050
    assert got == [(0, "schedule", 1010, 7), (0, "forward", 950, 20), (1, "schedule", 1010, 7), (1, "forward", 200, 20),
                   (2, "schedule", 1010, 7), (2, "forward", 200, 20)]


def test_a_threads_stream_is_told_by_its_warm_up_outside_the_cycle_ranges(tmp_path):
    # GIVEN the first test's engine with no range for the warm-up cycle: the loop thread's only
    # launch (the warm-up schedule's kernel on 7) is in a phase of no cycle
    t = offload_engine(warm_up_in_a_cycle=False)
    # WHEN analysed
    got = [row for row in per_cycle(t, tmp_path, ("schedule", "forward", "process")) if row[0] is not None]
    # THEN the cycles read as in the first test (on 7, the loop thread's stream from its
    # warm-up): schedule 960 and 1760 us; on the worker's 20 schedule would read 100 us and
    # the helper's copy would land in forward (1160 / 1960 us)
    assert got == [
        (0, "schedule", 960, 7), (0, "forward", 300, 20), (0, "process", 0, 7),
        (1, "schedule", 1760, 7), (1, "forward", 300, 20), (1, "process", 0, 7),
    ]


def test_a_loop_phase_forked_inside_reads_its_own_stream_though_the_wait_calls_are_lost(tmp_path):
    # GIVEN the second test's engine with the loop thread's cudaStreamWaitEvent calls not in the
    # trace (their synchronization records are): the fork inside process has no known thread
    t = token_copy_engine(worker_forks_at=260, loop_forks_at=310, loop_wait_calls_lost=True)
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward", "process"))
    # THEN a fork by an unknown thread inside the phase counts as the phase's own: process on 7,
    # 200 us, as in the second test (the worker's fork before it would give 20: 1060 us)
    assert got == [(c, n, us, s) for c in range(3) for n, us, s in (("schedule", 100, 7), ("forward", 200, 20), ("process", 200, 7))]


def test_a_warm_up_on_graph_captures_side_stream_lends_no_stream_to_the_cycles(tmp_path):
    # GIVEN one thread whose warm-up forward (outside the cycle ranges) ran under graph
    # capture's side stream 30, 1.5 ms still queued there as cycle 0 begins; in the cycles
    # schedule and process launch nothing, forward 220 us on 7 (the thread's stream again)
    t = FakeTrace()
    t.range("forward", 0, 100 * U)
    launch(t, 5, (10, 1500), stream=30)
    for c in range(3):
        b = 200 + c * 2000
        t.range(f"cycle {c}", b * U, (b + 600) * U)
        t.range("schedule", b * U, (b + 100) * U)
        t.range("forward", (b + 100) * U, (b + 400) * U)
        t.range("process", (b + 400) * U, (b + 600) * U)
        launch(t, b + 120, (b + 130, b + 350))
    # WHEN analysed
    got = [row for row in per_cycle(t, tmp_path, ("schedule", "forward", "process")) if row[0] is not None]
    # THEN every cycle reads on 7, where its events are: schedule b..b+100, forward b+100..b+400
    # (its CPU end; its kernel ended at b+350), process b+400..b+600. On 30, cycle 0's schedule
    # would read 0 and end at 1500 us, taking forward's time with it
    assert got == [(c, n, us, 7) for c in range(3) for n, us in (("schedule", 100), ("forward", 300), ("process", 200))]


def test_cycles_that_launch_nothing_read_the_stream_of_their_threads_warm_up(tmp_path):
    # GIVEN one thread whose only launch in a phase is the warm-up schedule's (outside the cycle
    # ranges, on 7); in each cycle, between schedule's and process's ranges, it queues 190 us on 7
    t = FakeTrace()
    t.range("schedule", 0, 100 * U)
    launch(t, 5, (10, 60))
    for c in range(3):
        b = 1000 + c * 2000
        t.range(f"cycle {c}", b * U, (b + 600) * U)
        t.range("schedule", b * U, (b + 200) * U)
        t.range("process", (b + 300) * U, (b + 600) * U)
        launch(t, b + 250, (b + 260, b + 450))
    # WHEN analysed
    got = [row for row in per_cycle(t, tmp_path, ("schedule", "process")) if row[0] is not None]
    # THEN read on 7, as events recorded there as each scope closes and opens would: schedule
    # b..b+200 (its CPU end, 7 idle), process b+450 (at its CPU start b+300, 7 holds the work
    # queued between the scopes until b+450) .. b+600: schedule 200, process 150 us. Without a
    # stream (none launched in a cycle) no cycle is read at all
    assert got == [(c, n, us, 7) for c in range(3) for n, us in (("schedule", 200), ("process", 150))]
