"""The parquet export: per-rank datasets (hive-partitioned) and the manifest, written and read back."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerecon import __version__, schema
from tracerecon.analysis.cross_rank import GATING_HOWS, CrossRank, RankAlignment, RankComm
from tracerecon.schema import COLLECTIVES, CRITICAL_PATH
from tracerecon.analysis.config import PhaseConfig
from tracerecon.analysis.ranks import RankSource
from tracerecon.errors import BadTraceError, TraceReconError
from tracerecon.model import Analysis, RankResult
from tracerecon.report_model import CAUSES, VERDICTS
from tracerecon.nsys.gpu_identity import GpuIdentity
from tracerecon.nsys.read_plan import trace_under
from tracerecon.nsys.sqlite_export import ExportInfo
from tracerecon.cores import usable_cores
from tracerecon.json_text import json_text, one_line, parse_json
from tracerecon.run_dir import EXPORT_DATASETS, EXPORT_PART, MANIFEST_JSON, is_export_dir, read_json_file, refuse_linked_folder, refuse_output_over_inputs

TABLES = tuple(t for t in EXPORT_DATASETS if t != "critical_path")  # per rank; critical_path is one table of the run
# The export's layout (its folders, tables' columns, manifest keys), raised when a reader of an
# older export could read a newer one wrong; a manifest without one is of layout 1.
LAYOUT_VERSION = 1


def manifest(analysis: Analysis) -> dict:
    """What ``manifest.json`` says: inputs, versions, the phase definition, and per rank its
    mapping, alignment, communication totals and engine timers: everything ``report`` shows
    that the tables do not hold, so that an export reads back as the same report."""
    cross = analysis.cross
    ranks = []
    for r in analysis.ranks:
        al = cross.alignment_of(r.rank) if cross else None
        cm = cross.comm_of(r.rank) if cross else None
        ranks.append({
            "rank": r.rank,
            "source": r.source.path,
            "pids": list(r.source.pids),
            "tid": r.source.tid,
            "rank_from": r.source.how,
            "nsys_version": r.info.nsys_version,
            "export_schema_version": r.info.schema_version,
            "graph_trace_mode": r.info.graph_trace_mode,
            "session_start_utc_ns": r.info.session_start_utc_ns,
            "time_normalized": r.info.time_normalized,
            "offset_ns": al.offset_ns if al else 0,
            "offset_uncertainty_ns": al.offset_uncertainty_ns if al else 0,
            "alignment": al.method if al else "shared clock",
            "nccl": {"comm_ns": cm.comm_ns if cm else 0, "wait_ns": cm.wait_ns if cm else 0, "n_collectives": cm.n_collectives if cm else 0},
            "engine_timers_ms": analysis.engine_timers.get(r.rank, {}),
            "gpus": [g.to_json() for g in r.gpus],
            # (pid, its CUDA device, the machine's GPU) where a process numbered its GPUs otherwise
            # than the machine (CUDA_VISIBLE_DEVICES): what maps the tables' device_id read back
            "cuda_devices": [list(m) for m in r.info.cuda_devices if m[0] in r.source.pids and m[1] != m[2]],
        })
    return {
        "layout_version": LAYOUT_VERSION,
        "tracerecon_version": __version__,
        "inputs": list(analysis.inputs),
        "phases": list(analysis.config.phases),
        "cycle_prefix": analysis.config.cycle_prefix,
        "phase_thread": analysis.config.phase_thread,
        "skip_cycles": analysis.config.skip_cycles,
        "ranks": ranks,
        # (but what happened to the load that made it: a worker process that died)
        "warnings": [w for w in analysis.warnings if w not in analysis.load_notices],
    }


def export_parquet(analysis: Analysis, out_dir: str | os.PathLike, force: bool = False) -> dict:
    """Write ``DIR/<table>/rank=<R>/part-0.parquet`` for every table and rank, and ``DIR/manifest.json``.

    The ``rank`` column lives in the directory name (hive partitioning), so pandas, polars,
    DuckDB and pyarrow datasets all read it back as a column. Timestamps are the trace's own
    int64 ns. Returns the manifest written.

    DIR is replaced whole, never mixed: everything is written into a temporary sibling that is
    then renamed to DIR (a previous export there is moved aside and removed; of two concurrent
    exports the last rename wins, whole). A DIR that holds anything but a tracerecon export is
    refused unless ``force``. A failed export leaves DIR as it was. DIR keeps the mode of the
    folder it replaces, else gets what a plain mkdir gives (0o777 less the umask).
    """
    out = Path(out_dir)
    refuse_output_over_inputs(out, analysis.inputs)
    refuse_linked_folder(out)
    if out.exists() and not out.is_dir():
        raise TraceReconError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not is_export_dir(out):
        # A folder holding a trace (the inputs' own, another run's) is never replaced, --force or not.
        lost = trace_under(out)
        if lost is not None:
            raise TraceReconError(f"{out}: holds {lost}, which replacing it would lose; choose another -o (or remove it first)")
        if not force:
            raise TraceReconError(f"{out}: not empty and not a tracerecon export; choose another -o, or --force to replace it")
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # (a file or a device where a folder above it goes)
        above = next((p for p in out.parents if os.path.lexists(p) and not p.is_dir()), None)  # (a broken link too)
        raise TraceReconError(f"{out}: cannot write export ({f'{above} is not a directory' if above else exc.strerror or exc})") from None
    except OSError as exc:
        raise TraceReconError(f"{out}: cannot write export ({exc.strerror or exc})") from None
    try:
        tmp = _new_folder_beside(out)
        doc = _write_export(analysis, tmp)
        _swap_in(tmp, out)
        tmp = None
    except OSError as exc:
        raise TraceReconError(f"{out}: cannot write export ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return doc


def _new_folder_beside(out: Path) -> Path:
    """A new hidden folder beside ``out`` to write the export into, with the mode DIR is to have:
    that of the folder already at ``out`` (an empty one the user made, a previous export), else
    what a plain mkdir gives (0o777 less the umask; ``tempfile.mkdtemp``'s 0o700 would keep
    the export from the user's group whatever their umask)."""
    while True:
        tmp = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            break
        except FileExistsError:
            continue
    try:
        os.chmod(tmp, stat.S_IMODE(os.stat(out).st_mode))
    except FileNotFoundError:
        pass  # no folder there: the mode mkdir gave
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _swap_in(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``, moving whatever is at ``out`` aside first (atomic per rename)."""
    for _ in range(20):
        try:
            os.rename(tmp, out)
            return
        except OSError:
            if not out.exists():
                raise
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        try:
            os.rename(out, aside / "x")
        except FileNotFoundError:
            pass  # another writer moved it first
        shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"could not replace {out}: other writers kept replacing it")


def _write_export(analysis: Analysis, out: Path) -> dict:
    counts: dict[str, dict[str, int]] = {t: {} for t in TABLES}
    files: list[tuple[pa.Table, Path]] = []
    for r in analysis.ranks:
        for name in TABLES:
            if name == "collectives":
                table = analysis.cross.collectives.filter(pc.equal(analysis.cross.collectives["rank"], r.rank))
            else:
                table = getattr(r, name)
            if "rank" in table.column_names:
                table = table.drop_columns(["rank"])
            d = out / name / f"rank={r.rank}"
            d.mkdir(parents=True, exist_ok=True)
            files.append((table, d / EXPORT_PART))
            counts[name][str(r.rank)] = table.num_rows
    (out / "critical_path").mkdir(exist_ok=True)
    files.append((analysis.cross.critical_path, out / "critical_path" / EXPORT_PART))
    # Arrow encodes and compresses with the GIL released: the files are written at once
    # (gpu_ops is most of the bytes; the small tables go beside it).
    with ThreadPoolExecutor(max(1, min(len(files), usable_cores()))) as pool:
        for done in [pool.submit(_write_parquet, table, path) for table, path in files]:
            done.result()
    doc = manifest(analysis)
    doc["tables"] = {name: {"path": name, "rows_per_rank": counts[name]} for name in TABLES}
    doc["tables"]["critical_path"] = {"path": "critical_path", "rows": analysis.cross.critical_path.num_rows}
    (out / MANIFEST_JSON).write_text(json_text(doc) + "\n")
    return doc


def _write_parquet(table: pa.Table, path: Path) -> None:
    """One parquet file, snappy-compressed (what every parquet reader reads). Integer columns
    (timestamps, ids: mostly ascending) are delta-encoded and only string columns
    dictionary-encoded. On the 76 MB trace's GPU ops (2 cores): 0.095 s into 3.7 MB, against
    0.15 s and 3.3 MB with zstd, and 0.14 s and 11.4 MB snappy without delta encoding.
    pandas, polars, DuckDB and pyarrow all read the encoding (a contract test reads it back in
    each)."""
    integer = [f.name for f in table.schema if pa.types.is_integer(f.type)]
    strings = [f.name for f in table.schema if not pa.types.is_integer(f.type)]
    # No Arrow schema in the file: its text columns read as plain strings everywhere (with it,
    # the GPU ops' names, dictionaries in memory, were polars Categoricals, on which .str and
    # joins with other tables' names fail, and pandas categories). The pages stay
    # dictionary-encoded; tracerecon's reader casts back to ``schema``.
    options = dict(compression="snappy", use_dictionary=strings or False, column_encoding={name: "DELTA_BINARY_PACKED" for name in integer} or None,
                   store_schema=False)
    native = _arrow_path(path)
    if native is not None:
        pq.write_table(table, native, **options)
        return
    sink = pa.BufferOutputStream()  # (in memory, then written by Python: see _arrow_path)
    pq.write_table(table, sink, **options)
    with open(path, "wb") as fh:
        fh.write(memoryview(sink.getvalue()))


def _arrow_path(path: str | os.PathLike) -> str | None:
    """``path`` as Arrow opens it, or None where its name holds bytes that are not UTF-8 (Arrow
    takes UTF-8 paths only: an internal error). Such a file is read and written as bytes in
    memory by Python; never through a Python file object, which Arrow's I/O threads may still
    call after the read returned (a process ended at once after an error was aborted:
    "terminate called without an active exception")."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


# Columns a table gained after its first release, where null says what an export written before
# them meant: no accepted tokens said; a kernel known by its short name alone; a cycle not
# checked for being whole, or for being empty (counted, as that tracerecon counted it).
LATER_COLUMNS = {"cycles": ("accepted_tokens", "incomplete", "empty"), "gpu_ops": ("demangled_name",)}


def _read_dataset_part(f: Path, name: str, sch: pa.Schema, rank: int | None = None) -> pa.Table:
    """One parquet file of an export as the table ``sch`` (its ``rank`` column from ``rank``;
    ``LATER_COLUMNS`` it lacks, written by an older tracerecon, as nulls). Raises BadTraceError
    naming the file when it is no parquet or not that table (a KeyError here is a missing
    column, not a missing manifest key)."""
    try:
        native = _arrow_path(f)
        t = pq.read_table(native if native is not None else pa.BufferReader(Path(f).read_bytes()))
        if "rank" in sch.names:
            t = t.append_column("rank", pa.array([rank] * t.num_rows, pa.int32()))
        for column in LATER_COLUMNS.get(name, ()):
            if column not in t.column_names:
                t = t.append_column(column, pa.nulls(t.num_rows, sch.field(column).type))
        return t.select(sch.names).cast(sch)
    except KeyError as exc:  # pyarrow's select: 'Field "cycle" does not exist in schema'
        raise BadTraceError(f"{f}: not the {name} table of a tracerecon export ({exc.args[0]})") from None
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise BadTraceError(f"{f}: not the {name} table of a tracerecon export ({exc})") from None
    except OSError as exc:
        raise BadTraceError(f"{f}: cannot read it ({exc.strerror or exc})") from None


# The one column of an export that may hold values below zero: a CPU timer's error against the
# GPU time (negative: the timer under-reports).
SIGNED_COLUMNS = frozenset({"error_ns"})


# Numbers tracerecon writes from 0 up, or as null where there is none (a phase in no cycle).
NUMBERED_FROM_0 = frozenset({"cycle"})


def _is_amount(field: pa.Field) -> bool:
    """A duration (a ``*_ns`` column other than a time), a count (``n_*``), or a number from 0 (``NUMBERED_FROM_0``)."""
    name = field.name
    return pa.types.is_integer(field.type) and (name.startswith("n_") or name in NUMBERED_FROM_0
                                                or name.endswith("_ns") and not name.endswith(("start_ns", "end_ns")))


# The columns tracerecon writes as null together, where there is nothing to give
# (``analysis.phases``): a phase that ran no GPU op has no GPU start, end or span; one (or a
# cycle) with no GPU time, no boundaries, gpu_ns or CPU error (phases' GPU sum). Every other
# amount is written (an amount of nothing is 0).
NULL_TOGETHER = {
    "phases": (("gpu_start_ns", "gpu_end_ns", "gpu_span_ns"), ("gpu_boundary_start_ns", "gpu_boundary_end_ns", "gpu_ns", "error_ns")),
    "cycles": (("gpu_boundary_start_ns", "gpu_boundary_end_ns", "gpu_ns", "phases_gpu_ns"),),
}
NULL_WHERE_NONE = {name: frozenset(c for group in groups for c in group) for name, groups in NULL_TOGETHER.items()}


def _never_null(name: str, field: pa.Field) -> bool:
    """Whether table ``name``'s ``field`` is an amount tracerecon always writes (a cycle number
    is null where there is none)."""
    return _is_amount(field) and field.name not in NUMBERED_FROM_0 and field.name not in NULL_WHERE_NONE.get(name, ())


def values_never_written(f: Path, t: pa.Table) -> list[str]:
    """One warning per column of ``t`` (a table of a tracerecon export, read from ``f``) that holds
    values tracerecon never writes: a duration (a ``*_ns`` column other than a time), a count
    (``n_*``) or a cycle number below zero, an ``*end_ns`` before its ``*start_ns``. Such a file was changed after it
    was written: its numbers are read as they are, and said to be so (never silently)."""
    out = []
    for field in t.schema:
        name = field.name
        if not pa.types.is_integer(field.type) or name in SIGNED_COLUMNS:
            continue
        if _is_amount(field):
            bad = pc.sum(pc.less(t[name], 0)).as_py()
            if bad:
                out.append(f"{f}: {bad} row(s) of {name} below zero, which tracerecon never writes (the file was changed since): read as they are")
        elif name.endswith("start_ns") and name[:-len("start_ns")] + "end_ns" in t.column_names:
            end = name[:-len("start_ns")] + "end_ns"
            bad = pc.sum(pc.less(t[end], t[name])).as_py()
            if bad:
                out.append(f"{f}: {bad} row(s) with {end} before {name}, which tracerecon never writes (the file was changed since): read as they are")
    return out


SCHEMAS = {"ranges": schema.RANGES, "phases": schema.PHASES, "cycles": schema.CYCLES, "gpu_ops": schema.GPU_OPS, "syncs": schema.SYNCS, "collectives": COLLECTIVES}


def _checked_manifest(doc, root: Path) -> dict:
    """``manifest.json`` as read, if its parts have the types tracerecon writes (an edited one
    read silently wrong: no rank at all, its warnings as one string read letter by letter)."""
    def bad(what: str) -> BadTraceError:
        return BadTraceError(f"{root}: not a readable tracerecon export (its manifest.json {what}){newer}")

    newer = ""
    if not isinstance(doc, dict):
        raise bad("is no JSON object")
    layout = doc.get("layout_version", 1)
    if not (_is_of(layout, ("", int)) and layout >= 1):
        raise bad("has 'layout_version' other than a whole number from 1")
    if layout > LAYOUT_VERSION:  # (what this reader cannot read may be what the newer layout changed)
        newer = f"; it is of {_newer_layout(doc)}: upgrade tracerecon to read it"
    ranks = doc.get("ranks")
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, dict) for r in ranks):
        raise bad("lists no rank")
    numbers = [r.get("rank") for r in ranks]
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31 for n in numbers) or len(set(numbers)) != len(numbers):
        raise bad("numbers its ranks other than once each, by whole numbers from 0 (below 2**31)")
    for key in ("warnings", "phases", "inputs"):
        if key in doc and not (isinstance(doc[key], list) and all(isinstance(x, str) for x in doc[key])):
            raise bad(f"has {key!r} other than a list of texts")
    for key, kinds in _MANIFEST_VALUES.items():
        if key in doc and not _is_of(doc[key], kinds):
            raise bad(f"has {key!r} other than {kinds[0]}")
    for r in ranks:
        for key, kinds in _RANK_VALUES.items():
            if key in r and not _is_of(r[key], kinds):
                raise bad(f"gives rank {r['rank']} a {key!r} other than {kinds[0]}")
        nccl = r.get("nccl")
        if not (isinstance(nccl, dict) and all(_is_of(nccl.get(k), ("a whole number", int)) for k in ("comm_ns", "wait_ns", "n_collectives"))):
            raise bad(f"gives rank {r['rank']} no 'nccl' totals (comm_ns, wait_ns, n_collectives as whole numbers)")
        timers = r.get("engine_timers_ms")
        if timers is not None and not (isinstance(timers, dict) and all(_is_of(v, ("a number", int, float)) for v in timers.values())):
            raise bad(f"gives rank {r['rank']} 'engine_timers_ms' other than phase names with numbers")
        gpus = r.get("gpus", [])
        if not (isinstance(gpus, list) and all(_is_gpu(g) for g in gpus)):
            raise bad(f"gives rank {r['rank']} 'gpus' other than a list of GPUs (a whole-number device, texts or null for the rest)")
        maps = r.get("cuda_devices", [])
        if not (isinstance(maps, list) and all(isinstance(m, list) and len(m) == 3 and all(_is_of(v, ("a whole number", int)) for v in m) for m in maps)):
            raise bad(f"gives rank {r['rank']} 'cuda_devices' other than a list of [pid, CUDA device, GPU] whole numbers")
    return doc


