"""Across ranks, checked against numbers derived by hand from the SQLite files, and against the
demo engine's straggler run on two H200s (real NCCL)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from conftest import DEMO, DEMO2, PUBLIC, SAMPLES, need_public, run_cli
from conftest import H200 as H200_DIR
from nsys_factory import FakeTrace
from tracerecon.analysis import cross_rank
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load as analyze

U = 1000

RING = ["Ring_Simple_2MB_2nodes_2GPUs__ault43_483927.sqlite", "Ring_Simple_2MB_2nodes_2GPUs__ault44_739124.sqlite"]


def q(path, sql):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return con.execute(sql).fetchall()


def allreduce(path):
    (row,) = q(path, "select k.start, k.end from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName where s.value like 'ncclKernel%' or s.value like 'ncclDevKernel%'")
    (utc,) = q(path, "select utcEpochNs from TARGET_INFO_SESSION_START_TIME")[0]
    return row[0], row[1], utc


def test_two_hosts_aligned_on_their_all_reduce():
    need_public()
    files = [PUBLIC / "ZhiyiHu1999__DistributedSysLab_FS24" / f for f in RING]
    a = analyze(files)
    assert [r.rank for r in a.ranks] == [0, 1] and any("file order" in w for w in a.warnings)
    (s0, e0, _), (s1, e1, _) = allreduce(files[0]), allreduce(files[1])
    al = a.cross.alignment_of(1)
    # these were exported with --ts-normalize (EXPORT_PARAM_TIME_NORMALIZE = true): timestamps are
    # UTC epoch ns already (by hand: the first runtime call is 1726746483832507999 ns), so no
    # session offset; then the one all-reduce is made to end at the same moment on both hosts
    assert s0 > 1.7e18 and s1 > 1.7e18
    assert al.offset_ns == e0 - e1
    assert al.method == "utc timestamps + collectives"
    assert abs(al.offset_ns) < 10**9  # the two hosts' clocks agree to within a second
    assert al.offset_uncertainty_ns is None  # one collective cannot say how good that is
    (c0, c1) = a.cross.collectives.to_pylist()
    assert c0["skew_ns"] == abs((s1 + al.offset_ns) - s0)
    late = 1 if s1 + al.offset_ns > s0 else 0
    assert c0["last_rank"] == late
    early = c0 if late == 1 else c1
    assert early["wait_ns"] == min(c0["skew_ns"], early["end_ns"] - early["start_ns"])


def test_six_ranks_of_the_tree_run():
    need_public()
    files = sorted((PUBLIC / "ZhiyiHu1999__DistributedSysLab_FS24").glob("Tree_*.sqlite"))
    a = analyze(files)
    assert len(a.ranks) == 6
    assert all(c.n_collectives == 1 for c in a.cross.comm)
    assert a.cross.collectives.num_rows == 6


def test_one_report_of_two_processes_shares_a_clock_and_counts_nccl_time():
    need_public()
    path = PUBLIC / "GindaChen__nsys-ai" / "mfu_2gpu_before.sqlite"
    a = analyze([path], None)
    assert [x.offset_ns for x in a.cross.alignment] == [0, 0]
    assert [x.offset_uncertainty_ns for x in a.cross.alignment] == [0, 0]
    by_hand = dict(q(path, "select (k.globalPid >> 24) & 16777215, sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName where s.value like 'ncclDevKernel%' group by 1"))
    for r in a.ranks:
        assert a.cross.comm_of(r.rank).comm_ns == by_hand[r.source.pids[0]]


def test_straggler_is_named_and_the_other_rank_waits():
    # GIVEN rank 1 spins 3 ms on the CPU inside verify before its all-reduces (two H200s, NCCL)
    a = analyze([DEMO2 / "nccl_skew"])
    cp = a.cross.critical_path_json()
    # THEN rank 1 gated (nearly) every cycle, in verify
    assert cp["rank_counts"].get("1", 0) >= 27 and next(iter(cp["phase_counts"])) == "verify"
    # (rank 0 waited for it at the all-reduces in those cycles: each of them counts in both)
    assert cp["waited_for_counts"].get("1", 0) >= 27 and "0" not in cp["waited_for_counts"]
    r0, r1 = (r.phases.to_pandas() for r in a.ranks)
    v0, v1 = r0[r0.phase == "verify"], r1[r1.phase == "verify"]
    # and rank 0's verify is mostly waiting in the collectives, not compute
    assert v0.wait_ns.median() > 2_000_000 and v1.wait_ns.median() < 500_000
    assert v0.wait_ns.median() > 5 * v0.compute_ns.median()
    # the CPU-side truth: rank 1's naive verify timer includes its 3 ms spin
    gt1 = [json.loads(line) for line in open(DEMO2 / "nccl_skew.gt.r1.jsonl")]
    assert np.median([g["cpu_ms"]["verify"] for g in gt1]) > 3.0
    al = a.cross.alignment_of(1)
    assert al.method == "session start + collectives" and al.offset_uncertainty_ns is not None and al.offset_uncertainty_ns < 50_000


def test_a_straggler_held_up_in_draft_is_named_in_draft_though_it_stays_late_into_verify():
    # GIVEN two H200s, NCCL, draft and verify each with all-reduces (tensor-parallel draft): rank
    # 1 spins 3 ms on the CPU into draft on even cycles, rank 0 into verify on odd ones (the
    # recipe, `--skew 1:draft:3000:even --skew 0:verify:3000:odd`); a rank held up on its CPU
    # stays late into the collectives after, its GPU idle waiting for its launches
    a = analyze([SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases"])
    cp = a.cross.critical_path.to_pylist()
    # THEN cycle by cycle the critical path names the rank and phase the recipe held up (the
    # lateness carried into verify's all-reduces is not new there), in nearly every cycle
    held = [(1, "draft") if row["cycle"] % 2 == 0 else (0, "verify") for row in cp]
    assert len(cp) == 30 and sum((row["gating_rank"], row["gating_phase"]) == h for row, h in zip(cp, held)) >= 27


def test_report_json_has_cross_rank_fields():
    res = run_cli("report", str(DEMO2 / "nccl_skew"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    for r in doc["ranks"]:
        assert {"offset_ns", "offset_uncertainty_ns"} <= set(r)
        assert set(r["nccl"]) == {"comm_ms", "wait_ms", "n_collectives"} and r["nccl"]["n_collectives"] > 1000
    assert set(doc["critical_path"]) == {"rank_counts", "waited_for_counts", "phase_counts", "by_rank"}
    assert "straggler: rank 1" in run_cli("report", str(DEMO2 / "nccl_skew")).stdout


def test_diff_explains_graph_replay_against_eager_launches():
    res = run_cli("diff", str(DEMO / "launch_bound"), str(DEMO / "verify_graph"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    verify = next(p for p in doc["phases"] if p["phase"] == "verify")
    assert {"rank", "phase", "a_gpu_ms", "b_gpu_ms", "delta_gpu_ms", "a_cpu_ms", "b_cpu_ms", "explanation"} <= set(verify)
    # eager verify: 48 layers x (layer norm, matmul, gelu, matmul, residual add) + gather + head + argmax
    assert verify["a_eager_launches"] == 48 * 5 + 3 and verify["b_eager_launches"] == 0 and verify["b_graph_launches"] == 1
    assert verify["delta_gpu_ms"] < -2 and "CUDA-graph replay" in verify["explanation"]
    assert doc["cycles"]["delta_gpu_ms"] < -2


def test_diff_of_public_before_after_pair_matches_kernel_sums():
    need_public()
    d = PUBLIC / "GindaChen__nsys-ai"
    res = run_cli("diff", str(d / "mfu_2gpu_before.sqlite"), str(d / "mfu_2gpu_after.sqlite"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    sql = "select sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName where s.value = 'flash_fwd_kernel' and ((k.globalPid >> 24) & 16777215) = {pid}"
    a = analyze([d / "mfu_2gpu_before.sqlite"])
    b = analyze([d / "mfu_2gpu_after.sqlite"])
    for ra, rb, k in zip(a.ranks, b.ranks, doc["kernels"]):
        row = next(c for c in k["changes"] if c["kernel"] == "flash_fwd_kernel")
        (ta,), = q(d / "mfu_2gpu_before.sqlite", sql.format(pid=ra.source.pids[0]))
        (tb,), = q(d / "mfu_2gpu_after.sqlite", sql.format(pid=rb.source.pids[0]))
        assert row["a_ms"] == round(ta / 1e6, 6) and row["b_ms"] == round(tb / 1e6, 6)


def test_utc_normalized_exports_need_no_session_offset(tmp_path):
    # GIVEN two rank files exported with --ts-normalize (UTC timestamps) whose session starts differ

    paths = []
    for rank, (utc, shift) in enumerate(((1_000_000_000, 0), (1_500_000_000, 0))):
        t = FakeTrace()
        t.meta["EXPORT_PARAM_TIME_NORMALIZE"] = "true"
        t.range("verify", 10_000 + shift, 90_000 + shift)
        c = t.call("cudaLaunchKernel", 20_000, 21_000)
        t.kernel(c, 30_000, 80_000)
        p = t.write(tmp_path / f"r{rank}.sqlite")
        sqlite3.connect(p).executescript(f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({utc});")
        paths.append(p)
    a = analyze(paths)
    # THEN no offset is applied (the timestamps share the UTC clock), with no collective to refine on
    al = a.cross.alignment_of(1)
    assert (al.offset_ns, al.method, al.offset_uncertainty_ns) == (0, "utc timestamps", None)


def test_stragglers_leave_out_warm_up_cycles_and_say_when_no_collective_relates_the_ranks():
    # GIVEN two ranks of the speculative-decoding stand-in with no collective between them,
    # each with 16 cycles of which report leaves the first out as warm-up
    files = [str(H200_DIR / "eagle_gpu_rank0.sqlite"), str(H200_DIR / "eagle_gpu_rank1.sqlite")]
    # WHEN reported
    res = run_cli("report", *files)
    doc = json.loads(run_cli("report", "--json", *files).stdout)
    # THEN the critical path counts the 15 cycles every median is over
    assert [r["cycles"]["n"] for r in doc["ranks"]] == [15, 15]
    assert sum(doc["critical_path"]["rank_counts"].values()) == 15
    assert doc["critical_path"]["waited_for_counts"] == {}  # a rank that only finished last
    # and, nobody having waited for anybody, no rank is called a straggler; which ended last is
    # said to rest on clocks no collective aligned (rank 1's offset: its session start, ± ?)
    assert "straggler:" not in res.stdout and "last to finish: rank" in res.stdout and "of 15 cycles" in res.stdout
    assert "told by clocks no collective aligned" in " ".join(res.stdout.split())


def test_a_straggler_line_counts_gated_cycles_apart_from_those_it_only_finished_last():
    # GIVEN a critical path over 10 cycles: in cycle 0 rank 1 gated an all-reduce (rank 0 waited
    # 2 ms); in cycles 1-9 no collective related the ranks and rank 1 only ended last
    from dataclasses import replace
    from types import SimpleNamespace

    import pyarrow as pa

    from tracerecon import schema
    from tracerecon.analysis.cross_rank import CrossRank
    from tracerecon.present import straggler_lines

    rows = {"cycle": list(range(10)), "gating_rank": [1] * 10, "gating_phase": ["verify"] * 10,
            "how": ["collectives"] + ["latest end"] * 9, "max_wait_ns": [2_000_000] + [0] * 9,
            "waits_ns": [json.dumps({"0": 2_000_000, "1": 0})] + ["{}"] * 9}
    cross = CrossRank((), (), schema.empty(schema.COLLECTIVES), pa.table(rows, schema=schema.CRITICAL_PATH))
    analysis = SimpleNamespace(cross=cross, ranks=[SimpleNamespace(rank=0), SimpleNamespace(rank=1)])
    # WHEN its straggler lines are written
    (line,) = straggler_lines(analysis, cross.critical_path_json())
    # THEN one gated cycle with the 2 ms wait, and the nine others said apart
    assert line.startswith("straggler: rank 1 gated 1 of 10 cycles") and "waited 2.000 ms" in line and "last to finish in 9 more" in line
    assert "whole capture" not in line  # (no per-rank totals given)
    # WHEN rank 0 also waited 1.5 ms at collectives outside the cycles counted (warm-up)
    from tracerecon.analysis.cross_rank import RankComm
    comm = tuple(RankComm(rank=r, comm_ns=4_000_000, wait_ns=w, n_collectives=3, phase_wait_ns=np.zeros(0, np.int64))
                 for r, w in ((0, 3_500_000), (1, 0)))
    (line,) = straggler_lines(SimpleNamespace(cross=replace(cross, comm=comm), ranks=analysis.ranks), cross.critical_path_json())
    # THEN both are said: the cycles' 2 ms and the across-ranks table's whole-capture 3.5 ms
    assert "waited 2.000 ms in collectives (3.500 ms over the whole capture)" in line


def test_one_rank_of_a_collective_run_read_alone_says_its_waits_are_unknown(tmp_path):
    # GIVEN rank 0's export of a two-rank NCCL run (rank 1 a straggler in verify, so that rank 0
    # waits in verify's all-reduces), beside rank 1's in the run's folder
    alone = analyze([str(DEMO2 / "nccl_skew" / "rank0.sqlite")])
    both = analyze([str(DEMO2 / "nccl_skew")])
    # WHEN read alone THEN a warning says its collectives' waits are not told apart, naming the
    # other export beside it; read with its peer, nothing of the kind is said
    said = [w for w in alone.warnings if "communication kernels ran with other ranks whose traces are not in the input" in w]
    assert len(said) == 1 and said[0].endswith("give every rank's trace of the run together; "
                                               f"{DEMO2 / 'nccl_skew'} holds 1 other export (rank1.sqlite)"), alone.warnings
    assert not any("whose traces are not in the input" in w for w in both.warnings), both.warnings
    # AND a copy of the file alone in a folder is told to give every rank's trace
    lone = tmp_path / "rank0.sqlite"
    lone.write_bytes((DEMO2 / "nccl_skew" / "rank0.sqlite").read_bytes())
    assert any(w.endswith("(its wait ms reads 0, no phase's cause is comm_wait): give every rank's trace of the run together") for w in analyze([str(lone)]).warnings)
    # AND a one-GPU trace without communication says nothing of it
    assert not any("whose traces are not in the input" in w for w in analyze([str(H200_DIR / "eagle_gpu_bound.sqlite")]).warnings)
    # AND one process driving two GPUs whose collectives run between them is not told to give
    # other ranks' traces (its partners are its own GPUs: said apart, as one rank)
    t = FakeTrace()
    for c in range(4):
        b = 1000 * c
        t.cycle(c, b * U, (b + 100) * U, (b + 300) * U)
        for dev in (0, 1):
            t.kernel(t.call("cudaLaunchKernel", (b + 10 + dev) * U, (b + 11 + dev) * U), (b + 20) * U, (b + 80) * U, device=dev, stream=7 + dev)
            t.kernel(t.call("cudaLaunchKernel", (b + 110 + dev) * U, (b + 111 + dev) * U), (b + 120 + 30 * dev) * U, (b + 280) * U, device=dev,
                     stream=7 + dev, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    both_gpus = analyze([str(t.write(tmp_path / "sp.sqlite"))], PhaseConfig(phases=("draft", "verify"), skip_cycles=0)).warnings
    assert any("one process driving several GPUs is one rank" in w for w in both_gpus)
    assert not any("whose traces are not in the input" in w for w in both_gpus), both_gpus


def _data_parallel_files(tmp_path, names: list[str], collectives: bool = True) -> list[str]:
    """One machine's exports named ``names``, each one rank of a data-parallel run: 3 cycles of
    draft (a gemm) and verify (an all-reduce of a token count, ending together on every rank;
    with ``collectives`` False, a second gemm instead)."""
    paths = []
    for r, name in enumerate(names):
        t = FakeTrace()
        for k in range(3):
            b = 1000 * k + 1000
            t.cycle(k, b * U, (b + 300) * U, (b + 700) * U, pid=10 + r)
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=10 + r), (b + 15) * U, (b + 200) * U, pid=10 + r, name="gemm")
            t.kernel(t.call("cudaLaunchKernel", (b + 310) * U, (b + 312) * U, pid=10 + r), (b + 320 + 10 * r) * U, (b + 400) * U, pid=10 + r,
                     name="ncclDevKernel_AllReduce_Sum_i32_RING_LL" if collectives else "gemm")
        paths.append(str(t.write(tmp_path / f"{name}.sqlite")))
        with sqlite3.connect(paths[-1]) as db:
            db.executescript(f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
    return paths


@pytest.mark.parametrize("names,said", [
    (["rank0", "rank1", "rank3"], "rank 2 not in the input (ranks 0, 1, 3 read, numbered by their files' names)"),
    (["rank0", "rank3"], "ranks 1-2 not in the input (ranks 0, 3 read, numbered by their files' names)"),
    (["rank4", "rank5", "rank7"], "rank 6 not in the input (ranks 4, 5, 7 read, numbered by their files' names)"),
    (["rank0", "rank1", "rank2"], None),
    (["gpu1", "gpu2", "gpu3"], None),  # counted from 1
    (["trace_2", "trace_3", "trace_4"], None),  # from 1 or from 0: below the lowest is not said
    (["iter_100", "iter_200", "iter_300"], None),  # more missing than read: no ranks
    (["trace", "other", "third"], None),  # numbered by file order: no gap to tell
])
def test_ranks_missing_between_those_named_are_said_where_collectives_ran(tmp_path, names, said):
    # GIVEN a data-parallel run's exports, each rank's all-reduce of token counts, named by rank
    # WHEN read together
    run = analyze(_data_parallel_files(tmp_path, names), PhaseConfig(phases=("draft", "verify"), skip_cycles=0))
    # THEN ranks whose numbers are missing among the names are said (their waits cannot be seen)
    missing = [w for w in run.warnings if "not in the input (ranks " in w]
    if said is None:
        assert missing == [], run.warnings
    else:
        assert len(missing) == 1 and missing[0].startswith(said) and missing[0].endswith("give every rank's trace of the run together"), run.warnings


def test_ranks_missing_without_collectives_are_not_said(tmp_path):
    # GIVEN ranks 0 and 2 of a run whose ranks ran no collective (each its own engine)
    run = analyze(_data_parallel_files(tmp_path, ["rank0", "rank2"], collectives=False), PhaseConfig(phases=("draft", "verify"), skip_cycles=0))
    # THEN no rank's numbers say anything of another's (nothing waited for rank 1)
    assert not any("not in the input (ranks " in w for w in run.warnings), run.warnings


def _waits_and_gating(traces: list, tmp_path) -> tuple[list, list]:
    """Two ranks' traces written as exports of one machine (a GPU in common, one session start)
    and read with draft and verify: rank 0's (cycle, phase, wait us) where it waited, and each
    cycle's critical path by collectives as (cycle, rank, phase)."""
    paths = []
    for r, t in enumerate(traces):
        paths.append(t.write(tmp_path / f"rank{r}.sqlite"))
        with sqlite3.connect(paths[-1]) as db:
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             "insert into TARGET_INFO_GPU values (0, 'H200', 'A-gpu0', '0', 132), (1, 'H200', 'A-gpu1', '1', 132);"
                             f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
    run = analyze(paths, PhaseConfig(phases=("draft", "verify"), skip_cycles=0))
    waits = [(x["cycle"], x["phase"], x["wait_ns"] // U) for x in run.ranks[0].phases.to_pylist() if x["wait_ns"]]
    gated = [(x["cycle"], x["gating_rank"], x["gating_phase"]) for x in run.cross.critical_path.to_pylist() if x["how"] == "collectives"]
    return waits, gated


def _two_hold_ups(tmp_path, synced: bool) -> list:
    """2 ranks on one machine, 3 cycles (B = 1000 + 1000k us): draft [B, B+300], verify [B+300,
    B+700]; each phase launches a 40 us gemm (launched at base, runs base+5..base+45) and an
    all-reduce (launched base+10, starts when the gemm ends, ends 20 us after the last rank
    starts). Cycle 1 only: rank 1 spins 100 us before draft's launches and 150 before verify's.
    ``synced``: draft reads back with a stream synchronize at B+150 that returns once its
    all-reduce ended (both CPUs leave draft together)."""
    AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    traces = [FakeTrace(), FakeTrace()]
    for k in range(3):
        b = 1000 * k + 1000
        spin = {1: (100, 150)} if k == 1 else {}
        starts = [(b + 55 + spin.get(r, (0, 0))[0], b + 355 + spin.get(r, (0, 0))[1]) for r in range(2)]
        for r, t in enumerate(traces):
            d, v = spin.get(r, (0, 0))
            t.range(f"cycle {k}", b * U, (b + 720) * U, pid=10 + r)
            t.range("draft", b * U, (b + 300) * U, pid=10 + r)
            t.range("verify", (b + 300) * U, (b + 700) * U, pid=10 + r)
            for j, base in enumerate((b + 10 + d, b + 310 + v)):
                last = max(s[j] for s in starts)
                t.kernel(t.call("cudaLaunchKernel", base * U, (base + 2) * U, pid=10 + r), (base + 5) * U, (base + 45) * U, pid=10 + r, name="gemm")
                t.kernel(t.call("cudaLaunchKernel", (base + 10) * U, (base + 12) * U, pid=10 + r), starts[r][j] * U, (last + 20) * U, pid=10 + r, name=AR)
            if synced:
                done = max(s[0] for s in starts) + 20
                t.sync_record(t.call("cudaStreamSynchronize", (b + 150) * U, (max(b + 150, done) + 1) * U, pid=10 + r),
                              (b + 150) * U, (max(b + 150, done) + 1) * U, stream=7, pid=10 + r)
    return _waits_and_gating(traces, tmp_path)


def test_a_rank_held_up_anew_after_its_cpu_caught_up_is_named_where_it_was_held_up_anew(tmp_path):
    # GIVEN rank 1 held up twice in cycle 1, 100 us in draft and 150 us in verify, its CPU
    # caught up between (draft's synchronize returned when the all-reduce ended on both ranks)
    waits, gated = _two_hold_ups(tmp_path, synced=True)
    # THEN rank 0 waited 100 us in draft and 150 in verify (all-reduce starts B+55 against
    # B+155, B+355 against B+505), and cycle 1 is rank 1's verify hold-up (150 us of others'
    # waiting against 100; a review's shape, once named in draft: the verify idle was taken as
    # carried in from draft)
    assert waits == [(1, "draft", 100), (1, "verify", 150)]
    assert gated == [(1, 1, "verify")]


def _behind_into_verify(tmp_path, blocking: str) -> tuple[list, list]:
    """As ``_two_hold_ups``, but in cycle 1 rank 1's CPU spins 100 us before draft's launches
    and stays 100 us behind into verify, where it spins 20 us more. ``blocking``: "helper", a
    helper thread (tid 77) of each process blocks in a stream synchronize on its copy stream
    over [B+100, B+400] every cycle; "copy", each main thread copies a result off on stream 40
    right after launching draft's all-reduce (60 us) and synchronizes that stream, the CPU then
    working 230 us before verify (rank 1's copy, launched 100 us late, ends 11 us after its
    all-reduce does). (A reviewer's shapes.)"""
    AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    traces = [FakeTrace(), FakeTrace()]
    for k in range(3):
        b = 1000 * k + 1000
        late, extra = (100, 20) if k == 1 else (0, 0)
        bases = {}
        for r in range(2):
            d = b + 10 + (late if r == 1 else 0)
            v = (d + 77 + 230 if blocking == "copy" else b + 310 + (late if r == 1 else 0)) + (extra if r == 1 else 0)
            bases[r] = (d, v)
        starts = {r: (bases[r][0] + 45, bases[r][1] + 45) for r in range(2)}
        for r, t in enumerate(traces):
            pid = 10 + r
            t.range(f"cycle {k}", b * U, (b + 720) * U, pid=pid)
            t.range("draft", b * U, (b + 300) * U, pid=pid)
            t.range("verify", (b + 300) * U, (b + 700) * U, pid=pid)
            for j, base in enumerate(bases[r]):
                last = max(starts[q][j] for q in range(2))
                t.kernel(t.call("cudaLaunchKernel", base * U, (base + 2) * U, pid=pid), (base + 5) * U, (base + 45) * U, pid=pid, name="gemm")
                t.kernel(t.call("cudaLaunchKernel", (base + 10) * U, (base + 12) * U, pid=pid), starts[r][j] * U, (last + 20) * U, pid=pid, name=AR)
                if blocking == "copy" and j == 0:
                    c0 = base + 14
                    t.copy(t.call("cudaMemcpyAsync", c0 * U, (c0 + 2) * U, pid=pid), (c0 + 2) * U, (c0 + 62) * U, pid=pid, kind=2, stream=40)
                    t.sync_record(t.call("cudaStreamSynchronize", (c0 + 2) * U, (c0 + 63) * U, pid=pid), (c0 + 2) * U, (c0 + 63) * U, stream=40, pid=pid)
            if blocking == "helper":
                t.sync_record(t.call("cudaStreamSynchronize", (b + 100) * U, (b + 400) * U, pid=pid, tid=77), (b + 100) * U, (b + 400) * U, stream=40, pid=pid)
    return _waits_and_gating(traces, tmp_path)


@pytest.mark.parametrize("blocking", ["helper", "copy"])
def test_a_synchronize_that_did_not_wait_for_the_collective_leaves_the_lateness_carried(tmp_path, blocking):
    # GIVEN rank 1 behind by its 100 us draft spin into verify (20 us more there), with a
    # synchronize around draft's all-reduce's end that is not its collectives' thread waiting
    # for it: a helper thread's, or the main thread's on a copy launched late after it
    waits, gated = _behind_into_verify(tmp_path, blocking)
    # THEN rank 0 waited 100 us in draft and 120 in verify, 200 of them the draft spin's: cycle
    # 1 is rank 1's draft (the rule taking any synchronize through the all-reduce's end as its
    # CPU caught up named verify)
    assert waits == [(1, "draft", 100), (1, "verify", 120)]
    assert gated == [(1, 1, "draft")]


def _data_parallel_steps(tmp_path, unmarked: dict[int, set[int]]) -> list:
    """Four data-parallel ranks' exports of one machine (GPUs 0-3, one session start), 4 steps
    of 1 ms (b = (k + 1) ms): each runs its attention from b+12 us (rank 0's 100, 150, 200, 250
    us in steps 0-3, the others' 20 us, 5 in step 1) and then one all-gather, which ends 10 us
    after its last rank started it; a step marks a ``cycle N`` and a ``forward`` range (b to
    b+400), numbered by the rank's own count, except the steps ``unmarked[rank]`` (no range)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ag = "ncclDevKernel_AllGather_RING_LL"
    att0 = [100, 150, 200, 250]
    traces, own, paths = [FakeTrace() for _ in range(4)], [0] * 4, []
    for k in range(4):
        b = 1000 * (k + 1)
        att = [att0[k]] + [5 if k == 1 else 20] * 3
        ag_end = b + 12 + max(att) + 10
        for r, t in enumerate(traces):
            if k not in unmarked.get(r, set()):
                t.range(f"cycle {own[r]}", b * U, (b + 400) * U, pid=10 + r)
                t.range("forward", b * U, (b + 400) * U, pid=10 + r)
                own[r] += 1
            t.kernel(t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U, pid=10 + r), (b + 12) * U, (b + 12 + att[r]) * U, pid=10 + r, device=r, name="attn")
            t.kernel(t.call("cudaLaunchKernel", (b + 20) * U, (b + 22) * U, pid=10 + r), (b + 12 + att[r]) * U, ag_end * U, pid=10 + r, device=r, name=ag)
    for r, t in enumerate(traces):
        paths.append(t.write(tmp_path / f"rank{r}.sqlite"))
        with sqlite3.connect(paths[-1]) as db:
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             + "".join(f"insert into TARGET_INFO_GPU values ({i}, 'H200', 'A-gpu{i}', '{i}', 132);" for i in range(4))
                             + f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
    run = analyze(paths, PhaseConfig(phases=("forward",), skip_cycles=0))
    return [(x["cycle"], x["gating_rank"], json.loads(x["waits_ns"])) for x in run.cross.critical_path.to_pylist()]


def test_ranks_that_left_a_step_unmarked_count_their_cycles_on_in_step_after_it(tmp_path):
    # GIVEN _data_parallel_steps with ranks 1-3's idle step 1 left unmarked (SGLang's DP
    # attention runs an idle batch's forward without the scheduler's ranges): their own cycles
    # 0, 1, 2 are rank 0's 0, 2, 3
    path = _data_parallel_steps(tmp_path, {1: {1}, 2: {1}, 3: {1}})
    # THEN each step counts in rank 0's cycle, rank 0 gating it and each other rank waiting
    # (rank 0's attention - its own) at its all-gather: 100 - 20 = 80, 150 - 5 = 145, 180 and
    # 230 us (one shift for the whole capture, +1 from its last two cycles, counted their cycle
    # 0 as 1 and merged step 0's waits into step 1's: 225 us, no cycle 0)
    want = {0: 80, 1: 145, 2: 180, 3: 230}
    assert path == [(c, 0, {"0": 0, "1": w * U, "2": w * U, "3": w * U}) for c, w in want.items()]
    # AND where only rank 2 left it unmarked, the same (ranks 1 and 3 counted as they mark)
    assert _data_parallel_steps(tmp_path / "one", {2: {1}}) == path
    # AND where rank 0 alone left step 1 unmarked, that step has no number in its count (its
    # cycle 1 is step 2): cycles 0, 1, 2 read 80, 180 and 230 us (counted with the others' next
    # cycle, step 1's 145 us made cycle 1 read 325)
    assert _data_parallel_steps(tmp_path / "first", {0: {1}}) == [(c, 0, {"0": 0, "1": w * U, "2": w * U, "3": w * U}) for c, w in ((0, 80), (1, 180), (2, 230))]


def _dp_steps_async(tmp_path, ranks: int, steps: int, marked=lambda r, k: True, deferred=lambda r, k: False,
                    attention=lambda r, k: 40 + 13 * r + 7 * k) -> list:
    """Data-parallel ranks' exports of one machine (GPU r, pid 10 + r), one stream each, the CPU
    600 us ahead of the GPU: step k's GPU base b = 2000 (k + 1) us. A step: attention
    (``attention(r, k)`` us, from b + 12), one world all-gather (starting when the attention
    ends, ending on every rank 10 us after its last rank started it), lm_head (7 + 3r us). Its
    `cycle N` and `forward` ranges (N the rank's own count, unless not ``marked(r, k)``) span
    b - 600 to b + 1390; launches at range start + 5, 7, 9 us; where ``deferred(r, k)``, the
    all-gather and lm_head only 1 and 2 us after the next step's range opens (b + 1401: the
    kernel starts 3 us after its launch)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    traces, own, free = [FakeTrace() for _ in range(ranks)], [0] * ranks, [0] * ranks
    for k in range(steps):
        b = 2000 * (k + 1)
        for r, t in enumerate(traces):
            if marked(r, k):
                t.range(f"cycle {own[r]}", (b - 600) * U, (b + 1390) * U, pid=10 + r)
                t.range("forward", (b - 600) * U, (b + 1390) * U, pid=10 + r)
                own[r] += 1
        launch = [(b + 1401, b + 1402) if deferred(r, k) else (b - 593, b - 591) for r in range(ranks)]
        ag_start = []
        for r, t in enumerate(traces):
            s = max(free[r], b - 592, b + 12)
            t.kernel(t.call("cudaLaunchKernel", (b - 595) * U, (b - 593) * U, pid=10 + r), s * U, (s + attention(r, k)) * U, pid=10 + r, device=r, name="attn")
            ag_start.append(max(s + attention(r, k), launch[r][0] + 3))
        ag_end = max(ag_start) + 10
        for r, t in enumerate(traces):
            t.kernel(t.call("cudaLaunchKernel", launch[r][0] * U, (launch[r][0] + 2) * U, pid=10 + r), ag_start[r] * U, ag_end * U, pid=10 + r, device=r,
                     name="ncclDevKernel_AllGather_RING_LL")
            s = max(ag_end, launch[r][1] + 3)
            t.kernel(t.call("cudaLaunchKernel", launch[r][1] * U, (launch[r][1] + 2) * U, pid=10 + r), s * U, (s + 7 + 3 * r) * U, pid=10 + r, device=r, name="lm_head")
            free[r] = s + 7 + 3 * r
    paths = []
    for r, t in enumerate(traces):
        paths.append(t.write(tmp_path / f"rank{r}.sqlite"))
        with sqlite3.connect(paths[-1]) as db:
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             + "".join(f"insert into TARGET_INFO_GPU values ({i}, 'H200', 'A-gpu{i}', '{i}', 132);" for i in range(ranks))
                             + f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
    run = analyze(paths, PhaseConfig(phases=("forward",), skip_cycles=0))
    return [(x["cycle"], x["gating_rank"], [w // U for _, w in sorted(json.loads(x["waits_ns"]).items(), key=lambda kv: int(kv[0]))])
            for x in run.cross.critical_path.to_pylist()]


def test_a_collective_launched_past_its_cycle_renumbers_no_rank(tmp_path):
    # GIVEN _dp_steps_async's four ranks, six steps; in each, rank r's all-gather starts at
    # b + 12 + 40 + 13r + 7k, rank 3's last: the others wait 39, 26, 13 and 0 us
    usual = [39, 26, 13, 0]
    # WHEN rank 0 launches step 2's (its only collective) only in step 3's range: it starts at
    # 6000 + 1404 = 7404, where ranks 1-3 started theirs at 6066 + 13r: they wait 1325, 1312
    # and 1299 us
    path = _dp_steps_async(tmp_path / "first", 4, 6, deferred=lambda r, k: (r, k) == (0, 2))
    # THEN step 2 is cycle 2 and rank 0 gated it (ranks 1-3 counted their cycle 2, which holds
    # one collective rank 0 counts in its cycle 3, as their cycle 3, merging both cycles' waits)
    assert path == [(c, 0, [0, 1325, 1312, 1299]) if c == 2 else (c, 3, usual) for c in range(6)]
    # AND where rank 1 launches steps 2 and 3's late, both count in their own cycles, rank 1
    # gating them: step 2's starts at 7404 (the others at 6066, 6092, 6105: waits 1338, 1312,
    # 1299), step 3's at 9404 (its attention began at 8012: the others at 8073, 8099, 8112)
    path = _dp_steps_async(tmp_path / "twice", 4, 7, deferred=lambda r, k: r == 1 and k in (2, 3))
    assert path == [(2, 1, [1338, 0, 1312, 1299]) if c == 2 else (3, 1, [1331, 0, 1305, 1292]) if c == 3 else (c, 3, usual) for c in range(7)]


def test_adjacent_steps_left_unmarked_by_the_first_rank_and_another_count_apart(tmp_path):
    # GIVEN _dp_steps_async's four ranks, six steps, rank 0 idle in step 1 and rank 1 in step 2
    # (5 and 6 us of attention), neither marking it: rank 0's cycles 0-4 are steps 0, 2-5
    idle = {(0, 1), (1, 2)}
    path = _dp_steps_async(tmp_path, 4, 6, marked=lambda r, k: (r, k) not in idle,
                           attention=lambda r, k: 5 + r if (r, k) in idle else 40 + 13 * r + 7 * k)
    # THEN step 1 has no number; cycle 1 is step 2 alone: the all-gather starts at b + 12 + 54,
    # 12 + 6, 12 + 80 and 12 + 93 us: waits 39, 87, 13, 0 (step 1's waits were added into it)
    assert path == [(c, 3, [39, 87, 13, 0] if c == 1 else [39, 26, 13, 0]) for c in range(5)]


def test_a_collective_the_first_rank_ran_unmarked_counts_in_no_cycle_though_one_rank_launched_it_late():
    # GIVEN two collectives of four ranks, each rank's cycle at them counted as rank 0 counts
    # (-1: none) and whether its own cycle there has no number in that count (rank 0 left the
    # step unmarked): at the first, rank 0 ran it in no cycle, ranks 1 and 3 in cycles with no
    # number, rank 2 (which launched it late, in its next step's range) in one counted 2; at the
    # second, ranks 0, 2 and 3 in cycle 2 and rank 1 in one with no number; rank 2 last at both
    cycle = np.array([[-1, 2], [-1, -1], [2, 2], [-1, 2]], np.int64)
    unnumbered = np.array([[False, False], [True, True], [False, False], [True, False]])
    part, last = np.ones((4, 2), bool), np.array([2, 2])
    # WHEN their cycles are chosen
    got = cross_rank.collective_cycles(cycle, part, last, unnumbered)
    # THEN the first counts in none (two ranks' cycles have no number, one rank's says 2: it
    # put the step rank 0 did not mark into the next step's cycle, with its waits), the second
    # in cycle 2 (three say so)
    assert got.tolist() == [-1, 2]
    assert cross_rank.collective_cycles(cycle, part, last).tolist() == [2, 2]  # (unnumbered not told: the late rank decides)


def test_cycles_without_collectives_count_on_past_a_step_the_first_rank_left_unmarked():
    # GIVEN two ranks' cycles at six collectives, one a step (steps 0-5): rank 1 marks every step
    # (its cycle k is step k); rank 0 leaves steps 2 and 5 unmarked (its cycles 0, 1, 2, 3 are
    # steps 0, 1, 3, 4); rank 1's cycles 6-8 hold no collective both ran (another rank's capture
    # ended), nor does its cycle 3 (a step without a collective)
    # (rows: ranks; columns: the collectives of steps 0, 1, 2, 3 (rank 0's alone), 4, 5)
    cycle = np.array([[0, 1, -1, 2, 3, -1], [0, 1, 2, -1, 4, 5]], np.int64)
    took_part = np.array([[True] * 6, [True, True, True, False, True, True]])
    count = cross_rank.cycle_counts(cycle, took_part)
    # THEN rank 1's steps 2 and 5 have no number in rank 0's count; step 3 (no collective) counts
    # on from step 1 less the unnumbered step 2 (2), step 4 as 3, and steps 6-8 count on from
    # step 4 less step 5: 4, 5, 6 (the shift of the last cycle with collectives, none, left them
    # none)
    assert count.counted(1, np.arange(9)).tolist() == [0, 1, -1, 2, 3, -1, 4, 5, 6]


def _two_groups_one_rank_splitting_step_3(splitter: int) -> list:
    """Two communicator groups of one report, {0, 2} and {1, 3} (told apart by their ends):
    each step (b = 1000k us, 6 steps) each group runs two all-reduces, group {0, 2}'s ending at
    b+110 and b+410, group {1, 3}'s at b+260 and b+610, each 10 us after its last rank started
    it. Rank ``splitter`` marks step 3 as two cycle ranges, the second holding the step's second
    all-reduce, which it reaches 150 us late. Returns the critical path's (cycle, gating rank,
    waits in us)."""
    from tracerecon.analysis.cross_rank import RankView, analyze_cross_rank
    import pyarrow as pa

    views = []
    for rank in range(4):
        split = rank == splitter
        at_us = (250, 600) if rank % 2 else (100, 400)
        starts, ends, phase_of, cycles = [], [], [], []
        own = 0
        for k in range(6):
            b = 1000 * k
            for j, at in enumerate(at_us):
                late = 150 if k == 3 and j == 1 and rank % 2 == splitter % 2 else 0
                starts.append((b + at + (late if split else 0)) * U)
                ends.append((b + at + 10 + late) * U)
                phase_of.append(own + j if split and k == 3 else own)
            for _ in range(2 if split and k == 3 else 1):
                cycles.append((own, k))  # (its own cycle, the step it ran in)
                own += 1
        n = len(starts)
        ops = pa.table({"kind": pa.array(["kernel"] * n).dictionary_encode(),
                        "name": pa.array(["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] * n).dictionary_encode(),
                        "start_ns": pa.array(starts, pa.int64()), "end_ns": pa.array(ends, pa.int64()), "phase_id": pa.array(phase_of, pa.int64())})
        ends_c = [(1000 * k + 900) * U for _, k in cycles]  # (every rank's cycle of step k ends at k ms + 900 us)
        phases = pa.table({"cycle": pa.array([c for c, _ in cycles], pa.int64()), "phase": pa.array(["forward"] * len(cycles)),
                           "gpu_end_ns": pa.array(ends_c, pa.int64()), "cpu_end_ns": pa.array(ends_c, pa.int64()),
                           "gpu_ns": pa.array([500 * U] * len(cycles), pa.int64()), "cpu_ns": pa.array([600 * U] * len(cycles), pa.int64())})
        views.append(RankView(rank, "one report", None, ops, phases))
    cross = analyze_cross_rank(views)
    return [(x["cycle"], x["gating_rank"], {int(k): v // U for k, v in json.loads(x["waits_ns"]).items()}) for x in cross.critical_path.to_pylist()]


def test_a_rank_splitting_a_step_in_another_group_than_the_first_ranks_keeps_its_late_collective_in_a_cycle():
    # GIVEN _two_groups_one_rank_splitting_step_3, the splitting rank in the first rank's group
    # (2) or in the other (3): its second range has no number in its group's count (it would
    # count as the step's own), and its group's first rank ran that all-reduce in cycle 3
    # THEN both read alike: cycle 3 gated by the splitting rank, its partner waiting 150 us
    # (where the splitter was rank 3, its cycle with no number voted the all-reduce into no
    # cycle, as where the first rank left a step unmarked: rank 0, not in that group, was asked)
    assert _two_groups_one_rank_splitting_step_3(2) == [(3, 2, {0: 150, 1: 0, 2: 0, 3: 0})]
    assert _two_groups_one_rank_splitting_step_3(3) == [(3, 3, {0: 0, 1: 150, 2: 0, 3: 0})]


def test_a_collective_the_first_rank_launched_late_in_the_first_step_renumbers_nothing(tmp_path):
    # GIVEN _dp_steps_async's four ranks, six steps, rank 0 launching step 0's all-gather (its
    # only collective) only in step 1's range: it starts at 2000 + 1404 = 3404 us, where ranks
    # 1-3 started theirs at 2052 + 13r
    path = _dp_steps_async(tmp_path, 4, 6, deferred=lambda r, k: (r, k) == (0, 0))
    # THEN step 0 is cycle 0, rank 0 gating it, the others waiting 1339, 1326 and 1313 us (the
    # path began with no difference, so the odd first one cost no change: ranks 1-3's cycle 0
    # counted 1, cycle 1 none, steps 0 and 1 merged into cycle 1)
    assert path == [(0, 0, [0, 1339, 1326, 1313])] + [(c, 3, [39, 26, 13, 0]) for c in range(1, 6)]


AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def two_machines_drifting(tmp_path, drift_us: int, late: dict[int, int] | None = None) -> list[str]:
    """Two ranks on two machines (their GPU UUIDs differ), 20 cycles of 200 us from 1000 us:
    a 50 us gemm from b+10 (b+10+late[c] on rank 1 in cycle c), then an all-reduce from the
    gemm's end to the last arrival + 20 us, on both. Rank 1's clock gains ``drift_us`` over
    the 4 ms from 1000 us (its times t + drift (t - 1000 us) / 4 ms); both sessions began at
    the same UTC time."""
    import sqlite3

    from nsys_factory import FakeTrace

    U = 1000
    late = late or {}
    t0, t1 = 1000 * U, 1000 * U + 20 * 200 * U
    paths = []
    for r in range(2):
        t = FakeTrace()
        ck = (lambda g: g) if r == 0 else (lambda g: int(g + drift_us * U * (g - t0) / (t1 - t0)))
        for c in range(20):
            b = t0 + c * 200 * U
            arrive = {q: b + (60 + (late.get(c, 0) if q == 1 else 0)) * U for q in range(2)}
            t.range(f"cycle {c}", ck(b), ck(b + 150 * U), pid=10 + r)
            t.range("forward", ck(b), ck(b + 150 * U), pid=10 + r)
            t.kernel(t.call("cudaLaunchKernel", ck(b + 5 * U), ck(b + 8 * U), pid=10 + r), ck(arrive[r] - 50 * U), ck(arrive[r]), pid=10 + r, device=r, name="gemm")
            t.kernel(t.call("cudaLaunchKernel", ck(b + 10 * U), ck(b + 13 * U), pid=10 + r), ck(arrive[r]), ck(max(arrive.values()) + 20 * U), pid=10 + r,
                     device=r, name=AR)
        p = t.write(tmp_path / f"rank{r}.sqlite")
        with sqlite3.connect(p) as db:
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             f"insert into TARGET_INFO_GPU values ({r}, 'H200', 'machine{r}-gpu{r}', '{r}', 132);"
                             "create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer);"
                             f"insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
        paths.append(str(p))
    return paths


def test_a_clock_drifting_on_another_machine_invents_no_waits_and_hides_none(tmp_path):
    from tracerecon.api import load

    # GIVEN two machines, rank 1's clock gaining 80 us over the capture (an exaggerated drift),
    # both ranks reaching every all-reduce at the same instant but in cycle 7, where rank 1's
    # gemm runs 30 us late (rank 0 waits 30 us)
    a = load(two_machines_drifting(tmp_path, 80, late={7: 30}), PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN each wait is the truth: 30 us for rank 0 in cycle 7, 0 elsewhere (one offset had
    # invented waits of up to 20 us at the capture's ends), and only cycle 7 names a straggler
    waits = {(r["rank"], r["cycle"]): r["wait_ns"] for r in a.cross.collectives.to_pylist()}
    assert {k: w for k, w in waits.items() if w > 500} == {(0, 7): 30_000}
    assert [(r["cycle"], r["gating_rank"]) for r in a.cross.critical_path.to_pylist()] == [(7, 1)]
    # and a warning says the drift: the all-reduces end at b+80 us (b+110 in cycle 7), from
    # 1080 to 4880 us, 3.8 ms, at 80 us per 4 ms: +76.0 us (+20000.0 ppm)
    (said,) = [w for w in a.warnings if "clock drifts" in w]
    assert said.startswith("rank 1's clock drifts +76.0 us against rank 0's over the capture (+20000.0 ppm, from the ends of the 20 collectives")
    # and its offset's uncertainty holds the drift's half at the capture's ends (38 us at least)
    assert a.cross.alignment[1].offset_uncertainty_ns >= 38_000


def test_a_clock_of_another_machine_without_drift_is_read_with_one_offset(tmp_path):
    from tracerecon.api import load

    # GIVEN the same two machines with no drift, rank 1 30 us late in cycle 7
    a = load(two_machines_drifting(tmp_path, 0, late={7: 30}), PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN no drift is said, and the waits are the truth
    assert not [w for w in a.warnings if "clock drifts" in w]
    waits = {(r["rank"], r["cycle"]): r["wait_ns"] for r in a.cross.collectives.to_pylist()}
    assert {k: w for k, w in waits.items() if w > 500} == {(0, 7): 30_000}


@pytest.mark.parametrize("broadcasts", [(), tuple(range(15, 20)), tuple(range(20))])
def test_a_drifting_machines_ranks_that_meet_rank_0_only_through_another_are_read_with_its_drift(tmp_path, broadcasts):
    import sqlite3

    from nsys_factory import FakeTrace
    from tracerecon.api import load

    # GIVEN rank 0 on machine A; ranks 1 and 2 on machine B, whose clock gains 80 us over the 4 ms
    # from 1000 us; 20 cycles of 200 us (b = 1000 + 200 c us): a gemm b+10..b+60 on each, an
    # all-reduce of ranks 0 and 1 b+60..b+80, an all-gather of ranks 1 and 2 b+100..b+120: every
    # rank arrives at each at the same instant; ranks 0 and 2 also broadcast b+140..b+150 in the
    # cycles ``broadcasts`` (rank 2's offset then refined apart from rank 1's: by the drift at
    # cycles 15-19, it had kept rank 1's line and read 31 us off; met in all 20, 1.4 us)
    U = 1000
    t0, t1 = 1000 * U, 1000 * U + 20 * 200 * U
    paths = []
    for r in range(3):
        t = FakeTrace()
        ck = (lambda g: g) if r == 0 else (lambda g: g + int(80 * U * (g - t0) / (t1 - t0)))
        for c in range(20):
            b = t0 + c * 200 * U
            t.range(f"cycle {c}", ck(b), ck(b + 180 * U), pid=10 + r)
            t.range("forward", ck(b), ck(b + 180 * U), pid=10 + r)
            t.kernel(t.call("cudaLaunchKernel", ck(b + 5 * U), ck(b + 8 * U), pid=10 + r), ck(b + 10 * U), ck(b + 60 * U), pid=10 + r, device=r, name="gemm")
            if r in (0, 1):
                t.kernel(t.call("cudaLaunchKernel", ck(b + 10 * U), ck(b + 13 * U), pid=10 + r), ck(b + 60 * U), ck(b + 80 * U), pid=10 + r, device=r, name=AR)
            if r in (1, 2):
                t.kernel(t.call("cudaLaunchKernel", ck(b + 14 * U), ck(b + 16 * U), pid=10 + r), ck(b + 100 * U), ck(b + 120 * U), pid=10 + r, device=r,
                         name="ncclDevKernel_AllGather_RING_LL")
            if r in (0, 2) and c in broadcasts:
                t.kernel(t.call("cudaLaunchKernel", ck(b + 17 * U), ck(b + 18 * U), pid=10 + r), ck(b + 140 * U), ck(b + 150 * U), pid=10 + r, device=r,
                         name="ncclDevKernel_Broadcast_RING_LL")
        p = t.write(tmp_path / f"rank{r}.sqlite")
        gpus = [(0, "A-gpu0")] if r == 0 else [(0, "B-gpu0"), (1, "B-gpu1")]
        with sqlite3.connect(p) as db:
            db.executescript("create table TARGET_INFO_GPU (id integer, name text, uuid text, busLocation text, smCount integer);"
                             + "".join(f"insert into TARGET_INFO_GPU values ({i}, 'H200', '{u}', '{i}', 132);" for i, u in gpus)
                             + f"create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer); insert into TARGET_INFO_SESSION_START_TIME values ({5 * 10**18});")
        paths.append(str(p))
    a = load(paths, PhaseConfig(phases=("forward",), skip_cycles=0))
    # THEN nobody waits anywhere and no cycle names a straggler (rank 2, which meets rank 0 only
    # through rank 1, had been left on one offset: rank 1 "waited" up to 20 us at their
    # all-gathers), and one warning names machine B's two ranks
    assert [r["wait_ns"] for r in a.cross.collectives.to_pylist() if r["wait_ns"] > 500] == []
    assert a.cross.critical_path.num_rows == 0
    (said,) = [w for w in a.warnings if "drifts" in w]
    assert said.startswith("the clock of ranks 1, 2 (one machine's) drifts +76.0 us against rank 0's over the capture")
