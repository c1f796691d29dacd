"""Properties of the interval algebra, checked against brute force on small integer timelines."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis import intervals as interval_algebra
from tracerecon.analysis.intervals import count_distinct_per_group, explode_slices, last_covering_slice, segmented_min_max, segmented_union_length

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60), st.integers(0, 4)), max_size=40)


def brute_union(pairs):
    covered = set()
    for s, e in pairs:
        covered.update(range(s, e))
    return len(covered)


@given(intervals)
@settings(max_examples=300, deadline=None)
def test_segmented_union_equals_brute_force(items):
    start = np.array([s for s, _, _ in items], dtype=np.int64)
    end = np.array([s + d for s, d, _ in items], dtype=np.int64)
    group = np.array([g for _, _, g in items], dtype=np.int64)
    got = segmented_union_length(start, end, group, 5)
    for g in range(5):
        want = brute_union([(s, s + d) for s, d, gg in items if gg == g])
        assert got[g] == want


@given(st.lists(st.tuples(st.integers(0, 120), st.integers(-5, 40)), max_size=12), st.lists(st.tuples(st.integers(0, 120), st.integers(-5, 40)), max_size=25))
@settings(max_examples=300, deadline=None)
def test_covered_length_equals_brute_force(queries, by):
    # GIVEN query intervals and intervals covering them (some empty or reversed: they cover nothing)
    qs = np.array([q[0] for q in queries], dtype=np.int64)
    qe = np.array([q[0] + q[1] for q in queries], dtype=np.int64)
    bs = np.array([b[0] for b in by], dtype=np.int64)
    be = np.array([b[0] + b[1] for b in by], dtype=np.int64)
    covered = set()
    for s0, e0 in zip(bs.tolist(), be.tolist()):
        covered.update(range(s0, e0))
    # THEN each query's covered length is the count of its points in the union
    want = [len(covered & set(range(s0, e0))) for s0, e0 in zip(qs.tolist(), qe.tolist())]
    assert interval_algebra.covered_length(qs, qe, bs, be).tolist() == want


@given(intervals)
@settings(max_examples=200, deadline=None)
def test_union_is_at_most_sum_and_at_least_max(items):
    start = np.array([s for s, _, _ in items], dtype=np.int64)
    end = np.array([s + d for s, d, _ in items], dtype=np.int64)
    total = segmented_union_length(start, end, np.zeros(len(items), np.int64), 1)[0]
    lengths = end - start
    assert total <= lengths.sum()
    assert total >= (lengths.max() if len(items) else 0)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), max_size=20))
def test_explode_slices_lists_every_element_once_per_slice(slices):
    lo = np.array([a for a, _ in slices], dtype=np.int64)
    hi = np.array([a + n for a, n in slices], dtype=np.int64)
    pos, which = explode_slices(lo, hi)
    want = [(i, p) for i, (a, n) in enumerate(slices) for p in range(a, a + n)]
    assert list(zip(which.tolist(), pos.tolist())) == want


@given(st.integers(0, 70), st.lists(st.tuples(st.integers(-5, 75), st.integers(-5, 75)), max_size=25))
@settings(max_examples=400, deadline=None)
def test_last_covering_slice_is_the_largest_slice_number_over_each_position(n, slices):
    """GIVEN slices that nest, overlap, are empty or reach past either end; THEN each position gets
    the number of the last slice holding it, as painting them in order would leave it."""
    lo = np.array([a for a, _ in slices], dtype=np.int64)
    hi = np.array([b for _, b in slices], dtype=np.int64)
    painted = [-1] * n
    for i, (a, b) in enumerate(slices):
        for p in range(max(a, 0), min(b, n)):
            painted[p] = i
    assert last_covering_slice(lo, hi, n).tolist() == painted


def test_last_covering_slice_of_nested_ranges_by_hand():
    """GIVEN a cycle over positions 0-9, a phase over 2-7 and a sub-range over 4-5, listed
    shallowest first, and a slice over 8-11 of a 10-position timeline; THEN 0-1 are the cycle's,
    2-3 and 6-7 the phase's, 4-5 the sub-range's, 8-9 the last slice's."""
    got = last_covering_slice(np.array([0, 2, 4, 8]), np.array([10, 8, 6, 12]), 10)
    assert got.tolist() == [0, 0, 1, 1, 2, 2, 1, 1, 3, 3]


