"""The GPU side of the tests' event models (``vllm_spec_model``, ``vllm_dbo_model``,
``tbo_model``, ``test_trtllm_overlap``): what CUDA events recorded on a stream at a CPU instant
read, worked out apart from tracerecon. Each stream runs what was queued on it in order; an
event wait queues "done when that record is" on the waiting stream. Each model writes its own
FakeTrace and keeps its own CPU clock; this keeps the streams."""

from __future__ import annotations


class StreamLog:
    """Per stream, (CPU instant queued, GPU end) of everything queued on it; per event record,
    when its stream reached it."""

    def __init__(self) -> None:
        self.log: dict[int, list[tuple[int, int]]] = {}
        self.free: dict[int, int] = {}  # per stream: when all queued on it is done
        self.records: dict[int, int] = {}  # per event: how many times it was recorded
        self.record_done: dict[tuple[int, int], int] = {}  # (event, record) -> GPU instant it completes
        self.launches: list[int] = []  # CPU instants GPU work (kernels, copies) was queued at
        self.launch_streams: list[int] = []  # ... and the stream of each

    def reads(self, s: int, at: int) -> int:
        """What an event recorded on stream ``s`` at CPU instant ``at`` reads."""
        return max([at] + [e for q, e in self.log.get(s, []) if q <= at])

    def start(self, s: int, earliest: int) -> int:
        """When work queued on ``s`` that could start at ``earliest`` starts."""
        return max(earliest, self.free.get(s, 0))

    def queue(self, s: int, at: int, end: int, work: bool = True) -> None:
        """Queue on ``s`` at CPU instant ``at`` what is done at ``end``: GPU work, or (``work``
        False) a wait for a record."""
        self.log.setdefault(s, []).append((at, end))
        self.free[s] = max(self.free.get(s, 0), end)
        if work:
            self.launches.append(at)
            self.launch_streams.append(s)

    def recorded(self, event: int, s: int, at: int) -> tuple[int, int]:
        """Record ``event`` on ``s`` at CPU instant ``at``: (event, its record's number)."""
        self.records[event] = self.records.get(event, 0) + 1
        r = self.records[event]
        self.record_done[(event, r)] = self.reads(s, at)
        return event, r


EXPORT_OPS = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def queued_in_export(db) -> dict[int, tuple[list[int], list[int]]]:
    """What each stream of a real export (an open ``sqlite3`` connection) queued, read from its
    raw tables: per stream id, its ops' launch instants (the launch call's return, or the op's
    start where that was earlier), sorted, and the running maximum of their ends: an event
    recorded there at CPU instant t completes at max(t, the running end of the last op launched
    by t)."""
    tables = {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}
    returned = dict(db.execute("select correlationId, end from CUPTI_ACTIVITY_KIND_RUNTIME"))
    per_stream: dict[int, list[tuple[int, int]]] = {}
    for table in EXPORT_OPS:
        if table in tables:
            for stream, start, end, corr in db.execute(f"select streamId, start, end, correlationId from {table}"):
                per_stream.setdefault(stream, []).append((min(returned.get(corr, start), start), end))
    queued = {}
    for stream, ops in per_stream.items():
        ops.sort()
        ends, latest = [], 0
        for _, end in ops:
            latest = max(latest, end)
            ends.append(latest)
        queued[stream] = ([launch for launch, _ in ops], ends)
    return queued
