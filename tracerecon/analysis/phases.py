"""Engine phases and cycles of one rank, their true GPU time, and a verdict on each CPU timer.

GPU time of a phase (``gpu_ns``) is its share of the GPU timeline, what CUDA events recorded
at the phase boundaries would measure: with boundaries
``b_i = max(cpu_start_i, latest gpu_end of the cycle's earlier phases)`` and the last boundary
``max(cpu_end_last, latest gpu_end)``, phase i gets ``b_{i+1} - b_i``. The shares add up to the
cycle's GPU-complete time (``gpu_ns`` of the cycle: from its start until its GPU work is done).
On the H200 sample traces this agrees with CUDA-event ground truth to a few microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tracerecon import schema
from tracerecon.analysis.projection import int64s

DEFAULT_PHASES = ("draft", "verify", "draft_re_extend", "draft_extend", "target_verify")
DEFAULT_CYCLE = "cycle"

# A timer error counts when it exceeds both a floor and a fraction of the phase: 10 us is
# above nsys's own timestamp jitter and launch latency, 10 % keeps long phases from being
# flagged for noise proportional to their length.
ERROR_FLOOR_NS = 10_000
ERROR_FRACTION = 0.10
# Launch-bound: the GPU was busy less than half of the phase's GPU span.
LAUNCH_BOUND_BUSY_FRACTION = 0.5
# Phase GPU shares "add up" to the cycle when they cover it within this fraction.
ADDS_UP_FRACTION = 0.02


@dataclass(frozen=True)
class PhaseConfig:
    """Which NVTX range names are phases, and which enclose a cycle (prefix match)."""

    phases: tuple[str, ...] = DEFAULT_PHASES
    cycle_prefix: str = DEFAULT_CYCLE


def error_threshold(span_ns: np.ndarray) -> np.ndarray:
    return np.maximum(ERROR_FLOOR_NS, (ERROR_FRACTION * span_ns).astype(np.int64))


def select_phases(ranges: pa.Table, config: PhaseConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pick phase instances and number their cycles.

    Returns (phase_rows, cycle_of_phase, cycle_rows): row indices into ``ranges`` of the phase
    ranges in time order, each one's cycle number (-1: outside any cycle), and the cycle ranges
    (empty when the trace has none and cycles are formed from consecutive phases).
    """
    names = ranges["name"].to_pylist()
    phase_set = set(config.phases)
    is_phase = np.array([n in phase_set for n in names], dtype=bool)
    is_cycle = np.array([(n.startswith(config.cycle_prefix) and n not in phase_set) for n in names], dtype=bool) if config.cycle_prefix else np.zeros(len(names), bool)
    start = int64s(ranges["start_ns"])
    phase_rows = np.flatnonzero(is_phase)
    phase_rows = phase_rows[np.argsort(start[phase_rows], kind="stable")]
    cycle_rows = np.flatnonzero(is_cycle)
    cycle_rows = cycle_rows[np.argsort(start[cycle_rows], kind="stable")]
    cycle_of = np.full(len(phase_rows), -1, dtype=np.int64)
    if len(cycle_rows):
        cycle_number = np.full(ranges.num_rows, -1, dtype=np.int64)
        cycle_number[cycle_rows] = np.arange(len(cycle_rows))
        parent = ranges["parent_id"].to_pylist()
        for k, r in enumerate(phase_rows):
            p = parent[r]
            while p is not None and cycle_number[p] < 0:
                p = parent[p]
            if p is not None:
                cycle_of[k] = cycle_number[p]
    elif len(phase_rows):
        # No cycle ranges: a cycle starts at each occurrence of the first phase seen.
        first = names[phase_rows[0]]
        starts = np.array([names[r] == first for r in phase_rows], dtype=np.int64)
        cycle_of = np.cumsum(starts) - 1
    return phase_rows, cycle_of, cycle_rows


