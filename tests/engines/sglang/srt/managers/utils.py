"""Mirrors sglang/srt/managers/utils.py: the result of one forward batch."""

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class GenerationBatchResult:
    next_token_ids: Any = None
    accept_lens: Any = None  # device value: accepted tokens per request (correct drafts + 1)
    next_draft_input: Any = None
    can_run_cuda_graph: bool = False
    speculative_num_draft_tokens: Optional[int] = None
    new_seq_lens: Any = None
    copy_done: Any = None  # the pending device-to-host copy of accept_lens
    num_correct_drafts: int = 0
    num_correct_drafts_per_req_cpu: list = field(default_factory=list)

    def copy_to_cpu(self, device) -> None:
        """Start the non-blocking copy of accept_lens (the scheduler reads it one batch later)."""
        if self.accept_lens is not None:
            self.copy_done = device.copy_to_cpu(self.accept_lens)
