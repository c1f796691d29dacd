"""Read an Nsight Systems SQLite export (nsys 2022.4 .. 2026.x) into Arrow tables.

The export is opened read-only (``mode=ro`` URI); nothing is ever written to it.
nsys creates a table only when it has rows, so a missing table reads as an empty one.
Bulk reads go straight into numpy columns through the ADBC driver (``native_read``), else
through sqlite3 as one text per column: no Python object per row. What they ask (the SQL of
the two biggest reads, the strings, the read-only opening) is in ``read_plan``, which needs
neither numpy nor pyarrow, so those reads can start before this module is imported.

GlobalId layout (nsys docs): ``globalTid`` holds the pid in bits 24..47 and the tid in bits
0..23; ``globalPid`` is the same with tid = 0. Correlation ids are per process, so every join
of a GPU op to its launching API call is on (globalPid, correlationId).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
# Imported with the module, not where first used: a module importing numpy, pyarrow or
# pyarrow.compute for the first time on two threads at once can hand one of them a partly
# initialised module. Importing this module first makes the pipeline's other imports safe to
# run on a thread (``tracerecon.import_ahead``).
import pyarrow.compute as pc

from tracerecon import schema
from tracerecon.errors import BadTraceError, TraceReconError
from tracerecon.interrupts import thread_pool, undone_at_exit_now
from tracerecon.kernel_names import kernel_function
from tracerecon.nsys.read_plan import (  # noqa: F401 (some are this module's API too)
    API_CALLS_COLUMNS, KERNEL_COLUMNS, NULL_SENTINEL, OPS_COLUMNS, XZ_MAGIC, XZ_SUFFIX, api_calls_sql, kernels_sql, native_reads, open_readonly,
    relevant_name_ids, split_select, string_rows, table_names, tables_without_rowid, views_read_as_tables, why_missing,
)
from tracerecon.nsys import scratch
from tracerecon.nsys.gpu_identity import GpuIdentity, recorded
from tracerecon.nsys.locate import before_2023
from tracerecon.nsys.read_plan import column_or as _col
from tracerecon.nsys.read_plan import columns as _columns
from tracerecon.nsys.read_plan import int_guard as _int

# NVTX event types (ENUM_NSYS_EVENT_TYPE, stable since 2020).
NVTX_MARK = 34
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTXT_MARK = 65
NVTXT_PUSH_POP = 70
NVTXT_START_END = 71
NVTX_DOMAIN_CREATE = 75

# Fallbacks for exports without the ENUM_* tables (older nsys), from CUPTI's headers.
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}

# Tables any nsys export has at least one of; a SQLite file with none of them is another tool's.
NSYS_MARKER_TABLES = {"StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"}
CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")

Progress = Callable[[str], None]


def pid_of(global_id: np.ndarray) -> np.ndarray:
    return (global_id >> 24) & 0xFFFFFF


def tid_of(global_id: np.ndarray) -> np.ndarray:
    return global_id & 0xFFFFFF


def process_key(global_id: np.ndarray) -> np.ndarray:
    """globalTid -> its globalPid (hardware/VM/pid bits, tid zeroed)."""
    return global_id & ~np.int64(0xFFFFFF)


@dataclass(frozen=True)
class ExportInfo:
    """What an export says about itself."""

    path: str
    nsys_version: str | None  # e.g. "2025.3.2.0"; None when the export does not say
    schema_version: str | None  # export schema, e.g. "3.20.3"
    metadata_table: str | None  # META_DATA_EXPORT (2023.3+) or EXPORT_META_DATA (older)
    tables: frozenset[str]
    graph_trace_mode: str | None  # "Node", "Graph" or None (not recorded)
    session_start_utc_ns: int | None
    time_normalized: bool  # exported with --ts-normalize: timestamps start at 0
    warnings: tuple[str, ...] = ()
    # The GPUs the export lists, by device id (an ExportInfo read back from an export directory:
    # those its rank ran on).
    gpus: tuple[GpuIdentity, ...] = ()
    # The UUIDs of every GPU the machine had (TARGET_INFO_GPU, a row without a usable id too):
    # two exports listing one GPU were taken on one machine, whose session start times come
    # from one system clock.
    gpu_uuids: frozenset[str] = frozenset()
    # TARGET_INFO_CUDA_DEVICE (in 2025.3+ exports; absent in 2023.2, 2024.5 ones): (pid, CUDA device number in that process, its
    # TARGET_INFO_GPU id): a GPU op's deviceId is the process's number (CUDA_VISIBLE_DEVICES
    # renumbers), not the id.
    cuda_devices: tuple[tuple[int, int, int], ...] = ()

    @property
    def renumbered(self) -> bool:
        """Whether some process numbered a GPU otherwise than the machine (``cuda_devices``)."""
        return any(cuda != gpu for _, cuda, gpu in self.cuda_devices)

    def gpu_of(self, pid: int, device: int) -> int:
        """The TARGET_INFO_GPU id of CUDA device ``device`` of process ``pid`` (``device`` where
        the export does not map it: no table, or no row for it)."""
        for p, cuda, gpu in self.cuda_devices:
            if p == pid and cuda == device:
                return gpu
        return device

    @property
    def has_nvtx(self) -> bool:
        return "NVTX_EVENTS" in self.tables

    @property
    def has_cuda(self) -> bool:
        return any(t in self.tables for t in CUDA_TABLES)


@dataclass(frozen=True)
class TraceTables:
    """Everything read from one export, as Arrow tables (see ``tracerecon.schema``)."""

    info: ExportInfo
    nvtx_ranges: pa.Table
    nvtx_marks: pa.Table
    api_calls: pa.Table
    strings: "StringTable"  # resolves api_calls.name_id
    gpu_ops: pa.Table
    sync_records: pa.Table
    event_records: pa.Table
    processes: pa.Table
    trace_end_ns: int
    trace_start_ns: int
    warnings: tuple[str, ...] = field(default=())
    cuda_streams: pa.Table = field(default_factory=lambda: schema.empty(schema.CUDA_STREAMS))  # how each stream was created


def sidecar_warnings(path) -> list[str]:
    """What the files SQLite keeps beside the export ``path`` mean for a read-only, immutable open
    of it (every read and copy here): a write-ahead log's changes are not in what is read; a
    rollback journal means a write to it was cut short."""
    out = []
    wal = Path(str(path) + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        out.append(f"{path}: a write-ahead log ({wal.name}) lies beside it; its un-checkpointed changes are not read (the input is never modified)")
    journal = Path(str(path) + "-journal")
    if journal.is_file() and journal.stat().st_size > 0:
        # A writer stopped mid-transaction (an export or a copy cut short): SQLite would roll the
        # file back before reading it, which a read-only, immutable open does not do.
        out.append(f"{path}: a rollback journal ({journal.name}) lies beside it: a write to it was cut short, and what is read may be "
                   "half-written (open it once with sqlite3 to roll it back, or export again)")
    return out


def _xz_chunks(path: Path):
    """The decompressed bytes of the ``.xz`` file ``path``, a megabyte at a time; a file that
    cannot be read as one is ``BadTraceError``, as ``xz -t`` finds it: bytes after its last
    stream that are not one (a damaged file, or other data appended) too, which Python's
    reader skips without a word."""
    import lzma

    try:
        with lzma.open(path) as src:
            while chunk := src.read(1 << 20):
                yield chunk
        if not _ends_as_xz(path):
            raise lzma.LZMAError("bytes after its last stream are not .xz data: a damaged file, or another appended to it")
    except (lzma.LZMAError, EOFError, OSError) as exc:
        raise BadTraceError(f"{path}: not a readable .xz file ({exc})") from None


def _ends_as_xz(path: Path) -> bool:
    """Whether the file ends as an .xz stream does: with its footer's magic bytes ``YZ``.
    (Stream padding, zero bytes after a stream, which ``xz`` allows, Python's reader already
    refuses as a stream cut short.)"""
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - 2))
        return fh.read(2) == b"YZ"


@contextlib.contextmanager
def materialized(path: str | os.PathLike):
    """The path of a plain SQLite file holding ``path``'s export: ``path`` itself, or for an
    ``.xz``-compressed export a decompressed copy in the temporary directory (never beside the
    input), removed afterwards: also where the program ends at once on another thread's
    Ctrl-C (``interrupts.exit_now``)."""
    p = Path(path)
    if p.name.endswith(XZ_SUFFIX) and p.is_file():
        import tempfile

        room = f"cannot decompress it into the temporary directory {tempfile.gettempdir()} ({{}}; TMPDIR chooses another)"
        try:
            fd, tmp = tempfile.mkstemp(prefix=scratch.prefix(), suffix=".sqlite")
        except OSError as exc:
            raise TraceReconError(f"{p}: " + room.format(exc.strerror or exc)) from None
        with undone_at_exit_now(lambda: scratch.unlink_quietly(tmp)):
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in _xz_chunks(p):
                        out.write(chunk)
            except OSError as exc:  # writing: the temporary directory's side (reading is said as BadTraceError)
                scratch.unlink_quietly(tmp)
                raise TraceReconError(f"{p}: " + room.format(exc.strerror or exc)) from None
            except BaseException:  # Ctrl-C while decompressing too: no copy of the trace left behind
                scratch.unlink_quietly(tmp)
                raise
            try:
                yield Path(tmp)
            finally:
                scratch.unlink_quietly(tmp)
    else:
        yield p


def read_info(conn: sqlite3.Connection, path: str) -> ExportInfo:
    """Detect nsys version, export schema and capture settings; raise if not an nsys export."""
    tables = table_names(conn)
    if not tables & NSYS_MARKER_TABLES:
        if not tables:
            raise BadTraceError(f"{path}: empty SQLite database, not an nsys export")
        raise BadTraceError(f"{path}: SQLite file without any Nsight Systems table (another tool's database?)")
    views = views_read_as_tables(conn)
    if views:
        raise BadTraceError(f"{path}: {views[0]} is a view, not a table, which nsys never writes (was the export rewritten by another tool?); "
                            "export the report again with `nsys export --type sqlite`")
    no_rowid = tables_without_rowid(conn, tables)
    if no_rowid:
        raise BadTraceError(f"{path}: table {no_rowid[0]} was created WITHOUT ROWID, which nsys never does (was the export "
                            "rewritten by another tool?); export the report again with `nsys export --type sqlite`")
    meta_table = "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables else ("EXPORT_META_DATA" if "EXPORT_META_DATA" in tables else None)
    meta: dict[str, str] = {}
    if meta_table:
        meta = {str(k): str(v) for k, v in conn.execute(f"select name, value from {meta_table}")}
    capture: dict[str, str] = {}
    if "META_DATA_CAPTURE" in tables:
        capture = {str(k): str(v) for k, v in conn.execute("select name, value from META_DATA_CAPTURE")}
    graph_mode = capture.get("CUDA_GRAPH_TRACE_OPTIONS:MODE")
    if graph_mode is None and "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        graph_mode = "Graph"
    start_utc = None
    warnings = []
    if "TARGET_INFO_SESSION_START_TIME" in tables and "utcEpochNs" in _columns(conn, "TARGET_INFO_SESSION_START_TIME"):
        row = conn.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME limit 1").fetchone()
        value = row[0] if row else None
        if isinstance(value, (int, float)):
            start_utc = int(value)
        elif value is not None:
            warnings.append(f"{path}: the session start time is not a number; the file is taken as of unknown start (not checked against other ranks' times)")
    gpus, gpu_uuids = _read_gpus(conn) if "TARGET_INFO_GPU" in tables else ((), frozenset())
    cuda_devices = _read_cuda_devices(conn) if "TARGET_INFO_CUDA_DEVICE" in tables else ()
    warnings.extend(sidecar_warnings(path))
    nsys_version = meta.get("EXPORT_PRODUCT_VERSION")
    schema_version = meta.get("EXPORT_SCHEMA_VERSION")
    if schema_version is None:
        warnings.append(f"{path}: export metadata missing; schema detected from the tables present")
    elif str(schema_version).split(".")[0] != str(KNOWN_SCHEMA_MAJOR):
        warnings.append(f"{path}: export schema {schema_version} (nsys {meta.get('EXPORT_PRODUCT_VERSION') or '?'}) is not the {KNOWN_SCHEMA_MAJOR}.x "
                        f"tracerecon reads (tested: {TESTED_SCHEMAS}); read by its tables' and columns' names, which may have changed meaning")
    return ExportInfo(
        path=str(path),
        nsys_version=nsys_version,
        schema_version=schema_version,
        metadata_table=meta_table,
        tables=tables,
        graph_trace_mode=graph_mode,
        session_start_utc_ns=start_utc,
        time_normalized=meta.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true",
        warnings=tuple(warnings),
        gpus=gpus,
        gpu_uuids=gpu_uuids,
        cuda_devices=cuda_devices,
    )


def _fetch(conn: sqlite3.Connection, sql: str, names: list[str]) -> dict[str, np.ndarray]:
    """Run ``select <integer exprs> from T [where ...]`` into numpy int64 columns, in rowid order.

    Every value comes back as an integer: NULL, text and blobs become NULL_SENTINEL (rows the
    readers then drop and count), reals are truncated. The same SQL runs whichever way the
    rows are fetched, so both ways give the same columns (a test checks it on every sample).
    """
    exprs, rest = split_select(sql.strip())
    if len(exprs) != len(names):
        raise ValueError("column names do not match the select list")
    uri = getattr(conn, "bulk_uri", None)
    if uri is not None and native_reads():
        from tracerecon.nsys import native_read

        try:
            return native_read.fetch_int_columns(uri, exprs, rest, names, guard=_int, null_value=NULL_SENTINEL)
        except native_read.NativeReadError:
            pass  # a file or driver the native reader cannot take: the sqlite3 way below
    return _fetch_text(conn, [e if e.lstrip("-").isdigit() else _int(e) for e in exprs], rest, names)


def _fetch_text(conn: sqlite3.Connection, exprs: list[str], rest: str, names: list[str]) -> dict[str, np.ndarray]:
    """``_fetch`` through Python's sqlite3: each column comes back as one ``group_concat`` text
    parsed by numpy, 3-5x fewer Python objects than row tuples. group_concat skips NULLs,
    which is why every expression is made an integer first (one NULL would shift a column)."""
    if " where " in f" {rest} ":
        # A filtered scan costs more than the text it yields: one scan, whole rows as text.
        row = " || ',' || ".join(f"({e})" for e in exprs)
        text = conn.execute(f"select group_concat({row}) from {rest}").fetchone()[0]
        flat = np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, dtype=np.int64)
        table = flat.reshape(-1, len(exprs))
        return {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(names)}
    out: dict[str, np.ndarray] = {}
    for name, expr in zip(names, exprs):
        if expr.lstrip("-").isdigit():  # a constant: no need to ask SQLite for it per row
            out[name] = None  # filled below, once the row count is known
            continue
        text = conn.execute(f"select group_concat(v) from (select {expr} as v from {rest} order by rowid)").fetchone()[0]
        out[name] = np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, dtype=np.int64)
    n = next((len(v) for v in out.values() if v is not None), None)
    if n is None:
        n = conn.execute(f"select count(*) from {rest}").fetchone()[0]
    for name, expr in zip(names, exprs):
        if out[name] is None:
            out[name] = np.full(n, int(expr), dtype=np.int64)
    return out


# Nothing in a trace lasts a day: an op or call that does is a corrupt row.
MAX_DURATION_NS = 86_400 * 10**9


def _keep_valid(c: dict[str, np.ndarray], required: tuple[str, ...], what: str, path: str, warnings: list[str] | None) -> dict[str, np.ndarray]:
    """Rows of ``c`` (columns from ``_fetch``) with every ``required`` value present, device and
    stream ids not negative (CUPTI's are unsigned: the analysis reads a negative one as none, and
    the op's phase as having no GPU time) and, where it has ``start``/``end``,
    ``0 <= end - start <= MAX_DURATION_NS``. Dropped rows are counted in one warning: numbers
    never change without a word."""
    n = len(next(iter(c.values()))) if c else 0
    ok = np.ones(n, dtype=bool)
    for k in required:
        ok &= (c[k] != NULL_SENTINEL) & ((c[k] >= 0) if k in ("dev", "stream") else True)
    if "start" in c and "end" in c:
        dur = c["end"] - c["start"]
        ok &= (dur >= 0) & (dur <= MAX_DURATION_NS)
    if ok.all():
        return c
    if warnings is not None:
        warnings.append(f"{path}: dropped {int((~ok).sum())} {what} row(s) with missing or impossible values (NULL, text, a negative device or stream id, end before start, longer than a day)")
    return {k: v[ok] for k, v in c.items()}


def _nullable(values: np.ndarray) -> pa.Array:
    return pa.array(values, mask=values == NULL_SENTINEL, type=pa.int64())


@dataclass(frozen=True)
class StringTable:
    """StringIds as an Arrow string array plus an id -> position map."""

    values: pa.Array
    ids: np.ndarray  # the id of each value, sorted and unique (memory follows the row count, not the ids' size)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``values`` of each id; -1 where the id is unknown."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(self.ids)
        if n == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        if self.ids[-1] - self.ids[0] == n - 1:
            # Sorted, unique and without gaps (nsys numbers its strings 0, 1, 2, ...): an id's
            # position is its distance from the first (a fifth of a binary search's time).
            pos = ids - self.ids[0]
            return np.where((pos >= 0) & (pos < n), pos, -1)
        pos = np.minimum(np.searchsorted(self.ids, ids), n - 1)
        return np.where(self.ids[pos] == ids, pos, -1)

    def take(self, ids: np.ndarray) -> pa.Array:
        """Resolve string ids (NULL_SENTINEL / unknown -> null) to an Arrow string array."""
        pos = self.positions(ids)
        mask = pos < 0
        pos[mask] = 0
        if len(self.values) == 0:
            return pa.nulls(len(ids), pa.string())
        return self.values.take(pa.array(pos, mask=mask))


    def dictionary(self, ids: np.ndarray) -> pa.DictionaryArray:
        """Resolve many string ids at once as a dictionary array (no per-row strings)."""
        return self.dictionary_and_unknown(ids)[0]

    def dictionary_and_unknown(self, ids: np.ndarray, pos: np.ndarray | None = None) -> tuple[pa.DictionaryArray, int]:
        """``dictionary`` and how many of ``ids`` the table lacks (NULL_SENTINEL or unknown):
        those read as empty text, as a NULL in StringIds does ("" once in the dictionary; no
        per-row strings are made, however long the names). ``pos``: their ``positions``, where
        known already."""
        pos = self.positions(ids) if pos is None else pos
        unknown = pos < 0
        n_unknown = int(unknown.sum())
        if len(self.values) == 0:
            return pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(pos), dtype=np.int32)), pa.array([""], pa.string())), n_unknown
        used, codes = self._used(pos, unknown if n_unknown else None)
        if used.null_count or n_unknown:
            # Arrow cannot merge dictionaries holding nulls: a NULL and an unknown id are "",
            # "" once in the dictionary.
            texts = pa.concat_arrays([pc.fill_null(used, ""), pa.array([""], pa.string())])
            return _deduplicated(texts, np.where(unknown, len(used), codes)), n_unknown
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), used), n_unknown

    def dictionary_or_null(self, ids: np.ndarray, pos: np.ndarray | None = None) -> tuple[pa.DictionaryArray, int]:
        """``ids`` as a dictionary array, null where the table lacks the id or holds NULL for
        it, and how many such there are (NULL_SENTINEL, the id of a column not read, is one).
        ``pos``: their ``positions``, where known already."""
        pos = self.positions(ids) if pos is None else pos
        if len(self.values) == 0:
            return pa.DictionaryArray.from_arrays(pa.nulls(len(pos), pa.int32()), pa.array([], pa.string())), len(pos)
        unknown = pos < 0
        if self.values.null_count:
            unknown |= np.asarray(self.values.is_null().take(pa.array(np.maximum(pos, 0))), dtype=bool)
        n_unknown = int(unknown.sum())
        used, codes = self._used(pos, unknown if n_unknown else None)
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=unknown if n_unknown else None), used), n_unknown

    def _used(self, pos: np.ndarray, unknown: np.ndarray | None) -> tuple[pa.Array, np.ndarray]:
        """The strings at ``pos`` (but where ``unknown``, if given), each once, in table order,
        and each row's index into them (0 where unknown). Keeps only the strings used: StringIds
        may hold 100k NVTX texts, a column needs a few (what np.unique(pos, return_inverse=True)
        gives, in one pass instead of a sort)."""
        known = pos if unknown is None else np.where(unknown, 0, pos)
        present = np.zeros(len(self.values), dtype=bool)
        present[known if unknown is None else known[~unknown]] = True
        code_of = (np.cumsum(present, dtype=np.int64) - 1).astype(np.int32)
        codes = code_of[known]
        if unknown is not None:
            codes[unknown] = 0
        return self.values.take(pa.array(np.flatnonzero(present))), codes


def read_strings(conn: sqlite3.Connection, tables: frozenset[str]) -> StringTable:
    empty = StringTable(pa.array([], pa.string()), np.zeros(0, dtype=np.int64))
    if "StringIds" not in tables:
        return empty
    ids, values = string_rows(conn, tables)
    if not ids:
        return empty
    ids, values = np.array(ids, dtype=np.int64), pa.array(values, pa.string())
    return StringTable(values, ids)


def _enum(conn: sqlite3.Connection, tables: frozenset[str], table: str, fallback: dict[int, str], column: str = "label") -> dict[int, str]:
    if table not in tables:
        return dict(fallback)
    cols = _columns(conn, table)
    col = column if column in cols else ("name" if "name" in cols else None)
    if col is None:
        return dict(fallback)
    out = dict(fallback)
    out.update({int(k): str(v) for k, v in conn.execute(f"select id, {col} from {table}")})
    return out


def _strip_memcpy_label(label: str) -> str:
    # "Host-to-Device" -> "HtoD" style, keeping short labels as they are.
    m = re.fullmatch(r"(\w)\w*-to-(\w)\w*", label)
    if m:
        return f"{m.group(1).upper()}to{m.group(2).upper()}"
    return label


NVTX_KINDS = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTXT_MARK, NVTXT_PUSH_POP, NVTXT_START_END, NVTX_DOMAIN_CREATE)
# Kinds that name something (a category, a thread, a process or file (NVTXT), a domain's end, a
# CUDA device, context or stream): nothing to time, so not read and not worth a word. Any other
# kind (a push or a pop written as rows of their own, a kind of a newer nsys) is counted in a
# warning: it may hold ranges that are then not phases.
NVTX_NAMING_KINDS = (33, 39, 64, 72, 73, 74, 76, 97, 98, 99)
NVTX_COLUMNS = ["start", "end", "etype", "gtid", "end_gtid", "text_id", "domain", "payload"]
# What an NVTX start or end read as text or a blob is read as (told from NULL_SENTINEL, a NULL).
TEXT_SENTINEL = NULL_SENTINEL + 1
# The words of each warning that NVTX rows were dropped (``pipeline`` looks for them where no
# range is left).
NVTX_ROWS_DROPPED = "NVTX row(s) with"


@dataclass(frozen=True)
class NvtxRows:
    """The NVTX events ``parse_nvtx`` turns into ranges and marks, as columns in start order,
    ties in rowid order whatever indexes the table has (a real-valued start, which nsys never
    writes, counts by its whole part): the integers of ``NVTX_COLUMNS`` (NULL_SENTINEL where
    NULL, text or a blob) and each event's own text (null where it has none, or it is not text)."""

    ints: dict[str, np.ndarray]
    text: pa.Array


def fetch_nvtx_rows(conn: sqlite3.Connection, info: ExportInfo) -> NvtxRows:
    """The NVTX events, fetched on their own so that they can be read while other tables are:
    the integers as any bulk read (``_fetch``), the texts as one string column."""
    if not info.has_nvtx:
        return NvtxRows({k: np.zeros(0, np.int64) for k in NVTX_COLUMNS}, pa.array([], pa.string()))
    cols = _columns(conn, "NVTX_EVENTS")
    payload = "coalesce({}, {}, {}, {})".format(_col(cols, "int64Value"), _col(cols, "uint64Value"), _col(cols, "int32Value"), _col(cols, "uint32Value"))
    rest = f"NVTX_EVENTS where eventType in ({','.join(map(str, NVTX_KINDS))})"
    # A text or blob where a time belongs is told apart from NULL (an end NULL: a range never
    # closed, kept; text: a damaged row, dropped and said as such).
    times = [f"case when typeof({c}) in ('text', 'blob') then {TEXT_SENTINEL} else {c} end" for c in ("start", "end")]
    exprs = [*times, "eventType", "globalTid", _col(cols, "endGlobalTid"), _col(cols, "textId"), _col(cols, "domainId", "0"), payload, "rowid"]
    ints = _fetch(conn, f"select {', '.join(exprs)} from {rest}", NVTX_COLUMNS + ["rowid"])
    text = _fetch_texts(conn, f"select case when typeof(text) = 'text' then text end from {rest} order by rowid")
    # The texts come in rowid order; the integers too when read natively, but through sqlite3 in
    # whatever order its plan gives (an index on eventType gives another): put them in rowid
    # order first, then in start order (ties in rowid order, as SQL's "order by start" of a scan).
    rowid = ints.pop("rowid")
    by_rowid = np.argsort(rowid, kind="stable")
    if len(text) != len(rowid) or (len(rowid) > 1 and not (np.diff(rowid[by_rowid]) > 0).all()):
        raise BadTraceError(f"{info.path}: the NVTX table changed while it was read")
    order = by_rowid[np.argsort(ints["start"][by_rowid], kind="stable")]
    return NvtxRows({k: v[order] for k, v in ints.items()}, text.take(pa.array(np.argsort(by_rowid)[order])))


def _fetch_texts(conn: sqlite3.Connection, sql: str) -> pa.Array:
    """One text column as an Arrow string array (nulls kept): natively where the reader can,
    else through sqlite3 (text that is not UTF-8 decoded with replacement characters either way)."""
    uri = getattr(conn, "bulk_uri", None)
    if uri is not None and native_reads():
        from tracerecon.nsys import native_read

        try:
            return native_read.fetch_strings(uri, sql)
        except native_read.NativeReadError:
            pass
    return pa.array([r[0] for r in conn.execute(sql)], pa.string())


@dataclass(frozen=True)
class NvtxEvents:
    """An export's NVTX ranges (push/pop, start/end, NVTXT) and marks with domain names
    resolved (``parse_nvtx``), but for where the ranges never closed end: at the trace end,
    known once every table is read. ``tables`` makes them."""

    range_columns: dict[str, pa.Array]  # the NVTX_RANGES_RAW columns but end_ns
    range_start: np.ndarray
    range_end: np.ndarray  # NULL_SENTINEL for a range never closed
    marks: pa.Table
    warnings: tuple[str, ...]

    def tables(self, trace_end: int) -> tuple[pa.Table, pa.Table, list[str]]:
        """(ranges, marks, warnings); a range never closed runs to ``trace_end`` (or to the
        last start, if that is later)."""
        closed = self.range_end != NULL_SENTINEL
        last = max(trace_end, int(self.range_start.max()) if len(self.range_start) else 0)
        columns = dict(self.range_columns, end_ns=pa.array(np.where(closed, self.range_end, last)))
        ranges = pa.table({name: columns[name] for name in schema.NVTX_RANGES_RAW.names}, schema=schema.NVTX_RANGES_RAW)
        return ranges, self.marks, list(self.warnings)


def _no_nvtx(warnings: list[str]) -> NvtxEvents:
    empty = schema.empty(schema.NVTX_RANGES_RAW)
    return NvtxEvents({name: empty[name] for name in empty.column_names if name != "end_ns"}, np.zeros(0, np.int64),
                      np.zeros(0, np.int64), schema.empty(schema.NVTX_MARKS), tuple(warnings))


def read_nvtx(conn: sqlite3.Connection, info: ExportInfo, strings: StringTable) -> NvtxEvents:
    """``fetch_nvtx_rows`` and ``parse_nvtx``: all of the NVTX reading that does not need the
    trace end, done while the larger tables are still being read."""
    rows = fetch_nvtx_rows(conn, info)
    if info.has_nvtx:
        rows = _ended_by_the_capture(conn, info, rows)
    events = parse_nvtx(rows, info, strings)
    if info.has_nvtx:
        events = replace(events, warnings=events.warnings + tuple(_nvtx_rows_not_read(conn, info)))
    return events


# nsys's own note in an export whose capture an NVTX range stopped (``-c nvtx``, the range's end
# stopping it): that range ended at the capture's end itself.
NVTX_TRIGGER_STOP_NOTE = "Stopping the profiling session using NVTX trigger"


def _ended_by_the_capture(conn: sqlite3.Connection, info: ExportInfo, rows: NvtxRows) -> NvtxRows:
    """``rows`` with each range that ends at the very nanosecond the capture ended
    (``ANALYSIS_DETAILS.duration``, on the events' timeline) read as never closed, in exports of
    nsys 2022 and older: nsys 2022.4 ends a range still open when the capture stopped (an
    ``nvtxRangeStart`` the engine never ended, a push never popped) there, where later versions
    leave its end NULL. Not where an NVTX range stopped the capture (``-c nvtx`` with its default
    end: nsys notes it), whose own end is there too."""
    end = rows.ints.get("end")
    if "ANALYSIS_DETAILS" not in info.tables or end is None or not len(end) or not before_2023(info.nsys_version):
        return rows
    try:
        ends = [r[0] for r in conn.execute("select duration from ANALYSIS_DETAILS") if isinstance(r[0], int)]
        if len(ends) != 1 or ends[0] <= 0 or not (end == ends[0]).any():
            return rows
        if "StringIds" in info.tables and conn.execute("select 1 from StringIds where value like ? limit 1", (NVTX_TRIGGER_STOP_NOTE + "%",)).fetchone():
            return rows
    except sqlite3.Error:  # (a damaged or foreign table: no capture end, nothing read as open)
        return rows
    return replace(rows, ints={**rows.ints, "end": np.where(end == ends[0], NULL_SENTINEL, end)})


def _nvtx_rows_not_read(conn: sqlite3.Connection, info: ExportInfo) -> list[str]:
    """A line for the NVTX rows the read leaves out (it selects the kinds it knows) that may
    hold ranges: those whose kind is not a whole number (NULL, text, a real: another tool's
    writer), and those of a kind neither read nor one that only names something."""
    known = ",".join(map(str, NVTX_KINDS + NVTX_NAMING_KINDS))
    rows = conn.execute(f"select case when typeof(eventType) = 'integer' then eventType end as kind, count(*) from NVTX_EVENTS "
                        f"where kind is null or kind not in ({known}) group by kind order by kind").fetchall()
    untyped = sum(n for kind, n in rows if kind is None)
    other = [(int(kind), n) for kind, n in rows if kind is not None]
    lines = []
    if untyped:
        lines.append(f"{info.path}: dropped {untyped} NVTX row(s) whose event type is not a number")
    if other:
        names = _enum(conn, info.tables, "ENUM_NSYS_EVENT_TYPE", {}, column="name")
        kinds = ", ".join(f"{kind}" + (f" ({names[kind]})" if kind in names else "") + f": {n}" for kind, n in other)
        lines.append(f"{info.path}: skipped {sum(n for _, n in other)} NVTX row(s) of event types tracerecon does not read ({kinds}); "
                     "ranges among them are not read as phases or cycles")
    return lines


# The export schemas of nsys 2022.4 to 2026.2 are all 3.x; the sample and public traces span these.
KNOWN_SCHEMA_MAJOR = 3
TESTED_SCHEMAS = "3.1.7 to 3.25.0"


def _open_early(path, texts: pa.Array, gtid: np.ndarray, start: np.ndarray, idx: np.ndarray, closed: np.ndarray, push_pop: np.ndarray) -> list[str]:
    """A line for the first never-closed push/pop range (of ``idx``; ``push_pop`` per row of it)
    whose name a later range of its own thread takes again: that one began while it was still
    open, so it was never popped (an engine's missing ``range_pop``, which holds all that comes
    after it), where a capture that ended inside a range leaves open only ranges nothing of their
    name follows. nvtxRangeStart/End ranges overlap by design and are not looked at."""
    suspects = np.flatnonzero(~closed & push_pop)
    if len(suspects) == 0:
        return []
    # Per (thread, name): the latest start; an open range that starts before it is followed.
    code = pc.fill_null(pc.dictionary_encode(texts.take(pa.array(idx))).indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    thread, begins = gtid[idx], start[idx]
    order = np.lexsort((begins, code, thread))  # by thread, name, then start: each group's last is its latest
    last_of_group = np.r_[(thread[order][1:] != thread[order][:-1]) | (code[order][1:] != code[order][:-1]), True]
    latest = np.empty(len(idx), dtype=np.int64)
    latest[order] = begins[order][np.flatnonzero(last_of_group)][np.cumsum(np.r_[0, last_of_group[:-1]])]
    followed = suspects[(code[suspects] >= 0) & (latest[suspects] > begins[suspects])]
    if len(followed) == 0:
        return []
    k = followed[np.argmin(begins[followed])]
    r = idx[k]
    later = int(((thread == gtid[r]) & (begins > start[r])).sum())
    name = texts[r].as_py() or ""
    return [f"{path}: the range {name!r} (thread {tid_of(np.array([gtid[r]]))[0]}) opened at {start[r]} ns is never closed, and "
            f"{later} range(s) of its thread begin after it, inside it: a push without its pop? Phases and cycles after it are read as parts of it"]


def parse_nvtx(rows: NvtxRows, info: ExportInfo, strings: StringTable) -> NvtxEvents:
    """The columns of ``fetch_nvtx_rows`` as ranges and marks (``NvtxEvents``): rows with no
    start or thread, ending before they start, lasting over a day, or written twice are dropped
    and counted in a warning."""
    warnings: list[str] = []
    if not info.has_nvtx:
        return _no_nvtx(warnings)
    c = rows.ints
    start, end, etype, gtid = c["start"], c["end"], c["etype"], c["gtid"]
    # A row with no start or thread, or a closed range that ends before it starts, is dropped.
    # (end - start read as unsigned: where end >= start it is the true difference, even past 2**63.)
    instant = np.isin(etype, [NVTX_DOMAIN_CREATE, NVTX_MARK, NVTXT_MARK])
    span_ok = (end >= start) & ((end - start).view(np.uint64) <= MAX_DURATION_NS)
    texty = (start == TEXT_SENTINEL) | (end == TEXT_SENTINEL)
    good = (start != NULL_SENTINEL) & (gtid != NULL_SENTINEL) & ((end == NULL_SENTINEL) | instant | span_ok) & ~texty
    if texty.any():
        warnings.append(f"{info.path}: dropped {int(texty.sum())} {NVTX_ROWS_DROPPED} text where a start or end time belongs")
    if (~good & ~texty).any():
        warnings.append(f"{info.path}: dropped {int((~good & ~texty).sum())} {NVTX_ROWS_DROPPED} no start or thread, ending before they start, or lasting over a day")
    if not good.all():
        keep = np.flatnonzero(good)
        c = {k: v[keep] for k, v in c.items()}
        text = rows.text.take(pa.array(keep))
    else:
        text = rows.text
    if len(c["start"]) == 0:
        return _no_nvtx(warnings)
    start, end, etype, gtid, end_gtid, dom, payload = (c[k] for k in ("start", "end", "etype", "gtid", "end_gtid", "domain", "payload"))
    # An event's own text, else the registered string its text id names.
    texts = pc.coalesce(text, strings.take(c["text_id"])) if text.null_count else text
    pid = pid_of(gtid)

    # Domain names are per process: (pid, domainId) -> name, from the domain-create events (the
    # last one of a pair wins); an unnamed domain is "domainN", the default one "".
    creates = np.flatnonzero(etype == NVTX_DOMAIN_CREATE)
    named = dict(zip(zip(pid[creates].tolist(), dom[creates].tolist()), (t or "" for t in texts.take(pa.array(creates)).to_pylist())))
    pairs, pair_of = np.unique(np.stack([pid, dom], axis=1), axis=0, return_inverse=True)
    pair_names = pa.array([named.get((p, d), "" if d == 0 else f"domain{d}") for p, d in pairs.tolist()], pa.string())
    pair_of = pair_of.ravel()

    is_range = np.isin(etype, [NVTX_PUSH_POP, NVTX_START_END, NVTXT_PUSH_POP, NVTXT_START_END])
    # The same range twice (same thread, times, kind, text and domain) is one range written
    # twice: in start order, all but the first of each such group are dropped. (One range in
    # each of two domains, as a library marking its own domain beside the engine's, is two.)
    ri = np.flatnonzero(is_range)
    if len(ri) > 1:
        codes = pc.dictionary_encode(texts.take(pa.array(ri))).indices
        code = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        keys = (code, etype[ri], end[ri], start[ri], gtid[ri], dom[ri])
        order = np.lexsort(keys)  # stable: each group's rows in start order
        same = np.ones(len(ri), dtype=bool)
        same[0] = False
        for k in keys:
            ks = k[order]
            same[1:] &= ks[1:] == ks[:-1]
        dup = np.zeros(len(etype), dtype=bool)
        dup[ri[order[same]]] = True
        if dup.any():
            warnings.append(f"{info.path}: dropped {int(dup.sum())} duplicated NVTX range row(s)")
            is_range &= ~dup
    # Ranges that start and end on different threads are kept, but projected like nsys does:
    # only same-thread ranges get GPU work (see analysis.projection).
    idx = np.flatnonzero(is_range)
    closed = end[idx] != NULL_SENTINEL
    unnamed = texts.take(pa.array(idx)).null_count
    if unnamed:
        # Read as '', they match no phase: a phase that lost its name would vanish unsaid.
        warnings.append(f"{info.path}: {unnamed} NVTX range(s) have no name (no text, or a text id the string table lacks); they can be no phase")
    if (~closed).any():
        warnings.append(f"{info.path}: {int((~closed).sum())} NVTX range(s) never closed; they run to the trace end")
    style = np.where(np.isin(etype[idx], [NVTX_PUSH_POP, NVTXT_PUSH_POP]), "push_pop", "start_end")
    if (~closed).any():
        warnings.extend(_open_early(info.path, texts, gtid, start, idx, closed, style == "push_pop"))
    cross_thread = (end_gtid[idx] != NULL_SENTINEL) & (end_gtid[idx] != gtid[idx])
    style = np.where(cross_thread, "start_end_cross_thread", style)

    def names(at: np.ndarray) -> pa.Array:
        return pc.fill_null(texts.take(pa.array(at)), "")

    range_columns = {
        "pid": pa.array(pid[idx]),
        "tid": pa.array(tid_of(gtid[idx])),
        "global_tid": pa.array(gtid[idx]),
        "domain": pair_names.take(pa.array(pair_of[idx])),
        "name": names(idx),
        "start_ns": pa.array(start[idx]),
        "closed": pa.array(closed),
        "style": pa.array(style.tolist(), pa.string()),
        "payload": _nullable(payload[idx]),
    }
    midx = np.flatnonzero(np.isin(etype, [NVTX_MARK, NVTXT_MARK]))
    marks = pa.table(
        {
            "pid": pa.array(pid[midx]),
            "tid": pa.array(tid_of(gtid[midx])),
            "domain": pair_names.take(pa.array(pair_of[midx])),
            "name": names(midx),
            "ts_ns": pa.array(start[midx]),
            "payload": _nullable(payload[midx]),
        },
        schema=schema.NVTX_MARKS,
    )
    return NvtxEvents(range_columns, start[idx], end[idx], marks, tuple(warnings))


def read_api_calls(conn: sqlite3.Connection, info: ExportInfo, strings: StringTable, only_relevant: bool = False, warnings: list[str] | None = None) -> pa.Table:
    """CUDA runtime and driver API calls (one table in every nsys export).

    ``only_relevant``: just the calls whose name matches ``read_plan.RELEVANT_API``.
    """
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in info.tables:
        return schema.empty(schema.API_CALLS)
    name_ids = relevant_name_ids(strings.ids.tolist(), strings.values.to_pylist()) if only_relevant else None
    c = _fetch(conn, api_calls_sql(name_ids), API_CALLS_COLUMNS)
    c = _keep_valid(c, ("start", "end", "gtid"), "CUDA API", info.path, warnings)
    return pa.table(
        {
            "pid": pid_of(c["gtid"]),
            "tid": tid_of(c["gtid"]),
            "global_pid": process_key(c["gtid"]),
            "start_ns": c["start"],
            "end_ns": c["end"],
            "correlation_id": _nullable(c["corr"]),
            "name": strings.dictionary(c["name"]),
        },
        schema=schema.API_CALLS,
    )


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string()))


