"""Communication shapes of multi-GPU inference beyond one NCCL all-reduce: the kernels that are
communication by name, pipeline sends and receives, and two tensor-parallel groups in one
report. Hand-built traces (FakeTrace); expected waits worked out by hand."""

from __future__ import annotations

import json
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nsys_factory import FakeTrace
from tracerecon.analysis.nccl import is_comm_kernel
from tracerecon.kernel_names import kernel_name_parts
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.present import straggler_lines

U = 1000
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


# Names as nsys writes them (the real H200 probe's: `void ns::f<(int)8>(long long)`, anonymous
# namespaces as <unnamed>), of kernels read in their libraries' sources (2026-12-02): the file
# each is defined in is named beside it.
COMMUNICATION = [
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "void deep_ep::internode_ll::combine<false, 7168>(void*)",
    "void deep_ep::intranode::notify_dispatch<8>(int const*)", "void deep_ep::internode::cached_notify<false, 8192>(int)",
    "void deep_ep::intranode::barrier<8>(int**, int)",
    "void deep_ep::internode_ll::clean_low_latency_buffer(int *, int, int *, int)",  # DeepEP csrc/kernels/internode_ll.cu: a barrier first
    "void deep_ep::elastic::dispatch_impl<(int)8>(void *)",  # DeepEP V2
    "void uccl::internode_ll::dispatch<(bool)1, (int)8>(void *)",  # uccl ep/src (a DeepEP fork)
    "void mooncake::dispatch<(int)8>(void *)",  # Mooncake mooncake-ep/src/mooncake_ep_kernel.cu
    "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(float)",
    "multimem_all_reduce_kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(void)",
    "ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_bf16(ncclSymkDevWorkArgs4K)",  # NCCL 2.28 src/device/symmetric/generate.py
    "void vllm::cross_device_all_gather<float, (int)8>(vllm::RankData *, int)",  # vLLM csrc/custom_all_gather_reduce_scatter.cuh
    "void vllm::mnnvl_lamport_reduce_scatter_kernel<float>(float *)",
    "void tensorrt_llm::_v1::kernels::moe_comm::moeA2ADispatchKernel<(int)8>(int)",  # TRT-LLM communicationKernels/moeAlltoAllKernels.cu
    "void c10d::symmetric_memory::barrier_kernel(unsigned int **, int, int, int, unsigned long)",  # torch symm_mem/CUDASymmetricMemory.cu
    "void c10d::nvshmem_extension::exchangeSplitAndOffset(long *, long *, long *, int)",  # torch symm_mem/nvshmem_extension.cu
    "void c10d::nccl_extension::lsa_put_kernel(ncclWindow_vidmem *, unsigned long, int)",  # torch symm_mem/nccl_extension.cu
    "void flashinfer::trtllm_mnnvl_allreduce::rmsNormLamport<__nv_bfloat16>(float *)",  # flashinfer comm/trtllm_mnnvl_allreduce.cuh
    "void tensorrt_llm::_v1::kernels::mnnvl::<unnamed>::mnnvlAllGatherSplitKernel<float>(float *)",
    "void flashinfer::comm::dcp::BarrierKernel(ncclDevComm)",  # flashinfer comm/dcp_lse_reduce.cuh
    "void sglang::allreduce_LL_1node<float>(mscclpp::MemoryChannelDeviceHandle *, float *)",  # SGLang's mscclpp all-reduce: by its handle
    "barrier_on_stream_kernel_threadgroup<(threadgroup_t)1>(int)",  # NVSHMEM's on-stream barrier
    "void deep_ep::(anonymous namespace)::intranode::dispatch<(int)8>(int)",  # an anonymous namespace between
    "void moeA2ADispatchKernel<decltype(a->b), (int)(8 >> 1)>(int)",  # brackets in parentheses
    # read 2026-12-03: pplx-kernels csrc/all_to_all/{internode,intranode}_{dispatch,combine}.cu (NVSHMEM puts, NVLink
    # stores into peers' buffers; global or anonymous scope, std::byte buffers)
    "void dispatchKernel<(unsigned int)10, (bool)1, (bool)1>(int *, unsigned long, std::byte *, unsigned int *, unsigned long *, std::byte *, std::byte *)",
    "void <unnamed>::combineKernel<float, __nv_bfloat16, (unsigned long)32, (bool)1, (bool)1>(__nv_bfloat16 *, std::byte **, std::byte **, unsigned int &)",
    "void scatterKernel<(unsigned int)10, (bool)1, (bool)1>(int *, std::byte *, std::byte *)",  # its first versions
    # Hybrid-EP (DeepEP csrc/hybrid_ep/backend/hybrid_ep_backend.cuh, extension/allgather.cu)
    "void hybrid_ep::dispatch_kernel<unsigned short, (int)12, (bool)1>(hybrid_ep::dispatch_kernel_param_t<unsigned short>)",
    "void hybrid_ep::combine_kernel<(int)2, (bool)0>(hybrid_ep::combine_kernel_param_t)",
    "void hybrid_ep::device_sync_kernel<(int)8>(unsigned int *, unsigned int *, unsigned int *)", "ag_nvl_kernel",
    # NIXL EP (ai-dynamo/nixl examples/device/ep/csrc/kernels: nixlPut into peers)
    "void nixl_ep::ep_kernels::dispatch<(bool)1, (bool)0, (int)7168>(void *, int, nixl_ep::gpu_nixl_ctx *)",
    "void nixl_ep::ht::notify_dispatch<(bool)0, (int)2>(const int *, nixl_ep::gpu_nixl_ctx)",
    # NCCL EP (NVIDIA/nccl contrib/nccl_ep, extern "C" run-time compiled kernels)
    "nccl_ep_jit_ht_dispatch_kernel", "nccl_ep_jit_ll_clean_kernel",
    # TensorRT-LLM's wide-EP prepare step (moePrepareKernels.cu: counters into the peers' queues)
    "void tensorrt_llm::kernels::moe_prepare::computeCountAndIndiceDevice<(int)8>(int *, tensorrt_llm::kernels::MoeCommWorkspace, int)",
    # Triton-distributed's EP all-to-all (python/triton_dist/kernels/nvidia/ep_a2a.py: NVSHMEM puts)
    "kernel_dispatch_token", "kernel_combine_token", "kernel_get_ag_splits_and_recv_offset",
]
LOCAL = [
    "void at::native::reduce_kernel<512, 1>(void)", "fused_moe_kernel", "softmax_warp_forward", "gemm_kernel",
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",
    "void deep_ep::elastic::dispatch_copy_epilogue_impl<(int)8>(void *)",  # DeepEP V2: a copy from the rank's own buffer
    "void deep_ep::internode_ll::clean_mask_buffer(int *)",  # a local mask
    # the namespace says all-to-all, the kernels count, sum and gather locally (flashinfer comm/trtllm_alltoall.cuh)
    "void flashinfer::trtllm_alltoall::computeSendRecvRankCountKernel<(int)8>(int *, int *)",
    "void flashinfer::trtllm_alltoall::moeLocalGatherDevice(int *)",
    "void tensorrt_llm::kernels::moe_alltoall::moeA2APrepareDispatchKernel(int *)",  # "performs no remote transfers"
    "<unnamed>::expert_gemm(long long)",
    "void ns::gemm<decltype(a->b)>(int *, all_to_all_t *)",  # all-to-all only in a parameter's type name
    "void at::native::vectorized_elementwise_kernel<(int)8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)",
    # the local kernels of the same EP libraries: routing-map scans, layouts, masks, permutes
    "nccl_ep_jit_ht_scan_kernel", "nccl_ep_jit_ht_scan_flat_kernel",
    "void hybrid_ep::scan<(int)512, (int)32>(const bool *, hybrid_ep::tmp_state_t *, int)",
    "void hybrid_ep::update_expected_value_kernel<(int)1>(unsigned long *, unsigned int *)",
    "void permute_processing_kernel<(int)256, (int)32>(bool *, int *, int)",
    "void nixl_ep::ep_kernels::update_mask_buffer<(int)32>(int *, int, bool)", "void nixl_ep::layout::get_dispatch_layout<(int)256>(const long *, int *)",
    "tensorrt_llm::kernels::moe_prepare::computeCumsumDevice(int *, int *, int, int)", "kernel_bincount", "sleep_kernel(unsigned long)",
    # names as generic as pplx's, in other programs: a namespace of their own, or no std::byte buffers
    "void dispatch_kernel<float, int>(const float *, const int *, float *, int)", "void dispatchKernel<int>(int *, int)",
    "combine_kernel(const float *, const float2 *, int, __nv_bfloat16 *)", "void myapp::dispatchKernel<(int)1>(std::byte *, int)",
    "dispatchKernel", "combineKernel",  # short names alone: pplx's cannot be told from others'
]