# What each value of a manifest (and of each of its ranks) may be, as tracerecon writes it: a
# description, then the Python types of its JSON (a number never a true/false).
_MANIFEST_VALUES = {"cycle_prefix": ("a text", str), "phase_thread": ("a text or a thread id", str, int),
                    "skip_cycles": ("a whole number or null", int, type(None))}
_RANK_VALUES = {
    "source": ("a text", str), "pids": ("a list of whole numbers", list), "tid": ("a whole number or null", int, type(None)), "rank_from": ("a text", str), "alignment": ("a text", str),
    "nsys_version": ("a text or null", str, type(None)), "export_schema_version": ("a text or null", str, type(None)),
    "graph_trace_mode": ("a text or null", str, type(None)), "session_start_utc_ns": ("a whole number or null", int, type(None)),
    "time_normalized": ("true or false", bool), "offset_ns": ("a whole number", int),
    "offset_uncertainty_ns": ("a whole number or null", int, type(None)),
}


def _newer_layout(doc: dict) -> str:
    """"export layout N by tracerecon V", as a manifest of a newer layout says (its number in
    full only where it is short)."""
    n, by = doc["layout_version"], doc.get("tracerecon_version")
    return f"export layout {n if n < 10**6 else 'past ' + str(LAYOUT_VERSION)} by tracerecon {one_line(by[:40]) if isinstance(by, str) else '?'}"


