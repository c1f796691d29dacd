"""Mirrors vllm/v1/spec_decode/eagle.py: EagleProposer(SpecDecodeBaseProposer)."""

from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer


class EagleProposer(SpecDecodeBaseProposer):
    pass