@pytest.mark.parametrize("name", COMMUNICATION)
def test_the_collectives_of_expert_parallel_and_fused_all_reduce_are_communication(name):
    assert is_comm_kernel(name)


@pytest.mark.parametrize("name", LOCAL)
def test_compute_kernels_are_not(name):
    assert not is_comm_kernel(name)


@pytest.mark.parametrize("name, parts", [
    ("void deep_ep::intranode::dispatch<(int)8, (int)768>(long long)", ("deep_ep::intranode::dispatch", "dispatch", "long long")),
    ("dispatch", ("dispatch", "dispatch", "")),
    ("<unnamed>::expert_gemm(long long)", ("{anonymous}::expert_gemm", "expert_gemm", "long long")),
    ("void ns::k<(int)1, ns::F<(bool)0>>(ns::A<(int)2> *, int)", ("ns::k", "k", "ns::A<(int)2> *, int")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     ("ncclDevKernel_SendRecv", "ncclDevKernel_SendRecv", "ncclDevKernelArgsStorage<(unsigned long)4096>")),
    ("void k<(int)1(int)", ("void k<(int)1(int)", "void k<(int)1(int)", "")),  # unbalanced: taken whole
    # brackets that are no template brackets: an operator's, inside parentheses, an arrow
    ("void ns::k<&operator<, (int)1>(int)", ("ns::k", "k", "int")),
    ("void ns::k<decltype(a->b)>(mscclpp::H *)", ("ns::k", "k", "mscclpp::H *")),
    ("void ns::k<(int)(8 >> 1)>(int)", ("ns::k", "k", "int")),
    ("void ns::(anonymous namespace)::k<(int)1>(int)", ("ns::{anonymous}::k", "k", "int")),
    ("bool ns::S::operator<(const ns::S &)", ("ns::S::operator<", "operator<", "const ns::S &")),
])
def test_a_kernel_name_splits_into_its_namespaces_function_and_parameters(name, parts):
    assert kernel_name_parts(name) == parts