def _is_gpu(g) -> bool:
    """Whether a manifest's GPU is as tracerecon writes it (``GpuIdentity.to_json``)."""
    return (isinstance(g, dict) and _is_of(g.get("device"), ("a whole number", int))
            and all(isinstance(g.get(k), (str, type(None))) for k in ("name", "uuid", "bus_location"))
            and (g.get("cuda_device") is None or _is_of(g.get("cuda_device"), ("a whole number", int))))


def _is_of(value, kinds: tuple) -> bool:
    """Whether ``value`` is of one of the types ``kinds[1:]`` (true/false only where bool is
    asked for; a list's items whole numbers where it describes so)."""
    if isinstance(value, bool) and bool not in kinds[1:]:
        return False
    if not isinstance(value, kinds[1:]):
        return False
    return not isinstance(value, list) or all(isinstance(x, int) and not isinstance(x, bool) for x in value)


def _ranks_not_listed(root: Path, manifest: dict) -> list[str]:
    """A warning for the ranks whose parquet files are in the export but not in its manifest
    (left out: the manifest says what the export holds)."""
    listed = {r["rank"] for r in manifest["ranks"]}
    found = set()
    for name in SCHEMAS:
        for d in (root / name).glob("rank=*"):
            try:
                found.add(int(d.name.removeprefix("rank=")))
            except ValueError:
                continue
    extra = sorted(found - listed)
    if not extra:
        return []
    return [f"{root}: parquet files of rank{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} are there but manifest.json "
            "does not list them: left out"]


