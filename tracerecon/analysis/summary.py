"""Per rank x phase statistics: what ``report`` prints and ``report --json`` returns.

Pure functions over the phases / cycles tables. Medians are exact (numpy), in milliseconds.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

from tracerecon.analysis.config import NUMBERS, is_cycle_name
from tracerecon.analysis.columns import groups_apart_ms, median_ms
from tracerecon.analysis.phases import phases_per_cycle
from tracerecon.analysis.projection import distinct_values, int64s
from tracerecon.json_text import escaped_char, invisible
from tracerecon.report_model import CycleSummary, PhaseSummary, dominant_verdict


# Why a cycle is left out of the medians, each a boolean column of the cycles table, in the order
# a cycle is counted by (a warm-up cycle that is also empty counts as warm-up).
LEFT_OUT_BECAUSE = ("warmup", "incomplete", "empty")


def _flag(cycles: pa.Table, column: str) -> np.ndarray:
    """A boolean column of ``cycles`` (null, or absent in an older export: False)."""
    if column not in cycles.column_names:
        return np.zeros(cycles.num_rows, dtype=bool)
    return pa.compute.fill_null(cycles[column], False).to_numpy(zero_copy_only=False).astype(bool)


def left_out_cycles(cycles: pa.Table) -> np.ndarray:
    """Per row of ``cycles``: left out of the medians, as a warm-up cycle (``warmup``), one not
    whole in the trace (``incomplete``) or one whose phases launched no GPU work (``empty``)."""
    out = np.zeros(cycles.num_rows, dtype=bool)
    for column in LEFT_OUT_BECAUSE:
        out |= _flag(cycles, column)
    return out


def steady_phases(phases: pa.Table, cycles: pa.Table | None) -> pa.Table:
    """``phases`` as the medians count them: without the instances of the cycles left out
    (``left_out_cycles``: warm-up, incomplete), nor those in no cycle of a phase
    name that has instances in cycles (``outside_cycles``), so that a phase's ``n`` counts cycles."""
    if phases.num_rows == 0:
        return phases
    outside = outside_cycles(phases)
    if outside.any():
        phases = phases.filter(pa.array(~outside))
    if cycles is None:
        return phases
    left_out = cycles.filter(pa.array(left_out_cycles(cycles)))["cycle"]
    if len(left_out) == 0:
        return phases
    # As a set lookup of those cycles: a phase of a null cycle goes only if one of them is null
    # too (is_in matches null to null).
    return phases.filter(pa.compute.invert(pa.compute.is_in(phases["cycle"], value_set=left_out.combine_chunks())))


def _in_no_cycle(phases: pa.Table) -> tuple[np.ndarray, list, np.ndarray, np.ndarray] | None:
    """Per row of ``phases``: in no cycle; the phase names and each row's code among them; and
    per name, whether some instance of it is in a cycle. None where every row is in a cycle, or
    none is (nothing to tell apart)."""
    if phases.num_rows == 0:
        return None
    in_none = ~phases["cycle"].is_valid().to_numpy(zero_copy_only=False)
    if not in_none.any() or in_none.all():
        return None
    listed, names = distinct_values(phases["phase"])
    with_cycle = np.zeros(len(listed), dtype=bool)
    with_cycle[names[~in_none]] = True
    return in_none, listed, names, with_cycle


def outside_cycles(phases: pa.Table) -> np.ndarray:
    """Per row of ``phases``: an instance in no cycle of a phase name that has instances in
    cycles (warm-up iterations run outside the ``cycle N`` ranges, a range closed after its
    cycle's, a stray range of the name on another thread). Those are read alone and kept in the
    phases table, but left out of the per-cycle medians: mixing them in put single draft steps
    beside cycles' sums, and five warm-up iterations in ``n`` beside 40 cycles."""
    told = _in_no_cycle(phases)
    if told is None:
        return np.zeros(phases.num_rows, dtype=bool)
    in_none, _, names, with_cycle = told
    return in_none & with_cycle[names]