def timeline_shares(cpu_start: np.ndarray, cpu_end: np.ndarray, gpu_end: np.ndarray, cycle: np.ndarray) -> np.ndarray:
    """Per phase (in time order, grouped by cycle), its share of the GPU timeline. See module doc.

    ``gpu_end`` uses int64 min for "no GPU work". Phases outside a cycle (cycle -1) are their
    own group. A group with no GPU work at all gets int64 min (no GPU timeline to share).
    """
    n = len(cpu_start)
    out = np.zeros(n, dtype=np.int64)
    none = np.iinfo(np.int64).min
    i = 0
    while i < n:  # one pass; groups are runs of equal cycle numbers
        j = i + 1
        while j < n and cycle[j] == cycle[i] and cycle[i] >= 0:
            j += 1
        latest = np.iinfo(np.int64).min
        bounds = []
        for k in range(i, j):
            bounds.append(max(cpu_start[k], latest))
            latest = max(latest, gpu_end[k])
        if latest == none:
            out[i:j] = none
        else:
            bounds.append(max(cpu_end[j - 1], latest))
            out[i:j] = np.diff(np.array(bounds, dtype=np.int64))
        i = j
    return out


def verdicts(cpu_ns, gpu_ns, gpu_span_ns, gpu_busy_ns, n_ops, overrun_ns, absorbed_ns) -> list[str]:
    """The verdict on each phase instance's CPU timer (see ``schema.VERDICTS``)."""
    thr = error_threshold(np.maximum(cpu_ns, gpu_ns))
    out = []
    for k in range(len(cpu_ns)):
        if absorbed_ns[k] > thr[k]:
            out.append("over")  # it waited for earlier phases' GPU work: timer over-reports
        elif n_ops[k] == 0:
            out.append("no_gpu_work")
        elif overrun_ns[k] > thr[k]:
            out.append("under")  # its GPU work ran on past the timer
        elif gpu_busy_ns[k] < LAUNCH_BOUND_BUSY_FRACTION * gpu_span_ns[k]:
            out.append("launch_bound")
        else:
            out.append("agree")
    return out


def build_phases(ranges: pa.Table, syncs: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, rank: int) -> pa.Table:
    """The ``schema.PHASES`` table of one rank.

    ``syncs`` must already carry phase_id (row number in this table) and waited_other_phase_ns.
    """
    n = len(phase_rows)
    if n == 0:
        return schema.empty(schema.PHASES)
    r = ranges.take(pa.array(phase_rows))
    cs, ce = int64s(r["start_ns"]), int64s(r["end_ns"])
    gs = int64s(r["gpu_start_ns"])
    ge = int64s(r["gpu_end_ns"])
    has_gpu = gs != np.iinfo(np.int64).min
    span = np.where(has_gpu, ge - gs, 0)
    busy = int64s(r["gpu_busy_ns"])
    n_ops = int64s(r["n_gpu_ops"])
    cpu = ce - cs
    shares = timeline_shares(cs, ce, ge, cycle_of)
    no_share = shares == np.iinfo(np.int64).min
    shares_for_math = np.where(no_share, 0, shares)
    overrun = np.where(has_gpu, np.clip(ge - ce, 0, None), 0)
    blocked = np.zeros(n, dtype=np.int64)
    absorbed = np.zeros(n, dtype=np.int64)
    if syncs.num_rows:
        pid = int64s(syncs["phase_id"], -1)
        ok = pid >= 0
        np.add.at(blocked, pid[ok], int64s(syncs["blocked_ns"])[ok])
        np.add.at(absorbed, pid[ok], int64s(syncs["waited_other_phase_ns"])[ok])
    verdict = verdicts(cpu, shares_for_math, span, busy, n_ops, overrun, absorbed)
    table = {
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "cycle": pa.array(cycle_of, mask=cycle_of < 0),
        "phase": r["name"],
        "phase_id": pa.array(np.arange(n, dtype=np.int64)),
        "range_id": r["range_id"],
        "pid": r["pid"],
        "tid": r["tid"],
        "cpu_start_ns": pa.array(cs),
        "cpu_end_ns": pa.array(ce),
        "cpu_ns": pa.array(cpu),
        "gpu_start_ns": r["gpu_start_ns"],
        "gpu_end_ns": r["gpu_end_ns"],
        "gpu_span_ns": pa.array(span, mask=~has_gpu),
        "gpu_busy_ns": r["gpu_busy_ns"],
        "gpu_ns": pa.array(shares_for_math, mask=no_share),
        "n_gpu_ops": r["n_gpu_ops"],
        "n_kernels": r["n_kernels"],
        "n_graph_launches": pa.array(np.zeros(n, dtype=np.int64)),
        "overrun_ns": pa.array(overrun),
        "blocked_ns": pa.array(blocked),
        "absorbed_ns": pa.array(absorbed),
        "error_ns": pa.array(cpu - shares_for_math, mask=no_share),
        "comm_ns": pa.array(np.zeros(n, dtype=np.int64)),
        "compute_ns": pa.array(np.zeros(n, dtype=np.int64)),
        "overlap_ns": pa.array(np.zeros(n, dtype=np.int64)),
        "wait_ns": pa.array(np.zeros(n, dtype=np.int64)),
        "verdict": pa.array(verdict, pa.string()),
    }
    return pa.table(table, schema=schema.PHASES)


