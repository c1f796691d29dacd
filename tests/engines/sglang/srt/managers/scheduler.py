"""Mirrors sglang/srt/managers/scheduler.py: one scheduler thread in the scheduler process;
event_loop_overlap launches batch N (run_batch) before it processes the result of batch N-1,
so the CPU is one batch ahead of the GPU. Stages are NVTX ranges with
SGLANG_ENABLE_NVTX_SCHEDULER (scheduler_nvtx_method)."""

from dataclasses import dataclass, field

from sglang.srt.managers.scheduler_components.batch_result_processor import BatchResultProcessor
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.utils.nvtx_utils import scheduler_nvtx_method


@dataclass
class ScheduleBatch:
    forward_iter: int
    forward_mode: str  # "extend" | "decode"
    reqs: list = field(default_factory=list)
    spec_info: object = None

    @property
    def batch_size(self) -> int:
        return len(self.reqs)


class Scheduler(BatchResultProcessor):
    def __init__(self, device, num_batches: int, batch_size: int, speculative_num_steps: int, enable_overlap: bool):
        self.device = device
        self.num_batches = num_batches
        self.batch_size = batch_size
        self.enable_overlap = enable_overlap
        self.model_worker = EAGLEWorkerV2(device, speculative_num_steps)
        self.forward_ct = 0

    @scheduler_nvtx_method("scheduler.recv_requests")
    def recv_requests(self):
        return [f"req{i}" for i in range(self.batch_size)] if self.forward_ct == 0 else []

    @scheduler_nvtx_method("scheduler.get_next_batch_to_run")
    def get_next_batch_to_run(self, reqs):
        if self.forward_ct >= self.num_batches:
            return None
        mode = "extend" if self.forward_ct == 0 else "decode"
        return ScheduleBatch(self.forward_ct, mode, [f"req{i}" for i in range(self.batch_size)])

    @scheduler_nvtx_method("scheduler.run_batch")
    def run_batch(self, batch):
        self.forward_ct += 1
        result = self.model_worker.forward_batch_generation(batch)
        result.copy_to_cpu(self.device)
        return result

    @scheduler_nvtx_method("scheduler.process_batch_result")
    def process_batch_result(self, batch, result):
        if batch.forward_mode == "decode":
            self._resolve_spec_v2_tokens(result, batch)

    def event_loop_overlap(self):
        last = None
        while True:
            reqs = self.recv_requests()
            batch = self.get_next_batch_to_run(reqs)
            current = (batch, self.run_batch(batch)) if batch is not None else None
            if last is not None:
                self.process_batch_result(*last)
            last = current
            if batch is None:
                break
        self.device.synchronize()

    def event_loop_normal(self):
        while True:
            batch = self.get_next_batch_to_run(self.recv_requests())
            if batch is None:
                break
            self.process_batch_result(batch, self.run_batch(batch))
        self.device.synchronize()


def run_scheduler_process(args: dict) -> None:
    """The scheduler process's entry (launched with multiprocessing spawn)."""
    from engine_standin.device import make_device

    device = make_device(args["device"], args["seed"])
    scheduler = Scheduler(device, args["num_batches"], args["batch_size"], args["speculative_num_steps"], not args["disable_overlap_schedule"])
    if scheduler.enable_overlap:
        scheduler.event_loop_overlap()
    else:
        scheduler.event_loop_normal()
