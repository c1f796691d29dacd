"""vLLM's Dual Batch Overlap (``--enable-dbo``) decode steps, checked per cycle and phase against an
event model written from vLLM's source apart from tracerecon (``vllm_dbo_model``): two
micro-batch threads taking turns on the main thread's compute stream and the DBO comm stream,
DeepEP's high-throughput kernels on its own stream forked off the comm stream, with the phases
marked on the main thread (the vLLM preset's), on the micro-batch threads (``model_forward`` on
both, or ``ubatch 0`` / ``ubatch 1``), or per layer.

Two rules came from it (``caller_streams._relayed_forks``, ``caller_streams._own_waits``). Before them 9
of these variants read 36 phase-cycles wrong: a micro-batch's phase was read on DeepEP's stream
(3730 us where events on the compute stream read 3440), since that stream is forked off the
comm stream, which only copies and waits, and a fork through such a stream was not followed
(a join through one was); and a per-layer range spanning a yield took the other micro-batch
thread's wait in its window for its own fork (800 us where events read 780).
"""

from __future__ import annotations

import pytest

from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load
from tracerecon.presets import VLLM
from vllm_dbo_model import U, decode_steps

PRESET = VLLM.phases  # the vLLM preset's phases, as `--preset vllm` reads
UB_SAME = ("prepare=gpu_model_runner: preprocess", "model_forward", "verify=gpu_model_runner: postprocess",
           "sample=gpu_model_runner: sample", "bookkeep=re:^gpu_model_runner: (bookkeep|ModelRunnerOutput)$")
UB_NAMED = ("prepare=gpu_model_runner: preprocess", "ub0=ubatch 0", "ub1=ubatch 1", "verify=gpu_model_runner: postprocess",
            "sample=gpu_model_runner: sample", "bookkeep=re:^gpu_model_runner: (bookkeep|ModelRunnerOutput)$")
LW = ("prepare=gpu_model_runner: preprocess", "attn", "moe", "verify=gpu_model_runner: postprocess",
      "sample=gpu_model_runner: sample", "bookkeep=re:^gpu_model_runner: (bookkeep|ModelRunnerOutput)$")
BOTH = PRESET + ("model_forward",)

