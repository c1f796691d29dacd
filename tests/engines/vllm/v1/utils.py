"""Mirrors vllm/v1/utils.py: ``record_function_or_nullcontext`` is ``nvtx.annotate(name)``
(default domain) when VLLM_NVTX_SCOPES_FOR_PROFILING=1, unless the torch scopes are asked for."""

import contextlib

import vllm.envs as envs

_PROFILER_FUNC = None


def record_function_or_nullcontext(name: str):
    global _PROFILER_FUNC
    if _PROFILER_FUNC is not None:
        return _PROFILER_FUNC(name)
    func = contextlib.nullcontext
    if envs.VLLM_CUSTOM_SCOPES_FOR_PROFILING:
        from torch.profiler import record_function

        func = record_function
    elif envs.VLLM_NVTX_SCOPES_FOR_PROFILING:
        import nvtx

        func = nvtx.annotate
    _PROFILER_FUNC = func
    return func(name)