def never_in_cycles(phases: pa.Table) -> tuple[str, ...]:
    """The phase names none of whose instances is in a cycle, where some other phase's are (a
    one-off range named as a phase: ``ncclCommInitRank`` before the first cycle): their rows
    count their ranges, each read alone, not per cycle; in table order."""
    told = _in_no_cycle(phases)
    if told is None:
        return ()
    in_none, listed, names, with_cycle = told
    return tuple(dict.fromkeys(listed[k] for k in names[in_none].tolist() if not with_cycle[k]))


def steady_cycles(cycles: pa.Table) -> pa.Table:
    """``cycles`` without those left out of the medians (``left_out_cycles``)."""
    left_out = left_out_cycles(cycles)
    return cycles.filter(pa.array(~left_out)) if left_out.any() else cycles


def summarize_phases(phases: pa.Table, order: tuple[str, ...] = (), cycles: pa.Table | None = None) -> list[PhaseSummary]:
    """One summary per phase name, over its cycles (a name's instances in one cycle taken
    together: ``phases_per_cycle``; ``n`` counts those, and, of a name never in a cycle, its
    instances); names in ``order`` first (in that order), then the rest by first appearance.
    Instances of warm-up cycles (with ``cycles``), and those in no cycle of a name that has
    instances in cycles, are left out (``steady_phases``)."""
    phases = phases_per_cycle(steady_phases(phases, cycles))
    if phases.num_rows == 0:
        return []
    # Grouped with numpy: the names and labels as dictionary codes (in order of first
    # appearance), the durations as int64 with a validity mask (nulls are left out of medians).
    names_seen, name_code = distinct_values(phases["phase"])
    present = set(names_seen)
    names = [n for n in order if n in present] + [n for n in names_seen if n not in order]
    durations = {c: _valid_int64(phases[c]) for c in ("cpu_ns", "gpu_ns", "gpu_span_ns", "gpu_busy_ns", "error_ns")}
    labels = {c: distinct_values(phases[c]) for c in ("verdict", "cause")}
    out = []
    for name in names:
        idx = np.flatnonzero(name_code == names_seen.index(name))
        median = {c: median_ms(v[idx][ok[idx]]) for c, (v, ok) in durations.items()}
        error, has_error = durations["error_ns"]
        abs_error = median_ms(np.abs(error[idx][has_error[idx]]))
        apart = {c: groups_apart_ms(durations[c][0][idx][durations[c][1][idx]]) for c in ("cpu_ns", "gpu_ns")}
        verdicts = _most_common(labels["verdict"], idx)
        words, codes = labels["verdict"]
        of_verdict = idx[codes[idx] == words.index(dominant_verdict(verdicts))]
        out.append(
            PhaseSummary(
                phase=name,
                n=len(idx),
                cpu_ms_median=median["cpu_ns"],
                gpu_ms_median=median["gpu_ns"],
                gpu_span_ms_median=median["gpu_span_ns"],
                gpu_busy_ms_median=median["gpu_busy_ns"],
                error_ms_median=median["error_ns"],
                verdicts=verdicts,
                causes=_most_common(labels["cause"], idx),
                cpu_ms_groups=apart["cpu_ns"],
                gpu_ms_groups=apart["gpu_ns"],
                verdict_causes=_most_common(labels["cause"], of_verdict),
                abs_error_ms_median=abs_error,
            )
        )
    return out


