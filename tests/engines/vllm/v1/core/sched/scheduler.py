"""Mirrors vllm/v1/core/sched/scheduler.py: the scheduler (in the EngineCore process) with its
own "schedule: ..." scopes; update_from_output counts the tokens each step kept."""

from dataclasses import dataclass, field

from engine_standin.device import log_accepted
from vllm.v1.utils import record_function_or_nullcontext


@dataclass
class SchedulerOutput:
    step: int
    req_ids: list = field(default_factory=list)
    is_prefill: bool = False


class Scheduler:
    def __init__(self, num_steps: int, num_reqs: int):
        self.num_steps = num_steps
        self.num_reqs = num_reqs
        self.step = 0

    def has_requests(self) -> bool:
        return self.step < self.num_steps

    def schedule(self) -> SchedulerOutput:
        with record_function_or_nullcontext("schedule: allocate_slots"):
            out = SchedulerOutput(self.step, [f"req{i}" for i in range(self.num_reqs)], self.step == 0)
        with record_function_or_nullcontext("schedule: update_after_schedule"):
            self.step += 1
        return out

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output) -> dict:
        kept = sum(len(t) for t in model_runner_output.sampled_token_ids)
        log_accepted("vllm", scheduler_output.step, kept)
        return {"step": scheduler_output.step, "tokens": kept}
