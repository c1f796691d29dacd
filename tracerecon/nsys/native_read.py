"""Bulk reads of an export's integer columns straight into Arrow, through the ADBC SQLite
driver (``adbc-driver-sqlite``, Apache Arrow's): SQLite's C API fills Arrow buffers, no Python
object is made per row, and the GIL is released while it runs, so several row ranges of one
table are read at once on their own connections.

Measured on the 76 MB trace (2-core machine): 954k runtime calls x 5 guarded columns in
0.58 s on one connection and 0.33 s on two, against 1.0 s for sqlite3's ``fetchall`` and
about 0.9 s for the ``group_concat`` text path (``sqlite_export._fetch_text``). Evaluating
the typeof guard per value is a third of that: columns are read bare first (0.42 s against
0.62-0.66 s for the runtime calls on one connection) and guarded only when a value is not an
integer. ``PRAGMA mmap_size`` was tried and made no difference.

Each part is read in one batch, inside the driver's ``execute``: the whole read then runs with
the GIL released, before pyarrow is needed to take the result. So a read can start before
numpy and pyarrow are imported (``start_ahead``; importing them takes about as long as the
read, 0.15-0.2 s on the H200 host), and this module imports neither until a result is taken.

The connections are opened with the same read-only, ``immutable=1`` URI as sqlite3's, so no
lock, journal or WAL file is ever created beside the input.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# Below this many rows a table is read on one connection: opening more costs more than it saves.
ROWS_PER_PART = 50_000
MAX_PARTS = 8
# The driver's option for the rows of one Arrow batch (1024 by default). A part is read as one
# batch: the driver then reads every row inside ``execute``, with the GIL released.
BATCH_ROWS_OPTION = "adbc.sqlite.query.batch_rows"
MAX_BATCH_ROWS = 2**31 - 2  # the driver takes a positive C int (2**31 - 1 it refuses)


class NativeReadError(Exception):
    """The native reader could not read this query; the caller falls back to sqlite3."""


_AVAILABLE: bool | None = None


def available() -> bool:
    """Whether the ADBC SQLite driver can be imported (it is a dependency; a broken or
    missing install falls back to the sqlite3 reader)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        try:
            import importlib

            for module in ("adbc_driver_manager", "adbc_driver_sqlite"):
                importlib.import_module(module)

            _AVAILABLE = True
        except Exception:
            _AVAILABLE = False
    return _AVAILABLE


