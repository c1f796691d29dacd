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
            # ... where another phase then counted as many instances as there were cycles, and none
            # as many as there were runs (until 2026-12-06: now counted per cycle, below).
            run_lengths = [len(run) for run in runs]
            usual_run = max(set(run_lengths), key=lambda n: (run_lengths.count(n), -n)) if runs else 0
            split = list(starts)
            for run in runs:
                if len(run) > usual_run and len(run) % usual_run == 0:
                    for k in run[::usual_run]:
                        split[k] = True
            long_runs = [run for run in runs if len(run) > usual_run and len(run) % usual_run == 0]

            # (2026-12-06) ... where another phase then runs once in every cycle so split, the
            # first (at most once) and the last aside, counted per cycle, not over the capture.
            def once_a_cycle(marks, lab):
                per, c = [0] * sum(marks), -1
                for k, r in enumerate(phase_rows):
                    c += marks[k]
                    if c >= 0 and labels[r] == lab:
                        per[c] += 1
                return len(per) > 2 and all(x == 1 for x in per[1:-1]) and per[0] <= 1

            if sum(split) != len(runs) and any(once_a_cycle(split, lab) for lab in sorted(present - {start})):
                starts = split
            elif len(long_runs) == 1 and long_runs[0][0] == 0 and len(runs) > 2:
                # ... or where the only such run opens the sequence.
                for k in long_runs[0][::usual_run]:
                    starts[k] = True
            # (2026-12-06, replacing the later-the-same-day rule of 2026-12-04: a cycle longer than
            # most cut where a phase comes again after another) A step without the first phase:
            # the usual step's other phases in order (of the cycles but the last, the sequence
            # whose repeats make up the most of them, then the most common, then the shorter);
            # in each cycle (but the last
            # where the first cycle ran no other phase), after that sequence, or after its last
            # phase where it comes once in it, the next step begins where a phase of it follows.
            cycles: list = []
            for k, new in enumerate(starts):
                if new:
                    cycles.append([k])
                elif cycles:
                    cycles[-1].append(k)
            seqs = [[k for k in c if labels[phase_rows[k]] != start] for c in cycles]
            whole = [tuple(labels[phase_rows[k]] for k in seq) for seq in seqs[:-1] if seq]
            if whole:
                def tiled(q):  # whole cycles made of q repeated
                    return sum(1 for w in whole if len(w) % len(q) == 0 and q * (len(w) // len(q)) == w)

                usual = max(whole, key=lambda q: (tiled(q), whole.count(q), -len(q), -whole.index(q)))
                for members in (seqs[:-1] if not seqs[0] else seqs):
                    labs = [labels[phase_rows[k]] for k in members]
                    i = 0
                    while i < len(labs):
                        if tuple(labs[i:i + len(usual)]) == usual:
                            j = i + len(usual)
                        elif usual.count(usual[-1]) == 1 and usual[-1] in labs[i:]:
                            j = labs.index(usual[-1], i) + 1
                        else:
                            break
                        if j == len(labs) or not set(labs[j:]) & set(usual):
                            break
                        starts[members[j]] = True
                        i = j
        starts = np.array(starts, dtype=np.int64)
        cycle_of = np.cumsum(starts) - 1
    return phase_rows, cycle_of, cycle_rows, [labels[r] for r in phase_rows]
