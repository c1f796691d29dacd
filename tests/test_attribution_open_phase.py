"""Cross-thread attribution goes to the phase open at the launch: the latest-starting phase
whose CPU span holds it, not a later-starting one that had already closed (a short range of a
second phase-holding thread inside verify took the worker's launches from verify)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis.attribution import attribute_other_threads


def reference(call_pid, call_tid, call_time, owner, ph_pid, ph_tid, ph_s, ph_e, takes):
    """Per call, by brute force: the takes-cross phase of its process, on another thread, open
    at the call (start <= t < end), the latest-starting of those (the first listed on ties in
    start order); the same-thread owner where there is one."""
    out = owner.copy()
    order = sorted(range(len(ph_s)), key=lambda i: ph_s[i])  # stable: the input order on ties
    for j in range(len(call_time)):
        if out[j] >= 0:
            continue
        best = None
        for i in order:
            if takes[i] and ph_pid[i] == call_pid[j] and ph_s[i] <= call_time[j]:
                best = i if ph_e[i] > call_time[j] else best
                if ph_e[i] <= call_time[j] and best == i:
                    best = None
        if best is not None and call_tid[j] != ph_tid[best]:
            out[j] = best
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 3), st.integers(0, 60), st.integers(0, 40), st.booleans()), max_size=12),
       st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4), st.integers(-5, 110), st.booleans()), max_size=20))
def test_given_random_phases_and_calls_then_the_latest_open_phase_takes_the_call(phases, calls):
    # GIVEN phases (process, thread, start, length, takes work of other threads) that may nest
    #       or overlap across threads, and calls (process, thread, time, owned on their thread)
    ph_pid = np.array([p[0] for p in phases], np.int64)
    ph_tid = np.array([p[1] for p in phases], np.int64)
    ph_s = np.array([p[2] for p in phases], np.int64)
    ph_e = ph_s + np.array([p[3] for p in phases], np.int64)
    takes = np.array([p[4] for p in phases], bool)
    c_pid = np.array([c[0] for c in calls], np.int64)
    c_tid = np.array([c[1] for c in calls], np.int64)
    c_t = np.array([c[2] for c in calls], np.int64)
    owner = np.array([0 if (c[3] and len(phases)) else -1 for c in calls], np.int64)
    # WHEN attributed
    got = attribute_other_threads(c_pid, c_tid, c_t, owner, ph_pid, ph_tid, ph_s, ph_e, takes)
    # THEN as the brute-force rule says
    want = reference(c_pid, c_tid, c_t, owner, ph_pid, ph_tid, ph_s, ph_e, takes)
    assert got.tolist() == want.tolist()


def test_a_short_range_of_another_thread_inside_verify_does_not_take_verifys_work():
    # GIVEN verify on thread 1 over [100, 1000) and draft_re_extend on thread 3 over [300, 350),
    #       both taking work of other threads; a worker (thread 2) launches at 200 and at 400
    got = attribute_other_threads(
        np.array([10, 10]), np.array([2, 2]), np.array([200, 400]), np.array([-1, -1]),
        np.array([10, 10]), np.array([1, 3]), np.array([100, 300]), np.array([1000, 350]), np.array([True, True]),
    )
    # THEN both launches go to verify (the one at 400 came after draft_re_extend closed)
    assert got.tolist() == [0, 0]