def _valid_int64(col) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, which are not null)."""
    return int64s(col, 0), col.is_valid().to_numpy(zero_copy_only=False)


def _most_common(labels: tuple[list, np.ndarray], idx: np.ndarray) -> dict:
    """``dict(Counter(labels[idx]).most_common())`` for a column's ``distinct_values``: counts,
    largest first, ties in order of first appearance among ``idx`` (a null label is the key None)."""
    words, all_codes = labels
    codes = all_codes[idx]
    values, first, counts = np.unique(codes, return_index=True, return_counts=True)
    ranked = sorted(zip(values.tolist(), first.tolist(), counts.tolist()), key=lambda x: (-x[2], x[1]))
    return {words[v]: n for v, _, n in ranked}


def per_token(cycles: pa.Table, phases: pa.Table | None) -> tuple[int | None, float | None, dict]:
    """Over the cycles that said how many tokens they accepted: the tokens (None where none
    said); over those of them with GPU time (none in a CPU-only run), GPU ms per token and each
    phase's GPU ms per token (None and {} where they accepted no token)."""
    if cycles.num_rows == 0 or "accepted_tokens" not in cycles.column_names:
        return None, None, {}
    c = cycles.select(["cycle", "gpu_ns", "accepted_tokens"]).to_pydict()
    told = [n for n in c["accepted_tokens"] if n is not None]
    told_total = sum(told) if told else None
    said = {cy: (g, n) for cy, g, n in zip(c["cycle"], c["gpu_ns"], c["accepted_tokens"]) if n is not None and g is not None}
    tokens = sum(n for _, n in said.values())
    if tokens <= 0:
        return told_total, None, {}
    per_phase: dict[str, int] = {}
    if phases is not None and phases.num_rows:
        p = phases.select(["cycle", "phase", "gpu_ns"]).to_pydict()
        for cy, name, g in zip(p["cycle"], p["phase"], p["gpu_ns"]):
            if cy in said and g is not None:
                per_phase[name] = per_phase.get(name, 0) + g
    return (told_total, round(sum(g for g, _ in said.values()) / tokens / 1e6, 6),
            {k: round(v / tokens / 1e6, 6) for k, v in per_phase.items()})


@dataclass(frozen=True)
class CycleRow:
    """One cycle of one rank as the cycles table shows it: its CPU and GPU ms, each phase's
    (the ranges of a phase in the cycle taken together: ``phases_per_cycle``), the sum of the
    phases' |CPU - GPU| and their verdicts' initials in phase order."""

    cycle: int
    cpu_ms: float
    gpu_ms: float | None
    phase_cpu_ms: dict  # phase -> ms
    phase_gpu_ms: dict  # phase -> ms (a phase with no GPU boundaries: absent)
    abs_error_ms: float
    verdicts: str
    warmup: bool
    incomplete: bool = False  # not whole in the trace (``cycles.incomplete``)
    empty: bool = False  # its phases launched no GPU work (``cycles.empty``)

    @property
    def left_out(self) -> str:
        """Why the report leaves the cycle out ("warm-up", "incomplete": not whole in the
        trace, "empty": it launched no GPU work), or "" where it counts."""
        return "warm-up" if self.warmup else "incomplete" if self.incomplete else "empty" if self.empty else ""


def cycle_rows(phases: pa.Table, cycles: pa.Table) -> list[CycleRow]:
    """Every cycle of ``cycles`` (warm-up ones marked), in its order, with its phases."""
    per = phases_per_cycle(phases).to_pydict() if phases.num_rows else {"cycle": []}
    by_cycle: dict[int, dict] = {}
    for i, cyc in enumerate(per["cycle"]):
        if cyc is None:
            continue
        d = by_cycle.setdefault(cyc, {"cpu": {}, "gpu": {}, "err": 0, "verdicts": []})
        name = per["phase"][i]
        d["cpu"][name] = d["cpu"].get(name, 0) + per["cpu_ns"][i]
        if per["gpu_ns"][i] is not None:
            d["gpu"][name] = d["gpu"].get(name, 0) + per["gpu_ns"][i]
        d["err"] += abs(per["error_ns"][i] or 0)
        d["verdicts"].append(per["verdict"][i][0].upper())
    out = []
    c = cycles.to_pydict()
    warm = c.get("warmup") or [False] * len(c["cycle"])
    incomplete = c.get("incomplete") or [False] * len(c["cycle"])
    empty = c.get("empty") or [False] * len(c["cycle"])
    for cyc, cpu, gpu, w, k, e in zip(c["cycle"], c["cpu_ns"], c["gpu_ns"], warm, incomplete, empty):
        d = by_cycle.get(cyc, {"cpu": {}, "gpu": {}, "err": 0, "verdicts": []})
        out.append(CycleRow(cycle=cyc, cpu_ms=cpu / 1e6, gpu_ms=None if gpu is None else gpu / 1e6,
                            phase_cpu_ms={k: v / 1e6 for k, v in d["cpu"].items()}, phase_gpu_ms={k: v / 1e6 for k, v in d["gpu"].items()},
                            abs_error_ms=d["err"] / 1e6, verdicts="".join(d["verdicts"]), warmup=bool(w), incomplete=bool(k),
                            empty=bool(e)))
    return out


