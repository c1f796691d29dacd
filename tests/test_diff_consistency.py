"""``diff`` and the TUI's phase detail take the medians ``report`` takes (warm-up cycles left
out), apply each run's own phase maps, and never fail on a side without phases; the same export
given twice is refused rather than read as two ranks."""

from __future__ import annotations

import json
import sqlite3
import statistics

from conftest import DEMO, DEMO2, H200, SAMPLES, run_cli
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.detail import phase_detail
from tracerecon.api import load

EAGLE = H200 / "eagle_gpu_bound.sqlite"


def nvtx_cpu_ms(path, name: str) -> list[float]:
    """The CPU duration of every range called ``name``, in start order, straight from the export."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = con.execute("select e.end - e.start from NVTX_EVENTS e left join StringIds s on s.id = e.textId "
                       "where coalesce(e.text, s.value) = ? and e.end is not null order by e.start", (name,)).fetchall()
    return [r[0] / 1e6 for r in rows]


def test_diff_leaves_out_the_warm_up_cycle_as_report_does():
    # GIVEN the README's trace, whose first cycle is a warm-up outlier (report: 23 of 24 cycles)
    # WHEN it is compared with itself
    res = run_cli("diff", str(EAGLE), str(EAGLE), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # THEN each phase's CPU median is that of its NVTX ranges without the first cycle's, read
    # from the export with SQL (all 24 give another number)
    for p in doc["phases"]:
        cpu = nvtx_cpu_ms(EAGLE, p["phase"])
        assert len(cpu) == 24
        assert abs(p["a_cpu_ms"] - statistics.median(cpu[1:])) < 1e-6
        assert abs(p["a_cpu_ms"] - statistics.median(cpu)) > 1e-4 or p["phase"] != "draft_re_extend"
    # and the cycle line counts the 23 cycles report shows
    rep = json.loads(run_cli("report", str(EAGLE), "--json").stdout)
    assert doc["cycles"]["per_rank"][0]["a_n"] == rep["ranks"][0]["cycles"]["n"] == 23
    assert doc["cycles"]["a_gpu_ms"] == rep["ranks"][0]["cycles"]["gpu_ms_median"]


def test_diff_with_a_side_without_phases_prints_what_it_has():
    # GIVEN run A with the default phases and B, a vLLM trace none of whose ranges is named so
    # WHEN compared, as text and as JSON
    for extra in ((), ("--json",)):
        res = run_cli("diff", str(DEMO / "gpu_bound"), str(SAMPLES / "engines_h200" / "vllm_v1" / "report.sqlite.xz"), *extra)
        # THEN no failure: A's phases are listed as gone in B, the cycle delta unknown
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    doc = json.loads(res.stdout)
    assert doc["cycles"]["b_gpu_ms"] is None and doc["cycles"]["delta_gpu_ms"] is None
    assert all("gone in B" in p["explanation"] for p in doc["phases"])


def test_diff_applies_each_runs_own_phase_maps():
    # GIVEN two run directories of two engines, each with the phase maps its preset recorded
    a, b = SAMPLES / "engines_h200" / "vllm_v1", SAMPLES / "engines_h200" / "sglang_normal"
    # WHEN compared
    doc = json.loads(run_cli("diff", str(a), str(b), "--json").stdout)
    # THEN draft and verify are found on both sides, as `report` of each finds them
    for name in ("draft", "verify"):
        p = next(p for p in doc["phases"] if p["phase"] == name)
        for side, run in (("a", a), ("b", b)):
            rep = json.loads(run_cli("report", str(run), "--json").stdout)
            want = next(x for x in rep["ranks"][0]["phases"] if x["phase"] == name)
            assert p[f"{side}_gpu_ms"] == want["gpu_ms_median"]


def test_the_same_export_given_twice_is_refused():
    # GIVEN a two-rank run directory given twice (as itself, and as one of its files)
    for args in ((DEMO2 / "nccl_skew", DEMO2 / "nccl_skew"), (DEMO2 / "nccl_skew", DEMO2 / "nccl_skew" / "rank1.sqlite")):
        res = run_cli("report", *map(str, args))
        # THEN one line naming it, exit 2 (not four ranks with a straggler among them)
        assert res.returncode == 2 and "given twice" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_phase_detail_of_all_instances_leaves_out_warm_up_cycles():
    # GIVEN the README's trace (one warm-up cycle of 24)
    (r,) = load([EAGLE], PhaseConfig()).ranks
    # WHEN all of verify's instances are detailed, as the TUI does
    d = phase_detail(r.phases, r.gpu_ops, r.syncs, phase="verify", cycles=r.cycles)
    # THEN 23 instances, and the CPU median of verify's NVTX ranges without the first cycle's
    assert d.n_instances == 23 and "1 range(s) of warm-up, incomplete or empty cycles or in no cycle left out" in d.title
    assert abs(d.cpu_ms - statistics.median(nvtx_cpu_ms(EAGLE, "verify")[1:])) < 1e-6


def test_the_phase_detail_names_the_cause_the_report_names():
    # GIVEN rank 1 of a two-rank run whose verify agrees in most cycles (CPU 16.2 ms, GPU 17.4
    # ms), waiting in collectives in 19 of its 30 cycles and launch-bound in 11
    from tracerecon.present import build_report
    an = load([str(SAMPLES / "demo_shapes_h200x2" / "nccl_skew_phases")])
    p = next(p for p in build_report(an).ranks[1].phases if p.phase == "verify")
    assert (p.dominant_verdict, p.causes) == ("agree", {"comm_wait": 19, "launch_bound": 11})
    # WHEN the TUI's detail of all its instances is written
    r = an.ranks[1]
    d = phase_detail(r.phases, r.gpu_ops, r.syncs, phase="verify", cycles=r.cycles)
    # THEN it gives the report's reason (it once took the cause among the agreeing cycles alone)
    assert "of its GPU time were collectives waiting for other ranks" in d.explanation and "launch-bound" not in d.explanation


def test_diff_names_waiting_in_collectives_when_it_changed():
    # GIVEN a TP=2 run, and one where rank 1 is held up inside verify (rank 0 waits in its all-reduces)
    a, b = DEMO2 / "nccl_gpu_bound", DEMO2 / "nccl_skew"
    # WHEN compared
    doc = json.loads(run_cli("diff", str(a), str(b), "--json").stdout)
    verify0 = next(p for p in doc["phases"] if p["phase"] == "verify" and p["rank"] == 0)
    # THEN the explanation leads with rank 0's wait, B's median being that of its phases table
    (r0, _) = load([b], PhaseConfig()).ranks
    waits = [p["wait_ns"] for p in r0.phases.to_pylist() if p["phase"] == "verify" and p["cycle"] not in
             {c["cycle"] for c in r0.cycles.to_pylist() if c["warmup"]}]
    assert verify0["explanation"].startswith("verify ") and "waiting for other ranks in collectives" in verify0["explanation"]
    assert f"-> {statistics.median(waits) / 1e6:.3f} ms" in verify0["explanation"]


def test_a_phase_with_gpu_work_on_one_side_only_is_explained_as_such():
    # GIVEN verify with no GPU work in A (CPU 0.200 ms) and 0.333 ms of it in B (CPU 0.250 ms)
    from tracerecon.analysis.diff import PhaseSide, explain

    def side(cpu, gpu):
        return PhaseSide(n=5, cpu_ms=cpu, gpu_ms=gpu, gpu_ms_p90=gpu, eager_launches=0, graph_launches=0, idle_fraction=None, blocked_ms=0)

    # WHEN explained THEN the side with GPU work is named with its time, and the CPU change given
    assert explain("verify", side(0.2, None), side(0.25, 0.333)) == "verify: GPU work only in B (0.333 ms), +0.050 ms CPU"
    assert explain("verify", side(0.25, 0.333), side(0.2, None)) == "verify: GPU work only in A (0.333 ms), -0.050 ms CPU"
    assert explain("verify", side(0.2, None), side(0.25, None)) == "verify +0.050 ms CPU (no GPU work)"


def test_a_median_that_moved_while_the_kernels_did_not_is_not_blamed_on_them():
    # GIVEN attn with one flash kernel per cycle, 3.882 ms on average in A and 4.012 ms in B,
    # and its GPU median 0.417 -> 4.482 ms (its cycles alternate between ~0.15 and ~7.8 ms: the
    # median jumps with their mix; p90 7.869 both), idle share the same
    from tracerecon.analysis.diff import PhaseSide, explain

    def side(gpu, kernel_ms, p90=7.869, idle=0.05, names=("flash_fwd_kernel",)):
        return PhaseSide(n=33, cpu_ms=0.2, gpu_ms=gpu, gpu_ms_p90=p90, eager_launches=len(names), graph_launches=0, idle_fraction=idle,
                         blocked_ms=0, kernels=dict.fromkeys(names, 1.0), kernel_ms=dict.fromkeys(names, kernel_ms))

    # WHEN explained THEN the kernels' time is said to be about the same (not "each took longer")
    assert explain("attn", side(0.417, 3.882), side(4.482, 4.012)) == (
        "attn +4.065 ms GPU: kernels' time per cycle about the same (3.882 -> 4.012 ms): the change is outside the kernels "
        "(gaps, queueing) or in the mix of unlike cycles; p90 7.869 -> 7.869 ms")
    # and where ten small kernels each took 15 us longer (0.100 -> 0.115 ms: each under the 20 us
    # worth a word), together 1.000 -> 1.150 ms, that is said, with the numbers
    ten = tuple(f"k{i}" for i in range(10))
    assert explain("mm", side(1.2, 0.1, names=ten), side(1.35, 0.115, names=ten)) == "mm +0.150 ms GPU: same kernels, each took longer (1.000 -> 1.150 ms per cycle)"
    # and a phase that did not move keeps its high idle share unsaid; one whose idle share moved says it
    assert explain("attn", side(0.417, 3.882, idle=0.94), side(0.417, 3.882, idle=0.94)) == "attn +0.000 ms GPU: no kernel-level change found"
    assert explain("attn", side(0.417, 3.882, idle=0.5), side(0.417, 3.882, idle=0.7)) == "attn +0.000 ms GPU: GPU idle 70% (was 50%)"


def test_an_explanation_says_where_the_found_factors_fall_short_of_the_change():
    # GIVEN a phase with one 1.0 ms kernel per cycle and the GPU idle 96 % of its span on both sides
    from tracerecon.analysis.diff import PhaseSide, explain

    def side(gpu, kernels=None, wait=0.0, idle=0.96):
        kernels = kernels or {"gemm": 1.0}
        return PhaseSide(n=30, cpu_ms=0.2, gpu_ms=gpu, gpu_ms_p90=gpu, eager_launches=len(kernels), graph_launches=0, idle_fraction=idle,
                         blocked_ms=0, kernels=dict.fromkeys(kernels, 1.0), kernel_ms=kernels, wait_ms=wait)

    # WHEN it moved 2 ms down while B added a 1 us kernel
    small = explain("draft", side(5.0), side(3.0, {"gemm": 1.0, "roll": 0.001}))
    # THEN the new kernel is said, and that the change is outside the kernels (their time per
    # cycle 1.000 -> 1.001 ms, about the same); the idle share, 96 % on both sides, is not
    assert small == ("draft -2.000 ms GPU: new kernels: roll (0.001 ms), and kernels' time per cycle about the same (1.000 -> 1.001 ms): "
                     "the change is outside the kernels (gaps, queueing) or in the mix of unlike cycles; p90 5.000 -> 3.000 ms"), small
    # WHEN it moved 3 ms down while its collectives waited 8.8 ms more
    against = explain("verify", side(18.0, wait=4.6), side(15.0, wait=13.4))
    # THEN the wait is said with what the rest of the phase did (-3.0 - 8.8 = -11.8 ms), and,
    # the wait accounting for none of the change, where the rest lies
    assert against.startswith("verify -3.000 ms GPU: waiting for other ranks in collectives 4.600 -> 13.400 ms "
                              "(against the change: the rest of the phase -11.800 ms), and kernels' time per cycle about the same"), against
    # WHEN a new 1.5 ms kernel accounts for most of a 2 ms rise THEN nothing more is said
    assert explain("draft", side(3.0), side(5.0, {"gemm": 1.0, "topk": 1.5})) == "draft +2.000 ms GPU: new kernels: topk (1.500 ms)"


def test_two_single_rank_files_of_other_numbers_are_compared_and_said_so():
    # GIVEN one GPU's run (rank 0) and one rank's file of a two-rank run (rank 1 by its mark)
    a_dir, b_file = SAMPLES / "demo_h200" / "gpu_bound", SAMPLES / "demo_h200x2" / "nccl_skew" / "rank1.sqlite"
    # WHEN diffed
    res = run_cli("diff", str(a_dir), str(b_file), "--json")
    text = run_cli("diff", str(a_dir), str(b_file))
    doc = json.loads(res.stdout)
    # THEN the two are compared, the document says which with which, and each side's medians are
    # its own report's (A's rank 0, B's rank 1)
    assert (doc["rank_pairs"], doc["unpaired_ranks"], doc["a_given"], doc["b_given"]) == ([[0, 1]], [], [str(a_dir)], [str(b_file)])
    ra = json.loads(run_cli("report", "--json", str(a_dir)).stdout)["ranks"][0]
    rb = json.loads(run_cli("report", "--json", str(b_file)).stdout)["ranks"][0]
    assert rb["rank"] == 1
    want = {p["phase"]: (p["gpu_ms_median"], q["gpu_ms_median"]) for p in ra["phases"] for q in rb["phases"] if p["phase"] == q["phase"]}
    assert want and {p["phase"]: (p["a_gpu_ms"], p["b_gpu_ms"]) for p in doc["phases"]} == want
    # and the text names both sides and says the ranks were paired across numbers
    assert text.stdout.startswith("A (gpu_bound) -> B (rank1.sqlite)")
    assert "A's rank 0 is compared with B's rank 1: the only rank on each side" in " ".join(text.stdout.split())


def test_runs_with_no_rank_in_common_say_nothing_was_compared():
    # GIVEN a diff document of A (ranks 0, 1) against B (rank 4, 5): no pairs
    from tracerecon.present import diff_notes

    doc = {"phases": [], "cycles": {"a_gpu_ms": None, "per_rank": []}, "kernels": [], "rank_pairs": [], "unpaired_ranks": [0, 1, 4, 5],
           "a_ranks": [0, 1], "b_ranks": [4, 5]}
    # WHEN its notes are made THEN they say no rank was compared, and which each side has
    assert diff_notes(doc) == [("no rank in common, nothing compared: A has rank(s) [0, 1], B has [4, 5] (ranks pair by number)", "yellow")]


def test_diff_warnings_say_which_side_they_are_about():
    # GIVEN two single-rank runs of 30 cycles WHEN diffed leaving out more cycles than either has
    res = run_cli("diff", str(SAMPLES / "demo_h200" / "gpu_bound"), str(SAMPLES / "demo_h200" / "launch_bound"), "--skip-cycles", "1000")
    # THEN each side's warning is led by its side
    lines = [ln for ln in res.stderr.splitlines() if "leaves out all" in ln]
    assert [ln.split("warning: ")[1][:3] for ln in lines] == ["A: ", "B: "], res.stderr


def test_the_diff_text_gives_every_ranks_cycle_as_its_json_does():
    # GIVEN two two-rank runs (the text gave rank 0's cycle only; rank 1's was in the JSON alone)
    a, b = str(DEMO2 / "nccl_skew"), str(DEMO2 / "nccl_gpu_bound")
    # WHEN compared, as text and as JSON
    text = run_cli("diff", a, b).stdout
    per_rank = json.loads(run_cli("diff", a, b, "--json").stdout)["cycles"]["per_rank"]
    # THEN one cycle line per rank, with the JSON's numbers to the microsecond
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("cycle (rank ")]
    assert lines == [f"cycle (rank {r['rank']}): GPU {r['a_gpu_ms']:.3f} -> {r['b_gpu_ms']:.3f} ms ({r['delta_gpu_ms']:+.3f}), "
                     f"CPU {r['a_cpu_ms']:.3f} -> {r['b_cpu_ms']:.3f} ms" for r in per_rank]
    assert [r["rank"] for r in per_rank] == [0, 1]


def _loop(path, cycles: int = 40, mlp_us=lambda c: 150, steps: int = 3, rope_us: int = 0, extend_in=lambda c: True, tokens=lambda c: 3,
          verify_lead: int = 0, attn_us: int = 100):
    """A one-stream loop, cycle c at b = 2000c us, launch-bound between phases: draft runs
    ``steps`` steps (draft_fwd 30 us, draft_sample 10 us, each launched 10 us apart), verify
    verify_attn ``attn_us`` (100) then verify_mlp ``mlp_us(c)`` (and verify_rope ``rope_us`` where not 0)
    from its range's start, draft_extend (extend_fwd 80 us) where ``extend_in(c)``; each cycle
    says its accepted tokens. Every phase's range outlasts its work's queue (each ends at least
    20 us after its last kernel's end), so its GPU time is its range's CPU time. ``verify_lead``:
    CPU work at verify's start before its first launch."""
    from nsys_factory import FakeTrace, gtid

    U = 1000
    t = FakeTrace()
    for c in range(cycles):
        b = 2000 * c
        at = b
        names = []

        def phase(name, kernels, lead=0):
            nonlocal at
            start, gpu = at + lead, at + lead + 5
            for i, (k, us) in enumerate(kernels):
                call = t.call("cudaLaunchKernel", (start + 2 + 3 * i) * U, (start + 4 + 3 * i) * U)
                gpu = max(gpu, start + 5 + 3 * i)
                t.kernel(call, gpu * U, (gpu + us) * U, name=k)
                gpu += us
            end = max(start + 10 + 3 * len(kernels), gpu + 20)
            t.range(name, at * U, end * U)
            names.append(name)
            at = end

        phase("draft", [(k, us) for _ in range(steps) for k, us in (("draft_fwd", 30), ("draft_sample", 10))])
        phase("verify", [("verify_attn", attn_us), ("verify_mlp", mlp_us(c))] + ([("verify_rope", rope_us)] if rope_us else []), verify_lead)
        if extend_in(c):
            phase("draft_extend", [("extend_fwd", 80)])
        t.range(f"cycle {c}", b * U, at * U)
        t.nvtx.append({"start": at * U, "end": None, "eventType": 34, "text": f"tracerecon.accepted={tokens(c)}",
                       "globalTid": gtid(10), "endGlobalTid": None, "domainId": 0, "int64Value": c})
    return str(t.write(path))


def _diff(tmp_path, a_kw: dict, b_kw: dict) -> dict:
    a, b = _loop(tmp_path / "a.sqlite", **a_kw), _loop(tmp_path / "b.sqlite", **b_kw)
    res = run_cli("diff", a, b, "--json", "--skip-cycles", "0")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _explained(doc: dict, phase: str) -> str:
    return next(p["explanation"] for p in doc["phases"] if p["phase"] == phase)


def test_a_kernel_slower_in_some_cycles_is_said_where_the_median_did_not_move(tmp_path):
    # GIVEN B whose verify_mlp takes 300 us instead of 150 in 16 of 40 cycles (c % 5 < 2), tokens
    # unchanged: by hand verify (its kernels from +5, 100 + 150 us, its range to 20 us after:
    # 275 us) keeps its median 0.275 ms (24 of 40 cycles), its p90 0.425 ms, its mean per cycle
    # +150 * 16 / 40 = +60 us; per token (3 a cycle) B's GPU per cycle rises by 60 us on average
    doc = _diff(tmp_path, {}, {"mlp_us": lambda c: 300 if c % 5 < 2 else 150})
    # THEN the per-token line says slower steps, not "faster steps (GPU per cycle +0%)", and
    # verify names verify_mlp's +0.060 ms per cycle in some cycles (it said: no change found)
    why = doc["cycles"]["per_rank"][0]["per_token_explanation"]
    assert why.startswith("per accepted token +") and "mostly slower steps" in why and "tokens per cycle +0%" in why, why
    assert _explained(doc, "verify") == "verify +0.000 ms GPU: verify_mlp +0.060 ms per cycle on average, the median +0.000 ms (p90 0.275 -> 0.425 ms)"


def test_a_new_kernel_does_not_hide_a_slower_one(tmp_path):
    # GIVEN B that adds verify_rope (25 us) and whose verify_mlp takes 250 us instead of 150
    doc = _diff(tmp_path, {}, {"mlp_us": lambda c: 250, "rope_us": 25})
    # THEN both are said: the new kernel and verify_mlp's +0.100 ms (it said the new kernel alone)
    assert _explained(doc, "verify") == "verify +0.125 ms GPU: new kernels: verify_rope (0.025 ms), verify_mlp +0.100 ms per cycle"


def test_one_more_draft_step_is_said_as_more_kernels_not_slower_ones(tmp_path):
    # GIVEN B running 4 draft steps a cycle instead of 3, each kernel as long as before
    doc = _diff(tmp_path, {}, {"steps": 4})
    # THEN draft's +0.040 ms names draft_fwd's +0.030 ms with how many times it ran a cycle
    assert _explained(doc, "draft").startswith("draft +0.040 ms GPU: draft_fwd +0.030 ms per cycle (4 times a cycle, was 3)")


def test_a_phase_run_in_fewer_cycles_says_so(tmp_path):
    # GIVEN B running draft_extend in 8 of 40 cycles (every fifth) instead of every cycle
    doc = _diff(tmp_path, {}, {"extend_in": lambda c: c % 5 == 0})
    # THEN its median is unchanged and its explanation says in how many cycles it ran (the
    # cycle's change had no phase saying where it went: the median cycle lost draft_extend's
    # 105 us, its kernel at +5..+85 and its range to +105)
    assert _explained(doc, "draft_extend") == "draft_extend +0.000 ms GPU: ran in 8 of 40 counted cycles (A: 40 of 40)"
    assert doc["cycles"]["per_rank"][0]["delta_gpu_ms"] == -0.105


def test_the_gpu_idle_before_a_phases_first_launch_is_said(tmp_path):
    # GIVEN B whose verify spends 200 us on the CPU before its first launch (a straggler's CPU
    # work), the GPU idle meanwhile: verify reads 200 us more, its kernels unchanged
    doc = _diff(tmp_path, {}, {"verify_lead": 200})
    # THEN the explanation says the GPU idled before the first op, and the CPU time that grew
    # with it (it fell back to "outside the kernels (gaps, queueing) or in the mix of unlike cycles")
    assert _explained(doc, "verify").startswith("verify +0.200 ms GPU: GPU idle before its first op 0.005 -> 0.205 ms (CPU 0.275 -> 0.475 ms)")


def test_kernels_trading_time_every_cycle_are_both_named(tmp_path):
    # GIVEN B whose verify_mlp takes 200 us instead of 150 in every cycle and whose verify_attn
    # takes 50 instead of 100 (a review's shape), so that verify keeps its 275 us
    doc = _diff(tmp_path, {}, {"mlp_us": lambda c: 200, "attn_us": 50})
    # THEN both are named, each on average per cycle (it had said verify_mlp alone, "in some
    # cycles only", of a change in every cycle)
    assert _explained(doc, "verify") == ("verify +0.000 ms GPU: verify_attn -0.050 ms per cycle, verify_mlp +0.050 ms per cycle on average, "
                                         "the median +0.000 ms (p90 0.275 -> 0.275 ms)")


def test_the_per_token_line_of_a_side_without_gpu_time_is_a_line_not_an_error():
    from types import SimpleNamespace

    import pyarrow as pa

    from tracerecon.analysis.diff import token_delta

    def side(gpu):
        cycles = pa.table({"cycle": [0, 1, 2], "cpu_ns": [1000] * 3, "gpu_ns": gpu, "accepted_tokens": [3, 3, 3],
                           "phases_cpu_ns": [1] * 3, "phases_gpu_ns": [1] * 3, "adds_up": [True] * 3})
        return SimpleNamespace(cycles=cycles, phases=None)

    # GIVEN A at 0.9 ms a cycle for 3 tokens, B at 0 (a review's shape: every GPU time 0)
    d = token_delta(side([900_000] * 3), side([0, 0, 0]))
    # THEN the line says the steps went (all of them) faster, by hand -100% per token and per
    # cycle (log1p(-1) had raised: a traceback)
    assert d["per_token_explanation"] == "per accepted token -100%: mostly faster steps (GPU per cycle -100%, tokens per cycle +0%)"


def test_whole_trace_kernel_time_of_captures_of_other_lengths_is_compared_per_cycle(tmp_path):
    # GIVEN one engine captured over 3 cycles (A) and 6 (B): each cycle (1 ms) runs kernel 'k'
    # for 100 us in A and 80 us in B, and kernel 'm' for 10 us on both (a newcomer's review: a
    # kernel 83x the launches in the longer capture led the whole-trace changes, its time per
    # cycle having fallen)
    from nsys_factory import FakeTrace

    U = 1000

    def trace(cycles: int, k_us: int, path):
        t = FakeTrace()
        # (and a set-up kernel before the cycles, 600 us on both: none of theirs)
        t.kernel(t.call("cudaLaunchKernel", 100_000 * U, 100_002 * U), 100_005 * U, 100_605 * U, name="init")
        for c in range(cycles):
            b = 101_000 + 1000 * c
            t.cycle(c, b * U, (b + 400) * U, (b + 900) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 10 + k_us) * U, name="k")
            t.kernel(t.call("cudaLaunchKernel", (b + 405) * U, (b + 407) * U), (b + 410) * U, (b + 420) * U, name="m")
        return str(t.write(path))

    a = load([trace(3, 100, tmp_path / "a.sqlite")], PhaseConfig(phases=("draft", "verify")))
    b = load([trace(6, 80, tmp_path / "b.sqlite")], PhaseConfig(phases=("draft", "verify")))
    # WHEN diffed
    from tracerecon.present import diff_document, diff_notes

    doc = diff_document(a, b)
    # THEN per counted cycle (the kernels launched in the cycles' CPU spans) 'k' went 0.100 ->
    # 0.080 ms (-0.020) and leads, then 'm' (0.010 both) and 'init' (none in the cycles: it had
    # led as 0.200 -> 0.100 per cycle, a fresh review's); the totals are kept beside (k 0.300 ->
    # 0.480 ms, init 0.600 both); the text says per cycle, of 3 and 6 cycles, and names 'k' alone
    (k,) = doc["kernels"]
    assert (k["a_cycles"], k["b_cycles"]) == (3, 6)
    assert [(x["kernel"], x["a_ms_per_cycle"], x["b_ms_per_cycle"], x["delta_ms_per_cycle"], x["a_ms"], x["b_ms"]) for x in k["changes"]] == [
        ("k", 0.1, 0.08, -0.02, 0.3, 0.48), ("m", 0.01, 0.01, 0.0, 0.03, 0.06), ("init", 0.0, 0.0, 0.0, 0.6, 0.6)]
    line = next(text for text, _ in diff_notes(doc) if "kernel time" in text)
    assert line == "rank 0 kernel time per cycle A -> B (launched in the 3 and 6 cycles counted): k 0.100 -> 0.080 ms (3 -> 6 launches in the trace)", line