def kernel(t: FakeTrace, pid: int, device: int, at_us: int, gpu_us: tuple[int, int], name: str = "k", short: str | None = None) -> None:
    t.kernel(t.call("cudaLaunchKernel", at_us * U, (at_us + 2) * U, pid=pid), gpu_us[0] * U, gpu_us[1] * U, pid=pid, device=device, name=name,
             short=short)


def test_expert_parallel_kernels_known_only_by_their_namespace_are_communication(tmp_path):
    # GIVEN two ranks (one report) whose MoE layer runs DeepEP's dispatch and combine, named as
    # nsys names them: the short name "dispatch" / "combine" (what is shown), the namespaces only
    # in the demangled name; per cycle (b = 1000c us) dispatch b+100..b+150 on rank 0 and
    # b+130..b+150 on rank 1 (rank 1 arrives 30 us late), a layout kernel of DeepEP's (local
    # counting, no communication) before it, combine b+300..b+340 on both
    t = FakeTrace()
    dispatch = ("void deep_ep::intranode::dispatch<(int)8, (int)768, (int)8192>(int4 *, float *, int *)", "dispatch")
    combine = ("void deep_ep::intranode::combine<__nv_bfloat16, (int)8, (int)768>(int4 *, float *)", "combine")
    layout = ("void deep_ep::layout::get_dispatch_layout<(int)256, (int)32, (int)8>(const long *, int *)", "get_dispatch_layout")
    for c in range(4):
        b = 1000 * c
        for r in range(2):
            t.cycle(c, b * U, (b + 500) * U, names=("verify",), pid=10 + r)
            kernel(t, 10 + r, r, b + 10, (b + 20, b + 100), *layout)
            kernel(t, 10 + r, r, b + 20, (b + 100 + 30 * r, b + 150), *dispatch)
            kernel(t, 10 + r, r, b + 30, (b + 150, b + 300))
            kernel(t, 10 + r, r, b + 40, (b + 300, b + 340), *combine)
    a = load([t.write(tmp_path / "deepep.sqlite")])
    # THEN dispatch and combine are communication (50 + 40 us a cycle on rank 0, 20 + 40 on
    # rank 1; the layout kernel is not), matched across the ranks: rank 0 waited 30 us a cycle
    # in dispatch, rank 1 gated every cycle; the ops keep the short name and say the full one
    assert [c.comm_ns for c in a.cross.comm] == [90 * U * 4, 60 * U * 4]
    assert [c.wait_ns for c in a.cross.comm] == [30 * U * 4, 0]
    assert a.cross.critical_path["gating_rank"].to_pylist() == [1] * 4
    ops = a.ranks[0].gpu_ops
    first = ops.filter(pc.equal(ops["name"].cast(pa.string()), "dispatch"))
    assert first.num_rows == 4 and set(first["demangled_name"].cast(pa.string()).to_pylist()) == {dispatch[0]}
    phases = a.ranks[0].phases
    assert phases["comm_ns"].to_pylist() == [90 * U] * 4