def build_cycles(ranges: pa.Table, phases: pa.Table, cycle_rows: np.ndarray, rank: int) -> pa.Table:
    """The ``schema.CYCLES`` table: per cycle CPU total, GPU-complete time, and phase sums."""
    if phases.num_rows == 0:
        return schema.empty(schema.CYCLES)
    cyc = int64s(phases["cycle"], -1)
    ids = np.unique(cyc[cyc >= 0])
    if len(ids) == 0:
        return schema.empty(schema.CYCLES)
    p_cs, p_ce = int64s(phases["cpu_start_ns"]), int64s(phases["cpu_end_ns"])
    p_ge = int64s(phases["gpu_end_ns"])
    p_gs = int64s(phases["gpu_start_ns"], np.iinfo(np.int64).max)
    p_cpu, p_gpu = int64s(phases["cpu_ns"]), int64s(phases["gpu_ns"], 0)
    # Phases are in time order, so each cycle's phases form runs; reduce per cycle with numpy.
    order = np.argsort(cyc, kind="stable")
    order = order[cyc[order] >= 0]
    c_sorted = cyc[order]
    starts = np.r_[0, np.flatnonzero(np.diff(c_sorted)) + 1]

    def red(ufunc, values):
        return ufunc.reduceat(values[order], starts)

    first_start = red(np.minimum, p_cs)
    last_cpu_end = red(np.maximum, p_ce)
    ge = red(np.maximum, p_ge)
    gs = red(np.minimum, p_gs)
    cpu_sum = red(np.add, p_cpu)
    gpu_sum = red(np.add, p_gpu)
    n_ph = np.diff(np.r_[starts, len(order)])
    has_gpu = ge != np.iinfo(np.int64).min
    if len(cycle_rows):
        rr = cycle_rows[ids]
        cs, ce = int64s(ranges["start_ns"])[rr], int64s(ranges["end_ns"])[rr]
        names = ranges["name"].take(pa.array(rr))
    else:
        cs, ce = first_start, last_cpu_end
        names = pa.array([f"cycle {c}" for c in ids], pa.string())
    # GPU-complete time, from the cycle's first phase start (where its shares begin).
    gpu_ns = np.maximum(last_cpu_end, ge) - first_start
    tol = np.maximum(ERROR_FLOOR_NS, ADDS_UP_FRACTION * gpu_ns)
    adds = has_gpu & (np.abs(gpu_sum - gpu_ns) <= tol)
    n = len(ids)
    return pa.table(
        {
            "rank": pa.array(np.full(n, rank, dtype=np.int32)),
            "cycle": pa.array(ids.astype(np.int64)),
            "name": names,
            "cpu_start_ns": pa.array(cs),
            "cpu_end_ns": pa.array(ce),
            "cpu_ns": pa.array(ce - cs),
            "gpu_start_ns": pa.array(gs, mask=~has_gpu),
            "gpu_end_ns": pa.array(ge, mask=~has_gpu),
            "gpu_ns": pa.array(gpu_ns, mask=~has_gpu),
            "phases_cpu_ns": pa.array(cpu_sum),
            "phases_gpu_ns": pa.array(gpu_sum, mask=~has_gpu),
            "n_phases": pa.array(n_ph.astype(np.int64)),
            "adds_up": pa.array(adds),
        },
        schema=schema.CYCLES,
    )
