"""Mirrors vllm/envs.py (the variables the stand-in reads)."""

import os

VLLM_NVTX_SCOPES_FOR_PROFILING = bool(int(os.getenv("VLLM_NVTX_SCOPES_FOR_PROFILING", "0")))
VLLM_CUSTOM_SCOPES_FOR_PROFILING = bool(int(os.getenv("VLLM_CUSTOM_SCOPES_FOR_PROFILING", "0")))
VLLM_USE_V2_MODEL_RUNNER = bool(int(os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")))