@settings(deadline=None)  # (the first Arrow conversion in a test process imports pandas)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5), st.integers(-5, 5)), max_size=30))
def test_group_min_max_and_distinct(rows):
    which = np.array([g for g, _, _ in rows], dtype=np.int64)
    lo_v = np.array([a for _, a, _ in rows], dtype=np.int64)
    hi_v = np.array([b for _, _, b in rows], dtype=np.int64)
    mn, mx = segmented_min_max(lo_v, hi_v, which, 4)
    distinct = count_distinct_per_group(lo_v, which, 4)
    for g in range(4):
        members = [(a, b) for gg, a, b in rows if gg == g]
        if members:
            assert mn[g] == min(a for a, _ in members)
            assert mx[g] == max(b for _, b in members)
        assert distinct[g] == len({a for a, _ in members})


@settings(deadline=None)  # (the first Arrow conversion in a test process imports pandas)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 200)), max_size=300))
def test_distinct_count_with_many_distinct_keys(rows):
    # both ways of counting: few keys (presence passes) and more than 64 (packed unique)
    which = np.array([g for g, _ in rows], dtype=np.int64)
    keys = np.array([k for _, k in rows], dtype=np.int64)
    distinct = count_distinct_per_group(keys, which, 6)
    for g in range(6):
        assert distinct[g] == len({k for gg, k in rows if gg == g})


@given(st.lists(st.tuples(st.sampled_from([0, 1 << 24, 2 << 24, (1 << 56) | (1 << 24), 7]), st.integers(-1, 6)), max_size=40),
       st.lists(st.tuples(st.sampled_from([0, 1 << 24, 2 << 24, (1 << 56) | (1 << 24), 7]), st.integers(-1, 6)), max_size=40))
def test_correlation_matching_is_an_exact_join_on_process_and_id(a, b):
    # processes differing only in their pid bits, in the bits above, or in the bits below
    assert_an_exact_join(a, b)


# Correlation ids past 39 bits (other producers than CUPTI's 32-bit ones), some equal to small ids
# in their low bits: 5 and (1 << 39) + 5 and (1 << 40) + 5 are three ids, not one.
_WIDE_IDS = st.sampled_from([-1, 0, 5, 6, (1 << 39) + 5, (1 << 40) + 5, (1 << 62) + 6, (1 << 63) - 1])


@given(st.lists(st.tuples(st.sampled_from([0, 1 << 24, 7]), _WIDE_IDS), max_size=30),
       st.lists(st.tuples(st.sampled_from([0, 1 << 24, 7]), _WIDE_IDS), max_size=30))
def test_correlation_matching_of_ids_wider_than_39_bits_is_the_same_join(a, b):
    assert_an_exact_join(a, b)


def test_a_wide_correlation_id_does_not_match_the_id_of_its_low_bits():
    # GIVEN one process's calls with ids (1 << 40) + 5 (first) and 5, WHEN the op of id 5 asks,
    # THEN it gets the second call, the one of its own id (the low 39 bits alone chose the first)
    from tracerecon.analysis.projection import match_correlation

    one = np.array([1 << 24, 1 << 24], dtype=np.int64)
    got = match_correlation(one, np.array([(1 << 40) + 5, 5], dtype=np.int64), one[:1], np.array([5], dtype=np.int64))
    assert got.tolist() == [1]


def assert_an_exact_join(a, b):
    """``match_correlation`` of (process, correlation id) rows ``a`` and ``b`` is the join by
    brute force: for each row of b, the first row of a with its key (-1: none, or no id)."""
    from tracerecon.analysis.projection import match_correlation

    a_proc, a_corr = (np.array([x[i] for x in a], dtype=np.int64) for i in (0, 1))
    b_proc, b_corr = (np.array([x[i] for x in b], dtype=np.int64) for i in (0, 1))
    got = match_correlation(a_proc, a_corr, b_proc, b_corr)
    first = {}
    for i, key in enumerate(a):
        if key[1] >= 0:
            first.setdefault(key, i)
    assert got.tolist() == [first.get(key, -1) if key[1] >= 0 else -1 for key in b]


