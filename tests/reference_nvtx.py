"""The NVTX reading the columnar one replaced (row tuples from sqlite3, parsed row by row): the
oracle ``tests/test_nvtx_columns.py`` checks ``sqlite_export.read_nvtx`` against. Kept as it was,
but for rows with text where a time belongs (dropped, 2026-12-04)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pyarrow as pa

from tracerecon import schema
from tracerecon.nsys.sqlite_export import (
    MAX_DURATION_NS, NULL_SENTINEL, NVTX_DOMAIN_CREATE, NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTXT_MARK, NVTXT_PUSH_POP,
    NVTXT_START_END, ExportInfo, NvtxEvents, StringTable, _col, _columns, _int, _no_nvtx, _nullable, pid_of, tid_of,
)


def fetch_nvtx_rows(conn: sqlite3.Connection, info: ExportInfo) -> list[tuple]:
    """The NVTX events ``parse_nvtx`` turns into ranges and marks, as rows in start order
    (fetched on their own so that they can be read while other tables are)."""
    if not info.has_nvtx:
        return []
    cols = _columns(conn, "NVTX_EVENTS")
    text_id = _col(cols, "textId")
    domain_id = _col(cols, "domainId", "0")
    end_tid = _col(cols, "endGlobalTid")
    int_payload = "coalesce({}, {}, {}, {})".format(
        _col(cols, "int64Value"), _col(cols, "uint64Value"), _col(cols, "int32Value"), _col(cols, "uint32Value")
    )
    sql = (
        f"select {_int('start')}, {_int('end')}, eventType, {_int('globalTid')}, {_int(end_tid)}, {_int(text_id)}, text, coalesce({_int(domain_id)}, 0), {_int(int_payload)}, "
        "typeof(start) in ('text', 'blob') or typeof(end) in ('text', 'blob') "
        f"from NVTX_EVENTS where eventType in ({NVTX_MARK},{NVTX_PUSH_POP},{NVTX_START_END},{NVTXT_MARK},{NVTXT_PUSH_POP},{NVTXT_START_END},{NVTX_DOMAIN_CREATE}) "
        "order by start"
    )
    return conn.execute(sql).fetchall()  # NVTX tables are small next to CUDA activity



def parse_nvtx(rows: list[tuple], info: ExportInfo, strings: StringTable) -> NvtxEvents:
    """The rows of ``fetch_nvtx_rows`` as ranges and marks (``NvtxEvents``): rows with no start
    or thread, ending before they start, lasting over a day, or written twice are dropped and
    counted in a warning."""
    warnings: list[str] = []
    if not info.has_nvtx:
        return _no_nvtx(warnings)
    # A row with text where a time belongs is dropped (2026-12-04: an end of text read as a range
    # never closed); so is one with no start or thread, or a closed range that ends before it starts.
    texty = [r for r in rows if r[9]]
    if texty:
        warnings.append(f"{info.path}: dropped {len(texty)} NVTX row(s) with text where a start or end time belongs")
    rows = [r for r in rows if not r[9]]
    good = [r for r in rows if r[0] != NULL_SENTINEL and r[3] != NULL_SENTINEL
            and (r[1] == NULL_SENTINEL or r[2] in (NVTX_DOMAIN_CREATE, NVTX_MARK, NVTXT_MARK) or 0 <= r[1] - r[0] <= MAX_DURATION_NS)]
    if len(good) < len(rows):
        warnings.append(f"{info.path}: dropped {len(rows) - len(good)} NVTX row(s) with no start or thread, ending before they start, or lasting over a day")
    rows = good
    if not rows:
        return _no_nvtx(warnings)
    start = np.array([r[0] for r in rows], dtype=np.int64)
    end = np.array([r[1] for r in rows], dtype=np.int64)
    etype = np.array([r[2] for r in rows], dtype=np.int64)
    gtid = np.array([r[3] for r in rows], dtype=np.int64)
    end_gtid = np.array([r[4] for r in rows], dtype=np.int64)
    tids = np.array([r[5] for r in rows], dtype=np.int64)
    registered = strings.take(tids).to_pylist()
    texts = [r[6] if isinstance(r[6], str) else registered[i] for i, r in enumerate(rows)]
    dom = np.array([r[7] for r in rows], dtype=np.int64)
    payload = np.array([r[8] for r in rows], dtype=np.int64)
    pid = pid_of(gtid)

    # Domain names are per process: (pid, domainId) -> name, from the domain-create events.
    domain_names: dict[tuple[int, int], str] = {}
    for i in np.nonzero(etype == NVTX_DOMAIN_CREATE)[0]:
        domain_names[(int(pid[i]), int(dom[i]))] = texts[i] or ""
    domains = [domain_names.get((int(p), int(d)), "" if d == 0 else f"domain{int(d)}") for p, d in zip(pid, dom)]

    is_range = np.isin(etype, [NVTX_PUSH_POP, NVTX_START_END, NVTXT_PUSH_POP, NVTXT_START_END])
    # The same range twice (same thread, times, text and domain: 2026-12-01) is one range written twice.
    seen: set = set()
    dup = np.zeros(len(rows), dtype=bool)
    for i in np.flatnonzero(is_range):
        key = (int(gtid[i]), int(start[i]), int(end[i]), int(etype[i]), texts[i], int(dom[i]))
        dup[i] = key in seen
        seen.add(key)
    if dup.any():
        warnings.append(f"{info.path}: dropped {int(dup.sum())} duplicated NVTX range row(s)")
        is_range &= ~dup
    # Ranges that start and end on different threads are kept, but projected like nsys does:
    # only same-thread ranges get GPU work (see analysis.projection).
    idx = np.nonzero(is_range)[0]
    closed = end[idx] != NULL_SENTINEL
    unnamed = sum(1 for i in idx if texts[i] is None)
    if unnamed:
        warnings.append(f"{info.path}: {unnamed} NVTX range(s) have no name (no text, or a text id the string table lacks); they can be no phase")
    if (~closed).any():
        warnings.append(f"{info.path}: {int((~closed).sum())} NVTX range(s) never closed; they run to the trace end")
        # The first open push/pop range (in start order) whose name a later range of its thread takes again.
        push_pop = set(int(i) for i in idx if etype[i] in (NVTX_PUSH_POP, NVTXT_PUSH_POP))
        for k in sorted((int(i) for i, c in zip(idx, closed) if not c and int(i) in push_pop), key=lambda i: start[i]):
            after = [int(j) for j in idx if gtid[j] == gtid[k] and start[j] > start[k]]
            if texts[k] is not None and any(texts[j] == texts[k] for j in after):
                warnings.append(f"{info.path}: the range {texts[k]!r} (thread {int(tid_of(np.array([gtid[k]]))[0])}) opened at {int(start[k])} ns is never "
                                f"closed, and {len(after)} range(s) of its thread begin after it, inside it: a push without its pop? Phases and cycles after "
                                "it are read as parts of it")
                break
    style = np.where(np.isin(etype[idx], [NVTX_PUSH_POP, NVTXT_PUSH_POP]), "push_pop", "start_end")
    cross_thread = (end_gtid[idx] != NULL_SENTINEL) & (end_gtid[idx] != gtid[idx])
    style = np.where(cross_thread, "start_end_cross_thread", style)
    range_columns = {
        "pid": pa.array(pid[idx]),
        "tid": pa.array(tid_of(gtid[idx])),
        "global_tid": pa.array(gtid[idx]),
        "domain": pa.array([domains[i] for i in idx], pa.string()),
        "name": pa.array([texts[i] if texts[i] is not None else "" for i in idx], pa.string()),
        "start_ns": pa.array(start[idx]),
        "closed": pa.array(closed),
        "style": pa.array(style.tolist(), pa.string()),
        "payload": _nullable(payload[idx]),
    }
    midx = np.nonzero(np.isin(etype, [NVTX_MARK, NVTXT_MARK]))[0]
    marks = pa.table(
        {
            "pid": pa.array(pid[midx]),
            "tid": pa.array(tid_of(gtid[midx])),
            "domain": pa.array([domains[i] for i in midx], pa.string()),
            "name": pa.array([texts[i] if texts[i] is not None else "" for i in midx], pa.string()),
            "ts_ns": pa.array(start[midx]),
            "payload": _nullable(payload[midx]),
        },
        schema=schema.NVTX_MARKS,
    )
    return NvtxEvents(range_columns, start[idx], end[idx], marks, tuple(warnings))
