"""The files tracerecon itself reads and writes around traces: inputs and run directories.

- What counts as an input: an nsys ``.sqlite`` export (or ``.sqlite.xz``), a directory of them,
  a run directory (``run.json`` lists its exports in rank order), a parquet export directory.
- ``run.json``: what ``tracerecon run`` did (command, nsys, reports per rank, exit code), and
  under ``phase_options`` what a phase is for this run (``--phase`` / ``--preset``), which the
  analysing commands apply when given the run directory without ``--phase``.
- ``cpu_timers.rank<R>.jsonl``: the engine's own naive ``perf_counter`` phase timers.
- The rank of a file (``rank3``, ``r3``, ``_3`` in its name) and of a process (the
  ``tracerecon.rank=N`` NVTX mark that ``tracerecon.instrument`` emits).

A leaf module: it knows file names and formats, nothing of nsys's schema or of the analysis.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

from tracerecon.errors import BadTraceError, UsageError
from tracerecon.json_text import parse_json

RUN_JSON = "run.json"
PHASE_OPTIONS = "phase_options"  # run.json key: {"phases": [...], "cycle_prefix": ..., "presets": [...]}
PHASE_DEFINING = ("phases", "cycle_prefix")  # what must agree between run directories read together
MANIFEST_JSON = "manifest.json"
# What `tracerecon export` writes: these keys in its manifest, these dataset folders beside it.
EXPORT_MARKER_KEYS = ("tracerecon_version", "ranks", "tables")
EXPORT_DATASETS = ("ranges", "phases", "cycles", "gpu_ops", "syncs", "collectives", "critical_path")
EXPORT_PART = "part-0.parquet"
_EXPORT_RANK_DIR = re.compile(r"^rank=\d+$")
XZ_SUFFIX = ".xz"
CPU_TIMERS_PREFIX = "cpu_timers"  # the engine writes <prefix>.rank<R>.jsonl
CPU_TIMERS_ENV = "TRACERECON_CPU_TIMERS"

# The NVTX mark tracerecon.instrument emits at start; it names the rank of its process.
RANK_MARK_FORMAT = "tracerecon.rank={}"
_RANK_MARK = re.compile(r"^tracerecon\.rank=(\d+)$")
# The NVTX mark tracerecon.instrument.accepted emits: tokens a cycle accepted (payload: the cycle).
ACCEPTED_MARK_FORMAT = "tracerecon.accepted={}"
_ACCEPTED_MARK = re.compile(r"^tracerecon\.accepted=(\d{1,18})$")  # (more digits: no count of tokens, nor an int64)
# The NVTX mark tracerecon.instrument.phase emits on entering a phase, just before it records a
# CUDA event on the thread's current stream: the record's stream (CUPTI_ACTIVITY_KIND_CUDA_EVENT)
# is the stream the phase's boundary events go on.
STREAM_MARK = "tracerecon.stream"
STREAM_MARKS_ENV = "TRACERECON_STREAM_MARKS"  # "0": no mark, no event record
# Trailing rank number in a file name: rank3, r3, _3, -3 (the last number of the stem).
_RANK_IN_NAME = (re.compile(r"rank[_-]?(\d+)$", re.I), re.compile(r"(?:^|[_\-.])r(\d+)$", re.I), re.compile(r"[_\-.](\d+)$"))
# A trailing number this large is a pid or a job id, not a rank.
MAX_RANK_IN_NAME = 65535


def rank_of_mark(name: str | None) -> int | None:
    """``tracerecon.rank=3`` -> 3; anything else -> None."""
    m = _RANK_MARK.match(name or "")
    return int(m.group(1)) if m else None


def accepted_of_mark(name: str | None) -> int | None:
    """``tracerecon.accepted=3`` -> 3; anything else -> None."""
    m = _ACCEPTED_MARK.match(name or "")
    return int(m.group(1)) if m else None


def trace_stem(path: str | Path) -> str:
    """``rank3.sqlite.xz`` / ``rank3.sqlite`` -> ``rank3``."""
    name = Path(path).name
    for suffix in (XZ_SUFFIX, ".sqlite"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def rank_from_filename(stem: str) -> int | None:
    """``eagle_rank3`` -> 3, ``run_r1`` -> 1, ``trace_2`` -> 2, ``profile`` / ``host_483927`` -> None."""
    n = number_in_filename(stem)
    return n if n is not None and n <= MAX_RANK_IN_NAME else None


def number_in_filename(stem: str) -> int | None:
    """The number a file name ends in, as ``rank_from_filename`` finds it, however large
    (``host_483927`` -> 483927: a pid, which only the file's processes can tell)."""
    for pat in _RANK_IN_NAME:
        m = pat.search(stem)
        if m:
            return int(m.group(1))
    return None


def holds_manifest(path: str | Path) -> bool:
    """A directory holding ``manifest.json``: read as a ``tracerecon export`` (a broken one is
    refused naming what is wrong), not searched for ``.sqlite`` exports."""
    return _holds_file(Path(path), MANIFEST_JSON)


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened to read in binary, where it is a regular file. Anything else (a FIFO, a
    device, a folder) raises OSError unread: opening a FIFO to read waits for a writer, so a
    ``run.json`` or ``manifest.json`` made a FIFO hung the command (opened without waiting,
    then looked at)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    fh = open(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fh


def read_regular_text(path: str | Path, errors: str = "strict") -> str:
    """The UTF-8 text of the regular file ``path`` (``open_regular``)."""
    with open_regular(path) as fh:
        return fh.read().decode("utf-8", errors)


def read_json_file(path: str | Path):
    """``parse_json`` of ``read_regular_text(path)``: OSError or ValueError where it is none."""
    return parse_json(read_regular_text(path))


def is_export_dir(path: str | Path) -> bool:
    """A directory written by ``tracerecon export``, and nothing else: its ``manifest.json`` is a
    JSON object with the manifest's own keys (``EXPORT_MARKER_KEYS``), and it holds nothing but
    what an export writes (the manifest, ``EXPORT_DATASETS``, each holding ``rank=<R>/``
    folders of ``part-0.parquet``). Only such a directory is replaced by an export without
    ``--force``: a user's folder that merely holds a file named manifest.json is not."""
    folder = Path(path)
    try:
        doc = read_json_file(folder / MANIFEST_JSON)
        if not (isinstance(doc, dict) and all(k in doc for k in EXPORT_MARKER_KEYS)):
            return False
        return all(_export_entry(folder, entry) for entry in os.listdir(folder))
    except (OSError, ValueError):  # no manifest, not JSON, not readable: nothing tracerecon wrote
        return False


def _export_entry(folder: Path, name: str) -> bool:
    """Whether ``folder/name`` is something ``tracerecon export`` writes (a dataset is at most two
    levels deep: ``<table>/rank=<R>/part-0.parquet``, ``critical_path/part-0.parquet``)."""
    if name == MANIFEST_JSON:
        return (folder / name).is_file()
    if name not in EXPORT_DATASETS or not (folder / name).is_dir():
        return False
    for entry in os.listdir(folder / name):
        inner = folder / name / entry
        if entry == EXPORT_PART:
            ok = inner.is_file()
        else:
            ok = bool(_EXPORT_RANK_DIR.match(entry)) and inner.is_dir() and all(e == EXPORT_PART for e in os.listdir(inner))
        if not ok:
            return False
    return True


def export_phase_options(path: str | Path) -> dict | None:
    """What the ``tracerecon export`` directory ``path`` was analysed with: its manifest's
    ``phases``, ``cycle_prefix``, ``phase_thread`` and ``skip_cycles``; None when the manifest
    is no readable JSON object."""
    try:
        doc = read_json_file(Path(path) / MANIFEST_JSON)
    except (OSError, ValueError):
        return None
    return {k: doc.get(k) for k in ("phases", "cycle_prefix", "phase_thread", "skip_cycles")} if isinstance(doc, dict) else None


def export_ignores(path: str | Path, given: Sequence[str]) -> str | None:
    """The warning that the export directory ``path`` ignores the phase options ``given`` (their
    flags), naming what it was analysed with; None where none were given, or its manifest is
    unreadable (its load says what is wrong with it)."""
    opts = export_phase_options(path) if given else None
    if opts is None:
        return None
    skip = opts.get("skip_cycles")
    said = (f"phases {', '.join(map(str, opts.get('phases') or ()))}; cycle prefix {opts.get('cycle_prefix')!r}; "
            f"phase thread {opts.get('phase_thread')}; left out of the medians: {'the warm-up cycles' if skip is None else f'the first {skip} cycle(s)'}, and phase ranges in no cycle")
    return (f"{path}: {', '.join(given)} ignored: an export holds the analysis made when it was written ({said}); "
            "export the traces again with these options to apply them")


def is_run_dir(path: str | Path) -> bool:
    """A directory written by ``tracerecon run`` (it holds ``run.json``)."""
    return _holds_file(Path(path), RUN_JSON)


def _holds_file(folder: Path, name: str) -> bool:
    try:
        return (folder / name).is_file()
    except OSError:  # a folder that cannot be searched: said where its exports are listed (expand_inputs)
        return False


def unreadable_run_json(paths: Sequence[str | Path]) -> list[str]:
    """The run.json files among ``paths``' run directories that are not a JSON object (their recorded
    phase maps and rank order are then not used: ``folder_warnings`` says so)."""
    out = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and is_run_dir(p):
            try:
                ok = isinstance(read_json_file(p / RUN_JSON), dict)
            except (OSError, ValueError):
                ok = False
            if not ok:
                out.append(str(p / RUN_JSON))
    return out


def recorded_in(inputs: Sequence[str | Path]) -> str:
    """The run.json whose phases were used (the first run directory's: all agree)."""
    return next((str(Path(p) / RUN_JSON) for p in inputs if Path(p).is_dir() and is_run_dir(p)), RUN_JSON)


def _listed(folder: Path) -> list[Path]:
    """The exports ``run.json`` lists, in rank order, each as its ``.sqlite`` where that is
    there, else its ``.sqlite.xz`` (whether or not that is there); none without a run.json."""
    try:
        meta = read_json_file(folder / RUN_JSON)
        listed = [folder / Path(x["sqlite"]).name for x in meta.get("reports", []) if x.get("sqlite")]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [f if f.is_file() else f.with_name(f.name + XZ_SUFFIX) for f in listed]


def other_exports_beside(f: Path) -> list[Path]:
    """The exports other than ``f`` of its folder, as the folder given as input would read them
    (those its run.json lists, else its own): the other ranks of a run one rank's file came from."""
    try:
        return [g for g in _folder_exports(f.parent) if g.resolve() != f.resolve()]
    except OSError:
        return []


def listed_by_one_run(files: Sequence[str | Path]) -> bool:
    """Whether ``files`` (two or more) are all exports one ``tracerecon run`` directory's run.json
    lists: ranks of that one run by how they were made, however their captures lie in time (a
    torchrun rank's nsys session can begin after a short program's other rank ended)."""
    paths = [Path(f) for f in files]
    if len(paths) < 2 or len({p.parent for p in paths}) != 1:
        return False
    listed = {f.name for f in _listed(paths[0].parent)}
    return all(p.name in listed for p in paths)


def _listed_in_run_json(folder: Path) -> list[Path]:
    return [f for f in _listed(folder) if f.is_file()]


def _folder_exports(folder: Path) -> list[Path]:
    """The exports a folder given as input contributes: those its run.json lists, else its own."""
    return _listed_in_run_json(folder) or _exports_in(folder)


def _exports_in(folder: Path) -> list[Path]:
    """A folder's exports by name (``natural_key``): each ``NAME.sqlite``, or its ``NAME.sqlite.xz`` where only
    that is there (rank0.sqlite beside a compressed rank1.sqlite.xz are two ranks); not those
    ``_not_read_as_export`` leaves out."""
    plain = {f.name: f for f in folder.glob("*.sqlite") if not _not_read_as_export(f)}
    for f in folder.glob("*.sqlite" + XZ_SUFFIX):
        if not _not_read_as_export(f):
            plain.setdefault(f.name[: -len(XZ_SUFFIX)], f)
    return [plain[k] for k in sorted(plain, key=natural_key)]


def _not_read_as_export(f: Path) -> str | None:
    """Why a file a folder holds, named like an export, is not one of the folder's ranks, or
    None: a hidden one (``._rank0.sqlite``, the resource fork macOS writes beside each file it
    copies to another file system; an editor's backup) or a folder. (A broken link is read,
    and named as unreadable: it stands for a rank.)"""
    if f.name.startswith("."):
        return "hidden"
    if f.is_dir():
        return "a folder"
    return None


def _left_out_of(folder: Path) -> list[str]:
    """``NAME (why)`` for each file named like an export that ``_exports_in`` leaves out, and
    each sub-folder that holds exports of its own (``node1/``: its ranks are not this folder's;
    given as an input too, they are read)."""
    named = sorted({*folder.glob("*.sqlite"), *folder.glob("*.sqlite" + XZ_SUFFIX)}, key=lambda f: natural_key(f.name))
    out = [f"{f.name} ({why})" for f in named if (why := _not_read_as_export(f))]
    try:
        subs = sorted((d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".") and d not in named), key=lambda d: natural_key(d.name))
    except OSError:
        subs = []
    for d in subs:
        try:
            holds = any(not _not_read_as_export(f) for f in (*d.glob("*.sqlite"), *d.glob("*.sqlite" + XZ_SUFFIX)))
        except OSError:
            holds = False
        if holds:
            out.append(f"{d.name}/ (a folder of exports: give it as an input too)")
    return out


def natural_key(name: str) -> tuple:
    """Sort key that orders the numbers in a name by value: worker_tp2 before worker_tp10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


def folder_warnings(paths: Sequence[str | Path]) -> list[str]:
    """One warning per run directory among ``paths`` whose ``run.json`` is unreadable
    (``unreadable_run_json``), or lists exports that are
    not there (neither as ``.sqlite`` nor as ``.sqlite.xz``): its report lacks those ranks; one
    per folder read by its files' names that holds files so named but left out (hidden ones,
    folders: ``_not_read_as_export``)."""
    out = [f"{bad}: unreadable; its recorded phases and rank order are not used" for bad in unreadable_run_json(paths)]
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            continue
        listed = _listed(p)
        missing = [f.name.removesuffix(XZ_SUFFIX) for f in listed if not f.is_file()]
        if missing:
            read = (f"the report has {len(listed) - len(missing)} of its ranks" if len(missing) < len(listed)
                    else "the report reads the other exports the folder holds instead")
            out.append(f"{p}: {RUN_JSON} lists {len(listed)} exports, {len(missing)} of them not there ({', '.join(missing[:4])}"
                       f"{', ...' if len(missing) > 4 else ''}): {read}")
        out.extend(_run_json_shape_notes(p))
        if not _listed_in_run_json(p) and (left_out := _left_out_of(p)):
            out.append(f"{p}: {len(left_out)} name(s) not read as ranks: {', '.join(left_out[:4])}{', ...' if len(left_out) > 4 else ''}")
        read = {trace_stem(f) for f in _folder_exports(p)}
        unexported = _reports_not_exported(p, read)
        if unexported:
            out.append(f"{p}: {RUN_JSON} records {len(unexported)} report(s) with no SQLite export, left out of this report: " + "; ".join(unexported[:4])
                       + ("; ..." if len(unexported) > 4 else ""))
    return out


def _run_json_shape_notes(folder: Path) -> list[str]:
    """What is wrong with a readable ``run.json``'s list of exports, where something is (an
    edited one was read without a word): its ``reports`` not a list of records, an entry
    without a text ``sqlite`` (nor an ``error``), a name with a folder in it (read in the run
    directory by its name alone: nothing outside it is read)."""
    if not is_run_dir(folder):
        return []
    try:
        doc = read_json_file(folder / RUN_JSON)
    except (OSError, ValueError):
        return []  # said as unreadable (``unreadable_run_json``)
    if not isinstance(doc, dict):
        return []
    reports = doc.get("reports")
    where = f"{folder / RUN_JSON}"
    if not isinstance(reports, list) or not reports:
        return [f"{where}: 'reports' is {'missing' if reports is None else 'no list of exports' if not isinstance(reports, list) else 'empty'}: "
                "the folder's exports are read by their names instead"]
    out = []
    bad = [x for x in reports if not (isinstance(x, dict) and (isinstance(x.get("sqlite"), str) or x.get("error")))]
    if bad:
        out.append(f"{where}: {len(bad)} of its {len(reports)} report record(s) name no export (no 'sqlite' text): left out")
    elsewhere = [x["sqlite"] for x in reports if isinstance(x, dict) and isinstance(x.get("sqlite"), str) and Path(x["sqlite"]).name != x["sqlite"]]
    if elsewhere:
        out.append(f"{where}: {', '.join(elsewhere[:3])}{', ...' if len(elsewhere) > 3 else ''} named with a folder: an export is read "
                   "from the run directory by its name alone, never from outside it")
    return out


def _reports_not_exported(folder: Path, read: set[str]) -> list[str]:
    """What ``run.json`` says of each report it records without an export (its import or export
    failed) whose export is not among those read (``read``: their names without ``.sqlite``;
    one exported by hand later is read): the rank and the error, as recorded."""
    try:
        reports = read_json_file(folder / RUN_JSON).get("reports", [])
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(reports, list):
        return []
    failed = [x for x in reports if isinstance(x, dict) and not x.get("sqlite") and str(x.get("base")) not in read]
    return [f"{'rank ' + str(x['rank']) if x.get('rank') is not None else x.get('base') or 'a report'}"
            f"{': ' + str(x['error']) if x.get('error') else ''}" for x in failed]


def record_phase_options(folder: str | Path, options: dict) -> None:
    """Store ``options`` under ``phase_options`` in the run directory's ``run.json`` (kept as is
    otherwise). Raises OSError / ValueError when run.json cannot be read or written."""
    path = Path(folder) / RUN_JSON
    doc = read_json_file(path)
    doc[PHASE_OPTIONS] = options
    path.write_text(json.dumps(doc, indent=2) + "\n")


def recorded_phase_options(paths: Sequence[str | Path]) -> dict | None:
    """The ``phase_options`` the run directories among ``paths`` recorded, when they all define
    phases the same way (``PHASE_DEFINING``; the engine version may differ); None when one
    records none or they disagree. Inputs that are not run directories are not asked. Raises
    UsageError, naming the run.json, where the recorded options are of the wrong type."""
    found = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir() or not is_run_dir(p):
            continue
        try:
            opts = read_json_file(p / RUN_JSON).get(PHASE_OPTIONS)
        except (OSError, ValueError, AttributeError):
            opts = None
        if isinstance(opts, dict) and isinstance(opts.get("phases"), str):
            opts = {**opts, "phases": [opts["phases"]]}  # one phase written as a string, not a list of one
        if isinstance(opts, dict):
            _check_phase_options(p / RUN_JSON, opts)
        found.append(opts if isinstance(opts, dict) else None)
    if not found or any(f is None for f in found):
        return None
    defining = [{k: f.get(k) for k in PHASE_DEFINING} for f in found]
    return found[0] if all(d == defining[0] for d in defining) else None


def _check_phase_options(run_json: Path, opts: dict) -> None:
    """Refuse (UsageError, naming ``run_json``) recorded phase options of the wrong type: the
    phases a list of names, the cycle prefix a name, the phase thread what ``--phase-thread``
    takes, the cycles to skip a whole number of 0 or more (each may be absent or null)."""
    phases, cycle, thread, skip = opts.get("phases"), opts.get("cycle_prefix"), opts.get("phase_thread"), opts.get("skip_cycles")
    # As analysis.config.parse_phase_thread reads it (auto, same, or a thread id; a JSON true is
    # none), written out here: this module sits below the analysis and imports none of it.
    thread_ok = thread is None or (isinstance(thread, int) and not isinstance(thread, bool)) or (
        isinstance(thread, str) and (thread.strip().lower() in ("auto", "same") or thread.strip().isdecimal()))
    if phases is not None and not (isinstance(phases, list) and all(isinstance(x, str) for x in phases)):
        wrong = f"{PHASE_OPTIONS}.phases is {json.dumps(phases)[:60]}, not a list of phase names"
    elif cycle is not None and not isinstance(cycle, str):
        wrong = f"{PHASE_OPTIONS}.cycle_prefix is {json.dumps(cycle)[:60]}, not a range name prefix"
    elif not thread_ok:
        wrong = f"{PHASE_OPTIONS}.phase_thread is {json.dumps(thread)[:60]}, not auto, same or a thread id"
    elif skip is not None and not (isinstance(skip, int) and not isinstance(skip, bool) and skip >= 0):
        wrong = f"{PHASE_OPTIONS}.skip_cycles is {json.dumps(skip)[:60]}, not a whole number of 0 or more"
    else:
        return
    raise UsageError(f"{run_json}: {wrong}; correct it, or give --phase (nothing recorded is used then)")


def expand_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given; a directory contributes its exports: those ``run.json`` lists (rank
    order), else its ``*.sqlite`` files (else ``*.sqlite.xz``) sorted by name, numbers in names
    by value (``natural_key``)."""
    out: list[Path] = []
    for raw in paths:
        if not str(raw).strip():
            raise UsageError("an empty path was given as a trace (an unset shell variable?)")
        p = Path(raw)
        if p.is_dir():
            try:
                os.listdir(p)
            except OSError as exc:
                raise BadTraceError(f"{p}: cannot read the directory ({exc.strerror or exc})") from None
            found = _folder_exports(p)
            if not found and is_export_dir(p):  # read alone, before this (api: an export is read back whole)
                raise UsageError(f"{p}: a tracerecon export is read back alone, not with other traces; give it by itself")
            if not found and any(next((p / name).glob("rank=*"), None) for name in EXPORT_DATASETS):
                if not (p / MANIFEST_JSON).exists():
                    raise BadTraceError(f"{p}: holds a tracerecon export's tables but no {MANIFEST_JSON}, which says what they are: export again")
                if not (p / MANIFEST_JSON).is_file():  # (a FIFO, a folder: never opened)
                    raise BadTraceError(f"{p}: holds a tracerecon export's tables, but its {MANIFEST_JSON} is not a regular file")
            if not found:
                left_out = _left_out_of(p)
                raise BadTraceError(f"{p}: directory holds no .sqlite exports" + (f" (not read: {', '.join(left_out[:4])}{', ...' if len(left_out) > 4 else ''})" if left_out else ""))
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise BadTraceError("no input traces given")
    seen: dict[object, Path] = {}
    for f in out:
        first = seen.setdefault(_file_identity(f), f)
        if first is not f:
            # Twice the same rank would read as two ranks of one run (and a straggler among them).
            raise UsageError(f"{f}: given twice" + (f" (also as {first})" if str(first) != str(f) else "") + "; give each export once")
    return out


