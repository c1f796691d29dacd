"""Ranks of several processes and files: which process is which rank, and which rank gated a
cycle where some ranks mark no phases or all arrive at once. Hand-built traces (FakeTrace):
per cycle (b = c * 1000 us) draft b..b+100 (kernel b+20..b+80), verify b+100..b+400 (compute
b+120..b+200+late, then an all-reduce from b+200+late to b+300 on every rank)."""

from __future__ import annotations

import sqlite3

import pyarrow.compute as pc
import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.errors import BadTraceError

U = 1000
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def launch(t: FakeTrace, at_us: int, gpu_us: tuple[int, int], pid: int, device: int, name: str = "k") -> None:
    c = t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid)
    t.kernel(c, gpu_us[0] * U, gpu_us[1] * U, pid=pid, device=device, name=name)


def rank_cycles(t: FakeTrace, pid: int, device: int, n: int = 5, late_us: int | list[int] = 0, phases: bool = True, mark: int | None = None,
                first_us: int = 0) -> None:
    if mark is not None:
        t.mark(f"tracerecon.rank={mark}", 1, pid=pid)
    for c in range(n):
        b = first_us + c * 1000
        late = late_us[c] if isinstance(late_us, list) else late_us
        if phases:
            t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=pid)
        launch(t, b + 10, (b + 20, b + 80), pid, device)
        launch(t, b + 110, (b + 120, b + 200 + late), pid, device)
        launch(t, b + 120, (b + 200 + late, b + 300), pid, device, ALL_REDUCE)


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


def test_cycles_where_an_unannotated_rank_arrived_together_still_count(tmp_path):
    # GIVEN only rank 0 marks phases; rank 1 is 40 us late at the all-reduce in cycles 0-2 and
    # arrives with rank 0 in cycles 3-4
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1, late_us=[40, 40, 40, 0, 0], phases=False)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN all five cycles are on the critical path: rank 1 gated 0-2 at the all-reduce; in 3-4
    # nobody waited (the rank whose work ended last is named), as with both ranks annotated
    cp = a.cross.critical_path.to_pydict()
    assert cp["cycle"] == [0, 1, 2, 3, 4] and cp["how"] == ["collectives"] * 3 + ["latest end"] * 2
    assert cp["gating_rank"][:3] == [1, 1, 1] and cp["max_wait_ns"] == [40 * U] * 3 + [0, 0]


def test_ranks_arriving_together_gate_nothing_at_their_collectives(tmp_path):
    # GIVEN two ranks reaching every all-reduce at the same nanosecond
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # and ending every cycle at the same nanosecond
    # THEN no cycle is put down to a collective (none waited), nor to a last to finish (they
    # ended together: before, the lower rank was named "last to finish" in every cycle), and the
    # report names nobody
    assert a.cross.critical_path.num_rows == 0
    from tracerecon.present import straggler_lines

    assert straggler_lines(a) == []


def _ranks(a) -> list[tuple[int, tuple[int, ...], str]]:
    return [(r.rank, r.source.pids, r.source.how) for r in a.ranks]


@pytest.mark.parametrize("pids", [(2047, 2044), (410047, 410044)])
def test_files_named_by_pid_go_by_their_devices(tmp_path, pids):
    # GIVEN `nsys profile -o profile_%p` per rank: rank 0 is pid 2047 on GPU 0, rank 1 pid 2044
    # on GPU 1 (the pids in the names, which must not be taken for rank numbers; small or large)
    paths = []
    for pid, device in zip(pids, (0, 1)):
        t = FakeTrace()
        rank_cycles(t, pid, device, late_us=30 if device == 1 else 0)
        paths.append(t.write(tmp_path / f"profile_{pid}.sqlite"))
    a = load([tmp_path])
    # THEN the ranks are 0 and 1 by device, said in a warning; rank 1 is the straggler
    assert _ranks(a) == [(0, (pids[0],), "device order"), (1, (pids[1],), "device order")]
    assert any("processes' ids (nsys -o %p)" in w for w in a.warnings)
    assert a.cross.critical_path["gating_rank"].to_pylist() == [1] * 5


def test_rank_marks_decide_across_files(tmp_path):
    # GIVEN two per-rank files whose names say nothing useful (a, b), each process marking its
    # rank (tracerecon.instrument): the file "a" holds rank 1
    for name, pid, device, mark in (("a", 10, 1, 1), ("b", 20, 0, 0)):
        t = FakeTrace()
        rank_cycles(t, pid, device, mark=mark)
        t.write(tmp_path / f"{name}.sqlite")
    a = load([tmp_path])
    # THEN the marks number them
    assert _ranks(a) == [(0, (20,), "nvtx mark"), (1, (10,), "nvtx mark")]