# Columns whose every value tracerecon writes once per rank: a row given twice (files joined by
# another tool) would count its cycle twice. (A phase's phase_id is its row number: checked whole.)
UNIQUE_COLUMNS = {"cycles": "cycle"}
# Text columns every command reads as one of a few words, never null (``report_model``).
CLOSED_TEXT = {("phases", "verdict"): VERDICTS, ("phases", "cause"): CAUSES, ("critical_path", "how"): GATING_HOWS}
REQUIRED_TEXT = {"phases": ("phase",), "gpu_ops": ("kind", "name"), "critical_path": ("waits_ns",)}
# Other columns tracerecon always fills: a cycle's number and whether it is a warm-up one.
ALWAYS_WRITTEN = {"cycles": ("cycle", "warmup")}
# Columns that name a phase of the rank by its phase_id (null: none).
PHASE_REFERENCES = {"gpu_ops": ("phase_id",), "syncs": ("phase_id", "waited_for_phase_id"), "collectives": ("phase_id",)}


def _refuse_unreadable(f: Path, name: str, t: pa.Table) -> None:
    """BadTraceError naming ``f`` where a value of ``t`` is none the commands can read: a verdict,
    cause or gating rule that is not one of tracerecon's words, a phase or kernel without a name,
    a null duration or count where tracerecon always writes one (``_never_null``), a cycle
    without its number or warm-up flag (``ALWAYS_WRITTEN``), a rank's
    waits that are no JSON object of numbers."""
    def bad(what: str) -> BadTraceError:
        return BadTraceError(f"{f}: not the {name} table of a tracerecon export ({what})")

    for (table, column), words in CLOSED_TEXT.items():
        if table == name and t.num_rows:
            strange = sorted((v for v in pc.unique(t[column]).to_pylist() if v not in words), key=str)
            if strange:
                raise bad(f"{column} {strange[0]!r} is none of {', '.join(words)}")
    for column in REQUIRED_TEXT.get(name, ()) + ALWAYS_WRITTEN.get(name, ()) + tuple(f.name for f in t.schema if _never_null(name, f)):
        if t[column].null_count:
            raise bad(f"{t[column].null_count} row(s) without {column}")
    for first, *rest in NULL_TOGETHER.get(name, ()):
        missing = t[first].is_null()
        for column in rest:
            differ = pc.sum(pc.not_equal(t[column].is_null(), missing)).as_py()
            if differ:
                raise bad(f"{differ} row(s) where one of {first} and {column} is null and the other is not (tracerecon writes them together)")
    if name == "critical_path":
        for text in t["waits_ns"].to_pylist():
            try:
                waits = parse_json(text)
            except ValueError:
                raise bad(f"waits_ns {text[:40]!r} is no JSON") from None
            if not isinstance(waits, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in waits.values()):
                raise bad(f"waits_ns {text[:40]!r} is no JSON object of whole numbers")


