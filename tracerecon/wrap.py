"""Phase ranges for engines you cannot edit: wrap named callables when their module is imported.

``tracerecon run --wrap module:Class.method=phase`` writes a ``sitecustomize.py`` that calls
``install(spec)`` in every Python process of the run (torchrun workers too): each target is
wrapped in ``tracerecon.instrument.phase(name)`` as soon as its module has been imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from dataclasses import dataclass

ENV_SPEC = "TRACERECON_WRAP"

# Method names looked up in the engines' sources (SGLang python/sglang/srt/speculative/
# eagle_worker.py; vLLM vllm/v1/spec_decode/eagle.py and vllm/v1/worker/gpu_model_runner.py).
PRESETS: dict[str, tuple[str, ...]] = {
    "sglang-eagle": (
        "sglang.srt.speculative.eagle_worker:EAGLEWorker.draft=draft",
        "sglang.srt.speculative.eagle_worker:EAGLEWorker.verify=verify",
        "sglang.srt.speculative.eagle_worker:EAGLEWorker.forward_draft_extend_after_decode=forward_draft_extend_after_decode",
    ),
    "vllm-eagle": (
        # execute_model runs the target (verify) and then the drafter: draft nests inside verify.
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model=verify",
        "vllm.v1.spec_decode.eagle:EagleProposer.propose=draft",
    ),
}


@dataclass(frozen=True)
class WrapTarget:
    module: str
    qualname: str  # "Class.method" or "function"
    phase: str

    @classmethod
    def parse(cls, spec: str) -> "WrapTarget":
        """``module:Qual.name=phase`` (phase defaults to the last name part)."""
        target, _, phase = spec.partition("=")
        module, sep, qual = target.partition(":")
        if not sep or not module or not qual:
            raise ValueError(f"bad --wrap {spec!r}: expected module:Class.method=phase")
        return cls(module.strip(), qual.strip(), (phase or qual.rsplit(".", 1)[-1]).strip())

    def spec(self) -> str:
        return f"{self.module}:{self.qualname}={self.phase}"


def expand(specs: list[str], presets: list[str]) -> list[WrapTarget]:
    out = []
    for name in presets:
        if name not in PRESETS:
            raise ValueError(f"unknown phase preset {name!r} (known: {', '.join(sorted(PRESETS))})")
        out.extend(WrapTarget.parse(s) for s in PRESETS[name])
    out.extend(WrapTarget.parse(s) for s in specs)
    return out


def apply(module, target: WrapTarget) -> bool:
    """Wrap ``target`` inside an imported ``module``; False if the name is not there."""
    from tracerecon.instrument import phase

    parts = target.qualname.split(".")
    owner = module
    for p in parts[:-1]:
        owner = getattr(owner, p, None)
        if owner is None:
            return False
    original = getattr(owner, parts[-1], None)
    if original is None or getattr(original, "__tracerecon_wrapped__", False):
        return original is not None
    wrapped = phase(target.phase)(original)
    wrapped.__tracerecon_wrapped__ = True
    setattr(owner, parts[-1], wrapped)
    return True


class _Finder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a target module, then wraps its callables."""

    def __init__(self, targets: list[WrapTarget]) -> None:
        self.by_module: dict[str, list[WrapTarget]] = {}
        for t in targets:
            self.by_module.setdefault(t.module, []).append(t)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.by_module:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        targets = self.by_module[fullname]

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                loader.exec_module(module)
                for t in targets:
                    if not apply(module, t):
                        print(f"tracerecon: warning: --wrap {t.spec()}: no such attribute", file=sys.stderr)

        spec.loader = _Loader()
        return spec


def install(spec: str | None = None) -> None:
    """Install wrappers from ``spec`` (``;``-separated targets; default: $TRACERECON_WRAP)."""
    spec = os.environ.get(ENV_SPEC, "") if spec is None else spec
    targets = [WrapTarget.parse(s) for s in spec.split(";") if s.strip()]
    if not targets:
        return
    for t in targets:  # already imported (rare in sitecustomize): wrap now
        if t.module in sys.modules:
            apply(sys.modules[t.module], t)
    sys.meta_path.insert(0, _Finder([t for t in targets if t.module not in sys.modules]))


SITECUSTOMIZE = '''# written by tracerecon run --wrap: wraps engine callables in NVTX phase ranges
try:
    from tracerecon.wrap import install as _tracerecon_install
    _tracerecon_install()
except Exception as _exc:  # never break the user's program
    import sys as _sys
    print(f"tracerecon: warning: --wrap not installed: {_exc}", file=_sys.stderr)
'''
