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


def test_a_loop_phase_that_only_joins_the_helpers_stream_is_read_on_the_loops_stream(tmp_path):
    # GIVEN a scheduler loop (schedule, process) on stream 7 and a worker thread whose forward
    # runs on stream 20 (forked off 7, joined back by process); process launches nothing of its
    # own, schedule only in the warm-up cycle; while process runs, a helper thread forks stream
    # 16 off 7 and copies the KV cache off (3.5 ms), and the next cycle's schedule joins 16 into
    # 7 before the worker's forward may reuse the blocks
    t = FakeTrace()
    copy = [(460, 3960), (4260, 7760)]
    forward = [(120, 420), (3960, 4260), (7760, 8060)]
    for c in range(3):
        b = c * 3000
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


def test_a_copy_only_phase_is_read_on_the_stream_it_forked_its_copy_stream_off(tmp_path):
    # GIVEN a loop thread (schedule, process on stream 7) and a worker (forward on stream 20);
    # both take results off on one copy stream 12: forward forks 12 off 20, then process forks
    # 12 off 7 and copies a token off (process launches nothing else); while process runs, the
    # worker launches a 1 ms kernel on 20 outside its phase (the next batch's preparation)
    t = FakeTrace()
    for c in range(3):
        b = c * 5000
        t.range(f"cycle {c}", b * U, (b + 500) * U)
        t.range("schedule", b * U, (b + 100) * U)
        t.range("forward", (b + 100) * U, (b + 300) * U, tid=WORKER)
        t.range("process", (b + 300) * U, (b + 500) * U)
        launch(t, b + 5, (b + 10, b + 60))
        wait_stream(t, 1, c + 1, b + 101, waiter=20, src=7, tid=WORKER)
        launch(t, b + 110, (b + 120, b + 250), stream=20, tid=WORKER)
        wait_stream(t, 2, 2 * c + 1, b + 260, waiter=12, src=20, tid=WORKER)
        t.copy(t.call("cudaMemcpyAsync", (b + 265) * U, (b + 267) * U, tid=WORKER), (b + 270) * U, (b + 280) * U, kind=2, stream=12)
        wait_stream(t, 2, 2 * c + 2, b + 310, waiter=12, src=7)
        t.copy(t.call("cudaMemcpyAsync", (b + 315) * U, (b + 317) * U), (b + 320) * U, (b + 330) * U, kind=2, stream=12)
        launch(t, b + 350, (b + 360, b + 1360), stream=20, tid=WORKER)
    # WHEN analysed
    got = per_cycle(t, tmp_path, ("schedule", "forward", "process"))
    # THEN process is read on 7, the stream it forked 12 off (not 20, which the worker forked 12
    # off before): schedule b..b+100 (handed to the worker at its CPU end; its kernel ended at
    # b+60), forward b+100..b+300 (its kernel on 20 ended at b+250), process b+300..b+500 (its
    # CPU end: nothing queued on 7). On 20 process would end at b+1360, the worker's kernel: 1060 us
    assert got == [(c, n, us, s) for c in range(3) for n, us, s in (("schedule", 100, 7), ("forward", 200, 20), ("process", 200, 7))]