def _labelled(codes: np.ndarray, label: Callable[[int], str]) -> pa.DictionaryArray:
    """Each integer code's ``label``, asked once per distinct code (a trace's copies and graph
    launches run to hundreds of thousands, their kinds and graphs to a few); the dictionary in
    order of first appearance, as encoding the labels row by row would give it."""
    distinct, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return _deduplicated(pa.array([label(k) for k in distinct[order].tolist()], pa.string()), rank[inverse.ravel()])


def _ops_table(kind: str, c: dict[str, np.ndarray], names: pa.Array, copy_kind: pa.Array | None = None,
               demangled: pa.Array | None = None) -> pa.Table:
    n = len(c["start"])
    gpid = c["gpid"]
    return pa.table(
        {
            "pid": pid_of(gpid),
            "global_pid": gpid,
            "kind": _constant(kind, n),
            "start_ns": c["start"],
            "end_ns": c["end"],
            "device_id": c["dev"],
            "stream_id": c["stream"],
            "correlation_id": _nullable(c["corr"]),
            "name": names,
            "graph_node_id": _nullable(c["node"]),
            "bytes": _nullable(c["bytes"]) if "bytes" in c else pa.nulls(n, pa.int64()),
            "copy_kind": copy_kind if copy_kind is not None else pa.nulls(n, schema.DSTR),
            "demangled_name": demangled if demangled is not None else pa.nulls(n, schema.DSTR),
        },
        schema=schema.GPU_OPS_RAW,
    )


