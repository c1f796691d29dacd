"""Processes given their GPUs by CUDA_VISIBLE_DEVICES: a GPU op's ``deviceId`` is the CUDA device
number inside its process (every worker given one GPU says device 0), which the export's
TARGET_INFO_CUDA_DEVICE (nsys 2025.3+: gpuId, cudaId, pid) maps to the machine's GPU
(TARGET_INFO_GPU's ``id``), as third-party readers of these exports join them too. Read as the
machine's GPU id, two ranks on GPUs 2 and 3 both said GPU 0, and a node's file whose two
workers each saw device 0 was read as one rank of two processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from conftest import run_cli
from nsys_factory import FakeTrace
from tracerecon.api import load as analyze

U = 1000  # 1 us
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
HOST_GPUS = [(i, f"uuid-gpu{i}", f"0000:{0x18 + 0x20 * i:02x}:00.0") for i in range(4)]  # one 4-GPU host, id == cuDevice


def _host(path: Path, cuda_devices: list[tuple[int, int, int]], gpus: list[tuple[int, str, str]] = HOST_GPUS) -> Path:
    """Give the export the host's GPUs (TARGET_INFO_GPU: ``gpus``, the four of HOST_GPUS unless
    told) and the per-process CUDA device map nsys writes (TARGET_INFO_CUDA_DEVICE rows: gpuId,
    cudaId, pid; none: an export before nsys 2025.3); one session clock."""
    con = sqlite3.connect(path)
    con.executescript(
        "create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, cuDevice integer);"
        "create table TARGET_INFO_CUDA_DEVICE (gpuId integer, cudaId integer, pid integer);"
        "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values (5000000000000000000);")
    con.executemany("insert into TARGET_INFO_GPU values (?, 'NVIDIA H200', ?, ?, ?)", [(i, u, b, i) for i, u, b in gpus])
    con.executemany("insert into TARGET_INFO_CUDA_DEVICE values (?, ?, ?)", cuda_devices)
    con.commit()
    con.close()
    return path


def _worker(t: FakeTrace, pid: int, device: int = 0, tid: int | None = None, cycles: int = 3) -> None:
    """``cycles`` cycles of draft/verify on (pid, tid), each with a kernel and an all-reduce on
    CUDA device ``device`` (the process's own ordinal, as CUPTI records it)."""
    for c in range(cycles):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=pid, tid=tid)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid, tid=tid), (b + 120) * U, (b + 200) * U, pid=pid, device=device)
        t.kernel(t.call("cudaLaunchKernel", (b + 120) * U, (b + 122) * U, pid=pid, tid=tid), (b + 200) * U, (b + 300) * U, pid=pid, device=device,
                 name=AR)


def _uuids(rank) -> list[str | None]:
    return [g.uuid for g in rank.gpus]


def test_a_two_rank_files_each_with_cuda_visible_devices_of_its_own_gpu(tmp_path):
    # GIVEN a 4-GPU host, rank 0 launched with CUDA_VISIBLE_DEVICES=2 and rank 1 with =3, one
    # export each (nsys -o rank%q{RANK}): both processes' kernels say CUDA device 0, and each
    # export maps its process's device 0 to GPU 2 or GPU 3
    files = []
    for rank, (pid, gpu) in enumerate(((100, 2), (200, 3))):
        t = FakeTrace()
        _worker(t, pid)
        files.append(str(_host(t.write(tmp_path / f"rank{rank}.sqlite"), [(gpu, 0, pid)])))
    # WHEN analysed together
    a = analyze(files)
    # THEN rank 0 ran on GPU 2 and rank 1 on GPU 3 (tracerecon says GPU 0 for both: uuid-gpu0,
    # a GPU neither ran on, and the two ranks look as if they shared it)
    assert [_uuids(r) for r in a.ranks] == [["uuid-gpu2"], ["uuid-gpu3"]]


