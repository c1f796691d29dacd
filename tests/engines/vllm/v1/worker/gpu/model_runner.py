"""Mirrors vllm/v1/worker/gpu/model_runner.py (Model Runner V2, no NVTX scopes of its own):
execute_model runs the target forward and returns None; sample_tokens samples (rejection
sampler), starts the output copy (AsyncOutput), then drafts (speculator.propose)."""

from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.gpu.async_utils import AsyncOutput
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

TARGET_FORWARD_MS, TARGET_PREFILL_MS = 3.0, 4.0


class GPUModelRunner:
    def __init__(self, device, args: dict):
        self.device = device
        self.num_speculative_steps = args["num_speculative_tokens"]
        self.speculator = EagleSpeculator(device, self.num_speculative_steps)
        self.rejection_sampler = RejectionSampler(device, self.num_speculative_steps)
        self.execute_model_state = None

    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False, skip_attn_for_dummy_run=False):
        input_batch = {"req_ids": scheduler_output.req_ids, "is_prefill": scheduler_output.is_prefill}
        with self.device.side_stream():
            self.device.work(0.2)  # prepare inputs (async copies)
        self.device.join_side_stream()
        self.device.work(TARGET_PREFILL_MS if scheduler_output.is_prefill else TARGET_FORWARD_MS)
        self.execute_model_state = input_batch
        return None

    def sample(self, hidden_states, input_batch, grammar_output):
        sampler_output = self.rejection_sampler(None, input_batch)
        return sampler_output, sampler_output.num_sampled, sampler_output.num_rejected

    def sample_tokens(self, grammar_output):
        if self.execute_model_state is None:
            return None
        input_batch, self.execute_model_state = self.execute_model_state, None
        sampler_output, num_sampled, num_rejected = self.sample(None, input_batch, grammar_output)
        model_runner_output = ModelRunnerOutput(req_ids=input_batch["req_ids"], sampled_token_ids=None)
        async_output = AsyncOutput(model_runner_output, sampler_output, num_sampled, self.device)
        self.speculator.propose(input_batch, None, None, None, None, num_sampled, num_rejected)
        return async_output
