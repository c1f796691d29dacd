"""Test factory: writes small SQLite files shaped like nsys exports (schema 3.x column names).

Only the tables and columns tracerecon reads are created, the way nsys does it: a table exists
only when it has rows. Times are in ns; ``gtid(pid, tid)`` builds nsys GlobalIds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils


def gtid(pid: int, tid: int | None = None) -> int:
    """nsys GlobalId: pid in bits 24..47, tid in bits 0..23 (hardware id 1 in the top bits, as nsys writes)."""
    return (1 << 56) | (pid << 24) | (tid if tid is not None else pid)


def gpid(pid: int) -> int:
    return (1 << 56) | (pid << 24)


@dataclass
class FakeTrace:
    strings: dict[str, int] = field(default_factory=dict)
    nvtx: list[dict] = field(default_factory=list)
    runtime: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    memcpy: list[dict] = field(default_factory=list)
    memset: list[dict] = field(default_factory=list)
    graphs: list[dict] = field(default_factory=list)
    syncs: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    streams: list[dict] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=lambda: {"EXPORT_PRODUCT_VERSION": "2025.3.2.0", "EXPORT_SCHEMA_VERSION": "3.20.3"})
    capture: dict[str, str] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    _corr: int = 100

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
        return self.strings[text]

    def range(self, name: str, start: int, end: int | None, pid: int = 10, tid: int | None = None, end_tid: int | None = None, domain: int = 0, push_pop: bool = True,
              payload: int | None = None) -> None:
        row = {"start": start, "end": end, "eventType": 59 if push_pop else 60, "text": name, "globalTid": gtid(pid, tid),
               "endGlobalTid": gtid(pid, end_tid) if end_tid is not None else None, "domainId": domain}
        if payload is not None:
            row["int64Value"] = payload
        self.nvtx.append(row)

    def domain(self, name: str, pid: int = 10) -> int:
        """A named NVTX domain (``nvtxDomainCreate``: the type-75 row nsys writes), its id for ``range``."""
        number = 1 + sum(1 for r in self.nvtx if r["eventType"] == 75)
        self.nvtx.append({"start": 0, "end": None, "eventType": 75, "text": name, "globalTid": gtid(pid), "endGlobalTid": None, "domainId": number})
        return number

    def cycle(self, number: int, *edges: int, names: tuple[str, ...] = ("draft", "verify"), pid: int = 10, tid: int | None = None,
              cycle_tid: int | None = None) -> None:
        """A ``cycle N`` range from the first edge to the last (on ``cycle_tid``, else ``tid``) and
        one phase range per name between consecutive edges (on ``tid``)."""
        assert len(edges) == len(names) + 1
        self.range(f"cycle {number}", edges[0], edges[-1], pid=pid, tid=tid if cycle_tid is None else cycle_tid)
        for name, start, end in zip(names, edges, edges[1:]):
            self.range(name, start, end, pid=pid, tid=tid)

    def phase_cycles(self, names: tuple[str, ...] | list[str], cycles: int = 3) -> "FakeTrace":
        """``cycles`` cycle ranges (``cycle 0``, ...) of the phases ``names`` one after another,
        100 us each, each launching one kernel of 70 us on stream 7; returns the trace."""
        u = 1000
        for c in range(cycles):
            b = 1000 * (c + 1) * u
            self.range(f"cycle {c}", b, b + 100 * u * len(names))
            for i, name in enumerate(names):
                s = b + 100 * u * i
                self.range(name, s, s + 100 * u)
                self.kernel(self.call("cudaLaunchKernel", s + 10 * u, s + 12 * u), s + 20 * u, s + 90 * u, stream=7)
        return self

    def mark(self, name: str, ts: int, pid: int = 10, tid: int | None = None) -> None:
        self.nvtx.append({"start": ts, "end": None, "eventType": 34, "text": name, "globalTid": gtid(pid, tid), "endGlobalTid": None, "domainId": 0})

    def call(self, name: str, start: int, end: int, pid: int = 10, tid: int | None = None, corr: int | None = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
        self.runtime.append({"start": start, "end": end, "eventClass": 1, "globalTid": gtid(pid, tid), "correlationId": corr, "nameId": self.sid(name), "returnValue": 0})
        return corr

    def kernel(self, corr: int, start: int, end: int, pid: int = 10, stream: int = 7, device: int = 0, name: str = "k", node: int | None = None,
               short: str | None = None) -> None:
        """A kernel named ``name`` (its demangled name), shown by ``short`` (nsys's short name:
        no namespaces, template arguments or parameters) where given, else by ``name``."""
        self.kernels.append(
            {"start": start, "end": end, "deviceId": device, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid),
             "demangledName": self.sid(name), "shortName": self.sid(short if short is not None else name), "graphNodeId": node,
             "gridX": 1, "gridY": 1, "gridZ": 1}
        )

    def copy(self, corr: int, start: int, end: int, pid: int = 10, kind: int = 2, stream: int = 7) -> None:
        self.memcpy.append({"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid), "bytes": 64, "copyKind": kind})

    def fill(self, corr: int, start: int, end: int, pid: int = 10, stream: int = 7) -> None:
        self.memset.append({"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid), "value": 0, "bytes": 64})

    def graph(self, corr: int, start: int, end: int, pid: int = 10, stream: int = 7) -> None:
        self.graphs.append({"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid), "graphId": 1, "graphExecId": 1})

    def sync_record(self, corr: int, start: int, end: int, pid: int = 10, sync_type: int = 3, stream: int = 7) -> None:
        self.syncs.append({"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid), "syncType": sync_type, "eventId": 0})

    def event_record(self, event: int, record: int | None, start: int, end: int, pid: int = 10, tid: int | None = None, stream: int = 7) -> int:
        """``cudaEventRecord(event, stream)``: the runtime call and its CUDA_EVENT row (record number ``record``)."""
        corr = self.call("cudaEventRecord_v3020", start, end, pid, tid)
        self.events.append({"deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid), "eventId": event, "eventSyncId": record})
        return corr

    def stream_wait(self, event: int, record: int | None, start: int, end: int, pid: int = 10, tid: int | None = None, stream: int = 7) -> int:
        """``cudaStreamWaitEvent(stream, event)`` waiting for record ``record`` of ``event``."""
        corr = self.call("cudaStreamWaitEvent_v3020", start, end, pid, tid)
        self.syncs.append({"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr, "globalPid": gpid(pid),
                           "syncType": 2, "eventId": event, "eventSyncId": record})
        return corr

    def stream_created(self, stream: int, flag: int, pid: int = 10) -> None:
        """A TARGET_INFO_CUDA_STREAM row: how ``stream`` was created (flag 1 blocking, 2
        non-blocking, 3 the legacy NULL stream)."""
        self.streams.append({"streamId": stream, "hwId": 0, "vmId": 1, "processId": pid, "contextId": 1, "priority": 0, "flag": flag})

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        db = sqlite_utils.Database(path, recreate=True)
        db["META_DATA_EXPORT"].insert_all([{"name": k, "value": v} for k, v in self.meta.items()])
        if self.capture:
            db["META_DATA_CAPTURE"].insert_all([{"name": k, "value": v} for k, v in self.capture.items()])
        if self.env:
            db["TARGET_INFO_SYSTEM_ENV"].insert_all([{"globalVid": 1, "devStateName": "env", "name": e.split("=")[0], "nameEnum": 0, "value": e} for e in self.env])
        db["StringIds"].insert_all([{"id": i, "value": s} for s, i in self.strings.items()] or [{"id": 0, "value": ""}], pk="id")
        for table, rows in (
            ("NVTX_EVENTS", self.nvtx),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", self.runtime),
            ("CUPTI_ACTIVITY_KIND_KERNEL", self.kernels),
            ("CUPTI_ACTIVITY_KIND_MEMCPY", self.memcpy),
            ("CUPTI_ACTIVITY_KIND_MEMSET", self.memset),
            ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", self.graphs),
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", self.syncs),
            ("CUPTI_ACTIVITY_KIND_CUDA_EVENT", self.events),
            ("TARGET_INFO_CUDA_STREAM", self.streams),
        ):
            if rows:
                keys = sorted({k for r in rows for k in r})
                cols = {k: int for k in keys}
                if "text" in cols:
                    cols["text"] = str
                db[table].create(cols)
                db[table].insert_all(rows)
        db.close()
        return path
