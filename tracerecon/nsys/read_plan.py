"""What the reads ask of an export, in the standard library alone: opening it read-only, its
tables and columns, its strings, and the SQL of the two bulk reads (the CUDA API calls and the
kernels, the biggest tables of a trace). ``sqlite_export`` reads with these; ``start_ahead``
starts those two reads before numpy and pyarrow are imported.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

from tracerecon.errors import BadTraceError, UsageError
from tracerecon.run_dir import open_regular

SQLITE_MAGIC = b"SQLite format 3\x00"
XZ_MAGIC = b"\xfd7zXZ\x00"  # the first bytes of an .xz file (a compressed export)
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")  # nsys's own reports, before their export
NULL_SENTINEL = -(2**62)  # stands in for SQL NULL in integer columns read through numpy
XZ_SUFFIX = ".xz"


class ExportConnection(sqlite3.Connection):
    """A read-only connection to an export that remembers its URI, so bulk reads can open
    their own native connections to the same file (see ``sqlite_export._fetch``)."""

    bulk_uri: str | None = None


def why_missing(p: Path) -> str:
    """Why ``p``, which does not exist as far as ``Path.exists`` can tell, is not there: no such
    file, a symbolic link to a missing file, or a loop of symbolic links."""
    if not p.is_symlink():
        return "no such file"
    try:
        os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
    return f"a symbolic link to a missing file ({os.readlink(p)})"


def open_readonly(path: str | os.PathLike, shown: str | os.PathLike | None = None) -> ExportConnection:
    """Open ``path`` as a read-only SQLite database, or raise BadTraceError with why not
    (naming ``shown``, the file the user gave, when ``path`` is a decompressed copy)."""
    p = Path(path)
    name = Path(shown) if shown is not None else p
    if not p.exists():
        raise BadTraceError(f"{name}: {why_missing(p)}")
    if not p.is_file():
        raise BadTraceError(f"{name}: not a file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise BadTraceError(f"{name}: cannot read ({exc.strerror})") from None
    if p.suffix == ".nsys-rep" or p.suffix == ".qdrep":
        raise BadTraceError(f"{name}: is an nsys report, not its SQLite export; run `nsys export --type sqlite {name}` first")
    if not head.startswith(SQLITE_MAGIC):
        if len(head) == 0:
            raise BadTraceError(f"{name}: empty file, not an SQLite export")
        raise BadTraceError(f"{name}: not an SQLite file (expected an `nsys export --type sqlite` output)")
    # immutable=1: no locks, no -shm/-wal files created beside the input (a read-only folder
    # works too); a WAL file's un-checkpointed pages are then not read (read_info says so).
    uri = "file:" + quote(os.fsencode(p.resolve())) + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, factory=ExportConnection)
        conn.bulk_uri = uri
        # nsys text that is not UTF-8 (a program's Latin-1 range names): its bytes as \xNN escapes,
        # so two names that differ in them stay two (replacement characters had merged them)
        conn.text_factory = lambda b: b.decode("utf-8", "backslashreplace")
        # A truncated file often opens fine; this read of the schema and the page count catches it.
        conn.execute("select count(*) from sqlite_master").fetchone()
        page_size = conn.execute("pragma page_size").fetchone()[0]
        page_count = conn.execute("pragma page_count").fetchone()[0]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        # (SQLite's message on a damaged schema quotes its bytes, which Python then fails to decode)
        why = f"malformed schema: {exc.reason}" if isinstance(exc, UnicodeDecodeError) else exc
        raise BadTraceError(f"{name}: unreadable SQLite file ({why}; a file cut short, as by a copy or an export that did not finish, reads so)") from None
    if page_size * page_count > p.stat().st_size:
        conn.close()
        raise BadTraceError(f"{name}: truncated SQLite file ({p.stat().st_size} of {page_size * page_count} bytes)")
    return conn


# Tables read in rowid order (bulk reads split them by rowid; the NVTX texts are lined up with
# their integers by it).
ROWID_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS")


def tables_without_rowid(conn: sqlite3.Connection, tables: frozenset[str]) -> list[str]:
    """The ``ROWID_TABLES`` among ``tables`` that have no rowid (created ``WITHOUT ROWID``,
    which nsys never does: another tool rewrote the export)."""
    missing = []
    for table in ROWID_TABLES:
        if table in tables:
            try:
                conn.execute(f"select rowid from {table} limit 0")
            except sqlite3.OperationalError as exc:
                if "rowid" not in str(exc):
                    raise
                missing.append(table)
    return missing


def views_read_as_tables(conn: sqlite3.Connection) -> list[str]:
    """The ``ROWID_TABLES`` that are views (nsys writes tables: another tool rewrote the export;
    a view's rows have no rowid to read them in order by)."""
    views = {r[0] for r in conn.execute("select name from sqlite_master where type = 'view'")}
    return [t for t in ROWID_TABLES if t in views]


def table_names(conn: sqlite3.Connection) -> frozenset[str]:
    return frozenset(r[0] for r in conn.execute("select name from sqlite_master where type in ('table','view')"))


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"pragma table_info('{table}')")]


