"""Mirrors vllm/v1/worker/gpu/spec_decode/eagle/speculator.py: EagleSpeculator inherits
propose and its hooks from AutoRegressiveSpeculator."""

from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import AutoRegressiveSpeculator


class EagleSpeculator(AutoRegressiveSpeculator):
    def load_draft_model(self, *args, **kwargs) -> None:
        pass
