"""``ranges.nest`` on whole columns against the stack loop it replaced (``tests/reference_ranges.py``,
kept as it was): the same order, parents and depths on every sample export and on random ranges
of several threads: properly nested, overlapping, equal, sharing starts, mixed with start/end
ranges, closed and never closed.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_ranges as reference
from conftest import SAMPLES

from tracerecon.analysis.ranges import nest
from tracerecon.nsys.sqlite_export import read_export


def _same(raw: pa.Table) -> None:
    got, want = nest(raw), reference.nest(raw)
    assert got.schema == want.schema
    for name in want.column_names:
        assert got[name].equals(want[name]), name


@pytest.mark.parametrize("path", sorted(SAMPLES.rglob("*.sqlite")), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_real_exports_nest_as_the_stack_loop_did(path: Path):
    # GIVEN a real export's NVTX ranges WHEN nested THEN as the stack loop nested them
    _same(read_export(path).nvtx_ranges)


@st.composite
def ranges(draw):
    n = draw(st.integers(0, 80))
    rows = []
    for _ in range(n):
        start = draw(st.one_of(st.integers(0, 30), st.integers(0, 30), st.just(-(2**63))))  # and the very least time
        rows.append({
            "pid": draw(st.sampled_from([1, 2])),
            "tid": draw(st.sampled_from([1, 2, 3])),
            "start_ns": start,
            "end_ns": start + (draw(st.integers(0, 30)) if start >= 0 else 0),
            "style": draw(st.sampled_from(["push_pop", "push_pop", "push_pop", "start_end", "start_end_cross_thread"])),
            "name": draw(st.sampled_from(["a", "b"])),
        })
    return pa.table({
        "pid": pa.array([r["pid"] for r in rows], pa.int64()),
        "tid": pa.array([r["tid"] for r in rows], pa.int64()),
        "start_ns": pa.array([r["start_ns"] for r in rows], pa.int64()),
        "end_ns": pa.array([r["end_ns"] for r in rows], pa.int64()),
        "style": pa.array([r["style"] for r in rows], pa.string()),
        "name": pa.array([r["name"] for r in rows], pa.string()),
    })


@settings(max_examples=400, deadline=None)
@given(raw=ranges())
def test_random_ranges_nest_as_the_stack_loop_did(raw):
    # GIVEN ranges of several threads, nested, overlapping, equal or sharing starts
    # WHEN nested THEN order, parents and depths are the stack loop's
    _same(raw)


def test_a_chain_and_a_range_overlapping_it():
    # GIVEN push/pop ranges (start, end) on one thread: a chain (0, 100) > (1, 99) > (2, 98), then
    # (3, 200), which overlaps the chain's end, and (3, 97) > (4, 96)
    raw = pa.table({
        "pid": [1] * 6, "tid": [1] * 6,
        "start_ns": [0, 1, 2, 3, 3, 4],
        "end_ns": [100, 99, 98, 97, 200, 96],
        "style": ["push_pop"] * 6, "name": ["x"] * 6,
    })
    out = nest(raw)
    # THEN in (start, longest first) order the chain nests, (3, 200) is in none of it (it ends
    # later), and (3, 97) takes the innermost open range containing it, (3, 200), not (2, 98)
    assert list(zip(out["start_ns"].to_pylist(), out["end_ns"].to_pylist())) == [(0, 100), (1, 99), (2, 98), (3, 200), (3, 97), (4, 96)]
    assert out["parent_id"].to_pylist() == [None, 0, 1, None, 3, 4]
    assert out["depth"].to_pylist() == [0, 1, 2, 0, 1, 2]
    _same(raw)