def test_a_node_file_whose_workers_each_see_their_gpu_as_device_0_is_one_rank_per_worker(tmp_path):
    # GIVEN two nodes, each profiled whole (`nsys profile torchrun --nproc-per-node 2`, the
    # launcher giving each worker CUDA_VISIBLE_DEVICES=<its GPU>): on each node worker pids
    # 100 and 101 ran on GPUs 0 and 1, and each recorded its kernels on its CUDA device 0
    files = []
    for node in range(2):
        t = FakeTrace()
        for pid in (100, 101):
            _worker(t, pid, tid=pid)
        files.append(str(_host(t.write(tmp_path / f"node{node}.sqlite"), [(0, 0, 100), (1, 0, 101)])))
    # WHEN analysed together
    a = analyze(files)
    # THEN four ranks, one per worker, each on its own GPU (tracerecon finds two ranks, each
    # file read as one rank of two processes, "both on device 0")
    assert len(a.ranks) == 4, [(r.rank, r.source.pids) for r in a.ranks]
    assert [_uuids(r) for r in a.ranks] == [["uuid-gpu0"], ["uuid-gpu1"]] * 2


def test_b_one_process_with_cuda_visible_devices_3_2_driving_both(tmp_path):
    # GIVEN one process (CUDA_VISIBLE_DEVICES=3,2) whose thread 11 drives its CUDA device 0
    # (GPU 3) and thread 12 its device 1 (GPU 2)
    t = FakeTrace()
    _worker(t, 10, device=0, tid=11)
    _worker(t, 10, device=1, tid=12)
    path = _host(t.write(tmp_path / "t.sqlite"), [(3, 0, 10), (2, 1, 10)])
    # WHEN analysed
    a = analyze([str(path)])
    # THEN a rank per GPU (a loop per thread, a GPU each), numbered by the machine's GPU: rank 0
    # thread 12's on GPU 2, rank 1 thread 11's on GPU 3 (not by the process's CUDA numbers)
    assert [(_uuids(r), {p["tid"] for p in r.phases.to_pylist()}) for r in a.ranks] == [(["uuid-gpu2"], {12}), (["uuid-gpu3"], {11})]
    # and the warning names the machine's GPUs
    assert any("process 10 runs a loop of its own on a thread per GPU: read as a rank per GPU (GPU 3: thread 11; GPU 2: thread 12;" in w
               for w in a.warnings), a.warnings


def test_b_one_thread_with_cuda_visible_devices_3_2_driving_both(tmp_path):
    # GIVEN one thread of a process (CUDA_VISIBLE_DEVICES=3,2) driving its CUDA device 0 (GPU 3)
    # and 1 (GPU 2), its cycles running an all-reduce on each
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=10)
        for device in (0, 1):
            t.kernel(t.call("cudaLaunchKernel", (b + 120 + device) * U, (b + 121 + device) * U, pid=10), (b + 200) * U, (b + 300) * U, pid=10,
                     device=device, name=AR)
    a = analyze([str(_host(t.write(tmp_path / "t.sqlite"), [(3, 0, 10), (2, 1, 10)]))])
    # THEN one rank on GPUs 3 and 2, each GPU's streams kept apart; tracerecon names GPUs 0, 1
    assert len(a.ranks) == 1
    assert sorted(_uuids(a.ranks[0])) == ["uuid-gpu2", "uuid-gpu3"]
    # and the warning names the machine's GPUs with the process's numbers beside them, as the
    # report's GPU lines do (it said "GPUs 0, 1", the process's numbers alone)
    assert any("process 10 ran collectives on GPUs 2 (CUDA 1), 3 (CUDA 0): one process" in w for w in a.warnings), a.warnings


def test_a_phase_on_two_renumbered_gpus_is_said_with_the_machine_gpus(tmp_path):
    # GIVEN one thread of a process with CUDA_VISIBLE_DEVICES=3,2 whose draft launches a kernel
    # on its CUDA device 0 (GPU 3), then one on its device 1 (GPU 2), and verify on device 1
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=10)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=10), (b + 20) * U, (b + 60) * U, pid=10, device=0)
        t.kernel(t.call("cudaLaunchKernel", (b + 20) * U, (b + 22) * U, pid=10), (b + 30) * U, (b + 90) * U, pid=10, device=1)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=10), (b + 120) * U, (b + 200) * U, pid=10, device=1)
    # WHEN analysed
    a = analyze([str(_host(t.write(tmp_path / "t.sqlite"), [(3, 0, 10), (2, 1, 10)]))])
    # THEN the note on draft names both GPUs and the one it is read on as the machine numbers
    # them, the process's number beside each
    said = [w for w in a.warnings if "'draft': in 3 of 3 instances it launched GPU work on GPUs 2 (CUDA 1), 3 (CUDA 0)" in w]
    assert len(said) == 1 and "(GPU 2 (CUDA 1) in 3;" in said[0], a.warnings