def _file_identity(f: Path) -> object:
    """What tells one file from another: its device and inode (a hard link, a symlink, another
    spelling of the path are the same file), or its real path where it cannot be stat'ed."""
    try:
        st = os.stat(f)
    except OSError:
        return os.path.realpath(f)
    return (st.st_dev, st.st_ino) if st.st_ino else os.path.realpath(f)  # (a file system without inode numbers)


# Every warning about an engine-timer file says this: a report made before the file changed
# (a cached one) has its old ones replaced, not added to.
TIMER_LINES_NOT_READ = "engine timer line(s) not read"
TIMER_FILE_NOT_READ = "engine timer file not read"
# What every warning of ``read_engine_timers`` holds (a report read anew replaces them by text).
TIMER_WARNINGS = (TIMER_LINES_NOT_READ, TIMER_FILE_NOT_READ)


@dataclass(frozen=True)
class EngineTimers:
    """The engine's own CPU phase timers: ``{rank: {phase: median ms}}``, and a warning per file
    with lines that were not read."""

    medians: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _is_number(value, kinds: tuple | type = (int, float)) -> bool:
    """Whether a JSON value is a number of ``kinds`` (true and false are not)."""
    return isinstance(value, kinds) and not isinstance(value, bool)


def read_engine_timers(paths: Sequence[str | Path], label_of: Callable[[str], str | None] | None = None) -> EngineTimers:
    """Medians of the engine's own perf_counter phase timers (``cpu_timers.rank<R>.jsonl`` that
    ``tracerecon run --cpu-timers`` makes engines write into the run directory), per cycle as
    the report's CPU ms are: a phase timed several times in one cycle counts once, their sum. A
    cycle is one ``cycle_id`` of a process (``pid``: two processes writing one rank's file are not
    summed; the instrument numbers each cycle range it opens, so a warm-up loop's cycle 0 and the
    main loop's are two), or, in a log without ids, a run of a process's lines with one cycle
    number; a line with no cycle counts alone. ``label_of`` names each timer's phase as the report does
    (``--phase fwd=verify``: verify's timers are fwd's); a name it gives no phase keeps its own.
    A line that is not a JSON object with a rank, a phase and a finite ``cpu_ms`` of 0 or more is
    not read, and a warning counts such lines per file."""
    per_cycle: dict[tuple, float] = {}
    warnings = []
    folders = []
    for raw in paths:
        p = Path(raw)
        folder = p if p.is_dir() else p.parent
        if folder not in folders:
            folders.append(folder)
    alone = 0  # a key of its own for each line of no cycle
    labels: dict[str, str] = {}
    runs: dict[tuple, list] = {}  # (rank, pid) -> [its last cycle number, how many runs of cycle numbers so far]
    for folder in folders:
        for f in sorted(folder.glob(f"{CPU_TIMERS_PREFIX}.rank*.jsonl")):
            try:
                text = read_regular_text(f, errors="replace")
            except OSError as exc:  # a directory or a FIFO of that name, no permission: no timers from it
                warnings.append(f"{f}: {TIMER_FILE_NOT_READ} ({exc.strerror or exc}); the engine column leaves it out")
                continue
            skipped = 0
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    rec = parse_json(line)
                    ms, rank, name = rec["cpu_ms"], rec["rank"], rec["phase"]
                    # As the instrument writes them: a number, a whole number, a text ("5" or true
                    # read as 5 and 1 ms before).
                    if not (_is_number(ms) and _is_number(rank, int) and isinstance(name, str)):
                        raise TypeError(rec)
                    ms = float(ms)
                    if not (math.isfinite(ms) and ms >= 0):  # NaN and inf are no timing (and no JSON); nor is a negative time
                        raise ValueError(ms)
                    cycle, pid, cycle_id = rec.get("cycle"), rec.get("pid"), rec.get("cycle_id")
                    if cycle is not None and not _is_number(cycle, int):
                        raise ValueError(cycle)
                except (ValueError, KeyError, TypeError, OverflowError, AttributeError):
                    skipped += 1
                    continue
                phase = labels.get(name)
                if phase is None:  # each name matched against the phase specs once
                    phase = labels[name] = (label_of(name) if label_of else None) or name
                if cycle is None:
                    alone += 1
                    key = (rank, phase, ("alone", alone))
                elif cycle_id is not None:
                    key = (rank, phase, (pid, "id", cycle_id))
                else:
                    run = runs.setdefault((rank, pid), [None, 0])
                    if cycle != run[0]:
                        run[0], run[1] = cycle, run[1] + 1
                    key = (rank, phase, (pid, run[1]))
                per_cycle[key] = per_cycle.get(key, 0.0) + ms
            if skipped:
                warnings.append(f"{f}: {skipped} {TIMER_LINES_NOT_READ} (not a JSON object with rank, phase and a cpu_ms of 0 or more); "
                                "the engine column leaves them out")
    out: dict[int, dict[str, list[float]]] = {}
    for (rank, phase, _), ms in per_cycle.items():
        out.setdefault(rank, {}).setdefault(phase, []).append(ms)
    medians = {r: {ph: round(statistics.median(v), 6) for ph, v in d.items()} for r, d in out.items()}
    return EngineTimers(medians, tuple(warnings))