@pytest.mark.parametrize("name", ["node{}", "node_{}"])
def test_one_file_per_node_holding_several_ranks(tmp_path, name):
    # GIVEN `nsys profile torchrun --nproc-per-node 2` on each of two nodes: node0.sqlite holds
    # global ranks 0 and 1 (pids 100, 101 on GPUs 0, 1), node1.sqlite ranks 2 and 3; rank 3 is
    # 50 us late at every all-reduce (the files' names end in no number, or in the node's)
    for node in (0, 1):
        t = FakeTrace()
        for local in (0, 1):
            rank_cycles(t, 100 + local, local, late_us=50 if (node, local) == (1, 1) else 0)
        t.write(tmp_path / f"{name.format(node)}.sqlite")
    a = load([tmp_path])
    # THEN four ranks, one per process, in file order then device
    assert [(r.rank, r.source.pids, r.source.path.endswith(f"{name.format(r.rank // 2)}.sqlite")) for r in a.ranks] == [
        (0, (100,), True), (1, (101,), True), (2, (100,), True), (3, (101,), True)]
    # and each of ranks 0-2 waited 50 us in every cycle's all-reduce (250 us in 5); rank 3 none
    assert [c.wait_ns for c in a.cross.comm] == [250 * U, 250 * U, 250 * U, 0]
    assert any("hold several ranks' processes (on several devices" in w for w in a.warnings)