def read_gpu_ops(conn: sqlite3.Connection, info: ExportInfo, strings: StringTable, warnings: list[str] | None = None) -> pa.Table:
    """Kernels, memcpys, memsets and (graph trace mode) whole CUDA-graph launches."""
    parts = []
    names = OPS_COLUMNS + ["bytes", "extra"]

    if "CUPTI_ACTIVITY_KIND_KERNEL" in info.tables:
        cols = _columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
        c = _fetch(conn, kernels_sql(cols), KERNEL_COLUMNS)
        c = _keep_valid(c, ("start", "end", "dev", "stream"), "kernel", info.path, warnings)
        if warnings is not None and len(c["start"]) and (c["end"] == c["start"]).all():
            # (numbers that are the data's, but not a GPU's: said, as a fuzzing review found them unsaid)
            warnings.append(f"{info.path}: all {len(c['start'])} kernels last 0 ns (start = end): the export's GPU times look unrecorded; "
                            "GPU busy time reads as none")
        full_pos, short_pos = strings.positions(c["full"]), strings.positions(c["name"])
        full_names, no_full = strings.dictionary_or_null(c["full"], full_pos)
        # A kernel whose short name id the strings lack is shown by the function its demangled
        # name names, as nsys's short name would show it (collectives are matched by name).
        lost = short_pos < 0
        if no_full:
            lost &= ~np.asarray(full_names.is_null())
        kernel_names, unnamed = strings.dictionary_and_unknown(c["name"], np.where(lost, full_pos, short_pos) if lost.any() else short_pos)
        if lost.any():
            kernel_names = _renamed(kernel_names, lost, kernel_function)
        if warnings is not None and unnamed:
            # Read as '', they match no kernel rule: NCCL's would stop being communication unsaid.
            warnings.append(f"{info.path}: {unnamed} kernel(s) have no name (a name id the string table lacks); "
                            "communication (NCCL) kernels among them are not counted as such")
        if warnings is not None and "demangledName" in cols and no_full > unnamed:
            warnings.append(f"{info.path}: {no_full - unnamed} kernel(s) have no demangled name (a name id the string table lacks, or NULL); "
                            "kernels known as communication only by their namespaces (DeepEP's) among them are not counted as such")
        parts.append(_ops_table("kernel", c, kernel_names, demangled=full_names))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in info.tables:
        cols = _columns(conn, "CUPTI_ACTIVITY_KIND_MEMCPY")
        gpid_sql = f"coalesce({_col(cols, 'globalPid', '0')}, 0)"
        kinds = _enum(conn, info.tables, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS, column="name")
        c = _fetch(
            conn,
            f"select start, end, deviceId, streamId, coalesce(correlationId, {NULL_SENTINEL}), {gpid_sql}, 0, "
            f"coalesce({_col(cols, 'graphNodeId')}, {NULL_SENTINEL}), bytes, copyKind from CUPTI_ACTIVITY_KIND_MEMCPY",
            names,
        )
        c = _keep_valid(c, ("start", "end", "dev", "stream"), "memcpy", info.path, warnings)
        labels = {k: _memcpy_short(v) for k, v in kinds.items()}
        short = _labelled(c["extra"], lambda k: labels.get(k, str(k)))
        parts.append(_ops_table("memcpy", c, _labelled(c["extra"], lambda k: f"memcpy {labels.get(k, str(k))}"), short))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in info.tables:
        cols = _columns(conn, "CUPTI_ACTIVITY_KIND_MEMSET")
        gpid_sql = f"coalesce({_col(cols, 'globalPid', '0')}, 0)"
        c = _fetch(
            conn,
            f"select start, end, deviceId, streamId, coalesce(correlationId, {NULL_SENTINEL}), {gpid_sql}, 0, "
            f"coalesce({_col(cols, 'graphNodeId')}, {NULL_SENTINEL}), bytes, 0 from CUPTI_ACTIVITY_KIND_MEMSET",
            names,
        )
        c = _keep_valid(c, ("start", "end", "dev", "stream"), "memset", info.path, warnings)
        n = len(c["start"])
        parts.append(_ops_table("memset", c, _constant("memset", n)))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in info.tables:
        gpid_sql = f"coalesce({_col(_columns(conn, 'CUPTI_ACTIVITY_KIND_GRAPH_TRACE'), 'globalPid', '0')}, 0)"
        c = _fetch(
            conn,
            f"select start, end, deviceId, streamId, coalesce(correlationId, {NULL_SENTINEL}), {gpid_sql}, graphId, "
            f"{NULL_SENTINEL}, {NULL_SENTINEL}, 0 from CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
            names,
        )
        c = _keep_valid(c, ("start", "end", "dev", "stream"), "graph launch", info.path, warnings)
        parts.append(_ops_table("graph", c, _labelled(c["name"], lambda g: f"cudaGraph {g}")))
    if not parts:
        return schema.empty(schema.GPU_OPS_RAW)
    return _concat_column_by_column(parts, schema.GPU_OPS_RAW)


