"""Mirrors vllm/v1/worker/gpu_worker.py: the model runner is V2 unless VLLM_USE_V2_MODEL_RUNNER=0."""

import vllm.envs as envs
from engine_standin.device import make_device


class Worker:
    def __init__(self, args: dict):
        device = make_device(args["device"], args["seed"])
        if envs.VLLM_USE_V2_MODEL_RUNNER:
            from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        else:
            from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        self.model_runner = GPUModelRunner(device, args)

    def execute_model(self, scheduler_output):
        return self.model_runner.execute_model(scheduler_output)

    def sample_tokens(self, grammar_output):
        return self.model_runner.sample_tokens(grammar_output)