def _rows_written(manifest: dict, name: str, rank: int | None = None):
    """The rows the manifest says were written of table ``name`` (of ``rank``; the run's one
    table where None), or None where it does not say (an older or edited manifest)."""
    said = manifest.get("tables")
    said = said.get(name) if isinstance(said, dict) else None
    if not isinstance(said, dict):
        return None
    if rank is None:
        said = said.get("rows")
    else:
        said = said.get("rows_per_rank")
        said = said.get(str(rank)) if isinstance(said, dict) else None
    return said if isinstance(said, int) and not isinstance(said, bool) else None


def _checked_phase_ids(root: Path, rank: int, tables: dict[str, pa.Table]) -> tuple[dict[str, pa.Table], list[str]]:
    """The rank's ``tables`` as the commands can read them, and what was changed: they look
    phases up by ``phase_id``. BadTraceError unless the rank's phases are numbered by their rows
    (0, 1, ...); in the other tables, a phase id that names no phase of the rank (its phases file
    emptied or missing: said already) is read as no phase, with a warning per column."""
    n = tables["phases"].num_rows
    ids = tables["phases"]["phase_id"]
    if ids.null_count or ids.to_pylist() != list(range(n)):
        raise BadTraceError(f"{root / 'phases' / f'rank={rank}' / EXPORT_PART}: not the phases table of a tracerecon export (its phase_id is not its "
                            "row number, 0 to the last)")
    notes = []
    tables = dict(tables)
    for name, columns in PHASE_REFERENCES.items():
        t = tables[name]
        for column in columns:
            values = t[column]
            dangling = pc.or_(pc.less(values, 0), pc.greater_equal(values, n))
            count = pc.sum(dangling).as_py()
            if count:
                t = t.set_column(t.schema.get_field_index(column), column, pc.if_else(dangling, pa.scalar(None, values.type), values))
                notes.append(f"{root / name / f'rank={rank}' / EXPORT_PART}: {count} row(s) whose {column} names no phase of rank {rank} "
                             f"(it has {n}): read as in no phase")
        tables[name] = t
    return tables, notes