def worst_cycle(phases: pa.Table, cycles: pa.Table | None = None) -> int | None:
    """The cycle whose phases' CPU timers miss the GPU truth by the most (sum of |error|, a
    phase's ranges in one cycle taken together: ``phases_per_cycle``), of the cycles the
    report counts (warm-up cycles of ``cycles`` left out); None where none misses at all."""
    phases = steady_phases(phases, cycles)
    if phases.num_rows == 0:
        return None
    phases = phases_per_cycle(phases)
    cyc = int64s(phases["cycle"], -1)
    err = np.abs(int64s(phases["error_ns"], 0))
    ok = cyc >= 0
    if not ok.any():
        return None
    ids, inv = np.unique(cyc[ok], return_inverse=True)
    tot = np.bincount(inv.ravel(), weights=err[ok])
    if not (tot > 0).any():  # no timer misses at all: no worst cycle
        return None
    return int(ids[int(np.argmax(tot))])


def summarize_cycles(cycles: pa.Table, phases: pa.Table | None = None) -> CycleSummary:
    """Medians over the steady cycles (warm-up left out), and GPU time per accepted token."""
    if cycles.num_rows == 0:
        return CycleSummary(0, None, None, None, None, 0)
    warm, incomplete, empty = (_flag(cycles, c) for c in LEFT_OUT_BECAUSE)
    n_warm = int(warm.sum())
    n_incomplete = int((incomplete & ~warm).sum())  # (an incomplete warm-up cycle counts as warm-up)
    n_empty = int((empty & ~warm & ~incomplete).sum())
    n_outside = int(outside_cycles(phases).sum()) if phases is not None else 0
    if n_warm or n_incomplete or n_empty:
        cycles = steady_cycles(cycles)
    tokens, per_tok, per_phase = per_token(cycles, phases)

    def median_of(column: str) -> float | None:
        values, valid = _valid_int64(cycles[column])
        return median_ms(values[valid])

    return CycleSummary(
        accepted_tokens=tokens,
        gpu_ms_per_accepted_token=per_tok,
        phase_ms_per_accepted_token=per_phase,
        n_warmup=n_warm,
        n_incomplete=n_incomplete,
        n_empty=n_empty,
        n_outside_cycles=n_outside,
        phases_in_no_cycle=never_in_cycles(phases) if phases is not None else (),
        n=cycles.num_rows,
        cpu_ms_median=median_of("cpu_ns"),
        gpu_ms_median=median_of("gpu_ns"),
        phases_cpu_ms_median=median_of("phases_cpu_ns"),
        phases_gpu_ms_median=median_of("phases_gpu_ns"),
        n_add_up=_count_true(cycles["adds_up"]),
    )


def _count_true(column) -> int:
    """The true values of a boolean column (nulls are not)."""
    return int(pa.compute.sum(pa.compute.fill_null(column, False)).as_py() or 0)


@dataclass(frozen=True)
class RangeSummary:
    """One NVTX range name of one rank: like ``nsys stats -r nvtx_sum``, with GPU time."""

    domain: str
    name: str
    n: int
    cpu_ms_median: float | None
    gpu_ms_median: float | None  # projected span: first op start .. last op end
    gpu_busy_ms_total: float  # union of its ops' time, summed over instances
    n_gpu_ops: int

    def to_json(self) -> dict:
        # (``gpu_ms_median`` is the span too, kept for readers of older documents: in `report`
        # the key means boundary time, so the span has its own name here as there)
        return {"domain": self.domain, "name": self.name, "n": self.n, "cpu_ms_median": self.cpu_ms_median,
                "gpu_ms_median": self.gpu_ms_median, "gpu_span_ms_median": self.gpu_ms_median, "gpu_busy_ms_total": self.gpu_busy_ms_total,
                "n_gpu_ops": self.n_gpu_ops}