def test_without_renumbering_nothing_changes(tmp_path):
    # GIVEN two rank files on one host, no CUDA_VISIBLE_DEVICES: rank r used cudaSetDevice(r)
    files = []
    for rank, pid in enumerate((100, 200)):
        t = FakeTrace()
        _worker(t, pid, device=rank)
        files.append(str(_host(t.write(tmp_path / f"rank{rank}.sqlite"), [(g, g, pid) for g in range(4)])))
    # WHEN analysed THEN GPU 0 and GPU 1, as before
    a = analyze(files)
    assert [_uuids(r) for r in a.ranks] == [["uuid-gpu0"], ["uuid-gpu1"]]
    assert [[g.device for g in r.gpus] for r in a.ranks] == [[0], [1]]


def test_the_report_json_and_an_export_name_the_machine_gpu_and_the_process_cuda_device(tmp_path):
    # GIVEN rank 0 on GPU 2 (CUDA_VISIBLE_DEVICES=2: its CUDA device 0) and rank 1 on GPU 3
    files = []
    for rank, (pid, gpu) in enumerate(((100, 2), (200, 3))):
        t = FakeTrace()
        _worker(t, pid)
        files.append(str(_host(t.write(tmp_path / f"rank{rank}.sqlite"), [(gpu, 0, pid)])))
    # WHEN reported as text and JSON, and exported and read back
    text = run_cli("report", *files, "--no-cache")
    doc = json.loads(run_cli("report", *files, "--json", "--no-cache").stdout)
    run_cli("export", *files, "-o", str(tmp_path / "out"), "--no-cache")
    back = json.loads(run_cli("report", str(tmp_path / "out"), "--json").stdout)
    # THEN each rank's line says its machine GPU and, where the process numbered it otherwise,
    # that number; the JSON too (cuda_device only where it differs), and the export keeps it
    assert "GPU 2 (CUDA 0) NVIDIA H200" in text.stdout and "GPU 3 (CUDA 0) NVIDIA H200" in text.stdout
    gpus = [r["gpus"] for r in doc["ranks"]]
    assert [[(g["device"], g.get("cuda_device"), g["uuid"]) for g in r] for r in gpus] == [[(2, 0, "uuid-gpu2")], [(3, 0, "uuid-gpu3")]]
    assert [r["gpus"] for r in back["ranks"]] == gpus


def test_a_rank_of_two_processes_numbered_otherwise_reads_back_the_same_from_an_export(tmp_path):
    # GIVEN per-rank files, each rank a worker given one GPU (CUDA_VISIBLE_DEVICES=2 or 3: its
    # CUDA device 0) and a helper process that only copies, on its CUDA device 0, which is GPU 0
    files = []
    for rank, (pid, gpu) in enumerate(((100, 2), (200, 3))):
        t = FakeTrace()
        _worker(t, pid)
        for c in range(3):
            t.copy(t.call("cudaMemcpyAsync", (1000 * c + 130) * U, (1000 * c + 131) * U, pid=pid + 1), (1000 * c + 140) * U, (1000 * c + 150) * U, pid=pid + 1)
        files.append(str(_host(t.write(tmp_path / f"rank{rank}.sqlite"), [(gpu, 0, pid), (0, 0, pid + 1)])))
    # WHEN reported, and exported and the export reported
    live = json.loads(run_cli("report", *files, "--json", "--no-cache").stdout)
    assert run_cli("export", *files, "-o", str(tmp_path / "out"), "--no-cache").returncode == 0
    back = json.loads(run_cli("report", str(tmp_path / "out"), "--json").stdout)
    # THEN each rank ran on GPU 0 (the helper) and its own GPU (its CUDA device 0), and the
    # export says the same: each process's devices are mapped on their own
    gpus = [[(g["device"], g.get("cuda_device")) for g in r["gpus"]] for r in live["ranks"]]
    assert gpus == [[(0, None), (2, 0)], [(0, None), (3, 0)]]
    assert [r["gpus"] for r in back["ranks"]] == [r["gpus"] for r in live["ranks"]]