VARIANTS = {
    # name: (marks, phases, kwargs)
    "gpu_bound_ht": ("main", PRESET, dict(attn=80, mlp=90, comm=40)),
    "cpu_bound_ht": ("main", PRESET, dict(attn=5, mlp=5, comm=5, cpu_layer=30)),
    "slow_ub1_ht": ("main", PRESET, dict(attn=(20, 120))),
    "comm_lag_ht": ("main", PRESET, dict(comm=200)),
    "comm_lag_by_cycle": ("main", PRESET, dict(comm=lambda c: (10, 300, 10, 300)[c])),
    "ll_gpu_bound": ("main", PRESET, dict(mode="ll", attn=80, mlp=90, comm=40)),
    "ll_cpu_bound": ("main", PRESET, dict(mode="ll", attn=5, mlp=5, comm=5, cpu_layer=30)),
    "ub_same_gpu": ("ubatch_same", UB_SAME, dict(attn=80, mlp=90, comm=40)),
    "ub_same_cpu": ("ubatch_same", UB_SAME, dict(attn=5, mlp=5, comm=5, cpu_layer=30)),
    "ub_same_comm_lag": ("ubatch_same", UB_SAME, dict(comm=200)),
    "ub_same_slow_ub1": ("ubatch_same", UB_SAME, dict(attn=(20, 120))),
    "ub_named_gpu": ("ubatch_named", UB_NAMED, dict(attn=80, mlp=90, comm=40)),
    "ub_named_cpu": ("ubatch_named", UB_NAMED, dict(attn=5, mlp=5, comm=5, cpu_layer=30)),
    "ub_named_comm_lag": ("ubatch_named", UB_NAMED, dict(comm=200)),
    "ub_named_slow_ub1": ("ubatch_named", UB_NAMED, dict(attn=(20, 120))),
    "ub_named_ll": ("ubatch_named", UB_NAMED, dict(mode="ll", attn=(20, 120))),
    "deepep_ht_gpu": ("main", PRESET, dict(mode="deepep_ht", attn=80, mlp=90, comm=40)),
    "deepep_ht_cpu": ("main", PRESET, dict(mode="deepep_ht", attn=5, mlp=5, comm=5, cpu_layer=30)),
    "deepep_ht_comm_lag": ("main", PRESET, dict(mode="deepep_ht", comm=300)),
    "deepep_ht_slow_ub1": ("main", PRESET, dict(mode="deepep_ht", attn=(20, 150))),
    "deepep_ht_ub_named_gpu": ("ubatch_named", UB_NAMED, dict(mode="deepep_ht", attn=80, mlp=90, comm=40)),
    "deepep_ht_ub_named_cpu": ("ubatch_named", UB_NAMED, dict(mode="deepep_ht", attn=5, mlp=5, comm=5, cpu_layer=30)),
    "deepep_ht_ub_named_comm_lag": ("ubatch_named", UB_NAMED, dict(mode="deepep_ht", comm=300)),
    "deepep_ht_ub_same_comm_lag": ("ubatch_same", UB_SAME, dict(mode="deepep_ht", comm=300)),
    "deepep_ht_ub_same_slow": ("ubatch_same", UB_SAME, dict(mode="deepep_ht", attn=(20, 150))),
    "layerwise_gpu": ("main_noforward", LW, dict(layerwise=True, attn=80, mlp=90, comm=40)),
    "layerwise_cpu": ("main_noforward", LW, dict(layerwise=True, attn=5, mlp=5, comm=5, cpu_layer=30)),
    "layerwise_comm_lag": ("main_noforward", LW, dict(layerwise=True, comm=200)),
    "layerwise_deepep_lag": ("main_noforward", LW, dict(layerwise=True, mode="deepep_ht", comm=300)),
    "layerwise_ll": ("main_noforward", LW, dict(layerwise=True, mode="ll", attn=(20, 120))),
    "layerwise_with_forward": ("main", PRESET + ("attn", "moe"), dict(layerwise=True, comm=200)),
    "reuse_events_ub_named_lag": ("ubatch_named", UB_NAMED, dict(reuse_events=True, comm=200)),
    "reuse_events_deepep_layerwise": ("main_noforward", LW, dict(reuse_events=True, layerwise=True, mode="deepep_ht", comm=300)),
    "no_cat_main_lag": ("main", PRESET, dict(no_cat=True, comm=200)),
    "no_cat_main_deepep_lag": ("main", PRESET, dict(no_cat=True, mode="deepep_ht", comm=300)),
    "no_cat_cpu": ("main", PRESET, dict(no_cat=True, attn=5, mlp=5, comm=5, cpu_layer=30)),
    "mixed_by_cycle": ("ubatch_named", UB_NAMED, dict(mode="deepep_ht", comm=lambda c: (5, 300, 5, 300)[c], attn=lambda c: (150, 20, 20, 150)[c], cycles=4)),
    "layerwise_mixed": ("main_noforward", LW, dict(layerwise=True, comm=lambda c: (5, 300, 5, 300)[c], attn=lambda c: (150, 20, 20, 150)[c])),
    "no_dbo_some_steps_main": ("main", PRESET, dict(no_dbo=(1, 2), mode="deepep_ht", comm=300)),
    "no_dbo_some_steps_main_ht": ("main", PRESET, dict(no_dbo=(0, 2), comm=200)),
    "no_dbo_some_steps_layerwise": ("main_noforward", LW, dict(no_dbo=(1, 2), layerwise=True, mode="deepep_ht", comm=300)),
    "both_gpu": ("both", BOTH, dict(attn=80, mlp=90, comm=40)),
    "both_comm_lag": ("both", BOTH, dict(comm=200)),
}



@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_phase_of_every_step_reads_as_events_on_the_compute_stream(tmp_path, name):
    # GIVEN the model's decode steps, marked as the variant says, and what events read
    marks, phases, kw = VARIANTS[name]
    m, truth = decode_steps(marks, **kw)
    # WHEN read with those phases
    run = load([str(m.t.write(tmp_path / "t.sqlite"))], PhaseConfig(phases=phases, skip_cycles=0))
    got: dict = {}
    for p in run.ranks[0].phases.to_pylist():
        got[(p["cycle"], p["phase"])] = got.get((p["cycle"], p["phase"]), 0) + p["gpu_ns"]
    # THEN each phase of each step reads the events' time, to the nanosecond the model keeps (us)
    assert sorted(got) == sorted(truth)
    assert {k: v / U for k, v in got.items()} == truth
