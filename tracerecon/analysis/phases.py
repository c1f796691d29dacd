"""Engine phases and cycles of one rank, their true GPU time, and a verdict on each CPU timer.

GPU time of a phase (``gpu_ns``) is what CUDA events recorded on its stream at its two
boundaries would measure: ``gpu_boundary_end_ns - gpu_boundary_start_ns``, with the
boundaries from ``analysis.boundaries.phase_boundaries`` (stream order, across threads, cycles
and the streams the phase's stream waited for). On one GPU, phases tile their cycle (but
for GPU work in no phase): a cycle's ``gpu_ns`` is the sum of its phases'; phases read on two
GPUs of one thread may overlap. On the H200 sample traces this agrees with CUDA-event
ground truth cycle by cycle.

The verdict says which way the CPU timer errs (``verdict_of``), the cause why (``cause_of``).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from tracerecon import schema
from tracerecon.analysis.columns import thread_keys
from tracerecon.analysis.intervals import last_reaching
from tracerecon.analysis.config import INSTRUMENT_DOMAIN, NUMBERS, PhaseConfig, is_cycle_name
from tracerecon.analysis.intervals import inside_another_thread, segmented_union_length
from tracerecon.analysis.projection import I64_MAX, I64_MIN, LaunchIndex, distinct_values, equals, int64s


# A timer error counts when it exceeds both a floor and a fraction of the phase: 10 us is
# above nsys's own timestamp jitter and launch latency, 10 % keeps long phases from being
# flagged for noise proportional to their length.
ERROR_FLOOR_NS = 10_000
ERROR_FRACTION = 0.10
# Launch-bound: the GPU was busy less than half of the phase's GPU span.
LAUNCH_BOUND_BUSY_FRACTION = 0.5
# Phase GPU times "add up" to the cycle when they cover it within this fraction (by
# construction they tile it on one GPU; a cycle whose phases have no GPU timeline does not add up).
ADDS_UP_FRACTION = 0.02


def adds_up_tolerance(cycle_gpu_ns):
    """How much of a cycle's GPU time its phases may miss and still add up to it: max(10 us, 2 %).
    Also what work in no phase must exceed to be worth a warning."""
    return np.maximum(ERROR_FLOOR_NS, ADDS_UP_FRACTION * np.asarray(cycle_gpu_ns, dtype=np.float64))


def error_threshold(span_ns: np.ndarray) -> np.ndarray:
    return np.maximum(ERROR_FLOOR_NS, (ERROR_FRACTION * span_ns).astype(np.int64))


def _cycle_candidates(ranges: pa.Table, p_rows: np.ndarray, cycle_rows: np.ndarray):
    """The cycle ranges each phase range (rows ``p_rows``) could belong to: its thread's where
    that thread marks cycles itself (one process driving a GPU per thread keeps them apart),
    else its process's (cycles marked on a loop thread, phases on a model thread). Yields
    (positions in ``p_rows``, their candidate cycle rows in start order), one group per owner."""
    pid = int64s(ranges["pid"])
    thread = thread_keys(pid, int64s(ranges["tid"], -1))
    start = int64s(ranges["start_ns"])
    by_thread = np.isin(thread[p_rows], thread[cycle_rows])
    for key, group in ((thread, by_thread), (pid, ~by_thread)):
        for owner in np.unique(key[p_rows[group]]).tolist():
            cyc = cycle_rows[key[cycle_rows] == owner]
            if len(cyc):
                yield np.flatnonzero(group & (key[p_rows] == owner)), cyc[np.argsort(start[cyc], kind="stable")]


def cycles_by_time(ranges: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, cycle_rows: np.ndarray,
                   labels: Sequence[str] | None = None) -> np.ndarray:
    """``cycle_of`` with each phase nested in no cycle range (``select_phases``) given a cycle
    range whose CPU span holds the phase's, among those it could belong to
    (``_cycle_candidates``): the latest-starting that began at or before the phase and ends at
    or after it (cycles of two threads may overlap: a later, shorter one that ended first does
    not hold it). So cycles marked on another thread than the phases (a loop thread and a model
    thread), or with ``nvtxRangeStart/End`` (never nested), still number their phases, and
    threads running cycles of their own keep them apart; a phase outside every cycle stays -1.
    Where cycle ranges overlap without one holding the other (``nvtxRangeStart/End`` cycles of
    an engine a cycle ahead: cycle N closes after its output step, which runs after cycle N+1's
    forward began), a phase goes to the one of the index it says, where it says one
    (``cycle_said``: ``instrument.phase(name, cycle=N)``), else to the earliest of them where it
    is of the loop's tail, to the latest where it leads, and by its name's share where the trace
    does not say (``_cycle_by_loop_stage``; ``labels``, one per phase, name them): cycle N's
    output step is N's, not N+1's, and N+1's forward is N+1's."""
    loose = np.flatnonzero(cycle_of < 0)
    if len(loose) == 0 or len(cycle_rows) == 0:
        return cycle_of
    cycle_of = cycle_of.copy()
    cycle_rows = np.asarray(cycle_rows)
    start, end = int64s(ranges["start_ns"]), int64s(ranges["end_ns"], I64_MIN)
    p_rows = np.asarray(phase_rows)[loose]
    position = np.full(len(ranges), -1, dtype=np.int64)  # range row -> position in cycle_rows
    position[cycle_rows] = np.arange(len(cycle_rows))
    said = None
    for mine, cyc in _cycle_candidates(ranges, p_rows, cycle_rows):
        p_start, p_end = start[p_rows[mine]], end[p_rows[mine]]
        pos = np.searchsorted(start[cyc], p_start, side="right") - 1
        reach = np.where(p_end == I64_MIN, I64_MAX, p_end)
        hit = last_reaching(end[cyc], pos, reach)
        ok = (hit >= 0) & (p_end != I64_MIN)
        if labels is not None and ok.sum() > 1 and len(cyc) > 1 and (start[cyc][1:] < np.maximum.accumulate(end[cyc])[:-1]).any():
            closed = ranges["closed"].take(pa.array(cyc)).fill_null(True).to_numpy(zero_copy_only=False) if "closed" in ranges.column_names else np.ones(len(cyc), bool)
            if said is None:
                said = cycle_said(ranges)
            hit = _cycle_by_loop_stage(start[cyc], end[cyc], closed, hit, reach, ok, p_start, [labels[i] for i in loose[mine].tolist()],
                                       said[p_rows[mine]], said[cyc])
        cycle_of[loose[mine[ok]]] = position[cyc[hit[ok]]]
    return cycle_of


def cycle_said(ranges: pa.Table) -> np.ndarray:
    """Per range, the cycle index its payload says where tracerecon.instrument made it (a range
    of its NVTX domain with an integer payload: a cycle range's own index, a phase's the cycle
    the engine ran it for), else ``I64_MIN``. Payloads of other domains say nothing of cycles."""
    n = ranges.num_rows
    if n == 0 or "payload" not in ranges.column_names or "domain" not in ranges.column_names:
        return np.full(n, I64_MIN, np.int64)
    ours = equals(ranges["domain"], INSTRUMENT_DOMAIN)
    return np.where(ours, int64s(ranges["payload"], I64_MIN), I64_MIN)


def _cycle_by_loop_stage(cycle_start: np.ndarray, cycle_end: np.ndarray, cycle_closed: np.ndarray, hit: np.ndarray, reach: np.ndarray,
                         ok: np.ndarray, p_start: np.ndarray, labels: list[str], p_said: np.ndarray, cycle_index: np.ndarray) -> np.ndarray:
    """``cycles_by_time``'s choice among overlapping cycles (positions in start order, their
    starts and ends ``cycle_start``, ``cycle_end``, whether each closed) for phases (``hit``: the latest-starting cycle
    holding each, ``reach``: its end, ``ok``: held by one at all, ``p_start``, ``labels``).
    Of the cycles holding a phase, those holding no other of them count (a cycle range around
    several cycles is no choice while one of them holds the phase; one left open, running to
    the trace's end, is held by none).

    Where the engine says which cycle a phase is for (``p_said``, the cycle index a phase of
    tracerecon.instrument carries: ``phase("output", cycle=n)``; ``I64_MIN``: none) and exactly
    one of the cycles holding it is the cycle range of that index (``cycle_index``, each cycle's
    own: ``cycle_said``), the phase is that cycle's;
    the rules below place the others.

    An engine a cycle (or two) ahead runs, in each turn of its loop, the new cycle's leading
    phases (its head: draft steps, verify, forward, a prefill) and the trailing ones of the
    oldest cycle still open (its tail: sample, output, detokenize), before or after them, and
    closes that cycle's range. So a tail phase goes to the earliest-starting cycle holding it
    and a head phase to the latest-starting, however many of a name each cycle runs. The
    trace says which names lead: those the first cycle that ran phases alone before the next
    one began, having shared none with an earlier one and still open when the next began, ran
    so (the first cycle of such a loop runs its head alone; a cycle closed before the next
    began, a warm-up run in step, says nothing; a later one could be a cycle whose older
    neighbour's range was never closed, its output step then alone in it). Which trail, and
    which the trace cannot place, ``_loop_stages`` says from the phases a closed cycle shares
    with later cycles and with no earlier one (its window); a name it cannot place keeps the
    share rule: the earliest-starting cycle short of its share of that name (k a cycle, for a
    name about every cycle runs), else the latest-starting."""
    holders = [np.where(ok, hit, -1)]
    for _ in range(64):  # cycles holding one phase at once: a few (bounded against odd traces)
        more = last_reaching(cycle_end, holders[-1] - 1, reach)
        more[holders[-1] < 0] = -1
        if (more < 0).all():
            break
        holders.append(more)
    held = np.stack(holders[::-1], 1)  # per phase: its holders, earliest-starting first, -1 padding first
    choices: dict[int, list[int]] = {}
    for i in np.flatnonzero(ok).tolist():
        mine = [h for h in held[i].tolist() if h >= 0]
        # A holder holds a later one that closed no later than it (one never closed runs to the
        # trace's end there: where it would have ended is not known).
        choices[i] = [h for k, h in enumerate(mine) if not any(cycle_closed[g] and cycle_end[h] >= cycle_end[g] for g in mine[k + 1:])]
    windows: dict[int, list[int]] = {}  # earliest holder -> its shared phases, in time order
    leading: set[str] = set()
    shared: set[int] = set()  # cycles that shared a phase with another so far
    first_alone = -1  # the first cycle that ran phases alone so: only its names count
    n_cycles = len(cycle_start)
    in_time = [i for i in np.argsort(p_start, kind="stable").tolist() if i in choices]
    for i in in_time:
        c = choices[i][0]
        if len(choices[i]) > 1:
            windows.setdefault(c, []).append(i)
            shared.update(choices[i])
        elif (c not in shared and c + 1 < n_cycles and p_start[i] < cycle_start[c + 1] and (not cycle_closed[c] or cycle_end[c] > cycle_start[c + 1])
              and first_alone in (-1, c)):
            first_alone = c
            leading.add(labels[i])
    names = [[labels[i] for i in w] for w in windows.values()]
    stage = _loop_stages(names, [bool(cycle_closed[c]) for c in windows], leading)
    # Names the trace does not place by stage keep the share rule: the earliest-starting cycle
    # with fewer than its share of that name chosen before it (a name about every cycle has,
    # k a cycle), else the latest-starting (a name only some cycles have).
    counts = Counter(labels[i] for i in choices)
    share = {name: max(1, round(c / n_cycles)) if c >= max(2, n_cycles - 1) else 0 for name, c in counts.items()}
    chosen = hit.copy()
    have: Counter = Counter()
    for i in in_time:
        mine, name = choices[i], labels[i]
        how = stage.get(name, "lead")
        named = [h for h in mine if cycle_index[h] == p_said[i]] if p_said[i] != I64_MIN else []
        if len(named) == 1:
            pick = named[0]
        elif len(mine) == 1 or how == "lead":
            pick = mine[-1]
        elif how == "tail":
            pick = mine[0]
        else:
            pick = next((h for h in mine if have[(h, name)] < share[name]), mine[-1])
        chosen[i] = pick
        have[(pick, name)] += 1
    return chosen


def _loop_stages(windows: list[list[str]], closed: list[bool], leading: set[str]) -> dict[str, str]:
    """Each name's stage in a loop a cycle or more ahead (``_cycle_by_loop_stage``): "lead"
    (the newest open cycle's), "tail" (the oldest's) or "share" (the trace does not say: the
    share rule), from each window's phase names in time order, whether its cycle closed, and
    the names the first cycle ran alone (``leading``). A name trails where it is the last of a
    closed window (its range closes after its own output step) or follows a trailing phase in
    at least half the windows it is in (a detokenize after the output). (A name before the
    first leading phase of a window is not taken to trail: as often it is a head step the
    first cycle did not run as a tail run before the next head, in a review's 600 random
    loops.) A name said to both lead and trail (a first step run in step, its output alone;
    a range closed only after the next forward) and one said to do neither keep the share
    rule, but a name of neither that opens at least half the windows it is in leads (the next
    cycle's first phase: a decode after a first prefill, which the share rule would give the
    prefill cycle, and every later cycle its next one's)."""
    appears = Counter(name for w in windows for name in set(w))
    opens = Counter(w[0] for w in windows)
    # A name the first cycle ran alone closes a window now and then where the older cycle's
    # tail ran no phase; one that closes at least half the closed windows it is in is said to
    # trail too (the first step run in step, or a range closed after the next forward).
    last = Counter(w[-1] for w, c in zip(windows, closed) if c)
    in_closed = Counter(name for w, c in zip(windows, closed) if c for name in set(w))
    tail = {name for name, n in last.items() if name not in leading or 2 * n >= in_closed[name]}
    heads = leading - tail
    while True:
        follows: Counter = Counter()
        for w in windows:
            first = next((k for k, name in enumerate(w) if name in tail), len(w))
            follows.update(set(w[first + 1:]) - leading - tail)
        more = {name for name, n in follows.items() if 2 * n >= appears[name]}
        if not more:
            break
        tail |= more
    stage = {}
    for name in appears:
        if name in leading:
            stage[name] = "share" if name in tail else "lead"
        elif name in tail:
            stage[name] = "tail"
        else:
            # (where no cycle ran phases alone, or a name the first one ran alone also closes
            # windows, that cycle ran a step in step or a range closes late: which opens a
            # window says nothing then)
            opening = 2 * opens[name] >= appears[name] and bool(leading) and not leading & tail
            stage[name] = "lead" if opening else "share"
    if 2 * sum(w[0] in heads for w in windows) < len(windows):
        # The first cycle ran none of the names that open the windows (a prefill before decode
        # steps): its names say nothing of the steps between the next cycle's first phase and
        # the older one's tail, so those lead, as the first phase does.
        between: Counter = Counter()
        for w in windows:
            if stage.get(w[0]) != "lead":
                continue
            end = next((k for k, name in enumerate(w) if name in tail), len(w))
            between.update(set(w[1:end]))
        for name, n in between.items():
            if stage[name] == "share" and 2 * n >= appears[name]:
                stage[name] = "lead"
    return stage


def phases_past_their_cycle(ranges: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, cycle_rows: np.ndarray) -> np.ndarray:
    """Phase instances (positions in ``phase_rows``) in no cycle that start inside a cycle range
    they could belong to (``_cycle_candidates``) and end after every such range they started
    in: they ran past their cycle's end (a range closed late, a phase ended on another thread
    after the cycle's), so they are read alone and counted in no cycle's sums. Empty where
    every phase is in a cycle."""
    loose = np.flatnonzero(np.asarray(cycle_of) < 0)
    if len(loose) == 0 or len(cycle_rows) == 0:
        return np.zeros(0, dtype=np.int64)
    start, end = int64s(ranges["start_ns"]), int64s(ranges["end_ns"], I64_MAX)
    p_rows = np.asarray(phase_rows)[loose]
    inside = np.zeros(len(loose), dtype=bool)
    for mine, cyc in _cycle_candidates(ranges, p_rows, np.asarray(cycle_rows)):
        # Inside some cycle range at its start (a cycle started at or before it reaches past its
        # start), and past the end of every such cycle at its end.
        k = np.searchsorted(start[cyc], start[p_rows[mine]], side="right") - 1
        reach = np.maximum.accumulate(end[cyc])[np.maximum(k, 0)]
        inside[mine] = (k >= 0) & (reach > start[p_rows[mine]]) & (end[p_rows[mine]] > reach)
    return loose[inside]


def cycles_per_thread(ranges: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, labels: list[str], order: tuple[str, ...] = (),
                      ops: pa.Table | None = None) -> np.ndarray:
    """Without cycle ranges ``select_phases`` starts a cycle at each occurrence of the first
    phase seen (``cycle_starts``), in each process. Where several threads of a process each hold every phase name
    the process has and run at once (most phases begin while another thread's is still open) or
    launch on devices of their own (``ops``: one process driving a GPU per thread, also where
    its threads take turns), each thread's phases are numbered on their own
    instead, so no cycle mixes two threads' loops; the cycles are then numbered in the order of
    their first phase. Phases of one loop spread over threads (a scheduler thread's draft, a
    worker thread's verify; a thread pool running each phase on whichever thread is free, one
    after another) keep ``cycle_of``."""
    if len(phase_rows) == 0:
        return cycle_of
    pid, tid, start = int64s(ranges["pid"])[phase_rows], int64s(ranges["tid"], -1)[phase_rows], int64s(ranges["start_ns"])[phase_rows]
    end = int64s(ranges["end_ns"], I64_MAX)[phase_rows] if "end_ns" in ranges.column_names else np.full(len(phase_rows), I64_MAX, np.int64)
    names = np.array(labels, dtype=object)
    label_values, label_code = np.unique(names.astype(str), return_inverse=True)
    start_label = start_label_of(order, label_values.tolist())
    name_texts, name_code = np.unique(np.array(ranges["name"].take(pa.array(phase_rows)).to_pylist(), dtype=object).astype(str), return_inverse=True)
    thread = thread_keys(pid, tid)
    local = cycle_of.copy()
    split = False
    for p in np.unique(pid).tolist():
        mine = np.flatnonzero(pid == p)
        threads = np.unique(thread[mine])
        everything = set(names[mine].tolist())
        if len(threads) < 2 or any(set(names[mine[thread[mine] == t]].tolist()) != everything for t in threads.tolist()):
            continue
        if not (_threads_run_at_once(start[mine], end[mine], thread[mine]) or _devices_of_their_own(ops, p, threads)):
            continue  # one loop whose phases move between threads (a thread pool)
        split = True
        for t in threads.tolist():
            seq = mine[thread[mine] == t]  # in time order, as phase_rows are
            local[seq] = np.cumsum(cycle_starts(name_code.ravel()[seq], label_code.ravel()[seq], start_label, name_texts)) - 1
    if not split:
        return cycle_of
    # Global numbers: each (thread, local cycle) in the order of its first phase.
    key = np.where(local >= 0, thread, -1)
    pairs, first, inv = np.unique(np.stack([key, local], 1), axis=0, return_index=True, return_inverse=True)
    order = np.argsort(start[first], kind="stable")
    number = np.empty(len(pairs), dtype=np.int64)
    number[order] = np.arange(len(pairs))
    return np.where(local >= 0, number[inv.ravel()], -1)


def empty_steps(ranges: pa.Table, phase_rows: np.ndarray, cycle_of: np.ndarray, labels: list[str], launches: LaunchIndex) -> tuple[np.ndarray, str | None, np.ndarray]:
    """Without cycle ranges, steps that ended inside their first phase: where more than half the
    cycles open with one instance of the phase that opens them, and more than half of those
    instances launched GPU work (from any thread of their process, until the next phase
    instance began), a cycle opening with a run of several (on one thread) is as many steps
    where each instance but the last launched none (the same way) and ended before the next
    began (vLLM's ``execute_model`` with nothing scheduled returns inside its preprocess range
    and samples nothing: a P/D decode instance waiting for KV, an idle server between requests).
    Each such instance is a cycle of its own, as events at its range's edges read it, and the
    CPU time to the next step lies between cycles, in no phase (``cycle_starts`` took the run for
    one step, as a step that drafts three times is, and its first phase read the whole streak).
    A phase that launches nothing as a rule (a scheduler's) says nothing by launching nothing:
    left alone. Returns (``cycle_of`` renumbered, the phase's name, the cycles split off: the
    empty steps, as numbered in it); cycles numbered per thread (not in time order) are left as
    they are."""
    idx = np.flatnonzero(cycle_of >= 0)
    if len(idx) < 3 or "end_ns" not in ranges.column_names:
        return cycle_of, None, np.zeros(0, np.int64)
    c = cycle_of[idx]
    if (np.diff(c) < 0).any():
        return cycle_of, None, np.zeros(0, np.int64)
    opens = np.r_[True, c[1:] != c[:-1]]
    names = np.asarray(labels, dtype=object)[idx].astype(str)
    opening, counts = np.unique(names[opens], return_counts=True)
    first = opening[np.argmax(counts)]
    rows = phase_rows[idx]
    pid = int64s(ranges["pid"])[rows]
    thread = thread_keys(pid, int64s(ranges["tid"], -1)[rows])
    same = names == first
    # A run: consecutive instances of that phase on one thread in one cycle.
    goes_on = np.r_[False, (c[1:] == c[:-1]) & same[1:] & same[:-1] & (thread[1:] == thread[:-1])]
    run = np.cumsum(~goes_on) - 1
    length = np.bincount(run)
    opening_runs = run[opens & same]
    single = length[opening_runs] == 1
    if not len(opening_runs) or 2 * int(single.sum()) <= len(opening_runs) or single.all():
        return cycle_of, None, np.zeros(0, np.int64)
    start = int64s(ranges["start_ns"])[rows]
    until = np.r_[start[1:], int64s(ranges["end_ns"], I64_MAX)[rows[-1]]]  # the next phase instance's start
    alone = np.flatnonzero(np.isin(run, opening_runs[single]))
    if 2 * int((_launched_between(launches, pid[alone], start[alone], until[alone]) > 0).sum()) <= len(alone):
        return cycle_of, None, np.zeros(0, np.int64)
    # Each instance of a longer opening run but its last: launched nothing, ended before the next.
    k = np.flatnonzero(np.isin(run[:-1], opening_runs[~single]) & goes_on[1:])
    ended = int64s(ranges["end_ns"], I64_MAX)[rows[k]] <= start[k + 1]
    split = k[ended & (_launched_between(launches, pid[k], start[k], until[k]) == 0)] + 1
    if not len(split):
        return cycle_of, None, np.zeros(0, np.int64)
    opens[split] = True
    out = cycle_of.copy()
    out[idx] = np.cumsum(opens) - 1
    empty = out[idx[split - 1]]
    # A longer opening run that the capture ended in (a server idle until then): its last range,
    # which no step follows, is one more empty step where it launched nothing either.
    last = len(rows) - 1
    if length[run[last]] > 1 and run[last] in opening_runs[~single] and (split - 1 == last - 1).any() \
            and _launched_between(launches, pid[[last]], start[[last]], until[[last]])[0] == 0:
        empty = np.r_[empty, out[idx[last]]]
    return out, str(first), empty


def _launched_between(launches: LaunchIndex, pid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (process, [lo, hi)): how many GPU ops any thread of that process launched in it."""
    out = np.zeros(len(pid), dtype=np.int64)
    for (p, _), (s0, s1) in launches.spans.items():
        sel = np.flatnonzero(pid == p)
        if len(sel):
            starts = launches.launch_start[s0:s1]
            out[sel] += np.searchsorted(starts, hi[sel], side="left") - np.searchsorted(starts, lo[sel], side="left")
    return out


def _threads_run_at_once(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> bool:
    """Whether most phases (in time order) begin while a phase of another thread is still open:
    loops of their own on each thread, not one loop handed from thread to thread."""
    if len(start) < 2:
        return False
    open_until = np.full(len(start), I64_MIN, dtype=np.int64)  # the latest end among the earlier phases of other threads
    for t in np.unique(thread).tolist():
        others = np.where(thread != t, end, I64_MIN)
        running = np.r_[I64_MIN, np.maximum.accumulate(others)[:-1]]
        open_until = np.where(thread == t, running, open_until)
    return int((start > open_until).sum()) * 2 < len(start)


def _devices_of_their_own(ops: pa.Table | None, pid: int, threads: np.ndarray) -> bool:
    """Whether at least two of the threads (``thread_keys`` of process ``pid``) launched work and
    each of those launched most of its work on a device none of the others did most of theirs
    on (a GPU per thread; a stray copy to another device, or a thread that launches nothing,
    changes nothing)."""
    if ops is None or ops.num_rows == 0 or "launch_tid" not in ops.column_names:
        return False
    o_pid = int64s(ops["pid"])
    mine = np.flatnonzero(o_pid == pid)
    keys = thread_keys(o_pid[mine], int64s(ops["launch_tid"], -1)[mine])
    keep = np.isin(keys, threads)
    if not keep.any():
        return False
    pairs, count = np.unique(np.stack([keys[keep], int64s(ops["device_id"], -1)[mine][keep]], 1), axis=0, return_counts=True)
    order = np.lexsort((-count, pairs[:, 0]))  # by thread, most ops first
    first = np.r_[True, pairs[order][1:, 0] != pairs[order][:-1, 0]]
    main = pairs[order][first]  # (thread, its main device)
    return len(main) >= 2 and len(np.unique(main[:, 1])) == len(main)


def select_phases(ranges: pa.Table, config: PhaseConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Pick phase instances and number their cycles.

    Returns (phase_rows, cycle_of_phase, cycle_rows, labels): row indices into ``ranges`` of
    the phase ranges in time order, each one's cycle number (-1: outside any cycle), the cycle
    ranges (empty when the trace has none and cycles are formed from consecutive phases), and
    each phase instance's phase name (the label of the spec it matched).

    A range is a phase when its (domain, name) matches a spec, unless a range it is nested in
    (``parent_id``, from ``ranges.nest``) is one too: phases follow each other on the GPU
    timeline, so only the outermost one is a phase (target_verify inside verify is part of it).
    A cycle range's name starts with the cycle prefix and is no phase; a phase belongs to the
    innermost cycle range it is nested in.
    """
    n = ranges.num_rows
    # Each distinct (domain, name) is matched once: traces repeat a few names thousands of times.
    name_codes, names = _codes(ranges["name"])
    dom_codes, doms = _codes(ranges["domain"]) if "domain" in ranges.column_names else (np.zeros(n, np.int64), [""])
    pairs, pair_of = np.unique(name_codes * len(doms) + dom_codes, return_inverse=True)
    pair_of = pair_of.ravel()
    pair_labels = [config.label_of(names[k // len(doms)], doms[k % len(doms)]) for k in pairs.tolist()]
    # Each pair's name (cycle_starts reads step counters in them where no name repeats).
    pair_names = [names[k // len(doms)] for k in pairs.tolist()]
    label_list = list(dict.fromkeys(lab for lab in pair_labels if lab is not None))
    label_id = np.array([label_list.index(lab) if lab is not None else -1 for lab in pair_labels] + [-1], dtype=np.int64)[pair_of] if n else np.zeros(0, np.int64)
    is_phase = label_id >= 0
    parent = int64s(ranges["parent_id"], -1) if "parent_id" in ranges.column_names else np.full(n, -1, np.int64)
    if config.cycle_prefix:
        pair_cycle = np.array([is_cycle_name(names[k // len(doms)], config.cycle_prefix) and lab is None for k, lab in zip(pairs.tolist(), pair_labels)] + [False], dtype=bool)
        is_cycle = pair_cycle[pair_of] if n else np.zeros(0, bool)
    else:
        is_cycle = np.zeros(n, bool)
    if is_phase.any():
        is_phase &= _nearest_marked_ancestor(parent, is_phase) < 0
        is_phase &= ~_inside_a_start_end_phase(ranges, is_phase, is_cycle, pair_of, label_id, start_label_of(config.labels(), label_list, label_id[is_phase]),
                                               pair_names)
    start = int64s(ranges["start_ns"])
    phase_rows = np.flatnonzero(is_phase)
    phase_rows = phase_rows[np.argsort(start[phase_rows], kind="stable")]
    cycle_rows = np.flatnonzero(is_cycle)
    cycle_rows = cycle_rows[np.argsort(start[cycle_rows], kind="stable")]
    cycle_of = np.full(len(phase_rows), -1, dtype=np.int64)
    if len(cycle_rows):
        cycle_number = np.full(n, -1, dtype=np.int64)
        cycle_number[cycle_rows] = np.arange(len(cycle_rows))
        up = _nearest_marked_ancestor(parent, cycle_number >= 0)[phase_rows]
        cycle_of = np.where(up >= 0, cycle_number[np.maximum(up, 0)], -1)
    elif len(phase_rows):
        # No cycle ranges: cycles start where the phase that starts them begins again (cycle_starts),
        # but for a range that a range of another thread runs all through, of a name that another
        # thread also holds outside such ranges (a helper thread's range of the first phase's name
        # inside the loop's phase starts nothing: it is in that cycle; a draft thread whose draft
        # runs inside the loop's verify, most steps, still starts each).
        held = np.zeros(len(phase_rows), dtype=bool)
        threads_known = {"pid", "tid", "end_ns"} <= set(ranges.column_names)
        pid = int64s(ranges["pid"])[phase_rows] if threads_known else np.zeros(0, np.int64)
        tid = int64s(ranges["tid"])[phase_rows] if threads_known else None
        ends = int64s(ranges["end_ns"], I64_MAX)[phase_rows] if threads_known else None
        for p in np.unique(pid).tolist():
            mine = np.flatnonzero(pid == p)
            held[mine] = inside_another_thread(start[phase_rows][mine], ends[mine], thread_keys(pid[mine], tid[mine]), np.ones(len(mine), dtype=bool))
        if held.any():
            keys = thread_keys(pid, tid)
            labs = label_id[phase_rows]
            for lab in np.unique(labs[held]).tolist():
                free_threads = np.unique(keys[(labs == lab) & ~held])
                mine = held & (labs == lab)
                held[mine] = np.array([np.any(free_threads != k) for k in keys[mine].tolist()], dtype=bool)
        starts = np.zeros(len(phase_rows), dtype=bool)
        free = ~held
        starts[free] = cycle_starts(pair_of[phase_rows][free], label_id[phase_rows][free], start_label_of(config.labels(), label_list, label_id[phase_rows][free]),
                                    pair_names)
        cycle_of = np.cumsum(starts) - 1
    return phase_rows, cycle_of, cycle_rows, [label_list[i] for i in label_id[phase_rows].tolist()]


def step_counter(names: Sequence[str]) -> np.ndarray | None:
    """Per name (in time order): its step counter, where the names number their steps: the
    first place among each name's numbers whose values never go down from one name to the next
    that has it and go up at least once (``[rank 0] step 12``: the second; ``decode bs=32 iter
    5``: the second, the batch size goes down). -1 for a name without that place; None where
    no place counts."""
    values = [[int(x) for x in NUMBERS.findall(name)] for name in names]
    for place in range(max((len(v) for v in values), default=0)):
        seq = np.array([v[place] if len(v) > place else -1 for v in values], dtype=np.int64)
        had = seq[seq >= 0]
        if len(had) >= 2 and (np.diff(had) >= 0).all() and (np.diff(had) > 0).any():
            return seq
    return None


def cycle_starts(name_id: np.ndarray, label_id: np.ndarray, start_label: int | None = None, texts: Sequence[str] | None = None) -> np.ndarray:
    """Which phase instances (in time order) start a cycle, without cycle ranges. The phase that
    starts cycles is ``start_label`` (the first of the phases as configured, ``--phase`` or a
    preset, that the instances have; None: the first instance's): a one-off range seen first (a
    warm-up prefill) decides nothing. An instance of it starts a cycle where it follows an
    instance of another phase: its consecutive ranges are one step (draft_0..draft_2, a draft
    step range three times, forward and postprocess both verify). Where it is the only phase, an
    instance starts a cycle where its range name was seen already since the cycle began
    (forward, postprocess, forward: a step again); where no range name comes twice, one starts
    where the names' step counter changes (``texts``: the text of each name id;
    ``step_counter``; a name without it goes with the one before: TensorRT-LLM's
    ``[Executor] _forward_step N: ...`` counts its steps in the name). A cycle that holds the
    usual step's other phases and then more of them is two steps or more
    (``_steps_without_their_first_phase``). Instances before the first start are in no cycle."""
    n = len(name_id)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    start = label_id[0] if start_label is None or not (label_id == start_label).any() else start_label
    mine = label_id == start
    if not mine.all():
        return _steps_without_their_first_phase(label_id, _steps_of_their_usual_length(mine, label_id))
    counter = step_counter([texts[i] for i in name_id.tolist()]) if texts is not None and n > 1 and len(np.unique(name_id)) == n else None
    if counter is not None:
        # (the counter carried over names without it, the first instance's kept)
        at = np.maximum.accumulate(np.where(counter >= 0, np.arange(n), 0))
        carried = counter[at]
        return np.r_[True, carried[1:] != carried[:-1]]
    seen: set = set()
    for i, name in enumerate(name_id.tolist()):
        if i == 0 or name in seen:
            out[i] = True
            seen = set()
        seen.add(name)
    return out


def _steps_of_their_usual_length(mine: np.ndarray, label_id: np.ndarray) -> np.ndarray:
    """Which instances of the phase that starts cycles (``mine``, per instance in time order;
    ``label_id``: every instance's phase) start one: the first of each run of consecutive ones,
    and where a run is a whole number of the most common run's length (one step's), the first of
    each such share, if another phase then runs once in every cycle so split (the first, which
    may have run it not yet, and the last, which the capture may have cut, aside; counted per
    cycle: counted over the whole capture, a warm-up's instances and steps without the first
    phase made the totals match by chance, and a step that drafted four times was four), or
    where the only such run opens the sequence. A run as long as
    most is one step (draft_0..draft_2 every cycle); one twice as long is two steps without the
    other phases between them where each other phase then counts one a step: the first two
    forwards of an engine a cycle ahead (forward 0, forward 1, output 0, forward 2, output 1,
    ..., output n-1, output n; also with its last outputs cut off by the capture, as it opens
    the sequence), not a step that drafted twice (draft, verify, draft, draft, verify: two
    verifies, two steps)."""
    first = mine & np.r_[True, ~mine[:-1]]
    begins = np.flatnonzero(first)
    if len(begins) == 0:
        return first
    # The length of each run: from its first instance to the next instance not of it.
    not_mine = np.r_[np.flatnonzero(~mine), len(mine)]
    length = not_mine[np.searchsorted(not_mine, begins)] - begins
    usual = int(np.argmax(np.bincount(length)))  # the most common run length (the shortest of ties)
    out = first.copy()
    long_runs = [(b, n) for b, n in zip(begins.tolist(), length.tolist()) if n > usual and n % usual == 0]
    for b, n in long_runs:
        out[b:b + n:usual] = True
    split, runs = int(out.sum()), len(begins)
    if runs < split and split > 2:
        cyc = np.cumsum(out) - 1
        ok = cyc >= 0
        for lab in np.unique(label_id[~mine]).tolist():
            per = np.bincount(cyc[ok & (label_id == lab)], minlength=split)
            if (per[1:-1] == 1).all() and per[0] <= 1:
                return out
    # The only long run opens the sequence, before any other phase: an engine a cycle ahead
    # priming its loop, also where the capture ended before its last outputs (their count then
    # falls short of the cycles'); a step that drafted twice may come anywhere.
    return out if len(long_runs) == 1 and long_runs[0][0] == 0 and runs > 2 else first


def _steps_without_their_first_phase(label_id: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``starts`` (``cycle_starts``' first-phase rule) with a cycle also started where a step
    without the phase that starts cycles begins (a prefill step with no draft after a decode
    step; an engine skipping speculation for a step). The usual step is learnt as a sequence:
    the other phases' labels in order (the first phase's left out: a step may run it any number
    of times), the one whose repeats make up the most of the whole cycles (all but the last,
    which the capture may have cut); of ties, the most common itself, then the shorter
    (forward, sample seen alone where forward, sample, forward, sample is as common: two steps
    merged). In each cycle, after a whole usual sequence, or after the usual sequence's last
    phase where that phase comes once in it, the next step begins there if a phase of the usual
    sequence comes later (verify, accept, verify, accept: two steps; output, output: two;
    sample, prefill, sample: the prefill step begins at prefill). Where no shorter sequence
    says otherwise, a usual step that runs a phase again is one step (forward, sample, forward,
    sample every cycle: nothing cut). Where the first cycle ran none of the other phases (an
    engine a cycle ahead priming its loop: forward 0, forward 1, output 0, ...), the last
    cycle's extra outputs are its drain, not steps of their own."""
    cyc = np.cumsum(starts) - 1
    counted = np.flatnonzero(cyc >= 0)
    if len(counted) == 0:
        return starts
    first_phase = label_id[counted[0]]
    # Per cycle, its other phases' positions (``pos``, grouped by cycle, in order): cycle c's
    # are pos[begin[c]:begin[c] + length[c]].
    pos = counted[label_id[counted] != first_phase]
    n_cycles = int(cyc[-1]) + 1
    length = np.bincount(cyc[pos], minlength=n_cycles)
    begin = np.cumsum(length) - length
    # The distinct sequences of the whole cycles, counted (whole arrays per length, not a
    # tuple per cycle: 100,000 cycles took 0.3 s so)
    counts: dict[tuple, int] = {}
    seen_at: dict[tuple, int] = {}
    by_size: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per sequence length: its cycles and their rows of labels
    for size in np.unique(length).tolist():
        if size == 0:
            continue
        of_size = np.flatnonzero(length == size)
        rows = label_id[pos[begin[of_size][:, None] + np.arange(size)]]
        by_size[size] = (of_size, rows)
        whole = of_size < n_cycles - 1
        if whole.any():
            uniq, first_row, k = np.unique(rows[whole], axis=0, return_index=True, return_counts=True)
            for row, at, m in zip(uniq.tolist(), first_row.tolist(), k.tolist()):
                counts[tuple(row)], seen_at[tuple(row)] = m, int(of_size[whole][at])
    if not counts:
        return starts
    candidates = sorted(counts, key=lambda q: -counts[q])[:64]  # (distinct sequences are few in a loop; a bound where they are not)

    def tiled(q: tuple) -> int:  # whole cycles made of q repeated
        return sum(k for w, k in counts.items() if len(w) % len(q) == 0 and q * (len(w) // len(q)) == w)

    usual = max(candidates, key=lambda q: (tiled(q), counts[q], -len(q), -seen_at[q]))
    n, last_once, in_usual = len(usual), usual.count(usual[-1]) == 1, set(usual)
    # The cycles to cut: those whose sequence is not the usual one (but the drain of an engine
    # a cycle ahead, where its first cycle ran none of the other phases).
    odd = np.concatenate([c[(r != np.array(usual)).any(axis=1)] if size == n else c for size, (c, r) in by_size.items()])
    if length[0] == 0:
        odd = odd[odd != n_cycles - 1]
    out = starts.copy()
    for c in np.sort(odd).tolist():
        at = pos[begin[c]:begin[c] + length[c]].tolist()
        seq = label_id[at].tolist()
        i = 0
        while i < len(seq):
            if tuple(seq[i:i + n]) == usual:
                j = i + n
            elif last_once and usual[-1] in seq[i:]:
                j = seq.index(usual[-1], i) + 1  # a step of its own ends with the usual step's last phase
            else:
                break
            if not in_usual.intersection(seq[j:]):
                break
            out[at[j]] = True  # the next step began here
            i = j
    return out


def start_label_of(labels_in_order: tuple[str, ...] | list[str], label_list: list[str], present: np.ndarray | None = None) -> int | None:
    """The label id (position in ``label_list``) of the first configured phase that occurs
    (among the label ids ``present``, where given: the phase instances', not every range's; a
    range of the first phase's name nested in another phase is no instance of it)."""
    have = None if present is None else set(np.asarray(present).tolist())
    for lab in labels_in_order:
        if lab in label_list and (have is None or label_list.index(lab) in have):
            return label_list.index(lab)
    return None


def _inside_a_start_end_phase(ranges: pa.Table, is_phase: np.ndarray, is_cycle: np.ndarray, name_id: np.ndarray, label_id: np.ndarray,
                              start_label: int | None = None, texts: Sequence[str] | None = None) -> np.ndarray:
    """Per range: a phase range that lies, on its own thread, inside another closed phase range
    begun no later in the same cycle, where one of the two is an nvtxRangeStart/End range
    (push/pop nesting, ``parent_id``, cannot see those: they nest in nothing and hold nothing).
    Like a phase nested in a phase, it is part of that one. Not when a cycle began in between:
    a cycle range of the process started after the outer one and no later than the inner one
    or, with no cycle ranges, the inner one is of the phase that starts cycles (an overlap
    scheduler's verify, held open until its result is used, holds the next cycle's draft). A
    range ended on another thread is neither (its own rule: it takes what its starting thread
    launched inside it)."""
    out = np.zeros(len(is_phase), dtype=bool)
    if "style" not in ranges.column_names or "closed" not in ranges.column_names:
        return out
    if not (is_phase & equals(ranges["style"], "start_end")).any():
        return out
    is_phase = is_phase & ~equals(ranges["style"], "start_end_cross_thread")
    holders = is_phase & ranges["closed"].to_numpy(zero_copy_only=False).astype(bool)
    cand = np.flatnonzero(is_phase)
    thread = thread_keys(int64s(ranges["pid"]), int64s(ranges["tid"]))[cand]
    start, end = int64s(ranges["start_ns"])[cand], int64s(ranges["end_ns"], I64_MAX)[cand]
    order = np.lexsort((-end, start, thread))  # by thread, start, the longer first
    cand, thread, start, end = cand[order], thread[order], start[order], end[order]
    pid = int64s(ranges["pid"])
    cycle_rows = np.flatnonzero(is_cycle)
    if len(cycle_rows):
        c_pid, c_start = pid[cycle_rows], int64s(ranges["start_ns"])[cycle_rows]
    else:
        phases = np.flatnonzero(is_phase)
        phases = phases[np.argsort(int64s(ranges["start_ns"])[phases], kind="stable")]
        starts_cycle = np.zeros(len(name_id), dtype=bool)  # what starts cycles (select_phases' rule, before its helper-range exception)
        starts_cycle[phases] = cycle_starts(name_id[phases], label_id[phases], start_label, texts)
    reach = np.where(holders[cand], end, I64_MIN)
    for t in np.unique(thread).tolist():
        at = np.flatnonzero(thread == t)
        # Of the holders begun before each, the one that reaches furthest (its start is what the
        # cycle check needs): the running maximum of their ends, and where it was set.
        far = np.maximum.accumulate(reach[at])
        setter = np.maximum.accumulate(np.where((reach[at] == far) & (far > I64_MIN), np.arange(len(at)), -1))
        far, setter = np.r_[I64_MIN, far[:-1]], np.r_[-1, setter[:-1]]
        held_by = np.where(far >= end[at], setter, -1)
        inside = held_by >= 0
        if len(cycle_rows):
            # A cycle of the process (one thread: one process) began after the holder and no
            # later than the inner phase.
            starts = np.sort(c_start[c_pid == pid[cand[at[0]]]])
            lo, hi = start[at[np.maximum(held_by, 0)]], start[at]
            inside &= ~(np.searchsorted(starts, hi, side="right") > np.searchsorted(starts, lo, side="right"))
        else:
            inside &= ~starts_cycle[cand[at]]
        out[cand[at[inside]]] = True
    return out


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """A string column as codes into its distinct values (null read as "")."""
    values, codes = distinct_values(col, null="")
    return codes, values


def _nearest_marked_ancestor(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For every row, its nearest ancestor (following ``parent``, -1 at the top) that is
    ``marked``, else -1: by pointer jumping, each round skipping what the last one found
    unmarked, so a chain of depth d takes log2(d) rounds (a trace's never-popped ranges can
    nest 100k deep)."""
    up = parent.copy()
    while True:
        live = np.flatnonzero(up >= 0)
        live = live[~marked[up[live]]]
        if not len(live):
            return up
        up[live] = up[up[live]]


def verdict_of(cpu_ns: np.ndarray, gpu_ns: np.ndarray, has_gpu_time: np.ndarray, n_ops: np.ndarray) -> list[str]:
    """Which way each CPU timer errs (``report_model.VERDICTS``), always the sign of CPU - GPU:
    ``over`` when CPU - GPU exceeds the threshold, ``under`` when GPU - CPU does, else
    ``agree`` (``no_gpu_work`` when the phase launched nothing and has no GPU timeline)."""
    cpu_ns, gpu_ns = np.asarray(cpu_ns, np.int64), np.asarray(gpu_ns, np.int64)
    thr = error_threshold(np.maximum(cpu_ns, gpu_ns))
    err = cpu_ns - gpu_ns
    # The first check that holds decides (np.select: first match), in this order.
    checks = [~np.asarray(has_gpu_time, bool), err > thr, -err > thr, np.asarray(n_ops) == 0]
    return np.select(checks, ["no_gpu_work", "over", "under", "no_gpu_work"], default="agree").tolist() if len(cpu_ns) else []


def cause_of(verdict: list[str], cpu_ns, gpu_ns, gpu_span_ns, gpu_busy_ns, overrun_ns, absorbed_ns, queued_ns, wait_ns, n_ops=None) -> list[str]:
    """Why each CPU timer says what it says (``report_model.CAUSES``), given its verdict.

    over:  absorbed_wait (blocked on other phases' GPU work) > queued_behind (the timer ran
           while the stream the phase is read on still ran earlier work) > launch_bound > none
    under: comm_wait (its collectives waited for other ranks) > async_tail (its GPU work ran
           past the timer) > queued_behind > launch_bound > none
    agree: comm_wait > absorbed_wait (the two errors cancel: the timer held a wait for other
           phases' work and stopped before its own ran out, both beyond the threshold) >
           queued_behind > launch_bound > none
    no_gpu_work: absorbed_wait (the timer of a phase that launched nothing is not all CPU
           work: it blocked on other phases' GPU work) > none
    A phase that launched nothing (``n_ops`` 0) had no work to queue: never queued_behind.
    """
    thr = error_threshold(np.maximum(cpu_ns, gpu_ns))
    gpu_span_ns = np.asarray(gpu_span_ns)
    comm = np.asarray(wait_ns) > thr
    queued = np.asarray(queued_ns) > thr
    if n_ops is not None:
        queued &= np.asarray(n_ops) > 0
    launch = (np.asarray(gpu_busy_ns) < LAUNCH_BOUND_BUSY_FRACTION * gpu_span_ns) & (gpu_span_ns > 0)
    absorbed = np.asarray(absorbed_ns) > thr
    tail = np.asarray(overrun_ns) > thr
    v = np.asarray(verdict, dtype=object)
    # The first check that holds names the cause, in each verdict's order (np.select: first match).
    by_verdict = {
        "over": ([absorbed, queued, launch], ["absorbed_wait", "queued_behind", "launch_bound"]),
        "under": ([comm, tail, queued, launch], ["comm_wait", "async_tail", "queued_behind", "launch_bound"]),
        "agree": ([comm, absorbed & tail, queued, launch], ["comm_wait", "absorbed_wait", "queued_behind", "launch_bound"]),
        "no_gpu_work": ([absorbed], ["absorbed_wait"]),
    }
    out = np.full(len(v), "none", dtype=object)
    for name, (conds, causes) in by_verdict.items():
        mine = v == name
        if mine.any():
            out[mine] = np.select(conds, causes, "none")[mine]
    return out.tolist()


@dataclass(frozen=True)
class PhaseInputs:
    """Everything ``build_phases`` needs of one rank, computed before the cross-rank step.

    Arrays are per phase instance, in time order (``phase_id`` = position). ``gpu`` columns
    come from the phase ranges' projection (``ranges`` rows ``phase_rows``).
    """

    rank: int
    ranges: pa.Table  # the rank's finished ranges table
    phase_rows: np.ndarray
    labels: list  # each instance's phase name (its range's name, or the label its spec maps it to)
    cycle: np.ndarray
    boundary_start: np.ndarray  # int64 min: no GPU timeline
    boundary_end: np.ndarray
    stream_device: np.ndarray  # -1: none
    stream_id: np.ndarray
    n_graph_launches: np.ndarray
    blocked_ns: np.ndarray
    absorbed_ns: np.ndarray
    comm_ns: np.ndarray
    compute_ns: np.ndarray
    overlap_ns: np.ndarray


def build_phases(inp: PhaseInputs, wait_ns: np.ndarray | None = None) -> pa.Table:
    """The finished ``schema.PHASES`` table of one rank. ``wait_ns``: per phase, time its
    collectives waited for other ranks (``analysis.cross_rank``); None = one rank."""
    n = len(inp.phase_rows)
    if n == 0:
        return schema.empty(schema.PHASES)
    r = inp.ranges.take(pa.array(inp.phase_rows))
    cs, ce = int64s(r["start_ns"]), int64s(r["end_ns"])
    gs = int64s(r["gpu_start_ns"])
    ge = int64s(r["gpu_end_ns"])
    has_ops = gs != I64_MIN
    span = np.where(has_ops, ge - gs, 0)
    busy = int64s(r["gpu_busy_ns"])
    n_ops = int64s(r["n_gpu_ops"])
    cpu = ce - cs
    has_time = inp.boundary_start != I64_MIN
    gpu = np.where(has_time, inp.boundary_end - inp.boundary_start, 0)
    queued = np.where(has_time, np.clip(inp.boundary_start - cs, 0, None), 0)
    overrun = np.where(has_ops, np.clip(ge - ce, 0, None), 0)
    wait = np.zeros(n, dtype=np.int64) if wait_ns is None else np.asarray(wait_ns, dtype=np.int64)
    verdict = verdict_of(cpu, gpu, has_time, n_ops)
    cause = cause_of(verdict, cpu, gpu, span, busy, overrun, inp.absorbed_ns, queued, wait, n_ops)
    no_stream = inp.stream_id < 0
    table = {
        "rank": pa.array(np.full(n, inp.rank, dtype=np.int32)),
        "cycle": pa.array(inp.cycle, mask=inp.cycle < 0),
        "phase": pa.array(inp.labels, pa.string()),
        "phase_id": pa.array(np.arange(n, dtype=np.int64)),
        "range_id": r["range_id"],
        "pid": r["pid"],
        "tid": r["tid"],
        "cpu_start_ns": pa.array(cs),
        "cpu_end_ns": pa.array(ce),
        "cpu_ns": pa.array(cpu),
        "gpu_start_ns": r["gpu_start_ns"],
        "gpu_end_ns": r["gpu_end_ns"],
        "gpu_span_ns": pa.array(span, mask=~has_ops),
        "gpu_busy_ns": r["gpu_busy_ns"],
        "gpu_boundary_start_ns": pa.array(inp.boundary_start, mask=~has_time),
        "gpu_boundary_end_ns": pa.array(inp.boundary_end, mask=~has_time),
        "gpu_ns": pa.array(gpu, mask=~has_time),
        "queued_ns": pa.array(queued),
        "device_id": pa.array(inp.stream_device, mask=no_stream),
        "stream_id": pa.array(inp.stream_id, mask=no_stream),
        "attribution": r["attribution"],
        "n_gpu_ops": r["n_gpu_ops"],
        "n_kernels": r["n_kernels"],
        "n_graph_launches": pa.array(inp.n_graph_launches),
        "overrun_ns": pa.array(overrun),
        "blocked_ns": pa.array(inp.blocked_ns),
        "absorbed_ns": pa.array(inp.absorbed_ns),
        "error_ns": pa.array(cpu - gpu, mask=~has_time),
        "comm_ns": pa.array(inp.comm_ns),
        "compute_ns": pa.array(inp.compute_ns),
        "overlap_ns": pa.array(inp.overlap_ns),
        "wait_ns": pa.array(wait),
        "verdict": pa.array(verdict, pa.string()),
        "cause": pa.array(cause, pa.string()),
    }
    return pa.table(table, schema=schema.PHASES)


def _cycle_groups(phases: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by (cycle, phase name), a row in no cycle alone: (row order, group starts
    in it); within a group rows keep their order."""
    n = phases.num_rows
    cyc = int64s(phases["cycle"], -1)
    names = phases["phase"].combine_chunks() if isinstance(phases["phase"], pa.ChunkedArray) else phases["phase"]
    code = names.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = np.where(cyc >= 0, cyc * (int(code.max()) + 1) + code, -1 - np.arange(n))
    order = np.lexsort((np.arange(n), key))
    k = key[order]
    return order, np.flatnonzero(np.r_[True, k[1:] != k[:-1]])


def _union_length(phases: pa.Table, order: np.ndarray, starts: np.ndarray, lo_col: str, hi_col: str) -> np.ndarray:
    """Per group of ``_cycle_groups``: the length of the union of its rows' [lo, hi) intervals
    (rows without one add nothing)."""
    has = phases[lo_col].is_valid().to_numpy(zero_copy_only=False)[order] & phases[hi_col].is_valid().to_numpy(zero_copy_only=False)[order]
    lo, hi = int64s(phases[lo_col], 0)[order], int64s(phases[hi_col], 0)[order]
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
    return segmented_union_length(lo, np.where(has, hi, lo), group, len(starts))


def first_in_cycle(phases: pa.Table) -> np.ndarray:
    """Per row of ``phases``: the row of the first instance of its phase name in its cycle
    (itself where it is the first, or in no cycle): the row ``phases_per_cycle`` folds it into."""
    if phases.num_rows == 0:
        return np.zeros(0, np.int64)
    order, starts = _cycle_groups(phases)
    out = np.empty(phases.num_rows, dtype=np.int64)
    out[order] = np.repeat(order[starts], np.diff(np.r_[starts, len(order)]))
    return out


def phases_per_cycle(phases: pa.Table) -> pa.Table:
    """``phases`` (``schema.PHASES``) with the instances of one phase name in one cycle (a name
    several ranges map to, a phase run several times a cycle) folded into one row: what that
    phase took in that cycle, as a CUDA event at its first start and one at its last end, less
    what ran between them in other phases. GPU time, spans, busy time, queueing, blocked time,
    waits and ops add up (each instance's span is its own: other phases' work between two
    instances is not theirs); CPU time is the time any of them was open (ranges that overlap,
    on two threads or started and ended apart, count once); starts take the first, ends the
    last; its verdict and cause are those of the sums (``verdict_of``, ``cause_of``); the rest
    (ids, thread, stream) is the first instance's. Instances in no cycle stay as they are. Rows
    keep the first instance's place."""
    n = phases.num_rows
    if n == 0:
        return phases
    order, starts = _cycle_groups(phases)
    if len(starts) == n:
        return phases
    first = order[starts]  # the first instance of each group (rows are in time order)

    def total(col: str) -> np.ndarray:
        return np.add.reduceat(int64s(phases[col], 0)[order], starts)

    def low(col: str) -> tuple[np.ndarray, np.ndarray]:
        v = int64s(phases[col], I64_MAX)[order]
        m = np.minimum.reduceat(v, starts)
        return m, m != I64_MAX

    def high(col: str) -> tuple[np.ndarray, np.ndarray]:
        v = int64s(phases[col], I64_MIN)[order]
        m = np.maximum.reduceat(v, starts)
        return m, m != I64_MIN

    has_time = np.maximum.reduceat(phases["gpu_ns"].is_valid().to_numpy(zero_copy_only=False)[order].astype(np.int64), starts) > 0
    gs, has_ops = low("gpu_start_ns")
    ge, _ = high("gpu_end_ns")
    bs, _ = low("gpu_boundary_start_ns")
    be, _ = high("gpu_boundary_end_ns")
    ce, _ = high("cpu_end_ns")
    cpu, gpu, busy, n_ops = _union_length(phases, order, starts, "cpu_start_ns", "cpu_end_ns"), total("gpu_ns"), total("gpu_busy_ns"), total("n_gpu_ops")
    has_busy = np.maximum.reduceat(phases["gpu_busy_ns"].is_valid().to_numpy(zero_copy_only=False)[order].astype(np.int64), starts) > 0
    span = _union_length(phases, order, starts, "gpu_start_ns", "gpu_end_ns")
    busy = np.minimum(busy, span)  # ops of ranges open at once are in each: no more than the span
    overrun = np.where(has_ops, np.clip(ge - ce, 0, None), 0)
    absorbed, wait = total("absorbed_ns"), total("wait_ns")
    # Queueing behind the phase's own earlier range (the row just before, in time order, is one
    # of its group) is no queueing behind other work: only the rest adds up.
    q = int64s(phases["queued_ns"], 0)
    group_of = np.empty(n, dtype=np.int64)
    group_of[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    # The row before, on the same thread (rows are in time order; threads interleave).
    by_thread = np.lexsort((np.arange(n), int64s(phases["tid"], -1), int64s(phases["pid"], -1)))
    same_thread = np.r_[False, (int64s(phases["pid"], -1)[by_thread][1:] == int64s(phases["pid"], -1)[by_thread][:-1])
                        & (int64s(phases["tid"], -1)[by_thread][1:] == int64s(phases["tid"], -1)[by_thread][:-1])]
    behind_self = np.zeros(n, dtype=bool)
    behind_self[by_thread[1:]] = same_thread[1:] & (group_of[by_thread][1:] == group_of[by_thread][:-1])
    queued = np.add.reduceat(np.where(behind_self, 0, q)[order], starts)
    verdict = verdict_of(cpu, gpu, has_time, n_ops)
    cause = cause_of(verdict, cpu, gpu, span, busy, overrun, absorbed, queued, wait, n_ops)
    out = phases.take(pa.array(first))
    cols = {
        "cpu_start_ns": pa.array(low("cpu_start_ns")[0]), "cpu_end_ns": pa.array(ce), "cpu_ns": pa.array(cpu),
        "gpu_start_ns": pa.array(gs, mask=~has_ops), "gpu_end_ns": pa.array(ge, mask=~has_ops), "gpu_span_ns": pa.array(span, mask=~has_ops),
        "gpu_busy_ns": pa.array(busy, mask=~has_busy),
        "gpu_boundary_start_ns": pa.array(bs, mask=~has_time), "gpu_boundary_end_ns": pa.array(be, mask=~has_time),
        "gpu_ns": pa.array(gpu, mask=~has_time), "queued_ns": pa.array(queued), "error_ns": pa.array(cpu - gpu, mask=~has_time),
        "n_gpu_ops": pa.array(n_ops), "n_kernels": pa.array(total("n_kernels")), "n_graph_launches": pa.array(total("n_graph_launches")),
        "overrun_ns": pa.array(overrun), "blocked_ns": pa.array(total("blocked_ns")), "absorbed_ns": pa.array(absorbed),
        "comm_ns": pa.array(total("comm_ns")), "compute_ns": pa.array(total("compute_ns")), "overlap_ns": pa.array(total("overlap_ns")),
        "wait_ns": pa.array(wait), "verdict": pa.array(verdict, pa.string()), "cause": pa.array(cause, pa.string()),
    }
    for name, values in cols.items():
        i = out.column_names.index(name)
        out = out.set_column(i, out.schema.field(i), values.cast(out.schema.field(i).type))
    return out.take(pa.array(np.argsort(first, kind="stable")))


# A leading cycle is warm-up when it takes this many times the median cycle (CUDA-graph
# capture, allocator growth, autotuning, a first prefill: SGLang's first cycle took 2.7x its
# median, and at 3x one of two runs of one engine kept its 32 ms warm-up cycle in its medians);
# at most this share of the cycles is left out.
WARMUP_FACTOR = 2.0
WARMUP_MAX_SHARE = 0.2
# ... unless a later whole cycle takes at least this share of it: it is not alone.
WARMUP_RECURS = 0.9


def warmup_cycles(duration_ns: np.ndarray, skip: int | None, whole: np.ndarray | None = None) -> np.ndarray:
    """Which cycles (in order) are warm-up: the first ``skip``, or with None the leading run of
    cycles longer than WARMUP_FACTOR x the median (at most WARMUP_MAX_SHARE of them, and one
    where that share is less: a run of 3 or 4 cycles whose first captured graphs), unless a
    whole cycle (``whole``, per cycle; default all: a cycle the capture cut is no evidence)
    after that leading run takes WARMUP_RECURS of it or more: then it is no one-time cost (a
    prefill that comes back as long later, chunked prefill every fifth cycle; where a later
    stall is longer still, the first long cycle is not alone either, and kept)."""
    n = len(duration_ns)
    out = np.zeros(n, dtype=bool)
    if skip is not None:
        out[: min(skip, n)] = True
        return out
    if n < 3:
        return out
    med = float(np.median(duration_ns))
    long_ = np.asarray(duration_ns) > WARMUP_FACTOR * med
    lead = int(np.argmin(long_)) if not long_.all() else n  # the leading run of long cycles
    later = np.asarray(duration_ns[lead:], dtype=np.float64)
    if whole is not None:
        later = later[np.asarray(whole, dtype=bool)[lead:]]
    for i in range(max(1, int(n * WARMUP_MAX_SHARE))):
        d = float(duration_ns[i])
        again = (later >= WARMUP_RECURS * d).any()
        if d > WARMUP_FACTOR * med and not again:
            out[i] = True
        else:
            break
    return out


def accepted_per_cycle(cycle_payload: list, cycle_cpu: list[tuple[int, int]], marks: list[tuple[int | None, int, int]]) -> list[int | None]:
    """Tokens each cycle accepted, from ``(payload, ts_ns, tokens)`` marks: a mark names its
    cycle by payload (the engine's cycle index, as the cycle range carries it; of several cycles
    of that index, warm-up loops numbered from 0 again, the latest begun at or before the mark,
    which is the one holding it where one does, else the first), else by time (the cycle whose
    CPU span holds it: the earliest-starting of those that do). Several marks for one cycle add
    up; none: None."""
    out: list[int | None] = [None] * len(cycle_cpu)
    order = sorted(range(len(cycle_cpu)), key=lambda k: cycle_cpu[k][0])
    all_starts = [cycle_cpu[k][0] for k in order]
    reach = list(itertools.accumulate((cycle_cpu[k][1] for k in order), max))  # the latest end among those begun so far
    of_payload: dict = {}  # index -> (its cycles' starts, the cycles), in start order
    for i in order:
        if cycle_payload[i] is not None:
            starts, cycles = of_payload.setdefault(cycle_payload[i], ([], []))
            starts.append(cycle_cpu[i][0])
            cycles.append(i)
    for payload, ts, tokens in marks:
        i = None
        if payload is not None and payload in of_payload:
            starts, cycles = of_payload[payload]
            i = cycles[max(bisect.bisect_right(starts, ts) - 1, 0)]
        if i is None:
            # The first cycle, in start order, whose end reaches the mark is the earliest holding
            # it where it began by then (the running latest end first reaches it at that cycle).
            first = bisect.bisect_left(reach, ts)
            if first < len(order) and all_starts[first] <= ts:
                i = order[first]
        if i is not None:
            out[i] = (out[i] or 0) + tokens
    return out


def empty_cycles(has_ops: np.ndarray, silent: np.ndarray | None, split_off: np.ndarray | None = None) -> np.ndarray:
    """Per cycle: none of its phases has GPU work (``has_ops``: any op is one of its phases')
    and no thread of the rank launched any in its span (``silent``, per cycle; None: not known,
    none is empty): an engine step that had nothing to run (vLLM's ``execute_model`` with
    nothing scheduled, a server loop's turn with no batch) among steps that ran. Left out of
    the medians: a server idle through most of a capture would read its steps' medians off its
    idle turns. Where such cycles are most of the rank's, only those the trace shows as steps
    that ended inside their first phase (``split_off``, per cycle: ``empty_steps``) are: the
    rest are then the rank's usual cycle (a process whose GPU work another process runs), as in
    a CPU-only program, where none is."""
    has_ops = np.asarray(has_ops, dtype=bool)
    if silent is None:
        return np.zeros(len(has_ops), dtype=bool)
    out = ~has_ops & np.asarray(silent, dtype=bool)
    if 2 * out.sum() >= len(out):
        out &= np.asarray(split_off, dtype=bool) if split_off is not None else False
    return out


def incomplete_cycles(ranges: pa.Table, phases: pa.Table, cycle_of_phase: np.ndarray, ids: np.ndarray, cycle_range_rows: np.ndarray | None,
                      unrun_from_ns: int | None = None) -> np.ndarray:
    """Per cycle ``ids`` (sorted): whether it is not whole in the trace, so that its numbers
    are no cycle's: a range of it never closed (its cycle range, rows ``cycle_range_rows``, None
    without cycle ranges, or one of its phases', ``phases.range_id`` rows of ``ranges``: nsys
    writes those still open at the capture's end with no end, and they run to the trace's end;
    a phase range never closed that began in a cycle range is in no cycle, and makes that one
    incomplete); or the capture ended before its GPU work was recorded (``unrun_from_ns``: the
    first launch made after every launch of the rank whose GPU work is in the trace: the cycle
    of a phase holding it, and those begun after it). ``cycle_of_phase``: each phase's cycle
    (-1: none)."""
    out = np.zeros(len(ids), dtype=bool)
    if len(ids) == 0:
        return out
    mine = cycle_of_phase >= 0
    at = np.searchsorted(ids, cycle_of_phase[mine])
    if "closed" in ranges.column_names and ranges.num_rows:
        open_ = ~ranges["closed"].fill_null(True).to_numpy(zero_copy_only=False).astype(bool)
        rid = int64s(phases["range_id"], -1)
        never_closed = (rid >= 0) & open_[np.maximum(rid, 0)]
        out[at[never_closed[mine]]] = True
        if cycle_range_rows is not None:
            out |= open_[cycle_range_rows]
            loose = np.flatnonzero(~mine & never_closed)
            if len(loose):
                # Every cycle range of its process that holds such a phase's start (rows in
                # blocks: a trace with thousands of ranges never closed stays linear in memory).
                c_start, c_end = int64s(ranges["start_ns"])[cycle_range_rows], int64s(ranges["end_ns"])[cycle_range_rows]
                c_pid = int64s(ranges["pid"])[cycle_range_rows]
                t, p = int64s(phases["cpu_start_ns"])[loose], int64s(phases["pid"])[loose]
                step = max(1, 4_000_000 // len(ids))
                for i in range(0, len(loose), step):
                    tt, pp = t[i:i + step, None], p[i:i + step, None]
                    out |= ((c_start <= tt) & (tt <= c_end) & (c_pid == pp)).any(axis=0)
    if unrun_from_ns is not None:
        cs, ce = int64s(phases["cpu_start_ns"])[mine], int64s(phases["cpu_end_ns"])[mine]
        out[at[(cs <= unrun_from_ns) & (ce >= unrun_from_ns)]] = True
        first = np.full(len(ids), I64_MAX, dtype=np.int64)
        np.minimum.at(first, at, cs)
        out |= first > unrun_from_ns
    return out


def build_cycles(ranges: pa.Table, phases: pa.Table, cycle_rows: np.ndarray, rank: int, skip_cycles: int | None = None,
                 accepted_marks: list | None = None, unrun_from_ns: int | None = None, silent_cycles: np.ndarray | None = None,
                 empty_steps: np.ndarray | None = None, cycle_ends: tuple[np.ndarray, np.ndarray] | None = None) -> pa.Table:
    """The ``schema.CYCLES`` table: per cycle CPU total, GPU time from its first phase's start
    boundary to its last end (what CUDA events around the cycle would read), and phase sums.
    ``silent_cycles``: the cycles in whose span the rank launched no GPU work, ``empty_steps``
    those split off as steps that ended in their first phase (``empty_cycles``; None: not known),
    ``cycle_ends`` (ids, GPU instants): where each cycle's end reads, where that may be later
    than its phases' ends (work queued between two of them; ``boundaries.phase_boundaries``)."""
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
    p_bs = int64s(phases["gpu_boundary_start_ns"], np.iinfo(np.int64).max)
    p_be = int64s(phases["gpu_boundary_end_ns"])
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
    # A cycle begins at its first phase's start boundary, where an event recorded at the
    # cycle's start reads: a later phase may begin earlier on the GPU, on a stream of its own
    # that was free (after work between, or inside another's range), and does not move it.
    first_bs = p_bs[order[starts]]
    b_start = np.where(first_bs != np.iinfo(np.int64).max, first_bs, red(np.minimum, p_bs))
    b_end = red(np.maximum, p_be)
    if cycle_ends is not None:
        pos = np.minimum(np.searchsorted(cycle_ends[0], ids), len(cycle_ends[0]) - 1)
        hit = cycle_ends[0][pos] == ids
        b_end = np.where(hit & (b_end != np.iinfo(np.int64).min), np.maximum(b_end, cycle_ends[1][pos]), b_end)
    n_ph = np.diff(np.r_[starts, len(order)])
    has_ops = ge != np.iinfo(np.int64).min
    has_gpu = b_end != np.iinfo(np.int64).min
    if len(cycle_rows):
        rr = cycle_rows[ids]
        cs, ce = int64s(ranges["start_ns"])[rr], int64s(ranges["end_ns"])[rr]
        names = ranges["name"].take(pa.array(rr))
    else:
        rr = None
        cs, ce = first_start, last_cpu_end
        names = pa.array([f"cycle {c}" for c in ids], pa.string())
    if accepted_marks:
        payloads = ranges["payload"].take(pa.array(rr)).to_pylist() if rr is not None and "payload" in ranges.column_names else [None] * len(ids)
        accepted = accepted_per_cycle(payloads, list(zip(cs.tolist(), ce.tolist())), accepted_marks)
    else:  # (no engine said what it accepted)
        accepted = [None] * len(ids)
    gpu_ns = np.where(has_gpu, b_end - b_start, 0)
    incomplete = incomplete_cycles(ranges, phases, cyc, ids, rr, unrun_from_ns)
    warmup = warmup_cycles(np.maximum(ce - cs, gpu_ns), skip_cycles, ~incomplete)
    tol = adds_up_tolerance(gpu_ns)
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
            "gpu_start_ns": pa.array(gs, mask=~has_ops),
            "gpu_end_ns": pa.array(ge, mask=~has_ops),
            "gpu_boundary_start_ns": pa.array(b_start, mask=~has_gpu),
            "gpu_boundary_end_ns": pa.array(b_end, mask=~has_gpu),
            "gpu_ns": pa.array(gpu_ns, mask=~has_gpu),
            "phases_cpu_ns": pa.array(cpu_sum),
            "phases_gpu_ns": pa.array(gpu_sum, mask=~has_gpu),
            "n_phases": pa.array(n_ph.astype(np.int64)),
            "adds_up": pa.array(adds),
            "warmup": pa.array(warmup),
            "incomplete": pa.array(incomplete),
            "accepted_tokens": pa.array(accepted, pa.int64()),
            # (a cycle the capture cut is incomplete, whatever it launched)
            "empty": pa.array(empty_cycles(has_ops, np.isin(ids, silent_cycles) if silent_cycles is not None else None,
                                           np.isin(ids, empty_steps) if empty_steps is not None else None) & ~incomplete),
        },
        schema=schema.CYCLES,
    )