def test_a_process_without_a_mark_comes_after_the_marked_ones(tmp_path):
    # GIVEN one report: a scheduler (pid 50) that made one copy on GPU 0 and carries no rank
    # mark; workers pid 60 (GPU 1) marked rank 0 and pid 70 (GPU 0) marked rank 1
    t = FakeTrace()
    c = t.call("cudaMemcpyAsync", 5, 6, pid=50)
    t.copy(c, 7, 8, pid=50)
    rank_cycles(t, 60, 1, mark=0)
    rank_cycles(t, 70, 0, mark=1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the marks hold and the scheduler is numbered after them, with a warning
    assert _ranks(a) == [(0, (60,), "nvtx mark"), (1, (70,), "nvtx mark"), (2, (50,), "device/pid order")]
    assert any("process 50 carries no tracerecon.rank mark" in w for w in a.warnings)


def test_without_marks_processes_that_ran_kernels_come_first(tmp_path):
    # GIVEN one report: a scheduler (pid 50, lowest) that made one copy on GPU 0, and two
    # tensor-parallel workers (pid 60 on GPU 0, pid 70 on GPU 1) with one stray copy of pid 70's
    # on GPU 0
    t = FakeTrace()
    c = t.call("cudaMemcpyAsync", 5, 6, pid=50)
    t.copy(c, 7, 8, pid=50)
    rank_cycles(t, 60, 0)
    rank_cycles(t, 70, 1)
    c = t.call("cudaMemcpyAsync", 9, 10, pid=70)
    t.memcpy.append(dict(t.memcpy[-1], correlationId=c, deviceId=0, globalPid=t.kernels[-1]["globalPid"]))
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the workers are ranks 0 and 1 by the device that ran most of their work, the
    # scheduler rank 2
    assert _ranks(a) == [(0, (60,), "device/pid order"), (1, (70,), "device/pid order"), (2, (50,), "device/pid order")]


def test_a_folders_files_sort_numbers_by_value(tmp_path):
    # GIVEN worker_tp0 .. worker_tp10 (names tracerecon reads no rank from)
    for i in range(11):
        t = FakeTrace()
        rank_cycles(t, 100 + i, 0, n=1)
        t.write(tmp_path / f"worker_tp{i}.sqlite")
    a = load([tmp_path])
    # THEN file order puts worker_tp10 last
    assert [r.source.pids for r in a.ranks] == [(100 + i,) for i in range(11)]


def test_a_rank_files_copy_only_helper_stays_in_its_rank(tmp_path):
    # GIVEN per-rank files hostA and hostB (no rank in their names), each holding its worker
    # (GPU 0 of its host) and a helper process that only copied
    for host, base in (("hostA", 100), ("hostB", 200)):
        t = FakeTrace()
        rank_cycles(t, base, 0)
        c = t.call("cudaMemcpyAsync", 5, 6, pid=base + 1)
        t.copy(c, 7, 8, pid=base + 1)
        t.write(tmp_path / f"{host}.sqlite")
    a = load([tmp_path])
    # THEN two ranks, each its file's processes, in file order
    assert [(r.rank, r.source.pids) for r in a.ranks] == [(0, (100, 101)), (1, (200, 201))]


def test_a_rank_file_where_nothing_ran_keeps_its_place(tmp_path):
    # GIVEN files wa, wb, wc of one run (no rank in their names); wb's process failed early (no
    # GPU work, no NVTX range)
    for name, pid in (("wa", 100), ("wb", None), ("wc", 102)):
        t = FakeTrace()
        if pid is None:
            t.call("cudaGetDevice", 0, 1, pid=101)
        else:
            rank_cycles(t, pid, 0)
        t.write(tmp_path / f"{name}.sqlite")
    a = load([tmp_path])
    # THEN three ranks in file order, wb's empty
    assert [(r.rank, r.source.path.rsplit("/", 1)[-1], r.source.pids) for r in a.ranks] == [
        (0, "wa.sqlite", (100,)), (1, "wb.sqlite", ()), (2, "wc.sqlite", (102,))]


def test_an_unmarked_rank_file_keeps_the_rank_its_name_gives(tmp_path):
    # GIVEN rank0 .. rank3, whose processes mark their ranks but rank2's
    for r in range(4):
        t = FakeTrace()
        rank_cycles(t, 100 + r, r, mark=None if r == 2 else r)
        t.write(tmp_path / f"rank{r}.sqlite")
    a = load([tmp_path])
    # THEN rank2.sqlite is rank 2 (no mark holds 2), said in a warning
    assert [(r.rank, r.source.pids, r.source.how) for r in a.ranks] == [
        (0, (100,), "nvtx mark"), (1, (101,), "nvtx mark"), (2, (102,), "file name"), (3, (103,), "nvtx mark")]
    assert any("process 102 carries no tracerecon.rank mark" in w and "rank 2, by file name" in w for w in a.warnings)


def test_a_worker_that_only_replays_cuda_graphs_ran_code(tmp_path):
    # GIVEN one report traced with --cuda-graph-trace=graph: a scheduler (pid 50) that made one
    # copy on GPU 0, a worker (pid 60) on GPU 0 whose only GPU work is whole graph launches, a
    # worker (pid 70) on GPU 1
    t = FakeTrace()
    c = t.call("cudaMemcpyAsync", 5, 6, pid=50)
    t.copy(c, 7, 8, pid=50)
    for i in range(3):
        g = t.call("cudaGraphLaunch", (i * 1000 + 10) * U, (i * 1000 + 12) * U, pid=60)
        t.graph(g, (i * 1000 + 20) * U, (i * 1000 + 300) * U, pid=60)
    rank_cycles(t, 70, 1, n=3)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the workers come first, by device
    assert [r.source.pids for r in a.ranks] == [(60,), (70,), (50,)]


def test_a_straggler_lines_phase_count_is_of_the_cycles_it_gated(tmp_path):
    # GIVEN two annotated ranks; rank 1 is 40 us late at the all-reduce in cycles 0-2 and ends
    # its work last in cycles 3-4, where the ranks reach the all-reduce together (rank 1's
    # verify runs a kernel after it there)
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 1, late_us=[40, 40, 40, 0, 0])
    for c in (3, 4):  # rank 1's verify runs a kernel after the all-reduce: b+300..b+350
        launch(t, c * 1000 + 130, (c * 1000 + 300, c * 1000 + 350), 20, 1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN its line counts 3 gated cycles, "mostly in verify (3 of them)": the phase count is of
    # those 3, not of every cycle it was named in
    from tracerecon.present import straggler_lines

    lines = straggler_lines(a)
    assert any(x.startswith("straggler: rank 1 gated 3 of 5 cycles, mostly in verify (3 of them)") and "last to finish in 2 more" in x
               for x in lines), lines


def test_a_rank_mark_too_large_to_be_a_rank_is_ignored_and_said(tmp_path):
    # GIVEN one report of two processes: pid 10 marks tracerecon.rank=3000000000 (no int32, no
    # rank: a corrupt or foreign mark), pid 20 marks tracerecon.rank=0
    t = FakeTrace()
    rank_cycles(t, 10, 0, mark=3_000_000_000)
    rank_cycles(t, 20, 1, mark=0)
    # WHEN analysed
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the mark is ignored with a warning naming it, pid 20 is rank 0 and pid 10 comes after it
    assert any("tracerecon.rank=3000000000 (pid 10) names no rank" in w for w in a.warnings)
    assert [(r.rank, r.source.pids) for r in a.ranks] == [(0, (20,)), (1, (10,))]


def test_a_rank_that_ran_no_collective_beside_one_that_did_is_said_and_the_last_to_finish_gates(tmp_path):
    # GIVEN two ranks in one report: rank 0 all-reduces every cycle (its work ends at b+300),
    # rank 1's trace holds no communication kernel (traced without them) and its compute ends
    # at b+370
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    for c in range(5):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=20)
        launch(t, b + 10, (b + 20, b + 80), 20, 1)
        launch(t, b + 110, (b + 120, b + 370), 20, 1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN a warning says rank 1 ran none and rank 0's collectives are matched with nobody's; no
    # waits; and with no collective relating the two, every cycle goes to rank 1, which ended
    # last (70 us after rank 0), in verify
    assert any(w.startswith("rank 1 ran no communication kernels, rank 0 alone did") for w in a.warnings)
    assert [(c.rank, c.n_collectives, c.wait_ns) for c in a.cross.comm] == [(0, 5, 0), (1, 0, 0)]
    cp = a.cross.critical_path.to_pydict()
    assert (cp["gating_rank"], cp["how"], cp["gating_phase"]) == ([1] * 5, ["latest end"] * 5, ["verify"] * 5)


def start_up_scheduler(t: FakeTrace, pid: int, kernel: bool = True, phases: tuple[str, ...] = ("draft",)) -> None:
    """A scheduler process on device 0 whose only GPU work is at its start-up (a 300-us warm-up
    kernel, or a 2-us copy, launched at 0 us), marking its own cycles 0-4 (at 1000 + c x 1000 us)
    around a 50-us range of each of ``phases`` in turn, from the cycle's start."""
    c = t.call("cudaLaunchKernel" if kernel else "cudaMemcpyAsync", 0, 2 * U, pid=pid)
    if kernel:
        t.kernel(c, 2 * U, 300 * U, pid=pid, name="warmup")
    else:
        t.copy(c, 2 * U, 4 * U, pid=pid, kind=1)
    for cyc in range(5):
        b = 1000 + cyc * 1000
        t.cycle(cyc, *[(b + 50 * i) * U for i in range(len(phases) + 1)], names=phases, pid=pid)


@pytest.mark.parametrize("sched_pid", [5, 15, 25])
def test_a_scheduler_whose_gpu_work_all_ran_at_its_start_up_is_numbered_after_the_workers(tmp_path, sched_pid):
    # GIVEN a scheduler (pid 5, 15 or 25: before, between or after the workers' pids) whose only
    # GPU work is a warm-up kernel at 0-300 us, marking cycle and draft ranges from 1000 us, and
    # two tensor-parallel workers (pids 10 and 20 on devices 0 and 1) running their five cycles
    # (draft, verify with an all-reduce) from 1000 us
    t = FakeTrace()
    start_up_scheduler(t, sched_pid)
    rank_cycles(t, 10, 0, first_us=1000)
    rank_cycles(t, 20, 1, first_us=1000)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the workers are ranks 0 and 1, in device order, whatever the scheduler's pid; the
    # scheduler is rank 2, with no phase (its draft ranges, during which it launched nothing, are
    # left out: before, they read 50 us of "GPU" time on its idle stream), and two lines say so
    assert [(r.rank, r.source.pids) for r in a.ranks] == [(0, (10,)), (1, (20,)), (2, (sched_pid,))]
    assert [r.phases.num_rows for r in a.ranks] == [10, 10, 0]
    assert sum(f"process {sched_pid} launched GPU work only before the first phase or cycle range began" in w for w in a.warnings) == 1
    assert sum(f"(pid {sched_pid}, which launched GPU work only before the file's first phase or cycle range)" in w for w in a.warnings) == 1
    assert not any("no range named as a phase" in w for w in a.warnings)
    # and each worker's draft reads 100 us in every cycle, as events at its ends would (its
    # kernel ran 20-80 us into the cycle; the stream idle at both ends, 0 and 100 us)
    assert a.ranks[0].phases.filter(pc.equal(a.ranks[0].phases["phase"], "draft"))["gpu_ns"].to_pylist() == [100 * U] * 5


def test_phases_marked_only_in_a_scheduler_whose_gpu_work_ran_at_start_up_are_refused(tmp_path):
    # GIVEN a scheduler (pid 5) that marks every cycle's draft and verify (from 1000 us) and did
    # one 2-us copy at its start-up (0 us), and two workers (pids 10, 20) that launch each cycle's
    # kernels but mark nothing
    t = FakeTrace()
    start_up_scheduler(t, 5, kernel=False, phases=("draft", "verify"))
    rank_cycles(t, 10, 0, phases=False, first_us=1000)
    rank_cycles(t, 20, 1, phases=False, first_us=1000)
    # WHEN it is loaded THEN it is refused, as where the scheduler launched nothing at all (before:
    # the scheduler was a rank whose phases read its idle stream's wall time, the workers' kernels
    # in no phase), saying to mark the phases in the process that launches
    with pytest.raises(BadTraceError, match=r"phase or cycle ranges in a process that launched no GPU work \(pid 5, which launched GPU work only before"):
        load([t.write(tmp_path / "run.sqlite")])


def test_a_process_that_ran_only_before_its_phases_alone_and_a_worker_marking_no_phase_are_ranks_as_before(tmp_path):
    # GIVEN one process whose GPU work (a kernel at 0-300 us) all ran before its phases (cycles
    # from 1000 us, launching nothing), and, in another trace, a third tensor-parallel worker
    # (pid 30, device 2) that marks no phase but runs every cycle's kernels
    alone = FakeTrace()
    start_up_scheduler(alone, 5)
    three = FakeTrace()
    rank_cycles(three, 10, 0, first_us=1000)
    rank_cycles(three, 20, 1, first_us=1000)
    rank_cycles(three, 30, 2, phases=False, first_us=1000)
    # WHEN each is loaded THEN the lone process is the one rank with its phases, and the workers
    # keep their device order (the unmarked one ran GPU work during the phases)
    a = load([alone.write(tmp_path / "alone.sqlite")])
    assert [(r.rank, r.source.pids, r.phases.num_rows) for r in a.ranks] == [(0, (5,), 5)]
    b = load([three.write(tmp_path / "three.sqlite")])
    assert [(r.rank, r.source.pids) for r in b.ranks] == [(0, (10,)), (1, (20,)), (2, (30,))]
    assert not any("only before the first phase" in w for w in a.warnings + b.warnings)


def thread_loop(t: FakeTrace, tid: int, device: int, fwd_us: int, n: int = 4, pid: int = 10, stream: int = 7, all_reduce_to_us: int | None = None) -> None:
    """Thread ``tid`` of process ``pid`` running ``n`` cycles of its own on ``device`` (``stream``): cycle c
    (from c x 1000 us) holds fwd (0-100 us, its kernel 10 us on, ``fwd_us`` long) and sample
    (100-900 us, a 20-us kernel launched at 110 us, queued behind fwd's)."""
    for c in range(n):
        b = c * 1000
        t.cycle(c, b * U, (b + 100) * U, (b + 900) * U, names=("fwd", "sample"), pid=pid, tid=tid)
        k = t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U, pid=pid, tid=tid)
        t.kernel(k, (b + 10) * U, (b + 10 + fwd_us) * U, pid=pid, device=device, stream=stream)
        end = b + 10 + fwd_us
        if all_reduce_to_us is not None:  # an all-reduce launched at 8 us, from fwd's end to all_reduce_to_us
            k = t.call("cudaLaunchKernel", (b + 8) * U, (b + 9) * U, pid=pid, tid=tid)
            t.kernel(k, end * U, (b + all_reduce_to_us) * U, pid=pid, device=device, stream=stream, name=ALL_REDUCE)
            end = b + all_reduce_to_us
        k = t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid, tid=tid)
        t.kernel(k, end * U, (end + 20) * U, pid=pid, device=device, stream=stream)


