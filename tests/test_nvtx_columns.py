"""The NVTX events read as columns and parsed without a Python object per row
(``sqlite_export.fetch_nvtx_rows`` and ``parse_nvtx``), against the row-by-row reading they
replaced (``tests/reference_nvtx.py``, kept as it was): the same ranges, marks and warnings on
every sample export and on random NVTX tables full of what goes wrong in real ones (NULLs, text
in number columns, reals, duplicated rows, ranges never closed or closed on another thread,
named and unnamed domains, text that is not UTF-8), through both readers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference_nvtx as reference
from conftest import PUBLIC, SAMPLES

from tracerecon.nsys import sqlite_export as se
from tracerecon.nsys.read_plan import open_readonly

TRACE_END = 10**18


def _both(path: Path, monkeypatch, reader: str):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACERECON_READER", "sqlite3")
    else:
        monkeypatch.delenv("TRACERECON_READER", raising=False)
    conn = open_readonly(path)
    try:
        info = se.read_info(conn, str(path))
        strings = se.read_strings(conn, info.tables)
        old = reference.parse_nvtx(reference.fetch_nvtx_rows(conn, info), info, strings).tables(TRACE_END)
        new = se.parse_nvtx(se.fetch_nvtx_rows(conn, info), info, strings).tables(TRACE_END)
    finally:
        conn.close()
    return old, new


def _assert_same(old, new) -> None:
    for i, what in ((0, "ranges"), (1, "marks")):
        for name in old[i].column_names:
            assert new[i][name].equals(old[i][name]), f"{what}.{name}"
        assert new[i].schema == old[i].schema, what
    assert new[2] == old[2]


def _exports() -> list[Path]:
    found = sorted(SAMPLES.rglob("*.sqlite"))
    if PUBLIC.is_dir():
        found += sorted(PUBLIC.rglob("*.sqlite"))
    return found


@pytest.mark.parametrize("reader", ["native", "sqlite3"])
@pytest.mark.parametrize("path", _exports(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_real_exports_give_the_ranges_the_row_by_row_reading_gave(path, reader, monkeypatch):
    # GIVEN a real export WHEN its NVTX events are read as columns and as rows THEN all is equal
    old, new = _both(path, monkeypatch, reader)
    _assert_same(old, new)


KINDS = [se.NVTX_MARK, se.NVTX_PUSH_POP, se.NVTX_START_END, se.NVTXT_MARK, se.NVTXT_PUSH_POP, se.NVTXT_START_END, se.NVTX_DOMAIN_CREATE, 33]
GTIDS = [(7 << 24) | 7, (7 << 24) | 8, (9 << 24) | 9]
# Values as SQLite holds them: integers (some huge or negative), NULL, reals, text and blobs.
# Mostly a few small times, so that rows of different threads or kinds often share them.
# (A real start is ordered by its whole part, where SQL put 2 before 2.5: 10**6 + 0.5 stays clear
# of the integers drawn. nsys writes integers.)
times = st.one_of(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6), st.integers(-(2**63), 2**63 - 1), st.none(),
                  st.sampled_from([10**6 + 0.5, "12", b"\x01"]))
row = st.fixed_dictionaries({
    "eventType": st.sampled_from(KINDS),
    "start": times,
    "end": times,
    "globalTid": st.one_of(st.sampled_from(GTIDS), st.none(), st.just("t")),
    "endGlobalTid": st.one_of(st.sampled_from(GTIDS), st.none()),
    "textId": st.one_of(st.sampled_from([1, 2, 3, 99]), st.none(), st.just("x")),
    "text": st.one_of(st.none(), st.sampled_from(["step", "step", "verify", "", "dom", "\u00e9t\u00e9"]), st.just(b"\xff\xfe"), st.just(b"blob")),
    "domainId": st.one_of(st.sampled_from([0, 1, 2]), st.none()),
    "int64Value": st.one_of(st.none(), st.integers(-5, 5), st.just("p")),
})


def _copy(r: dict, change: str | None) -> dict:
    """``r`` written again, the same or with one field changed (a near-duplicate)."""
    r = dict(r)
    if change == "globalTid":
        r["globalTid"] = GTIDS[2] if r["globalTid"] != GTIDS[2] else GTIDS[0]
    elif change == "eventType":
        r["eventType"] = se.NVTX_START_END if r["eventType"] != se.NVTX_START_END else se.NVTX_PUSH_POP
    elif change == "text":
        r["text"] = "verify" if r["text"] != "verify" else None
    elif change in ("start", "end") and isinstance(r[change], int) and r[change] < 2**62:
        r[change] += 1
    return r


def _write(path: Path, rows: list[dict], repeat: list[tuple[int, str | None]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table StringIds (id integer, value text)")
        db.executemany("insert into StringIds values (?, ?)", [(1, "draft"), (2, "sample"), (3, None)])
        db.execute("create table NVTX_EVENTS (start integer, end integer, eventType integer, globalTid integer, endGlobalTid integer, "
                   "textId integer, text text, domainId integer, int64Value integer)")
        for r in rows + [_copy(rows[i % len(rows)], change) for i, change in repeat]:
            text = r["text"]
            # bytes that are not UTF-8 stored as TEXT (as a tool writing raw bytes would), or as a blob
            text_sql = "cast(? as text)" if text == b"\xff\xfe" else "?"
            db.execute(f"insert into NVTX_EVENTS values (?, ?, ?, ?, ?, ?, {text_sql}, ?, ?)",
                       (r["start"], r["end"], r["eventType"], r["globalTid"], r["endGlobalTid"], r["textId"], text, r["domainId"], r["int64Value"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, min_size=1, max_size=40),
       repeat=st.lists(st.tuples(st.integers(0, 39), st.sampled_from([None, None, "globalTid", "eventType", "text", "start", "end"])), max_size=12),
       reader=st.sampled_from(["native", "sqlite3"]),
       index=st.sampled_from([None, "eventType", "start", "start, globalTid desc", "eventType, start"]))
def test_random_nvtx_tables_give_what_the_row_by_row_reading_gave(tmp_path_factory, monkeypatch, rows, repeat, reader, index):
    # GIVEN an NVTX table of random rows, some written twice, some again with one field changed
    path = tmp_path_factory.mktemp("nvtx") / "t.sqlite"
    _write(path, rows, repeat)
    # WHEN read as columns and as rows THEN the ranges, marks and warnings are the same
    old, new = _both(path, monkeypatch, reader)
    _assert_same(old, new)
    # ... and an index on the table (another tool's) changes nothing (the rows' order of reading
    # followed the query plan before: ties in start followed the index)
    if index:
        with sqlite3.connect(path) as db:
            db.execute(f"create index extra on NVTX_EVENTS ({index})")
        _assert_same(new, _both(path, monkeypatch, reader)[1])


def test_the_fuzz_reaches_what_it_is_meant_to(tmp_path, monkeypatch):
    # GIVEN a hand-made table with a duplicate, a range never closed, one closed on another
    # thread, a named domain, a bad row and non-UTF-8 text
    t1, t2 = GTIDS[0], GTIDS[1]
    rows = [
        {"eventType": se.NVTX_DOMAIN_CREATE, "start": 1, "end": None, "globalTid": t1, "endGlobalTid": None, "textId": None, "text": "dom", "domainId": 1, "int64Value": None},
        {"eventType": se.NVTX_PUSH_POP, "start": 2, "end": 5, "globalTid": t1, "endGlobalTid": None, "textId": None, "text": "step", "domainId": 1, "int64Value": 3},
        {"eventType": se.NVTX_START_END, "start": 3, "end": None, "globalTid": t1, "endGlobalTid": None, "textId": 2, "text": None, "domainId": 2, "int64Value": None},
        {"eventType": se.NVTX_START_END, "start": 4, "end": 9, "globalTid": t1, "endGlobalTid": t2, "textId": None, "text": b"\xff\xfe", "domainId": 0, "int64Value": None},
        {"eventType": se.NVTX_PUSH_POP, "start": 8, "end": 6, "globalTid": t1, "endGlobalTid": None, "textId": None, "text": "bad", "domainId": 0, "int64Value": None},
        {"eventType": se.NVTX_MARK, "start": 7, "end": None, "globalTid": t2, "endGlobalTid": None, "textId": 1, "text": None, "domainId": 0, "int64Value": 1},
    ]
    _write(tmp_path / "t.sqlite", rows, [(1, None)])
    # WHEN read as columns THEN it is the row-by-row reading's, and each case is in it
    old, new = _both(tmp_path / "t.sqlite", monkeypatch, "native")
    _assert_same(old, new)
    ranges, marks, warnings = new
    # (the text that is not UTF-8 with its bytes as escapes: two such names stay two)
    assert ranges["name"].to_pylist() == ["step", "sample", "\\xff\\xfe"]
    assert ranges["domain"].to_pylist() == ["dom", "domain2", ""]
    assert ranges["style"].to_pylist() == ["push_pop", "start_end", "start_end_cross_thread"]
    assert ranges["closed"].to_pylist() == [True, False, True]
    assert marks["name"].to_pylist() == ["draft"]
    assert len(warnings) == 3 and "dropped 1 NVTX row" in warnings[0] and "dropped 1 duplicated" in warnings[1] and "never closed" in warnings[2]
