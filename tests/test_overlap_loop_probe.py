"""A real H200 trace of SGLang's overlap loop in miniature (``launch/overlap_loop_probe.py``,
``sample_traces/probes_h200/overlap_loop``): schedule on the default stream, forward on a
forward stream that waits for the default one, process waiting on the CPU for the previous
batch's results; the default stream never waits for the forward stream. The README's
not-handled case: tracerecon tiles the phases, so schedule reads 0 behind the previous batch's
forward. What it must do is say so, with what CUDA events on schedule's own stream read: the
engine recorded those events at every phase boundary (``overlap_loop.gt.jsonl``), an
independent source."""

from __future__ import annotations

import json
import re

import numpy as np

from conftest import SAMPLES
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

RUN = SAMPLES / "probes_h200"
PHASES = PhaseConfig(phases=("schedule", "forward", "process"))


def ground_truth() -> list[dict]:
    return [json.loads(line) for line in (RUN / "overlap_loop.gt.jsonl").read_text().splitlines()]


def test_the_warning_says_what_events_on_schedules_own_stream_read():
    # GIVEN the real trace and the events the engine recorded on the default stream
    events_ms = np.median([g["default_stream_ms"]["schedule"] for g in ground_truth()])
    # WHEN analysed with the loop's three phases
    run = load([str(RUN / "overlap_loop" / "report.sqlite.xz")], PHASES)
    # THEN one warning names schedule, and the reading it gives for schedule's own stream is the
    # events' median within 20 us (0.236 ms)
    said = [w for w in run.warnings if "'schedule'" in w and "never waits for" in w]
    assert len(said) == 1
    own_ms = float(re.search(r"would read ([0-9.]+) ms", said[0]).group(1))
    assert abs(own_ms - events_ms) < 0.020, (own_ms, events_ms)
    # and forward, which has the forward stream's work, is not named
    assert not any("'forward'" in w for w in run.warnings)


def test_the_warning_says_what_events_on_the_default_stream_read_for_process():
    # GIVEN the real trace and the events the engine recorded on the default stream, where its
    # scheduling runs: process launched nothing, so it inherits the forward stream, where it
    # reads 0 behind the next batch's forward
    events_ms = np.median([g["default_stream_ms"]["process"] for g in ground_truth()])
    # WHEN analysed with the loop's three phases
    run = load([str(RUN / "overlap_loop" / "report.sqlite.xz")], PHASES)
    # THEN one warning names process and gives what events on the default stream (its thread's
    # other phases' stream) read: the engine's own events' median within 20 us (0.317 ms)
    said = [w for w in run.warnings if "'process'" in w and "launched nothing" in w]
    assert len(said) == 1 and "also read on stream 7" in said[0]
    there_ms = float(re.search(r"they read ([0-9.]+) ms", said[0]).group(1))
    assert abs(there_ms - events_ms) < 0.020, (there_ms, events_ms)


def test_events_on_the_idle_default_stream_read_each_batchs_cpu_times():
    # GIVEN the events recorded on the default stream, batch by batch
    # WHEN compared with the CPU times of the trace's phase ranges, cycle by cycle
    run = load([str(RUN / "overlap_loop" / "report.sqlite.xz")], PHASES)
    cpu = {(p["cycle"], p["phase"]): p["cpu_ns"] / 1e6 for p in run.ranks[0].phases.to_pylist() if p["cycle"] is not None}
    truth = ground_truth()
    assert len(truth) == 60 and len(cpu) == 180
    # THEN schedule and process, which run on an idle default stream, read their CPU time in every
    # batch to within 30 us (the events' submission latency): what the warning's reading rests on
    for g in truth:
        for name in ("schedule", "process"):
            assert abs(g["default_stream_ms"][name] - cpu[(g["cycle"], name)]) < 0.030, (g["cycle"], name)