def test_a_process_the_export_does_not_map_where_it_maps_others_is_said(tmp_path):
    # GIVEN a node's file whose worker 100 was given GPU 2 (mapped: its CUDA device 0 is GPU 2)
    # and whose worker 101 has no TARGET_INFO_CUDA_DEVICE row
    t = FakeTrace()
    for pid in (100, 101):
        _worker(t, pid, tid=pid)
    path = _host(t.write(tmp_path / "node0.sqlite"), [(2, 0, 100)])
    # WHEN analysed
    a = analyze([str(path)])
    # THEN 101's device 0 is read as GPU 0, and a warning says so
    assert any(w.endswith("process 101 ran GPU work on CUDA devices that TARGET_INFO_CUDA_DEVICE does not map to the machine's GPUs, where it "
                          "maps other processes' devices to GPUs of other numbers (CUDA_VISIBLE_DEVICES): read as the machine's GPUs of the "
                          "same numbers") for w in a.warnings), a.warnings
    # and nothing is said where the export maps every process, or none is renumbered
    t2 = FakeTrace()
    for pid in (100, 101):
        _worker(t2, pid, tid=pid)
    full = analyze([str(_host(t2.write(tmp_path / "node1.sqlite"), [(2, 0, 100), (3, 0, 101)]))])
    assert not any("does not map" in w for w in full.warnings)


def test_a_timeline_names_each_stream_by_the_machine_gpu_and_the_process_cuda_device(tmp_path):
    # GIVEN rank 0 given GPU 2 (its CUDA device 0)
    t = FakeTrace()
    _worker(t, 100)
    path = _host(t.write(tmp_path / "rank0.sqlite"), [(2, 0, 100)])
    # WHEN exported as a Chrome trace-event timeline
    out = tmp_path / "t.json"
    assert run_cli("export", str(path), "--format", "chrome-json", "-o", str(out), "--no-cache").returncode == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    # THEN its stream's track says the GPU as the rank's header does, and the CUDA number
    assert "GPU 2 (CUDA 0) stream 7" in names, names


def _tp_worker(t: FakeTrace, pid: int, gemm_us: list[int], at_us: int = 0) -> None:
    """Cycles of draft/verify on thread ``pid``, 1 ms apart from ``at_us``: a GEMM launched 110
    us into the cycle, running from 120 us for ``gemm_us[c]``, then an all-reduce on CUDA device
    0 that ends at 300 us (with its pair's: both start it when their GEMMs end)."""
    for c, g in enumerate(gemm_us):
        b = at_us + 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=pid, tid=pid)
        t.kernel(t.call("cudaLaunchKernel", (b + 110) * U, (b + 112) * U, pid=pid, tid=pid), (b + 120) * U, (b + 120 + g) * U, pid=pid)
        t.kernel(t.call("cudaLaunchKernel", (b + 114) * U, (b + 116) * U, pid=pid, tid=pid), (b + 120 + g) * U, (b + 300) * U, pid=pid, name=AR)


def _node_file(path: Path, workers: dict[int, tuple[list[int], int]], devices: list = (), extra=None) -> str:
    """A node's export on the 4-GPU host: per worker pid, a ``_tp_worker`` of those GEMMs from
    that start (us); ``extra(t)`` adds other processes' work; ``devices``: its
    TARGET_INFO_CUDA_DEVICE rows (none: an export before nsys 2025.3)."""
    t = FakeTrace()
    for pid, (gemms, at_us) in workers.items():
        _tp_worker(t, pid, gemms, at_us=at_us)
    if extra is not None:
        extra(t)
    return str(_host(t.write(path), list(devices)))


