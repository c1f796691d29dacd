"""Mirrors sglang/srt/speculative/eagle_worker_common.py: ``run_eagle_verify`` runs the target
verify forward and sampling and returns accept_lens as a device value (never read here)."""

from sglang.srt.managers.utils import GenerationBatchResult


def run_eagle_verify(batch, *, target_worker, plan_stream_ctx, num_draft_tokens, device, **_):
    with plan_stream_ctx():
        device.work(0.3)  # eagle_prepare_for_verify on the plan (schedule) stream
    device.join_side_stream()
    target_worker.forward_verify(batch)
    num_correct = device.randint(batch.batch_size, num_draft_tokens - 1)  # eagle_sample
    accept_lens = device.add(num_correct, 1)
    return GenerationBatchResult(next_token_ids=None, accept_lens=accept_lens, speculative_num_draft_tokens=num_draft_tokens)
