"""Mirrors vllm/v1/worker/gpu_model_runner.py (Model Runner V1): the "gpu_model_runner: ..."
scopes (NVTX with VLLM_NVTX_SCOPES_FOR_PROFILING=1); execute_model runs the forward and returns
None, sample_tokens samples ("sample", with the rejection sampler), drafts ("draft":
propose_draft_token_ids) and returns an AsyncGPUModelRunnerOutput."""

from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput
from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.spec_decode.eagle import EagleProposer
from vllm.v1.utils import record_function_or_nullcontext


class AsyncGPUModelRunnerOutput(AsyncModelRunnerOutput):
    def __init__(self, model_runner_output, sampled_token_ids, num_kept, device):
        self._model_runner_output = model_runner_output
        self._rows = sampled_token_ids
        self._num_kept_cpu = device.copy_to_cpu(num_kept)  # the non-blocking copy

    def get_output(self) -> ModelRunnerOutput:
        kept = self._num_kept_cpu.wait()
        self._model_runner_output.sampled_token_ids = [row[:n] for row, n in zip(self._rows, kept)]
        return self._model_runner_output


class GPUModelRunner:
    def __init__(self, device, args: dict):
        self.device = device
        self.num_spec_tokens = args["num_speculative_tokens"]
        self.drafter = EagleProposer(device, self.num_spec_tokens)
        self.rejection_sampler = RejectionSampler(device, self.num_spec_tokens)
        self.execute_model_state = None

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        with record_function_or_nullcontext("gpu_model_runner: preprocess"):
            self.device.work(0.2)
        with record_function_or_nullcontext("gpu_model_runner: forward"):
            self.device.work(4.0 if scheduler_output.is_prefill else 3.0)
        with record_function_or_nullcontext("gpu_model_runner: postprocess"):
            self.execute_model_state = scheduler_output
        return None

    def _sample(self, scheduler_output):
        return self.rejection_sampler((len(scheduler_output.req_ids), scheduler_output.is_prefill), None, None, None)

    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, *args):
        return self.drafter.propose(sampled_token_ids)

    def sample_tokens(self, grammar_output):
        scheduler_output, self.execute_model_state = self.execute_model_state, None
        if scheduler_output is None:
            return None
        with record_function_or_nullcontext("gpu_model_runner: sample"):
            num_kept = self._sample(scheduler_output)
        with record_function_or_nullcontext("gpu_model_runner: draft"):
            self.propose_draft_token_ids(scheduler_output, num_kept)
        with record_function_or_nullcontext("gpu_model_runner: ModelRunnerOutput"):
            rows = [[7] * (self.num_spec_tokens + 1) for _ in scheduler_output.req_ids]
            out = ModelRunnerOutput(req_ids=scheduler_output.req_ids)
        return AsyncGPUModelRunnerOutput(out, rows, num_kept, self.device)