def test_a_pipeline_stage_that_receives_and_sends_is_matched_with_nothing(tmp_path):
    # GIVEN one report of a 3-stage pipeline, each cycle (b = 1000c us) one batch flowing
    # 0 -> 1 -> 2 through send/receive kernels of one name: stage 0 sends (b+100..b+110),
    # stage 1 receives (b+100..b+110) and sends (b+210..b+220), stage 2 receives (b+210..b+220)
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        for r in range(3):
            t.cycle(c, b * U, (b + 500) * U, names=("verify",), pid=10 + r)
        kernel(t, 10, 0, b + 10, (b + 20, b + 100))
        kernel(t, 10, 0, b + 20, (b + 100, b + 110), SEND_RECV)
        kernel(t, 11, 1, b + 20, (b + 100, b + 110), SEND_RECV)
        kernel(t, 11, 1, b + 30, (b + 110, b + 210))
        kernel(t, 11, 1, b + 40, (b + 210, b + 220), SEND_RECV)
        kernel(t, 12, 2, b + 20, (b + 210, b + 220), SEND_RECV)
    a = load([t.write(tmp_path / "pp3.sqlite")])
    # THEN no send is paired with the k-th kernel of stage 1 (a receive or a send alternately):
    # no wait is made up, and a warning says the pipeline's sends and receives are not matched
    assert [c.wait_ns for c in a.cross.comm] == [0, 0, 0]
    assert a.cross.collectives.num_rows == 0
    assert any("rank 1 holds 8" in w and "sends and receives not matched" in w for w in a.warnings)
    # and no cycle names a rank (stages 1 and 2 end together here: the next test has a last
    # stage ending last)
    assert a.cross.critical_path.num_rows == 0


def test_a_pipeline_stage_slow_in_one_cycle_is_not_hidden_behind_the_last_stage(tmp_path):
    # GIVEN one report of a 4-stage pipeline (a review's shape: vLLM / SGLang PP=4, pynccl
    # send/receive on the compute stream, each stage's CPU launching its cycle at once, 20 us
    # after the stage before): per cycle (b = 2000c us) stage s receives (from its launch until
    # stage s-1's send), runs its forward for 250 us (stage 2's 600 us in cycle 2), then sends
    # to stage s+1 (10 us); the middle stages receive and send under one name
    t = FakeTrace()
    for c in range(5):
        b = 2000 * c
        at = b + 30  # when the batch reaches the next stage
        for r in range(4):
            lo = b + 20 * r
            t.cycle(c, lo * U, (lo + 1900) * U, names=("execute_model",), pid=10 + r)
            start = lo + 10
            if r:
                kernel(t, 10 + r, r, lo + 1, (start, at), SEND_RECV)
                start = at
            fwd = 600 if (r, c) == (2, 2) else 250
            kernel(t, 10 + r, r, lo + 2, (start, start + fwd))
            at = start + fwd
            if r < 3:
                kernel(t, 10 + r, r, lo + 3, (at, at + 10), SEND_RECV)
                at += 10
    a = load([t.write(tmp_path / "pp4.sqlite")], PhaseConfig(phases=("execute_model",), skip_cycles=0))
    # THEN no cycle says rank 3 finished last with nobody waiting for it (before: every cycle,
    # also cycle 2, where stage 3 waited 350 us for stage 2): the waits are not matched, said
    assert a.cross.critical_path.num_rows == 0
    assert any("sends and receives not matched" in w for w in a.warnings)