def _checked_cycle_numbers(root: Path, rank: int, tables: dict[str, pa.Table]) -> tuple[dict[str, pa.Table], list[str]]:
    """The rank's ``tables`` with each phase's cycle number from 0 up that names no cycle of the
    rank (a phases file changed since it was written) read as in no cycle, and one warning saying how
    many; the medians count a phase by its cycle's warm-up flag, so such a phase would be
    counted where tracerecon never counts it."""
    phases = tables["phases"]
    cycles = tables["cycles"]["cycle"].drop_null()
    # (a number below zero is said already, by values_never_written)
    dangling = pc.and_(pc.greater_equal(phases["cycle"], 0), pc.invert(pc.is_in(phases["cycle"], value_set=cycles))).fill_null(False)
    count = pc.sum(dangling).as_py() if phases.num_rows else 0
    if not count:
        return tables, []
    column = phases["cycle"]
    tables = dict(tables, phases=phases.set_column(phases.schema.get_field_index("cycle"), "cycle", pc.if_else(dangling, pa.scalar(None, column.type), column)))
    return tables, [f"{root / 'phases' / f'rank={rank}' / EXPORT_PART}: {count} row(s) whose cycle names no cycle of rank {rank} "
                    f"(it has {len(cycles)}), which tracerecon never writes (the file was changed since): read as in no cycle"]


