"""Mirrors vllm/v1/outputs.py."""

from dataclasses import dataclass, field


@dataclass
class ModelRunnerOutput:
    req_ids: list = field(default_factory=list)
    sampled_token_ids: list = None  # per request: the tokens the step kept (CPU lists)


class AsyncModelRunnerOutput:
    def get_output(self) -> ModelRunnerOutput:
        raise NotImplementedError
