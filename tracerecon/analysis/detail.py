"""Phase detail: for one phase instance, or every instance of a phase name, what ran on the GPU
and why its CPU timer says what it says, in one sentence."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.columns import eager_launches, median_ms
from tracerecon.analysis.nccl import comm_mask
from tracerecon.analysis.phases import phases_per_cycle
from tracerecon.analysis.projection import int64s
from tracerecon.analysis.stream_keys import several_processes, stream_label, stream_tracks
from tracerecon.analysis.summary import steady_phases
from tracerecon.report_model import dominant_cause, dominant_verdict


@dataclass(frozen=True)
class KernelRow:
    name: str
    count: int
    total_ms: float


@dataclass(frozen=True)
class PhaseDetail:
    title: str
    n_instances: int
    cpu_ms: float  # per instance (median for a phase name)
    gpu_ms: float | None
    gpu_span_ms: float | None
    gpu_busy_ms: float
    kernels: tuple[KernelRow, ...]
    eager_launches: int  # total over the instances
    graph_launches: int
    streams: tuple[str, ...]
    syncs: tuple[str, ...] = field(default=())  # one line each
    comm_ms: float = 0.0
    wait_ms: float = 0.0
    verdicts: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)
    explanation: str = ""


def explain_verdict(verdict: str, cause: str, cpu_ms: float, gpu_ms: float | None, overrun_ms: float, absorbed_ms: float,
                    busy_fraction: float | None, waited_for: str | None, queued_ms: float = 0.0, wait_ms: float = 0.0,
                    waited_cycles_back: int | None = None, several_ranges: bool = False) -> str:
    """One sentence: which way the CPU timer errs (verdict) and why (cause). ``waited_for``: the
    phase whose GPU work the timer waited for, ``waited_cycles_back`` cycles before its own (an
    engine a cycle ahead reads the cycle before's results; None or 0: its own cycle).
    ``several_ranges``: the numbers are of a phase's ranges in a cycle taken together, so
    ``overrun_ms`` is how long its GPU work ran on past all of its timers."""
    g = gpu_ms if gpu_ms is not None else 0.0
    blocked = cause == "absorbed_wait"
    head = {
        "over": f"The CPU timer over-reports ({cpu_ms:.3f} ms vs {g:.3f} ms on the GPU)",
        "under": f"The CPU timer under-reports ({cpu_ms:.3f} ms vs {g:.3f} ms on the GPU)",
        "agree": f"The CPU timer ({cpu_ms:.3f} ms) and the GPU ({g:.3f} ms) agree" + (" only as two errors cancel" if blocked else ""),
        "no_gpu_work": (f"No GPU work was launched in this phase, yet its {cpu_ms:.3f} ms are not all CPU time" if blocked
                        else f"No GPU work was launched in this phase; its {cpu_ms:.3f} ms are CPU time"),
    }.get(verdict, f"CPU {cpu_ms:.3f} ms, GPU {g:.3f} ms")
    back = waited_cycles_back or 0
    whose = ("" if back == 0 else " of the cycle before" if back == 1 else f" of {back} cycles before" if back > 1 else " of a later cycle")
    who = f"{waited_for}'s GPU work{whose}" if waited_for else "earlier phases' GPU work"
    # (queued_ns is how long after the timer started an event on the phase's stream would have
    # completed: earlier work still ran there, or on a stream it waits for (the NULL stream
    # waits for the blocking ones); its own work may have gone to another stream and run at once)
    behind = f"an event on its stream would have waited for earlier GPU work until {queued_ms:.3f} ms after the timer started (the CPU ran ahead of the GPU)"
    why = {
        "absorbed_wait": f": {absorbed_ms:.3f} ms of it were spent blocked, waiting for {who}"
                         + (f", and its own GPU work ran on {overrun_ms:.3f} ms {'past its timers' if several_ranges else 'after it stopped'}."
                            if verdict == "agree" and overrun_ms > 0 else "."),
        "async_tail": (f": its GPU work ran on for {overrun_ms:.3f} ms past its timers (its ranges in a cycle taken together)" if several_ranges
                       else f": its GPU work ran on for {overrun_ms:.3f} ms after the timer stopped") + (f"; {behind}." if queued_ms > 0 else "."),
        "queued_behind": f": {behind}.",
        "comm_wait": f": {wait_ms:.3f} ms of its GPU time were collectives waiting for other ranks.",
        "launch_bound": (f": launch-bound, the GPU was busy only {busy_fraction:.0%} of the phase's GPU span while the CPU launched."
                         if busy_fraction is not None else ": launch-bound, the GPU idled while the CPU launched."),
    }.get(cause, ".")
    return head + why


def phase_detail(phases: pa.Table, gpu_ops: pa.Table, syncs: pa.Table, *, phase_id: int | None = None, phase: str | None = None,
                 cycles: pa.Table | None = None) -> PhaseDetail:
    """Detail for one instance (``phase_id``) or all instances of a name (``phase``: medians
    per cycle, its ranges in one cycle taken together, as in ``report``); with ``cycles``, the
    instances of warm-up cycles are left out of the latter, as in ``report``."""
    names = phases["phase"].to_pylist()
    if phase_id is not None:
        sel = [phase_id]
        cyc = phases["cycle"][phase_id].as_py()
        title = f"{names[phase_id]} (cycle {cyc})"
    else:
        steady = set(steady_phases(phases, cycles)["phase_id"].to_pylist()) if cycles is not None else None
        named = [i for i, n in enumerate(names) if n == phase]
        sel = named if steady is None else [i for i in named if int(phases["phase_id"][i].as_py()) in steady]
        left = len(named) - len(sel)
    sub = phases.take(pa.array(sel, pa.int64()))
    if phase_id is None:
        # Per cycle, as ``report``: a name's ranges in one cycle taken together.
        sub = phases_per_cycle(sub)
        ranges = f", {len(sel)} ranges" if sub.num_rows != len(sel) else ""
        title = f"{phase} (all {sub.num_rows} {'cycles' if ranges else 'instances'}{ranges}{f'; {left} range(s) of warm-up, incomplete or empty cycles or in no cycle left out' if left else ''})"
    sel_set = np.zeros(phases.num_rows + 1, dtype=bool)
    sel_set[sel] = True
    kernels: list[KernelRow] = []
    eager = graph = 0
    streams: list[str] = []
    comm_ms = 0.0
    if gpu_ops.num_rows:
        pid = int64s(gpu_ops["phase_id"], -1)
        mine = np.flatnonzero((pid >= 0) & sel_set[np.where(pid >= 0, pid, phases.num_rows)])
        if len(mine):
            t = gpu_ops.take(pa.array(mine))
            dur = int64s(t["end_ns"]) - int64s(t["start_ns"])
            cnt, tot = Counter(), Counter()
            for n, d in zip(t["name"].cast(pa.string()).to_pylist(), dur.tolist()):
                cnt[n] += 1
                tot[n] += d
            kernels = [KernelRow(n, cnt[n], round(tot[n] / 1e6, 6)) for n, _ in tot.most_common()]
            # (the rank's own counts: eager calls by their correlation, graph launches as the
            # phases table counts them)
            eager = int(eager_launches(gpu_ops, pid, phases.num_rows)[sel].sum())
            graph = int(pc.sum(phases["n_graph_launches"].take(pa.array(sel, pa.int64()))).as_py() or 0)
            # (a pid beside each where the rank's ops are several processes', as its timelines name them)
            _, keys = stream_tracks(int64s(t["pid"]), int64s(t["device_id"], -1), int64s(t["stream_id"], -1), named=several_processes(int64s(gpu_ops["pid"])))
            streams = [stream_label(*k) for k in keys]
            comm_ms = round(float(dur[comm_mask(t)].sum()) / 1e6, 6)
    sync_lines = []
    waited_for = waited_back = None
    if syncs.num_rows:
        sp = int64s(syncs["phase_id"], -1)
        rows = [i for i in np.flatnonzero(sp >= 0) if sel_set[sp[i]]]
        s = syncs.take(pa.array(rows, pa.int64())).to_pylist() if rows else []
        # The phase (and how many cycles before the waiting one's) whose work most waits were for.
        cycle = phases["cycle"].to_pylist()
        waits = Counter((x["waited_for_phase"], _cycles_back(cycle, x["phase_id"], x["waited_for_phase_id"])) for x in s if x["waited_other_phase_ns"] > 0)
        waited_for, waited_back = waits.most_common(1)[0][0] if waits else (None, None)
        for x in s[:20]:
            sync_lines.append(
                f"{x['api']}: blocked {x['blocked_ns'] / 1e6:.3f} ms, waited for {x['waited_gpu_ns'] / 1e6:.3f} ms of GPU work"
                + (f" ({x['waited_other_phase_ns'] / 1e6:.3f} ms of it {x['waited_for_phase']}'s)" if x["waited_other_phase_ns"] else "")
            )
        if len(s) > 20:
            sync_lines.append(f"... {len(s) - 20} more")
    d = sub.to_pydict()
    # The verdict and the cause as ``report`` names them (``report_model.dominant_cause``).
    verdicts = dict(Counter(d["verdict"]).most_common())
    causes = dict(Counter(d["cause"]).most_common())
    top = dominant_verdict(verdicts)
    cause = dominant_cause(causes, {c for v, c in zip(d["verdict"], d["cause"]) if v == top})
    cpu_ms = median_ms(d["cpu_ns"]) or 0.0
    gpu_ms = median_ms(d["gpu_ns"])
    span = median_ms(d["gpu_span_ns"])
    busy = median_ms(d["gpu_busy_ns"]) or 0.0
    several = phase_id is None and sub.num_rows != len(sel)
    if several:
        # A phase of several ranges a cycle: the last range's overrun (the folded row's) leaves
        # out what ran on past the earlier ones' timers (a draft step's kernels past its range,
        # into the bookkeeping before the next step). Per cycle, the GPU time its timers miss,
        # plus what it queued behind (said apart), is the time its work ran on past them.
        overrun = [max(0, g - c + (q or 0)) if g is not None else None for g, c, q in zip(d["gpu_ns"], d["cpu_ns"], d["queued_ns"])]
    else:
        overrun = d["overrun_ns"]
    explanation = explain_verdict(
        top, cause, cpu_ms, gpu_ms, median_ms(overrun) or 0.0, median_ms(d["absorbed_ns"]) or 0.0, (busy / span) if span else None, waited_for,
        median_ms(d["queued_ns"]) or 0.0, median_ms(d["wait_ns"]) or 0.0, waited_back, several,
    )
    return PhaseDetail(
        title=title, n_instances=len(sel), cpu_ms=cpu_ms, gpu_ms=gpu_ms, gpu_span_ms=span, gpu_busy_ms=busy,
        kernels=tuple(kernels), eager_launches=eager, graph_launches=graph, streams=tuple(streams), syncs=tuple(sync_lines),
        comm_ms=comm_ms, wait_ms=round(sum(x or 0 for x in d["wait_ns"]) / 1e6, 6), verdicts=verdicts,
        causes=causes, explanation=explanation,
    )


def _cycles_back(cycle: list, phase_id: int | None, waited_for_id: int | None) -> int | None:
    """How many cycles before ``phase_id``'s the phase instance ``waited_for_id`` is (None: either
    is in no cycle)."""
    if phase_id is None or waited_for_id is None or cycle[phase_id] is None or cycle[waited_for_id] is None:
        return None
    return int(cycle[phase_id]) - int(cycle[waited_for_id])