def test_a_rank_late_at_every_all_to_all_is_late_anew_at_each(tmp_path):
    # GIVEN one report of 3 expert-parallel ranks (a review's shape), each cycle (b = 1000c us)
    # 4 all-to-alls (grouped sends and receives: one SendRecv kernel per rank, ending for every
    # rank 10 us after the last arrived), each after a compute kernel of 90 us, 120 on rank 2
    # (a slower GPU, or a hot expert: 30 us late at every one), 140 on rank 1 before the third
    # all-to-all of cycle 2 (one hiccup); every launch made early, so no GPU waits for its CPU
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        for r in range(3):
            t.cycle(c, b * U, (b + 900) * U, names=("forward",), pid=10 + r)
        at = b + 10
        for j in range(4):
            took = [90, 140 if (c, j) == (2, 2) else 90, 120]
            end = at + max(took) + 10
            for r in range(3):
                kernel(t, 10 + r, r, b + 2 * j + 1, (at, at + took[r]))
                kernel(t, 10 + r, r, b + 2 * j + 2, (at + took[r], end), SEND_RECV)
            at = end
    a = load([t.write(tmp_path / "ep3.sqlite")], PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN rank 2 gated every cycle: in cycle 2 it kept ranks 0 and 1 waiting 30 us each at three
    # all-to-alls (180 us), rank 1 kept the others 50 + 20 us at one (70 us) (before: rank 2's
    # lateness was taken as carried in from its all-to-all before, across cycles too, as a
    # pipeline's receive's is, and rank 1 was named in cycle 2)
    cp = a.cross.critical_path.to_pydict()
    assert cp["cycle"] == [0, 1, 2, 3] and cp["gating_rank"] == [2] * 4 and cp["how"] == ["collectives"] * 4
    # and the waits are the arrivals' differences: ranks 0 and 1 30 us at each, 120 a cycle; in
    # cycle 2 rank 0 50 at the third (140 in all), rank 1 90, rank 2 20
    assert [c.wait_ns for c in a.cross.comm] == [(120 * 3 + 140) * U, (120 * 3 + 90) * U, 20 * U]


def pairs_held_in_step(world: str) -> FakeTrace:
    """4 ranks, tensor-parallel pairs {0, 1} and {2, 3} (a review's shape: SGLang DP attention,
    vLLM DP + EP): each cycle (b = 1000c us) 3 layers of a 100-us kernel and the pair's 15-us
    all-reduce (ending 15 us after the pair's later arrival), then a 40-us lm_head and a world
    collective named ``world`` (ending 20 us after the last of the 4 arrived). Rank 3's layer 2
    is 60 us longer in cycle 1; in cycle 3 rank 2's layer 0 is 30 us longer and rank 0's lm_head
    50 us longer."""
    t = FakeTrace()
    extra = {(1, 3, 2): 60, (3, 2, 0): 30}
    for c in range(5):
        b = 1000 * c
        at = {r: b + 10 for r in range(4)}  # each rank's GPU free from
        for r in range(4):
            t.cycle(c, b * U, (b + 50) * U, (b + 900) * U, names=("forward", "logits"), pid=10 + r)
        for layer in range(3):
            arrive = {r: at[r] + 100 + extra.get((c, r, layer), 0) for r in range(4)}
            for r in range(4):
                pair_end = max(arrive[r - r % 2], arrive[r - r % 2 + 1]) + 15
                kernel(t, 10 + r, r, b + 1 + 2 * layer, (at[r], arrive[r]))
                kernel(t, 10 + r, r, b + 2 + 2 * layer, (arrive[r], pair_end), PAIR_ALL_REDUCE)
                at[r] = pair_end
        arrive = {r: at[r] + 40 + (50 if (c, r) == (3, 0) else 0) for r in range(4)}
        for r in range(4):
            kernel(t, 10 + r, r, b + 51, (at[r], arrive[r]))
            kernel(t, 10 + r, r, b + 52, (arrive[r], max(arrive.values()) + 20), world)
    return t


PAIR_ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(void)"


def test_tensor_parallel_pairs_held_in_step_by_a_world_all_gather_charge_no_wait_they_did_not_make(tmp_path):
    # GIVEN the pairs held in step by a world all-gather: their all-reduces end together but
    # where one pair ran late
    t = pairs_held_in_step("ncclDevKernel_AllGather_RING_LL(void)")
    a = load([t.write(tmp_path / "tp_dp.sqlite")], PhaseConfig(phases=("forward", "logits"), skip_cycles=0))
    # THEN the waits are each cycle's: cycle 1 rank 2 60 us at the all-reduce, ranks 0 and 1 60 at
    # the all-gather; cycle 3 rank 3 30 at the all-reduce, at the all-gather (rank 0 last, 50 us
    # late) rank 1 50, ranks 2 and 3 20. The pairs' all-reduces end together in most cycles and
    # are matched as one communicator, but a rank waits only for ranks that began before its
    # kernel ended: {0, 1}'s ended at 1325 us in cycle 1, rank 3's began at 1370 (before: the
    # pair {0, 1} charged 15 us at each all-reduce {2, 3} reached late: 75 and 45 us)
    cp = a.cross.critical_path.to_pydict()
    assert cp["cycle"] == [1, 3] and cp["gating_rank"] == [3, 0] and cp["gating_phase"] == ["forward", "logits"]
    assert [json.loads(w) for w in cp["waits_ns"]] == [{"0": 60 * U, "1": 60 * U, "2": 60 * U, "3": 0},
                                                       {"0": 0, "1": 50 * U, "2": 20 * U, "3": 50 * U}]
    assert [c.wait_ns for c in a.cross.comm] == [60 * U, 110 * U, 80 * U, 50 * U]
    # and so where the world collective is an all-reduce of the same name (SGLang's DP-attention
    # gather over the whole group beside the pairs' own): one name, two communicators on each rank
    same = load([pairs_held_in_step(PAIR_ALL_REDUCE).write(tmp_path / "same_name.sqlite")], PhaseConfig(phases=("forward", "logits"), skip_cycles=0))
    assert [c.wait_ns for c in same.cross.comm] == [60 * U, 110 * U, 80 * U, 50 * U]


def test_two_tensor_parallel_groups_in_one_report_are_matched_within_each(tmp_path):
    # GIVEN one report of pipeline stages 0 (ranks 0, 1) and 1 (ranks 2, 3), each a TP pair with
    # an all-reduce per cycle c (b = 1000c us); stage 0's ends at b+150 on both, rank 1 reaching
    # it 30 us late (b+130 against b+100); stage 1's runs 850 us later, ending at b+1000 (nearer
    # stage 0's next), rank 2 reaching it 10 us late (b+960 against b+950), 40 us in cycle 3
    t = FakeTrace()
    ar = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(void)"
    for c in range(6):
        b = 1000 * c
        for r in range(4):
            lo = b + (0 if r < 2 else 850)
            late = {1: 30, 2: 40 if c == 3 else 10}.get(r, 0)
            t.cycle(c, lo * U, (lo + 200) * U, names=("verify",), pid=10 + r)
            kernel(t, 10 + r, r, lo + 10, (lo + 20, lo + 100 + late))
            kernel(t, 10 + r, r, lo + 20, (lo + 100 + late, lo + 150), ar)
    a = load([t.write(tmp_path / "pptp.sqlite")])
    # THEN the ranks are two communicators, each all-reduce matched within its own: rank 0 waited
    # 30 us a cycle, rank 3 10 us (40 in cycle 3), ranks 1 and 2 never; 12 collectives of two
    # ranks each. Rank 1 gated each cycle (the first of its 30 us is the cycle's most new
    # lateness; after it, ties go to the first group), except cycle 3, where rank 2 came 30 us
    # later than it already was
    assert [c.wait_ns for c in a.cross.comm] == [30 * U * 6, 0, 0, (10 * 5 + 40) * U]
    coll = a.cross.collectives
    assert coll.num_rows == 24
    assert sorted(set(zip(coll["collective"].to_pylist(), coll["rank"].to_pylist()))) == \
        [(k, r) for k in range(12) for r in ((0, 1) if k < 6 else (2, 3))]
    assert a.cross.critical_path["gating_rank"].to_pylist() == [1, 1, 1, 2, 1, 1]
    assert [w.split(": the ranks run")[1] for w in a.warnings if "communicators" in w] == [
        " 2 communicators of these kernels (told apart by when their kernels end on one machine's clock): ranks 0, 1; "
        "ranks 2, 3; they are matched, waited for and gate cycles within each (a tensor-parallel group of each pipeline stage or "
        "data-parallel replica)"]
    assert not any("matched by end time" in w or "look like another communicator" in w for w in a.warnings)
    # ... and the straggler lines count the waits of the ranks each straggler met: rank 0's 30 us
    # in each of the five cycles rank 1 gated (not rank 3's 10 us, another communicator's), rank
    # 3's 40 us in the one rank 2 gated
    lines = " ".join(straggler_lines(a))
    assert "rank 1 gated 5 of 6 cycles" in lines and "the other ranks waited 0.150 ms" in lines
    assert "rank 2 gated 1 of 6 cycles" in lines and "the other ranks waited 0.040 ms" in lines


@pytest.mark.parametrize("cycles", [6, 2])
def test_an_all_to_all_with_one_extra_kernel_in_one_report_keeps_the_order(tmp_path, cycles):
    # GIVEN one report, two ranks, one SendRecv all-to-all per cycle (b = 1000c us) ending at
    # b+300 on both; rank 1 reaches it 40 us late (b+240 against b+200); rank 1 holds one more
    # SendRecv after the last cycle (7 against 6; or, in a short capture, 3 against 2)
    t = FakeTrace()
    for c in range(cycles):
        b = 1000 * c
        for r in range(2):
            t.cycle(c, b * U, (b + 500) * U, names=("verify",), pid=10 + r)
            kernel(t, 10 + r, r, b + 10, (b + 20, b + 200 + 40 * r))
            kernel(t, 10 + r, r, b + 20, (b + 200 + 40 * r, b + 300), SEND_RECV)
    kernel(t, 11, 1, cycles * 1000 + 10, (cycles * 1000 + 20, cycles * 1000 + 100), SEND_RECV)
    a = load([t.write(tmp_path / "a2a.sqlite")])
    # THEN the k-th is matched with the k-th (one capture), rank 0 waited 40 us in each cycle and
    # rank 1 gated every cycle; the count difference is said
    assert [c.wait_ns for c in a.cross.comm] == [40 * U * cycles, 0]
    assert a.cross.critical_path["gating_rank"].to_pylist() == [1] * cycles
    assert any(f"rank 1 holds {cycles + 1}" in w and "matched in order" in w for w in a.warnings)


def test_kernels_are_shown_by_nsys_short_name_and_keep_the_demangled_one():
    import sqlite3

    from conftest import H200

    # GIVEN a real H200 export (nsys 2025.3.1), whose PyTorch kernels live in namespaces
    path = H200 / "eagle_gpu_rank0.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    expected = con.execute("select s.value, d.value from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName "
                           "join StringIds d on d.id = k.demangledName order by k.start, k.rowid").fetchall()
    con.close()
    # WHEN loaded
    ops = load([str(path)]).ranks[0].gpu_ops
    kernels = ops.filter(pc.equal(ops["kind"].cast(pa.string()), "kernel")).sort_by([("start_ns", "ascending")])
    got = list(zip(kernels["name"].cast(pa.string()).to_pylist(), kernels["demangled_name"].cast(pa.string()).to_pylist()))
    # THEN every kernel has nsys's short name and its demangled name, as the export holds them
    # (e.g. vectorized_elementwise_kernel and void at::native::vectorized_elementwise_kernel<...>),
    # and nothing but kernels has a demangled name
    assert sorted(got) == sorted(expected) and any(short != full and "::" in full for short, full in expected)
    assert ops.filter(pc.not_equal(ops["kind"].cast(pa.string()), "kernel"))["demangled_name"].null_count == \
        ops.num_rows - kernels.num_rows