def ahead_threads() -> int:
    """Connections per table for the two reads started ahead (``start_ahead``). They run beside
    the imports and the rest of the read, on the main thread and another: two cores are left to
    those, and the two tables share the rest (``TRACERECON_READ_THREADS`` overrides). On the
    H200 host (16 cores, 10 alternating runs of a cold one-rank report): 8 per table 0.767 s,
    7 0.758 s, 6 0.741 s, 4 0.777 s; the code before reads ahead 0.824 s. In 8 worker processes
    of 2 cores each, 1 per table (this rule) and 2 took the same wall time, 1 less CPU time."""
    from tracerecon.cores import usable_cores

    return _threads_asked() or max(1, min((usable_cores() - 2) // 2, MAX_PARTS))


def read_threads() -> int:
    """Connections read at once: the cores this process may use, at most ``MAX_PARTS``
    (``TRACERECON_READ_THREADS`` overrides)."""
    from tracerecon.cores import usable_cores

    return _threads_asked() or max(1, min(usable_cores(), MAX_PARTS))


def _threads_asked() -> int | None:
    """``TRACERECON_READ_THREADS`` where it is a positive number."""
    return threads_setting(os.environ.get("TRACERECON_READ_THREADS", ""))


def threads_setting(value: str) -> int | None:
    """A ``TRACERECON_READ_THREADS`` value as a number of connections, None where it is none."""
    return int(value) if value.isdecimal() and int(value) > 0 else None


class _Executed:
    """One query executed on a connection of its own, its rows held by the driver until
    ``table`` takes them (or ``close`` drops them)."""

    def __init__(self, uri: str, query: str, batch_rows: int):
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._handles: list = []
        try:
            db = adbc_driver_sqlite.connect(uri)
            self._handles.append(db)
            conn = adbc_driver_manager.AdbcConnection(db)
            self._handles.append(conn)
            stmt = adbc_driver_manager.AdbcStatement(conn)
            self._handles.append(stmt)
            try:
                stmt.set_options(**{BATCH_ROWS_OPTION: str(max(1024, min(batch_rows, MAX_BATCH_ROWS)))})
            except adbc_driver_manager.Error:
                pass  # a driver without the option reads in its own batches, only later
            stmt.set_sql_query(query)
            self._stream, _ = stmt.execute_query()
        except BaseException:
            self.close()
            raise

    def table(self) -> pa.Table:
        """The rows as one Arrow table; the connection is closed afterwards."""
        import pyarrow as pa

        try:
            return pa.RecordBatchReader.from_stream(self._stream).read_all()
        finally:
            self.close()

    def close(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.release()  # before its statement: the driver's rows belong to the statement
        for handle in reversed(self._handles):
            handle.close()
        self._handles = []


@dataclass(frozen=True)
class _Parts:
    """Where one table's rows are cut: part i takes rowids in ``(cut[i-1], cut[i]]``; the first
    part has no lower bound and the last none above, so every row is in exactly one part
    whatever the rowids are. ``rowids``: the table's smallest and largest rowid."""

    table: str
    cond: str
    ranges: tuple[tuple[int | None, int | None], ...]
    rowids: tuple[int, int] = (0, -1)

    def queries(self, columns: list[str]) -> list[str]:
        where = f"({self.cond})" if self.cond else ""
        out = []
        for lo, hi in self.ranges:
            terms = [t for t in (where, f"rowid > {lo}" if lo is not None else "", f"rowid <= {hi}" if hi is not None else "") if t]
            out.append(f"select {', '.join(columns or ['0'])} from {self.table}{' where ' + ' and '.join(terms) if terms else ''} order by rowid")
        return out

    def rows_bounds(self) -> list[int]:
        """No part has more rows than its bound (its rowid span)."""
        first, last = self.rowids
        return [(last if hi is None else hi) - (first - 1 if lo is None else lo) for lo, hi in self.ranges]


def _parts(uri: str, rest: str, max_parts: int | None = None) -> _Parts:
    """``rest`` (``TABLE`` or ``TABLE where CONDITION``) cut into row ranges by rowid, as many
    as ``max_parts`` (default ``read_threads``) allows with at least ``ROWS_PER_PART`` rows each."""
    table, _, cond = rest.partition(" where ")
    table = table.strip()
    # The rowid range sizes the parts (count(*) would scan the whole table once more). Two
    # subqueries: SQLite finds a lone min() or max() of the rowid in the b-tree, but both in one
    # select scan the table (0.15 s for 954k runtime calls, against 0.1 ms).
    conn = sqlite3.connect(uri, uri=True)
    try:
        lo_id, hi_id = conn.execute(f"select (select min(rowid) from {table}), (select max(rowid) from {table})").fetchone()
    finally:
        conn.close()
    if lo_id is None or hi_id is None:
        return _Parts(table, cond, ((None, None),))
    count = hi_id - lo_id + 1
    parts = max(1, min(max_parts or read_threads(), count // ROWS_PER_PART))
    cuts = [lo_id + (hi_id - lo_id) * i // parts for i in range(1, parts)]
    ranges = tuple((cuts[i - 1] if i > 0 else None, cuts[i] if i < parts - 1 else None) for i in range(parts))
    return _Parts(table, cond, ranges, (lo_id, hi_id))


def _execute_all(uri: str, parts: _Parts, columns: list[str], inline_one: bool = True) -> list[Future]:
    """Each part's query executed on a thread and connection of its own (one alone in the
    calling thread, if ``inline_one``); futures of ``_Executed``. The threads are tracked until
    their query ends (``wait_idle``)."""
    queries = parts.queries(columns)
    bounds = parts.rows_bounds()
    if len(queries) == 1 and inline_one:
        fut: Future = Future()
        try:
            fut.set_result(_Executed(uri, queries[0], bounds[0]))
        except BaseException as exc:  # kept for the caller, as a pool's future keeps it
            fut.set_exception(exc)
        return [fut]
    pool = ThreadPoolExecutor(len(queries), thread_name_prefix="native-read")
    futures: list[Future] = []
    try:
        for q, bound in zip(queries, bounds):
            futures.append(pool.submit(_Executed, uri, q, bound))
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT.add(futures[-1])
            futures[-1].add_done_callback(_landed)
    except BaseException:
        _drop(futures)  # a thread that could not start: what did start is dropped
        raise
    finally:
        pool.shutdown(wait=False)  # the threads end with their query
    return futures


# Parts being read on threads: a process must not fork while one is (``wait_idle``).
_IN_FLIGHT: set[Future] = set()
_IN_FLIGHT_LOCK = threading.Lock()


def _landed(fut: Future) -> None:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.discard(fut)


def wait_idle() -> None:
    """Return once no part is being read on a thread of this module (a dropped read cannot be
    stopped: the SQLite driver cannot cancel a query, so it runs to its end). Called before
    worker processes fork: a child must not inherit a connection in the middle of a read."""
    with _IN_FLIGHT_LOCK:
        running = list(_IN_FLIGHT)
    for fut in running:
        try:
            fut.exception()
        except BaseException:  # cancelled: nothing is running
            pass


def _drop(futures: list[Future]) -> None:
    """Results nobody will take: each part's connection closed once its query is done."""
    for fut in futures:
        fut.add_done_callback(lambda f: f.exception() is None and f.result().close())


# Reads started ahead (``start_ahead``), by (uri, plain columns, rest): taken by the first
# ``fetch_int_columns`` of that very query.
AheadKey = tuple[str, tuple[str, ...], str]
_AHEAD: dict[AheadKey, list[Future]] = {}
_AHEAD_LOCK = threading.Lock()


def _forget_ahead_in_child() -> None:
    # A forked child has none of the threads behind its parent's reads: it must not wait on them.
    global _AHEAD_LOCK, _IN_FLIGHT_LOCK
    _AHEAD.clear()
    _IN_FLIGHT.clear()
    _AHEAD_LOCK, _IN_FLIGHT_LOCK = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_ahead_in_child)


def _plain(exprs: list[str]) -> list[str]:
    return [e for e in exprs if not e.lstrip("-").isdigit()]


def start_ahead(uri: str, exprs: list[str], rest: str) -> AheadKey:
    """Start reading ``select exprs from rest`` as ``fetch_int_columns`` with a guard would
    first read it, on threads (``ahead_threads`` per table), and return its key at once. A later
    ``fetch_int_columns`` of the same ``uri``, ``exprs`` and ``rest`` takes these parts instead
    of reading them; one of another query never sees them. Imports neither numpy nor pyarrow:
    the read runs while they are imported. Raises what sqlite3 raises when the table cannot be
    cut into parts, and RuntimeError when no thread can be started (nothing is left running)."""
    plain = _plain(exprs)
    parts = _parts(uri, rest, ahead_threads())
    futures = _execute_all(uri, parts, plain, inline_one=False)
    key = (uri, tuple(plain), rest)
    with _AHEAD_LOCK:
        _drop(_AHEAD.pop(key, []))
        _AHEAD[key] = futures
    return key


def discard_ahead(keys: list[AheadKey] | None = None) -> int:
    """Drop the reads started ahead under ``keys`` (default: all of this process's) that were
    not taken; their connections close as their queries end. Returns how many there were."""
    with _AHEAD_LOCK:
        left = [_AHEAD.pop(k) for k in (list(_AHEAD) if keys is None else keys) if k in _AHEAD]
    for futures in left:
        _drop(futures)
    return len(left)


def _take_ahead(uri: str, plain: list[str], rest: str) -> list[Future] | None:
    with _AHEAD_LOCK:
        return _AHEAD.pop((uri, tuple(plain), rest), None)


def fetch_int_columns(uri: str, exprs: list[str], rest: str, names: list[str], guard: Callable[[str], str] | None = None,
                      null_value: int = 0) -> dict[str, np.ndarray]:
    """``select exprs from rest`` as numpy int64 columns named ``names``, in rowid order.

    ``exprs`` are integer constants or SQL expressions. Without ``guard`` each must yield an
    integer for every row. With ``guard`` (SQL: the expression as an integer, ``null_value``
    where it is NULL, text or a blob, reals truncated) the columns are first read as they are,
    which is 30-40 % cheaper than evaluating the guard per value: that read stands only if
    every value came back an integer or NULL (NULL becomes ``null_value``, as the guard would
    make it); any text, real or blob value, which makes the driver give the column another type
    or report a type mismatch, makes the guarded query run instead. Either way the columns
    equal the guarded query's. ``rest`` is ``TABLE`` or ``TABLE where CONDITION``. A read of
    this very query started by ``start_ahead`` is taken instead of reading again. Raises
    NativeReadError when the driver cannot run the query.

    Each part is one batch, whose column types the driver infers from all of its rows: a text
    value anywhere in a part makes it a text column (read in full, then dropped for the guarded
    query; only odd or corrupt exports have one). The arrays may be read-only views of the
    driver's buffers: copy before writing to them.
    """
    import adbc_driver_manager
    import numpy as np
    import pyarrow as pa

    plain = _plain(exprs)
    n = max(1, len(plain))
    errors = (adbc_driver_manager.Error, pa.ArrowException, ValueError, TypeError, RuntimeError, OSError, sqlite3.Error)

    def columns_of(futures: list[Future], nulls: bool) -> list[list[np.ndarray]]:
        out = []
        try:
            for fut in futures:
                out.append(_int64_columns(fut.result().table(), n, nulls, null_value))
        finally:
            _drop(futures)  # what is left when one part failed
        return out

    try:
        chunks = None
        ahead = _take_ahead(uri, plain, rest) if guard is not None else None
        parts = None
        if guard is not None:
            try:
                if ahead is None:
                    parts = _parts(uri, rest)
                    ahead = _execute_all(uri, parts, plain)
                chunks = columns_of(ahead, nulls=True)
            except (NativeReadError,) + errors:
                chunks = None  # a value that is not an integer: the guarded query decides
        if chunks is None:
            parts = parts or _parts(uri, rest)
            columns = [guard(e) for e in plain] if guard is not None else plain
            chunks = columns_of(_execute_all(uri, parts, columns), nulls=False)
    except NativeReadError:
        raise
    except errors as exc:
        # Whatever the driver or Arrow could not do, sqlite3 is asked the same query instead.
        raise NativeReadError(f"{type(exc).__name__}: {exc}") from exc
    merged = []
    for i in range(n):  # each part's column released once copied
        merged.append(np.concatenate([c[i] for c in chunks]) if len(chunks) > 1 else chunks[0][i])
        for c in chunks:
            c[i] = None
    rows = len(merged[0]) if merged else 0
    out: dict[str, np.ndarray] = {}
    it = iter(merged)
    for name, expr in zip(names, exprs):
        out[name] = np.full(rows, int(expr), dtype=np.int64) if expr.lstrip("-").isdigit() else next(it)
    return out


def fetch_strings(uri: str, query: str) -> pa.Array:
    """The one text column of ``query`` (on a connection of its own, in one batch) as an Arrow
    string array, NULLs kept. Raises NativeReadError when the driver cannot run it, gives a
    column of another type, or text that is not UTF-8 (sqlite3 then decodes it, replacing)."""
    import adbc_driver_manager
    import pyarrow as pa

    try:
        col = _Executed(uri, query, MAX_BATCH_ROWS).table().column(0).combine_chunks()
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.string())
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            raise NativeReadError(f"text came back as {col.type}")
        col.validate(full=True)  # UTF-8
        return col.cast(pa.string())
    except NativeReadError:
        raise
    except (adbc_driver_manager.Error, pa.ArrowException, ValueError, RuntimeError, OSError) as exc:
        raise NativeReadError(f"{type(exc).__name__}: {exc}") from exc


def _int64_columns(table: pa.Table, n_columns: int, nulls: bool = False, null_value: int = 0) -> list[np.ndarray]:
    """A query's ``n_columns`` columns as int64 numpy arrays; NULLs become ``null_value`` where
    ``nulls`` allows them, else raise NativeReadError."""
    import numpy as np
    import pyarrow as pa

    out = []
    for i in range(n_columns):
        # Each column leaves the table as it is converted: the part is held once, not twice.
        col, table = table.column(0), table.remove_column(0)
        # An empty or all-NULL result comes back typed as null; anything else but integers
        # means a value the caller must guard.
        if pa.types.is_null(col.type) and (nulls or len(col) == 0):
            out.append(np.full(len(col), null_value if len(col) else 0, dtype=np.int64))
            continue
        if not pa.types.is_int64(col.type):
            raise NativeReadError(f"column {i} came back as {col.type}")
        if col.null_count:
            if not nulls:
                raise NativeReadError("NULL in a guarded integer column")
            col = col.fill_null(null_value)
        out.append(col.to_numpy().astype(np.int64, copy=False))
    return out
