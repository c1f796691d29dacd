"""Mirrors sglang/srt/managers/scheduler_components/batch_result_processor.py."""

from engine_standin.device import log_accepted


class BatchResultProcessor:
    def _resolve_spec_v2_tokens(self, result, batch):
        accept_lens = result.copy_done.wait()  # the copy the scheduler started one batch ago
        result.num_correct_drafts = sum(accept_lens) - len(batch.reqs)
        result.num_correct_drafts_per_req_cpu = [x - 1 for x in accept_lens]
        # Feed the worker now that accept_lens is on CPU (no GPU->CPU copy in the worker hot path).
        self.model_worker.on_verify_complete_cpu(result.num_correct_drafts_per_req_cpu, batch_size=len(batch.reqs))
        log_accepted("sglang", batch.forward_iter, sum(accept_lens))
