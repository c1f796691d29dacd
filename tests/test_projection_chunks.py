"""The projection works through (range, op) pairs in chunks of whole ranges on several threads
(``analysis.projection.PAIRS_PER_CHUNK``, ``PROJECTION_THREADS``): the result must not depend on
where the chunks are cut. Checked on real traces, with chunks of a few pairs (cuts everywhere,
ranges of one chunk next to ranges of many) against one chunk for all."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEMO, ROOT
from tracerecon.analysis import projection

SHAPES = ROOT / "sample_traces" / "demo_shapes_h200x2"


def _load_ranks(path):
    from tracerecon import pipeline

    files = sorted(path.glob("*.sqlite*")) if path.is_dir() else [path]
    out = []
    for f in files:
        tables = pipeline._read_tables(f)
        _, ops, _, _ = pipeline._link(f, tables)
        out.append((tables.nvtx_ranges, ops))
    return out


@pytest.mark.parametrize("trace", [DEMO / "launch_bound", SHAPES / "worker_launch_bound", SHAPES / "nccl_overlap_skew"], ids=lambda p: p.name)
def test_given_tiny_chunks_on_threads_then_the_projection_is_the_same(trace, monkeypatch):
    from tracerecon.analysis.ranges import nest

    for nvtx, ops in _load_ranks(trace):
        nested = nest(nvtx)
        index = projection.index_launches(ops)
        # GIVEN one chunk for everything, as the reference
        monkeypatch.setattr(projection, "PAIRS_PER_CHUNK", 10**12)
        whole = projection.project(nested, ops, index)
        # WHEN the pairs are cut every 7 pairs and worked on 3 threads
        monkeypatch.setattr(projection, "PAIRS_PER_CHUNK", 7)
        monkeypatch.setattr(projection, "PROJECTION_THREADS", 3)
        # THEN every column of every range is the same (including the work of other threads
        #      a range takes, passed as `extra`: every fifth op moved to range 0 or the last)
        assert projection.project(nested, ops, index).equals(whole)
        if nested.num_rows and ops.num_rows:
            extra = (np.arange(0, ops.num_rows, 5), np.where(np.arange(0, ops.num_rows, 5) % 2 == 0, 0, nested.num_rows - 1))
            monkeypatch.setattr(projection, "PAIRS_PER_CHUNK", 10**12)
            whole_extra = projection.project(nested, ops, index, extra)
            monkeypatch.setattr(projection, "PAIRS_PER_CHUNK", 7)
            assert projection.project(nested, ops, index, extra).equals(whole_extra)
            assert not whole_extra.equals(whole)  # the extra work did count


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), min_size=0, max_size=25), st.integers(1, 9),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 24)), max_size=8))
def test_given_random_ranges_then_any_chunk_size_gives_the_same_projection(launches, chunk, extra_pairs):
    # GIVEN one thread launching ops at times 0..29 and ranges over random spans of them
    n_ops = 30
    ops = pa.table({
        "pid": pa.array([1] * n_ops, pa.int64()), "launch_tid": pa.array([7] * n_ops, pa.int64()),
        "launch_start_ns": pa.array(np.arange(n_ops) * 10, pa.int64()), "launch_end_ns": pa.array(np.arange(n_ops) * 10 + 5, pa.int64()),
        "start_ns": pa.array(1000 + np.arange(n_ops) * 3, pa.int64()), "end_ns": pa.array(1000 + np.arange(n_ops) * 3 + 7, pa.int64()),
        "kind": pa.array(["kernel", "memcpy"] * (n_ops // 2)).dictionary_encode(),
        "device_id": pa.array(np.arange(n_ops) % 2, pa.int64()), "stream_id": pa.array(np.arange(n_ops) % 3, pa.int64()),
    })
    ranges = pa.table({
        "pid": pa.array([1] * len(launches), pa.int64()), "tid": pa.array([7] * len(launches), pa.int64()),
        "start_ns": pa.array([s * 20 for s, _ in launches], pa.int64()), "end_ns": pa.array([s * 20 + w * 30 + 1 for s, w in launches], pa.int64()),
        "style": pa.array(["push_pop"] * len(launches), pa.string()),
    })
    extra = None
    if launches and extra_pairs:
        extra = (np.array([o % n_ops for o, _ in extra_pairs]), np.array([r % len(launches) for _, r in extra_pairs]))
    reference = _with_chunk(10**12, 1, ranges, ops, extra)
    # WHEN cut into chunks of `chunk` pairs on 2 threads THEN the table is the same
    assert _with_chunk(chunk, 2, ranges, ops, extra).equals(reference)


def _with_chunk(chunk, threads, ranges, ops, extra):
    saved = projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS
    projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS = chunk, threads
    try:
        return projection.project(ranges, ops, None, extra)
    finally:
        projection.PAIRS_PER_CHUNK, projection.PROJECTION_THREADS = saved


def test_given_extra_pairs_that_do_not_fit_then_the_projection_refuses_them():
    # GIVEN two ranges and ops WHEN extra work names a range that is not there, or the op and
    # range rows differ in number THEN ValueError, never a silently dropped or misplaced op
    ops = pa.table({"pid": pa.array([1], pa.int64()), "launch_tid": pa.array([7], pa.int64()), "launch_start_ns": pa.array([0], pa.int64()),
                    "launch_end_ns": pa.array([1], pa.int64()), "start_ns": pa.array([5], pa.int64()), "end_ns": pa.array([9], pa.int64()),
                    "kind": pa.array(["kernel"]).dictionary_encode(), "device_id": pa.array([0], pa.int64()), "stream_id": pa.array([7], pa.int64())})
    # (range 1 is on another thread: the op is its only through the extra pair)
    ranges = pa.table({"pid": pa.array([1, 1], pa.int64()), "tid": pa.array([7, 8], pa.int64()), "start_ns": pa.array([0, 0], pa.int64()),
                       "end_ns": pa.array([10, 10], pa.int64()), "style": pa.array(["push_pop"] * 2)})
    for extra in [(np.array([0]), np.array([2])), (np.array([0]), np.array([-1])), (np.array([0, 0]), np.array([1]))]:
        with pytest.raises(ValueError):
            projection.project(ranges, ops, None, extra)
    assert projection.project(ranges, ops, None, (np.array([0]), np.array([1])))["n_gpu_ops"].to_pylist() == [1, 1]