def column_or(cols: list[str], name: str, default: str = "NULL") -> str:
    """``name`` if the table has that column, else the SQL ``default``."""
    return name if name in cols else default


def string_rows(conn: sqlite3.Connection, tables: frozenset[str]) -> tuple[list[int], list[str | None]]:
    """The StringIds table as (ids, values), by id: integer ids only, a repeated id's first
    row kept, text that is not UTF-8 decoded with its bytes as ``\\xNN`` escapes (distinct
    names stay distinct)."""
    if "StringIds" not in tables:
        return [], []
    rows = conn.execute("select id, cast(value as blob) from StringIds where typeof(id) = 'integer' order by id").fetchall()
    ids: list[int] = []
    values: list[str | None] = []
    for i, v in rows:
        if ids and ids[-1] == i:
            continue
        ids.append(i)
        values.append(None if v is None else bytes(v).decode("utf-8", "backslashreplace"))
    return ids, values


READERS = ("adbc", "sqlite3")  # TRACERECON_READER's values: native (the default), Python's sqlite3


def native_reads() -> bool:
    """Bulk reads through the ADBC SQLite driver, unless it is missing or turned off
    (``TRACERECON_READER=sqlite3``)."""
    if os.environ.get("TRACERECON_READER", "") == "sqlite3":
        return False
    from tracerecon.nsys import native_read

    return native_read.available()


def int_guard(expr: str) -> str:
    """SQL: ``expr`` as an integer; NULL_SENTINEL where it is NULL, text or a blob."""
    return f"(case typeof({expr}) when 'integer' then {expr} when 'real' then cast({expr} as integer) else {NULL_SENTINEL} end)"


def split_select(sql: str) -> tuple[list[str], str]:
    """``select a, f(b, c) from T where ...`` -> (["a", "f(b, c)"], "T where ...")."""
    body = sql[len("select "):]
    depth, cut = 0, None
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and body.startswith(" from ", i):
            cut = i
            break
    exprs, part, depth = [], "", 0
    for ch in body[:cut]:
        if ch == "," and depth == 0:
            exprs.append(part.strip())
            part = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        part += ch
    exprs.append(part.strip())
    return exprs, body[cut + len(" from "):]


# API calls that can launch GPU work, block on it, make a stream wait for the host or an external
# semaphore, or open another process's event (said, not modelled: analysis.rank). Reading only these halves the rows of a
# typical trace (cuKernelGetName, cudaEventQuery, ... launch nothing); the pipeline re-reads
# everything if any GPU op then finds no launching call.
# (and a stream capture's ends: the launches made between them put no op in the trace)
RELEVANT_API = re.compile(r"Launch|Memcpy|Memset|Synchroni[sz]e|Graph|Prefetch|WaitEvent|EventRecord|Callback|StreamWaitValue|BatchMemOp|"
                          r"WaitExternalSemaphores|IpcOpenEventHandle|Stream(?:Begin|End)Capture", re.I)

API_CALLS_COLUMNS = ["start", "end", "gtid", "corr", "name"]
OPS_COLUMNS = ["start", "end", "dev", "stream", "corr", "gpid", "name", "node"]  # of every table of GPU ops
# A kernel's short name is what it is shown by; its demangled name (``full``) keeps the
# namespaces that tell what some kernels are (DeepEP's ``deep_ep::intranode::dispatch`` is
# ``dispatch`` short).
KERNEL_COLUMNS = OPS_COLUMNS + ["full"]


def relevant_name_ids(ids: list[int], values: list[str | None]) -> list[int] | None:
    """The string ids of ``RELEVANT_API`` calls, or None (no filter) when there are no strings."""
    if not values:
        return None
    return [int(i) for i, v in zip(ids, values) if RELEVANT_API.search(v or "")]