# Names differing only in their numbers are one row of a table (``summarize_ranges``' ``families``)
# where a domain holds this many of them: a profiler's ``aten::copy_, op_id = 317175`` gave one
# row per call (17,586 lines for a public PyTorch trace).
FAMILY_MIN_NAMES = 3


def summarize_ranges(ranges: pa.Table, cycle_prefix: str | None = None, families: bool = False) -> list[RangeSummary]:
    """Per (domain, name): count, CPU median, projected GPU median, GPU busy total; most GPU time
    first. With ``cycle_prefix``, the numbered cycle ranges (``cycle 0``, ``cycle 1``, ...) are one
    row, named ``cycle N``; with ``families``, so are the names of a domain that differ only in
    their numbers, where it holds FAMILY_MIN_NAMES or more of them (``aten::mm, op_id = N``)."""
    if ranges.num_rows == 0:
        return []
    d = ranges.select(["domain", "name", "start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns", "n_gpu_ops"]).to_pydict()
    if cycle_prefix:
        numbered = re.compile(re.escape(cycle_prefix) + r"\s*\d+$")
        d["name"] = [f"{cycle_prefix} N" if n is not None and numbered.match(n) else n for n in d["name"]]
    if families:
        members: dict[tuple, set] = {}
        for dom, n in zip(d["domain"], d["name"]):
            if n is not None and NUMBERS.search(n):
                members.setdefault((dom, NUMBERS.sub(_HOLE, n)), set()).add(n)
        big = {k for k, names in members.items() if len(names) >= FAMILY_MIN_NAMES}
        if big:
            d["name"] = [NUMBERS.sub(_HOLE, n).replace(_HOLE, "N") if n is not None and (dom, NUMBERS.sub(_HOLE, n)) in big else n
                         for dom, n in zip(d["domain"], d["name"])]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(d["domain"], d["name"])):
        groups.setdefault(key, []).append(i)
    out = []
    for (domain, name), idx in groups.items():
        span = [d["gpu_end_ns"][i] - d["gpu_start_ns"][i] for i in idx if d["gpu_start_ns"][i] is not None]
        out.append(RangeSummary(
            domain=domain or "", name=name or "", n=len(idx),
            cpu_ms_median=median_ms([d["end_ns"][i] - d["start_ns"][i] for i in idx]),
            gpu_ms_median=median_ms(span),
            gpu_busy_ms_total=round(sum(d["gpu_busy_ns"][i] or 0 for i in idx) / 1e6, 6),
            n_gpu_ops=int(sum(d["n_gpu_ops"][i] or 0 for i in idx)),
        ))
    return sorted(out, key=lambda r: (-r.gpu_busy_ms_total, -r.n, r.name))


_HOLE = "\x00"  # stands for a run of digits in a name's shape


def phase_candidates(ranges: pa.Table, cycle_prefix: str = "cycle", most: int = 4) -> list[str]:
    """``--phase`` values for the ranges that look like an engine's phases.

    Where the trace has cycle ranges, the ranges directly inside them (not inside another range
    of their thread there), in order of first appearance, whether they ran GPU work or not (a
    phase that only waits is a phase). Otherwise most GPU time first: ranges with GPU work that
    are not cycle ranges, nor hold ranges run bare elsewhere (``_containers``: a ``warmup``
    range around an iteration's phases), count; names that differ only in their
    numbers (``aten::mm, op_id = 3171``, ``layer 12``) are one family, suggested as a pattern
    (``LABEL=re:^aten::mm, op_id = \\d+$``). Families seen 3+ times come first; when there is
    none, any range with GPU work is suggested. Each value, passed to ``--phase``, matches at
    least one range (with GPU work, outside the cycle-range path)."""
    in_cycles = _in_cycle_ranges(ranges, cycle_prefix)
    if in_cycles:
        return in_cycles[:max(most, 8)]
    containers = _containers(ranges)
    rows = [r for r in summarize_ranges(ranges)
            if r.n_gpu_ops > 0 and r.name and not is_cycle_name(r.name, cycle_prefix) and r.name not in containers]
    families: dict[str, list[RangeSummary]] = {}
    for r in rows:
        families.setdefault(NUMBERS.sub(_HOLE, r.name), []).append(r)
    ranked = sorted(families.items(), key=lambda kv: -sum(m.gpu_busy_ms_total for m in kv[1]))
    repeated = [(shape, members) for shape, members in ranked if sum(m.n for m in members) >= 3]
    return [_phase_value(shape, _sole_name(members)) for shape, members in _not_nested_in_another(ranges, repeated or ranked, most)]


