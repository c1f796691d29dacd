"""Real H100 traces (nsys 2025.3.1, torch 2.11): a loop on CUDA's per-thread default stream and
a helper thread on the legacy NULL stream: ``sample_traces/probes_h100/per_thread_stream``.

The loop thread runs schedule (CPU only), forward (matmuls) and sample (small kernels and a
``.tolist()``) each cycle on its per-thread default stream (``torch.cuda.ExternalStream(2)``:
``cudaStreamPerThread``), which the export lists as a blocking stream (``TARGET_INFO_CUDA_STREAM``
flag 1, as a ``cudaStreamCreate`` stream). A helper thread that never set a stream opens a range
``helper`` beside the loop's forward, launches nothing in it, and its ``tracerecon.instrument``
stream mark names the NULL stream (flag 3), which runs nothing. An event recorded on the NULL
stream waits for the work queued before it on every blocking stream of the device: the helper's
events wait for the loop's forward. The engine recorded CUDA events on each phase's stream at its
boundaries (``helper_on_null.gt.jsonl``: per cycle, each phase's event time).

In ``helper_kernels_on_null`` the helper launches small kernels on the NULL stream inside its range
instead: the loop's events on its blocking stream wait for them too.

Checked: the helper range and the loop's phases, cycle by cycle, against the rule computed here
from the raw export (an event recorded at CPU instant t on the NULL stream completes at max(t, the
end of every op on it or on a blocking stream whose launch call returned by t); on a blocking
stream, of every op on it or on the NULL stream) to the nanosecond, and that rule, taken where the
engine's own event records were made, against the engine's events.
"""

from __future__ import annotations

import bisect
import json
import lzma
import sqlite3
import statistics

import pytest

from conftest import SAMPLES
from stream_log import queued_in_export
from tracerecon.analysis.config import PhaseConfig
from tracerecon.api import load

PROBE = SAMPLES / "probes_h100" / "per_thread_stream"
TID = 16777216  # globalTid % TID: the thread id


class RawTrace:
    """What the test reads from the export itself: per stream its ops as (launch call's end, or
    the op's start where earlier; running maximum of the ops' ends), the streams' creation flags,
    the helper ranges and each thread's cudaEventRecord calls."""

    def __init__(self, path: str):
        db = sqlite3.connect(path)
        self.queued = queued_in_export(db)
        flags = dict(db.execute("select streamId, flag from TARGET_INFO_CUDA_STREAM"))
        (self.null,) = [s for s, f in flags.items() if f == 3]
        self.blocking = sorted(s for s, f in flags.items() if f == 1)
        self.helpers = db.execute("select n.start, n.end, n.globalTid % ? from NVTX_EVENTS n join StringIds s on s.id = n.textId "
                                  "where n.eventType = 59 and s.value = 'helper' order by n.start", (TID,)).fetchall()
        self.records: dict[int, list] = {}
        for start, end, tid in db.execute("select r.start, r.end, r.globalTid % ? from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId "
                                          "where s.value like 'cudaEventRecord%' order by r.start", (TID,)):
            self.records.setdefault(tid, []).append((start, end))
        db.close()

    def done(self, stream: int, t: int) -> int:
        launches, ends = self.queued.get(stream, ([], []))
        k = bisect.bisect_right(launches, t) - 1
        return ends[k] if k >= 0 else 0

    def event_on_null(self, t: int, blocking: bool = True) -> int:
        """Where an event recorded on the NULL stream at CPU instant ``t`` completes (with
        ``blocking`` False: as if the NULL stream waited for nothing else)."""
        return max([t, self.done(self.null, t)] + [self.done(b, t) for b in (self.blocking if blocking else [])])

    def event_on_blocking(self, stream: int, t: int, null: bool = True) -> int:
        """Where an event recorded on blocking stream ``stream`` at CPU instant ``t`` completes
        (with ``null`` False: as if it waited for nothing else)."""
        return max([t, self.done(stream, t)] + ([self.done(self.null, t)] if null else []))


