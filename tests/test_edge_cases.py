"""GIVEN/WHEN/THEN edge cases on small nsys-shaped exports, with hand-computed expectations."""

from __future__ import annotations

import pytest

from nsys_factory import FakeTrace, gpid
from tracerecon.analysis.config import PhaseConfig
from tracerecon.errors import BadTraceError
from tracerecon.api import load as analyze


def one_rank(trace: FakeTrace, tmp_path, config=None):
    path = trace.write(tmp_path / "t.sqlite")
    (rank,) = analyze([path], config).ranks
    return rank


def by_name(rank):
    return {r["name"]: r for r in rank.ranges.to_pylist()}


def test_range_with_no_gpu_work(tmp_path):
    # GIVEN a phase that launches nothing
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("draft", 100, 400)
    c = t.call("cudaLaunchKernel_v7000", 500, 510)
    t.range("verify", 450, 900)
    t.kernel(c, 600, 700)
    rank = one_rank(t, tmp_path)
    r = by_name(rank)
    # THEN it has no GPU start/end, zero busy time, and the verdict says so
    assert r["draft"]["gpu_start_ns"] is None and r["draft"]["gpu_busy_ns"] == 0 and r["draft"]["n_gpu_ops"] == 0
    assert [p["verdict"] for p in rank.phases.to_pylist()] == ["no_gpu_work", "agree"]
    # and the cycle's GPU span is verify's kernel
    assert (r["cycle 0"]["gpu_start_ns"], r["cycle 0"]["gpu_end_ns"]) == (600, 700)


def test_unclosed_range_runs_to_trace_end_and_is_flagged(tmp_path):
    t = FakeTrace()
    t.range("verify", 100, None)
    c = t.call("cudaLaunchKernel", 200, 210)
    t.kernel(c, 300, 5000)
    path = t.write(tmp_path / "t.sqlite")
    a = analyze([path])
    r = a.ranks[0].ranges.to_pylist()[0]
    assert r["closed"] is False and r["end_ns"] == 5000
    assert r["gpu_end_ns"] == 5000
    assert any("never closed" in w for w in a.warnings)


def test_nested_ranges_project_children_into_parents(tmp_path):
    t = FakeTrace()
    t.range("outer", 0, 1000)
    t.range("inner", 100, 300)
    t.range("leaf", 150, 250)
    c1 = t.call("cudaLaunchKernel", 160, 170)
    c2 = t.call("cudaLaunchKernel", 400, 410)
    t.kernel(c1, 500, 600)
    t.kernel(c2, 650, 800)
    r = by_name(one_rank(t, tmp_path))
    assert (r["outer"]["depth"], r["inner"]["depth"], r["leaf"]["depth"]) == (0, 1, 2)
    assert r["leaf"]["parent_id"] == r["inner"]["range_id"] and r["inner"]["parent_id"] == r["outer"]["range_id"]
    assert (r["leaf"]["gpu_start_ns"], r["leaf"]["gpu_end_ns"], r["leaf"]["n_gpu_ops"]) == (500, 600, 1)
    assert (r["inner"]["gpu_start_ns"], r["inner"]["gpu_end_ns"]) == (500, 600)
    assert (r["outer"]["gpu_start_ns"], r["outer"]["gpu_end_ns"], r["outer"]["n_gpu_ops"]) == (500, 800, 2)
    assert r["outer"]["gpu_busy_ns"] == 100 + 150


def test_op_launched_from_another_thread_is_not_the_ranges(tmp_path):
    t = FakeTrace()
    t.range("verify", 0, 1000, tid=11)
    c_other = t.call("cudaLaunchKernel", 100, 110, tid=12)
    c_own = t.call("cudaLaunchKernel", 200, 210, tid=11)
    t.kernel(c_other, 300, 400)
    t.kernel(c_own, 500, 550)
    r = by_name(one_rank(t, tmp_path))
    assert (r["verify"]["gpu_start_ns"], r["verify"]["gpu_end_ns"], r["verify"]["n_gpu_ops"]) == (500, 550, 1)