def test_a_process_running_a_loop_per_gpu_on_threads_of_its_own_is_a_rank_per_gpu(tmp_path):
    # GIVEN one process (pid 10) whose threads 11 and 12 each run 4 cycles of their own, thread
    # 11's forward 300 us on GPU 0 and thread 12's 600 us on GPU 1 (a GPU per thread, no
    # collectives: in-process tensor parallelism, or a draft model's thread), and thread 13
    # that launched nothing
    t = FakeTrace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 1, 600)
    t.range("load_weights", 0, 5 * U, pid=10, tid=13)
    a = load([t.write(tmp_path / "run.sqlite")], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN it is a rank per GPU, each of its own thread's 4 cycles (before: one rank of 8 cycles
    # numbered together, its medians mixing the GPUs); each fwd reads its own thread's events,
    # 310 or 610 us (its kernel ran 10-310 or 10-610 us into the cycle, the sample's kernel
    # queued after it: the stream is busy at fwd's end, 100 us, until then), each cycle 900 us
    # (the sample's range ends at 900 us on an idle stream)
    assert [(r.rank, r.source.pids, r.cycles.num_rows) for r in a.ranks] == [(0, (10,), 4), (1, (10,), 4)]
    for r, fwd_us in zip(a.ranks, (310, 610)):
        fwd = r.phases.filter(pc.equal(r.phases["phase"], "fwd"))
        assert fwd["gpu_ns"].to_pylist() == [fwd_us * U] * 4 and set(fwd["tid"].to_pylist()) == {11 + r.rank}
        assert r.cycles["gpu_ns"].to_pylist() == [900 * U] * 4
    assert [g.device for g in a.ranks[0].gpus] == [0] and [g.device for g in a.ranks[1].gpus] == [1]
    # and a line says so; thread 13 (NVTX only) is the first rank's
    assert sum("process 10 runs a loop of its own on a thread per GPU: read as a rank per GPU (GPU 0: thread 11; GPU 1: thread 12;" in w
               for w in a.warnings) == 1
    assert "load_weights" in a.ranks[0].ranges["name"].to_pylist() and "load_weights" not in a.ranks[1].ranges["name"].to_pylist()


def test_a_rank_per_gpu_thread_is_named_by_its_loop_thread_in_the_report_json_and_export(tmp_path):
    # GIVEN process 10 running a loop on thread 11 (GPU 0) and one on thread 12 (GPU 1), read as
    # a rank per GPU, both ranks of pid 10
    import json

    from conftest import run_cli

    t = FakeTrace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 1, 600)
    trace = t.write(tmp_path / "run.sqlite")
    args = ("--no-cache", "--phase", "fwd", "--phase", "sample", "--skip-cycles", "0")
    # WHEN reported as text, as JSON (report and ranges), and exported then read back
    text = run_cli("report", *args, str(trace), env={"COLUMNS": "200"})
    doc = json.loads(run_cli("report", *args, "--json", str(trace)).stdout)
    ranges = json.loads(run_cli("ranges", "--no-cache", "--json", str(trace)).stdout)
    out = tmp_path / "exp"
    assert run_cli("export", *args, str(trace), "-o", str(out)).returncode == 0
    back = json.loads(run_cli("report", "--json", str(out)).stdout)
    # THEN each rank's header, JSON and manifest name its loop thread (before: both read "pid 10",
    # told apart only by their GPU)
    heads = [line for line in text.stdout.splitlines() if line.startswith("rank ") and "pid" in line]
    assert [h.split(str(trace))[1].split("nsys")[0].split() for h in heads] == [["pid", "10", "thread", "11", "GPU", "0"], ["pid", "10", "thread", "12", "GPU", "1"]]
    assert [(r["pids"], r["tid"]) for r in doc["ranks"]] == [([10], 11), ([10], 12)] == [(r["pids"], r["tid"]) for r in back["ranks"]]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["tid"] for r in manifest["ranks"]] == [11, 12]
    # and `ranges`, which takes no phases, tells the loops by the threads holding the cycle ranges
    # (before: it read phases from --phase's defaults, none of them here, and listed one rank)
    assert [(r["pids"], r["tid"]) for r in ranges["ranks"]] == [([10], 11), ([10], 12)]
    # and a rank of whole processes says none
    single = FakeTrace()
    thread_loop(single, 11, 0, 300)
    one = json.loads(run_cli("report", *args, "--json", str(single.write(tmp_path / "one.sqlite"))).stdout)
    assert [(r["pids"], r["tid"]) for r in one["ranks"]] == [([10], None)]


