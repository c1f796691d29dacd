"""``forks_joined_back``: each fork of a stream paired with its side stream's first join back,
the one pairing that the said-stream launcher rule and the caller-stream round trips read."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis.stream_clock import forks_joined_back


def test_a_fork_pairs_with_the_first_join_back_after_it_and_one_never_joined_back_is_left_out():
    # GIVEN stream 0 forks side 1 at 10 and 20 and side 2 at 15; side 1 joins back at 30 and 40,
    # side 2 never; 0 forks side 1 again at 50, never joined back after
    into = np.array([1, 2, 1, 0, 0, 1])
    from_ = np.array([0, 0, 0, 1, 1, 0])
    cpu = np.array([10, 15, 20, 30, 40, 50])
    # WHEN the forks of stream 0 are paired
    fork_at, side, join_at = forks_joined_back(into, from_, cpu, 0)
    # THEN both forks of side 1 before its first join back pair with that join (30), the fork at
    # 50 and side 2's are left out
    assert fork_at.tolist() == [10, 20] and side.tolist() == [1, 1] and join_at.tolist() == [30, 30]


def test_only_the_counted_waits_fork_and_only_those_counted_as_joins_join():
    # GIVEN forks of side 1 at 10 (counted) and 20 (not), joins back at 30 (counted, but no join
    # where joins are told apart) and 40
    into, from_, cpu = np.array([1, 1, 0, 0]), np.array([0, 0, 1, 1]), np.array([10, 20, 30, 40])
    counted = np.array([True, False, True, True])
    # WHEN paired with every counted wait, then with joins told apart
    both = forks_joined_back(into, from_, cpu, 0, counted)
    joins_apart = forks_joined_back(into, from_, cpu, 0, counted, joins_counted=np.array([False, False, False, True]))
    # THEN the fork at 10 joins back at 30, or at 40 where 30 is no join
    assert [a.tolist() for a in both] == [[10], [1], [30]]
    assert [a.tolist() for a in joins_apart] == [[10], [1], [40]]


waits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans(), st.booleans()), max_size=30)


@given(waits, st.integers(0, 3), st.booleans())
@settings(max_examples=300, deadline=None)
def test_pairs_equal_brute_force(items, stream, apart):
    # GIVEN waits (into, from_, counted, counted as a join) at CPU instants 10, 20, ... in list
    # order, the joins told apart or not
    into = np.array([w[0] for w in items], np.int64)
    from_ = np.array([w[1] for w in items], np.int64)
    counted = np.array([w[2] for w in items], bool)
    as_join = np.array([w[3] for w in items], bool) if apart else counted
    cpu = np.arange(1, len(items) + 1, dtype=np.int64) * 10
    # WHEN paired
    got = list(zip(*(a.tolist() for a in forks_joined_back(into, from_, cpu, stream, counted, as_join if apart else None))))
    # THEN each counted fork of ``stream`` pairs with the earliest join back of its side stream
    # after it, by brute force
    expected = []
    for k in range(len(items)):
        if counted[k] and from_[k] == stream and into[k] != stream:
            later = [cpu[m] for m in range(len(items)) if as_join[m] and into[m] == stream and from_[m] == into[k] and cpu[m] > cpu[k]]
            if later:
                expected.append((cpu[k], into[k], min(later)))
    assert got == expected
