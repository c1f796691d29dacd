"""Mirrors vllm/v1/worker/gpu/async_utils.py: AsyncOutput starts the non-blocking copy of the
sampled tokens and their counts; get_output waits for it and trims each request's tokens."""

from vllm.v1.outputs import AsyncModelRunnerOutput


class AsyncOutput(AsyncModelRunnerOutput):
    def __init__(self, model_runner_output, sampler_output, num_sampled_tokens, device):
        self.model_runner_output = model_runner_output
        self.sampled_token_ids = device.copy_to_cpu(sampler_output.sampled_token_ids)
        self.num_sampled_tokens_np = device.copy_to_cpu(num_sampled_tokens)

    def get_output(self):
        sampled = self.sampled_token_ids.wait()
        counts = self.num_sampled_tokens_np.wait()
        self.model_runner_output.sampled_token_ids = [list(t[:n]) for t, n in zip(sampled, counts)]
        return self.model_runner_output
