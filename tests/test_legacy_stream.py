"""The legacy default (NULL) stream's implicit synchronisation: on each GPU of a process, an
action on the NULL stream (a kernel, a copy, an event record, a stream wait) first waits for the
work queued before it on every blocking stream (made without cudaStreamNonBlocking: flag 1 in
``TARGET_INFO_CUDA_STREAM``), and work on a blocking stream queued after it waits for it; streams
made non-blocking (flag 2: PyTorch's, NCCL's) wait for neither. Each phase's GPU time, cycle by
cycle, is what events recorded on its stream at its boundaries read, worked out by hand."""

from __future__ import annotations

import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

U = 1000  # 1 us


def kernel(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], stream: int, tid: int | None = None) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, tid=tid), gpu_us[0] * U, gpu_us[1] * U, stream=stream)


def read(t: FakeTrace, tmp_path, name: str = "t") -> list[tuple[str, int, int]]:
    analysis = load([t.write(tmp_path / f"{name}.sqlite")], PhaseConfig(phases=("draft", "verify")))
    return [(p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in analysis.ranks[0].phases.to_pylist()]


@pytest.mark.parametrize("helper_stream, flag, draft_us, verify_us", [
    (14, 1, 600, 30),  # 14 blocking: the NULL record waits for its kernel, the loop's work for the record
    (14, 2, 100, 530),  # 14 non-blocking: the record waits for nothing; verify's kernel, +600..630, is its own
])
def test_a_record_on_the_null_stream_links_two_blocking_streams(tmp_path, helper_stream, flag, draft_us, verify_us):
    # GIVEN the loop on blocking stream 13: draft (+0..100, a kernel +20..90), verify (+100..200,
    # a kernel launched at +110 and run +600..630); a helper thread's kernel on stream 14
    # (+10..600), and then, at +30, an event it records on the NULL stream 7, which runs nothing
    # (a C++ engine's cudaEventRecord(ev) on its default stream)
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        kernel(t, b + 10, (b + 20, b + 90), stream=13)
        kernel(t, b + 5, (b + 10, b + 600), stream=helper_stream, tid=20)
        t.event_record(900 + c, 1, (b + 30) * U, (b + 31) * U, tid=20, stream=7)
        kernel(t, b + 110, (b + 600, b + 630), stream=13)
    t.stream_created(7, 3)
    t.stream_created(13, 1)
    t.stream_created(helper_stream, flag)
    # WHEN read THEN draft's end event on 13 (at +100) waits for the NULL record (+31), which
    # waits for 14's kernel where 14 is blocking: draft reads 600 us and verify 30 (the NULL
    # stream had linked them only through its ops: 100 and 530)
    assert read(t, tmp_path) == [("draft", draft_us, 13), ("verify", verify_us, 13)] * 3


def test_a_record_on_the_null_stream_waits_for_what_a_blocking_stream_was_made_to_wait_for(tmp_path):
    # GIVEN a helper's kernel on non-blocking stream 20 (+10..600) and a record of it there at +8;
    # blocking stream 14 made to wait for that record at +9 (nothing queued on 14 after it); at
    # +30 the helper records event 2 on the NULL stream 7; the loop, on non-blocking stream 13,
    # runs draft (+0..100, a kernel +20..90) and waits for event 2 at +40; verify's kernel
    # (launched at +110) runs +600..630
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        kernel(t, b + 5, (b + 10, b + 600), stream=20, tid=20)
        t.event_record(1, c + 1, (b + 7) * U, (b + 8) * U, tid=20, stream=20)
        t.stream_wait(1, c + 1, (b + 8) * U, (b + 9) * U, tid=20, stream=14)
        t.event_record(2, c + 1, (b + 29) * U, (b + 30) * U, tid=20, stream=7)
        kernel(t, b + 10, (b + 20, b + 90), stream=13)
        t.stream_wait(2, c + 1, (b + 39) * U, (b + 40) * U, stream=13)
        kernel(t, b + 110, (b + 600, b + 630), stream=13)
    for stream, flag in ((7, 3), (13, 2), (14, 1), (20, 2)):
        t.stream_created(stream, flag)
    # WHEN read THEN event 2 waited for 14, 14 for 20's kernel (+600): 13, made to wait for event
    # 2 in draft, reads draft's end at +600 (it had read +100: draft 100 us, verify 530)
    assert read(t, tmp_path) == [("draft", 600, 13), ("verify", 30, 13)] * 3


@pytest.mark.parametrize("loop, helper", [(13, 7), (7, 13)])
def test_work_queued_between_two_phases_on_a_stream_the_loops_waits_for_is_in_neither(tmp_path, loop, helper):
    # GIVEN the loop on stream ``loop``: draft (+0..100, a kernel +20..90), verify (+150..250, a
    # kernel launched at +160 and run +400..430); between them, at +118, a helper thread launches
    # a kernel (+120..400) on stream ``helper``: the NULL stream 7 and blocking 13, either way round
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 250) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 150) * U, (b + 250) * U)
        kernel(t, b + 10, (b + 20, b + 90), stream=loop)
        kernel(t, b + 118, (b + 120, b + 400), stream=helper, tid=20)
        kernel(t, b + 160, (b + 400, b + 430), stream=loop)
    t.stream_created(7, 3)
    t.stream_created(13, 1)
    # WHEN read THEN events at draft's end (+100) and at verify's start (+150, which waits for the
    # helper's kernel: +400) read draft 100 us and verify 30: the helper's kernel is in neither,
    # as work queued between two phases on their own stream is (draft had taken it: 400 us)
    assert read(t, tmp_path) == [("draft", 100, loop), ("verify", 30, loop)] * 3