def test_call_straddling_the_range_end_is_not_contained(tmp_path):
    # nsys: the launching call must start AND end inside the range
    t = FakeTrace()
    t.range("verify", 0, 100)
    c = t.call("cudaLaunchKernel", 90, 120)
    t.kernel(c, 130, 140)
    r = by_name(one_rank(t, tmp_path))
    assert r["verify"]["n_gpu_ops"] == 0


def test_memcpy_memset_and_graph_launch_are_gpu_work(tmp_path):
    t = FakeTrace()
    t.range("draft", 0, 100000)
    c = t.call("cudaGraphLaunch_v10000", 10000, 20000)
    t.graph(c, 30000, 300000)
    t.range("verify", 200000, 400000)
    c2 = t.call("cudaMemcpyAsync_v3020", 210000, 220000)
    t.copy(c2, 310000, 330000, kind=1)
    c3 = t.call("cudaMemsetAsync_v3020", 230000, 240000)
    t.fill(c3, 330000, 350000)
    rank = one_rank(t, tmp_path)
    r = by_name(rank)
    assert (r["draft"]["gpu_start_ns"], r["draft"]["gpu_end_ns"], r["draft"]["n_kernels"]) == (30000, 300000, 0)
    assert (r["verify"]["gpu_start_ns"], r["verify"]["gpu_end_ns"], r["verify"]["n_gpu_ops"]) == (310000, 350000, 2)
    draft = rank.phases.to_pylist()[0]
    assert draft["n_graph_launches"] == 1 and draft["verdict"] == "under"  # GPU ran to 300, timer stopped at 100
    assert draft["overrun_ns"] == 200000


def test_node_mode_graph_kernels_share_one_correlation_id(tmp_path):
    t = FakeTrace(capture={"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"})
    t.range("draft", 0, 100)
    c = t.call("cudaGraphLaunch_v10000", 10, 20)
    for i in range(5):
        t.kernel(c, 100 + 50 * i, 140 + 50 * i, node=i + 1)
    rank = one_rank(t, tmp_path)
    r = by_name(rank)["draft"]
    assert (r["n_gpu_ops"], r["gpu_start_ns"], r["gpu_end_ns"], r["gpu_busy_ns"]) == (5, 100, 340, 200)
    assert rank.phases["n_graph_launches"].to_pylist() == [1]


def test_blocking_wait_absorbs_the_previous_phase(tmp_path):
    # GIVEN verify launches a long kernel and returns at once; draft_re_extend then synchronizes
    t = FakeTrace()
    t.range("cycle 0", 0, 2000000)
    t.range("verify", 0, 100000)
    k = t.call("cudaLaunchKernel", 10000, 20000)
    t.kernel(k, 30000, 1500000)
    t.range("draft_re_extend", 110000, 1700000)
    s = t.call("cudaStreamSynchronize_v3020", 120000, 1510000)
    t.sync_record(s, 125000, 1505000)
    k2 = t.call("cudaLaunchKernel", 1520000, 1530000)
    t.kernel(k2, 1540000, 1600000)
    rank = one_rank(t, tmp_path)
    verify, dre = rank.phases.to_pylist()
    # THEN verify under-reports (its GPU work ended at 1500000, its timer at 100000)
    assert verify["verdict"] == "under" and verify["overrun_ns"] == 1400000
    # and draft_re_extend over-reports: it waited 1390000 ns, 1380000 ns of it for verify's kernel
    assert dre["verdict"] == "over"
    assert dre["blocked_ns"] == 1390000 and dre["absorbed_ns"] == 1500000 - 120000
    (sync,) = rank.syncs.to_pylist()
    assert sync["waited_for_phase"] == "verify" and sync["api"] == "cudaStreamSynchronize"
    # GPU-timeline shares: verify [0, 1500000), draft_re_extend [1500000, 1700000): they add up to the cycle
    assert (verify["gpu_ns"], dre["gpu_ns"]) == (1500000, 200000)
    (cyc,) = rank.cycles.to_pylist()
    assert cyc["gpu_ns"] == 1700000 and cyc["adds_up"] and cyc["cpu_ns"] == 2000000