def _renamed(names: pa.DictionaryArray, rows: np.ndarray, rename) -> pa.DictionaryArray:
    """``names`` with the values the ``rows`` mask points at passed through ``rename`` (a
    renamed value may equal another)."""
    codes = names.indices.to_numpy(zero_copy_only=False)
    values = names.dictionary.to_pylist()
    for code in np.unique(codes[rows]):
        values[code] = rename(values[code])
    return _deduplicated(pa.array(values, pa.string()), codes)


def _deduplicated(texts: pa.Array, codes: np.ndarray) -> pa.DictionaryArray:
    """The column whose rows are ``texts[codes]``, each distinct text once in its dictionary
    (``texts``: the few strings a column uses, not a row each)."""
    again = pc.dictionary_encode(texts)
    remap = again.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(remap[codes], pa.int32()), again.dictionary)


def _concat_column_by_column(parts: list[pa.Table], out_schema: pa.Schema) -> pa.Table:
    """``pa.concat_tables(parts).combine_chunks()``, one column at a time, each part's column
    released once copied: the peak is the parts plus one column, not twice the table."""
    names = parts[0].column_names
    out = {}
    for name in names:
        # Table.combine_chunks unifies dictionaries in bulk (ChunkedArray.combine_chunks of a
        # dictionary column took 44 s for 1.7M kernel names).
        out[name] = pa.concat_tables([p.select([name]) for p in parts]).combine_chunks().column(0)
        parts = [p.drop_columns([name]) for p in parts]
    return pa.table(out, schema=out_schema)


