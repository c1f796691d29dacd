"""Communication kernels: which GPU ops are collectives, and per phase how much time is
communication, compute, and both at once."""

from __future__ import annotations

import functools
import re

import numpy as np
import pyarrow as pa

from tracerecon.analysis.intervals import segmented_union_lengths
from tracerecon.analysis.projection import int64s, string_mask
from tracerecon.kernel_names import ANONYMOUS, kernel_name_parts

# What makes a kernel communication, by the three parts of its name (``kernel_name_parts``).
#
# Its own function name (nsys's short name; the last part of a demangled name): NCCL's kernels
# across versions (ncclSymkDevKernel_* since 2.28 too); the custom all-reduce and all-gather
# kernels of vLLM / SGLang / TensorRT-LLM (cross_device_*, one-/two-shot, vLLM's MNNVL Lamport
# ones); FlashInfer's and TensorRT-LLM's fused all-reduce (allreduce_fusion_kernel_*,
# oneshotAllreduceFusionKernel, ...) and MoE all-to-all (moeA2ADispatchKernel /
# moeA2ACombineKernel: not moeA2APrepare*, which count locally); torch symmetric memory's
# multimem_*, one-/two-shot all-reduce and all-to-all-v; mscclpp's; vLLM's decode-context-parallel
# all-to-all (dispatch_output_lse_kernel, wait_lse_combine_kernel); TensorRT-LLM's MiniMax
# all-reduce of the RMS variance; NVSHMEM's on-stream barriers; NCCL EP's run-time compiled
# kernels (nccl_ep_jit_*_kernel) but its routing-map scans (nccl_ep_jit_ht_scan*, local);
# Hybrid-EP's NVLink all-gather of the routing map (ag_nvl_kernel); Triton-distributed's EP
# all-to-all (kernel_dispatch_token, kernel_combine_token, kernel_get_ag_splits_and_recv_offset:
# Triton names a kernel by its Python function); TensorRT-LLM's wide-EP prepare step
# (computeCountAndIndiceDevice writes counters into its peers' queues). Tested on the function
# name alone, so a namespace that says all-to-all (flashinfer::trtllm_alltoall, whose kernels
# count and gather locally) makes no kernel of it communication.
COMM_FUNCTION = re.compile(
    r"^(ncclKernel_|ncclDevKernel_|ncclSymDevKernel_)"
    r"|cross_device_(reduce|all_?gather)|custom_?all_?reduce|one_?shot_?all_?reduce|two_?shot_?all_?reduce|allreduce_(one|two)shot"
    r"|all_?reduce_?fusion|trtllm_?all_?reduce|multimem_|mscclpp|quick_?all_?reduce|all_?to_?all|^mnnvl_lamport_"
    r"|^moeA2A(Dispatch|Combine)Kernel|^dispatch_output_lse_kernel$|^wait_lse_combine_kernel$|^minimax_reduce_rms_kernel"
    r"|^(barrier|sync)(_all)?_on_stream_kernel"
    r"|^ag_nvl_kernel$|^kernel_(dispatch|combine)_token|^kernel_get_ag_splits_and_recv_offset|^computeCountAndIndiceDevice$",
    re.I,
)
# Its namespaces and function together (demangled names only): libraries whose kernels are known
# by namespace, with their local kernels left out. DeepEP (deep_ep::intranode / internode /
# internode_ll / elastic) and its fork UCCL-EP (uccl::...): every kernel but the layout ones
# (get_dispatch_layout counts tokens), the copy and reduce epilogues of DeepEP V2 (copies from the
# rank's own buffer) and the mask-buffer ones (a local mask); Mooncake EP's dispatch and combine;
# torch symmetric memory's signal-pad barriers and its NVSHMEM and NCCL device-API kernels
# (c10d::nvshmem_extension, c10d::nccl_extension); TensorRT-LLM's and FlashInfer's MNNVL
# all-reduce (kernels::mnnvl, trtllm_mnnvl_allreduce) and MiniMax all-reduce (minimax_ar);
# FlashInfer's decode-context-parallel puts and barriers (comm::dcp); Hybrid-EP's dispatch,
# combine and cross-GPU barrier (hybrid_ep::..., by name: NCCL EP's local scans share the
# namespace); NIXL EP's kernels (nixl_ep::..., a DeepEP port: the layout and mask-buffer ones
# left out, as for DeepEP).
COMM_QUALIFIED = re.compile(
    r"\b(deep_ep|uccl)::(intranode|internode|internode_ll|elastic)::(?!\w*(layout|epilogue|_mask_buffer))"
    r"|\bmooncake::(dispatch|combine)\b|\bc10d::symmetric_memory::(barrier|put_signal|wait_signal)_kernel\b"
    r"|\bc10d::(nvshmem|nccl)_extension::|\bkernels::mnnvl::|\btrtllm_mnnvl_allreduce::|\bminimax_ar::"
    r"|\bcomm::dcp::(PutPacked|Barrier)Kernel\b"
    r"|\bhybrid_ep::(dispatch_kernel|combine_kernel|device_sync_kernel)\b"
    r"|\bnixl_ep::(intranode|internode|ht|ep_kernels)::(?!\w*(layout|mask_buffer))",
)
# Its parameter types (demangled names only): a kernel handed an mscclpp device handle or an NCCL
# device communicator or window (NCCL's device API) communicates, whatever it is called (SGLang's
# sglang::allreduce_LL_1node takes mscclpp::MemoryChannelDeviceHandle*).
COMM_PARAMETERS = re.compile(r"\bmscclpp::|\bncclDevComm\b|\bncclWindow_vidmem\b|\bMoeCommWorkspace\b|\bnixl_ep::(\w+::)?gpu_nixl_ctx\b")
# pplx-kernels' all-to-all (dispatchKernel, combineKernel; scatterKernel in its first versions):
# names too generic alone, in no namespace of their own (global or anonymous scope), told apart
# by the std::byte buffers every one of them takes (demangled names only).
PPLX_FUNCTION = re.compile(r"^(dispatch|combine|scatter)Kernel$")
# Kernels named nccl...Kernel (NCCL's own and its EP library's), but NCCL EP's routing-map scans
# (``_is_nccl_ep_scan``).
NCCL_NAMED = re.compile(r"^nccl\w*Kernel", re.I)
_WORD = re.compile(r"\w*")