def refuse_special_output(out: Path) -> None:
    """A file output (a timeline, a picture) that exists as anything but a plain file is refused:
    it is written beside it and renamed over it, which would replace a named pipe, a device
    (``/dev/stdout``) or a link with a file. So is one in a folder that is not there."""
    if os.path.islink(out) or (os.path.exists(out) and not os.path.isfile(out)):
        what = "a link" if os.path.islink(out) else "a directory" if os.path.isdir(out) else "no plain file (a pipe or a device)"
        raise UsageError(f"{out}: is {what}; give the path of a file to write")
    if not out.parent.is_dir():  # said now, not once the traces have been read
        raise UsageError(f"{out}: cannot write (no directory {out.parent})")


def refuse_linked_folder(out: Path) -> None:
    """An output folder given as a link is refused: the folder is renamed over, which would
    replace the link, not the folder it names."""
    if os.path.islink(out):
        raise UsageError(f"{out}: is a link; give the folder's own path (or a new one)")


def refuse_output_over_inputs(out: Path, inputs: Sequence[str]) -> None:
    """An output that is an input, a directory holding one, or a file a folder given as input is
    read with (``_read_with_folder``) is refused (``--force`` too): writing it would delete or
    overwrite the trace, or change what the folder reads as (a timeline named ``RUN/run.json``
    would take the run's recorded phases and rank order with it)."""
    target = os.path.realpath(out)
    for f in inputs:
        real = os.path.realpath(f)
        if real == target or real.startswith(_as_dir(target)):
            raise UsageError(f"{out}: holds the input {f}; choose another output (the input is never changed)")
        if target.startswith(_as_dir(real)) and os.path.isdir(real) and _read_with_folder(Path(real), Path(target)):
            raise UsageError(f"{out}: is read as part of the input {f}; choose another output (the input is never changed)")