def _memcpy_short(label: str) -> str:
    # ENUM_CUDA_MEMCPY_OPER names look like CUPTI_ACTIVITY_MEMCPY_KIND_DTOH.
    m = re.search(r"MEMCPY_KIND_(\w+)$", label)
    if m:
        s = m.group(1)
        return s.replace("TO", "to") if "TO" in s else s.title()
    return _strip_memcpy_label(label)


def read_sync_records(conn: sqlite3.Connection, info: ExportInfo, warnings: list[str] | None = None) -> pa.Table:
    """CUPTI synchronization records: blocking syncs and ``cudaStreamWaitEvent`` (with the
    event id and the event's record number, which say which ``cudaEventRecord`` it waits for)."""
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" not in info.tables:
        return schema.empty(schema.SYNC_RECORDS)
    types = _enum(conn, info.tables, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)
    cols = _columns(conn, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    c = _fetch(
        conn,
        f"select start, end, deviceId, streamId, coalesce(correlationId, {NULL_SENTINEL}), "
        f"coalesce({_col(cols, 'globalPid', '0')}, 0), "
        f"{_col(cols, 'syncType', 'coalesce(deprecatedSyncType, 0)')}, "
        f"coalesce({_col(cols, 'eventId')}, {NULL_SENTINEL}), coalesce({_col(cols, 'eventSyncId')}, {NULL_SENTINEL}) "
        "from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        ["start", "end", "dev", "stream", "corr", "gpid", "type", "event", "event_sync"],
    )
    c = _keep_valid(c, ("start", "end"), "synchronization", info.path, warnings)
    return pa.table(
        {
            "pid": pid_of(c["gpid"]),
            "start_ns": c["start"],
            "end_ns": c["end"],
            "device_id": c["dev"],
            "stream_id": _nullable(_no_event(c["stream"])),  # an event or context sync names no stream
            "correlation_id": _nullable(c["corr"]),
            "sync_type": _labels_of(c["type"], types),
            "event_id": _nullable(_no_event(c["event"])),
            "event_sync_id": _nullable(_no_event(c["event_sync"])),
        },
        schema=schema.SYNC_RECORDS,
    )


def _labels_of(codes: np.ndarray, labels: dict[int, str]) -> pa.Array:
    """Each code's label (the code as text where unlabelled), one lookup per distinct code."""
    distinct, inverse = np.unique(codes, return_inverse=True)
    names = pa.array([labels.get(k, str(k)) for k in distinct.tolist()], pa.string())
    return names.take(pa.array(inverse.ravel())) if len(codes) else pa.array([], pa.string())


def _no_event(values: np.ndarray) -> np.ndarray:
    # CUPTI writes 0xFFFFFFFF where a record concerns no event (stream / context syncs), and
    # for the stream of one that concerns no stream (event / context syncs).
    return np.where(values == 0xFFFFFFFF, NULL_SENTINEL, values)


def read_event_records(conn: sqlite3.Connection, info: ExportInfo) -> pa.Table:
    """``cudaEventRecord`` calls (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``, nsys 2023+): the stream an
    event was recorded on, and the record number that a later stream wait names."""
    if "CUPTI_ACTIVITY_KIND_CUDA_EVENT" not in info.tables:
        return schema.empty(schema.EVENT_RECORDS)
    cols = _columns(conn, "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
    if not {"streamId", "eventId", "correlationId"} <= set(cols):
        return schema.empty(schema.EVENT_RECORDS)
    c = _fetch(
        conn,
        f"select coalesce({_col(cols, 'globalPid', '0')}, 0), coalesce(deviceId, 0), streamId, coalesce(correlationId, {NULL_SENTINEL}), "
        f"eventId, coalesce({_col(cols, 'eventSyncId')}, {NULL_SENTINEL}) from CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        ["gpid", "dev", "stream", "corr", "event", "event_sync"],
    )
    return pa.table(
        {
            "pid": pid_of(c["gpid"]),
            "global_pid": c["gpid"],
            "device_id": c["dev"],
            "stream_id": c["stream"],
            "correlation_id": _nullable(c["corr"]),
            "event_id": c["event"],
            "event_sync_id": _nullable(c["event_sync"]),
        },
        schema=schema.EVENT_RECORDS,
    )


def _int_or_null(expr: str) -> str:
    """SQL: ``expr`` as an integer (a real truncated), NULL where it is text, a blob or NULL."""
    return f"(case typeof({expr}) when 'integer' then {expr} when 'real' then cast({expr} as integer) else NULL end)"


def _text_or_null(expr: str) -> str:
    """SQL: ``expr`` where it is text, NULL otherwise (a number or a blob in a text column)."""
    return f"(case typeof({expr}) when 'text' then {expr} else NULL end)"


def read_processes(conn: sqlite3.Connection, info: ExportInfo) -> pa.Table:
    if "PROCESSES" not in info.tables:
        return schema.empty(schema.PROCESSES)
    # Metadata as typed or NULL: another tool's writer may have put text in a number column.
    rows = conn.execute(f"select coalesce({_int_or_null('globalPid')}, 0), {_int_or_null('pid')}, {_text_or_null('name')} from PROCESSES").fetchall()
    return pa.table(
        {
            "pid": pa.array([int(r[1]) if r[1] is not None else int(pid_of(np.int64(r[0]))) for r in rows], pa.int64()),
            "global_pid": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[2] for r in rows], pa.string()),
        },
        schema=schema.PROCESSES,
    )