@given(st.lists(st.tuples(st.sampled_from([0, 1 << 24, 7]), st.integers(-1, 12)), max_size=8),
       st.sets(st.tuples(st.sampled_from([1 << 24]), st.integers(0, 40)), min_size=17, max_size=40))
def test_correlation_matching_against_rising_calls_is_the_same_join(a, b_set):
    # b as an export's API calls of one process, in call order (its keys rise), and a few rows
    # of a (sync records) with repeats, other processes and no ids: matched by searching b.
    assert_an_exact_join(a, sorted(b_set, key=lambda x: x[1]))


@given(st.lists(st.one_of(st.none(), st.sampled_from([f"k{i}" for i in range(10)])), max_size=60), st.sets(st.integers(0, 9)),
       st.booleans())
@settings(max_examples=300, deadline=None)
def test_string_mask_is_the_test_of_each_value(values, passing, encoded):
    # few or many passing values, few or many failing ones, nulls, plain or dictionary columns
    from tracerecon.analysis.projection import string_mask

    col = pa.array(values, pa.string())
    col = col.dictionary_encode() if encoded else col
    got = string_mask(col, lambda v: int(v[1:]) in passing)
    assert got.tolist() == [v is not None and int(v[1:]) in passing for v in values]


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=60), st.booleans())
@settings(max_examples=500, deadline=None)
def test_median_equals_numpy_quantile(values, as_list):
    # The median's partition path (columns.quantile_ms) gives np.quantile's linear-rule value,
    # odd and even counts alike; nulls in a list are skipped.
    from tracerecon.analysis.columns import median_ms, quantile_ms

    a = np.array(values, dtype=np.int64)
    expected = round(float(np.quantile(a.astype(np.float64), 0.5)) / 1e6, 6)
    assert median_ms(list(values) + [None] if as_list else a) == expected
    assert quantile_ms(a, 0.9) == round(float(np.quantile(a.astype(np.float64), 0.9)) / 1e6, 6)


@given(st.lists(st.integers(-3, 40), min_size=1, max_size=30), st.integers(0, 20_000), st.integers(0, 2**62), st.data())
@settings(max_examples=150, deadline=None)
def test_distinct_few_and_isin_few_equal_numpys(pool, n, offset, data):
    from tracerecon.analysis.intervals import distinct_few, isin_few

    # GIVEN a column of n values drawn from a pool of few or many (up to 30) distinct ones, some
    # used once only (a rarely used stream the sample may miss), shifted into the int64 range
    # where packed stream keys live
    pool = np.array(sorted(set(pool)), dtype=np.int64) + offset
    picks = np.array(data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=8)), dtype=np.int64)
    values = np.resize(pool[picks], n)
    if n:
        values[data.draw(st.integers(0, n - 1))] = pool[-1]
    probe = np.array(data.draw(st.lists(st.sampled_from(pool.tolist()), max_size=20)), dtype=np.int64)
    # THEN both give what numpy's sorts give
    assert np.array_equal(distinct_few(values), np.unique(values))
    assert np.array_equal(isin_few(values, probe), np.isin(values, probe))


@settings(deadline=None)  # (the first Arrow conversion in a test process imports pandas)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0, 3, -1, 1 << 40, (5 << 32) | 2, -(1 << 62)])), max_size=60),
       st.booleans())