def test_before_nsys_2025_3_a_node_file_of_workers_each_on_device_0_that_communicate_is_one_rank_per_worker(tmp_path):
    # GIVEN two data-parallel replicas on one 4-GPU machine, each a tensor-parallel pair traced
    # by its own nsys before 2025.3 (no TARGET_INFO_CUDA_DEVICE rows): every worker was given its
    # GPU by CUDA_VISIBLE_DEVICES, so all four say CUDA device 0. Replica 1 runs 0.5 ms after
    # replica 0. In cycle 1, worker 101's GEMM runs 150 us where 100's runs 80 (100 waits 70 us
    # in the all-reduce); in cycle 4, 102's runs 120 where 103's runs 80 (103 waits 40 us);
    # elsewhere both run 80 us (no wait)
    gemms = {100: [80] * 6, 101: [80, 150, 80, 80, 80, 80], 102: [80, 80, 80, 80, 120, 80], 103: [80] * 6}
    files = [_node_file(tmp_path / f"replica{replica}.sqlite", {pid: (gemms[pid], 500 * replica) for pid in pids})
             for replica, pids in enumerate(((100, 101), (102, 103)))]
    # WHEN analysed together
    a = analyze(files)
    # THEN four ranks, one per worker (each file was read as one rank of two processes), each
    # waiting within its own pair only, said with a warning per file
    assert [r.source.pids for r in a.ranks] == [(100,), (101,), (102,), (103,)]
    assert [a.cross.comm_of(r).wait_ns for r in range(4)] == [70 * U, 0, 0, 40 * U]
    said = [w for w in a.warnings if "ran collectives with each other, all on what they call CUDA device 0: read as a rank each (" in w]
    assert [w.split(":")[0] for w in said] == files, a.warnings


def test_a_rank_file_with_a_helper_that_ran_kernels_but_no_collective_stays_one_rank(tmp_path):
    # GIVEN per-rank files before nsys 2025.3: each rank's worker runs the all-reduces, and a
    # helper process beside it (a front end preprocessing on the GPU) runs a kernel of its own
    # on its device 0 too, but no collective
    def helper(pid: int):
        return lambda t: t.kernel(t.call("cudaLaunchKernel", 50 * U, 52 * U, pid=pid), 60 * U, 70 * U, pid=pid)

    files = [_node_file(tmp_path / f"rank{rank}.sqlite", {pid: ([80] * 6, 0)}, extra=helper(pid + 1)) for rank, pid in enumerate((100, 200))]
    # WHEN analysed together THEN each file is one rank of both its processes, as before
    a = analyze(files)
    assert [r.source.pids for r in a.ranks] == [(100, 101), (200, 201)]
    assert not any("ran collectives with each other" in w for w in a.warnings)


def test_a_helper_beside_a_files_tensor_parallel_pair_stays_with_its_first_worker(tmp_path):
    # GIVEN the two replicas' files above (no device map), each also holding a front end (pid
    # 150 / 250) that ran one kernel of its own on its device 0 and no collective
    def helper(pid: int):
        return lambda t: t.kernel(t.call("cudaLaunchKernel", 50 * U, 52 * U, pid=pid), 60 * U, 70 * U, pid=pid)

    files = [_node_file(tmp_path / f"replica{replica}.sqlite", {pid: ([80] * 6, 500 * replica) for pid in pids}, extra=helper(pids[0] + 50))
             for replica, pids in enumerate(((100, 101), (200, 201)))]
    # WHEN analysed together
    a = analyze(files)
    # THEN four ranks, one per worker, each front end with its file's first worker (it is no
    # rank of its own, and the second file's ranks are numbered 2 and 3), said so
    assert [r.source.pids for r in a.ranks] == [(100, 150), (101,), (200, 250), (201,)]
    assert any(w.startswith(f"{files[0]}: processes 100, 101 ran collectives with each other, all on what they call CUDA device 0: read as "
                            "a rank each, the file's other GPU process (150) with the first (") for w in a.warnings), a.warnings