def test_synchronous_copy_counts_as_a_wait(tmp_path):
    # cudaMemcpyAsync into pageable memory returns only after its copy: a hidden sync
    t = FakeTrace()
    t.range("verify", 0, 100000)
    k = t.call("cudaLaunchKernel", 10000, 20000)
    t.kernel(k, 30000, 1000000)
    t.range("draft_re_extend", 110000, 1200000)
    c = t.call("cudaMemcpyAsync_v3020", 120000, 1100000)
    t.copy(c, 1000000, 1010000, kind=2)
    rank = one_rank(t, tmp_path)
    (sync,) = rank.syncs.to_pylist()
    assert sync["api"] == "cudaMemcpyAsync" and sync["sync_type"] == "synchronous copy"
    assert rank.phases["verdict"].to_pylist() == ["under", "over"]


def test_only_a_copy_to_or_from_the_host_that_ended_inside_its_call_counts_as_a_wait(tmp_path):
    # GIVEN draft (0..1000 us) on an idle GPU: a node-mode graph launch whose call runs 10..200 us,
    # its memset node 20..30 (ended 170 us before the call returned) and its kernel node
    # 40..600; a cudaMemsetAsync call 250..276 whose memset ran 260..261; a device-to-device
    # cudaMemcpyAsync call 300..329 whose copy ran 310..328; and a device-to-host cudaMemcpyAsync
    # call 700..900 into pageable memory, its copy 880..890 (it returned after its copy)
    U = 1000
    t = FakeTrace()
    t.range("draft", 0, 1000 * U)
    g = t.call("cudaGraphLaunch_v10000", 10 * U, 200 * U)
    t.memset.append({"start": 20 * U, "end": 30 * U, "deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": g, "globalPid": gpid(10),
                     "value": 0, "bytes": 64, "graphNodeId": 1})
    t.kernel(g, 40 * U, 600 * U, node=2)
    t.fill(t.call("cudaMemsetAsync_v3020", 250 * U, 276 * U), 260 * U, 261 * U)
    t.fill(t.call("cudaMemset_v3020", 610 * U, 660 * U), 650 * U, 655 * U)  # of device memory: asynchronous to the host
    t.copy(t.call("cudaMemcpyAsync_v3020", 300 * U, 329 * U), 310 * U, 328 * U, kind=8)
    t.copy(t.call("cudaMemcpyAsync_v3020", 700 * U, 900 * U), 880 * U, 890 * U, kind=2)
    # WHEN analysed
    rank = one_rank(t, tmp_path)
    # THEN only the device-to-host copy's call blocked the CPU (a newcomer's review: the graph
    # launch, the memsets (a cudaMemset of device memory returns before its memset is done, where
    # the GPU is busy; one of pinned memory would block, which the export's kinds read would tell)
    # and the device-to-device copy had each been a "synchronous copy", the graph's whole 190 us
    # call booked as a wait)
    assert [(s["api"], s["sync_type"], s["start_ns"] // U) for s in rank.syncs.to_pylist()] == [("cudaMemcpyAsync", "synchronous copy", 700)]


@pytest.mark.parametrize("api", ["cuMemcpy2D_v2", "cuMemcpyAtoH_v2", "cuMemcpy3D_v2", "cudaMemcpy2DFromArray_v3020", "cudaMemcpyFromArray_v3020"])
def test_a_synchronous_copy_of_arrays_peers_or_the_driver_counts_as_a_wait(tmp_path, api):
    # GIVEN verify launches a 970 us kernel and returns at once; sample reads its result with a
    # synchronous copy by another name than cudaMemcpy (2D or 3D, from an array, through
    # the driver): the call returns at 1100 us, after the kernel's end (1000) and its copy
    t = FakeTrace()
    t.range("verify", 0, 100000)
    k = t.call("cudaLaunchKernel", 10000, 20000)
    t.kernel(k, 30000, 1000000)
    t.range("sample", 110000, 1200000)
    c = t.call(api, 120000, 1100000)
    t.copy(c, 1000000, 1010000, kind=2)
    rank = one_rank(t, tmp_path, PhaseConfig(phases=("verify", "sample")))
    # THEN the copy is a CPU wait of 980 us for verify's kernel: verify's timer stopped 900 us
    # before its work ended (under), sample's holds that wait (over)
    (sync,) = rank.syncs.to_pylist()
    assert sync["api"] == api.split("_v")[0] and sync["waited_for_phase"] == "verify" and sync["blocked_ns"] == 980000
    assert rank.phases["verdict"].to_pylist() == ["under", "over"]


def test_a_synchronous_copy_to_the_host_by_any_name_is_no_read_back_on_its_threads_stream():
    # GIVEN four copies to the host: one asynchronous (cudaMemcpyAsync: it runs on the thread's
    # current stream, a read-back that tells that stream) and three synchronous ones by the
    # driver's and the array API's names (on the legacy default stream whatever stream is current)
    import pyarrow as pa

    from tracerecon.analysis.columns import read_backs, synchronous_copies

    apis = ["cudaMemcpyAsync_v3020", "cuMemcpy2D_v2", "cuMemcpyAtoH_v2", "cudaMemcpy2DFromArray_v3020"]
    ops = pa.table({"name": pa.array(["memcpy DtoH"] * 4).dictionary_encode(), "launch_api": pa.array(apis).dictionary_encode()})
    # WHEN classified THEN only the asynchronous one is a read-back; the three are synchronous copies
    assert read_backs(ops).tolist() == [True, False, False, False]
    assert synchronous_copies(ops).tolist() == [False, True, True, True]


def test_stream_wait_event_is_not_a_cpu_wait(tmp_path):
    t = FakeTrace()
    t.range("verify", 0, 100)
    w = t.call("cudaStreamWaitEvent_v3020", 10, 12)
    t.sync_record(w, 10, 12, sync_type=2)
    rank = one_rank(t, tmp_path)
    assert rank.syncs.num_rows == 0


def test_event_query_with_a_sync_record_is_not_a_cpu_wait(tmp_path):
    # GIVEN a poll loop: cudaEventQuery / cudaStreamQuery calls of 2 us, each with a CUPTI
    # synchronization record pointing at it (an event-sync record for the query), while a
    # kernel runs for 900 us, then a real cudaEventSynchronize
    t = FakeTrace()
    t.range("verify", 0, 1000)
    k = t.call("cudaLaunchKernel", 10, 20)
    t.kernel(k, 30, 930)
    for i, name in enumerate(("cudaEventQuery", "cudaStreamQuery_v3020", "cuEventQuery")):
        q = t.call(name, 100 + 100 * i, 102 + 100 * i)
        t.sync_record(q, 100 + 100 * i, 102 + 100 * i, sync_type=1)
    s = t.call("cudaEventSynchronize_v3020", 500, 931)
    t.sync_record(s, 500, 931, sync_type=1)
    # and a copy whose launching call is not in the trace, which makes the reader read every
    # API call (queries included) again
    t.copy(999, 940, 950)
    # WHEN tracerecon reads it THEN only the synchronize is a blocking call
    rank = one_rank(t, tmp_path)
    assert rank.syncs["api"].to_pylist() == ["cudaEventSynchronize"]


def test_one_range_in_two_domains_is_two_ranges(tmp_path):
    # GIVEN verify in the default domain and, with the very same times and thread, in domain 1
    # (a library marking its own domain beside the engine's); and a range written twice
    t = FakeTrace()
    t.range("verify", 0, 100)
    t.range("verify", 0, 100, domain=1)
    t.range("draft", 200, 300)
    t.range("draft", 200, 300)
    rank = one_rank(t, tmp_path)
    # THEN both verify ranges are kept, one in each domain; the draft written twice is one
    got = sorted(zip(rank.ranges["name"].to_pylist(), rank.ranges["domain"].to_pylist()))
    assert got == [("draft", ""), ("verify", ""), ("verify", "domain1")]


def test_cycles_from_consecutive_phases_without_cycle_ranges(tmp_path):
    t = FakeTrace()
    for i in range(3):
        base = i * 1000
        t.range("draft", base, base + 100)
        t.range("verify", base + 200, base + 500)
    rank = one_rank(t, tmp_path)
    assert rank.phases["cycle"].to_pylist() == [0, 0, 1, 1, 2, 2]
    assert rank.cycles.num_rows == 3


def test_custom_phase_names(tmp_path):
    t = FakeTrace()
    t.range("step 0", 0, 1000)
    t.range("prefill", 0, 400)
    t.range("decode", 500, 900)
    rank = one_rank(t, tmp_path, PhaseConfig(phases=("prefill", "decode"), cycle_prefix="step"))
    assert rank.phases["phase"].to_pylist() == ["prefill", "decode"]
    assert rank.cycles["name"].to_pylist() == ["step 0"]


def test_two_processes_sharing_correlation_ids(tmp_path):
    t = FakeTrace()
    for pid, (ks, ke) in ((10, (300, 400)), (20, (500, 600))):
        t.range("verify", 0, 200, pid=pid)
        c = t.call("cudaLaunchKernel", 50, 60, pid=pid, corr=7)
        t.kernel(c, ks, ke, pid=pid, device=0 if pid == 10 else 1)
    a = analyze([t.write(tmp_path / "t.sqlite")])
    got = [(r.rank, r.source.pids, r.ranges["gpu_start_ns"].to_pylist()) for r in a.ranks]
    assert got == [(0, (10,), [300]), (1, (20,), [500])]


def test_rank_mark_overrides_device_order(tmp_path):
    t = FakeTrace()
    for pid, rank in ((10, 1), (20, 0)):
        t.mark(f"tracerecon.rank={rank}", 0, pid=pid)
        t.range("verify", 0, 200, pid=pid)
        c = t.call("cudaLaunchKernel", 50, 60, pid=pid)
        t.kernel(c, 100, 150, pid=pid)
    a = analyze([t.write(tmp_path / "t.sqlite")])
    assert [(r.rank, r.source.pids, r.source.how) for r in a.ranks] == [(0, (20,), "nvtx mark"), (1, (10,), "nvtx mark")]


def test_launcher_process_without_gpu_work_is_not_a_rank(tmp_path):
    t = FakeTrace()
    t.range("launcher", 0, 10_000, pid=5)  # torchrun's parent: NVTX but no GPU work
    t.range("verify", 0, 200, pid=10)
    c = t.call("cudaLaunchKernel", 50, 60, pid=10)
    t.kernel(c, 100, 150, pid=10)
    a = analyze([t.write(tmp_path / "t.sqlite")])
    assert [r.source.pids for r in a.ranks] == [(10,)]


def test_cpu_only_trace_gives_cpu_times_with_a_warning(tmp_path):
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("draft", 0, 400)
    t.range("verify", 500, 900)
    a = analyze([t.write(tmp_path / "t.sqlite")])
    ph = a.ranks[0].phases.to_pylist()
    assert [p["cpu_ns"] for p in ph] == [400, 400] and all(p["gpu_ns"] is None for p in ph)
    assert any("no CUDA activity" in w for w in a.warnings)


def test_empty_trace_is_refused(tmp_path):
    t = FakeTrace()
    with pytest.raises(BadTraceError, match="NVTX|empty"):
        analyze([t.write(tmp_path / "t.sqlite")])


def test_trace_with_gpu_work_but_no_nvtx_names_the_file_and_the_likely_cause(tmp_path):
    # GIVEN GPU work and no NVTX ranges, from the nsys that cannot record nvtx 0.2.11+
    t = FakeTrace()
    t.meta["EXPORT_PRODUCT_VERSION"] = "2022.4.2.1"
    c = t.call("cudaLaunchKernel", 50, 60)
    t.kernel(c, 100, 150)
    # THEN the error names the file and the nvtx-package hint
    with pytest.raises(BadTraceError, match=r"old\.sqlite: no NVTX ranges.*0\.2\.11"):
        analyze([t.write(tmp_path / "old.sqlite")])
    # and from a newer nsys, where that is not the likely cause, no such hint
    t.meta["EXPORT_PRODUCT_VERSION"] = "2025.3.2.0"
    with pytest.raises(BadTraceError) as err:
        analyze([t.write(tmp_path / "new.sqlite")])
    assert "new.sqlite: no NVTX ranges" in str(err.value) and "0.2.11" not in str(err.value)


def test_input_is_not_modified(tmp_path):
    import hashlib

    t = FakeTrace()
    t.range("verify", 0, 200)
    path = t.write(tmp_path / "t.sqlite")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    analyze([path])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not (tmp_path / "t.sqlite-journal").exists() and not (tmp_path / "t.sqlite-wal").exists()


def test_a_null_string_reads_as_empty_text_listed_once_in_the_dictionary():
    import numpy as np
    import pyarrow as pa

    from tracerecon.nsys.sqlite_export import StringTable

    # GIVEN StringIds holding both "" and NULL, both used by kernel names
    strings = StringTable(pa.array(["", None, "gemm"]), np.array([1, 2, 3]))
    # WHEN resolved as a dictionary column
    names = strings.dictionary(np.array([1, 2, 3, 2]))
    # THEN the NULL reads as "", and "" is one dictionary value (group-bys count it once)
    assert names.to_pylist() == ["", "", "gemm", ""]
    assert names.dictionary.to_pylist() == ["", "gemm"]


def test_unknown_ids_read_as_empty_text_without_a_string_per_row():
    import numpy as np
    import pyarrow as pa

    from tracerecon.nsys.read_plan import NULL_SENTINEL
    from tracerecon.nsys.sqlite_export import StringTable

    # GIVEN StringIds 1 "a", 2 NULL, 3 "b", 4 "" and ids some of which it lacks
    strings = StringTable(pa.array(["a", None, "b", ""]), np.array([1, 2, 3, 4]))
    ids = np.array([3, 99, 1, 2, NULL_SENTINEL, 4, 3])
    # WHEN resolved as a dictionary THEN unknown ids and the NULL read as "", "" once in the
    # dictionary (the strings used, in table order), 2 unknown counted
    names, unknown = strings.dictionary_and_unknown(ids)
    assert (names.to_pylist(), names.dictionary.to_pylist(), unknown) == (["b", "", "a", "", "", "", "b"], ["a", "", "b"], 2)
    # WHEN resolved as a dictionary or null THEN the same ids are null instead (the NULL too), 3 of them
    names, missing = strings.dictionary_or_null(ids)
    assert (names.to_pylist(), missing) == (["b", None, "a", None, None, "", "b"], 3)
    assert names.dictionary.to_pylist() == ["a", "b", ""]


def test_a_kernel_whose_short_name_is_lost_is_shown_by_its_demangled_one(tmp_path):
    # GIVEN one phase launching an NCCL kernel whose short name id is in no StringIds row, its
    # demangled name still there; and a kernel with no demangled name (NULL)
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("verify", 0, 900)
    full = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
    t.kernel(t.call("cudaLaunchKernel", 10, 20), 100, 200, name=full, short="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    t.kernel(t.call("cudaLaunchKernel", 30, 40), 300, 400, name="void deep_ep::intranode::dispatch<(int)8>(int)", short="dispatch")
    t.kernels[0]["shortName"] = 999
    t.kernels[1]["demangledName"] = None
    a = analyze([t.write(tmp_path / "t.sqlite")])
    ops = a.ranks[0].gpu_ops
    # THEN the first is named by the function its demangled name names (as nsys's short name
    # would) and still communication (its 100 ns), the second keeps its short name, has no
    # demangled one, is compute, and a warning says so
    assert ops["name"].to_pylist() == ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "dispatch"]
    assert ops["demangled_name"].to_pylist() == [full, None]
    assert (a.ranks[0].phases["comm_ns"].to_pylist(), a.ranks[0].phases["compute_ns"].to_pylist()) == ([100], [100])
    assert not any("have no name" in w for w in a.warnings)
    assert any("1 kernel(s) have no demangled name" in w and "DeepEP" in w for w in a.warnings), a.warnings


def test_an_export_without_demangled_names_reads_as_short_names_alone(tmp_path):
    import sqlite3

    # GIVEN an export whose kernel table has no demangledName column (as another tool may write)
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("verify", 0, 900)
    t.kernel(t.call("cudaLaunchKernel", 10, 20), 100, 200, name="void ns::k<(int)1>(int)", short="k")
    path = t.write(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    con.execute("alter table CUPTI_ACTIVITY_KIND_KERNEL drop column demangledName")
    con.commit()
    con.close()
    a = analyze([path])
    # THEN the kernel keeps its short name, has no demangled one, and nothing is said
    ops = a.ranks[0].gpu_ops
    assert ops["name"].to_pylist() == ["k"] and ops["demangled_name"].to_pylist() == [None]
    assert not any("demangled" in w for w in a.warnings), a.warnings


def test_a_kernel_whose_name_id_the_string_table_lacks_reads_as_no_name_and_is_counted(tmp_path):
    # GIVEN one phase launching two kernels: "k" (known), and one whose name id (999) is in no
    # StringIds row; the string table's first string is the launch call's name
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("verify", 0, 900)
    t.kernel(t.call("cudaLaunchKernel", 10, 20), 100, 200, name="k")
    t.kernel(t.call("cudaLaunchKernel", 30, 40), 300, 400, name="lost")
    t.kernels[1]["shortName"] = t.kernels[1]["demangledName"] = 999
    del t.strings["lost"]
    path = t.write(tmp_path / "t.sqlite")
    # WHEN loaded
    a = analyze([path])
    # THEN the second kernel has no name (not the first string of the table), and one warning counts it
    assert sorted(a.ranks[0].gpu_ops["name"].cast("string").to_pylist()) == ["", "k"]
    assert f"{path}: 1 kernel(s) have no name (a name id the string table lacks); communication (NCCL) kernels among them are not counted as such" in a.warnings


def test_long_phase_names_that_differ_at_their_end_stay_told_apart_at_80_columns(tmp_path):
    U = 1000
    # GIVEN two phases whose names share their first 30 characters (SGLang's wrapped methods)
    from conftest import run_cli

    t = FakeTrace()
    names = ("EagleDraftWorker._draft_extend_for_decode", "EagleDraftWorker._draft_extend_for_prefill")
    for c in range(3):
        b = c * 1000
        t.range(f"cycle {c}", b * U, (b + 300) * U)
        t.range(names[0], b * U, (b + 100) * U)
        t.range(names[1], (b + 100) * U, (b + 300) * U)
    path = t.write(tmp_path / "t.sqlite")
    args = [a for n in names for a in ("--phase", n)]
    # WHEN reported and diffed into a pipe (80 columns)
    for cmd in (["report", str(path), *args], ["diff", str(path), str(path), *args]):
        out = run_cli(*cmd).stdout
        # THEN each name is there whole (folded onto a second line where it must), not cut to one
        # shared "EagleDraftWorker._draft_exten…"
        assert "_for_decode" in out and "_for_prefill" in out and "…" not in out, out
        assert max(len(line) for line in out.splitlines()) <= 80


def test_a_device_id_near_two_to_the_63_names_no_device_and_breaks_nothing(tmp_path):
    # GIVEN a corrupt export: one of a process's three kernels claims device 2**63 - 1 (the
    # mutation fuzzer's case: counting kernels per device over the ids' range asked numpy for an
    # array of that size and corrupted the heap)
    t = FakeTrace()
    t.range("cycle 0", 0, 1000)
    t.range("draft", 100, 400)
    for i, dev in enumerate([0, 2**63 - 1, 0]):
        t.kernel(t.call("cudaLaunchKernel_v7000", 110 + 10 * i, 115 + 10 * i), 500 + 100 * i, 550 + 100 * i, device=dev)
    path = t.write(tmp_path / "t.sqlite")
    # WHEN its processes are found and the trace analysed
    from tracerecon.analysis.ranks import gpu_processes
    from tracerecon.nsys.sqlite_export import read_export

    tables = read_export(path)
    # THEN the process is on device 0, where two of its three kernels ran
    assert gpu_processes(tables.gpu_ops, tables.nvtx_ranges) == [(10, 0, True)]
    # and the analysis gives a result
    assert one_rank(t, tmp_path).phases.num_rows == 1


def test_given_sync_records_built_elsewhere_with_an_all_null_sync_type_when_blocking_calls_are_found_then_the_type_is_none():
    # GIVEN a cudaStreamSynchronize call and its sync record from a table built by hand, whose
    # sync_type column pyarrow typed null (all values None), not string as the reader makes it
    import pyarrow as pa

    import tracerecon.schema as schema
    from tracerecon.analysis.syncs import find_blocking_calls

    api = pa.table({"pid": [1], "tid": [1], "global_pid": [1 << 24], "start_ns": [0], "end_ns": [5], "correlation_id": [3],
                    "name": pa.array(["cudaStreamSynchronize_v3020"]).dictionary_encode()}).cast(schema.API_CALLS)
    sync = pa.table({"pid": [1], "start_ns": [0], "end_ns": [5], "device_id": [0], "stream_id": [7], "correlation_id": [3],
                     "sync_type": [None], "event_id": pa.array([None], pa.int64()), "event_sync_id": pa.array([None], pa.int64())})
    # WHEN the blocking calls are found
    blocking = find_blocking_calls(api, sync)
    # THEN the call blocks (by its name), on the record's stream, of no known type
    assert blocking["api"].to_pylist() == ["cudaStreamSynchronize"]
    assert blocking["sync_type"].to_pylist() == [None] and blocking["sync_stream_id"].to_pylist() == [7]


@pytest.mark.parametrize("zero", [True, False])
def test_kernels_that_all_last_0_ns_are_said(tmp_path, zero):
    # GIVEN three cycles of draft and verify, one kernel each, all of them 0 ns long (start =
    # end: GPU times a broken export did not record; a fuzzing review's) or 185 us long
    t = FakeTrace()
    for c in range(3):
        b = 1000 * c
        t.cycle(c, b * 1000, (b + 300) * 1000, (b + 700) * 1000)
        t.kernel(t.call("cudaLaunchKernel", (b + 10) * 1000, (b + 12) * 1000), (b + 15) * 1000, (b + 15 if zero else b + 200) * 1000)
    # WHEN loaded THEN the 0-ns kernels are said (their busy time reads as none), others not
    a = analyze([str(t.write(tmp_path / "t.sqlite"))])
    said = [w for w in a.warnings if "all 3 kernels last 0 ns (start = end)" in w]
    assert len(said) == (1 if zero else 0), a.warnings
    assert [p["gpu_busy_ns"] for p in a.ranks[0].phases.to_pylist() if p["phase"] == "draft"] == [0 if zero else 185_000] * 3
