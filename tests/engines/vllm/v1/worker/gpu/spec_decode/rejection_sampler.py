"""Mirrors vllm/v1/worker/gpu/spec_decode/rejection_sampler.py: RejectionSampler.__call__
returns num_sampled / num_rejected as device values."""

from dataclasses import dataclass


@dataclass
class SamplerOutput:
    sampled_token_ids: object
    num_sampled: object
    num_rejected: object = None


class RejectionSampler:
    def __init__(self, device, num_speculative_steps: int):
        self.device = device
        self.num_speculative_steps = num_speculative_steps

    def __call__(self, logits, input_batch, draft_logits=None):
        self.device.work(0.4)
        n = len(input_batch["req_ids"])
        if input_batch["is_prefill"]:
            num_sampled = self.device.add(self.device.randint(n, 0), 1)  # one token per request
        else:
            num_sampled = self.device.add(self.device.randint(n, self.num_speculative_steps), 1)
        sampled = self.device.full(n, self.num_speculative_steps + 1, 7)
        return SamplerOutput(sampled_token_ids=sampled, num_sampled=num_sampled)