def test_two_processes_of_separate_communicators_on_each_gpu_stay_one_rank_per_file(tmp_path):
    # GIVEN per-rank files before nsys 2025.3 (no device map): on each GPU a target worker and
    # a draft model's worker, each its own process on its device 0, each in its own
    # communicator with its counterpart on the other GPU: the targets' all-reduces end at
    # k ms + 300 us, the drafts' at k ms + 700 us
    files = [_node_file(tmp_path / f"rank{rank}.sqlite", {pid: ([80] * 6, at) for pid, at in zip(pids, (0, 400))})
             for rank, pids in enumerate(((100, 101), (110, 111)))]
    # WHEN analysed together
    a = analyze(files)
    # THEN one rank per file, numbered by its name, as before: the two processes of a file
    # never end a collective together, so they are no ranks of one communicator; a warning
    # says the trace cannot tell (they may as well be two GPUs' ranks of two communicators)
    assert [(r.rank, r.source.pids, r.source.how) for r in a.ranks] == [(0, (100, 101), "file name"), (1, (110, 111), "file name")]
    assert not any("ran collectives with each other" in w for w in a.warnings)
    said = [w for w in a.warnings if "ran communication kernels, all on what they call CUDA device 0, but their collectives do not tell" in w]
    assert [w.split(":")[0] for w in said] == files, a.warnings


def test_processes_the_export_maps_to_one_gpu_are_not_split_by_their_collectives(tmp_path):
    # GIVEN the replicas' files of the first test above, but from nsys 2025.3+: the export maps
    # both workers of each file to GPU 0 (a trainer and an inference worker sharing it, say)
    files = [_node_file(tmp_path / f"replica{replica}.sqlite", {pid: ([80] * 6, 500 * replica) for pid in pids}, devices=[(0, 0, p) for p in pids])
             for replica, pids in enumerate(((100, 101), (102, 103)))]
    # WHEN analysed together THEN each file is one rank, as the export's GPUs say
    a = analyze(files)
    assert [r.source.pids for r in a.ranks] == [(100, 101), (102, 103)]


def test_a_schedulers_own_cycle_ranges_in_a_split_file_are_no_ranks(tmp_path):
    # GIVEN the replicas' files (no device map), each also holding a scheduler process that did
    # no GPU work but marks cycle, draft and verify ranges of its own
    def scheduler(pid: int, at_us: int):
        def marks(t: FakeTrace) -> None:
            for c in range(6):
                b = at_us + 1000 * c + 20
                t.cycle(c, b * U, (b + 100) * U, (b + 400) * U, pid=pid, tid=pid)
        return marks

    files = [_node_file(tmp_path / f"replica{replica}.sqlite", {pid: ([80] * 6, 500 * replica) for pid in pids},
                        extra=scheduler(pids[0] - 50, 500 * replica))
             for replica, pids in enumerate(((100, 101), (200, 201)))]
    # WHEN analysed together
    a = analyze(files)
    # THEN four ranks of six cycles each: the schedulers' ranges are in none (as where a file is
    # one rank), said as left out
    assert [r.source.pids for r in a.ranks] == [(100,), (101,), (200,), (201,)]
    assert [r.cycles.num_rows for r in a.ranks] == [6] * 4
    assert sum("left out" in w and "no GPU work" in w for w in a.warnings) == 2, a.warnings


def test_a_node_file_of_two_tensor_parallel_pairs_is_a_rank_per_worker(tmp_path):
    # GIVEN two node files (no device map), each holding two tensor-parallel pairs whose
    # all-reduces end at other times (pairs 250 us apart), every worker on its CUDA device 0
    files = [_node_file(tmp_path / f"node{node}.sqlite", {pid: ([80] * 6, 250 * node + 500 * i) for i, pair in enumerate(pairs) for pid in pair})
             for node, pairs in enumerate((((100, 101), (102, 103)), ((200, 201), (202, 203))))]
    # WHEN analysed together THEN eight ranks, one per worker (each pair's ends tell it from the other)
    a = analyze(files)
    assert [r.source.pids for r in a.ranks] == [(p,) for p in (100, 101, 102, 103, 200, 201, 202, 203)]


