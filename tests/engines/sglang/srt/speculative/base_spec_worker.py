"""Mirrors sglang/srt/speculative/base_spec_worker.py."""


class BaseDraftWorker:
    def draft(self, batch):
        raise NotImplementedError

    def draft_extend(self):
        raise NotImplementedError


class BaseSpecWorker:
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None):
        raise NotImplementedError

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size: int = 0) -> None:
        """No-op default for non-adaptive workers (called once accept_lens is on the CPU)."""
