"""Communication kernels: which GPU ops are collectives, and per phase how much time is
communication, compute, and both at once."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from tracerecon.analysis.intervals import segmented_union_length
from tracerecon.analysis.projection import int64s, string_mask

# NCCL's kernels across versions; the custom all-reduce kernels of vLLM / SGLang / TensorRT-LLM;
# FlashInfer's fused all-reduce (trtllm_allreduce_fusion::allreduce_fusion_kernel_*); torch
# symmetric memory's multimem kernels (vLLM's all-reduce for TP 4-8 on Hopper); mscclpp's;
# the expert-parallel all-to-all of DeepEP (deep_ep::intranode / internode / internode_ll
# dispatch, combine, notify_dispatch, cached_notify, barrier: every deep_ep kernel but its
# layout ones, get_dispatch_layout, which count tokens locally).
COMM_KERNEL = re.compile(
    r"^(ncclKernel_|ncclDevKernel_|ncclSymDevKernel_|nccl\w*Kernel)"
    r"|cross_device_reduce|custom_?all_?reduce|one_?shot_?all_?reduce|two_?shot_?all_?reduce|allreduce_(one|two)shot"
    r"|all_?reduce_?fusion|trtllm_?all_?reduce|multimem_|mscclpp|quick_?all_?reduce|all_?to_?all"
    r"|deep_ep::(?!(\w+::)*layout::)",
    re.I,
)


def is_comm_kernel(name: str) -> bool:
    return bool(COMM_KERNEL.search(name))


def is_point_to_point(name: str) -> bool:
    """A send or receive (``ncclDevKernel_SendRecv``): its two ranks' kernels do not end
    together, as a collective's do; they end apart by the transfer."""
    return bool(POINT_TO_POINT.search(name))


POINT_TO_POINT = re.compile(r"Send|Recv", re.I)


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
    comm_ns = segmented_union_length(s[comm], e[comm], g[comm], n_phases)
    compute_ns = segmented_union_length(s[~comm], e[~comm], g[~comm], n_phases)
    both = segmented_union_length(s, e, g, n_phases)
    return {"comm_ns": comm_ns, "compute_ns": compute_ns, "overlap_ns": comm_ns + compute_ns - both}