def _not_nested_in_another(ranges: pa.Table, families: list[tuple[str, list]], most: int) -> list[tuple[str, list]]:
    """The first ``most`` of ``families`` (name shapes, best first) but for a family whose every
    range lies inside a range of a family taken before it, or that holds a range of one: as
    phases the inner would be read as part of the outer (``select_phases``), so suggesting both
    gave a flag the report then set aside (``flash_attn::_flash_attn_forward`` inside
    ``FlashAttnFunc``, ``aten::addmm`` inside ``aten::linear``)."""
    if "parent_id" not in ranges.column_names:
        return families[:most]
    names, parents = ranges["name"].to_pylist(), ranges["parent_id"].to_pylist()
    shape = [NUMBERS.sub(_HOLE, n) if n else None for n in names]
    rows: dict[str, list[int]] = {}
    for i, sh in enumerate(shape):
        rows.setdefault(sh, []).append(i)

    def inside(i: int, taken: set) -> bool:
        p, depth = parents[i], 0
        while p is not None and 0 <= p < len(parents) and depth < 1024:  # (bounded against a cycle of ids)
            if shape[p] in taken:
                return True
            p, depth = parents[p], depth + 1
        return False

    out, taken = [], set()
    for sh, members in families:
        # Inside those taken (read as part of them), or holding ranges of one (which then would be).
        if taken and (all(inside(i, taken) for i in rows.get(sh, ())) or any(inside(i, {sh}) for t in taken for i in rows.get(t, ()))):
            continue
        out.append((sh, members))
        taken.add(sh)
        if len(out) == most:
            break
    return out


def _in_cycle_ranges(ranges: pa.Table, cycle_prefix: str) -> list[str]:
    """``phase_candidates``' values for the ranges directly inside cycle ranges (same process;
    a range whose enclosing range on its thread is not a cycle range is nested in a phase), one
    per family of names, in order of first appearance. Empty without cycle ranges."""
    if ranges.num_rows == 0 or not {"pid", "parent_id"} <= set(ranges.column_names):
        return []
    d = ranges.select(["pid", "parent_id", "name", "start_ns", "end_ns"]).to_pydict()
    is_cycle = [is_cycle_name(n, cycle_prefix) for n in d["name"]]
    cycles: dict[int, list[tuple[int, int]]] = {}
    for pid, start, end, c in zip(d["pid"], d["start_ns"], d["end_ns"], is_cycle):
        if c and start is not None and end is not None:
            cycles.setdefault(pid, []).append((start, end))
    if not cycles:
        return []
    starts = {pid: sorted(spans) for pid, spans in cycles.items()}
    keys = {pid: [a for a, _ in spans] for pid, spans in starts.items()}
    families: dict[str, list[RangeSummary]] = {}
    order = sorted(range(len(is_cycle)), key=lambda i: (d["start_ns"][i] is None, d["start_ns"][i] or 0))
    for i in order:
        name, pid, start, end, parent = d["name"][i], d["pid"][i], d["start_ns"][i], d["end_ns"][i], d["parent_id"][i]
        if is_cycle[i] or not name or start is None or end is None or pid not in keys:
            continue
        if parent is not None and not is_cycle[parent]:
            continue  # nested in another range of its thread inside the cycle
        k = bisect.bisect_right(keys[pid], start) - 1
        if k < 0 or end > starts[pid][k][1]:
            continue  # in no cycle range
        family = families.setdefault(NUMBERS.sub(_HOLE, name), [])
        if all(m.name != name for m in family):
            family.append(RangeSummary("", name, 1, None, None, 0.0, 0))
    return [_phase_value(shape, _sole_name(members)) for shape, members in families.items()]