def test_a_rank_waits_only_for_ranks_that_began_before_its_kernel_ended():
    from tracerecon.analysis.cross_rank import rank_waits

    # GIVEN one matched collective of 3 ranks (aligned us): rank 0's kernel 0-10 (a broadcast's
    # root, or a pair's all-reduce matched with another pair's), rank 1's 0-60, rank 2's 50-60
    began = np.array([[0], [0], [50]]) * U
    ended = np.array([[10], [60], [60]]) * U
    part = np.ones((3, 1), bool)
    # WHEN the waits are taken, the last arrival at 50 us
    wait = rank_waits(began, ended, part, np.array([50 * U]))
    # THEN rank 0, whose kernel ended 40 us before rank 2's began, waited for nobody (before: its
    # whole 10 us), rank 1 waited 50 us for rank 2, rank 2 none
    assert wait[:, 0].tolist() == [0, 50 * U, 0]
    # and a rank that took no part waits nothing; one whose kernel ended within 10 us of the last
    # start still waited for it (clocks of one machine agree to a few us)
    part[2, 0] = False
    assert rank_waits(began, ended, part, np.array([0])).tolist() == [[0], [0], [0]]
    assert rank_waits(np.array([[0], [45]]) * U, np.array([[40], [60]]) * U, np.ones((2, 1), bool), np.array([45 * U]))[:, 0].tolist() == [40 * U, 0]


