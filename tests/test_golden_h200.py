"""Golden numbers on real H200 traces, checked against independent sources:
nsys's own `nvtx_gpu_proj_trace` CSVs (to the nanosecond) and CUDA-event ground truth."""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import DEMO, DEMO2, H200
from tracerecon.analysis.projection import equals, link_launches
from tracerecon.analysis.ranges import build_ranges
from tracerecon.nsys.sqlite_export import read_export
from tracerecon.api import load as analyze

TRACES = ["eagle_gpu_bound", "eagle_graph_verify", "eagle_launch_2proc", "eagle_gpu_rank0", "eagle_gpu_rank1"]


def nsys_csv(name):
    rows = list(csv.DictReader(open(H200 / f"{name}_nvtx_gpu_proj_trace.csv")))
    return {(int(r["PID"]), int(r["TID"]), int(r["Orig Start (ns)"])): r for r in rows}


def projected(name, drop_graph_launches=False):
    t = read_export(H200 / f"{name}.sqlite")
    ops = t.gpu_ops
    if drop_graph_launches:
        ops = ops.filter(pa.array(~equals(ops["kind"], "graph")))
    return t, build_ranges(t.nvtx_ranges, link_launches(ops, t.api_calls), 0).to_pylist()


@pytest.mark.parametrize("name", TRACES)
def test_projection_equals_nsys_to_the_nanosecond(name):
    # GIVEN nsys's own projection report; WHEN tracerecon projects the same export
    # (in graph mode nsys's report ignores graph launches: compare like with like)
    graph_mode = read_export(H200 / f"{name}.sqlite").info.graph_trace_mode == "Graph"
    _, ranges = projected(name, drop_graph_launches=graph_mode)
    ref = nsys_csv(name)
    matched = 0
    for r in ranges:
        row = ref.get((r["pid"], r["tid"], r["start_ns"]))
        if row is None:
            continue
        matched += 1
        start = int(row["Projected Start (ns)"])
        # THEN every range nsys reports has the same GPU start and end
        assert (r["gpu_start_ns"], r["gpu_end_ns"]) == (start, start + int(row["Projected Duration (ns)"])), r["name"]
        assert r["end_ns"] - r["start_ns"] == int(row["Orig Duration (ns)"])
    assert matched == len(ref)


@pytest.mark.parametrize("name", ["eagle_gpu_rank0", "eagle_gpu_rank1"])
def test_graph_mode_ranges_nsys_drops_are_projected(name):
    # GIVEN graph-trace mode, where nsys's report leaves out ranges whose GPU work is a graph launch
    _, ranges = projected(name)
    ref = nsys_csv(name)
    missing = [r for r in ranges if (r["pid"], r["tid"], r["start_ns"]) not in ref]
    assert missing and all(r["name"] == "draft" for r in missing)
    # THEN tracerecon projects them onto their graph launch
    assert all(r["gpu_start_ns"] is not None and r["n_gpu_ops"] >= 1 for r in missing)
    # and the cycles that hold them start at the graph launch, earlier than nsys says
    _, with_graphs = projected(name)
    cycles = [r for r in with_graphs if r["name"].startswith("cycle")]
    assert all(int(ref[(c["pid"], c["tid"], c["start_ns"])]["Projected Start (ns)"]) >= c["gpu_start_ns"] for c in cycles)


def test_node_mode_counts_every_node_kernel_of_a_graph_launch():
    # nsys counts one op per correlation id; draft's graph launch has 17 node kernels here
    _, ranges = projected("eagle_gpu_bound")
    draft = [r for r in ranges if r["name"] == "draft"]
    ref = nsys_csv("eagle_gpu_bound")
    assert all(int(ref[(r["pid"], r["tid"], r["start_ns"])]["NumGPUOps"]) == 1 for r in draft)
    assert all(r["n_gpu_ops"] == r["n_kernels"] == 17 for r in draft)


def test_correlation_ids_join_within_the_process():
    # GIVEN two processes on one GPU that share thousands of correlation ids
    t = read_export(H200 / "eagle_launch_2proc.sqlite")
    api = t.api_calls.filter(pc.is_valid(t.api_calls["correlation_id"]))
    by_corr = {}
    for p, c in zip(api["pid"].to_pylist(), api["correlation_id"].to_pylist()):
        by_corr.setdefault(c, set()).add(p)
    assert sum(1 for v in by_corr.values() if len(v) > 1) > 1000
    # WHEN ops are linked to their launching calls
    linked = link_launches(t.gpu_ops, t.api_calls)
    # THEN every op found its call, and no call starts after the op it launched
    assert linked["launch_tid"].null_count == 0
    assert pc.all(pc.less_equal(linked["launch_start_ns"], linked["start_ns"])).as_py()


