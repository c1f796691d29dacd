"""Plumbing shared by the engine stand-ins (``sglang``, ``vllm`` in tests/engines): simulated
device work, device-resident values, and the ground-truth acceptance log. Not part of any engine."""