def refuse_replacing_what_a_folder_reads(out: Path) -> None:
    """A file output (a timeline) that would replace what a tracerecon run or export is read
    with, input or not, is refused: an export's ``manifest.json`` or a file of its tables, a
    run's ``run.json`` (one ``tracerecon run`` wrote: it lists the reports), a run's engine
    timers (``cpu_timers.rank<R>.jsonl``). A timeline named ``EXPORT/manifest.json`` left the
    export unreadable; ``RUN/run.json``, the run without its ranks' order and phases. A file of
    another name, or one of those names that no run or export reads (a timeline written as
    ``run.json`` before), is replaced."""
    if not os.path.lexists(out):
        return
    folder = out.parent
    for export in (folder, *folder.parents)[:3]:  # (a table's file lies two folders down: DIR/phases/rank=0/)
        inside = out.relative_to(export).parts
        if (inside == (MANIFEST_JSON,) or len(inside) > 1 and inside[0] in EXPORT_DATASETS) and holds_manifest(export):
            raise UsageError(f"{out}: is read as part of the tracerecon export {export}; choose another output")
    if out.name == RUN_JSON and _written_by_run(out) or _engine_timers_name(out.name) and _written_by_run(folder / RUN_JSON):
        raise UsageError(f"{out}: is read as part of the tracerecon run {folder}; choose another output")


