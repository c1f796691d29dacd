"""Mirrors sglang/srt/speculative/eagle_worker_v2.py (spec V2, the only EAGLE worker since
PR #25464): EAGLEWorkerV2.forward_batch_generation drives EagleDraftWorker.draft,
EAGLEWorkerV2.verify (run_eagle_verify) and EagleDraftWorker._draft_extend_for_decode
(_draft_extend_for_prefill on prefill batches)."""

from sglang.srt.speculative.base_spec_worker import BaseDraftWorker, BaseSpecWorker
from sglang.srt.speculative.eagle_worker_common import run_eagle_verify
from sglang.srt.speculative.spec_utils import spec_stage_span

DRAFT_MS, TARGET_VERIFY_MS, DRAFT_EXTEND_MS, TARGET_PREFILL_MS = 2.0, 3.0, 1.5, 4.0


class TpModelWorker:
    """The target model (sglang/srt/managers/tp_worker.py)."""

    def __init__(self, device):
        self.device = device

    def forward_batch_generation(self, batch, **_):
        self.device.work(TARGET_PREFILL_MS)

    def forward_verify(self, batch):
        self.device.work(TARGET_VERIFY_MS)


class EagleDraftWorker(BaseDraftWorker):
    def __init__(self, device, speculative_num_steps):
        self.device = device
        self.speculative_num_steps = speculative_num_steps

    def draft(self, batch):
        with self.device.side_stream():
            self.device.work(0.2)  # prepare_for_draft
        self.device.join_side_stream()
        self.draft_forward(batch)
        return object()  # EagleVerifyInput

    def draft_forward(self, batch):
        for _ in range(self.speculative_num_steps):
            self.device.work(DRAFT_MS / self.speculative_num_steps)

    def _draft_extend_for_prefill(self, batch, target_hidden_states, next_token_ids, mm_input_embeds=None):
        self.device.work(DRAFT_EXTEND_MS)
        return object()  # EagleDraftInput

    def _draft_extend_for_decode(self, batch, batch_result):
        self.device.work(DRAFT_EXTEND_MS)


class EAGLEWorkerV2(BaseSpecWorker):
    def __init__(self, device, speculative_num_steps=3):
        self.device = device
        self.speculative_num_steps = speculative_num_steps
        self.speculative_num_draft_tokens = speculative_num_steps + 1
        self._target_worker = TpModelWorker(device)
        self._draft_worker = EagleDraftWorker(device, speculative_num_steps)

    @property
    def target_worker(self):
        return self._target_worker

    @property
    def draft_worker(self):
        return self._draft_worker

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None):
        if batch.forward_mode == "extend":
            self.target_worker.forward_batch_generation(batch)
            from sglang.srt.managers.utils import GenerationBatchResult

            batch_output = GenerationBatchResult()
            with spec_stage_span("draft_extend"):
                batch_output.next_draft_input = self.draft_worker._draft_extend_for_prefill(batch, None, None)
            return batch_output
        with spec_stage_span("draft"):
            verify_input = self.draft_worker.draft(batch)
        batch.spec_info = verify_input
        batch_output = self.verify(batch, grammar_barrier=grammar_barrier)
        with spec_stage_span("draft_extend"):
            self.draft_worker._draft_extend_for_decode(batch, batch_output)
        return batch_output

    def verify(self, batch, grammar_barrier=None):
        return run_eagle_verify(
            batch,
            target_worker=self.target_worker,
            plan_stream_ctx=self.device.side_stream,
            num_draft_tokens=self.speculative_num_draft_tokens,
            device=self.device,
        )

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        """Feeds the adaptive controller (none here) once accept_lens is on the CPU."""
