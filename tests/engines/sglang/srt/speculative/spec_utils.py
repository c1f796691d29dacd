"""Mirrors sglang/srt/speculative/spec_utils.py: ``spec_stage_span`` is ``profile_range(name)``,
a torch-profiler span only: SGLang emits no NVTX range for its speculative stages."""

from sglang.srt.utils.nvtx_utils import profile_range


def spec_stage_span(name: str):
    """Profiler span for a coarse speculative-decoding stage (``draft`` / ``draft_extend`` / ``verify``)."""
    return profile_range(name)