def _written_by_run(run_json: Path) -> bool:
    """Whether ``run_json`` is what ``tracerecon run`` writes (a JSON object listing ``reports``)."""
    try:
        doc = read_json_file(run_json)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "reports" in doc


def _engine_timers_name(name: str) -> bool:
    """Whether a file of this name is read as engine timers with its folder."""
    return name.startswith(CPU_TIMERS_PREFIX + ".") and name.endswith(".jsonl")


def _as_dir(path: str) -> str:
    """``path`` with one trailing separator: what the paths inside it start with."""
    return path.rstrip(os.sep) + os.sep


def _read_with_folder(folder: Path, path: Path) -> bool:
    """Whether ``path``, inside ``folder``, is read when the folder is given as input: anything
    in an export directory (holding ``manifest.json``); at the top of any other folder, its
    ``run.json`` and ``manifest.json``, exports (``*.sqlite``, ``*.sqlite.xz``) and engine timers
    (``cpu_timers.rank<R>.jsonl``). Another file in a run directory (``RUN/timeline.json``,
    ``RUN/plots/a.png``) is not."""
    if holds_manifest(folder):
        return True
    name = path.name
    return path.parent == folder and (name in (RUN_JSON, MANIFEST_JSON) or name.endswith((".sqlite", ".sqlite" + XZ_SUFFIX))
                                      or _engine_timers_name(name))
