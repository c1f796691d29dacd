"""Mirrors vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py: propose runs the draft
prefill (_prefill, or a CUDA-graph replay) between on_prefill_begin / on_prefill_end, then the
draft decode steps between on_multi_step_decode_begin / on_multi_step_decode_end."""

from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

DRAFT_PREFILL_MS, DRAFT_STEP_MS = 1.5, 0.8


class AutoRegressiveSpeculator(DraftModelSpeculator):
    use_fused_multi_step_decode = False

    def on_prefill_begin(self, num_reqs: int) -> None: ...

    def on_prefill_end(self, num_reqs: int) -> None: ...

    def on_multi_step_decode_begin(self, num_reqs: int) -> None: ...

    def on_multi_step_decode_end(self, num_reqs: int) -> None: ...

    def propose(self, input_batch, attn_metadata=None, slot_mappings=None, last_hidden_states=None, aux_hidden_states=None,
                num_sampled=None, num_rejected=None, *args, **kwargs):
        num_reqs = len(input_batch["req_ids"])
        self.on_prefill_begin(num_reqs)
        self._prefill(num_reqs)
        self.on_prefill_end(num_reqs)
        if self.num_speculative_steps == 1:
            return None
        self.on_multi_step_decode_begin(num_reqs)
        decode_fn = self._fused_multi_step_decode if self.use_fused_multi_step_decode else self._multi_step_decode
        decode_fn(num_reqs)
        self.on_multi_step_decode_end(num_reqs)
        return None

    def _prefill(self, num_reqs: int) -> None:
        self.device.work(DRAFT_PREFILL_MS)

    def _multi_step_decode(self, num_reqs: int) -> None:
        for _ in range(1, self.num_speculative_steps):
            self._generate_draft(num_reqs)

    def _fused_multi_step_decode(self, num_reqs: int) -> None:
        self._multi_step_decode(num_reqs)

    def _generate_draft(self, num_reqs: int) -> None:
        self.device.work(DRAFT_STEP_MS)
