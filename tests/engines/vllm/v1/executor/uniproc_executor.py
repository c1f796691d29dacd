"""Mirrors vllm/v1/executor/uniproc_executor.py: one GPU, the worker in the EngineCore process."""

from vllm.v1.worker.gpu_worker import Worker


class UniProcExecutor:
    def __init__(self, args: dict):
        self.driver_worker = Worker(args)

    def execute_model(self, scheduler_output):
        return self.driver_worker.execute_model(scheduler_output)

    def sample_tokens(self, grammar_output):
        return self.driver_worker.sample_tokens(grammar_output)

    def shutdown(self):
        self.driver_worker.model_runner.device.synchronize()
