"""Work the capture did not see launched: a trace begun mid-run (its processes' first API
calls numbered far from their start) holds GPU work queued before its first call, which the
first boundaries wait for as events recorded there would."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracerecon.analysis.projection import I64_MAX, I64_MIN, int64s
from tracerecon.analysis.stream_keys import pack_keys


# A launch instant before every CPU instant of a trace (int64 min means "not placed").
BEFORE_THE_TRACE = I64_MIN + 1
# CUPTI numbers a process's API calls from its start, whenever the capture begins: a trace
# whose first call of a process has a correlation id this high began mid-run (public
# captures taken with a delay: 1.4-2.6 million; captures from the start: 100-2,300 in 50
# sample and public traces).
MID_RUN_MIN_CORRELATION = 100_000


@dataclass(frozen=True)
class FirstCalls:
    """Per process of a trace, the correlation id of its first API call in the trace."""

    pid: np.ndarray
    corr: np.ndarray

    @classmethod
    def of(cls, api_calls: pa.Table) -> FirstCalls:
        if api_calls.num_rows == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        pids = sorted(pc.unique(api_calls["pid"]).to_pylist())  # a hash, not a sort of every call
        corr = int64s(api_calls["correlation_id"], I64_MAX)
        if len(pids) == 1:
            first = [int(corr.min())]
        else:
            pid = int64s(api_calls["pid"])
            first = [int(corr[pid == p].min()) for p in pids]
        return cls(np.array(pids, dtype=np.int64), np.array(first, dtype=np.int64))

    def launched_before(self, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Per op (its process, its correlation id, -1: none): numbered before every call of
        its process in the trace, so launched before the capture began (CUPTI numbers calls in
        order)."""
        if len(self.pid) == 0:
            return np.zeros(len(pid), dtype=bool)
        at = np.minimum(np.searchsorted(self.pid, pid), len(self.pid) - 1)
        return (self.pid[at] == pid) & (corr >= 0) & (corr < self.corr[at])

    def mid_run(self) -> np.ndarray:
        """The processes whose first call's number says the capture began while they ran
        (``MID_RUN_MIN_CORRELATION``)."""
        return self.pid[(self.corr >= MID_RUN_MIN_CORRELATION) & (self.corr < I64_MAX)]


# The first op of a stream that starts this long after its launch, with nothing in the trace
# before it on its stream or beside it on its device, waited for work the trace does not hold:
# queued before the capture began. An idle GPU starts an op within microseconds of its launch.
HIDDEN_QUEUE_MIN_NS = 50_000
# A stream wait releases its stream within this of the waited work's end (the 2-H200 samples'
# event hand-offs: a few us).
WAIT_RELEASE_NS = 10_000


@dataclass(frozen=True)
class BeforeCapture:
    """Work on a rank's streams that was queued before the capture began (``queued_before_capture``)."""

    called_before: np.ndarray  # per op: launched before the trace (its launching call is not in it)
    stream_key: np.ndarray  # streams (``pack_keys`` keys) whose first op waited for work the trace lacks
    done: np.ndarray  # ... and when that work was done: that op's start
    waited: np.ndarray  # ... and how long that op waited for it


def queued_before_capture(ops: pa.Table, launch: np.ndarray, wait_key: np.ndarray, wait_cpu: np.ndarray, first_calls: FirstCalls) -> BeforeCapture:
    """Work a capture begun mid-run (``--delay``, ``--capture-range``) holds without its launch,
    which an engine whose CPU runs ahead of the GPU had queued before it began: what the CUDA
    events of the first phases wait for. Only in processes captured mid-run: those with an op
    numbered before their first call in the trace, or whose first call's number is high
    (``FirstCalls.mid_run``); a process traced from its start queued nothing before (its first
    kernels start late for reasons of their own: 0.14-1.3 ms on the H200 samples, loading a
    module, a first stream).

    - Ops whose launching call is not in the trace, numbered before their process's first call
      in it, or (in a process captured mid-run) at the head of their stream (before its first
      op whose call is): they were launched before the trace, not when they started. Only on
      streams that have a launched op (a trace without launching calls is left as it is).
    - A stream whose first op (by launch) starts ``HIDDEN_QUEUE_MIN_NS`` or more after its
      launch, where no stream wait of the trace comes before it on its stream whose work could
      have held it (an op, of any process, ending within ``WAIT_RELEASE_NS`` before its start)
      and no other op of its process runs on its device meanwhile (another stream's kernels holding the GPU,
      an op of the first kind): work the trace does not show held the stream until that op's
      start.
    ``launch``: ``launch_instants(ops)``; ``wait_key`` / ``wait_cpu``: the stream waits' streams
    (``pack_keys``) and CPU instants."""
    n = ops.num_rows
    none = BeforeCapture(np.zeros(n, bool), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if n == 0:
        return none
    pid, dev, stream = int64s(ops["pid"]), int64s(ops["device_id"], -1), int64s(ops["stream_id"], -1)
    called = int64s(ops["launch_end_ns"], I64_MIN) != I64_MIN
    early = np.zeros(n, dtype=bool)
    if not called.all():
        early = ~called & first_calls.launched_before(pid, int64s(ops["correlation_id"], -1))
    mid_run = np.union1d(first_calls.mid_run(), pid[early])
    if len(mid_run) == 0 or not np.isin(pid, mid_run).any():
        return none
    start, end = int64s(ops["start_ns"]), int64s(ops["end_ns"])
    key = pack_keys(pid, dev, stream)
    # Per stream, the start of its first op that has its call: call-less ops before it came
    # first (a stream without any such op is left as it is).
    streams, stream_of = np.unique(key, return_inverse=True)
    first_called = np.full(len(streams), I64_MAX, dtype=np.int64)
    np.minimum.at(first_called, stream_of.ravel()[called], start[called])
    limit = first_called[stream_of.ravel()]
    before = ~called & (start < limit) & (limit < I64_MAX)
    in_mid_run = np.isin(pid, mid_run)
    before = (before & in_mid_run) | early
    # Per stream, its first op by launch, among those launched in the trace.
    placed = ~before & called & in_mid_run
    if not placed.any():
        return replace(none, called_before=before)
    rows = np.flatnonzero(placed)
    by_launch = rows[np.lexsort((launch[rows], key[rows]))]
    first = by_launch[np.r_[True, key[by_launch][1:] != key[by_launch][:-1]]]
    first = first[start[first] - launch[first] >= HIDDEN_QUEUE_MIN_NS]
    heads = []
    for i in first.tolist():
        lo, hi = launch[i], start[i]
        # A stream wait before it explains a late start where the work it waited for could
        # have: an op ending just before it started, of any process (an event another process
        # recorded and shared); an input stream's event done long before, the copy ended 385
        # us earlier, explains nothing (its first cycle had read 50 and 650 us where events
        # read 0 and 300).
        if len(wait_key) and bool(((wait_key == key[i]) & (wait_cpu < hi)).any()) and \
                bool(((end <= hi) & (end >= hi - WAIT_RELEASE_NS)).any()):
            continue
        # Another op of the process running meanwhile on its device (another stream's kernels
        # holding the GPU, one of its own stream's ops launched before the trace) explains it.
        beside = (pid == pid[i]) & (dev == dev[i]) & (start < hi) & (end > lo)
        beside[i] = False
        if beside.any():
            continue
        heads.append(i)
    h = np.array(heads, dtype=np.int64)
    return BeforeCapture(before, key[h], start[h], start[h] - launch[h])