def test_a_side_whose_cycles_leave_work_outside_its_phases_is_said():
    # GIVEN vLLM V1 read with the default phases (its preprocess, 0.353 ms of GPU work a cycle
    # inside the cycle range before its first phase, is in no phase and not in its cycle's GPU
    # time: its own warning says so) against Model Runner V2, whose phases hold that work
    a = load([str(SAMPLES / "engines_h200" / "vllm_v1")])
    b = load([str(SAMPLES / "engines_h200" / "vllm_mrv2")])
    from tracerecon.present import diff_document, diff_notes

    # WHEN diffed
    doc = diff_document(a, b)
    # THEN the cycles say A leaves work out, and a line says the cycle lines compare what each
    # side's phases cover (the diff had read a 9 % slowdown, "mostly slower steps", alone)
    assert doc["cycles"]["leave_work_out"] == ["a"]
    notes = [text for text, _ in diff_notes(doc)]
    assert any(t.startswith("A: GPU work launched inside its cycle ranges in no phase ran outside its cycle GPU time in most cycles counted") for t in notes), notes
    # and with vLLM's preset on both sides (preprocess a phase) neither leaves work out
    res = run_cli("diff", str(SAMPLES / "engines_h200" / "vllm_v1"), str(SAMPLES / "engines_h200" / "vllm_mrv2"), "--preset", "vllm", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["cycles"]["leave_work_out"] == [], res.stderr


def test_work_in_no_phase_of_a_left_out_cycle_alone_is_not_said_left_out(tmp_path):
    # GIVEN two runs of six cycles ("cycle N" b..b+300 us, draft b+50..b+150, verify b+150..b+250,
    # a kernel each); in A's cycle 0 alone a kernel launched at b+10 runs b+12..b+45, inside the
    # cycle range before its first phase (a fresh review's: any warning of it had flagged A)
    from nsys_factory import FakeTrace

    U = 1000
    paths = []
    for side in "ab":
        t = FakeTrace()
        for c in range(6):
            b = 1000 * (c + 1) * U
            t.range(f"cycle {c}", b, b + 300 * U)
            t.range("draft", b + 50 * U, b + 150 * U)
            t.range("verify", b + 150 * U, b + 250 * U)
            if side == "a" and c == 0:
                t.kernel(t.call("cudaLaunchKernel", b + 10 * U, b + 11 * U), b + 12 * U, b + 45 * U, name="warm")
            t.kernel(t.call("cudaLaunchKernel", b + 60 * U, b + 61 * U), b + 62 * U, b + 140 * U, name="k")
            t.kernel(t.call("cudaLaunchKernel", b + 160 * U, b + 161 * U), b + 162 * U, b + 240 * U, name="m")
        paths.append(str(t.write(tmp_path / f"{side}.sqlite")))
    # WHEN diffed leaving out the first cycle, and keeping it
    for skip in ("1", "0"):
        res = run_cli("diff", *paths, "--skip-cycles", skip, "--phase", "draft", "--phase", "verify", "--json")
        # THEN neither side leaves work out of its counted cycles' median: the cycle is left out,
        # or one cycle of six holds it
        assert res.returncode == 0 and json.loads(res.stdout)["cycles"]["leave_work_out"] == [], res.stderr


def test_kernel_time_launched_outside_the_counted_cycles_is_said_apart(tmp_path):
    # GIVEN two runs of three cycles (draft, verify, a kernel each, the same on both) with a set-up
    # kernel before the cycles: 600 us in A, 100 us in B (a fresh review's: the per-cycle line,
    # with nothing changed per cycle, had left it unsaid where the whole-trace line had said it)
    from nsys_factory import FakeTrace

    U = 1000
    paths = []
    for side, init_us in (("a", 600), ("b", 100)):
        t = FakeTrace()
        t.kernel(t.call("cudaLaunchKernel", 100_000 * U, 100_002 * U), 100_005 * U, (100_005 + init_us) * U, name="init")
        for c in range(3):
            b = 101_000 + 1000 * c
            t.cycle(c, b * U, (b + 400) * U, (b + 900) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 110) * U, name="k")
        paths.append(load([str(t.write(tmp_path / f"{side}.sqlite"))], PhaseConfig(phases=("draft", "verify"))))
    from tracerecon.present import diff_document, diff_notes

    # WHEN diffed
    doc = diff_document(*paths)
    # THEN no kernel changed per cycle (no per-cycle line), and a line says the time launched in
    # no cycle: init 0.600 -> 0.100 ms
    notes = [text for text, _ in diff_notes(doc) if "kernel time" in text]
    assert notes == ["rank 0 kernel time launched in no cycle A -> B (whole trace): init 0.600 -> 0.100 ms"], notes
    (k,) = doc["kernels"]
    init = next(x for x in k["changes"] if x["kernel"] == "init")
    assert (init["a_ms_outside_cycles"], init["b_ms_outside_cycles"], init["a_ms_per_cycle"], init["b_ms_per_cycle"]) == (0.6, 0.1, 0.0, 0.0)


