"""Mirrors vllm/v1/engine/core.py: EngineCoreProc runs in its own process; with async
scheduling (step_with_batch_queue) it launches step N+1 before it reads the output of step N."""

from collections import deque

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.executor.uniproc_executor import UniProcExecutor


class EngineCore:
    def __init__(self, args: dict):
        self.scheduler = Scheduler(args["num_steps"], args["num_reqs"])
        self.model_executor = UniProcExecutor(args)
        self.batch_queue = deque() if args["async_scheduling"] else None
        self.outputs = []

    def step(self):
        scheduler_output = self.scheduler.schedule()
        model_output = self.model_executor.execute_model(scheduler_output)
        if model_output is None:
            model_output = self.model_executor.sample_tokens(None)
        if hasattr(model_output, "get_output"):
            model_output = model_output.get_output()
        self.outputs.append(self.scheduler.update_from_output(scheduler_output, model_output))

    def step_with_batch_queue(self):
        if self.scheduler.has_requests():
            scheduler_output = self.scheduler.schedule()
            exec_result = self.model_executor.execute_model(scheduler_output)
            future = exec_result if exec_result is not None else self.model_executor.sample_tokens(None)
            self.batch_queue.appendleft((future, scheduler_output))
            if len(self.batch_queue) < 2 and self.scheduler.has_requests():
                return  # keep the GPU fed: read this step's output after launching the next
        if self.batch_queue:
            future, scheduler_output = self.batch_queue.pop()
            model_output = future.get_output() if hasattr(future, "get_output") else future
            self.outputs.append(self.scheduler.update_from_output(scheduler_output, model_output))

    def run_busy_loop(self):
        step_fn = self.step_with_batch_queue if self.batch_queue is not None else self.step
        while self.scheduler.has_requests() or (self.batch_queue is not None and self.batch_queue):
            step_fn()
        self.model_executor.shutdown()


def run_engine_core(args: dict, conn) -> None:
    """The EngineCore process's entry (multiprocessing spawn)."""
    engine = EngineCore(args)
    engine.run_busy_loop()
    conn.send(engine.outputs)
    conn.close()
