"""Mirrors vllm/v1/sample/rejection_sampler.py (Model Runner V1's rejection sampler)."""


class RejectionSampler:
    def __init__(self, device, num_speculative_steps: int):
        self.device = device
        self.num_speculative_steps = num_speculative_steps

    def __call__(self, metadata, draft_probs, logits, sampling_metadata):
        self.device.work(0.4)
        n, prefill = metadata
        high = 0 if prefill else self.num_speculative_steps
        return self.device.add(self.device.randint(n, high), 1)  # tokens kept per request
