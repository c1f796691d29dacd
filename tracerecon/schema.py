"""Every Arrow schema tracerecon produces, declared once.

Timestamps are int64 nanoseconds on the trace's own timeline (the export's clock), never
rewritten. Names are plain strings. Columns a table does not know are null, not absent.

Raw tables (what ``tracerecon.nsys`` reads) carry no ``rank``; analysis tables and the
parquet export do.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.int64()  # every timestamp and duration: ns
# Repetitive strings (op kinds, kernel and API names) are dictionary-encoded: 420k kernels share
# a few hundred names, and parquet stores them as dictionaries anyway.
DSTR = pa.dictionary(pa.int32(), pa.string())

# --- raw, as read from one export -----------------------------------------------------------

NVTX_RANGES_RAW = pa.schema(
    [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("global_tid", pa.int64()),
        ("domain", pa.string()),  # "" for the default domain
        ("name", pa.string()),
        ("start_ns", TS),
        ("end_ns", TS),  # unclosed ranges: the trace end, with closed = false
        ("closed", pa.bool_()),
        ("style", pa.string()),  # "push_pop" | "start_end"
        ("payload", pa.int64()),  # integer payload, if any
    ]
)

NVTX_MARKS = pa.schema(
    [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("domain", pa.string()),
        ("name", pa.string()),
        ("ts_ns", TS),
        ("payload", pa.int64()),
    ]
)

API_CALLS = pa.schema(
    [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("global_pid", pa.int64()),
        ("start_ns", TS),
        ("end_ns", TS),
        ("correlation_id", pa.int64()),
        ("name", pa.dictionary(pa.int32(), pa.string())),  # e.g. cudaLaunchKernel_v7000
    ]
)

# kind: kernel | memcpy | memset | graph (a whole CUDA-graph launch, graph trace mode)
GPU_OPS_RAW = pa.schema(
    [
        ("pid", pa.int64()),
        ("global_pid", pa.int64()),
        ("kind", DSTR),
        ("start_ns", TS),
        ("end_ns", TS),
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("name", DSTR),
        ("graph_node_id", pa.int64()),
        ("bytes", pa.int64()),
        ("copy_kind", DSTR),  # memcpy only: HtoD, DtoH, DtoD, ...
        ("demangled_name", DSTR),  # kernels only: the full name, namespaces and all (name is nsys's short one)
    ]
)

SYNC_RECORDS = pa.schema(
    [
        ("pid", pa.int64()),
        ("start_ns", TS),
        ("end_ns", TS),
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("sync_type", pa.string()),
        ("event_id", pa.int64()),  # cudaStreamWaitEvent: the awaited event ...
        ("event_sync_id", pa.int64()),  # ... and which of its records (matches EVENT_RECORDS)
    ]
)

# cudaEventRecord calls: which stream an event was recorded on (CUPTI_ACTIVITY_KIND_CUDA_EVENT)
EVENT_RECORDS = pa.schema(
    [
        ("pid", pa.int64()),
        ("global_pid", pa.int64()),
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("event_id", pa.int64()),
        ("event_sync_id", pa.int64()),
    ]
)

PROCESSES = pa.schema([("pid", pa.int64()), ("global_pid", pa.int64()), ("name", pa.string())])

# TARGET_INFO_CUDA_STREAM: how each stream was created (ENUM_CUPTI_STREAM_TYPE: 1 a blocking stream
# made with the default flag, 2 non-blocking, 3 the legacy NULL stream).
CUDA_STREAMS = pa.schema([("pid", pa.int64()), ("stream_id", pa.int64()), ("flag", pa.int64())])
STREAM_BLOCKING, STREAM_NON_BLOCKING, STREAM_NULL = 1, 2, 3  # (its flag column's values)

# --- analysis, per rank ---------------------------------------------------------------------

RANGES = pa.schema(
    [
        ("rank", pa.int32()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("range_id", pa.int64()),  # index in this rank's ranges table
        ("parent_id", pa.int64()),  # enclosing push/pop range on the same thread, null at top
        ("domain", pa.string()),
        ("name", pa.string()),
        ("start_ns", TS),
        ("end_ns", TS),
        ("depth", pa.int32()),
        ("closed", pa.bool_()),
        ("style", pa.string()),
        ("payload", pa.int64()),
        ("gpu_start_ns", TS),  # first GPU op start (null: no GPU work)
        ("gpu_end_ns", TS),  # last GPU op end
        ("gpu_busy_ns", TS),  # union of the ops' intervals
        ("n_gpu_ops", pa.int64()),
        ("n_kernels", pa.int64()),
        ("n_streams", pa.int64()),
        ("n_devices", pa.int64()),
        # same_thread: nsys's projection (ops launched on the range's own thread, ns-exact);
        # cross_thread: plus work other threads launched while it was open (analysis.attribution)
        ("attribution", pa.string()),
    ]
)

GPU_OPS = pa.schema(
    [
        ("rank", pa.int32()),
        ("pid", pa.int64()),
        ("kind", DSTR),
        ("start_ns", TS),
        ("end_ns", TS),
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("name", DSTR),
        ("graph_node_id", pa.int64()),
        ("bytes", pa.int64()),
        ("launch_tid", pa.int64()),  # thread of the API call that launched it (null: unmatched)
        ("launch_start_ns", TS),
        ("launch_end_ns", TS),
        ("launch_api", DSTR),
        ("range_id", pa.int64()),  # innermost range whose CPU span holds the launch call
        ("phase_id", pa.int64()),  # phase instance (row of `phases`) that launched it
        ("demangled_name", DSTR),  # kernels only: the full name, namespaces and all (name is nsys's short one)
    ]
)

SYNCS = pa.schema(
    [
        ("rank", pa.int32()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("api", pa.string()),  # cudaStreamSynchronize, cudaMemcpy (DtoH), ...
        ("start_ns", TS),
        ("end_ns", TS),
        ("blocked_ns", TS),  # the CPU wait: API call duration
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("sync_type", pa.string()),  # from the CUPTI synchronization record, if any
        ("range_id", pa.int64()),  # innermost range holding the call
        ("phase_id", pa.int64()),  # phase instance holding the call
        ("waited_gpu_ns", TS),  # GPU work the call waited for that finished while the CPU waited
        ("waited_other_phase_ns", TS),  # ... of it, work launched by other phase instances
        ("waited_for_phase_id", pa.int64()),  # the phase instance whose work ended last in the wait
        ("waited_for_phase", pa.string()),
    ]
)

PHASES = pa.schema(
    [
        ("rank", pa.int32()),
        ("cycle", pa.int64()),
        ("phase", pa.string()),
        ("phase_id", pa.int64()),  # row number in this rank's phases, time order
        ("range_id", pa.int64()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("cpu_start_ns", TS),
        ("cpu_end_ns", TS),
        ("cpu_ns", TS),
        ("gpu_start_ns", TS),
        ("gpu_end_ns", TS),
        ("gpu_span_ns", TS),  # gpu_end - gpu_start
        ("gpu_busy_ns", TS),
        # What CUDA events recorded on the phase's stream at its boundaries would read
        # (analysis.boundaries): the GPU time of the phase is their difference.
        ("gpu_boundary_start_ns", TS),
        ("gpu_boundary_end_ns", TS),
        ("gpu_ns", TS),  # gpu_boundary_end_ns - gpu_boundary_start_ns
        ("queued_ns", TS),  # gpu_boundary_start_ns - cpu_start_ns: earlier work still held the stream
        # The stream its boundaries are read on: the one that got most of its GPU time (a phase
        # that launched nothing inherits the previous phase's)
        ("device_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("attribution", pa.string()),  # same_thread | cross_thread (analysis.attribution)
        ("n_gpu_ops", pa.int64()),
        ("n_kernels", pa.int64()),
        ("n_graph_launches", pa.int64()),
        ("overrun_ns", TS),  # gpu_end - cpu_end when positive: GPU work past the timer
        ("blocked_ns", TS),  # CPU time inside blocking calls
        ("absorbed_ns", TS),  # other phases' GPU work that finished during those waits
        ("error_ns", TS),  # cpu_ns - gpu_ns: positive = CPU over-reports
        ("comm_ns", TS),  # union of its communication kernels (NCCL, custom all-reduce)
        ("compute_ns", TS),  # union of its other GPU ops
        ("overlap_ns", TS),  # time both ran at once
        ("wait_ns", TS),  # time its collectives waited for other ranks (0 with one rank)
        ("verdict", pa.string()),  # which way the CPU timer errs: report_model.VERDICTS
        ("cause", pa.string()),  # why: report_model.CAUSES
    ]
)

CYCLES = pa.schema(
    [
        ("rank", pa.int32()),
        ("cycle", pa.int64()),
        ("name", pa.string()),
        ("cpu_start_ns", TS),
        ("cpu_end_ns", TS),
        ("cpu_ns", TS),
        ("gpu_start_ns", TS),
        ("gpu_end_ns", TS),
        ("gpu_boundary_start_ns", TS),  # its first phase's start boundary (where an event at its start reads)
        ("gpu_boundary_end_ns", TS),  # its phases' latest end boundary, or later for work queued between them
        ("gpu_ns", TS),  # the trusted number: boundary end - boundary start (cycles never overlap on one GPU)
        ("phases_cpu_ns", TS),  # sum of its phases' CPU times
        ("phases_gpu_ns", TS),  # sum of its phases' GPU-timeline shares
        ("n_phases", pa.int64()),
        ("adds_up", pa.bool_()),  # phases' GPU shares cover the cycle's GPU time (within tolerance)
        ("warmup", pa.bool_()),  # left out of the medians (--skip-cycles, or a leading outlier)
        ("incomplete", pa.bool_()),  # not whole in the trace (a range of it never closed, the capture ended first): left out of the medians
        ("accepted_tokens", pa.int64()),  # tokens the cycle accepted (tracerecon.instrument.accepted), null: not said
        ("empty", pa.bool_()),  # no GPU work in its phases nor launched in its span, among cycles that ran (a step with nothing to run): left out of the medians
    ]
)

# --- across ranks ----------------------------------------------------------------------------

COLLECTIVES = pa.schema(
    [
        ("collective", pa.int64()),
        ("name", pa.string()),
        ("rank", pa.int32()),
        ("start_ns", pa.int64()),  # the rank's own timeline
        ("end_ns", pa.int64()),
        ("aligned_start_ns", pa.int64()),  # + offset_ns
        ("aligned_end_ns", pa.int64()),
        ("phase_id", pa.int64()),
        ("cycle", pa.int64()),
        ("skew_ns", pa.int64()),  # last arrival - first arrival, over ranks
        ("last_rank", pa.int32()),
        ("wait_ns", pa.int64()),
        ("comm_ns", pa.int64()),
    ]
)
CRITICAL_PATH = pa.schema(
    [
        ("cycle", pa.int64()),
        ("gating_rank", pa.int32()),
        ("gating_phase", pa.string()),
        ("how", pa.string()),  # "collectives" (the rank others waited for) | "latest end"
        ("max_wait_ns", pa.int64()),  # the longest any rank waited for others in this cycle
        ("waits_ns", pa.string()),  # JSON {rank: ns}
    ]
)




def empty(schema: pa.Schema) -> pa.Table:
    """A zero-row table of ``schema``."""
    return schema.empty_table()