def test_a_file_whose_communicating_processes_are_not_all_told_apart_stays_one_rank(tmp_path):
    # GIVEN a node file (no device map) holding a tensor-parallel pair (100, 101) and a worker
    # 102 whose all-reduces end half the time within the tolerance of the pair's and half the
    # time 200 us after (neither with them nor apart), and a node file of a clean pair
    def undecided(t: FakeTrace) -> None:
        for c in range(8):
            b = 1000 * c + (10 if c % 2 else 200)
            t.kernel(t.call("cudaLaunchKernel", (b + 114) * U, (b + 116) * U, pid=102, tid=102), (b + 200) * U, (b + 300) * U, pid=102, name=AR)

    files = [_node_file(tmp_path / "node0.sqlite", {pid: ([80] * 8, 0) for pid in (100, 101)}, extra=undecided),
             _node_file(tmp_path / "node1.sqlite", {pid: ([80] * 8, 500) for pid in (200, 201)})]
    # WHEN analysed together
    a = analyze(files)
    # THEN the first file stays one rank (half split, its rank 0 held 102 beside 100), said so,
    # and the second is a rank per worker
    assert [r.source.pids for r in a.ranks] == [(100, 101, 102), (200,), (201,)]
    assert any(w.startswith(f"{files[0]}: processes 100, 101, 102 ran communication kernels") for w in a.warnings), a.warnings


def test_ranges_names_each_split_ranks_file_and_process(tmp_path):
    # GIVEN the node file of one tensor-parallel pair (no device map), read as a rank per worker
    files = [_node_file(tmp_path / "replica0.sqlite", {100: ([80] * 6, 0), 101: ([80, 150, 80, 80, 80, 80], 0)}),
             _node_file(tmp_path / "replica1.sqlite", {102: ([80] * 6, 500), 103: ([80] * 6, 500)})]
    # WHEN its ranges are listed, as a table and as JSON
    text = run_cli("ranges", *files, env={**os.environ, "COLUMNS": "300"}).stdout
    doc = json.loads(run_cli("ranges", "--json", *files).stdout)
    # THEN each rank says its file and its process, as `report` does (the file alone names no rank)
    assert [(d["rank"], d["source"], d["pids"]) for d in doc["ranks"]] == [(0, files[0], [100]), (1, files[0], [101]), (2, files[1], [102]), (3, files[1], [103])]
    for rank, pid in enumerate((100, 101, 102, 103)):
        assert f"rank {rank}  {files[rank // 2]}  pid {pid}" in text


def test_two_servers_on_one_gpu_are_said_to_share_it(tmp_path):
    # GIVEN one export of a whole process tree: a target server (pid 100) and a draft server
    # (pid 200), both mapped to GPU 1 (each saw it as CUDA device 0), and a third worker (pid
    # 300) on GPU 2; and the same processes in an export that does not map their devices
    t = FakeTrace()
    for pid in (100, 200, 300):
        _worker(t, pid)
    mapped = _host(t.write(tmp_path / "run.sqlite"), [(1, 0, 100), (1, 0, 200), (2, 0, 300)])
    unmapped = t.write(tmp_path / "old.sqlite")
    # WHEN each is analysed
    a, b = analyze([str(mapped)]), analyze([str(unmapped)])
    # THEN the first says ranks 0 and 1 ran on one GPU (GPU 1), and no more (before: nothing
    # said); the second, whose device 0 may be any GPU, says nothing of sharing
    assert [r.source.pids for r in a.ranks] == [(100,), (200,), (300,)]
    said = [w for w in a.warnings if "ran their work on one GPU" in w]
    assert len(said) == 1 and said[0].startswith("ranks 0, 1 ran their work on one GPU (GPU 1, NVIDIA H200 0000:38:00.0)")
    assert not any("ran their work on one GPU" in w for w in b.warnings)