def test_kernels_of_left_out_cycles_are_neither_per_cycle_nor_in_no_cycle(tmp_path):
    # GIVEN two runs of the same cycles (k 100 us, m 10 us a cycle), A with 1 warm-up cycle left
    # out and B with 3 (--skip-cycles), 1,000 and 3,000 cycles long (a fresh review's: the
    # warm-up cycles' kernels had read as a change outside the cycles, and a time per cycle
    # worked back from rounded values as 0.000 -> 0.001 ms)
    from nsys_factory import FakeTrace

    U = 1000
    loaded = []
    for side, n, skip in (("a", 1000, 1), ("b", 3000, 3)):
        t = FakeTrace()
        for c in range(n):
            b = 1000 * c
            t.cycle(c, b * U, (b + 400) * U, (b + 900) * U)
            t.kernel(t.call("cudaLaunchKernel", (b + 5) * U, (b + 7) * U), (b + 10) * U, (b + 110) * U, name="k")
            t.kernel(t.call("cudaLaunchKernel", (b + 405) * U, (b + 407) * U), (b + 410) * U, (b + 420) * U, name="m")
        loaded.append(load([str(t.write(tmp_path / f"{side}.sqlite"))], PhaseConfig(phases=("draft", "verify"), skip_cycles=skip)))
    from tracerecon.present import diff_document, diff_notes

    # WHEN diffed
    doc = diff_document(*loaded)
    # THEN nothing changed per cycle nor in no cycle, and no kernel line is written
    (k,) = doc["kernels"]
    assert [(x["kernel"], x["delta_ms_per_cycle"], x["a_ms_outside_cycles"], x["b_ms_outside_cycles"]) for x in k["changes"]] == [
        ("k", 0.0, 0.0, 0.0), ("m", 0.0, 0.0, 0.0)]
    assert not [text for text, _ in diff_notes(doc) if "kernel time" in text]