def api_calls_sql(name_ids: list[int] | None) -> str:
    """The runtime and driver API calls (``API_CALLS_COLUMNS``), only those named by
    ``name_ids`` unless it is None."""
    where = "" if name_ids is None else f" where nameId in ({','.join(map(str, name_ids)) or '-1'})"
    return f"select start, end, globalTid, coalesce(correlationId, {NULL_SENTINEL}), nameId from CUPTI_ACTIVITY_KIND_RUNTIME{where}"


def kernels_sql(cols: list[str]) -> str:
    """The kernels (``KERNEL_COLUMNS``), from a table with columns ``cols``: only the columns
    needed, nothing constant (the biggest table of a trace)."""
    gpid = f"coalesce({column_or(cols, 'globalPid', '0')}, 0)"
    name = "shortName" if "shortName" in cols else column_or(cols, "demangledName", "0")
    full = column_or(cols, "demangledName", str(NULL_SENTINEL))  # no such column: no demangled names
    return (f"select start, end, deviceId, streamId, coalesce(correlationId, {NULL_SENTINEL}), {gpid}, {name}, "
            f"coalesce({column_or(cols, 'graphNodeId')}, {NULL_SENTINEL}), {full} from CUPTI_ACTIVITY_KIND_KERNEL")


def start_ahead(path: str | os.PathLike) -> list:
    """Start the native reads of the API calls and the kernels of the export at ``path`` on
    threads of their own and return their keys; ``sqlite_export.read_export`` takes them when it
    asks for the very same SQL. Called before numpy and pyarrow are imported, so that the reads
    (0.2 s on the H200 host for the 76 MB trace) and the imports (0.1-0.2 s) run at once.

    Only ever a head start: a file this cannot open or plan, or reads it cannot start (no
    thread to be had), are left for ``read_export`` to read and to say what is wrong with, and
    a read whose SQL differs from the one asked later is never used. The caller drops what was
    not taken with ``tracerecon.nsys.native_read.discard_ahead(keys)``; a read once started runs
    to its end (the driver cannot cancel a query)."""
    p = Path(path)
    if p.name.endswith(XZ_SUFFIX) or not native_reads():
        return []
    from tracerecon.nsys import native_read

    try:
        conn = open_readonly(p)
    except BadTraceError:
        return []
    keys: list = []
    try:
        tables = table_names(conn)
        sqls = []
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            sqls.append(api_calls_sql(relevant_name_ids(*string_rows(conn, tables))))
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            sqls.append(kernels_sql(columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")))
        for sql in sqls:
            exprs, rest = split_select(sql)
            keys.append(native_read.start_ahead(conn.bulk_uri, exprs, rest))
        return keys
    except Exception:  # a head start only: whatever went wrong, the read proper meets it again
        native_read.discard_ahead(keys)
        return []
    finally:
        conn.close()


def is_trace_file(path: Path) -> bool:
    """Whether the file ``path`` holds a trace that writing over it would lose: an SQLite or
    .xz file (an nsys export, often another rank's) by its content, an nsys report by its name.
    Not there, not a regular file or unreadable: False."""
    if path.name.endswith(NSYS_REPORT_SUFFIXES) and path.is_file():
        return True
    try:
        with open_regular(path) as fh:  # (a FIFO is not waited on)
            return fh.read(len(SQLITE_MAGIC)).startswith((SQLITE_MAGIC, XZ_MAGIC))
    except OSError:
        return False


def refuse_file_over_a_trace(out: Path, what: str = "a timeline", flag: str = "-o") -> None:
    """A file (``what``: a timeline, a picture) written over a trace (``is_trace_file``: under a
    mistyped ``-o``) is refused; any other file is replaced, as ``cp`` would."""
    if is_trace_file(out):
        raise UsageError(f"{out}: holds a trace; {what} is not written over it: choose another {flag} (or remove it first)")


# A folder replaced whole (``export --force``) is searched this far for traces it would lose.
FOLDER_SEARCH_LIMIT = 100_000


def trace_under(folder: Path) -> str | None:
    """Why replacing ``folder`` whole would lose a trace: the first file under it (sub-folders
    too, links not followed) that ``is_trace_file``, or that it holds more than
    FOLDER_SEARCH_LIMIT entries (searched no further); None where it holds no trace."""
    seen = 0
    for root, dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            if seen > FOLDER_SEARCH_LIMIT:
                return f"more than {FOLDER_SEARCH_LIMIT:,} files"
            path = Path(root) / name
            if not path.is_symlink() and is_trace_file(path):  # (a link goes, what it points to stays)
                return f"a trace, {path}"
        seen += len(dirs)
    return None