def _containers(ranges: pa.Table) -> set[str]:
    """Names of ranges that hold ranges of names also seen at the top of a thread (an
    iteration's ``warmup`` range around the phases the later iterations run bare): no phase of
    their own. A range holding only ranges of its own (``forward`` around ``layer 0``..``layer
    3``) is a phase with detail inside."""
    if ranges.num_rows == 0 or "parent_id" not in ranges.column_names:
        return set()
    parents = ranges["parent_id"].to_pylist()
    names = ranges["name"].to_pylist()
    top = {n for n, p in zip(names, parents) if p is None}
    return {names[p] for n, p in zip(names, parents) if p is not None and n in top and names[p]}


def phase_value_for(name: str) -> str:
    """The ``--phase`` value for the range name ``name`` and the names that differ from it only
    in their numbers (``aten::add, seq = 47285``: a pattern; a name without numbers: itself)."""
    shape = NUMBERS.sub(_HOLE, name)
    return _phase_value(shape, name if shape == name else None)


def _sole_name(members: list["RangeSummary"]) -> str | None:
    """The one name of a family of one (None for several)."""
    return members[0].name if len(members) == 1 else None


def _phase_value(shape: str, sole: str | None) -> str:
    """The ``--phase`` value naming one family of range names (names of ``shape``, numbers
    aside): the pattern that takes them all, or, for a family of one name (``sole``), that name."""
    label = _without_trailing_key(shape.split(_HOLE)[0])  # "aten::mm, op_id = " -> "aten::mm"
    if label.count("(") > label.count(")"):  # "FSDP::pre_forward (encoder.block." -> "FSDP::pre_forward"
        label = label[: label.rfind("(")]
    label = _rstrip_where(label, lambda c: c.isspace() or c in ",:;#(.-").replace("=", "").strip() or "phase"
    if sole is None:
        return f"{label}=re:^" + r"\d+".join("".join(" " if c == " " else _pattern_char(c) for c in part) for part in shape.split(_HOLE)) + "$"
    name = sole
    if _UNTYPABLE.search(name) or not name.strip() or not name.isascii() and any(map(invisible, name)):
        # A name with control characters cannot be typed in a shell as it is, nor can a blank
        # one be a bare --phase value, nor one with characters that show as nothing be read off
        # the screen: a pattern that writes them as escapes matches it.
        typable = re.sub(r"[^\w:.\-]+", "_", name).strip("_") or "phase"
        return f"{typable}=re:^" + "".join(_pattern_char(c) for c in name) + "$"
    return f"{label}={name}" if "=" in name else name  # a name with "=" would read as LABEL=PATTERN


def _without_trailing_key(label: str) -> str:
    """``label`` less a trailing ``key =`` and the comma and blanks before it (``aten::mm,
    op_id = `` -> ``aten::mm``), where it ends so. Walked back from the end: a regex anchored
    at the end is tried from every position, and a 150,000-character range name took minutes."""
    t = label.rstrip()
    if not t.endswith("="):
        return label
    key = t[:-1].rstrip()
    stem = _rstrip_where(key, lambda c: c.isalnum() or c in "_.")
    if len(stem) == len(key):  # ("=" with no key before it)
        return label
    stem = stem.rstrip()
    return stem[:-1] if stem.endswith(",") else stem


def _rstrip_where(text: str, strip) -> str:
    """``text`` less its trailing characters for which ``strip`` holds (linear in their number)."""
    j = len(text)
    while j and strip(text[j - 1]):
        j -= 1
    return text[:j]


_UNTYPABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _pattern_char(char: str) -> str:
    """One character of a name in a ``re:`` pattern that pastes as printed."""
    if _UNTYPABLE.match(char):
        return f"\\x{ord(char):02x}"
    if invisible(char):
        return escaped_char(char)
    return re.escape(char)
