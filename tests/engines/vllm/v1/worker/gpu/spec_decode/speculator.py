"""Mirrors vllm/v1/worker/gpu/spec_decode/speculator.py."""


class DraftModelSpeculator:
    def __init__(self, device, num_speculative_steps: int):
        self.device = device
        self.num_speculative_steps = num_speculative_steps

    def propose(self, *args, **kwargs):
        raise NotImplementedError