def ground_truth(path):
    return {json.loads(line)["cycle"]: json.loads(line) for line in open(path)}


# Per-cycle agreement with the CUDA events of every H200 trace: tests/test_overlap_truth.py.


@pytest.mark.parametrize(
    "trace,gt_path", [(H200 / "eagle_gpu_bound.sqlite", H200 / "eagle_gpu_bound.gt.jsonl"), (DEMO / "gpu_bound", DEMO / "gpu_bound.gt.jsonl")], ids=["shared", "demo"]
)
def test_gpu_bound_cpu_timers_lie_both_ways(trace, gt_path):
    # GIVEN a GPU-bound engine whose CPU timers say verify is short and draft_re_extend long
    (rank,) = analyze([trace]).ranks
    ph = rank.phases.to_pylist()
    verdicts = {name: [p["verdict"] for p in ph if p["phase"] == name] for name in ("verify", "draft_re_extend")}
    # THEN verify under-reports and draft_re_extend over-reports, in most cycles
    assert verdicts["verify"].count("under") >= 0.9 * len(verdicts["verify"])
    assert verdicts["draft_re_extend"].count("over") >= 0.9 * len(verdicts["draft_re_extend"])
    # and the CPU numbers really are inverted against the CUDA-event truth
    gt = ground_truth(gt_path)
    steady = [c for c in gt.values() if c["cycle"] > 0]
    assert np.median([c["cpu_ms"]["verify"] for c in steady]) < np.median([c["gpu_event_ms"]["verify"] for c in steady])
    assert np.median([c["cpu_ms"]["draft_re_extend"] for c in steady]) > np.median([c["gpu_event_ms"]["draft_re_extend"] for c in steady])


def test_over_reporting_wait_is_attributed_to_verify():
    (rank,) = analyze([H200 / "eagle_gpu_bound.sqlite"]).ranks
    syncs = rank.syncs.filter(pc.greater(rank.syncs["waited_other_phase_ns"], 100_000)).to_pylist()
    assert syncs
    phases = rank.phases.to_pylist()
    for s in syncs:
        assert phases[s["phase_id"]]["phase"] == "draft_re_extend"
        assert s["waited_for_phase"] in ("verify", "draft_re_extend")
    assert any(s["waited_for_phase"] == "verify" or s["waited_other_phase_ns"] > 0.5 * s["blocked_ns"] for s in syncs)


def test_launch_bound_verify_is_flagged():
    # GIVEN 48 thin layers, where the GPU idles between kernels while the CPU launches
    (rank,) = analyze([DEMO / "launch_bound"]).ranks
    verify = [p for p in rank.phases.to_pylist() if p["phase"] == "verify"]
    # THEN the CPU timer and the GPU agree, and the cause says why: launch-bound
    assert [p["cause"] for p in verify].count("launch_bound") >= 0.9 * len(verify)
    assert all(p["gpu_busy_ns"] < 0.5 * p["gpu_span_ns"] for p in verify if p["cause"] == "launch_bound")
    assert [p["verdict"] for p in verify].count("agree") >= 0.9 * len(verify)


def test_two_processes_in_one_report_are_two_ranks():
    a = analyze([H200 / "eagle_launch_2proc.sqlite"])
    assert [r.rank for r in a.ranks] == [0, 1]
    assert len({r.source.pids for r in a.ranks}) == 2
    assert all(r.phases.num_rows == 48 for r in a.ranks)


def test_rank_files_take_rank_from_name():
    a = analyze([H200 / "eagle_gpu_rank1.sqlite", H200 / "eagle_gpu_rank0.sqlite"])
    assert [(r.rank, r.source.path.endswith(f"rank{r.rank}.sqlite"), r.source.how) for r in a.ranks] == [(0, True, "file name"), (1, True, "file name")]


def test_run_directory_is_an_input():
    a = analyze([DEMO2 / "nccl_gpu_bound"])
    assert [r.rank for r in a.ranks] == [0, 1]
    gt0 = ground_truth(DEMO2 / "nccl_gpu_bound.gt.r0.jsonl")
    assert a.ranks[0].phases.num_rows == 3 * len(gt0)


def test_failed_program_run_from_the_h200_is_reported():
    # `tracerecon run` on the H200 of a program that exited 3 kept its trace (sample_traces/demo_h200/exit3)
    meta = json.loads((DEMO / "exit3" / "run.json").read_text())
    assert meta["exit_code"] == 3 and meta["reports"][0]["sqlite"] == "report.sqlite"
    (rank,) = analyze([DEMO / "exit3"]).ranks
    assert rank.phases["phase"].to_pylist() == ["draft", "verify", "draft_re_extend"] * 3
