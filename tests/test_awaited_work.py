"""Which GPU work a blocking call waited for (the syncs table's waited_* columns, phases'
absorbed_ns): a stream synchronize waits for its stream's work launched before it, an event
synchronize for the work before the event's record, each with what those streams were made to
wait for; work of other streams that merely ended during the wait is none of it. Every expected
number is worked out by hand from the ops' times."""

from __future__ import annotations

import sqlite3

from conftest import PUBLIC, need_public
from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us


def kernel(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int = 7, tid: int | None = None, device: int = 0) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream, device=device)


def stream_sync(t: FakeTrace, start_us: int, end_us: int, stream: int, tid: int | None = None) -> None:
    corr = t.call("cudaStreamSynchronize_v3020", start_us * U, end_us * U, tid=tid)
    t.sync_record(corr, start_us * U, end_us * U, stream=stream)


def syncs_of(trace: FakeTrace, tmp_path, phases: tuple[str, ...]) -> list[tuple]:
    (rank,) = load([trace.write(tmp_path / "t.sqlite")], PhaseConfig(phases=phases)).ranks
    return [(s["api"], s["waited_gpu_ns"] // U, s["waited_other_phase_ns"] // U, s["waited_for_phase"]) for s in rank.syncs.to_pylist()]


def test_a_stream_synchronize_on_a_threads_own_stream_waits_for_nothing_on_the_main_stream(tmp_path):
    # GIVEN forward on thread 11 launches a kernel on stream 7 (20..305 us); an offload phase on
    # thread 12 launches one on its own stream 21 (120..300 us) and synchronizes stream 21
    # (120..310 us). Stream 21 never waits for stream 7
    t = FakeTrace()
    t.range("forward", 0, 1000 * U, tid=11)
    t.range("offload", 100 * U, 700 * U, tid=12)
    kernel(t, 10, (20, 305), tid=11)
    kernel(t, 110, (120, 300), stream=21, tid=12)
    stream_sync(t, 120, 310, stream=21, tid=12)
    # WHEN analysed
    # THEN the wait is its own kernel's 180 us (120..300), of no other phase (the last work it
    # waited for is its own phase's); forward's kernel, which ended at 305 us inside the wait,
    # is not what it waited for (with it: 185 us, all of forward's)
    assert syncs_of(t, tmp_path, ("forward", "offload")) == [("cudaStreamSynchronize", 180, 0, "offload")]


def test_an_event_synchronize_waits_for_the_work_before_its_record_and_what_that_stream_waited_for(tmp_path):
    # GIVEN one thread. sample (0..100 us) runs a kernel on 7 (20..200 us), forks copy stream 9
    # off 7 (record on 7 at 50 us, 9 waits at 52 us), copies on 9 (200..210 us) and records the
    # copy's event on 9 at 70 us. prepare (100..1000 us) launches the next kernel on 7 at 110 us
    # (200..214 us: it follows sample's on 7, but after the fork), then waits on the CPU for the
    # copy's event (cudaEventSynchronize, 120..215 us)
    t = FakeTrace()
    t.range("sample", 0, 100 * U)
    t.range("prepare", 100 * U, 1000 * U)
    kernel(t, 10, (20, 200))
    t.event_record(event=1, record=1, start=50 * U, end=51 * U, stream=7)
    t.stream_wait(event=1, record=1, start=52 * U, end=53 * U, stream=9)
    t.copy(t.call("cudaMemcpyAsync", 60 * U, 62 * U), 200 * U, 210 * U, stream=9)
    t.event_record(event=2, record=1, start=70 * U, end=71 * U, stream=9)
    kernel(t, 110, (200, 214))
    corr = t.call("cudaEventSynchronize_v3020", 120 * U, 215 * U)
    t.syncs.append({"start": 120 * U, "end": 215 * U, "deviceId": 0, "contextId": 1, "streamId": 0xFFFFFFFF, "correlationId": corr,
                    "globalPid": (10 << 24), "syncType": 1, "eventId": 2, "eventSyncId": 1})
    # WHEN analysed
    # THEN it waited for the copy (on 9, before the record) and sample's kernel (on 7, before the
    # fork that 9 waited for): 120..210 = 90 us, all of it sample's; not for prepare's own
    # kernel, launched after the fork (ending at 214 us, it would make 94 us)
    assert syncs_of(t, tmp_path, ("sample", "prepare")) == [("cudaEventSynchronize", 90, 90, "sample")]
    # and what it waited on is the stream the event was recorded on (device 0, stream 9), not
    # its synchronization record's stream 0xFFFFFFFF (CUPTI's "no stream")
    (rank,) = load([tmp_path / "t.sqlite"], PhaseConfig(phases=("sample", "prepare"))).ranks
    assert rank.syncs.select(["device_id", "stream_id"]).to_pylist() == [{"device_id": 0, "stream_id": 9}]


def _two_streams_on_gpu1() -> FakeTrace:
    """Phase a runs two kernels on stream 15 of GPU 1 (20..50 us, then 400..500 us), phase b one
    on stream 16 (60..300 us); phase c (25..600 us) is left to wait."""
    t = FakeTrace()
    t.range("a", 0, 15 * U)
    t.range("b", 15 * U, 25 * U)
    t.range("c", 25 * U, 600 * U)
    kernel(t, 5, (20, 50), stream=15, device=1)
    kernel(t, 8, (400, 500), stream=15, device=1)
    kernel(t, 18, (60, 300), stream=16, device=1)
    return t


def test_a_synchronization_record_naming_device_0_finds_its_stream_on_the_process_gpu(tmp_path):
    # GIVEN a process whose work is on GPU 1 (nsys 2026.2 writes device 0 in every
    # synchronization record): phase a runs two kernels on stream 15 (20..50 us, then 400..500
    # us); phase b one on stream 16 (60..300 us); phase c synchronizes stream 15 (30..505 us)
    t = _two_streams_on_gpu1()
    stream_sync(t, 30, 505, stream=15)
    # WHEN analysed
    # THEN the wait is stream 15's work: 30..50 and 400..500 = 120 us, all of phase a; stream
    # 16's kernel, which ended inside it, is not (with it: 360 us)
    assert syncs_of(t, tmp_path, ("a", "b", "c")) == [("cudaStreamSynchronize", 120, 120, "a")]


def test_a_device_synchronize_waits_for_every_stream_of_its_device(tmp_path):
    # GIVEN the shape above with a device synchronize (30..505 us) in place of the stream one
    t = _two_streams_on_gpu1()
    t.call("cudaDeviceSynchronize_v3020", 30 * U, 505 * U)
    # WHEN analysed
    # THEN both streams' work counts: 30..50, 60..300 and 400..500 = 360 us; b's 240 us are the
    # most of it
    assert syncs_of(t, tmp_path, ("a", "b", "c")) == [("cudaDeviceSynchronize", 360, 360, "b")]


def test_what_a_call_waited_on_is_the_device_its_process_worked_on_under_nsys_2026(tmp_path):
    # GIVEN the public 2 x H100 capture of nsys 2026.2 (one process per GPU), whose
    # synchronization records all say device 0, and a device synchronize in a made-up process
    # whose only work ran on device 1 (its record, as nsys 2026.2 writes it, says device 0)
    need_public()
    path = PUBLIC / "GindaChen__nsys-ai" / "mfu_2gpu_after.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    kernel_device = dict(con.execute("select (globalPid >> 24) & 16777215, deviceId from CUPTI_ACTIVITY_KIND_KERNEL group by 1"))
    stream_syncs = sorted(con.execute("select (globalPid >> 24) & 16777215, deviceId, streamId from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION where syncType = 3"))
    con.close()
    assert kernel_device == {148: 0, 149: 1} and {d for _, d, _ in stream_syncs} == {0}
    # WHEN analysed
    a = load([path], PhaseConfig())
    # THEN every blocking call of a rank names the device its kernels ran on (nsys's kernel
    # table), and a stream synchronize its record's stream on it
    for r in a.ranks:
        (pid,) = r.source.pids
        assert set(r.syncs.column("device_id").to_pylist()) == {kernel_device[pid]}
    got = sorted((pid, s["device_id"], s["stream_id"]) for r in a.ranks for pid in r.source.pids
                 for s in r.syncs.to_pylist() if s["api"] == "cudaStreamSynchronize")
    assert got == [(pid, kernel_device[pid], stream) for pid, _, stream in stream_syncs]
    # AND the device synchronize of a process working on device 1 only waits for device 1's
    # streams: here its kernel (10..300 us), all of the call's 300 - 100 = 200 us
    t = FakeTrace()
    t.range("verify", 0, 400 * U)
    kernel(t, 5, (10, 300), device=1)
    corr = t.call("cudaDeviceSynchronize_v3020", 100 * U, 300 * U)
    t.sync_record(corr, 100 * U, 300 * U, stream=0xFFFFFFFF, sync_type=4)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify",))).ranks
    assert rank.syncs.select(["api", "device_id", "stream_id", "waited_gpu_ns"]).to_pylist() == [
        {"api": "cudaDeviceSynchronize", "device_id": 1, "stream_id": None, "waited_gpu_ns": 200 * U}]


def test_a_long_capture_bounds_every_call_in_turns_and_reads_as_a_short_one(tmp_path, monkeypatch):
    # GIVEN 6 cycles: sample (100..600 us of each) synchronizes its own stream 7 (115..561 us)
    # behind its own kernel (112..560 us); a helper thread's kernel on stream 21 (100..500 us),
    # launched in its own phase, ends inside that wait
    from tracerecon.analysis import awaited

    t = FakeTrace()
    for k in range(6):
        b = 1000 * k
        t.range("sample", (b + 100) * U, (b + 600) * U, tid=1)
        kernel(t, b + 110, (b + 112, b + 560), tid=1)
        stream_sync(t, b + 115, b + 561, stream=7, tid=1)
        t.range("helper", (b + 50) * U, (b + 60) * U, tid=2)
        kernel(t, b + 52, (b + 100, b + 500), stream=21, tid=2)
    whole = syncs_of(t, tmp_path, ("sample", "helper"))
    # WHEN the calls x streams to hold (6 x 2) exceed what is held at once (1, 2 and 4 calls a
    # turn here; a capture of 100k .item() calls on 20 streams does so at the default): before,
    # every wait then counted all of its process's work, the helper's kernel included (385 us)
    for cells in (1, 4, 8):
        monkeypatch.setattr(awaited, "MAX_BOUND_CELLS", cells)
        (tmp_path / str(cells)).mkdir()
        turns = syncs_of(t, tmp_path / str(cells), ("sample", "helper"))
        # THEN each wait is its own kernel's 445 us (115..560), of no other phase, either way
        assert whole == turns == [("cudaStreamSynchronize", 445, 0, "sample")] * 6, cells


def scheduler_and_worker(period_us: int, process_end_us: int, kernels: list[tuple[int, int, int]], worker_sync: tuple[int, int],
                         own_sync: tuple[int, int] | None = None) -> FakeTrace:
    """3 cycles (every ``period_us``) of a scheduler thread (1) holding the phases, launching
    nothing: schedule (+0..100 us), forward (+100..108), process (+108..``process_end_us``); a
    worker thread (2), in no range, launching ``kernels`` ((launch us, GPU start, GPU end)) on
    stream 7 and synchronizing 7 over ``worker_sync``; with ``own_sync``, process synchronizes
    7 itself too."""
    t = FakeTrace()
    for n in range(3):
        b = period_us * n
        t.range("schedule", b * U, (b + 100) * U, tid=1)
        t.range("forward", (b + 100) * U, (b + 108) * U, tid=1)
        t.range("process", (b + 108) * U, (b + process_end_us) * U, tid=1)
        for at, start, end in kernels:
            t.kernel(t.call("cudaLaunchKernel", (b + at) * U, (b + at + 2) * U, tid=2), (b + start) * U, (b + end) * U)
        stream_sync(t, b + worker_sync[0], b + worker_sync[1], stream=7, tid=2)
        if own_sync is not None:
            stream_sync(t, b + own_sync[0], b + own_sync[1], stream=7, tid=1)
    return t


def test_a_workers_wait_charged_to_a_schedulers_phase_counts_only_while_that_phase_ran(tmp_path):
    # GIVEN 3 cycles of a scheduler thread (1) holding the phases, launching nothing: schedule
    # (0..100 us of each), forward (100..108), process (108..140, CPU work). A worker thread (2),
    # in no range, launches forward's two kernels on stream 7 (104..304, 304..504 us) and
    # synchronizes stream 7 from 110 to 505 us: the wait begins inside process
    t = scheduler_and_worker(520, 140, [(102, 104, 304), (104, 304, 504)], (110, 505))
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks
    # WHEN analysed THEN the wait is process's (the phase open when it began), and the call is
    # whole in the syncs table: 395 us blocked, 394 us of forward's work
    assert [(s["phase_id"] is not None, s["blocked_ns"] // U, s["waited_other_phase_ns"] // U) for s in rank.syncs.to_pylist()] == [(True, 395, 394)] * 3
    # but process's timer ran 32 us (108..140) of it: it holds 30 us blocked (110..140) and, of
    # forward's work the wait ended with, the first kernel's 30 us inside that part; it had held
    # the whole 395 / 394 us, twelve times its own CPU time
    ph = [p for p in rank.phases.to_pylist() if p["phase"] == "process"]
    assert [(p["cpu_ns"] // U, p["blocked_ns"] // U, p["absorbed_ns"] // U) for p in ph] == [(32, 30, 30)] * 3


def test_a_timer_that_waits_for_the_cycle_before_agrees_only_as_two_errors_cancel_and_says_so(tmp_path):
    # GIVEN an engine a cycle ahead, one thread, stream 7: each cycle n (at 0, 100, 900, 1700 us)
    # runs forward (20 us, a 30 us kernel) and sample, which launches an 800 us kernel, records
    # an event after it and then (from cycle 1 on) synchronizes the event cycle n-1's sample
    # recorded. Cycle 2's sample: 920..1680 us; its wait 940..1668 ends with cycle 1's sample
    # kernel (867..1667 us: 727 us of it inside the wait); its own kernel runs 1697..2497 us
    from tracerecon.api import phase_detail

    t = FakeTrace()
    gpu_free = prev = 0
    for n, b in enumerate((0, 100, 900, 1700)):
        ends = {}
        for name, at, dur in (("forward", b + 5, 30), ("sample", b + 25, 800)):
            start = max(at + 2, gpu_free)
            gpu_free = ends[name] = start + dur
            kernel(t, at, (start, gpu_free))
        t.event_record(event=1, record=n, start=(b + 30) * U, end=(b + 31) * U)
        end = b + 60
        if n:
            corr = t.call("cudaEventSynchronize_v3020", (b + 40) * U, (prev + 1) * U)
            t.syncs.append({"start": (b + 40) * U, "end": (prev + 1) * U, "deviceId": 0, "contextId": 1, "streamId": 0xFFFFFFFF, "correlationId": corr,
                            "globalPid": (10 << 24), "syncType": 1, "eventId": 1, "eventSyncId": n - 1})
            end = prev + 13
        prev = ends["sample"]
        t.range(f"cycle {n}", b * U, end * U)
        t.range("forward", b * U, (b + 20) * U)
        t.range("sample", (b + 20) * U, end * U)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "sample"))).ranks
    (p,) = [p for p in rank.phases.to_pylist() if p["phase"] == "sample" and p["cycle"] == 2]
    # WHEN read THEN its timer (760 us) and its GPU time (events at 1697 and 2497 us: 800 us)
    # agree, but only as two errors cancel: 727 us of the timer waited for cycle 1's sample, and
    # its own work ran 817 us past it (before: "its work waited 0.777 ms behind earlier work")
    assert (p["cpu_ns"] // U, p["gpu_ns"] // U, p["absorbed_ns"] // U, p["overrun_ns"] // U) == (760, 800, 727, 817)
    assert (p["verdict"], p["cause"]) == ("agree", "absorbed_wait")
    assert phase_detail(rank, phase_id=p["phase_id"]).explanation == (
        "The CPU timer (0.760 ms) and the GPU (0.800 ms) agree only as two errors cancel: 0.727 ms of it were spent blocked, "
        "waiting for sample's GPU work of the cycle before, and its own GPU work ran on 0.817 ms after it stopped.")


def test_a_phase_that_launched_nothing_and_blocked_is_not_called_all_cpu_time(tmp_path):
    # GIVEN offload (0..20 us) copies on stream 11 (30..430 us); fetch (100..431 us) launches
    # nothing and synchronizes stream 11 (110..431 us); stream 7, where it is read, is idle
    from tracerecon.api import phase_detail

    t = FakeTrace()
    t.range("offload", 0, 20 * U)
    t.range("fetch", 100 * U, 431 * U)
    t.copy(t.call("cudaMemcpyAsync", 5 * U, 7 * U), 30 * U, 430 * U, stream=11)
    kernel(t, 600, (602, 610))  # (a later kernel on stream 7, in no phase)
    stream_sync(t, 110, 431, stream=11)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("offload", "fetch"))).ranks
    (p,) = [p for p in rank.phases.to_pylist() if p["phase"] == "fetch"]
    # WHEN read THEN no GPU work is its own, but 320 us of its 331 were a wait for offload's copy
    # (before: "its 0.331 ms are CPU time", cause none)
    assert (p["verdict"], p["cause"], p["absorbed_ns"] // U) == ("no_gpu_work", "absorbed_wait", 320)
    assert phase_detail(rank, phase_id=p["phase_id"]).explanation == (
        "No GPU work was launched in this phase, yet its 0.331 ms are not all CPU time: 0.320 ms of it were spent blocked, waiting for offload's GPU work.")


def test_a_workers_wait_and_the_phases_own_at_once_count_once(tmp_path):
    # GIVEN the scheduler and worker of the test above: forward's kernel (launched by the worker)
    # runs 104..390 us on stream 7; the worker synchronizes 7 from 110 to 391 us, and the
    # scheduler, in process (108..400), synchronizes 7 itself from 120 to 391 us (an .item())
    t = scheduler_and_worker(1000, 400, [(102, 104, 390)], (110, 391), own_sync=(120, 391))
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "process"))).ranks
    ph = [p for p in rank.phases.to_pylist() if p["phase"] == "process"]
    # WHEN analysed THEN process's timer (292 us) holds 110..391 blocked (281 us) and forward's
    # kernel inside it, 110..390 (280 us): the two waits at once once (they had summed to 552 and
    # 550 us, more than the timer ran)
    assert [(p["cpu_ns"] // U, p["blocked_ns"] // U, p["absorbed_ns"] // U) for p in ph] == [(292, 281, 280)] * 3


def test_a_step_that_launches_and_synchronizes_agrees_with_no_cause(tmp_path):
    # GIVEN step (100..336 us) launching its own kernel on stream 7 (107..335) and then
    # synchronizing the device (120..336), while another thread's kernel, launched in its own
    # phase helper (0..20 us), runs on stream 11 (30..330)
    t = FakeTrace()
    t.range("helper", 0, 20 * U, tid=2)
    kernel(t, 5, (30, 330), stream=11, tid=2)
    t.range("cycle 0", 100 * U, 336 * U, tid=1)
    t.range("step", 100 * U, 336 * U, tid=1)
    kernel(t, 105, (107, 335), tid=1)
    corr = t.call("cudaDeviceSynchronize_v3020", 120 * U, 336 * U, tid=1)
    t.sync_record(corr, 120 * U, 336 * U, sync_type=4, stream=0xFFFFFFFF)
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("helper", "step"))).ranks
    (p,) = [p for p in rank.phases.to_pylist() if p["phase"] == "step"]
    # WHEN analysed THEN its timer (236 us) and its events on 7 (100 to 336: 236 us) agree, with
    # no cause: it held the helper's kernel (210 us of it) while its own work ran, and its own
    # work ran past it by nothing, so no two errors cancel (it had read "agree only as two errors
    # cancel")
    assert (p["cpu_ns"] // U, p["gpu_ns"] // U, p["overrun_ns"] // U) == (236, 236, 0)
    assert p["absorbed_ns"] // U > 200 and (p["verdict"], p["cause"]) == ("agree", "none")
