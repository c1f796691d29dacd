"""Stand-in for vLLM (tracerecon tests): the module paths, classes, methods, NVTX scopes and
process shape (an API server process, an EngineCore process where the scheduler and, with one
GPU, the model runner live) of vLLM's speculative decoding with Model Runner V2 (default) and
V1 (VLLM_USE_V2_MODEL_RUNNER=0), with simulated model work."""

__version__ = "0.29.1"
