"""A real H100 trace (nsys 2025.3.2) of kernels launched with programmatic dependent launch
(``launch/pdl_probe.cu``, recipe ``launch/h200_pdl.sh``): cudaLaunchKernelEx with programmatic
stream serialization, as TensorRT-LLM and FlashInfer launch on Hopper, so that a kernel starts
before the one before it on its stream ends (nsys records its end no earlier than that one's: a
60-us kernel started 9 us into an 80-us one reads as ending with it). Per
cycle, on one stream: draft (three such kernels), verify (a plain kernel, two such), sample (a
copy to the host, then a stream synchronize). ``pdl_events``: CUDA events at every phase
boundary (``.gt.jsonl``); ``pdl_cycle``: around the cycle only, so that the kernels overlap
across draft | verify too."""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3

import pytest
from conftest import SAMPLES

from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

PROBE = SAMPLES / "probes_h100" / "pdl"
CONFIG = PhaseConfig(phases=("draft", "verify", "sample"), skip_cycles=0)


def kernels_by_phase(tmp_path, mode: str) -> dict[tuple[int, str], list[tuple[int, int, int]]]:
    """From the raw SQLite, apart from tracerecon: per (cycle, phase) the kernels its CPU range
    launched, as (launch call's start, kernel start, kernel end), in launch order."""
    plain = tmp_path / f"{mode}.sqlite"
    with lzma.open(PROBE / f"pdl_{mode}.sqlite.xz") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(f"file:{plain}?mode=ro", uri=True)
    ranges = con.execute("select coalesce(n.text, s.value), n.start, n.end from NVTX_EVENTS n left join StringIds s on s.id = n.textId "
                         "where n.end is not null order by n.start").fetchall()
    launches = con.execute("select r.start, k.start, k.end from CUPTI_ACTIVITY_KIND_KERNEL k join CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "on r.correlationId = k.correlationId order by r.start").fetchall()
    con.close()
    out: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    cycle = -1
    for name, start, end in ranges:
        if name.startswith("cycle "):
            cycle = int(name.split()[1])
            continue
        out[(cycle, name)] = [x for x in launches if start <= x[0] <= end]
    return out


def test_kernels_overlapping_on_one_stream_read_as_the_events_at_each_boundary(tmp_path):
    # GIVEN the events run: nsys's own kernel table holds kernels of one stream that start before
    # the one before them ends (four of the six of each cycle), their ends in launch order
    ops = kernels_by_phase(tmp_path, "events")
    k = sorted(x for v in ops.values() for x in v)
    assert sum(b[1] < a[2] for a, b in zip(k, k[1:])) >= 4 * 40 - 1
    assert all(a[2] <= b[2] for a, b in zip(k, k[1:]))
    gt = [json.loads(line) for line in (PROBE / "pdl_events.gt.jsonl").read_text().splitlines()]
    # WHEN loaded
    phases = load([str(PROBE / "pdl_events.sqlite.xz")], CONFIG).ranks[0].phases.to_pylist()
    assert len(phases) == 3 * len(gt) == 120
    # THEN after the first cycle (the first launches' set-up), draft and verify read what the
    # events around them read, within 1.5 us, every cycle
    for p in phases:
        if p["cycle"] and p["phase"] in ("draft", "verify"):
            assert abs(p["gpu_ns"] - gt[p["cycle"]][p["phase"] + "_ms"] * 1e6) < 1_500, (p["cycle"], p["phase"], p["gpu_ns"], gt[p["cycle"]])


@pytest.mark.parametrize("mode", ["events", "cycle"])
def test_each_phase_of_overlapping_kernels_reads_from_the_end_of_the_work_before_it(tmp_path, mode):
    # GIVEN either run (events at every boundary, or around the cycle only)
    ops = kernels_by_phase(tmp_path, mode)
    # WHEN loaded
    phases = {(p["cycle"], p["phase"]): p for p in load([str(PROBE / f"pdl_{mode}.sqlite.xz")], CONFIG).ranks[0].phases.to_pylist()}
    # THEN each verify reads from the end of draft's work (an event after draft completes once all
    # of it has) to the end of its own, to the ns (verify's launches all come before draft's work
    # ends: the CPU is ahead)
    for c in range(40):
        draft_end = max(e for _, _, e in ops[(c, "draft")])
        verify_end = max(e for _, _, e in ops[(c, "verify")])
        assert max(r for r, _, _ in ops[(c, "verify")]) < draft_end
        assert phases[(c, "verify")]["gpu_ns"] == verify_end - draft_end, c