def _part_notes(f: Path, name: str, t: pa.Table, said_rows) -> list[str]:
    """What a command should say of the part ``f`` as read (``t``): values tracerecon never
    writes, a row count other than the manifest's, a cycle given twice, other files
    beside it (not read). Raises BadTraceError where a value cannot be read at all."""
    _refuse_unreadable(f, name, t)
    notes = values_never_written(f, t)
    changed = "(the file was changed since): read as they are"
    if said_rows is not None and t.num_rows != said_rows:
        notes.append(f"{f}: {t.num_rows} row(s) where manifest.json says {said_rows} were written {changed}")
    column = UNIQUE_COLUMNS.get(name)
    if column and t.num_rows:
        values = t[column].drop_null()
        repeated = len(values) - len(pc.unique(values))
        if repeated:
            notes.append(f"{f}: {repeated} row(s) repeat the {column} of another, which tracerecon never writes {changed}")
    others = sorted(p.name for p in f.parent.iterdir() if p.name != f.name)
    if others:
        notes.append(f"{f.parent}: {', '.join(others)} beside {f.name}, which tracerecon does not write: not read")
    return notes


def read_parquet_export(path: str | os.PathLike) -> Analysis:
    """Load a directory written by ``export_parquet`` back into an Analysis (no trace needed)."""
    root = Path(path)
    try:
        manifest = _checked_manifest(read_json_file(root / MANIFEST_JSON), root)
        notes: list[str] = _ranks_not_listed(root, manifest)
        if manifest.get("layout_version", 1) > LAYOUT_VERSION:
            notes.append(f"{root}: written in {_newer_layout(manifest)}; this tracerecon reads layout {LAYOUT_VERSION}, "
                         "and reads what it knows of it (upgrade tracerecon to read it all)")
        ranks = []
        engine = {}
        comm = []
        alignment = []
        coll_parts = []
        for r in manifest["ranks"]:
            rank = int(r["rank"])
            tables = {}
            missing = []
            for name, sch in SCHEMAS.items():
                f = root / name / f"rank={rank}" / EXPORT_PART
                if not f.exists():
                    tables[name] = sch.empty_table()
                    missing.append((name, _rows_written(manifest, name, rank)))
                    continue
                tables[name] = _read_dataset_part(f, name, sch, rank)
                notes.extend(_part_notes(f, name, tables[name], _rows_written(manifest, name, rank)))
            if len(missing) == len(SCHEMAS):  # a rank listed with nothing of it there
                notes.append(f"{root}: manifest.json lists rank {rank}, but none of its tables are there: read as a rank with nothing in it")
            else:
                # An export writes every rank's part of every table, an empty one too: one that is
                # gone lost rows, unless the manifest says it had none.
                notes.extend(f"{root}: {name} of rank {rank} is missing ("
                             + (f"{said} row(s) written" if said is not None else "manifest.json does not say how many rows were written")
                             + "): read as empty" for name, said in missing if said != 0)
            tables, said = _checked_phase_ids(root, rank, tables)
            notes.extend(said)
            tables, said = _checked_cycle_numbers(root, rank, tables)
            notes.extend(said)
            info = ExportInfo(
                path=r["source"], nsys_version=r.get("nsys_version"), schema_version=r.get("export_schema_version"), metadata_table=None,
                tables=frozenset(), graph_trace_mode=r.get("graph_trace_mode"), session_start_utc_ns=r.get("session_start_utc_ns"),
                time_normalized=bool(r.get("time_normalized", False)),
                gpus=tuple(GpuIdentity(g["device"], g.get("name"), g.get("uuid"), g.get("bus_location")) for g in r.get("gpus", [])),
                cuda_devices=tuple(tuple(m) for m in r.get("cuda_devices", [])),
            )
            src = RankSource(rank, r["source"], tuple(r.get("pids", ())), r.get("rank_from", "export"), tid=r.get("tid"))
            ranks.append(RankResult(src, info, tables["ranges"], tables["gpu_ops"], tables["syncs"], tables["phases"], tables["cycles"]))
            alignment.append(RankAlignment(rank, int(r.get("offset_ns", 0)), r.get("offset_uncertainty_ns"), r.get("alignment", "export")))
            coll = tables["collectives"]
            coll_parts.append(coll)
            ph = tables["phases"]
            nccl = r["nccl"]  # the totals over every communication kernel, as analysed
            comm.append(RankComm(
                rank, int(nccl["comm_ns"]), int(nccl["wait_ns"]), int(nccl["n_collectives"]),
                ph["wait_ns"].to_numpy(zero_copy_only=False) if ph.num_rows else None,
            ))
            if r.get("engine_timers_ms"):
                engine[rank] = {str(k): float(v) for k, v in r["engine_timers_ms"].items()}
        cp_file = root / "critical_path" / EXPORT_PART
        if cp_file.exists():
            critical = _read_dataset_part(cp_file, "critical_path", CRITICAL_PATH)
            notes.extend(_part_notes(cp_file, "critical_path", critical, _rows_written(manifest, "critical_path")))
        else:
            critical = CRITICAL_PATH.empty_table()
            said = _rows_written(manifest, "critical_path")
            if said:
                notes.append(f"{root}: critical_path is missing ({said} row(s) written): read as empty")
        collectives = pa.concat_tables(coll_parts) if coll_parts else COLLECTIVES.empty_table()
        cross = CrossRank(tuple(alignment), tuple(comm), collectives, critical)
        config = PhaseConfig(tuple(manifest.get("phases", ())) or PhaseConfig().phases, manifest.get("cycle_prefix", "cycle"), manifest.get("phase_thread", "auto"), manifest.get("skip_cycles"))
        return Analysis(tuple(ranks), tuple(manifest.get("inputs", [])), config, tuple(manifest.get("warnings", [])) + tuple(notes), cross, engine)
    except KeyError as exc:
        raise BadTraceError(f"{root}: not a readable tracerecon export (its manifest.json lacks {exc.args[0]!r})") from None
    except (OSError, ValueError, TypeError, AttributeError, pa.ArrowException) as exc:  # (a manifest value of another type)
        raise BadTraceError(f"{root}: not a readable tracerecon export ({exc})") from None
