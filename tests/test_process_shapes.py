"""Engines shaped unlike the demo: one process driving a GPU per thread, cycles and phases
marked with start/end ranges or on other threads, phases marked in a process that launches
nothing. Every expected number is worked out by hand from the ops' times (what a CUDA event
recorded on the phase's stream at each boundary would read)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import run_cli
from nsys_factory import FakeTrace, gpid
from tracerecon.analysis.boundaries import timelines
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000  # 1 us


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], tid: int | None = None, device: int = 0, pid: int = 10) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid, tid=tid), gpu_us[0] * U, gpu_us[1] * U, device=device, pid=pid)


def hand_over(t: FakeTrace, event: int, at_us: int, src: tuple, dst: tuple, pid: int = 10) -> None:
    """An event recorded on ``src`` (device, stream) at ``at_us`` and waited for on ``dst`` 1 us later."""
    call = t.call("cudaEventRecord", at_us * U, (at_us + 1) * U, pid=pid)
    t.events.append({"deviceId": src[0], "contextId": 1, "streamId": src[1], "correlationId": call, "globalPid": gpid(pid), "eventId": event, "eventSyncId": 1})
    call = t.call("cudaStreamWaitEvent", (at_us + 1) * U, (at_us + 2) * U, pid=pid)
    t.syncs.append({"start": (at_us + 1) * U, "end": (at_us + 2) * U, "deviceId": dst[0], "contextId": 1, "streamId": dst[1], "correlationId": call,
                    "globalPid": gpid(pid), "syncType": 2, "eventId": event, "eventSyncId": 1})


def test_two_threads_each_driving_its_own_gpu_are_two_timelines(tmp_path):
    # GIVEN one process whose thread 1 drives GPU 0 and thread 2 drives GPU 1 (slow), each with
    # its own cycle / draft / verify ranges, thread 2 five microseconds behind thread 1
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 80), tid=1, device=0)
        launch(t, b + 110, (b + 120, b + 250), tid=1, device=0)
        b2 = b + 5
        t.cycle(c, b2 * U, (b2 + 100) * U, (b2 + 300) * U, tid=2)
        launch(t, b2 + 10, (b2 + 20, b2 + 600), tid=2, device=1)
        launch(t, b2 + 110, (b2 + 600, b2 + 900), tid=2, device=1)
    # WHEN analysed
    ranks = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN a rank per GPU (a loop per thread, a GPU each), thread 1's rank 0, thread 2's rank 1
    assert [{p["tid"] for p in r.phases.to_pylist()} for r in ranks] == [{1}, {2}]
    # and events on thread 1's stream (GPU 0): draft b..b+100 (its kernel ends at b+80), verify
    # b+100..b+300 (its CPU end; the kernel ends at b+250): 100 and 200 us. On thread 2's (GPU 1):
    # draft b2..done = b2+600, verify b2+600..b2+900: 600 and 300 us. GPU 1's slowness is not
    # charged to GPU 0's phases.
    got = [(p["tid"], p["phase"], p["device_id"], p["gpu_ns"] // U) for r in ranks for p in r.phases.to_pylist()]
    assert sorted(got) == sorted([(1, "draft", 0, 100), (1, "verify", 0, 200), (2, "draft", 1, 600), (2, "verify", 1, 300)] * 3)
    # and each cycle adds up: 300 us on GPU 0, 900 us on GPU 1
    assert [[(c["gpu_ns"] // U, c["adds_up"]) for c in r.cycles.to_pylist()] for r in ranks] == [[(300, True)] * 3, [(900, True)] * 3]


def test_one_thread_driving_two_gpus_reads_each_phase_on_its_own_gpu(tmp_path):
    # GIVEN one thread launching on two GPUs that never wait for each other, 3 cycles (b =
    # 1000c): forward [b, b+200] runs b+15..b+150 on GPU 0 and b+15..b+260 on GPU 1 (most
    # there); sample [b+200, b+300] b+215..b+240 on GPU 0 (most there) and b+260..b+280 on GPU 1
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 200) * U, (b + 300) * U, names=("forward", "sample"))
        launch(t, b + 10, (b + 15, b + 150), device=0)
        launch(t, b + 12, (b + 15, b + 260), device=1)
        launch(t, b + 210, (b + 215, b + 240), device=0)
        launch(t, b + 212, (b + 260, b + 280), device=1)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "sample")))
    # THEN each phase reads what events on its own GPU's stream read (by hand): forward on GPU 1
    # from b (GPU 1 idle) to done(GPU 1, b+200) = b+260; sample on GPU 0 from done(GPU 0, b+200)
    # = b+200 (GPU 0's forward kernel ended at b+150; GPU 1's still running moves nothing on
    # GPU 0) to b+300 (its CPU end; its kernel ended at b+240)
    got = [(p["cycle"], p["phase"], p["device_id"], p["gpu_boundary_start_ns"] // U, p["gpu_boundary_end_ns"] // U) for p in run.ranks[0].phases.to_pylist()]
    assert sorted(got) == sorted(x for c in range(3) for x in ((c, "forward", 1, 1000 * c, 1000 * c + 260), (c, "sample", 0, 1000 * c + 200, 1000 * c + 300)))
    # and no tiling warning (nothing on GPU 0 was pushed by GPU 1); the several-GPU notes name
    # the GPU each phase is read on, and a line says why the cycles' phases add up to more than
    # the cycle (360 us against b..b+300)
    assert not [w for w in run.warnings if "never waits for" in w]
    several = [w for w in run.warnings if "launched GPU work on GPUs 0, 1" in w]
    assert len(several) == 2 and any("'forward'" in w and "GPU 1 in 3" in w for w in several) and any("'sample'" in w and "GPU 0 in 3" in w for w in several)
    assert [c["gpu_ns"] // U for c in run.ranks[0].cycles.to_pylist()] == [300] * 3
    assert [w for w in run.warnings if "in 3 of 3 cycles the phases are read on different GPUs (0, 1)" in w]


def test_across_gpus_a_phase_ends_at_its_own_cpu_end_and_nothing_lies_between(tmp_path):
    # GIVEN one thread, 3 cycles (b = 1000c): draft [b, b+100] with a kernel on GPU 1 (b+12..b+60),
    # 50 us of Python, verify [b+150, b+300] with a kernel on GPU 0 (b+160..b+250); and a second
    # trace running ahead, 4 cycles (b = 100c): draft [b, b+50] 10 us on GPU 1, verify [b+50,
    # b+100] 200 us on GPU 0 queued behind the last verify, nothing launched between them (a
    # review's reproductions)
    gap = FakeTrace()
    for c in range(3):
        b = 1000 * c
        gap.range(f"cycle {c}", b * U, (b + 300) * U)
        gap.range("draft", b * U, (b + 100) * U)
        gap.range("verify", (b + 150) * U, (b + 300) * U)
        gap.kernel(gap.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 12) * U, (b + 60) * U, device=1, stream=21)
        gap.kernel(gap.call("cudaLaunchKernel", (b + 155) * U, (b + 157) * U), (b + 160) * U, (b + 250) * U, device=0, stream=7)
    ahead, g0 = FakeTrace(), 0
    for c in range(4):
        b = 100 * c
        ahead.range(f"cycle {c}", b * U, (b + 100) * U)
        ahead.range("draft", b * U, (b + 50) * U)
        ahead.range("verify", (b + 50) * U, (b + 100) * U)
        ahead.kernel(ahead.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 12) * U, (b + 22) * U, device=1, stream=21)
        s = max(b + 62, g0)
        g0 = s + 200
        ahead.kernel(ahead.call("cudaLaunchKernel", (b + 60) * U, (b + 62) * U), s * U, g0 * U, device=0, stream=7)
    # WHEN analysed
    config = PhaseConfig(phases=("draft", "verify"), skip_cycles=0)
    a, b = (analyze([t.write(tmp_path / f"{n}.sqlite")], config) for n, t in (("gap", gap), ("ahead", ahead)))
    # THEN by hand, events on each phase's own GPU: draft b..b+100 (its end event on GPU 1 at its
    # CPU end; the Python after it is no part of it: verify on GPU 0 shares no boundary with it),
    # verify b+150..b+300
    got = [(p["phase"], (p["gpu_boundary_start_ns"] - 1000 * U * p["cycle"]) // U, (p["gpu_boundary_end_ns"] - 1000 * U * p["cycle"]) // U)
           for p in a.ranks[0].phases.to_pylist()]
    assert got == [("draft", 0, 100), ("verify", 150, 300)] * 3
    # and running ahead, draft b..b+50 and verify from GPU 0's end of the last verify (50, 262,
    # 462, 662) to its own kernel's end (262, 462, 662, 862), with no line of work "between" them
    got = [(p["phase"], p["gpu_boundary_start_ns"] // U, p["gpu_boundary_end_ns"] // U) for p in b.ranks[0].phases.to_pylist()]
    assert got == [x for c in range(4) for x in (("draft", 100 * c, 100 * c + 50), ("verify", 50 if c == 0 else 62 + 200 * c, 262 + 200 * c))]
    assert not [w for w in b.warnings if "queued between" in w], b.warnings


def test_work_in_no_phase_between_phases_on_two_gpus_is_said_and_a_helpers_range_is_no_cycles(tmp_path):
    # GIVEN one thread, 3 cycles (b = 1000c): draft [b, b+100] on GPU 1 (kernel b+12..b+60),
    # unmarked code queueing 288 us on GPU 0 (launched b+110, b+112..b+400), verify [b+150, b+300]
    # on GPU 0 (kernel b+400..b+450 behind it); and a second trace whose loop thread runs draft
    # and verify on GPU 0 while a helper thread opens a short draft range inside verify and
    # launches on GPU 1 (a review's reproductions)
    work = FakeTrace()
    for c in range(3):
        b = 1000 * c
        work.range(f"cycle {c}", b * U, (b + 300) * U)
        work.range("draft", b * U, (b + 100) * U)
        work.range("verify", (b + 150) * U, (b + 300) * U)
        launch(work, b + 10, (b + 12, b + 60), device=1)
        launch(work, b + 110, (b + 112, b + 400))
        launch(work, b + 155, (b + 400, b + 450))
    helper = FakeTrace()
    for c in range(3):
        b = 1000 * c
        helper.range(f"cycle {c}", b * U, (b + 300) * U, tid=1)
        helper.range("draft", b * U, (b + 100) * U, tid=1)
        helper.range("verify", (b + 100) * U, (b + 300) * U, tid=1)
        launch(helper, b + 10, (b + 12, b + 90), tid=1)
        launch(helper, b + 110, (b + 112, b + 290), tid=1)
        helper.range("draft", (b + 150) * U, (b + 200) * U, tid=2)
        launch(helper, b + 160, (b + 162, b + 190), tid=2, device=1)
    config = PhaseConfig(phases=("draft", "verify"), skip_cycles=0)
    a, h = (analyze([t.write(tmp_path / f"{n}.sqlite")], config) for n, t in (("work", work), ("helper", helper)))
    # THEN draft reads b..b+100 and verify b+400..b+450 (its GPU 0 stream busy until b+400 with
    # the work in no phase), and that work's 288 us are said to lie between them
    assert [(p["phase"], p["gpu_ns"] // U) for p in a.ranks[0].phases.to_pylist()] == [("draft", 100), ("verify", 50)] * 3
    assert any("queued between 'draft' and 'verify'" in w and "in 3 of 3 cycles, 0.288 ms (median)" in w for w in a.warnings), a.warnings
    # and the helper's range, read alone, makes no cycle one read on two GPUs
    assert not [w for w in h.warnings if "read on different GPUs" in w], h.warnings


def test_threads_are_timelines_of_their_own_only_when_each_holds_its_own_cycles():
    # GIVEN phase instances of one process on threads 1 and 2, in time order
    pid, tid = np.full(4, 10), np.array([1, 2, 1, 2])
    # WHEN each thread's phases belong to cycles of their own
    # THEN each thread is a timeline
    lines = timelines(pid, np.array([0, 1, 2, 3]), tid)
    assert lines[0] == lines[2] and lines[1] == lines[3] and lines[0] != lines[1]
    # WHEN a cycle has phases on both threads (a scheduler and a worker marking one cycle)
    # THEN the process is one timeline
    assert len(set(timelines(pid, np.array([0, 0, 1, 1]), tid).tolist())) == 1
    # WHEN only one thread's phases have cycles (the other's ranges nest in no cycle range)
    # THEN the process is one timeline, as it was
    assert len(set(timelines(pid, np.array([0, -1, 1, -1]), tid).tolist())) == 1
    # WHEN two processes each run one thread: a timeline per process
    assert len(set(timelines(np.array([10, 11, 10, 11]), np.array([0, 1, 2, 3]), tid).tolist())) == 2
    # WHEN three threads hold cycles of their own numbered far apart (no pair of numbers collides)
    # THEN each thread is a timeline
    assert len(set(timelines(np.full(3, 10), np.array([0, 1, 0x5555555555555555]), np.array([5, 6, 7])).tolist())) == 3


@given(st.lists(st.tuples(st.sampled_from([10, 11]), st.integers(1, 3), st.integers(-1, 4)), max_size=25))
def test_timelines_against_their_definition(rows):
    # GIVEN phase instances (process, thread, cycle or -1)
    pid, tid, cycle = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    # WHEN grouped into timelines
    lines = timelines(pid, cycle, tid).tolist()
    # THEN a process's threads are timelines of their own exactly when it runs several threads,
    # more than one of them holds cycles and no cycle has phases on two; else it is one timeline
    for p in {10, 11}:
        mine = [i for i in range(len(rows)) if pid[i] == p]
        cycled = [(int(cycle[i]), int(tid[i])) for i in mine if cycle[i] >= 0]
        own = len({t for _, t in cycled}) > 1 and all(len({t for c2, t in cycled if c2 == c}) == 1 for c, _ in cycled)
        if len({int(tid[i]) for i in mine}) > 1 and not own:
            assert len({lines[i] for i in mine}) == 1
        else:
            assert all((lines[i] == lines[j]) == (tid[i] == tid[j]) for i in mine for j in mine)
    assert all(lines[i] != lines[j] for i in range(len(rows)) for j in range(len(rows)) if pid[i] != pid[j])


def test_start_end_ranges_number_their_cycles(tmp_path):
    # GIVEN cycles and phases marked with nvtxRangeStart/End (never nested, so no parent)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 300) * U, push_pop=False)
        t.range("draft", b * U, (b + 100) * U, push_pop=False)
        t.range("verify", (b + 120) * U, (b + 300) * U, push_pop=False)
        launch(t, b + 10, (b + 20, b + 200))
        launch(t, b + 130, (b + 200, b + 400))
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN each phase is in the cycle whose CPU span holds it; draft b..(verify's start b+120:
    # done = b+200) = 200 us, verify b+200..b+400 = 200 us; each cycle 400 us
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()] == [
        (c, n, 200) for c in range(3) for n in ("draft", "verify")]
    assert [(c["cycle"], c["gpu_ns"] // U, c["n_phases"]) for c in rank.cycles.to_pylist()] == [(0, 400, 2), (1, 400, 2), (2, 400, 2)]


def test_cycles_marked_on_the_loop_thread_number_the_model_threads_phases(tmp_path):
    # GIVEN cycle ranges on the loop thread (1) and draft / verify ranges on the model thread (2),
    # which launches; a draft range after the last cycle (outside every cycle)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=2, cycle_tid=1)
        launch(t, b + 10, (b + 20, b + 150), tid=2)
        launch(t, b + 110, (b + 150, b + 250), tid=2)
    t.range("draft", 5000 * U, 5100 * U, tid=2)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN draft b..b+150 (its kernel ends after verify's CPU start), verify b+150..b+300: 150 us
    # each, numbered by the cycle whose span holds them; the last draft has no cycle
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()][:6] == [
        (c, n, 150) for c in range(3) for n in ("draft", "verify")]
    assert rank.phases.to_pylist()[6]["cycle"] is None
    assert [c["n_phases"] for c in rank.cycles.to_pylist()] == [2, 2, 2]


def scheduler_and_worker(worker_marks_phases: bool) -> FakeTrace:
    """A scheduler process (pid 10) marking cycles and phases and launching nothing, and a
    worker process (pid 11) launching every kernel, marking phases itself or not."""
    t = FakeTrace()
    for c in range(2):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, pid=10, tid=10)
        if worker_marks_phases:
            t.range("draft", (b + 5) * U, (b + 100) * U, pid=11, tid=11)
        launch(t, b + 10, (b + 20, b + 150), tid=11, pid=11)
    return t


def test_phases_marked_only_in_a_process_that_launches_nothing_are_named(tmp_path):
    # GIVEN phases marked only in the scheduler process, the GPU work in the worker process
    path = scheduler_and_worker(worker_marks_phases=False).write(tmp_path / "t.sqlite")
    # WHEN reported
    out = run_cli("report", "--no-cache", str(path))
    # THEN one line says where the phases are and where they must go, and the exit code is 2
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "phase or cycle ranges in a process that launched no GPU work (pid 10)" in out.stderr
    assert "mark the phases there" in out.stderr


def test_phases_left_out_beside_a_worker_with_ranges_of_its_own_are_said_first(tmp_path):
    # GIVEN phases marked only in the scheduler process, the worker holding a range of its own
    # that is no phase ('worker_step'; the report led with "the likely phases here: --phase
    # worker_step", a guess, and said where the phases went only after it)
    t = scheduler_and_worker(worker_marks_phases=False)
    for c in range(2):
        t.range("worker_step", (c * 1000 + 5) * U, (c * 1000 + 200) * U, pid=11, tid=11)
    # WHEN reported
    out = run_cli("report", "--no-cache", str(t.write(tmp_path / "t.sqlite")))
    # THEN the report shows no phase (the worker's ranges are there: exit 0), and its first
    # warning says where the phases were marked and where they must go
    assert out.returncode == 0 and "no phase to show" in out.stdout
    first = out.stderr.splitlines()[0]
    assert first.startswith("tracerecon: warning: phase or cycle ranges in a process that launched no GPU work (pid 10)"), out.stderr
    assert "--phase worker_step" in out.stderr.splitlines()[1]


def test_phases_left_out_beside_a_worker_that_marks_its_own_are_warned_of(tmp_path):
    # GIVEN the worker marks its own draft phases too
    path = scheduler_and_worker(worker_marks_phases=True).write(tmp_path / "t.sqlite")
    # WHEN analysed
    analysis = analyze([path])
    # THEN the worker's phases are the rank's, and the scheduler's are named as left out
    (rank,) = analysis.ranks
    assert set(rank.phases["pid"].to_pylist()) == {11}
    assert any("launched no GPU work (pid 10)" in w for w in analysis.warnings)
    # and, asked for draft, verify (marked only by the scheduler) and a name no process has, the
    # line for verify points at the process left out, and only the other says nothing matched
    asked = analyze([path], PhaseConfig(phases=("draft", "verify", "verfy")))
    assert any("launched no GPU work (pid 10)" in w and "left out (of 'draft', 'verify')" in w for w in asked.warnings)
    (line,) = [w for w in asked.warnings if "--phase verify" in w]
    assert line == "--phase verify matched only ranges of a process that launched no GPU work, left out (above)"
    (line,) = [w for w in asked.warnings if "--phase verfy" in w]
    assert line.startswith("no range matched --phase verfy (the other phases did)")


def scheduler_with_a_copy_beside_its_worker(tmp_path, worker_us: int = 675, scheduler_us: int = 1, gpus: str = "one") -> str:
    """A scheduler process (pid 20) holding cycle / execute [b, b+200] / sample [b+200, b+300]
    and copying for ``scheduler_us`` a cycle (from b+8); a worker process (pid 31) in the same
    file, no range of its own, launching the phases' work: [b+25, b+25+worker_us] and 60 us
    from then or b+215, whichever is later (launched at b+210). Cycles at b = 1000 + 2000c, c = 0..3 (us). ``gpus``: "one" (a one-GPU machine, as
    the export lists it), or "two" (two GPUs, each process given its own by
    CUDA_VISIBLE_DEVICES: both say device 0, the export maps pid 20 to GPU 0, pid 31 to GPU 1)."""
    import sqlite3

    t = FakeTrace()
    for c in range(4):
        b = 1000 + 2000 * c
        t.range(f"cycle {c}", b * U, (b + 300) * U, pid=20, tid=20)
        t.range("execute", b * U, (b + 200) * U, pid=20, tid=20)
        t.range("sample", (b + 200) * U, (b + 300) * U, pid=20, tid=20)
        t.copy(t.call("cudaMemcpyAsync", (b + 5) * U, (b + 7) * U, pid=20, tid=20), (b + 8) * U, (b + 8 + scheduler_us) * U, pid=20, kind=1, stream=7)
        end = b + 25 + worker_us
        t.kernel(t.call("cudaLaunchKernel", (b + 20) * U, (b + 22) * U, pid=31, tid=31), (b + 25) * U, end * U, pid=31, stream=21)
        then = max(end, b + 215)
        t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U, pid=31, tid=31), then * U, (then + 60) * U, pid=31, stream=21)
    path = t.write(tmp_path / f"t_{gpus}_{worker_us}_{scheduler_us}.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, cuDevice integer)")
        db.execute("insert into TARGET_INFO_GPU values (0, 'H200', 'uuid-gpu0', '0000:18:00.0', 0)")
        if gpus == "two":
            db.execute("insert into TARGET_INFO_GPU values (1, 'H200', 'uuid-gpu1', '0000:38:00.0', 1)")
            db.execute("create table TARGET_INFO_CUDA_DEVICE (gpuId integer, cudaId integer, pid integer)")
            db.executemany("insert into TARGET_INFO_CUDA_DEVICE values (?, 0, ?)", [(0, 20), (1, 31)])
    return str(path)


def test_phases_of_a_process_whose_own_gpu_work_is_a_sliver_of_its_workers_are_said(tmp_path):
    # GIVEN phases marked in a scheduler process that makes a 1 us copy a cycle, the phases'
    # work launched by a worker process on the same (the machine's one) GPU (a review's shape:
    # the phases read 200 / 100 us on the scheduler's own stream, 'agree', where the worker ran
    # 735 us a cycle)
    path = scheduler_with_a_copy_beside_its_worker(tmp_path)
    # WHEN analysed
    analysis = analyze([path], PhaseConfig(phases=("execute", "sample"), skip_cycles=0))
    # THEN a warning names both ranks and both times within the phases' span [1000, 7300] us:
    # the worker's cycles 0-2 whole (735 us each), cycle 3's first kernel up to 7300 (7025..7300:
    # 275 us), 2,480 us; the scheduler's four copies, 4 us
    (said,) = [w for w in analysis.warnings if "which has no phase range" in w]
    assert said.startswith("rank 0 (pid 31), which has no phase range, ran 2.480 ms of GPU work on the GPU it shares with rank 1 (pid 20) "
                           "during rank 1's phases, which launched 0.004 ms there themselves")
    assert "mark the phases there" in said


def test_a_phaseless_rank_on_another_gpu_or_working_as_much_is_not_said_to_hold_the_phases_work(tmp_path):
    # GIVEN the same shape with each process given its own GPU by CUDA_VISIBLE_DEVICES (both
    # say CUDA device 0; the export maps them to GPUs 0 and 1: a tensor-parallel run marked on
    # one rank only), and on one GPU a scheduler copying 100 us a cycle beside a worker whose
    # time in the span [1000, 7300] is 4 x 135 (its 75 us kernel and its 60 us one, b+215..b+275:
    # cycle 3's end at 7275) = 540 us against the scheduler's 4 x 100 = 400: both working
    apart = scheduler_with_a_copy_beside_its_worker(tmp_path, gpus="two")
    both = scheduler_with_a_copy_beside_its_worker(tmp_path, worker_us=75, scheduler_us=100)
    # WHEN analysed THEN neither gets the warning (the first had, comparing the device numbers
    # each process gave its GPU; the second had, at 1.4x where a sliver is under a tenth)
    for path in (apart, both):
        analysis = analyze([path], PhaseConfig(phases=("execute", "sample"), skip_cycles=0))
        assert not [w for w in analysis.warnings if "which has no phase range" in w], path


def test_an_unrelated_threads_long_copy_does_not_choose_a_cross_thread_phases_stream(tmp_path):
    # GIVEN phases held by a scheduler thread (1) that launches nothing, a worker thread (2)
    # launching every phase's kernels on stream 7, and an unrelated thread (3: KV-cache offload)
    # launching a 645 us copy on stream 20 during verify each cycle; stream 7 never waits for 20
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 90), tid=2)
        launch(t, b + 110, (b + 120, b + 250), tid=2)
        t.copy(t.call("cudaMemcpyAsync", (b + 150) * U, (b + 152) * U, tid=3), (b + 155) * U, (b + 800) * U, stream=20)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN events on stream 7, where the worker launches the phases' work: draft b..b+100 (its
    # CPU end; the kernel ends at b+90), verify b+100..b+300: 100 and 200 us, not 700
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist()] == [
        (c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 200))]
    # and the copy is still counted among verify's ops (cross-thread attribution)
    assert [p["n_gpu_ops"] for p in rank.phases.to_pylist()] == [1, 2] * 3


def test_an_offload_threads_many_copies_do_not_outvote_a_graph_replaying_worker(tmp_path):
    # GIVEN the worker (thread 2) replays one CUDA graph per phase on stream 7 (graph trace:
    # one op per launch) and an offload thread (3) copies per layer, 8 copies on stream 20
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 10) * U, (b + 12) * U, tid=2), (b + 20) * U, (b + 90) * U)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 110) * U, (b + 112) * U, tid=2), (b + 120) * U, (b + 250) * U)
        for i in range(8):
            t.copy(t.call("cudaMemcpyAsync", (b + 150 + 5 * i) * U, (b + 151 + 5 * i) * U, tid=3), (b + 300 + 60 * i) * U, (b + 360 + 60 * i) * U, stream=20)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN the offload thread never runs a kernel, so its copies cannot choose verify's stream:
    # draft b..b+100, verify b+100..b+300 on 7
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist()] == [
        (c, n, v, 7) for c in range(3) for n, v in (("draft", 100), ("verify", 200))]


def test_a_drafter_threads_phase_is_read_on_the_drafters_stream(tmp_path):
    # GIVEN a scheduler thread (1) holding the phases, a drafter thread (3) replaying the draft
    # graph on stream 8 (170 us) and recording an event on it, and the target worker (2) staging
    # a 2 us upload on 7 during draft, then waiting for the drafter's event and running verify on 7
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        t.graph(t.call("cudaGraphLaunch_v10000", (b + 10) * U, (b + 12) * U, tid=3), (b + 10) * U, (b + 180) * U, stream=8)
        t.copy(t.call("cudaMemcpyAsync", (b + 50) * U, (b + 51) * U, tid=2), (b + 50) * U, (b + 52) * U, kind=1, stream=7)
        t.event_record(event=1, record=c + 1, start=(b + 60) * U, end=(b + 61) * U, tid=3, stream=8)
        t.stream_wait(event=1, record=c + 1, start=(b + 101) * U, end=(b + 102) * U, tid=2, stream=7)
        for i in range(6):
            launch(t, b + 105 + 5 * i, (b + 180 + 28 * i, b + 180 + 28 * (i + 1) + (2 if i == 5 else 0)), tid=2)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN draft is read on the drafter's stream 8: b..done(8, b+100) = b+180; verify on 7 from
    # there to done(7, b+300) = b+350
    assert [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist()] == [
        (c, n, v, s) for c in range(3) for n, v, s in (("draft", 180, 8), ("verify", 170, 7))]


def two_gpu_threads(cycles: str) -> FakeTrace:
    """The one-GPU-per-thread process of the first test, its cycles marked with start/end
    ranges (``startend``) or not at all (``none``)."""
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        for tid, off in ((1, 0), (2, 5)):
            if cycles == "startend":
                t.range(f"cycle {c}", (b + off) * U, (b + off + 300) * U, tid=tid, push_pop=False)
            t.range("draft", (b + off) * U, (b + off + 100) * U, tid=tid)
            t.range("verify", (b + off + 100) * U, (b + off + 300) * U, tid=tid)
        launch(t, b + 10, (b + 20, b + 80), tid=1, device=0)
        launch(t, b + 110, (b + 120, b + 250), tid=1, device=0)
        launch(t, b + 15, (b + 25, b + 605), tid=2, device=1)
        launch(t, b + 115, (b + 605, b + 905), tid=2, device=1)
    return t


def test_a_gpu_per_thread_with_start_end_cycles_or_none_stays_two_timelines(tmp_path):
    for cycles in ("startend", "none"):
        # GIVEN the two-GPU process with cycles as start/end ranges, or with no cycle ranges
        # WHEN analysed
        ranks = analyze([two_gpu_threads(cycles).write(tmp_path / f"{cycles}.sqlite")]).ranks
        # THEN each thread's phases are in cycles of their own thread (a rank per GPU), with the
        # numbers of the push/pop case: 100 / 200 us on GPU 0, 600 / 300 us on GPU 1
        ph = [p for r in ranks for p in r.phases.to_pylist()]
        assert sorted((p["tid"], p["phase"], p["gpu_ns"] // U) for p in ph) == sorted([(1, "draft", 100), (1, "verify", 200), (2, "draft", 600), (2, "verify", 300)] * 3), cycles
        assert [({p["tid"] for p in r.phases.to_pylist()}, r.cycles.num_rows) for r in ranks] == [({1}, 3), ({2}, 3)], cycles


def test_a_phase_range_in_no_cycle_moves_no_other_phase(tmp_path):
    # GIVEN thread 1 running cycles (draft's kernel b+20..b+150, verify's b+150..b+350) and, on
    # thread 2, one range named draft from 50 us to 2500 us that no cycle range holds (a name
    # shared with a long-lived range of another thread); it launches nothing
    t = FakeTrace()
    t.range("draft", 50 * U, 2500 * U, tid=2)
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 150), tid=1)
        launch(t, b + 110, (b + 150, b + 350), tid=1)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN events on stream 7 for thread 1's phases: draft b..max(b+100, done = b+150) = 150 us,
    # verify b+150..max(b+300, done = b+350) = 200 us; the cycles 350 us and adding up. (The
    # stray range's end at 2500 us used to push every later boundary there: all of them read 0.)
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist() if p["tid"] == 1]
    assert got == [(c, n, v) for c in range(3) for n, v in (("draft", 150), ("verify", 200))]
    assert [(c["gpu_ns"] // U, c["adds_up"]) for c in rank.cycles.to_pylist()] == [(350, True)] * 3
    # and the stray range, in no cycle, reads its own boundaries: from max(50, done(7, 50 us) =
    # 150: cycle 0's draft kernel, launched at 10 us) to max(2500, done(7, 2500 us) = 2350)
    (stray,) = [p for p in rank.phases.to_pylist() if p["tid"] == 2]
    assert stray["cycle"] is None and stray["gpu_ns"] == (2500 - 150) * U


def test_ops_are_put_on_their_stream_no_later_than_their_call_ends_or_they_start(tmp_path):
    # GIVEN cycles of draft (kernel b+20..b+150) and verify (kernel b+150..b+350) on thread 1;
    # in cycle 1 another thread's memset launch call is held up from 0 us to b+320 (a lock), its
    # memset runs b+400..b+420; and a kernel whose launch record was dropped runs b+60..b+250 in cycle 2
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 150), tid=1)
        launch(t, b + 110, (b + 150, b + 350), tid=1)
    t.fill(t.call("cudaMemsetAsync", 0, 1320 * U, tid=2), 1400 * U, 1420 * U)
    t.kernel(99999, 2060 * U, 2250 * U)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]
    # THEN events on stream 7: cycles 0 and 1 read draft b..b+150 and verify b+150..b+350, as
    # if the held-up call were not there (its memset was queued at its end, b+320, after every
    # boundary before it; taking its start, 0 us, made every boundary wait for b+420); cycle
    # 2's draft ends when the kernel without a launch record is done (it started at b+60,
    # before draft's end at b+100, so it was queued before): b..b+250, verify b+250..b+350
    assert got == [(0, "draft", 150), (0, "verify", 200), (1, "draft", 150), (1, "verify", 200), (2, "draft", 250), (2, "verify", 100)]


def test_a_phase_range_in_no_cycle_is_no_neighbour_of_the_cycles_phases(tmp_path):
    # GIVEN thread 1's cycles (b = 1000c us): draft b..b+100 launches a kernel on stream 7
    # (b+20..b+60) and a copy on stream 8 (b+30..b+200); verify b+100..b+300 a kernel on stream 8
    # (b+200..b+250). Thread 2 holds a draft range in no cycle: A from 1050 to 2500 us,
    # launching nothing; B from 50 to 2500 us, launching a kernel on stream 9 (70..2000 us)
    def build(stray: str) -> list:
        t = FakeTrace()
        if stray == "A":
            t.range("draft", 1050 * U, 2500 * U, tid=2)
        if stray == "B":
            t.range("draft", 50 * U, 2500 * U, tid=2)
            t.kernel(t.call("cudaLaunchKernel", 60 * U, 62 * U, tid=2), 70 * U, 2000 * U, stream=9)
        for c in range(3):
            b = c * 1000
            t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
            launch(t, b + 10, (b + 20, b + 60), tid=1)
            t.copy(t.call("cudaMemcpyAsync", (b + 25) * U, (b + 27) * U, tid=1), (b + 30) * U, (b + 200) * U, kind=1, stream=8)
            t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=1), (b + 200) * U, (b + 250) * U, stream=8)
        (rank,) = analyze([t.write(tmp_path / f"t{stray}.sqlite")]).ranks
        return ([(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"]) for p in rank.phases.to_pylist() if p["tid"] == 1],
                [(c["gpu_ns"] // U, c["adds_up"]) for c in rank.cycles.to_pylist()])

    # WHEN analysed without and with each stray range
    # THEN thread 1 reads the same every time: draft on stream 7 from b to its end read on both
    # its stream and verify's (done(8, b+100) = b+200, the copy): 200 us; verify on stream 8
    # b+200..max(b+300, b+250) = 100 us; cycles 300 us, adding up
    want = ([(c, n, v, s) for c in range(3) for n, v, s in (("draft", 200, 7), ("verify", 100, 8))], [(300, True)] * 3)
    assert build("") == want
    assert build("A") == want
    assert build("B") == want


def test_a_stream_wait_counts_from_when_its_call_returned(tmp_path):
    # GIVEN thread 1's cycles (draft kernel b+20..b+150, verify kernel b+150..b+350 on stream 7)
    # and thread 2: a kernel on stream 9 (5..5000 us), an event recorded behind it at 6 us, and
    # cudaStreamWaitEvent(stream 7) on it in a call held up from 10 to 2400 us
    t = FakeTrace()
    t.kernel(t.call("cudaLaunchKernel", 1 * U, 3 * U, tid=2), 5 * U, 5000 * U, stream=9)
    t.event_record(5, 1, 6 * U, 7 * U, tid=2, stream=9)
    t.stream_wait(5, 1, 10 * U, 2400 * U, tid=2, stream=7)
    for c in range(3):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 150), tid=1)
        launch(t, b + 110, (b + 150, b + 350), tid=1)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN the wait is on stream 7 from 2400 us, after every boundary of the three cycles (the
    # last at 2350 us): draft 150 us, verify 200 us each, as without it
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist() if p["tid"] == 1]
    assert got == [(c, n, v) for c in range(3) for n, v in (("draft", 150), ("verify", 200))]


def ended_on_thread_2(t: FakeTrace, b: int, *, end_tid: int = 2) -> None:
    """verify: nvtxRangeStart on thread 1 at b+100, ended by ``end_tid`` at b+300; thread 1
    launches its kernel on stream 9 (b+120..b+350) at b+110; draft (push/pop, b..b+100) launches
    a kernel on stream 7 (b+20..b+80) at b+10; both inside push/pop 'cycle N' (b..b+400)."""
    t.range(f"cycle {b // 1000}", b * U, (b + 400) * U, tid=1)
    t.range("draft", b * U, (b + 100) * U, tid=1)
    t.range("verify", (b + 100) * U, (b + 300) * U, tid=1, end_tid=end_tid, push_pop=False)
    launch(t, b + 10, (b + 20, b + 80), tid=1)
    t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=1), (b + 120) * U, (b + 350) * U, stream=9)


def test_a_start_end_phase_ended_on_another_thread_owns_its_start_threads_launches(tmp_path):
    # GIVEN draft (push/pop, thread 1, CPU b..b+100) launching a kernel on stream 7 (b+20..b+80),
    # and verify, an nvtxRangeStart on thread 1 at b+100 ended by thread 2 at b+300 (nsys's
    # projection leaves such ranges out), whose thread 1 launches a kernel on stream 9
    # (b+120..b+350)
    t = FakeTrace()
    for c in range(3):
        ended_on_thread_2(t, c * 1000)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN verify owns that kernel and is read on stream 9: b+100 (draft's boundary: 7 done at
    # b+80, 9 idle) to done(9, b+300) = b+350: 250 us, its GPU work past its timer
    got = [(p["phase"], p["gpu_ns"] // U, p["stream_id"], p["n_gpu_ops"], p["verdict"]) for p in rank.phases.to_pylist()]
    assert got == [("draft", 100, 7, 1, "agree"), ("verify", 250, 9, 1, "under")] * 3


def test_a_phase_ended_elsewhere_keeps_its_start_threads_launches_whatever_else_is_open(tmp_path):
    # GIVEN verify ended on thread 2 in cycles 0 and 1 but on thread 1 in cycle 2, a logging
    # thread 3 holding phase 'log' (b+105..b+290, launches nothing) open over verify's launch,
    # and a cudaStreamSynchronize thread 1 makes inside verify (b+200..b+250)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        ended_on_thread_2(t, b, end_tid=2 if c < 2 else 1)
        t.range("log", (b + 105) * U, (b + 290) * U, tid=3)
        corr = t.call("cudaStreamSynchronize", (b + 200) * U, (b + 250) * U, tid=1)
        t.sync_record(corr, (b + 200) * U, (b + 250) * U, sync_type=3, stream=9)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify", "log"))).ranks
    # THEN verify owns its kernel in every cycle (the thread that ended it decides nothing, and
    # an open phase of another thread takes nothing launched by verify's own thread), log none
    got = [(p["cycle"], p["phase"], p["n_gpu_ops"], p["stream_id"]) for p in rank.phases.to_pylist() if p["phase"] != "draft"]
    assert got == [(c, n, k, 9) for c in range(3) for n, k in (("verify", 1), ("log", 0))]
    # and the sync and the kernel both sit in verify's range and phase
    names = {r["range_id"]: r["name"] for r in rank.ranges.to_pylist()}
    phases = {p["phase_id"]: p["phase"] for p in rank.phases.to_pylist()}
    kernels = [(names[o["range_id"]], phases[o["phase_id"]]) for o in rank.gpu_ops.to_pylist() if o["stream_id"] == 9]
    syncs = [(names[s["range_id"]], phases[s["phase_id"]]) for s in rank.syncs.to_pylist()]
    assert kernels == syncs == [("verify", "verify")] * 3


def test_a_late_phase_of_a_thread_with_its_own_cycles_joins_no_other_threads_cycle(tmp_path):
    # GIVEN one process driving GPU 0 from thread 1 and GPU 1 from thread 2, cycles marked with
    # nvtxRangeStart/End; thread 2's cycles run b-5..b+400, thread 1's b..b+300, and in cycle 1
    # thread 1's verify closes late (b+100..b+350)
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 300) * U, tid=1, push_pop=False)
        t.range("draft", b * U, (b + 100) * U, tid=1)
        t.range("verify", (b + 100) * U, (b + (350 if c == 1 else 300)) * U, tid=1)
        launch(t, b + 10, (b + 20, b + 80), tid=1, device=0)
        launch(t, b + 110, (b + 120, b + 250), tid=1, device=0)
        b2 = b - 5
        t.range(f"cycle {c}", b2 * U, (b2 + 405) * U, tid=2, push_pop=False)
        t.range("draft", b2 * U, (b2 + 100) * U, tid=2)
        t.range("verify", (b2 + 100) * U, (b2 + 300) * U, tid=2)
        launch(t, b2 + 10, (b2 + 20, b2 + 600), tid=2, device=1)
        launch(t, b2 + 110, (b2 + 600, b2 + 900), tid=2, device=1)
    # WHEN analysed
    run = analyze([t.write(tmp_path / "t.sqlite")])
    # THEN the late verify belongs to no cycle (thread 2's longer cycle does not take it), each
    # thread stays a timeline of its own: GPU 0 draft 100, verify 200 (the late one, read alone:
    # b+100..done(GPU 0, b+350) = b+350, 250), GPU 1 draft 600, verify 300; and the late range is said
    got = sorted((p["tid"], p["cycle"] is None, p["phase"], p["gpu_ns"] // U) for r in run.ranks for p in r.phases.to_pylist())
    assert got == sorted([(1, False, "draft", 100)] * 3 + [(1, False, "verify", 200)] * 2 + [(1, True, "verify", 250)]
                         + [(2, False, "draft", 600)] * 3 + [(2, False, "verify", 300)] * 3)
    assert any("1 phase range(s) start inside a cycle range and end after it (first: 'verify')" in w for w in run.warnings)


def test_the_innermost_in_time_of_a_phase_ended_elsewhere_and_a_push_pop_range_holds_a_call(tmp_path):
    # GIVEN verify started on thread 1 and ended on thread 2, inside push/pop ranges 'loop' >
    # 'cycle N' > 'step' (a phase) on thread 1; inside verify, a push/pop 'sample' holding the
    # kernel launch (b+110) and a cudaStreamSynchronize (b+200..b+250) outside 'sample'
    t = FakeTrace()
    t.range("loop", 0, 5000 * U, tid=1)
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=1)
        t.range("step", (b + 50) * U, (b + 390) * U, tid=1)
        t.range("verify", (b + 100) * U, (b + 300) * U, tid=1, end_tid=2, push_pop=False)
        t.range("sample", (b + 105) * U, (b + 150) * U, tid=1)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, tid=1), (b + 120) * U, (b + 350) * U, stream=9)
        corr = t.call("cudaStreamSynchronize", (b + 200) * U, (b + 250) * U, tid=1)
        t.sync_record(corr, (b + 200) * U, (b + 250) * U, sync_type=3, stream=9)
    # WHEN analysed with step and verify as phases
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("step", "verify"))).ranks
    # THEN the kernel is verify's (the later-starting phase holding it), in range 'sample'; the
    # sync is verify's, in range verify (the later-starting of verify and 'step')
    names = {r["range_id"]: r["name"] for r in rank.ranges.to_pylist()}
    phases = {p["phase_id"]: p["phase"] for p in rank.phases.to_pylist()}
    assert [(names[o["range_id"]], phases[o["phase_id"]]) for o in rank.gpu_ops.to_pylist()] == [("sample", "verify")] * 3
    assert [(names[s["range_id"]], phases[s["phase_id"]]) for s in rank.syncs.to_pylist()] == [("verify", "verify")] * 3


def test_a_one_off_launch_on_the_phases_thread_does_not_stop_the_workers_attribution(tmp_path):
    # GIVEN phases on a scheduler thread (1): draft (b..b+200) and verify (b+200..b+400), b = 2000c
    # us; a drafter thread (3) launches draft's kernel on stream 9 (b+20..b+120), a worker thread
    # (2) verify's on stream 7 (b+220..b+1020); in cycle 0 only, thread 1 itself launches a 5 us
    # kernel inside verify (a warm-up path), on 7 after the worker's (b+1020..b+1025)
    t = FakeTrace()
    for c in range(4):
        b = c * 2000
        t.range(f"cycle {c}", b * U, (b + 400) * U, tid=1)
        t.range("draft", b * U, (b + 200) * U, tid=1)
        t.range("verify", (b + 200) * U, (b + 400) * U, tid=1)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, tid=3), (b + 20) * U, (b + 120) * U, stream=9)
        t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 212) * U, tid=2), (b + 220) * U, (b + 1020) * U, stream=7)
        if c == 0:
            t.kernel(t.call("cudaLaunchKernel", (b + 300) * U, (b + 302) * U, tid=1), (b + 1020) * U, (b + 1025) * U, stream=7)
    # WHEN analysed (every cycle counted)
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(skip_cycles=0)).ranks
    # THEN verify takes the worker's kernel in every cycle (it launched nothing itself in 3 of 4):
    # read on 7, it ends when that kernel is done (b+1020; b+1025 in cycle 0), draft on 9 ends at
    # verify's start (b+200)
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["stream_id"], p["attribution"]) for p in rank.phases.to_pylist()]
    assert got == [(c, n, v, s, "cross_thread") for c in range(4) for n, v, s in (("draft", 200, 9), ("verify", 825 if c == 0 else 820, 7))]


def test_a_start_end_phase_holding_a_push_pop_phase_reads_whole(tmp_path):
    # GIVEN cycles (b = 1000c us) of draft (push/pop b..b+100, kernel b+11..b+90) and verify
    # marked with nvtxRangeStart/End (b+100..b+300) around a push/pop target_verify
    # (b+110..b+200); verify's kernels run b+106..b+120, b+121..b+250 and, launched after
    # target_verify closed, b+250..b+280
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 400) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 11) * U), (b + 11) * U, (b + 90) * U)
        t.range("verify", (b + 100) * U, (b + 300) * U, push_pop=False)
        t.kernel(t.call("cudaLaunchKernel", (b + 105) * U, (b + 106) * U), (b + 106) * U, (b + 120) * U)
        t.range("target_verify", (b + 110) * U, (b + 200) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 120) * U, (b + 121) * U), (b + 121) * U, (b + 250) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 210) * U, (b + 211) * U), (b + 250) * U, (b + 280) * U)
    # WHEN analysed with the default phase names (target_verify among them)
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN target_verify is part of verify, which reads from b+100 to its CPU end b+300 (its
    # last kernel is done at b+280): 200 us, all three kernels; the cycle 300 us
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["n_gpu_ops"]) for p in rank.phases.to_pylist()]
    assert got == [(c, n, v, k) for c in range(3) for n, v, k in (("draft", 100, 1), ("verify", 200, 3))]
    assert [(c["gpu_ns"] // U, c["adds_up"]) for c in rank.cycles.to_pylist()] == [(300, True)] * 3


def test_a_scheduler_that_copies_its_inputs_itself_still_takes_the_workers_graph(tmp_path):
    # GIVEN phases on a scheduler thread (1): schedule (b..b+50), forward (b+50..b+150) and post
    # (b+150..b+400), b = 1000c us; inside forward the scheduler itself copies the batch's inputs
    # (launched b+55, b+57..b+60 on 7) and a forward thread (2) replays a CUDA graph on 7 (its
    # launch b+65..b+70, nodes b+70..b+200 and b+200..b+300)
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    for c in range(4):
        b = c * 1000
        t.cycle(c, b * U, (b + 50) * U, (b + 150) * U, (b + 400) * U, names=("schedule", "forward", "post"), tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 55) * U, (b + 57) * U, tid=1), (b + 57) * U, (b + 60) * U, kind=1)
        g = t.call("cudaGraphLaunch_v10000", (b + 65) * U, (b + 70) * U, tid=2)
        t.kernel(g, (b + 70) * U, (b + 200) * U, node=1)
        t.kernel(g, (b + 200) * U, (b + 300) * U, node=2)
    # WHEN analysed with the default --phase-thread auto
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward", "post"))).ranks[0]
    # THEN forward, which ran no kernel itself, takes the forward thread's graph: its copy and two
    # nodes (3 ops, 1 graph launch), read b+50..b+300 = 250 us, cross_thread (its own copy had
    # turned the rule off: 1 op, the graph in no phase); schedule and post took nothing
    got = [(p["phase"], p["gpu_ns"] // U, p["n_gpu_ops"], p["n_graph_launches"], p["attribution"]) for p in rank.phases.to_pylist()]
    assert got == [("schedule", 50, 0, 0, "same_thread"), ("forward", 250, 3, 1, "cross_thread"), ("post", 100, 0, 0, "same_thread")] * 4


def test_a_copy_only_phase_of_a_thread_that_launches_kernels_takes_no_background_kernels(tmp_path):
    # GIVEN one loop thread (1): prepare (b..b+100) whose only work is an input copy on 7
    # (b+20..b+40), forward (b+100..b+300) with a kernel on 7 (b+120..b+280); a background
    # thread (3) launches a kernel at b+30 on its own stream 40 (b+40..b+700), never joined
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U, names=("prepare", "forward"), tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 12) * U, tid=1), (b + 20) * U, (b + 40) * U, kind=1)
        launch(t, b + 110, (b + 120, b + 280), tid=1)
        launch(t, b + 30, (b + 40, b + 700), tid=3)
        t.kernels[-1]["streamId"] = 40
    # WHEN analysed with the default --phase-thread auto
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("prepare", "forward"))).ranks[0]
    # THEN the loop thread launches kernels, so prepare's own copy counts: it takes nothing of
    # thread 3 and is read on 7, b..b+100 = 100 us, forward b+100..b+300 = 200 us (it read 700
    # on stream 40, and forward 0)
    got = [(p["phase"], p["gpu_ns"] // U, p["stream_id"], p["attribution"]) for p in rank.phases.to_pylist()]
    assert got == [("prepare", 100, 7, "same_thread"), ("forward", 200, 7, "same_thread")] * 4


def test_of_two_phases_open_at_a_workers_launch_the_one_that_launched_nothing_takes_it(tmp_path):
    # GIVEN forward on a scheduler thread (1, b..b+300, launching nothing) while an output
    # thread (3) holds output (b+20..b+120) for the previous step, whose only work is its own
    # `.tolist()` (a copy on 7, b+35..b+40); a worker thread (2) launches the model's kernels at
    # b+50 (b+60..b+250) and b+200 (b+250..b+400) on 7
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.range(f"cycle {c}", b * U, (b + 600) * U, tid=1)
        t.range("forward", b * U, (b + 300) * U, tid=1)
        t.range("output", (b + 20) * U, (b + 120) * U, tid=3)
        t.copy(t.call("cudaMemcpyAsync", (b + 30) * U, (b + 32) * U, tid=3), (b + 35) * U, (b + 40) * U, kind=2)
        launch(t, b + 50, (b + 60, b + 250), tid=2)
        launch(t, b + 200, (b + 250, b + 400), tid=2)
    # WHEN analysed with both phases
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("forward", "output"))).ranks[0]
    # THEN both worker kernels are forward's (the first was launched while output, begun later,
    # was open too: it went to output), and output keeps its own copy
    ops = [(p["phase"], p["n_kernels"], p["n_gpu_ops"]) for p in rank.phases.to_pylist()]
    assert ops == [("forward", 2, 2), ("output", 0, 1)] * 4


def test_an_offload_threads_copies_never_decide_a_scheduler_phases_stream(tmp_path):
    # GIVEN a scheduler thread (1) holding schedule (b..b+50) and forward (b+50..b+300) that
    # launches nothing itself; a worker thread (2) launches forward's kernel on 7 (b+60..b+290);
    # an offload thread (3), which never launches a kernel, copies on its own stream 40 during
    # schedule (launched b+10, b+12..b+700)
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 50) * U, (b + 300) * U, names=("schedule", "forward"), tid=1)
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 12) * U, tid=3), (b + 12) * U, (b + 700) * U, kind=2, stream=40)
        t.kernel(t.call("cudaLaunchKernel", (b + 55) * U, (b + 57) * U, tid=2), (b + 60) * U, (b + 290) * U)
    # WHEN analysed
    rank = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("schedule", "forward"))).ranks[0]
    # THEN schedule holds the offload copy (cross-thread) but is read on 7 as if it launched
    # nothing (it read 700 us on stream 40, and forward 0): 50 us, forward b+50..b+300 = 250 us
    got = [(p["phase"], p["gpu_ns"] // U, p["stream_id"], p["n_gpu_ops"]) for p in rank.phases.to_pylist()]
    assert got == [("schedule", 50, 7, 1), ("forward", 250, 7, 1)] * 4


def test_a_thread_pool_running_each_phase_on_whichever_thread_is_free_is_one_loop_without_cycle_ranges(tmp_path):
    # GIVEN no cycle ranges, and draft and verify each run by whichever of two pool threads is
    # free: they alternate, so each thread holds both phases (a real H200 trace of the shape:
    # launch/stream_shapes_probe.py's thread_pool). Each cycle: draft b..b+100 (kernel b+20..b+80),
    # 30 us for the other thread to pick verify up, verify b+130..b+300 (kernel b+150..b+350)
    t = FakeTrace()
    for c in range(4):
        b, (first, second) = c * 1000, ((1, 2) if c % 2 == 0 else (2, 1))
        t.range("draft", b * U, (b + 100) * U, tid=first)
        launch(t, b + 10, (b + 20, b + 80), tid=first)
        t.range("verify", (b + 130) * U, (b + 300) * U, tid=second)
        launch(t, b + 140, (b + 150, b + 350), tid=second)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN the phases run one after another form one loop: 4 cycles of draft then verify, the
    # hand-off at draft's end (b+100: the GPU idle since b+80), verify to done(7, b+300) = b+350:
    # draft 100 us, verify 250 us, every cycle 350 us
    got = sorted((p["cycle"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist())
    assert got == [(c, n, v) for c in range(4) for n, v in (("draft", 100), ("verify", 250))]
    assert [c["gpu_ns"] // U for c in rank.cycles.to_pylist()] == [350] * 4


def test_threads_run_at_once_only_where_most_phases_begin_while_another_threads_is_open():
    from tracerecon.analysis.phases import _threads_run_at_once

    # GIVEN phases of two threads in time order, (start, end)
    # WHEN each begins after the other thread's last one ended (a pool handing one loop on)
    # THEN they do not run at once
    assert not _threads_run_at_once(np.array([0, 10, 20, 30]), np.array([9, 19, 29, 39]), np.array([1, 2, 1, 2]))
    # WHEN each thread's phase opens while the other's is open (a loop per thread)
    # THEN they do
    assert _threads_run_at_once(np.array([0, 5, 10, 15]), np.array([12, 17, 22, 27]), np.array([1, 2, 1, 2]))


def gpu_threads_taking_turns() -> FakeTrace:
    """Three cycles, no cycle ranges: thread 1 drives GPU 0, thread 2 GPU 1, their short ranges
    taking turns: T1 draft b..b+20, T2 draft b+21..b+40, T1 verify b+41..b+60, T2 verify
    b+61..b+80; GPU 0 runs T1's draft b+6..b+106 and verify b+106..b+306, GPU 1 T2's draft
    b+26..b+426 and verify b+426..b+526."""
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range("draft", b * U, (b + 20) * U, tid=1)
        launch(t, b + 2, (b + 6, b + 106), tid=1, device=0)
        t.range("draft", (b + 21) * U, (b + 40) * U, tid=2)
        launch(t, b + 22, (b + 26, b + 426), tid=2, device=1)
        t.range("verify", (b + 41) * U, (b + 60) * U, tid=1)
        launch(t, b + 42, (b + 106, b + 306), tid=1, device=0)
        t.range("verify", (b + 61) * U, (b + 80) * U, tid=2)
        launch(t, b + 62, (b + 426, b + 526), tid=2, device=1)
    return t


def test_threads_driving_a_gpu_each_are_loops_of_their_own_also_where_they_take_turns(tmp_path):
    # GIVEN no cycle ranges; thread 1 drives GPU 0 and thread 2 GPU 1, their short ranges taking
    # turns (a review's case): T1 draft b..b+20, T2 draft b+21..b+40, T1 verify b+41..b+60, T2
    # verify b+61..b+80; GPU 0 runs T1's draft b+6..b+106 and verify b+106..b+306, GPU 1 T2's
    # draft b+26..b+426 and verify b+426..b+526
    t = gpu_threads_taking_turns()
    # WHEN analysed
    ranks = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN two loops, a rank per GPU: T1 draft b .. done(GPU 0, b+41) = b+106, verify .. b+306:
    # 106 and 200 us; T2 draft b+21 .. done(GPU 1, b+61) = b+426, verify .. b+526: 405 and 100 us
    assert len(ranks) == 2
    got = sorted((p["tid"], p["phase"], p["gpu_ns"] // U) for r in ranks for p in r.phases.to_pylist())
    assert got == sorted([(1, "draft", 106), (1, "verify", 200), (2, "draft", 405), (2, "verify", 100)] * 3)


def test_a_thread_that_launches_nothing_beside_two_gpu_threads_keeps_them_loops_of_their_own(tmp_path):
    # GIVEN the two GPU threads above taking turns, and a third thread holding draft and verify
    # ranges of its own that launches nothing (a review's case)
    t = gpu_threads_taking_turns()
    for c in range(3):
        b = c * 1000
        t.range("draft", (b + 600) * U, (b + 610) * U, tid=3)
        t.range("verify", (b + 610) * U, (b + 620) * U, tid=3)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")]).ranks
    # THEN threads 1 and 2 are loops of their own: 106 / 200 us on GPU 0, 405 / 100 us on GPU 1
    got = sorted((p["tid"], p["phase"], p["gpu_ns"] // U) for p in rank.phases.to_pylist() if p["tid"] != 3)
    assert got == sorted([(1, "draft", 106), (1, "verify", 200), (2, "draft", 405), (2, "verify", 100)] * 3)


def test_a_wait_across_gpus_hands_data_over_and_forks_no_side_stream(tmp_path):
    # GIVEN one thread driving two GPUs: draft waits for GPU 0's stream 7 (the target's hidden
    # states) and runs 288 us on GPU 1's stream 21; verify waits for GPU 1 and runs 50 us on GPU 0
    # (a review's reproduction)
    t = FakeTrace()

    for c in range(3):
        b = c * 2000
        t.range(f"cycle {c}", b * U, (b + 400) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 100) * U, (b + 400) * U)
        hand_over(t, 2 * c + 1, b + 5, (0, 7), (1, 21))
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 12) * U, (b + 300) * U, stream=21, device=1)
        hand_over(t, 2 * c + 2, b + 105, (1, 21), (0, 7))
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 300) * U, (b + 350) * U, stream=7, device=0)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify"))).ranks
    # THEN by hand, events on each phase's own GPU's stream: draft on GPU 1 from b to its
    # kernel's end at b+300 (done(GPU 1, b+100)); verify on GPU 0 from b+100 (GPU 0's stream
    # idle then: the wait for the draft is verify's, as an event recorded there at its start
    # reads it) to b+400 (its range's end: the kernel ended at 350). Draft was once read on
    # GPU 0's stream 7, where it launched nothing, at 100 us; then verify at 100, tiled after
    # the draft on the other GPU
    got = [(p["cycle"], p["phase"], p["gpu_ns"] // U, p["device_id"], p["stream_id"]) for p in rank.phases.to_pylist()]
    assert got == [(c, n, us, d, s) for c in range(3) for n, us, d, s in (("draft", 300, 1, 21), ("verify", 300, 0, 7))]


def test_a_copy_back_from_the_other_gpu_does_not_move_a_phase_onto_it(tmp_path):
    # GIVEN one thread driving two GPUs, 3 cycles (b = 1000c): draft [b, b+100] takes the
    # target's hidden states over (GPU 1's stream 21 waits for GPU 0's stream 7 at b+6), copies
    # 10 us back from GPU 0 (`.cpu()` of a tensor there: b+12..b+22) and runs 300 us on GPU 1
    # (b+30..b+330); verify [b+100, b+400] takes the draft over (GPU 0 waits for GPU 1 at b+106)
    # and runs 50 us on GPU 0 (b+330..b+380) (a fuzzer's program, reduced)
    t = FakeTrace()

    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 400) * U)
        t.range("draft", b * U, (b + 100) * U)
        t.range("verify", (b + 100) * U, (b + 400) * U)
        hand_over(t, 2 * c + 1, b + 5, (0, 7), (1, 21))
        t.copy(t.call("cudaMemcpyAsync", (b + 10) * U, (b + 12) * U), (b + 12) * U, (b + 22) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 30) * U, (b + 32) * U), (b + 30) * U, (b + 330) * U, stream=21, device=1)
        hand_over(t, 2 * c + 2, b + 105, (1, 21), (0, 7))
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 330) * U, (b + 380) * U, stream=7, device=0)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("draft", "verify"), skip_cycles=0)).ranks
    # THEN by hand, events on each phase's own GPU: draft on GPU 1's stream 21 from b (idle) to
    # done(GPU 1, b+100) = b+330; verify on GPU 0's stream 7 from b+100 (the copy done at b+22)
    # to b+400 (its CPU end; its kernel ended at b+380). The copy on GPU 0 made draft look
    # forked off GPU 0's stream and moved it there: 20-30 us
    got = [(p["phase"], p["device_id"], p["stream_id"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]
    assert got == [("draft", 1, 21, 330), ("verify", 0, 7, 300)] * 3


def test_a_wait_written_on_device_0_by_a_stream_of_the_same_id_on_gpu_1_is_gpu_1s(tmp_path):
    # GIVEN one thread driving two GPUs, each with its stream 7, 3 cycles (b = 1000c): verify
    # [b, b+100] runs b+10..b+400 on GPU 0 and records an event there at b+90; GPU 1's stream 7
    # waits for it at b+95, but the wait's record says device 0 (as nsys 2026.2 writes every
    # synchronization record); draft [b+100, b+200] runs b+400..b+450 on GPU 1
    t = FakeTrace()
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 200) * U)
        t.range("verify", b * U, (b + 100) * U)
        t.range("draft", (b + 100) * U, (b + 200) * U)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U), (b + 10) * U, (b + 400) * U, stream=7, device=0)
        call = t.call("cudaEventRecord", (b + 90) * U, (b + 91) * U)
        t.events.append({"deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": call, "globalPid": gpid(10), "eventId": c + 1, "eventSyncId": 1})
        call = t.call("cudaStreamWaitEvent", (b + 95) * U, (b + 96) * U)
        t.syncs.append({"start": (b + 95) * U, "end": (b + 96) * U, "deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": call,
                        "globalPid": gpid(10), "syncType": 2, "eventId": c + 1, "eventSyncId": 1})
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U), (b + 400) * U, (b + 450) * U, stream=7, device=1)
    # WHEN analysed
    (rank,) = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("verify", "draft"), skip_cycles=0)).ranks
    # THEN by hand: the wait is GPU 1's (GPU 0's stream waiting for its own record is nothing),
    # so an event at draft's start on GPU 1 reads the verify it waits for, b+400: draft 50 us
    # (b+400..b+450), not 350; verify on GPU 0 b..b+400
    got = [(p["phase"], p["device_id"], p["gpu_boundary_start_ns"] // U - 1000 * p["cycle"], p["gpu_ns"] // U) for p in rank.phases.to_pylist()]
    assert got == [("verify", 0, 0, 400), ("draft", 1, 400, 50)] * 3


def test_a_launcher_marking_cycles_in_a_rank_file_is_left_out_of_the_ranks_cycles(tmp_path):
    import sqlite3

    # GIVEN two rank files of a tensor-parallel run; rank 0's also holds a process that launches
    # nothing (vLLM's EngineCore beside its worker) and marks `cycle N` and a `forward` of its own;
    # each worker marks cycle N and forward (a 50 us kernel, then an all-reduce), rank 1 30 us late
    # at cycle 2's all-reduce (a review's reproduction)
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    paths = []
    for r, (pid, late) in enumerate(((900, [0, 0, 0]), (700, [0, 0, 30]))):
        t = FakeTrace()
        for c in range(3):
            b = c * 1000
            if r == 0:
                t.range(f"cycle {c}", b * U, (b + 300) * U, pid=500)
                t.range("forward", (b + 1) * U, (b + 3) * U, pid=500)
            t.range(f"cycle {c}", (b + 5) * U, (b + 200) * U, pid=pid)
            t.range("forward", (b + 5) * U, (b + 100) * U, pid=pid)
            t.kernel(t.call("cudaLaunchKernel", (b + 8) * U, (b + 10) * U, pid=pid), (b + 10) * U, (b + 60 + late[c]) * U, pid=pid)
            t.kernel(t.call("cudaLaunchKernel", (b + 12) * U, (b + 14) * U, pid=pid), (b + 60 + late[c]) * U, (b + 90 + 30 * (c == 2)) * U, pid=pid, name=nccl)
        p = t.write(tmp_path / f"rank{r}.sqlite")
        with sqlite3.connect(p) as con:
            con.executescript("create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values (1000000000000);")
        paths.append(p)
    # WHEN analysed
    a = analyze(paths, PhaseConfig(phases=("forward",)))
    # THEN rank 0 has the worker's three cycles, numbered 0, 1, 2 (the launcher's ranges were
    # numbered with them: 1, 3, 5, and its forward ranges kept with no GPU time), each forward
    # 95 us (115 where it waits in cycle 2), cycle 2 gated by rank 1, and a warning names pid 500
    r0 = a.ranks[0]
    assert [(p["cycle"], p["pid"], p["gpu_ns"] // U) for p in r0.phases.to_pylist()] == [(0, 900, 95), (1, 900, 95), (2, 900, 115)]
    assert [c["cycle"] for c in r0.cycles.to_pylist()] == [0, 1, 2]
    assert a.cross.critical_path.select(["cycle", "gating_rank"]).to_pylist()[-1] == {"cycle": 2, "gating_rank": 1}
    assert any("launched no GPU work (pid 500)" in w for w in a.warnings)


def test_ranks_finding_cycles_of_unlike_lengths_from_their_phases_are_said(tmp_path):
    # GIVEN two ranks without cycle ranges over the same 10 steps (b = 1000 c us), the second
    # running 'a' only every other step ('b' alone in between: its cycles, cut where 'a' begins
    # again, hold two steps each)
    t = FakeTrace()
    for pid in (10, 11):
        for c in range(10):
            b = 1000 * c
            if pid == 10 or c % 2 == 0:
                t.range("a", b * U, (b + 100) * U, pid=pid, tid=pid)
                launch(t, b + 10, (b + 20, b + 70), tid=pid, device=pid - 10, pid=pid)
            t.range("b", (b + 100) * U, (b + 300) * U, pid=pid, tid=pid)
            launch(t, b + 110, (b + 120, b + 170), tid=pid, device=pid - 10, pid=pid)
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b")))
    # THEN rank 0 counts 10 cycles of 0.300 ms CPU (a and b: b .. b+300), rank 1 5 of 1.300 ms
    # (b .. b+1300: a, b, then the next step's b), and a warning names both, with the cycles each
    # began in the stretch both cover (their cycles' starts from 0 to 8000 us: 9 and 5)
    assert [r.cycles.num_rows for r in a.ranks] == [10, 5]
    (said,) = [w for w in a.warnings if "unlike cycles" in w]
    assert said.startswith("the ranks found unlike cycles from their phases (no cycle range): rank 0 9 of 0.300 ms, rank 1 5 of 1.300 ms "
                           "(median CPU) over the stretch both cover: ")


@pytest.mark.parametrize("shape", ["begun later", "one pausing", "one cycle", "slower b", "stage a only"])
def test_ranks_running_the_same_steps_are_not_said_to_find_unlike_cycles(tmp_path, shape):
    # GIVEN two ranks without cycle ranges running the same steps ('a' [b, b+100], 'b' [b+100,
    # b+300], b = 1000 c us): the second holding only the last 4 of the first's 10 (its capture
    # begun 6 steps later), or both 10 with the first pausing 50 ms before its last step, or the
    # second holding one step only, or its 'b' 400 us long (a data-parallel rank's larger
    # batch), or the first running only 'a' (a pipeline's first stage)
    t = FakeTrace()
    steps = {"begun later": (range(10), range(6, 10)), "one cycle": (range(10), range(9, 10))}.get(shape, (range(10), range(10)))
    for pid, mine in zip((10, 11), steps):
        for c in mine:
            b = 1000 * c + (50_000 if shape == "one pausing" and pid == 10 and c == 9 else 0)
            b_us = 400 if shape == "slower b" and pid == 11 else 200
            t.range("a", b * U, (b + 100) * U, pid=pid, tid=pid)
            launch(t, b + 10, (b + 20, b + 70), tid=pid, device=pid - 10, pid=pid)
            if not (shape == "stage a only" and pid == 10):
                t.range("b", (b + 100) * U, (b + 100 + b_us) * U, pid=pid, tid=pid)
                launch(t, b + 110, (b + 120, b + 170), tid=pid, device=pid - 10, pid=pid)
    a = analyze([t.write(tmp_path / "t.sqlite")], PhaseConfig(phases=("a", "b")))
    # THEN each rank's cycles are its steps (one a step: as many over the stretch both cover),
    # and nothing is said of unlike cycles (reviews' shapes: the count had said so of the first,
    # the rate of the second, the length alone of the fourth and fifth)
    assert [r.cycles.num_rows for r in a.ranks] == [len(m) for m in steps]
    assert not [w for w in a.warnings if "unlike" in w]