def opened(tmp_path_factory, name: str) -> tuple[RawTrace, object, list[dict]]:
    """The probe export ``name`` unpacked: its raw reading, its rank as tracerecon reads it (the
    loop's phases and the helper's), and its ground-truth lines."""
    path = tmp_path_factory.mktemp("probe") / f"{name}.sqlite"
    path.write_bytes(lzma.decompress((PROBE / f"{name}.sqlite.xz").read_bytes()))
    (rank,) = load([str(path)], PhaseConfig(phases=("schedule", "forward", "sample", "helper"))).ranks
    return RawTrace(str(path)), rank, [json.loads(line) for line in (PROBE / f"{name}.gt.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    raw, rank, lines = opened(tmp_path_factory, "helper_on_null")
    return raw, rank, [r for r in lines if "cycle" in r]


def test_the_helper_range_reads_as_events_on_the_null_stream_waiting_for_the_blocking_streams(probe):
    # GIVEN the probe's export: the NULL stream idle, the loop's per-thread stream blocking
    raw, rank, _ = probe
    assert raw.null not in raw.queued and raw.blocking and any(b in raw.queued for b in raw.blocking)
    helpers = [p for p in rank.phases.to_pylist() if p["phase"] == "helper"]
    rule = {s: raw.event_on_null(e) - raw.event_on_null(s) for s, e, _ in raw.helpers}
    # THEN every helper range is read on the NULL stream, as the rule on the raw export reads it,
    # to the nanosecond (before: on the NULL stream alone, its CPU edges, 0.57 ms median where
    # the events read 0.08 ms)
    assert len(helpers) == len(raw.helpers) >= 40
    assert {p["stream_id"] for p in helpers} == {raw.null}
    assert {p["cpu_start_ns"]: p["gpu_ns"] for p in helpers} == rule


def test_the_rule_reads_as_the_engines_events_where_they_were_recorded(probe):
    # GIVEN the CUDA events the helper thread recorded on its current (NULL) stream right before
    # its range opened and right after it closed (each from its own cudaEventRecord call)
    raw, _, truth = probe
    tid = raw.helpers[0][2]
    records = raw.records[tid]
    # (the engine's warm-up steps come first and record no events: the last ranges are the cycles')
    assert [r["cycle"] for r in truth] == list(range(40)) and len(raw.helpers) == 45
    errors, alone = [], []
    for (s, e, _), row in zip(raw.helpers[-40:], truth):
        before = records[bisect.bisect_left(records, (s, 0)) - 1]  # the last record before the range opened
        after = records[bisect.bisect_left(records, (e, 0))]  # the first after it closed
        event_ms = row["phase_ms"]["helper"]
        rule_ns = raw.event_on_null(after[1]) - raw.event_on_null(before[1])
        errors.append(abs(rule_ns / 1e6 - event_ms) * 1e3)
        alone.append(abs((raw.event_on_null(after[1], False) - raw.event_on_null(before[1], False)) / 1e6 - event_ms) * 1e3)
    # THEN the rule, where the records were made, reads as the events: within 10 us in every
    # cycle; the NULL stream alone (no wait for the blocking streams) is hundreds of us off
    assert max(errors) < 10, sorted(errors)[-5:]
    assert statistics.median(alone) > 300, statistics.median(alone)


@pytest.fixture(scope="module")
def kernels_on_null(tmp_path_factory):
    raw, rank, lines = opened(tmp_path_factory, "helper_kernels_on_null")
    return raw, rank, lines[0], [r for r in lines if "cycle" in r]


def loop_phases(rank, main_tid: int) -> list[tuple[dict, int]]:
    """The loop's phases in the cycles, in time order, each with the CPU instant its end is read
    at: where the next phase of its cycle begins, else its own CPU end."""
    loop = sorted((p for p in rank.phases.to_pylist() if p["tid"] % TID == main_tid and p["cycle"] is not None), key=lambda p: p["cpu_start_ns"])
    return [(p, nxt["cpu_start_ns"] if nxt is not None and nxt["cycle"] == p["cycle"] else p["cpu_end_ns"]) for p, nxt in zip(loop, loop[1:] + [None])]


def test_the_loops_phases_on_a_blocking_stream_wait_for_the_null_streams_work(kernels_on_null):
    # GIVEN the loop on its per-thread default stream (blocking), the helper's kernels on the
    # NULL stream
    raw, rank, info, _ = kernels_on_null
    phases = loop_phases(rank, info["main_tid"])
    (stream,) = {p["stream_id"] for p, _ in phases}
    assert stream in raw.blocking and raw.null in raw.queued and len(phases) == 3 * 40
    # THEN every loop phase's boundaries are where events on its stream would complete, each
    # waiting for the NULL stream's work queued before it too, to the nanosecond
    got = [(p["gpu_boundary_start_ns"], p["gpu_boundary_end_ns"]) for p, _ in phases]
    assert got == [(raw.event_on_blocking(stream, p["cpu_start_ns"]), raw.event_on_blocking(stream, end)) for p, end in phases]
    # and without those waits the first phase of the cycles had read otherwise in most of them
    schedule = [(p, end) for p, end in phases if p["phase"] == "schedule"]
    alone = [raw.event_on_blocking(stream, end, False) - raw.event_on_blocking(stream, p["cpu_start_ns"], False) != p["gpu_ns"] for p, end in schedule]
    assert sum(alone) > 30, sum(alone)


def test_the_rule_with_the_implicit_waits_reads_as_the_loops_events(kernels_on_null):
    # GIVEN the events the loop thread recorded on its stream right before each phase began and
    # right after it ended (each from its own cudaEventRecord call)
    raw, rank, info, truth = kernels_on_null
    records = raw.records[info["main_tid"]]
    by_cycle = {row["cycle"]: row["phase_ms"] for row in truth}
    errors = []
    for p, _ in loop_phases(rank, info["main_tid"]):
        before = records[bisect.bisect_left(records, (p["cpu_start_ns"], 0)) - 1]
        after = records[bisect.bisect_left(records, (p["cpu_end_ns"], 0))]
        rule_ns = raw.event_on_blocking(p["stream_id"], after[1]) - raw.event_on_blocking(p["stream_id"], before[1])
        errors.append(abs(rule_ns / 1e6 - by_cycle[p["cycle"]][p["phase"]]) * 1e3)
    # THEN the rule, where the records were made, reads as the events: within 25 us in every
    # phase of every cycle, 6 us at the median
    assert len(errors) == 120 and max(errors) < 25 and statistics.median(errors) < 6, (max(errors), statistics.median(errors))
