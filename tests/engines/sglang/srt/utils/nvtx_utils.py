"""Mirrors sglang/srt/utils/nvtx_utils.py: scheduler-stage spans are NVTX ranges (the ``nvtx``
package, default domain) only when SGLANG_ENABLE_NVTX_SCHEDULER is set; ``profile_range``
without ``nvtx_enabled`` is a torch-profiler span only."""

import os
import sys
from contextlib import ExitStack, contextmanager, nullcontext
from functools import partial, wraps


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


_SCHEDULER_NVTX = _flag("SGLANG_ENABLE_NVTX_SCHEDULER")
_OPERATIONS_NVTX = _flag("SGLANG_ENABLE_NVTX_OPERATIONS")

_nvtx_module = None
if _SCHEDULER_NVTX or _OPERATIONS_NVTX:
    try:
        import nvtx as _nvtx_module
    except ImportError:
        print("An SGLANG_ENABLE_NVTX_* flag is set, but the `nvtx` package is missing.", file=sys.stderr)

NVTX_AVAILABLE = _nvtx_module is not None
NVTX_SCHEDULER_ENABLED = _SCHEDULER_NVTX and NVTX_AVAILABLE
NVTX_OPERATIONS_ENABLED = _OPERATIONS_NVTX and NVTX_AVAILABLE

_NULL_CONTEXT = nullcontext()


def _torch_profiler_on() -> bool:
    torch = sys.modules.get("torch")  # never imported here just to ask
    return bool(torch is not None and torch.autograd._profiler_enabled())


@contextmanager
def _profile_range_impl(debug_name, color, record, nvtx_enabled):
    with ExitStack() as stack:
        if record:
            stack.enter_context(sys.modules["torch"].profiler.record_function(debug_name))
        if nvtx_enabled:
            stack.enter_context(_nvtx_module.annotate(debug_name, color=color))
        yield


def profile_range(debug_name, *, color=None, nvtx_enabled=False):
    record = _torch_profiler_on()
    if not record and not nvtx_enabled:
        return _NULL_CONTEXT
    return _profile_range_impl(debug_name, color, record, nvtx_enabled)


def profile_method(debug_name, *, color=None, nvtx_enabled=False):
    def decorator(func):
        @wraps(func)
        def wrapper(*args, **kwargs):
            with profile_range(debug_name, color=color, nvtx_enabled=nvtx_enabled):
                return func(*args, **kwargs)

        return wrapper

    return decorator


scheduler_nvtx_method = partial(profile_method, nvtx_enabled=NVTX_SCHEDULER_ENABLED)
operations_nvtx_range = partial(profile_range, nvtx_enabled=NVTX_OPERATIONS_ENABLED)