def test_blocking_streams_with_no_null_stream_work_wait_for_each_other_nowhere(tmp_path):
    # GIVEN the loop on blocking stream 13 (draft +0..100 with a kernel +20..90, verify +100..200
    # with one +120..150) and a helper's kernel on blocking stream 14 (+10..600); the NULL stream
    # 7 runs nothing and records nothing
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U)
        kernel(t, b + 10, (b + 20, b + 90), stream=13)
        kernel(t, b + 5, (b + 10, b + 600), stream=14, tid=20)
        kernel(t, b + 110, (b + 120, b + 150), stream=13)
    for stream, flag in ((7, 3), (13, 1), (14, 1)):
        t.stream_created(stream, flag)
    # WHEN read THEN neither waits for the other: draft 100 us, verify 100
    assert read(t, tmp_path) == [("draft", 100, 13), ("verify", 100, 13)] * 3


def two_gpus_draft(tmp_path, draft_gpu: int, null_ids: dict[int, int], records: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
    """One thread (11) driving two GPUs, 3 cycles (b = 2000c us) of prep [b, b+100], draft
    [b+100, b+200] and verify [b+200, b+400]: the other GPU's NULL stream (``null_ids[gpu]``)
    runs a kernel in prep (b+12..b+20), its blocking stream 13 one in prep (b+22..b+80) and one
    in verify (b+212..b+300); on ``draft_gpu`` (NULL stream ``null_ids[draft_gpu]``, running
    nothing) a helper thread's kernel on blocking stream 15 is queued at b+102 and runs
    b+102..b+900, and draft's kernel runs on blocking stream 14, b+112..b+150; ``records``:
    events recorded (at us after b, device, stream, event id base), each call 2 us. Returns
    draft's (device, stream, GPU us) per cycle."""
    from nsys_factory import gpid

    other = 1 - draft_gpu
    t = FakeTrace()
    for dev, sid, flag in ((other, null_ids[other], 3), (draft_gpu, null_ids[draft_gpu], 3), (other, 13, 1), (draft_gpu, 14, 1), (draft_gpu, 15, 1)):
        t.streams.append({"streamId": sid, "hwId": dev, "vmId": 1, "processId": 10, "contextId": dev + 1, "priority": 0, "flag": flag})
    for c in range(3):
        b = 2000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 200) * U, (b + 400) * U, names=("prep", "draft", "verify"), tid=11)
        for at, (s, e), stream, dev, tid in ((10, (12, 20), null_ids[other], other, 11), (20, (22, 80), 13, other, 11), (100, (102, 900), 15, draft_gpu, 31),
                                             (110, (112, 150), 14, draft_gpu, 11), (210, (212, 300), 13, other, 11)):
            t.kernel(t.call("cudaLaunchKernel", (b + at) * U, (b + at + 2) * U, tid=tid), (b + s) * U, (b + e) * U, stream=stream, device=dev)
        for at, dev, sid, event in records:
            corr = t.call("cudaEventRecord_v3020", (b + at) * U, (b + at + 2) * U, tid=11)
            t.events.append({"deviceId": dev, "contextId": dev + 1, "streamId": sid, "correlationId": corr, "globalPid": gpid(10), "eventId": event + c, "eventSyncId": 1})
    (rank,) = load([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prep", "draft", "verify"), cycle_prefix="cycle", skip_cycles=0)).ranks
    return [(p["device_id"], p["stream_id"], p["gpu_ns"] // U) for p in rank.phases.to_pylist() if p["phase"] == "draft"]


@pytest.mark.parametrize("gpu1_null_id", [7, 8])
def test_a_record_naming_gpu1s_idle_null_stream_is_gpu1s_where_gpu0s_null_stream_of_that_id_ran_work(tmp_path, gpu1_null_id):
    # GIVEN ``two_gpus_draft`` with draft on GPU 1: GPU 0's NULL stream 7 runs a kernel each
    # cycle, GPU 1's NULL stream (``gpu1_null_id``) none; draft ends with an event recorded on
    # GPU 1's NULL stream at b+152 (its record says device 1)
    drafts = two_gpus_draft(tmp_path, 1, {0: 7, 1: gpu1_null_id}, [(150, 1, gpu1_null_id, 50)])
    # WHEN read THEN the record on GPU 1's NULL stream waits for what GPU 1's blocking streams had
    # queued before it (the helper's kernel, to b+900), and an event on (1, 14) at draft's end
    # for that record: draft reads b+100..b+900 = 800 us in every cycle, whatever the NULL
    # stream's id (with id 7, the id of GPU 0's NULL stream, which ran work, the record had been
    # taken for GPU 0's: draft read its CPU edges, 100 us)
    assert drafts == [(1, 14, 800)] * 3


def test_synchronization_records_that_say_device_0_of_a_rank_on_gpu_1_are_its_gpus():
    # GIVEN the demo's rank on GPU 1 (nsys 2025.3.2), whose synchronization records all say
    # device 0 (checked: its kernels all ran on device 1)
    import sqlite3

    from conftest import DEMO2

    trace = DEMO2 / "nccl_skew" / "rank1.sqlite"
    with sqlite3.connect(f"file:{trace}?mode=ro", uri=True) as db:
        assert db.execute("select distinct deviceId from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION").fetchall() == [(0,)]
        assert db.execute("select distinct deviceId from CUPTI_ACTIVITY_KIND_KERNEL").fetchall() == [(1,)]
    # WHEN read THEN its stream synchronizes are on device 1, where their streams ran (a rule
    # that trusted every record naming a device other than 0 had, taking the copies' own
    # devices for records, left them on device 0)
    (rank,) = load([str(trace)]).ranks
    syncs = [s for s in rank.syncs.to_pylist() if s["api"] == "cudaStreamSynchronize"]
    assert syncs and {s["device_id"] for s in syncs} == {1}


def test_an_event_record_naming_gpu0s_idle_null_stream_stays_gpu0s_where_the_process_records_carry_devices(tmp_path):
    # GIVEN (the mirror of the test above) ``two_gpus_draft`` with draft on GPU 0: GPU 1's NULL
    # stream 7 runs a kernel each cycle, GPU 0's NULL stream 7 none; event records carry their
    # devices (one on (1, 13) at b+82 says device 1); draft ends with an event recorded on GPU
    # 0's NULL stream at b+152 (its record says device 0)
    drafts = two_gpus_draft(tmp_path, 0, {0: 7, 1: 7}, [(80, 1, 13, 90), (150, 0, 7, 50)])
    # WHEN read THEN the record is GPU 0's NULL stream's, waiting for GPU 0's blocking streams'
    # earlier work (the helper's kernel, to b+900): draft reads 800 us in every cycle (moved to
    # GPU 1's NULL stream, which ran work, it had read its CPU edges, 100 us)
    assert drafts == [(0, 14, 800)] * 3
