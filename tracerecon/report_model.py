"""The report as plain values: per rank and phase the summary ``report`` prints and
``report --json`` returns, and the lines around it.

Built once from an Analysis (``tracerecon.present.build_report``) and cached on its own, small,
beside the analysis: a warm ``report`` and the TUI's first screen read it back and lay it out
without importing pyarrow or numpy. Only the standard library is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Sequence

# verdict: which way the CPU timer errs, always the sign of cpu_ns - gpu_ns beyond the threshold
VERDICTS = ("over", "under", "agree", "no_gpu_work")
# cause: why (analysis.phases.cause_of)
CAUSES = ("async_tail", "absorbed_wait", "queued_behind", "comm_wait", "launch_bound", "none")


def dominant_verdict(verdicts: dict[str, int]) -> str:
    """The verdict most instances have (ties: the first in ``VERDICTS``); ``no_gpu_work`` for none."""
    return max(verdicts.items(), key=lambda kv: (kv[1], -VERDICTS.index(kv[0])))[0] if verdicts else "no_gpu_work"


def dominant_cause(causes: dict[str, int], among: Collection[str] | None = None) -> str:
    """The cause most of ``causes`` have (ties: the first in ``CAUSES``); ``none`` for none.
    With ``among`` (the causes the instances that have the dominant verdict have), the most
    common of ``causes`` among those: the cause that verdict is shown with. Each verdict
    has causes of its own (an ``under`` phase is never ``absorbed_wait``), and the cause most
    common over all instances may be none of that verdict's ("under 134/290: queued_behind
    148/290", queued_behind only in agree and over cycles); taken among the verdict's own
    causes, a cause shared with other verdicts still counts all its instances (agree 18/30:
    comm_wait 19/30, 7 of them agreeing, launch_bound 11)."""
    if among is not None:
        causes = {c: n for c, n in causes.items() if c in among}
    return max(causes.items(), key=lambda kv: (kv[1], -CAUSES.index(kv[0])))[0] if causes else "none"


@dataclass(frozen=True)
class PhaseSummary:
    phase: str
    n: int
    cpu_ms_median: float
    gpu_ms_median: float  # GPU-timeline share (what CUDA events at the boundaries measure)
    gpu_span_ms_median: float | None  # first op start .. last op end (None: no GPU work)
    gpu_busy_ms_median: float
    error_ms_median: float  # CPU minus GPU: > 0 the timer over-reports, < 0 it under-reports
    verdicts: dict[str, int]
    causes: dict[str, int]
    # Where no cycle reads near the median: the two groups its cycles split into, each
    # (smallest ms, largest ms, cycles) (``columns.groups_apart_ms``); None otherwise.
    cpu_ms_groups: tuple | None = None
    gpu_ms_groups: tuple | None = None
    # The causes of the instances whose verdict is ``dominant_verdict`` (counts, largest first);
    # ``causes`` counts every instance's. None: not known (the cause is then taken over all).
    verdict_causes: dict[str, int] | None = None
    # The median over its cycles of |CPU - GPU|: how far the timer is off in a typical cycle,
    # where the median of the signed errors can be near zero (over and under in turn). None:
    # no cycle has a CPU and a GPU time.
    abs_error_ms_median: float | None = None

    @property
    def dominant_verdict(self) -> str:
        return dominant_verdict(self.verdicts)

    @property
    def dominant_cause(self) -> str:
        """The cause the dominant verdict is shown with (``dominant_cause``)."""
        return dominant_cause(self.causes, self.verdict_causes)

    def to_json(self) -> dict:
        return {
            "phase": self.phase,
            "n": self.n,
            "cpu_ms_median": self.cpu_ms_median,
            "gpu_ms_median": self.gpu_ms_median,
            "gpu_span_ms_median": self.gpu_span_ms_median,
            "gpu_busy_ms_median": self.gpu_busy_ms_median,
            "error_ms_median": self.error_ms_median,
            "abs_error_ms_median": self.abs_error_ms_median,
            "verdicts": dict(self.verdicts),
            "causes": dict(self.causes),
            "cpu_ms_groups": [list(g) for g in self.cpu_ms_groups] if self.cpu_ms_groups else None,
            "gpu_ms_groups": [list(g) for g in self.gpu_ms_groups] if self.gpu_ms_groups else None,
        }


@dataclass(frozen=True)
class CycleSummary:
    n: int
    cpu_ms_median: float | None
    gpu_ms_median: float | None
    phases_cpu_ms_median: float | None
    phases_gpu_ms_median: float | None
    n_add_up: int
    n_warmup: int = 0  # cycles left out of these medians
    n_incomplete: int = 0  # cycles not whole in the trace (``cycles.incomplete``), left out of these medians too
    n_empty: int = 0  # cycles whose phases launched no GPU work (``cycles.empty``), left out of these medians too
    n_outside_cycles: int = 0  # phase ranges in no cycle left out of the phases' medians (summary.outside_cycles)
    phases_in_no_cycle: tuple[str, ...] = ()  # phase names never in a cycle: their rows count ranges, not cycles (summary.never_in_cycles)
    accepted_tokens: int | None = None  # over the cycles that said how many (tracerecon.instrument.accepted)
    gpu_ms_per_accepted_token: float | None = None  # their GPU time / their tokens
    phase_ms_per_accepted_token: dict = field(default_factory=dict)  # each phase's GPU time / tokens

    def to_json(self) -> dict:
        return {
            "accepted_tokens": self.accepted_tokens,
            "gpu_ms_per_accepted_token": self.gpu_ms_per_accepted_token,
            "phase_ms_per_accepted_token": dict(self.phase_ms_per_accepted_token) if self.accepted_tokens is not None else None,
            "n": self.n,
            "cpu_ms_median": self.cpu_ms_median,
            "gpu_ms_median": self.gpu_ms_median,
            "phases_cpu_ms_median": self.phases_cpu_ms_median,
            "phases_gpu_ms_median": self.phases_gpu_ms_median,
            "n_add_up": self.n_add_up,
            "n_warmup": self.n_warmup,
            "n_incomplete": self.n_incomplete,
            "n_empty": self.n_empty,
            "n_outside_cycles": self.n_outside_cycles,
            "phases_in_no_cycle": list(self.phases_in_no_cycle),
        }


def lies_both_ways(p: PhaseSummary) -> bool:
    """Whether the phase's timer errs both ways: the fewer of its ``over`` and ``under``
    instances are a quarter or more of the two together (a CPU a cycle ahead: a phase that
    waits for the cycle before in one cycle and leaves its own work running in the next)."""
    over, under = p.verdicts.get("over", 0), p.verdicts.get("under", 0)
    return min(over, under) > 0 and 4 * min(over, under) >= over + under


def most_misleading(phases: list[PhaseSummary] | tuple[PhaseSummary, ...]) -> PhaseSummary | None:
    """The phase whose CPU timer misleads most (the same rule on every rank): among the
    phases whose dominant verdict is ``over`` or ``under``, and those whose timer errs both
    ways (``lies_both_ways``) in half their instances or more, the largest median of each
    cycle's |CPU - GPU| (``abs_error_ms_median``; the median signed error where that is not
    known). Taken per cycle, not from the median signed error: a timer 0.4 ms over and 0.4 ms
    under in turn is off by 0.4 ms in every cycle, while its signed errors' median is near 0."""

    def lies(p: PhaseSummary) -> bool:
        if p.dominant_verdict in ("over", "under"):
            return True
        return lies_both_ways(p) and 2 * (p.verdicts.get("over", 0) + p.verdicts.get("under", 0)) >= p.n

    def how_far(p: PhaseSummary) -> float:
        return p.abs_error_ms_median if p.abs_error_ms_median is not None else abs(p.error_ms_median)

    lying = [p for p in phases if p.error_ms_median is not None and lies(p)]
    return max(lying, key=how_far, default=None)