def _is_nccl_ep_scan(function: str) -> bool:
    r"""NCCL EP's local routing-map scans: ``nccl_ep_jit_<w>_scan[_<w>]_kernel`` in any case (<w>
    word characters). Tested piece by piece, not by the regex that says it (``\w*_scan(_\w+)?_kernel$``):
    its backtracking is quadratic in the name's length (a crafted 15,000-character name: 0.8 s)."""
    name = function.lower()
    if not name.startswith("nccl_ep_jit_") or not name.endswith("_kernel") or not _WORD.fullmatch(name):
        return False
    rest = name[len("nccl_ep_jit_"):]
    # `_scan` right before `_kernel`, or `_scan_`, at least one character, then `_kernel`.
    return rest.endswith("_scan_kernel") or "_scan_" in rest[: len(rest) - len("_kernel") - 1]


@functools.lru_cache(maxsize=16384)
def is_comm_kernel(name: str) -> bool:
    """Whether a kernel of this name (short or demangled) is communication: its function name,
    its namespaces (anonymous ones left out) or its parameter types say so (``COMM_FUNCTION``,
    ``COMM_QUALIFIED``, ``COMM_PARAMETERS``), or all three together (``PPLX_FUNCTION``).
    Cached: a rank's tables ask for the same few names several times (``comm_mask``), and
    demangled names run to kilobytes."""
    qualified, function, params = kernel_name_parts(name)
    named = qualified.replace(ANONYMOUS + "::", "")
    return bool(COMM_FUNCTION.search(function) or NCCL_NAMED.search(function) and not _is_nccl_ep_scan(function)
                or COMM_QUALIFIED.search(named) or COMM_PARAMETERS.search(params)
                or named == function and PPLX_FUNCTION.match(function) and re.search(r"\bstd::byte\b", params))


def is_point_to_point(name: str) -> bool:
    """A send or receive (``ncclDevKernel_SendRecv``): its two ranks' kernels do not end
    together, as a collective's do; they end apart by the transfer."""
    return bool(POINT_TO_POINT.search(name))