def test_the_began_before_it_ended_rule_is_kept_to_one_machine_and_to_collectives():
    from tracerecon.analysis.cross_rank import rank_waits

    # GIVEN one matched kernel pair (aligned us): rank 0's 0-10, rank 1's 50-60
    began, ended = np.array([[0], [50]]) * U, np.array([[10], [60]]) * U
    both, last = np.ones((2, 1), bool), np.array([50 * U])
    # WHEN the ranks are on one machine's clock and the kernels a collective's THEN rank 0, whose
    # kernel ended 40 us before rank 1's began, waited for nobody
    assert rank_waits(began, ended, both, last, np.array([False]), np.ones((2, 2), bool))[:, 0].tolist() == [0, 0]
    # WHEN they are on two machines' clocks (aligned by collectives, good to tens of us over a
    # drifting capture: a review's 10-ppm shape read a real 100-us wait as 0) THEN the wait runs
    # to the last arrival, at most the kernel: 10 us
    assert rank_waits(began, ended, both, last, np.array([False]), np.eye(2, dtype=bool))[:, 0].tolist() == [10 * U, 0]
    # WHEN the kernels are sends and receives or DeepEP's low-latency halves (in order: a receive
    # launched after other work ends once the peer's send landed, before the peer's receive
    # began) THEN likewise
    assert rank_waits(began, ended, both, last, np.array([True]), np.ones((2, 2), bool))[:, 0].tolist() == [10 * U, 0]