def _read_gpus(conn: sqlite3.Connection) -> tuple[tuple[GpuIdentity, ...], frozenset[str]]:
    """The GPUs TARGET_INFO_GPU lists, by device id, a row listed twice kept once (an id listed
    with two UUIDs, virtual machines of one host, is kept with both: the export does not say
    which one a GPU op ran on); rows without a whole-number id are left out (no GPU op can name
    them). A name, UUID or bus location that is blank is None. Second: every UUID it lists."""
    cols = _columns(conn, "TARGET_INFO_GPU")
    rows = conn.execute(
        f"select {_int_or_null(_col(cols, 'id'))}, {_text_or_null(_col(cols, 'name'))}, {_text_or_null(_col(cols, 'uuid'))}, "
        f"{_text_or_null(_col(cols, 'busLocation'))} from TARGET_INFO_GPU order by rowid"
    ).fetchall()
    gpus = dict.fromkeys(GpuIdentity(int(device), name, uuid, bus) for device, name, uuid, bus in rows if device is not None)
    return tuple(sorted(gpus, key=lambda g: g.device)), frozenset(uuid for _, _, uuid, _ in rows if recorded(uuid))


def _read_cuda_devices(conn: sqlite3.Connection) -> tuple[tuple[int, int, int], ...]:
    """TARGET_INFO_CUDA_DEVICE's (pid, cudaId, gpuId) rows with three whole numbers, each once."""
    cols = _columns(conn, "TARGET_INFO_CUDA_DEVICE")
    if not {"pid", "cudaId", "gpuId"} <= set(cols):
        return ()
    rows = conn.execute(f"select {_int_or_null('pid')}, {_int_or_null('cudaId')}, {_int_or_null('gpuId')} from TARGET_INFO_CUDA_DEVICE order by rowid").fetchall()
    return tuple(dict.fromkeys((int(p), int(c), int(g)) for p, c, g in rows if None not in (p, c, g)))


