"""``select_phases`` as it was before it worked on whole columns (a Python object per range):
the oracle ``tests/test_select_phases.py`` checks the library's against. Kept as it was."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.projection import int64s


def select_phases(ranges: pa.Table, config: PhaseConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Pick phase instances and number their cycles.

    Returns (phase_rows, cycle_of_phase, cycle_rows, labels): row indices into ``ranges`` of
    the phase ranges in time order, each one's cycle number (-1: outside any cycle), the cycle
    ranges (empty when the trace has none and cycles are formed from consecutive phases), and
    each phase instance's phase name (the label of the spec it matched).
    """
    names = ranges["name"].to_pylist()
    domains = ranges["domain"].to_pylist() if "domain" in ranges.column_names else [""] * len(names)
    # Each distinct (domain, name) is matched once: traces repeat a few names thousands of times.
    label_of = {key: config.label_of(key[1], key[0]) for key in {(d or "", n or "") for n, d in zip(names, domains)}}
    labels = [label_of[(d or "", n or "")] for n, d in zip(names, domains)]
    is_phase = np.array([lab is not None for lab in labels], dtype=bool)
    # A phase range inside another phase range (target_verify inside verify) is part of it:
    # phases follow each other on the GPU timeline, so only the outermost one is a phase.
    if is_phase.any() and "parent_id" in ranges.column_names:
        parent = ranges["parent_id"].to_pylist()
        for r in np.flatnonzero(is_phase):
            p = parent[r]
            while p is not None:
                if is_phase[p]:
                    is_phase[r] = False
                    break
                p = parent[p]
    is_cycle = np.array([(n.startswith(config.cycle_prefix) and lab is None) for n, lab in zip(names, labels)], dtype=bool) if config.cycle_prefix else np.zeros(len(names), bool)
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
        # No cycle ranges (2026-12-01): the phase that starts cycles is the first configured one
        # present; an instance of it starts one where it follows another phase's; where it is the
        # only phase, where its (domain, name) was seen already since the cycle began.
        name = lambda r: (domains[r] or "", names[r] or "")  # noqa: E731
        present = {labels[r] for r in phase_rows}
        start = next((lab for lab in config.labels() if lab in present), labels[phase_rows[0]])
        starts = []
        if present == {start}:
            seen: set = set()
            for k, r in enumerate(phase_rows):
                new = k == 0 or name(r) in seen
                seen = {name(r)} if new else seen | {name(r)}
                starts.append(new)
        else:
            starts = [labels[r] == start and (k == 0 or labels[phase_rows[k - 1]] != start) for k, r in enumerate(phase_rows)]
            # (2026-12-04) A run of consecutive first-phase ranges a whole number of times as long
            # as the most common run (shortest of ties) is that many steps, each starting a cycle.
            runs: list = []
            for k, r in enumerate(phase_rows):
                if labels[r] == start:
                    if starts[k]:
                        runs.append([k])
                    else:
                        runs[-1].append(k)
            # ... where another phase then counts as many instances as there are cycles, and none
            # as many as there are runs.
            run_lengths = [len(run) for run in runs]
            usual_run = max(set(run_lengths), key=lambda n: (run_lengths.count(n), -n)) if runs else 0
            split = list(starts)
            for run in runs:
                if len(run) > usual_run and len(run) % usual_run == 0:
                    for k in run[::usual_run]:
                        split[k] = True
            counts = [sum(1 for r in phase_rows if labels[r] == lab) for lab in present if lab != start]
            long_runs = [run for run in runs if len(run) > usual_run and len(run) % usual_run == 0]
            if sum(split) != len(runs) and sum(split) in counts and len(runs) not in counts:
                starts = split
            elif len(long_runs) == 1 and long_runs[0][0] == 0 and len(runs) > 2:
                # ... or where the only such run opens the sequence.
                for k in long_runs[0][::usual_run]:
                    starts[k] = True
            # (later the same day) A cycle holding more phase ranges than the most common length is
            # cut where a phase comes again after another one: a step without the first phase.
            cycles: list = []
            for k, new in enumerate(starts):
                if new:
                    cycles.append([k])
                elif cycles:
                    cycles[-1].append(k)
            # (2026-12-06) A cycle's length not counting the first phase's ranges (steps draft any number of times).
            lengths = [sum(labels[phase_rows[k]] != start for k in c) for c in cycles]
            usual = max(set(lengths), key=lambda n: (lengths.count(n), -n)) if cycles else 0  # most common, shortest of ties

            def repeats(members):  # a phase again after another, within the cycle
                labs = [labels[phase_rows[k]] for k in members]
                return any(lab in labs[:j] and lab != labs[j - 1] for j, lab in enumerate(labs) if j)

            usual_has_repeat = bool(cycles) and repeats(next(c for c, n in zip(cycles, lengths) if n == usual))
            for members, n in zip(cycles, lengths):
                if n > usual and not usual_has_repeat:
                    seen = set()
                    for k in members:
                        if labels[phase_rows[k]] in seen and labels[phase_rows[k]] != labels[phase_rows[k - 1]]:
                            starts[k] = True
                            seen = set()
                        seen.add(labels[phase_rows[k]])
        starts = np.array(starts, dtype=np.int64)
        cycle_of = np.cumsum(starts) - 1
    return phase_rows, cycle_of, cycle_rows, [labels[r] for r in phase_rows]