@dataclass(frozen=True)
class RankReport:
    """One rank's part of the report."""

    rank: int
    source: str
    pids: tuple[int, ...]
    nsys_version: str | None
    gpus: tuple  # GpuIdentity: the GPUs the rank's ops ran on
    offset_ns: int
    offset_uncertainty_ns: int | None
    alignment: str
    comm_ms: float
    wait_ms: float
    n_collectives: int
    phases: tuple[PhaseSummary, ...]
    cycles: CycleSummary
    tid: int | None = None  # its loop thread where it is one GPU's part of a process (``RankSource.tid``)


@dataclass(frozen=True)
class Report:
    """Everything ``report`` shows. ``engine_timers`` (``{rank: {phase: median ms}}``, the
    engine's own perf_counter timers) are read fresh from the run directory, never cached."""

    ranks: tuple[RankReport, ...]
    critical_path: dict  # CrossRank.critical_path_json()
    straggler_lines: tuple[str, ...]
    warnings: tuple[str, ...]
    engine_timers: dict = field(default_factory=dict)
    cross_rank: bool = True  # whether the cross-rank step ran (alignment, communication, gating)
    skip_cycles: int | None = None  # --skip-cycles as given (None: the warm-up rule chose)

    def with_read_anew(self, timers, folder_notes: Sequence[str], stale: Sequence[str] = ()) -> "Report":
        """This report with what is read anew on every call, in place of any the report held:
        the engine's timers (``run_dir.EngineTimers``: their medians and warnings) and the
        input folders' warnings (``run_dir.folder_warnings``, given as ``folder_notes``; those
        the report held are ``stale``)."""
        from tracerecon.run_dir import TIMER_WARNINGS

        gone = set(stale)
        kept = tuple(w for w in self.warnings if not any(m in w for m in TIMER_WARNINGS) and w not in gone)
        return replace(self, engine_timers=timers.medians, warnings=tuple(folder_notes) + kept + timers.warnings)

    def to_json(self) -> dict:
        """The ``report --json`` document."""
        ranks = []
        for r in self.ranks:
            engine = self.engine_timers.get(r.rank, {})
            ranks.append({
                "rank": r.rank,
                "source": r.source,
                "pids": list(r.pids),
                "tid": r.tid,
                "gpus": [g.to_json() for g in r.gpus],
                "offset_ns": r.offset_ns,
                "offset_uncertainty_ns": r.offset_uncertainty_ns,
                "alignment": r.alignment,
                "nccl": {"comm_ms": r.comm_ms, "wait_ms": r.wait_ms, "n_collectives": r.n_collectives},
                "phases": [{**p.to_json(), **({"engine_cpu_ms_median": engine[p.phase]} if p.phase in engine else {})} for p in r.phases],
                "cycles": r.cycles.to_json(),
            })
        return {"ranks": ranks, "critical_path": self.critical_path, "warnings": list(self.warnings)}
