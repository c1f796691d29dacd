"""Stand-in for SGLang (tracerecon tests): the module paths, classes, methods, NVTX switches and
process/thread shape of SGLang's speculative decoding (spec V2 worker), with simulated model
work. Mirrors python/sglang/... of sgl-project/sglang as read for tracerecon's presets."""

from sglang.version import __version__

__all__ = ["__version__"]