POINT_TO_POINT = re.compile(r"Send|Recv", re.I)
# DeepEP's low-latency all-to-all (and its forks' ports of it): launched with a receive hook
# (``return_recv_hook=True``, what SGLang's DeepEP dispatcher always asks for, two-batch overlap
# or not), each dispatch and combine is two launches of one kernel, a send phase that ends as
# soon as its own rank posted its writes and a receive phase that ends once every peer's send
# landed: like sends and receives, one rank's k-th does not end with another's (a rank's
# receive ends with its peer's send instead), so they keep their order.
LOW_LATENCY_EP = re.compile(r"\b(deep_ep|uccl|nixl_ep)::(internode_ll|ep_kernels)::(dispatch|combine)\b")


# An all-to-all's kernels (an expert-parallel dispatch or combine: DeepEP's, pplx's, NCCL EP's,
# TensorRT-LLM's moeA2A*, Triton-distributed's *_token; torch symmetric memory's all_to_all_vdev;
# vLLM's decode-context-parallel LSE exchange) end on each rank once its own share has landed:
# with uneven token counts (a hot expert's rank receives more) one all-to-all's kernels end tens
# or hundreds of us apart, as another communicator's would: ``cross_rank`` says both readings where
# their ends split ranks, and places clocks and fits drift by other collectives where any ran.
ALL_TO_ALL = re.compile(r"all_?to_?all|dispatch|combine|a2a|^scatterKernel$", re.I)


@functools.lru_cache(maxsize=16384)
def is_all_to_all(name: str) -> bool:
    """Whether a communication kernel of this name (short or demangled; DeepEP's short names are
    a bare ``dispatch``) is an all-to-all's (``ALL_TO_ALL``, in its namespaces or function name):
    its ranks' kernels may end apart by their shares."""
    return bool(ALL_TO_ALL.search(kernel_name_parts(name)[0].replace(ANONYMOUS + "::", "")))


@functools.lru_cache(maxsize=16384)
def is_low_latency_ep(name: str) -> bool:
    """A DeepEP low-latency dispatch or combine (``LOW_LATENCY_EP``), by its demangled name's
    namespaces (its short name is a bare ``dispatch``)."""
    return bool(LOW_LATENCY_EP.search(kernel_name_parts(name)[0].replace(ANONYMOUS + "::", "")))


def comm_mask(gpu_ops: pa.Table) -> np.ndarray:
    """True for kernels that are collectives, by their short name or their demangled one (nsys's
    short name drops the namespaces: DeepEP's ``void deep_ep::intranode::dispatch<...>(...)``
    is ``dispatch``). A table without ``demangled_name`` (ops from elsewhere than an export)
    goes by the short name alone."""
    if gpu_ops.num_rows == 0:
        return np.zeros(0, dtype=bool)
    named = string_mask(gpu_ops["name"], is_comm_kernel)
    if "demangled_name" in gpu_ops.column_names:
        named |= string_mask(gpu_ops["demangled_name"], is_comm_kernel)
    return string_mask(gpu_ops["kind"], lambda k: k == "kernel") & named


def phase_comm_split(gpu_ops: pa.Table, n_phases: int) -> dict[str, np.ndarray]:
    """Per phase instance (gpu_ops.phase_id): comm_ns, compute_ns (unions of each kind's op
    intervals) and overlap_ns (time both ran at once)."""
    zero = np.zeros(n_phases, dtype=np.int64)
    if gpu_ops.num_rows == 0 or n_phases == 0:
        return {"comm_ns": zero, "compute_ns": zero.copy(), "overlap_ns": zero.copy()}
    pid = int64s(gpu_ops["phase_id"], -1)
    keep = pid >= 0
    s, e = int64s(gpu_ops["start_ns"])[keep], int64s(gpu_ops["end_ns"])[keep]
    g = pid[keep]
    comm = comm_mask(gpu_ops)[keep]
    comm_ns, compute_ns, both = segmented_union_lengths(s, e, g, n_phases, (comm, ~comm, None))
    return {"comm_ns": comm_ns, "compute_ns": compute_ns, "overlap_ns": comm_ns + compute_ns - both}