def test_distinct_count_by_presence_table_and_by_packed_keys(rows, table):
    # GIVEN members of 8 groups with keys far apart (device << 32 | stream, negatives)
    which = np.array([g for g, _ in rows], dtype=np.int64)
    keys = np.array([k for _, k in rows], dtype=np.int64)
    # WHEN counted with the (group, key) presence table, or with it too small to be used
    with mock.patch.object(interval_algebra, "_PRESENCE_CELLS", 1 << 24 if table else 0):
        distinct = count_distinct_per_group(keys, which, 8)
    # THEN each group's count is that of its distinct keys
    assert distinct.tolist() == [len({k for gg, k in rows if gg == g}) for g in range(8)]


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(-5, 60), st.integers(0, 4), st.booleans()), max_size=40), st.booleans())
def test_union_lengths_of_subsets_with_one_sort(rows, banded):
    # GIVEN intervals in 5 groups, each in or out of a subset
    start = np.array([s for s, _, _, _ in rows], dtype=np.int64)
    end = start + np.array([n for _, n, _, _ in rows], dtype=np.int64)
    group = np.array([g for _, _, g, _ in rows], dtype=np.int64)
    inside = np.array([m for _, _, _, m in rows], dtype=bool)
    # WHEN the unions of the subset, the whole set and the rest are taken at once (in bands,
    # or group by group where the bands would not fit)
    with mock.patch.object(interval_algebra, "_I64_LIMIT", 2**62 if banded else 0):
        sub, every, rest, all_marked, again = interval_algebra.segmented_union_lengths(start, end, group, 5, (inside, None, ~inside, inside | True, None))
    # THEN each is the brute-force union of its own intervals
    for g in range(5):
        for got, keep in ((sub, lambda m: m), (every, lambda m: True), (rest, lambda m: not m), (all_marked, lambda m: True), (again, lambda m: True)):
            assert got[g] == brute_union([(s, s + n) for s, n, gg, m in rows if gg == g and keep(m)])


def test_union_lengths_refuse_a_subset_of_another_length():
    # GIVEN two intervals WHEN a subset mask of three is given THEN it is refused, not cut short
    with pytest.raises(ValueError):
        interval_algebra.segmented_union_lengths(np.array([0, 5]), np.array([3, 9]), np.array([0, 1]), 2, (np.array([True, False, True]),))


def test_graph_nodes_of_two_processes_are_two_launches_whatever_their_ids():
    # GIVEN node kernels of two processes' graph launches, pid 2 with id 5 and pid 3 with id
    # (1 << 40) + 5 (in a packing of pid << 40 with the id, the same key), WHEN their launches are
    # told apart, THEN they are two launches; two nodes of one process's launch stay one
    from tracerecon.analysis.columns import graph_node_launches

    ops = pa.table({
        "kind": ["kernel"] * 3,
        "launch_api": pa.array(["cudaGraphLaunch"] * 3).dictionary_encode(),
        "correlation_id": pa.array([5, (1 << 40) + 5, 5], pa.int64()),
        "pid": pa.array([2, 3, 2], pa.int64()),
    })
    rows, launch = graph_node_launches(ops)
    assert rows.tolist() == [0, 1, 2]
    assert launch[0] != launch[1] and launch[0] == launch[2]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=40), cuts=st.lists(st.integers(1, 39), max_size=6))
def test_a_running_maximum_by_segment_is_each_segments_own_running_maximum(values, cuts):
    # GIVEN values (as wide as int64 timestamps) cut into segments at some indices
    from tracerecon.analysis.boundaries import _running_max_by_segment

    v = np.array(values, dtype=np.int64)
    starts = np.array(sorted({c for c in cuts if c < len(v)}), dtype=np.int64)
    # WHEN the running maximum is taken by segment
    got = _running_max_by_segment(v, starts)
    # THEN it is each segment's own running maximum, started afresh at each cut
    want = np.concatenate([np.maximum.accumulate(s) for s in np.split(v, starts)])
    assert got.tolist() == want.tolist()


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(-10, 270), st.integers(-20, 80)), min_size=1, max_size=10))
@settings(max_examples=300, deadline=None)
def test_a_ranks_busy_time_in_a_window_equals_brute_force(ops, windows):
    # GIVEN a rank's GPU ops (overlapping, nested, empty) and windows (some empty or reversed)
    from tracerecon.analysis.cross_rank import _BusyTime

    busy = _BusyTime(np.array([s for s, _ in ops], np.int64), np.array([s + d for s, d in ops], np.int64))
    lo = np.array([a for a, _ in windows], np.int64)
    hi = lo + np.array([d for _, d in windows], np.int64)
    # WHEN the time some op covers in each window is asked THEN it is the count of covered units
    covered = set()
    for s, d in ops:
        covered.update(range(s, s + d))
    assert busy.between(lo, hi).tolist() == [sum(1 for t in range(a, b) if t in covered) for a, b in zip(lo.tolist(), hi.tolist())]