def test_ranks_of_separate_files_on_one_gpu_are_said_to_share_it(tmp_path):
    # GIVEN four one-process files of one host (one session clock, the same four GPUs): the
    # target server's and the draft server's both mapped to GPU 1 (each saw it as device 0), the
    # others' to GPUs 2 and 3; and two files of two hosts whose processes each ran on their
    # host's GPU 1 (other UUIDs)
    def one(name: str, pid: int, gpu: int, gpus=HOST_GPUS) -> str:
        t = FakeTrace()
        _worker(t, pid)
        return str(_host(t.write(tmp_path / name), [(gpu, 0, pid)], gpus))

    same = [one("rank0.sqlite", 100, 1), one("rank1.sqlite", 200, 1), one("rank2.sqlite", 300, 2), one("rank3.sqlite", 400, 3)]
    other_host = [(i, f"uuid-hostb-gpu{i}", b) for i, _, b in HOST_GPUS]
    hosts = [one("node0.sqlite", 100, 1), one("node1.sqlite", 200, 1, other_host)]
    # (and two hosts whose exports give their GPUs one placeholder UUID, on other PCI buses)
    placeholder = [(i, u, f"0000:{0x90 + i:02x}:00.0") for i, u, _ in HOST_GPUS]
    same_uuid = [one("host0.sqlite", 100, 1), one("host1.sqlite", 200, 1, placeholder)]
    # WHEN each set is analysed as one run
    a, b, c = analyze(same), analyze(hosts), analyze(same_uuid)
    # THEN ranks 0 and 1 are said to share GPU 1 (before: said only of ranks of one file), and
    # nothing is said of the two hosts' GPUs 1, which are two GPUs
    said = [w for w in a.warnings if "ran their work on one GPU" in w]
    assert len(said) == 1 and said[0].startswith("ranks 0, 1 ran their work on one GPU (GPU 1, NVIDIA H200 0000:38:00.0)")
    assert not any("ran their work on one GPU" in w for w in b.warnings + c.warnings)


def test_two_servers_on_a_one_gpu_machine_are_said_to_share_it_without_a_device_map(tmp_path):
    # GIVEN an export before nsys 2025.3 (no TARGET_INFO_CUDA_DEVICE) of a machine with one GPU,
    # holding a target server (pid 100) and a draft server (pid 200): both say device 0, which
    # on this machine can only be its GPU
    t = FakeTrace()
    for pid in (100, 200):
        _worker(t, pid)
    one_gpu = _host(t.write(tmp_path / "run.sqlite"), [], HOST_GPUS[:1])
    # WHEN analysed
    a = analyze([str(one_gpu)])
    # THEN the two ranks are said to share it (before: nothing, the device not being mapped)
    said = [w for w in a.warnings if "ran their work on one GPU" in w]
    assert [r.source.pids for r in a.ranks] == [(100,), (200,)]
    assert len(said) == 1 and said[0].startswith("ranks 0, 1 ran their work on one GPU (GPU 0, NVIDIA H200 0000:18:00.0)")


def test_workers_whose_all_to_alls_end_apart_by_their_shares_are_still_a_rank_each(tmp_path):
    # GIVEN one file of two worker processes (pids 10, 11), each calling its GPU device 0 (no
    # device map), each 1 ms an all-reduce (ending together at + 80) and an expert-parallel
    # dispatch (pid 10's ending at + 360, pid 11's, a hot expert's, at + 420); and a file of a
    # third worker (a fresh review's shape: the dispatches' ends, apart, had vetoed the all-reduces'
    # and the two workers read as one rank)
    a2a = "moeA2ADispatchKernel"

    def add(t, pid, a2a_end):
        for k in range(8):
            b = 1000 * (k + 1)
            t.range("verify", b * U, (b + 900) * U, pid=pid)
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 6) * U, pid=pid), (b + 10 + pid % 10) * U, (b + 80) * U, pid=pid, name=AR)
            t.kernel(t.call("cudaLaunchKernel", (b + 295) * U, (b + 296) * U, pid=pid), (b + 300) * U, (b + a2a_end) * U, pid=pid, name=a2a)

    t = FakeTrace()
    add(t, 10, 360)
    add(t, 11, 420)
    x = t.write(tmp_path / "x.sqlite")
    t = FakeTrace()
    add(t, 20, 360)
    y = t.write(tmp_path / "y.sqlite")
    # WHEN analysed together
    a = analyze([str(x), str(y)])
    # THEN the file's two workers are a rank each (their all-reduces end together), the third
    # worker a third
    assert [r.source.pids for r in a.ranks] == [(10,), (11,), (20,)]