def _bounds(tables: list[pa.Table], cols: list[tuple[str, str]]) -> tuple[int, int]:
    lo, hi = None, None
    for t, (s, e) in zip(tables, cols):
        if t.num_rows == 0:
            continue
        mn = pc.min(t[s]).as_py()
        mx = pc.max(t[e]).as_py()
        lo = mn if lo is None else min(lo, mn)
        hi = mx if hi is None else max(hi, mx)
    return (lo or 0, hi or 0)


def check_export(path: str | os.PathLike) -> ExportInfo | None:
    """Raise BadTraceError unless ``path`` opens as an nsys SQLite export (cheap: no table is
    read; an ``.xz`` file is only checked for its compression header). Returns what the export
    says of itself (None for an ``.xz`` file)."""
    p = Path(path)
    if p.name.endswith(XZ_SUFFIX):
        if not p.is_file():
            raise BadTraceError(f"{p}: {why_missing(p) if not p.exists() else 'not a file'}")
        with open(p, "rb") as fh:
            if fh.read(len(XZ_MAGIC)) != XZ_MAGIC:
                raise BadTraceError(f"{p}: not an .xz file")
        return None
    conn = open_readonly(p)
    try:
        return read_info(conn, str(p))
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{p}: corrupt or truncated export ({exc})") from None
    finally:
        conn.close()


