"""``phase_streams.phase_streams`` (the stream that received most of each phase's GPU time) counts
on a dense phases x streams grid where that is small, and sorts otherwise. Both ways must pick
what the sort-based code it replaced picked (kept below as the reference), ties included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerecon.analysis import phase_streams as stream_choice
from tracerecon.analysis.projection import int64s


def reference_phase_streams(ops: pa.Table, op_phase: np.ndarray, n_phases: int):
    """The code before the dense grid (tracerecon c11d6c4), unchanged."""
    dev_out = np.full(n_phases, -1, dtype=np.int64)
    str_out = np.full(n_phases, -1, dtype=np.int64)
    sel = np.flatnonzero(op_phase >= 0)
    if len(sel) == 0 or n_phases == 0:
        return dev_out, str_out
    dev = int64s(ops["device_id"], -1)[sel]
    stream = int64s(ops["stream_id"], -1)[sel]
    dur = np.clip(int64s(ops["end_ns"])[sel] - int64s(ops["start_ns"])[sel], 0, None)
    ph = op_phase[sel]
    streams, s_first, s_dense = np.unique((dev << 32) | (stream & 0xFFFFFFFF), return_index=True, return_inverse=True)
    keys, k_first, inv = np.unique(ph * len(streams) + s_dense.ravel(), return_index=True, return_inverse=True)
    inv = inv.ravel()
    total = np.bincount(inv, weights=dur).astype(np.int64)
    count = np.bincount(inv)
    k_phase, k_stream = keys // len(streams), keys % len(streams)
    order = np.lexsort((k_stream, -count, -total, k_phase))
    first = np.r_[True, k_phase[order][1:] != k_phase[order][:-1]]
    best = order[first]
    dev_out[k_phase[best]] = dev[s_first[k_stream[best]]]
    str_out[k_phase[best]] = stream[s_first[k_stream[best]]]
    return dev_out, str_out


ops_strategy = st.lists(st.tuples(st.integers(-1, 4), st.one_of(st.none(), st.integers(0, 2)), st.one_of(st.none(), st.integers(-1, 3)),
                                  st.integers(0, 50), st.sampled_from([0, 0, 5, 10])), max_size=40)


@settings(max_examples=400, deadline=None)
@given(ops_strategy, st.integers(0, 6), st.booleans())
def test_given_random_ops_then_both_ways_pick_the_reference_stream(rows, n_phases, dense):
    # GIVEN ops with phases (-1: none; some past the last phase are dropped), devices and
    #       streams (NULL and -1 among them) and durations with many ties (0, 5, 10 ns)
    rows = [r for r in rows if r[0] < n_phases]
    ops = pa.table({
        "device_id": pa.array([r[1] for r in rows], pa.int64()), "stream_id": pa.array([r[2] for r in rows], pa.int64()),
        "start_ns": pa.array([r[3] for r in rows], pa.int64()), "end_ns": pa.array([r[3] + r[4] for r in rows], pa.int64()),
    })
    op_phase = np.array([r[0] for r in rows], dtype=np.int64)
    # WHEN picked on the dense grid, or by sorting (a grid limit of 0 forces it)
    saved = stream_choice._DENSE_CELLS
    stream_choice._DENSE_CELLS = 10**9 if dense else 0
    try:
        got = stream_choice.phase_streams(ops, op_phase, n_phases)
    finally:
        stream_choice._DENSE_CELLS = saved
    # THEN the same (device, stream) per phase as the reference
    want = reference_phase_streams(ops, op_phase, n_phases)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_given_a_tie_in_time_then_more_ops_win_then_the_lower_stream():
    # GIVEN phase 0 with 10 ns on stream 3 (one op) and on stream 1 (two ops of 5), and phase 1
    #       with 4 ns on streams 2 and 1 (one op each)
    ops = pa.table({"device_id": pa.array([0] * 5, pa.int64()), "stream_id": pa.array([3, 1, 1, 2, 1], pa.int64()),
                    "start_ns": pa.array([0, 0, 5, 0, 0], pa.int64()), "end_ns": pa.array([10, 5, 10, 4, 4], pa.int64())})
    # WHEN picked THEN phase 0 takes stream 1 (more ops), phase 1 stream 1 (the lower); phase 2 none
    dev, stream = stream_choice.phase_streams(ops, np.array([0, 0, 0, 1, 1]), 3)
    assert stream.tolist() == [1, 1, -1] and dev.tolist() == [0, 0, -1]
