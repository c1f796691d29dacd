"""Mirrors vllm/v1/spec_decode/llm_base_proposer.py: SpecDecodeBaseProposer.propose runs the
drafter's first forward over the accepted tokens, then the remaining draft steps."""


class SpecDecodeBaseProposer:
    def __init__(self, device, num_speculative_tokens: int):
        self.device = device
        self.num_speculative_tokens = num_speculative_tokens

    def propose(self, target_token_ids=None, target_positions=None, target_hidden_states=None, next_token_ids=None, **kwargs):
        self.device.work(1.5)
        for _ in range(1, self.num_speculative_tokens):
            self.device.work(0.8)
        return None
