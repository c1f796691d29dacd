"""The "most misleading" line: the phase whose CPU timer is furthest off its GPU time in a
typical cycle, per cycle, not by the median of signed errors (a timer over and under in turn,
the CPU a cycle ahead, is off in every cycle while its signed median is near 0); hand-computed
tables and a hand-built trace."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli
from nsys_factory import FakeTrace
from test_phases_per_cycle import phases_table
from tracerecon.analysis.summary import summarize_phases
from tracerecon.present import misleading_line
from tracerecon.report_model import most_misleading

U = 1000


def instances(phase: str, errors_us: list[int], verdicts: list[str], causes: list[str]) -> list[dict]:
    """One row per cycle: CPU 1 ms, GPU 1 ms less the error."""
    return [dict(cycle=c, phase=phase, cpu_ns=1000 * U, gpu_ns=(1000 - e) * U, error_ns=e * U, verdict=v, cause=k, n_gpu_ops=1)
            for c, (e, v, k) in enumerate(zip(errors_us, verdicts, causes))]


def test_a_timer_over_and_under_in_turn_misleads_more_than_a_steady_small_one():
    # GIVEN 7 cycles: sample's timer +400 us (over: absorbed_wait) and -400 us (under:
    # async_tail) in turn, 4 over and 3 under; prep's a steady +47 us (over: absorbed_wait)
    sample = instances("sample", [400, -400] * 3 + [400], ["over", "under"] * 3 + ["over"], ["absorbed_wait", "async_tail"] * 3 + ["absorbed_wait"])
    prep = instances("prep", [47] * 7, ["over"] * 7, ["absorbed_wait"] * 7)
    # WHEN summarised
    by = {p.phase: p for p in summarize_phases(phases_table(sample + prep))}
    # THEN each cycle's |error| reads 0.4 ms for sample (its signed median +0.4: 4 of 7 over),
    #      0.047 for prep: sample misleads most, said both ways, with its cycles' causes (its CPU
    #      and GPU medians, 1.000 and 0.600, would say nothing of the -400 cycles)
    assert (by["sample"].error_ms_median, by["sample"].abs_error_ms_median) == (0.4, 0.4)
    assert (by["prep"].error_ms_median, by["prep"].abs_error_ms_median) == (0.047, 0.047)
    assert most_misleading(list(by.values())).phase == "sample"
    assert misleading_line(by["sample"]) == ("most misleading: sample: CPU timer off its GPU time by 0.400 ms in the median cycle - "
                                            "it over-reports in 4 and under-reports in 3 of 7 (absorbed_wait 4, async_tail 3)")


def test_a_signed_median_near_zero_does_not_hide_the_timer():
    # GIVEN 6 cycles of sample: +400, -390 in turn (3 over, 3 under: the signed median is
    # (-390 + 400) / 2 = 5 us); prep a steady -150 us (under: async_tail)
    sample = instances("sample", [400, -390] * 3, ["over", "under"] * 3, ["absorbed_wait", "async_tail"] * 3)
    prep = instances("prep", [-150] * 6, ["under"] * 6, ["async_tail"] * 6)
    by = {p.phase: p for p in summarize_phases(phases_table(sample + prep))}
    # WHEN the most misleading phase is picked
    worst = most_misleading(list(by.values()))
    # THEN sample, off by (390 + 400) / 2 = 395 us in the median cycle, not prep's 150 (the
    #      old rule's |5 us| lost to it)
    assert by["sample"].error_ms_median == 0.005 and by["sample"].abs_error_ms_median == 0.395
    assert worst.phase == "sample"


@pytest.mark.parametrize("verdicts, picked", [
    # errs both ways in half its cycles (2 over, 2 under, 4 agree): a candidate, though "agree" is most common
    (["over", "under"] * 2 + ["agree"] * 4, "sample"),
    # both ways in fewer than half (1 over, 1 under, 6 agree): not
    (["over", "under"] + ["agree"] * 6, "prep"),
    # one way mostly, a stray other (6 over, 1 under: fewer than a quarter): a candidate by its verdict, said one way
    (["over"] * 6 + ["under", "agree"], "sample"),
])
def test_which_phases_are_candidates(verdicts, picked):
    # GIVEN sample off by 300 us in each cycle with the given verdicts, prep a steady 100 us over
    errors = [300 if v == "over" else -300 if v == "under" else 300 for v in verdicts]
    causes = ["absorbed_wait" if v == "over" else "async_tail" if v == "under" else "none" for v in verdicts]
    by = {p.phase: p for p in summarize_phases(phases_table(instances("sample", errors, verdicts, causes) + instances("prep", [100] * 8, ["over"] * 8, ["absorbed_wait"] * 8)))}
    # WHEN picked THEN as the rule says
    worst = most_misleading(list(by.values()))
    assert worst.phase == picked
    if picked == "sample" and verdicts.count("under") == 1:
        # (said one way: its CPU and GPU medians and its dominant verdict)
        assert misleading_line(worst) == ("most misleading: sample: CPU 1.000 ms vs GPU 0.700 ms - CPU timer over-reports: "
                                          "the timer holds a blocking wait on other phases' GPU work")


def cycle_ahead_trace(path, cycles: int = 6):
    """One stream; cycle c at b = 1000c us: prep [b, b+100] launches a kernel running
    b+10..b+250; sample [b+100, ...] launches one at b+105: in even cycles it runs
    b+250..b+260 and sample then synchronizes (b+110..b+262, its CPU ends at b+265); in odd
    cycles it runs b+250..b+700 and sample returns at b+110."""
    t = FakeTrace()
    for c in range(cycles):
        b = c * 1000
        even = c % 2 == 0
        end = b + (265 if even else 110)
        t.cycle(c, b * U, (b + 100) * U, end * U, names=("prep", "sample"))
        k = t.call("cudaLaunchKernel", (b + 10) * U, (b + 12) * U)
        t.kernel(k, (b + 10) * U, (b + 250) * U)
        k = t.call("cudaLaunchKernel", (b + 105) * U, (b + 107) * U)
        t.kernel(k, (b + 250) * U, (b + (260 if even else 700)) * U)
        if even:
            s = t.call("cudaStreamSynchronize", (b + 110) * U, (b + 262) * U)
            t.sync_record(s, (b + 110) * U, (b + 262) * U)
    return t.write(path)


def test_the_report_names_a_timer_a_cycle_off_in_turn(tmp_path):
    # GIVEN the trace above, its 6 cycles counted: prep CPU 100 us, GPU 0..250 (an event at its
    # end waits for its kernel): -150 us, under, every cycle. sample: in even cycles CPU
    # 100..265 = 165 us, GPU 250..265 = 15 us (an event at its start waits for prep's kernel,
    # one at its end fires at once: the stream is idle from 260): +150 us, over (its
    # synchronize held prep's work); in odd cycles CPU 100..110 = 10 us, GPU 250..700 = 450 us:
    # -440 us, under
    trace = cycle_ahead_trace(tmp_path / "t.sqlite")
    # WHEN reported
    res = run_cli("report", str(trace), "--phase", "prep", "--phase", "sample", "--skip-cycles", "0", "--no-cache", "--json")
    assert res.returncode == 0, res.stderr
    phases = {p["phase"]: p for p in json.loads(res.stdout)["ranks"][0]["phases"]}
    # THEN sample's errors +150 x3 and -440 x3: signed median (150 - 440) / 2 = -0.145 ms, each
    #      cycle's |error| median (150 + 440) / 2 = 0.295 ms; prep's -0.150 and 0.150: by the
    #      signed medians prep's timer would mislead more, by each cycle's error sample's does
    assert (phases["sample"]["verdicts"], phases["sample"]["error_ms_median"], phases["sample"]["abs_error_ms_median"]) == ({"over": 3, "under": 3}, -0.145, 0.295)
    assert (phases["prep"]["verdicts"], phases["prep"]["error_ms_median"], phases["prep"]["abs_error_ms_median"]) == ({"under": 6}, -0.15, 0.15)
    text = run_cli("report", str(trace), "--phase", "prep", "--phase", "sample", "--skip-cycles", "0", "--no-cache",
                   env={**os.environ, "COLUMNS": "300"}).stdout
    #      and the line names sample, over and under in turn, with its cycles' causes
    (line,) = [ln.strip() for ln in text.splitlines() if "most misleading" in ln]
    assert line == ("most misleading: sample: CPU timer off its GPU time by 0.295 ms in the median cycle - "
                    "it over-reports in 3 and under-reports in 3 of 6 (absorbed_wait 3, async_tail 3)"), line


def test_a_timer_erring_both_ways_in_half_its_cycles_is_said_in_the_colour_of_its_errors():
    # GIVEN sample agreeing in 4 of 8 cycles and 300 us over, under, over, under in the others;
    # prep a steady 100 us over
    from tracerecon.present import rank_notes
    from tracerecon.report_model import CycleSummary, RankReport

    verdicts = ["agree"] * 4 + ["over", "under"] * 2
    errors = [0] * 4 + [300, -300] * 2
    causes = ["none"] * 4 + ["absorbed_wait", "async_tail"] * 2
    phases = summarize_phases(phases_table(instances("sample", errors, verdicts, causes) + instances("prep", [100] * 8, ["over"] * 8, ["absorbed_wait"] * 8)))
    rank = RankReport(0, "t.sqlite", (10,), None, (), 0, None, "", 0.0, 0.0, 0, tuple(phases), CycleSummary(8, 1.0, 1.0, 1.0, 1.0, 8))
    # WHEN its notes are made THEN sample is named (each cycle's |error| median (0 + 300) / 2 =
    # 150 us, prep's 100), in the colour of an over-reporting timer, not of its dominant verdict
    # "agree" (green, read as a timer that is right)
    (line,) = [(text, verdict) for text, verdict in rank_notes(rank) if text.startswith("most misleading")]
    assert line == ("most misleading: sample: CPU timer off its GPU time by 0.150 ms in the median cycle - it over-reports in 2 "
                    "and under-reports in 2 of 8 (absorbed_wait 2, async_tail 2)", "over")