def read_all_api_calls(path: str | os.PathLike) -> pa.Table:
    """Every runtime/driver API call of an export (the fallback when the filtered read missed some)."""
    with materialized(path) as real:
        return _read_all_api_calls(real, path)


def _read_all_api_calls(real: Path, path: str | os.PathLike) -> pa.Table:
    conn = open_readonly(real, path)
    try:
        info = read_info(conn, str(path))
        return read_api_calls(conn, info, read_strings(conn, info.tables))
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{path}: corrupt or truncated export ({exc})") from None
    finally:
        conn.close()


def _fill_missing_process(ops: pa.Table, syncs: pa.Table, api: pa.Table, path: str) -> tuple[pa.Table, pa.Table, str | None]:
    """Hand-made or very old exports lack globalPid on GPU rows. With one process in the trace
    it is that one; with several the rows stay unattributed (and we say so)."""
    if ops.num_rows == 0 or pc.min(ops["global_pid"]).as_py() != 0:
        return ops, syncs, None
    procs = pc.unique(api["global_pid"]).to_pylist() if api.num_rows else []
    if len(procs) != 1:
        return ops, syncs, f"{path}: GPU activity carries no process id and the trace has {len(procs)} processes: it cannot be attributed"
    gp = np.int64(procs[0])

    def fill(t: pa.Table) -> pa.Table:
        if t.num_rows == 0 or "global_pid" not in t.column_names and "pid" not in t.column_names:
            return t
        if "global_pid" in t.column_names:
            t = t.set_column(t.schema.get_field_index("global_pid"), "global_pid", pa.array(np.full(t.num_rows, gp)))
        return t.set_column(t.schema.get_field_index("pid"), "pid", pa.array(np.full(t.num_rows, pid_of(gp))))

    return fill(ops), fill(syncs), None


def _on_own_connection(real: Path, path: str | os.PathLike, read: Callable, *args, **kwargs):
    """``read(connection, *args, **kwargs)`` on a read-only connection of its own (a sqlite3
    connection serves one thread), closed afterwards; SQLite's errors as BadTraceError."""
    conn = open_readonly(real, path)
    try:
        return read(conn, *args, **kwargs)
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{path}: corrupt or truncated export ({exc})") from None
    finally:
        conn.close()


def read_cuda_streams(conn: sqlite3.Connection, info: ExportInfo) -> pa.Table:
    """TARGET_INFO_CUDA_STREAM: (pid, stream id, creation flag) per stream (schema.CUDA_STREAMS);
    empty where the export lacks the table or its columns."""
    if "TARGET_INFO_CUDA_STREAM" not in info.tables:
        return schema.empty(schema.CUDA_STREAMS)
    cols = _columns(conn, "TARGET_INFO_CUDA_STREAM")
    if not {"streamId", "processId", "flag"} <= set(cols):
        return schema.empty(schema.CUDA_STREAMS)
    rows = conn.execute(f"select {_int_or_null('processId')}, {_int_or_null('streamId')}, {_int_or_null('flag')} from TARGET_INFO_CUDA_STREAM").fetchall()
    rows = [r for r in rows if None not in r]
    return pa.table({k: [r[i] for r in rows] for i, k in enumerate(schema.CUDA_STREAMS.names)}, schema=schema.CUDA_STREAMS)


def _read_small_tables(conn: sqlite3.Connection, info: ExportInfo, warnings: list[str]) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """Sync and event records, processes and streams: the tables that are small next to the
    kernels and API calls, read one after another."""
    syncs = read_sync_records(conn, info, warnings=warnings)
    events = read_event_records(conn, info)
    procs = read_processes(conn, info)
    return syncs, events, procs, read_cuda_streams(conn, info)


def read_export(path: str | os.PathLike, progress: Progress | None = None) -> TraceTables:
    """Read one nsys SQLite export. Raises BadTraceError for anything that is not one.

    ``api_calls`` holds only calls that can launch or wait for GPU work (see ``read_plan.RELEVANT_API``).
    An ``.xz``-compressed export is read from a decompressed copy in the temporary directory.
    """
    with materialized(path) as real:
        return _read_export(real, path, progress)


def _read_export(real: Path, path: str | os.PathLike, progress: Progress | None) -> TraceTables:
    say = progress or (lambda _msg: None)
    conn = open_readonly(real, path)
    try:
        try:
            info = read_info(conn, str(path))
            strings = read_strings(conn, info.tables)
            nvtx_span = None
            if info.has_nvtx:
                # Integer times only (min and max skip the NULLs the guard makes of text and blobs).
                # (An end more than a day after its start is a corrupt row, dropped by parse_nvtx.)
                nvtx_span = conn.execute(
                    f"select min(s), max(case when e - s between 0 and {MAX_DURATION_NS} then e else s end) from "
                    f"(select nullif({_int('start')}, {NULL_SENTINEL}) as s, nullif({_int('coalesce(end, start)')}, {NULL_SENTINEL}) as e from NVTX_EVENTS)"
                ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise BadTraceError(f"{path}: corrupt or truncated export ({exc})") from None
    finally:
        conn.close()
    say("CUDA activity and NVTX")
    # The tables are read at once, each on a connection of its own: the native reads release
    # the GIL, so one table's Python work overlaps another's read (on 2 cores the reads kept
    # 1.4 cores busy one table after another). Warnings keep the order of a sequential read.
    dropped_api: list[str] = []
    dropped_ops: list[str] = []
    dropped_syncs: list[str] = []
    # Ctrl-C leaves without waiting for the reads (``thread_pool``).
    with thread_pool(4) as pool:
        api_f = pool.submit(_on_own_connection, real, path, read_api_calls, info, strings, only_relevant=True, warnings=dropped_api)
        ops_f = pool.submit(_on_own_connection, real, path, read_gpu_ops, info, strings, warnings=dropped_ops)
        nvtx_f = pool.submit(_on_own_connection, real, path, read_nvtx, info, strings)
        rest_f = pool.submit(_on_own_connection, real, path, _read_small_tables, info, dropped_syncs)
        api, ops, nvtx, (syncs, events, procs, streams) = (f.result() for f in (api_f, ops_f, nvtx_f, rest_f))
    dropped = dropped_api + dropped_ops + dropped_syncs
    t0, t1 = _bounds([api, ops], [("start_ns", "end_ns"), ("start_ns", "end_ns")])
    if nvtx_span and nvtx_span[0] is not None:
        t0 = min(t0, nvtx_span[0]) if t0 else nvtx_span[0]
    if nvtx_span and nvtx_span[1] is not None:
        t1 = max(t1, nvtx_span[1])
    ranges, marks, nvtx_warn = nvtx.tables(t1)
    warnings = list(info.warnings) + dropped + nvtx_warn
    ops, syncs, fill_warning = _fill_missing_process(ops, syncs, api, str(path))
    if fill_warning:
        warnings.append(fill_warning)
    return TraceTables(
        info=info,
        nvtx_ranges=ranges,
        nvtx_marks=marks,
        api_calls=api,
        strings=strings,
        gpu_ops=ops,
        sync_records=syncs,
        event_records=events,
        processes=procs,
        trace_start_ns=int(t0),
        trace_end_ns=int(t1),
        warnings=tuple(warnings),
        cuda_streams=streams,
    )