def test_a_rank_per_gpu_thread_matches_their_all_reduces_and_names_the_slower_gpu(tmp_path):
    # GIVEN the loops on GPUs 0 and 1 (forward 300 and 600 us), each forward followed by an
    # all-reduce between the two GPUs that ends at 650 us into the cycle on both
    t = FakeTrace()
    thread_loop(t, 11, 0, 300, all_reduce_to_us=650)
    thread_loop(t, 12, 1, 600, all_reduce_to_us=650)
    a = load([t.write(tmp_path / "run.sqlite")], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN the all-reduces are matched between the two ranks (before: one rank, its GPUs'
    # collectives with each other matched with nothing): GPU 0's waited 300 us in each of the 4
    # cycles (from 310 to 610 us), GPU 1 gated every cycle, in fwd; fwd reads 650 us on both (to
    # the all-reduce's end, the stream busy at fwd's end)
    assert [c.wait_ns for c in a.cross.comm] == [4 * 300 * U, 0]
    cp = a.cross.critical_path.to_pydict()
    assert cp["gating_rank"] == [1] * 4 and cp["how"] == ["collectives"] * 4 and cp["gating_phase"] == ["fwd"] * 4
    for r in a.ranks:
        assert r.phases.filter(pc.equal(r.phases["phase"], "fwd"))["gpu_ns"].to_pylist() == [650 * U] * 4


def test_loops_per_gpu_of_a_thread_that_waits_for_another_threads_event_stay_one_rank(tmp_path):
    # GIVEN the loops on GPUs 0 and 1 (forward 300 and 600 us), thread 12's stream (GPU 1)
    # made to wait at 20 us into each cycle for an event thread 11 recorded at 8 us on GPU 0
    t = FakeTrace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 1, 600)
    for c in range(4):
        b = c * 1000
        t.event_record(5, c + 1, (b + 8) * U, (b + 9) * U, tid=11)
        t.stream_wait(5, c + 1, (b + 20) * U, (b + 21) * U, tid=12)
        t.syncs[-1]["deviceId"] = 1
    a = load([t.write(tmp_path / "run.sqlite")], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN it stays one rank (a rank per GPU would lose that wait), and a line says why
    assert len(a.ranks) == 1 and a.ranks[0].cycles.num_rows == 8
    assert sum("process 10 runs a loop of its own on a thread per GPU, but a thread of one waits for an event another's recorded" in w
               for w in a.warnings) == 1


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_processes_with_a_loop_per_gpu_go_by_their_rank_marks_then_gpu(tmp_path, order):
    # GIVEN two files, each of one process (pids 10 and 20) with a loop per GPU thread (GPUs 0, 1
    # and 2, 3), marked tracerecon.rank=0 and =1, given in either order
    paths = []
    for i, (pid, devices) in enumerate(((10, (0, 1)), (20, (2, 3)))):
        t = FakeTrace()
        t.mark(f"tracerecon.rank={i}", 500, pid=pid)
        thread_loop(t, pid + 1, devices[0], 300, pid=pid)
        thread_loop(t, pid + 2, devices[1], 600, pid=pid)
        paths.append(str(t.write(tmp_path / f"node{i}.sqlite")))
    a = load([paths[i] for i in order], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN the marked rank 0's GPUs are ranks 0 and 1, rank 1's 2 and 3, by their marks
    assert [(r.rank, r.source.pids, [g.device for g in r.gpus], r.source.how) for r in a.ranks] == \
        [(0, (10,), [0], "nvtx mark"), (1, (10,), [1], "nvtx mark"), (2, (20,), [2], "nvtx mark"), (3, (20,), [3], "nvtx mark")]


def test_loops_of_two_threads_on_one_gpu_are_one_rank(tmp_path):
    # GIVEN the same two loops, both on GPU 0 (thread 12 on a stream of its own)
    t = FakeTrace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 0, 600, stream=8)
    a = load([t.write(tmp_path / "run.sqlite")], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN it is one rank of 8 cycles, each fwd read on its own thread's stream (310 or 610 us),
    # and nothing is said of GPUs
    (r,) = a.ranks
    fwd = r.phases.filter(pc.equal(r.phases["phase"], "fwd"))
    assert r.cycles.num_rows == 8 and sorted(fwd["gpu_ns"].to_pylist()) == [310 * U] * 4 + [610 * U] * 4
    assert not any("runs cycles of its own" in w or "a thread per GPU" in w for w in a.warnings)


@pytest.mark.parametrize("devices", [(0, 0), (0, 1)])
def test_a_process_tree_whose_communicating_ranks_all_say_device_0_is_said_to_be_unmapped(tmp_path, devices):
    # GIVEN one export (no TARGET_INFO_CUDA_DEVICE, as before nsys 2025.3) of two processes
    # (pids 10, 20) running all-reduces with each other, both on what they call CUDA device 0
    # (given their GPUs by CUDA_VISIBLE_DEVICES), or on devices 0 and 1
    t = FakeTrace()
    rank_cycles(t, 10, devices[0])
    rank_cycles(t, 20, devices[1])
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN each is a rank, and where both say device 0 a line says they ran on different GPUs
    # the export does not tell (before: both ranks headed GPU 0, nothing said)
    assert [r.source.pids for r in a.ranks] == [(10,), (20,)]
    said = [w for w in a.warnings if "processes 10, 20 ran collectives with each other, all on what they call CUDA device 0" in w]
    assert len(said) == (1 if devices == (0, 0) else 0)


def test_a_scheduler_beside_a_rank_in_its_file_leaves_out_its_phases_after_a_start_up(tmp_path):
    # GIVEN two files, one per rank (pids 10 and 20, device 0 each); rank 0's file also holds a
    # scheduler (pid 5, vLLM's EngineCore beside rank 0's worker) whose only GPU work is a warm-up
    # kernel at 0-300 us and which marks cycle and draft ranges of its own from 1000 us
    t = FakeTrace()
    start_up_scheduler(t, 5)
    rank_cycles(t, 10, 0, first_us=1000)
    u = FakeTrace()
    rank_cycles(u, 20, 0, first_us=1000)
    a = load([str(t.write(tmp_path / "rank0.sqlite")), str(u.write(tmp_path / "rank1.sqlite"))])
    # THEN rank 0 reads its worker's 5 cycles, as rank 1 does, the scheduler's ranges left out
    # with a warning (before: its cycle ranges and draft read as rank 0's, 10 cycles)
    assert [(r.rank, r.cycles.num_rows) for r in a.ranks] == [(0, 5), (1, 5)]
    assert sum("(pid 5, which launched GPU work only before the file's first phase or cycle range)" in w for w in a.warnings) == 1


def test_a_scheduler_whose_gpu_work_ran_at_start_up_is_not_said_to_share_the_gpu(tmp_path):
    # GIVEN one export mapping every process to the machine's GPUs: a scheduler (pid 5) whose
    # only GPU work is a warm-up kernel before the phases, on GPU 0, and workers 10 and 20 on
    # GPUs 0 and 1
    t = FakeTrace()
    start_up_scheduler(t, 5)
    rank_cycles(t, 10, 0, first_us=1000)
    rank_cycles(t, 20, 1, first_us=1000)
    p = t.write(tmp_path / "run.sqlite")
    con = sqlite3.connect(p)
    con.executescript("create table TARGET_INFO_CUDA_DEVICE (gpuId integer, cudaId integer, pid integer);"
                      "insert into TARGET_INFO_CUDA_DEVICE values (0, 0, 5), (0, 0, 10), (1, 1, 20);")
    con.commit()
    con.close()
    a = load([p])
    # THEN no line says two ranks shared GPU 0: the scheduler took no turns on it during the phases
    assert [r.source.pids for r in a.ranks] == [(10,), (20,), (5,)]
    assert not any("ran their work on one GPU" in w for w in a.warnings)


def test_loops_on_three_threads_two_of_them_on_one_gpu_are_said_to_be_numbered_together(tmp_path):
    # GIVEN one process whose threads 11, 12 and 13 each run 4 cycles of their own on GPUs 0, 1
    # and 1 (thread 13 on a stream of its own)
    t = FakeTrace()
    thread_loop(t, 11, 0, 300)
    thread_loop(t, 12, 1, 600)
    thread_loop(t, 13, 1, 400, stream=8)
    a = load([t.write(tmp_path / "run.sqlite")], PhaseConfig(phases=("fwd", "sample"), skip_cycles=0))
    # THEN a line names each thread's GPU in turn and the 12 cycles numbered together
    said = [w for w in a.warnings if "runs cycles of its own on each of threads 11, 12, 13, on GPU 0, 1, 1 in turn" in w]
    assert len(said) == 1 and "their 12 cycles (4, 4, 4 a thread)" in said[0]


def test_a_process_tree_whose_communicating_pair_says_device_0_beside_a_process_on_device_1_is_said_to_be_unmapped(tmp_path):
    # GIVEN one export without TARGET_INFO_CUDA_DEVICE: pids 10 and 20 running all-reduces with
    # each other, both on what they call device 0, and pid 30 running kernels (no collective) on
    # device 1
    t = FakeTrace()
    rank_cycles(t, 10, 0)
    rank_cycles(t, 20, 0)
    for c in range(5):
        launch(t, c * 1000 + 10, (c * 1000 + 20, c * 1000 + 80), 30, 1)
    a = load([t.write(tmp_path / "run.sqlite")])
    # THEN the line says 10 and 20 ran on different GPUs the export does not tell
    assert sum("processes 10, 20 ran collectives with each other, all on what they call CUDA device 0" in w for w in a.warnings) == 1


def _loops(ranges: list[tuple[int, str | None]], ops: list[tuple[int, int]]):
    """``ranks.loops_per_gpu`` of process 10 from (thread, phase label or None for a cycle range)
    and (launching thread, device) rows."""
    import numpy as np

    from tracerecon.analysis.ranks import loops_per_gpu

    tid = np.array([t for t, _ in ranges], np.int64)
    labels = [lab for _, lab in ranges]
    o_tid, o_dev = np.array([t for t, _ in ops], np.int64), np.array([d for _, d in ops], np.int64)
    return loops_per_gpu(np.full(len(tid), 10), tid, labels, np.array([lab is None for lab in labels]), np.full(len(o_tid), 10), o_tid, o_dev, 10)


def test_loops_per_gpu_only_where_each_gpu_has_a_loop_thread_of_its_own():
    # GIVEN threads 1 and 2 holding fwd and sample and their cycle ranges, launching on GPUs 0
    # and 1, and thread 3 (no range) launching copies on GPU 1
    two = [(1, None), (1, "fwd"), (1, "sample"), (2, None), (2, "fwd"), (2, "sample")]
    ops = [(1, 0), (1, 0), (2, 1), (3, 1)]
    # THEN a rank per GPU, thread 3 with GPU 1's
    assert _loops(two, ops) == ((0, (1,)), (1, (2, 3)))
    # but one rank where: the cycle ranges are a scheduler thread's (9) around the GPU threads'
    # phases; the threads hold different phases (a draft thread and a target thread in one
    # cycle); a thread holding phases launched nothing; or two loops share GPU 0
    assert _loops([(9, None), (1, "fwd"), (2, "fwd")], ops) == ()
    assert _loops([(1, "draft"), (2, "verify")], ops) == ()
    assert _loops([(1, "fwd"), (2, "fwd"), (4, "fwd")], ops) == ()
    assert _loops([(1, "fwd"), (2, "fwd")], [(1, 0), (2, 0)]) == ()
    # and one thread's loop alone is one rank; so are loops where a thread serves both GPUs (a
    # thread pool), or where the helper thread 3 queues work on both
    assert _loops([(1, None), (1, "fwd")], ops) == ()
    assert _loops(two, [(1, 0), (1, 1), (2, 1)]) == ()
    assert _loops(two, ops + [(3, 0)]) == ()