def test_a_low_latency_receive_launched_after_other_work_keeps_its_wait(tmp_path):
    # GIVEN one report of 2 ranks (a review's shape: SGLang two-batch overlap, vLLM DBO decode),
    # each cycle (b = 2000c us): 100 us of compute, DeepEP's low-latency dispatch send half
    # (5 us), 200 us of the other micro-batch's work, then the receive half (the same kernel),
    # ending 2 us after the peer's send landed; rank 1's compute 300 us longer in cycle 2
    ll = "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, void*, int*, long*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, bool, int)"
    t = FakeTrace()
    for c in range(4):
        b = 2000 * c
        send = {r: b + 110 + (300 if (c, r) == (2, 1) else 0) for r in range(2)}
        for r in range(2):
            t.cycle(c, b * U, (b + 1500) * U, names=("decode",), pid=10 + r)
            kernel(t, 10 + r, r, b + 1, (b + 10, send[r]))
            kernel(t, 10 + r, r, b + 2, (send[r], send[r] + 5), ll, short="dispatch")
            kernel(t, 10 + r, r, b + 3, (send[r] + 5, send[r] + 205))
            kernel(t, 10 + r, r, b + 4, (send[r] + 205, max(send[r] + 205, send[1 - r] + 5) + 2), ll, short="dispatch")
    a = load([t.write(tmp_path / "ll.sqlite")], PhaseConfig(phases=("decode",), skip_cycles=0))
    # THEN rank 0's waits in cycle 2 are those of sends and receives matched in order: 5 us at
    # its send (to rank 1's send at 410 us, at most its 5 us) and 102 at its receive (315 to
    # rank 1's receive at 615, at most its 102 us; events read 100: its receive spun until rank
    # 1's send landed at 415); rank 1 gated it (before the rule was kept to collectives: 0, the
    # receive having ended before rank 1's began)
    cp = a.cross.critical_path.to_pydict()
    assert cp["cycle"] == [2] and cp["gating_rank"] == [1] and json.loads(cp["waits_ns"][0]) == {"0": 107 * U, "1": 0}
