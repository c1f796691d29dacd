"""Engine presets: what ``tracerecon run --preset sglang|vllm`` wraps, switches on and maps.

A preset names, for one engine, the engine's own NVTX switches (set in the profiled program's
environment), the phase maps that turn the engine's native range names into the phases draft /
verify / draft_extend (recorded in ``run.json`` so that ``report RUN_DIR`` needs no flags), and
sets of method names to wrap (``tracerecon.wrap``) for what the engine does not mark itself.

Engines rename methods between releases, so a preset holds several name sets, most complete
first. ``choose`` takes the installed version and which names exist in the installed sources
(``tracerecon.resolve``, no engine import) and picks the first set whose required names all
exist; the version decides the warnings (unknown, or older than the versions the preset
follows). Every set says which sources it was checked against.

Accepted-token extractors also live here: they run inside the engine's processes (called by
the wrappers) and only read values the engine already holds on the CPU.

Light on purpose: the standard library only, imported by the CLI and by every engine process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from tracerecon.errors import UsageError

TAG_ATTRIBUTE = "_tracerecon_cycle"  # the cycle a returned object belongs to (``@tag``)


@dataclass(frozen=True)
class NameSet:
    """One generation of an engine's method names.

    ``required``: wrap specs (``module:Qual=action``) that must all exist for this set to be used;
    ``optional``: wrap specs used when they exist (accepted-token hooks that only newer releases
    have); ``alternatives``: wrap specs of workers the engine runs instead for some models
    (SGLang's multi-layer EAGLE / MTP worker), used where they exist, nothing said where not;
    ``checked``: the sources these names were read from (repository@commit path)."""

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()
    notes: str = ""
    alternatives: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preset:
    """An engine's preset: its distribution name, NVTX switches, phase maps and name sets
    (most complete first). ``floor``: the oldest release the name sets are meant for."""

    name: str
    dist: str
    env: tuple[tuple[str, str], ...]
    phases: tuple[str, ...]
    sets: tuple[NameSet, ...]
    floor: str
    notes: str = ""


@dataclass(frozen=True)
class Choice:
    """The name set picked for an installed engine, and what the user should be told."""

    preset: Preset
    name_set: NameSet
    version: str | None
    wraps: tuple[str, ...]  # required + the optional specs that exist
    warnings: tuple[str, ...] = ()
    missing_optional: tuple[str, ...] = field(default=())


def target_of(spec: str) -> str:
    """``module:Qual=action`` -> ``module:Qual``."""
    return spec.partition("=")[0].strip()


def version_key(version: str) -> tuple[int, ...]:
    """The numeric release part of a version: ``0.11.1rc2.dev5+g12ab`` -> (0, 11, 1)."""
    nums = []
    for part in version.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group(0)))
        if m.end() != len(part):
            break
    return tuple(nums)


# ---------------------------------------------------------------------------------------------
# SGLang. Sources read (sgl-project/sglang, via the stored copies of public repositories):
#   python/sglang/srt/speculative/eagle_worker_v2.py  @006b0e3d317f, @69834611129a, and a later
#       stored version (undated) whose forward_batch_generation wraps draft / draft_extend in
#       spec_stage_span and has on_verify_complete_cpu
#   python/sglang/srt/speculative/eagle_worker_common.py @02a3cd954bab (run_eagle_verify: returns
#       accept_lens as a GPU tensor)
#   python/sglang/srt/speculative/spec_utils.py (3 stored versions): spec_stage_span(name) ->
#       profile_range(name), i.e. a torch record_function only: no NVTX in any stored version
#   python/sglang/srt/utils/nvtx_utils.py @034a5bfec20d: SGLANG_ENABLE_NVTX_SCHEDULER /
#       SGLANG_ENABLE_NVTX_OPERATIONS gate nvtx.annotate ranges (default domain) named
#       scheduler.recv_requests / process_input_requests / get_next_batch_to_run / run_batch /
#       process_batch_result; an older nvtx_utils.py is gated by SGLANG_ENABLE_NVTX
#   scheduler_components/batch_result_processor.py (_resolve_spec_v2_tokens): calls
#       model_worker.on_verify_complete_cpu(num_correct_drafts_per_req_cpu, batch_size=...) once
#       accept_lens is on the CPU (one batch later under the overlap scheduler)
#   eagle_worker.py (V1, removed by PR #25464, 2026-05-16): EAGLEWorker.draft / verify /
#       forward_draft_extend_after_decode / forward_batch_generation, which returns
#       num_accepted_tokens and (later) accept_length_per_req_cpu
# ---------------------------------------------------------------------------------------------

_SGL_V2 = "sglang.srt.speculative.eagle_worker_v2"
_SGL_V1 = "sglang.srt.speculative.eagle_worker"

_SGLANG_V2_WRAPS = (
    f"{_SGL_V2}:EAGLEWorkerV2.forward_batch_generation=@cycle",
    f"{_SGL_V2}:EagleDraftWorker.draft=draft",
    f"{_SGL_V2}:EAGLEWorkerV2.verify=verify",
    f"{_SGL_V2}:EAGLEWorkerV2.verify=@queue",
    f"{_SGL_V2}:EagleDraftWorker._draft_extend_for_decode=draft_extend",
    f"{_SGL_V2}:EagleDraftWorker._draft_extend_for_prefill=draft_extend",
)
_SGLANG_V2_OPTIONAL = (f"{_SGL_V2}:EAGLEWorkerV2.on_verify_complete_cpu=@accepted:sglang_num_correct_drafts",)
# Multi-layer EAGLE (MTP draft models; sgl-project/sglang@b344f8985 multi_layer_eagle_worker_v2.py):
# MultiLayerEagleWorkerV2(BaseSpecWorker), not an EAGLEWorkerV2, runs instead of it, with the same
# steps: forward_batch_generation -> draft_worker.draft, verify, _draft_extend_for_decode (or
# target prefill, then _draft_extend_for_prefill).
_SGL_ML = "sglang.srt.speculative.multi_layer_eagle_worker_v2"
_SGLANG_MULTI_LAYER = (
    f"{_SGL_ML}:MultiLayerEagleWorkerV2.forward_batch_generation=@cycle",
    f"{_SGL_ML}:MultiLayerEagleDraftWorker.draft=draft",
    f"{_SGL_ML}:MultiLayerEagleWorkerV2.verify=verify",
    f"{_SGL_ML}:MultiLayerEagleDraftWorker._draft_extend_for_decode=draft_extend",
    f"{_SGL_ML}:MultiLayerEagleDraftWorker._draft_extend_for_prefill=draft_extend",
)
_SGLANG_V1_WRAPS = (
    f"{_SGL_V1}:EAGLEWorker.forward_batch_generation=@cycle",
    f"{_SGL_V1}:EAGLEWorker.draft=draft",
    f"{_SGL_V1}:EAGLEWorker.verify=verify",
    f"{_SGL_V1}:EAGLEWorker.forward_draft_extend_after_decode=draft_extend",
)
_SGLANG_V1_OPTIONAL = (
    f"{_SGL_V1}:EAGLEWorker.forward_draft_extend=draft_extend",
    f"{_SGL_V1}:EAGLEWorker.forward_batch_generation=@accepted:sglang_v1_batch_result",
)
_SGLANG_V2_CHECKED = (
    "sgl-project/sglang@006b0e3d317f python/sglang/srt/speculative/eagle_worker_v2.py",
    "sgl-project/sglang@69834611129a python/sglang/srt/speculative/eagle_worker_v2.py",
    "sgl-project/sglang (later stored version) python/sglang/srt/speculative/eagle_worker_v2.py",
    "sgl-project/sglang@02a3cd954bab python/sglang/srt/speculative/eagle_worker_common.py",
)
_SGLANG_V1_CHECKED = ("sgl-project/sglang python/sglang/srt/speculative/eagle_worker.py (stored versions before PR #25464)",)
_SGLANG_ML_CHECKED = ("sgl-project/sglang@b344f89850a7 python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py",)

SGLANG = Preset(
    name="sglang",
    dist="sglang",
    # Scheduler-stage NVTX ranges (scheduler.run_batch, ...): current name, then the older one.
    env=(("SGLANG_ENABLE_NVTX_SCHEDULER", "1"), ("SGLANG_ENABLE_NVTX", "1")),
    # spec_stage_span("draft" / "draft_extend") would match these names if a release makes it
    # an NVTX range; the wrapped ranges have the same names in the tracerecon domain.
    phases=("draft", "verify", "draft_extend"),
    sets=(
        NameSet("spec-v1+v2", _SGLANG_V2_WRAPS + _SGLANG_V1_WRAPS, _SGLANG_V2_OPTIONAL + _SGLANG_V1_OPTIONAL,
                _SGLANG_V2_CHECKED + _SGLANG_V1_CHECKED + _SGLANG_ML_CHECKED,
                "releases with both workers (V2 with the overlap scheduler or SGLANG_ENABLE_SPEC_V2)", _SGLANG_MULTI_LAYER),
        NameSet("spec-v2", _SGLANG_V2_WRAPS, _SGLANG_V2_OPTIONAL, _SGLANG_V2_CHECKED + _SGLANG_ML_CHECKED,
                "after PR #25464 (2026-05-16): EAGLE / EAGLE3 always run EAGLEWorkerV2", _SGLANG_MULTI_LAYER),
        NameSet("spec-v1", _SGLANG_V1_WRAPS, _SGLANG_V1_OPTIONAL, _SGLANG_V1_CHECKED, "releases before the V2 worker"),
    ),
    floor="0.4.1",  # EAGLE support (PR #2150, 2024-11); approximate, releases were not mapped to commits
    notes="spec_stage_span is a torch-profiler span only in the sources read, so draft / verify / draft_extend come from wrapping",
)

# ---------------------------------------------------------------------------------------------
# vLLM. Sources read (vllm-project/vllm, stored copies):
#   vllm/v1/worker/gpu/model_runner.py (Model Runner V2; a recent stored version): execute_model
#       (target forward, returns None), sample_tokens (self.sample -> RejectionSampler, then
#       AsyncOutput, then self.speculator.propose), no NVTX scopes; older @f03f9783
#   vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py @00746147f8cf:
#       AutoRegressiveSpeculator.propose -> on_prefill_begin, _prefill or
#       prefill_cudagraph_manager.run_fullgraph, on_prefill_end, then on_multi_step_decode_begin,
#       _multi_step_decode / _fused_multi_step_decode, on_multi_step_decode_end
#   vllm/v1/worker/gpu/spec_decode/eagle/speculator.py @0285f7f04448 (EagleSpeculator subclasses
#       AutoRegressiveSpeculator), older @dad25fba2460 (propose / generate_draft, no base class)
#   vllm/v1/worker/gpu/spec_decode/rejection_sampler.py @01b21056d9ef: RejectionSampler.__call__
#       returns SamplerOutput whose num_sampled / num_rejected are GPU tensors
#   vllm/v1/worker/gpu/async_utils.py @015a47e1282c: AsyncOutput.get_output waits for its copy
#       event, then sets model_runner_output.sampled_token_ids (lists trimmed to num_sampled)
#   vllm/v1/worker/gpu_model_runner.py (V1): record_function_or_nullcontext scopes
#       "gpu_model_runner: preprocess" / "forward" / "postprocess" / "sample" / "draft" /
#       "bookkeep" / "ModelRunnerOutput" / "eplb"; execute_model + sample_tokens (PR #26866);
#       AsyncGPUModelRunnerOutput.get_output
#   vllm/v1/utils.py (later vllm/utils/torch_utils.py): record_function_or_nullcontext ->
#       nvtx.annotate(name) (default domain) when VLLM_NVTX_SCOPES_FOR_PROFILING=1, unless
#       VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 (torch record_function instead)
#   vllm/v1/spec_decode/eagle.py: EagleProposer(SpecDecodeBaseProposer), propose in
#       llm_base_proposer.py; vllm/v1/core/sched/scheduler.py: "schedule: ..." scopes
# ---------------------------------------------------------------------------------------------

_V2 = "vllm.v1.worker.gpu.model_runner"
_V2_EAGLE = "vllm.v1.worker.gpu.spec_decode.eagle.speculator"
_V1 = "vllm.v1.worker.gpu_model_runner"

_VLLM_V2_CYCLE = (
    # One cycle = one engine step: the target forward (execute_model) to the end of
    # sample_tokens, which samples (rejection sampler), starts the output copy, and drafts.
    f"{_V2}:GPUModelRunner.execute_model=@cycle:begin",
    f"{_V2}:GPUModelRunner.execute_model=verify:begin",
    f"{_V2}:GPUModelRunner.sample_tokens=verify:end",
    f"{_V2}:GPUModelRunner.sample_tokens=@cycle:end",
    f"{_V2}:GPUModelRunner.sample_tokens=@tag",
    f"{_V2}:GPUModelRunner.sample_tokens=@accepted:vllm_sampled_tokens",
    # verify = target forward + rejection sampling: it ends where drafting starts.
    f"{_V2_EAGLE}:EagleSpeculator.propose=verify:stop",
)
_VLLM_V2_HOOKS = (
    # The hooks bracket draft prefill (CUDA-graph replay or _prefill) and the draft decode steps.
    f"{_V2_EAGLE}:EagleSpeculator.on_prefill_begin=draft_extend:begin",
    f"{_V2_EAGLE}:EagleSpeculator.on_prefill_end=draft_extend:end",
    f"{_V2_EAGLE}:EagleSpeculator.on_multi_step_decode_begin=draft:begin",
    f"{_V2_EAGLE}:EagleSpeculator.on_multi_step_decode_end=draft:end",
)
_VLLM_V2_EARLY = (f"{_V2_EAGLE}:EagleSpeculator.propose=draft",)
_VLLM_V2_OPTIONAL = ("vllm.v1.worker.gpu.async_utils:AsyncOutput.get_output=@accepted:vllm_sampled_tokens",)
_VLLM_V1_WRAPS = (
    f"{_V1}:GPUModelRunner.execute_model=@cycle:begin",
    f"{_V1}:GPUModelRunner.sample_tokens=@cycle:end",
    f"{_V1}:GPUModelRunner.sample_tokens=@tag",
    f"{_V1}:GPUModelRunner.sample_tokens=@accepted:vllm_sampled_tokens",
)
_VLLM_V1_OPTIONAL = (f"{_V1}:AsyncGPUModelRunnerOutput.get_output=@accepted:vllm_sampled_tokens",)
_VLLM_V2_CHECKED = (
    "vllm-project/vllm (recent stored version) vllm/v1/worker/gpu/model_runner.py",
    "vllm-project/vllm@00746147f8cf vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py",
    "vllm-project/vllm@0285f7f04448 vllm/v1/worker/gpu/spec_decode/eagle/speculator.py",
    "vllm-project/vllm@01b21056d9ef vllm/v1/worker/gpu/spec_decode/rejection_sampler.py",
    "vllm-project/vllm@015a47e1282c vllm/v1/worker/gpu/async_utils.py",
)
_VLLM_V1_CHECKED = ("vllm-project/vllm vllm/v1/worker/gpu_model_runner.py (stored versions after PR #26866)", "vllm-project/vllm vllm/v1/utils.py")

VLLM = Preset(
    name="vllm",
    dist="vllm",
    env=(("VLLM_NVTX_SCOPES_FOR_PROFILING", "1"),),
    phases=(
        # Model Runner V1's own scopes (the V2 runner has none), each a phase, or its GPU time
        # would be in none: preprocess (input copies), forward and postprocess (the target
        # model to its logits: verify), sample (rejection sampling), draft, and bookkeep /
        # ModelRunnerOutput (the sampled tokens' copy back and the output).
        # In a step's order (without cycle ranges a cycle starts at the first of them present;
        # the report lists them so): V1 prepare, verify, sample, draft, bookkeep; V2 verify,
        # draft_extend, draft.
        "prepare=gpu_model_runner: preprocess",
        "verify", "verify=gpu_model_runner: forward", "verify=gpu_model_runner: postprocess",
        "draft_extend",
        "sample=gpu_model_runner: sample",
        "draft", "draft=gpu_model_runner: draft",
        "bookkeep=re:^gpu_model_runner: (bookkeep|ModelRunnerOutput)$",
    ),
    sets=(
        NameSet("mrv2+v1", _VLLM_V2_CYCLE + _VLLM_V2_HOOKS + _VLLM_V1_WRAPS, _VLLM_V2_OPTIONAL + _VLLM_V1_OPTIONAL,
                _VLLM_V2_CHECKED + _VLLM_V1_CHECKED, "Model Runner V2 (the default for dense models since PR #44443, 2026-07) and V1"),
        NameSet("mrv2-early+v1", _VLLM_V2_CYCLE + _VLLM_V2_EARLY + _VLLM_V1_WRAPS, _VLLM_V2_OPTIONAL + _VLLM_V1_OPTIONAL,
                ("vllm-project/vllm@dad25fba2460 vllm/v1/worker/gpu/spec_decode/eagle/speculator.py",) + _VLLM_V1_CHECKED,
                "early Model Runner V2 (opt-in, VLLM_USE_V2_MODEL_RUNNER=1): drafting not split into prefill and decode"),
        NameSet("v1", _VLLM_V1_WRAPS, _VLLM_V1_OPTIONAL, _VLLM_V1_CHECKED, "Model Runner V1 only"),
    ),
    floor="0.12.0",  # execute_model / sample_tokens split (PR #26866, 2025-10); approximate
    notes="V1: prepare, verify (the target forward and its logits), sample (rejection sampling), draft and bookkeep from vLLM's own NVTX scopes, no "
          "draft_extend (the drafter's first forward is inside 'gpu_model_runner: draft'); V2: all phases wrapped; EAGLE speculators only (EagleSpeculator)",
)

PRESETS: dict[str, Preset] = {p.name: p for p in (SGLANG, VLLM)}
# The names `--phases` took before presets; they now mean the preset of the same engine.
LEGACY_ALIASES = {"sglang-eagle": "sglang", "vllm-eagle": "vllm"}


def get(name: str) -> Preset:
    """The preset called ``name`` (a legacy ``--phases`` name works too); UsageError otherwise."""
    key = LEGACY_ALIASES.get(name, name)
    if key not in PRESETS:
        raise UsageError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})")
    return PRESETS[key]


def all_specs(preset: Preset) -> tuple[str, ...]:
    """Every wrap spec any of the preset's name sets uses (what the probe must look up)."""
    return tuple(dict.fromkeys(s for ns in preset.sets for s in ns.required + ns.optional + ns.alternatives))


def choose(preset: Preset, version: str | None, found: dict[str, bool], python: str = "python") -> Choice:
    """The first name set whose required names all exist in the installed sources (``found``:
    ``module:Qual`` -> exists). UsageError naming the missing target and the version when none
    does. Warnings: version unknown, older than the preset's floor, or names of a more complete
    set half there."""
    shown = f"{preset.dist} {version}" if version else f"{preset.dist} (version unknown)"
    usable = [ns for ns in preset.sets if all(found.get(target_of(s), False) for s in ns.required)]
    if not usable:
        if version is None and not any(found.get(target_of(s), False) for s in all_specs(preset)):
            raise UsageError(f"--preset {preset.name}: {preset.dist} is not installed for {python} (none of its modules were found)")
        closest = min(preset.sets, key=lambda ns: sum(not found.get(target_of(s), False) for s in ns.required))
        missing = next(target_of(s) for s in closest.required if not found.get(target_of(s), False))
        raise UsageError(f"--preset {preset.name}: {missing} not found in {shown} (the {closest.name} names); "
                         f"wrap what this version has with --wrap MODULE:CLASS.METHOD=PHASE")
    chosen = usable[0]
    warnings = []
    if version is None:
        warnings.append(f"{shown}: no {preset.dist} dist-info for {python}; using the {chosen.name} names, which exist")
    elif version_key(version) < version_key(preset.floor):
        warnings.append(f"{shown} is older than the versions this preset follows ({preset.floor} and newer); using the {chosen.name} names, which exist")
    missing_opt = tuple(target_of(s) for s in chosen.optional if not found.get(target_of(s), False))
    wraps = chosen.required + tuple(s for s in chosen.optional + chosen.alternatives if found.get(target_of(s), False))
    return Choice(preset, chosen, version, wraps, tuple(warnings), missing_opt)


# ---------------------------------------------------------------------------------------------
# Accepted-token extractors. Each takes the finished call (``wrap.Call``) and the process's
# cycle book, and returns (tokens, cycle index or None) or None when the call says nothing.
# Tokens are the tokens a cycle committed: accepted draft tokens plus the target's own (bonus)
# token, per request, summed over the batch. Only CPU values are read: never a GPU tensor.
# ---------------------------------------------------------------------------------------------


def sglang_num_correct_drafts(call, book) -> tuple[int, int | None] | None:
    """SGLang V2 ``EAGLEWorkerV2.on_verify_complete_cpu(num_correct_drafts_per_req, batch_size)``:
    per-request correct drafts (bonus excluded), a CPU list, called once accept_lens reached the
    CPU. The cycle is the oldest verify not yet reported: results are processed in launch order."""
    counts = call.args[0] if call.args else call.kwargs.get("num_correct_drafts_per_req")
    cycle = book.pop_queued()
    if counts is None:
        return None
    return sum(int(n) + 1 for n in counts), cycle


def sglang_v1_batch_result(call, book) -> tuple[int, int | None] | None:
    """SGLang V1 ``EAGLEWorker.forward_batch_generation`` returns ``accept_length_per_req_cpu``
    (correct drafts per request, read to the CPU inside verify) on decode batches."""
    per_req = getattr(call.result, "accept_length_per_req_cpu", None)
    if not per_req:
        return None
    return sum(int(n) + 1 for n in per_req), call.cycle


def vllm_sampled_tokens(call, book) -> tuple[int, int | None] | None:
    """vLLM ``ModelRunnerOutput.sampled_token_ids``: per request, the tokens the step kept
    (accepted drafts + the bonus token), as CPU lists. Returned by ``sample_tokens`` when the
    step is synchronous, by ``AsyncOutput.get_output`` / ``AsyncGPUModelRunnerOutput.get_output``
    (after the engine's own wait for the copy) otherwise; the async output carries the cycle
    that ``sample_tokens`` tagged on it."""
    out = call.result
    if out is None or hasattr(out, "get_output"):
        return None  # the async wrapper: its get_output reports
    ids = getattr(out, "sampled_token_ids", None)
    if ids is None or len(ids) == 0:
        return None
    tagged = getattr(call.instance, TAG_ATTRIBUTE, None)
    return sum(len(t) for t in ids), (tagged if tagged is not None else call.cycle)


EXTRACTORS: dict[str, Callable] = {
    "sglang_num_correct_drafts": sglang_num_correct_drafts,
    "sglang_v1_batch_result": sglang_v1_batch_result,
    "vllm_sampled_tokens": vllm_sampled_tokens,
}
