"""A cache of each export's per-rank analysis, of each run's whole analysis and of its report,
so the second ``report``/``view``/``diff``/``export`` of a trace does not read and analyse it
again. The report entry is a few kB of plain values (``report_model.Report``): a warm
``report`` and the TUI's first screen read it without importing pyarrow.

Kept in the user's cache directory (``$TRACERECON_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracerecon``,
else ``~/.cache/tracerecon``), never beside the input. An entry is keyed by the export's
absolute path, size, modification and change times and inode, tracerecon's version and the phase
options; a changed file or a changed tracerecon (its modules' sizes, times and inodes) misses. An
entry that cannot be read, whose bytes are not those written (a CRC-32 of them is kept in its
header) or whose value is not of the kind asked for, is removed and rebuilt, never trusted. A
cache directory that can be read but not written still serves what it holds. The directory is
capped (``$TRACERECON_CACHE_MB``, default 2048): the least recently used entries go first.
``--no-cache`` (or ``TRACERECON_NO_CACHE=1``) bypasses it.

Entries are Python pickles (of Arrow tables, and of the report's plain values), read by an
unpickler that builds nothing but the value classes tracerecon caches (a list of frozen
dataclasses), Arrow's arrays, tables and types, numpy's arrays and a few built-in containers
(``_SafeUnpickler``): an entry planted in a cache directory (another user's, served read-only)
with a matching checksum imports only those classes' modules and calls nothing else, and is
rebuilt. The default directory is
kept readable by its owner only (one named by TRACERECON_CACHE_DIR is left as it is made).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tracerecon import __version__

FORMAT = 3  # bump when what is cached changes shape

# An entry's file: this header (the magic, the CRC-32 and the length of the pickle after it),
# then the pickle of (key, value). The checksum is worked out while the pickle is written, and
# over the file before it is unpickled (1.6 GB/s on the 2-core machine: 37 ms for the 76 MB
# trace's 58 MB entry), so a byte changed on disk since (a bad sector, another program) is
# found however harmless it looks, and pickle never reads it.
_MAGIC = b"TRCACHE\x03"
_HEADER = struct.Struct("<8sIQ")


def _crc_of_rest(fh) -> tuple[int, int]:
    """The CRC-32 and the length of what is left of the binary file ``fh`` (read in 1 MB parts)."""
    crc, n = 0, 0
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while got := fh.readinto(buf):
        crc = zlib.crc32(view[:got], crc)
        n += got
    return crc, n


class _Checksummed:
    """A binary file written through: the CRC-32 and the length of what passed."""

    def __init__(self, fh):
        self.fh, self.crc, self.n = fh, 0, 0

    def _saw(self, data) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.n += memoryview(data).nbytes

    def write(self, data) -> int:
        self._saw(data)
        return self.fh.write(data)


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The cache's folder by ``env`` (this process's environment)."""
    if env.get("TRACERECON_CACHE_DIR"):
        return Path(env["TRACERECON_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracerecon"


# TRACERECON_NO_CACHE values that leave the cache on; any other turns it off (NO_CACHE_WORDS
# lists those understood: another is said, ``cli._settings_ignored``).
_CACHE_ON = ("", "0", "no", "false", "off")
NO_CACHE_WORDS = _CACHE_ON + ("1", "yes", "true", "on")


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the cache is on by ``env``'s TRACERECON_NO_CACHE (this process's environment)."""
    return env.get("TRACERECON_NO_CACHE", "").strip().lower() in _CACHE_ON


def unusable_dir(folder: Path, make: bool = False) -> str | None:
    """Why ``folder`` cannot hold the cache (not a directory, not writable, under a file), or
    None where it can. An existing folder is asked by writing a file there (and removing it):
    ``os.access`` says yes to root for any folder, ``/proc`` included. A folder not there yet is
    made when first written; with ``make`` (a command that will write it) it is made now, so
    that a parent that takes no folder is found too; without, the nearest existing parent's
    permissions tell."""
    p = folder
    while not p.exists():
        if p.parent == p:
            return None
        p = p.parent
    if not p.is_dir():
        return "is not a directory" if p == folder else f"is under {p}, which is not a directory"
    if p != folder and not make:
        return None if os.access(p, os.W_OK | os.X_OK) else f"cannot be made in {p}, which is not writable"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        why = exc.strerror or str(exc)
        return f"is not writable ({why})" if p == folder else f"cannot be made in {p} ({why})"
    return None


_CODE: str | None = None


def _code_stamp() -> str:
    """Size, mtime, inode and ctime of every tracerecon module: an edited tracerecon misses the
    cache even before its version number changes, also where the edit kept the file's size
    and set its mtime back (ctime moves with any write)."""
    global _CODE
    if _CODE is None:
        pkg = Path(__file__).resolve().parent
        stamps = sorted((str(p.relative_to(pkg)), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) for p in pkg.rglob("*.py") for st in [p.stat()])
        _CODE = hashlib.sha256(repr(stamps).encode()).hexdigest()
    return _CODE


def _key(paths: Sequence[Path], extra: tuple) -> str | None:
    try:
        # inode and ctime too: a file copied over with its size and mtime kept (cp -p, rsync -t) misses
        files = [(str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) for p in paths for st in [p.stat()]]
    except OSError:
        return None
    raw = repr((FORMAT, __version__, _code_stamp(), files, extra))
    return hashlib.sha256(raw.encode()).hexdigest()


_MISSING = object()

# What an entry may build beyond tracerecon's own classes: the Arrow and numpy reconstructors
# and type factories that pickles of Arrow tables and numpy arrays name (pyarrow 26, numpy 2),
# and built-in containers. Nothing here opens a file, runs code or reaches the system.
_ARROW_NAMES = frozenset({
    "_reconstruct_table", "_reconstruct_record_batch", "_restore_array", "chunked_array", "table", "record_batch", "array",
    "py_buffer", "schema", "field", "type_for_alias", "dictionary", "list_", "large_list", "list_view", "large_list_view", "fixed_size_list",
    "struct", "map_", "null", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
    "float64", "string", "utf8", "large_string", "large_utf8", "string_view", "binary", "large_binary", "binary_view", "timestamp",
    "duration", "date32", "date64", "time32", "time64", "decimal128", "decimal256", "KeyValueMetadata",
})
_ALLOWED = {
    "pyarrow.lib": _ARROW_NAMES,
    "numpy": frozenset({"dtype", "ndarray"}),
    "numpy._core.numeric": frozenset({"_frombuffer"}), "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}), "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "builtins": frozenset({"frozenset", "set", "tuple", "list", "dict", "slice", "complex", "bytearray"}),
    "collections": frozenset({"OrderedDict"}),
}


# The value classes a cache entry holds (frozen dataclasses whose constructors only set their
# fields, ``GpuIdentity`` cleaning its text ones): what ``report``, ``export``, ``view`` and ``diff``
# cache. A class added to what is cached is added here (a test reads every entry back in a fresh
# process: one left out makes each warm run a cold one).
_VALUE_CLASSES = {
    "tracerecon.analysis.config": frozenset({"PhaseConfig"}),
    "tracerecon.analysis.cross_rank": frozenset({"CrossRank", "RankAlignment", "RankComm"}),
    "tracerecon.analysis.phases": frozenset({"PhaseInputs"}),
    "tracerecon.analysis.rank": frozenset({"RankWork"}),
    "tracerecon.analysis.ranks": frozenset({"Candidate", "RankSource"}),
    "tracerecon.model": frozenset({"Analysis", "RankResult"}),
    "tracerecon.nsys.gpu_identity": frozenset({"GpuIdentity"}),
    "tracerecon.nsys.sqlite_export": frozenset({"ExportInfo"}),
    "tracerecon.report_model": frozenset({"CycleSummary", "PhaseSummary", "RankReport", "Report"}),
}


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that finds only the globals a cache entry needs (``_VALUE_CLASSES`` and
    ``_ALLOWED``: the modules named there are all it may import); any other is refused
    (``pickle.UnpicklingError``), so the entry is rebuilt, never trusted."""

    def find_class(self, module: str, name: str):
        if name in _VALUE_CLASSES.get(module, ()) or name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a cache entry may not build {module}.{name}")


def lookup(paths: Path | Sequence[Path], extra: tuple, valid: Callable[[Any], bool], use: bool | None = None) -> Any:
    """The cached value for ``paths`` and ``extra``, or None when there is none (or caching is
    off, or the entry holds a value ``valid`` refuses: it is removed). Never computes."""
    entry = _entry(paths, extra, use)
    value = _read_entry(entry, valid) if entry is not None else _MISSING
    return None if value is _MISSING else value


def _entry(paths: Path | Sequence[Path], extra: tuple, use: bool | None) -> Path | None:
    """The entry's file for ``paths`` and ``extra``; None when caching is off (``use``, else
    this process's setting) or a file cannot be stat'ed."""
    if not (enabled() if use is None else use):
        return None
    key = _key([paths] if isinstance(paths, Path) else list(paths), extra)
    return cache_dir() / f"{key}.pickle" if key is not None else None


def _read_entry(entry: Path, valid: Callable[[Any], bool]) -> Any:
    """The value an entry holds, where it holds its own key (an entry copied or renamed over
    another's name is someone else's: rebuilt, never trusted) and ``valid`` takes it (a value
    of another kind under the right key and checksum: rebuilt too). A cache directory that can
    be read but not written (a read-only mount, another user's) still serves its entries."""
    if entry.is_file():
        try:
            with open(entry, "rb") as fh:
                magic, crc, length = _HEADER.unpack(fh.read(_HEADER.size))
                if magic != _MAGIC:
                    raise ValueError("not an entry of this format")
                # The bytes checked before pickle reads any of them: a changed byte can make
                # pickle fail loudly (a SystemError printed from a buffer it was building).
                if _crc_of_rest(fh) != (crc, length):
                    raise ValueError("its bytes changed since they were written")
                fh.seek(_HEADER.size)
                stored = _SafeUnpickler(fh).load()
            if not (isinstance(stored, tuple) and len(stored) == 2 and stored[0] == entry.stem):
                raise ValueError("an entry of another key")
            if not valid(stored[1]):
                raise ValueError("a value of another kind")
        except (Exception, SystemExit):  # a truncated, foreign, misplaced or planted file: rebuild, never trust
            with contextlib.suppress(OSError):
                entry.unlink(missing_ok=True)
            return _MISSING
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used (for the size cap's order)
        return stored[1]
    return _MISSING


def cached(paths: Path | Sequence[Path], extra: tuple, compute: Callable[[], Any], valid: Callable[[Any], bool], use: bool | None = None) -> Any:
    """``compute()``'s result for the file(s) ``paths`` (and ``extra``, the options it depends
    on), from the cache when a valid entry exists (one whose value ``valid`` takes: what
    ``compute`` returns); otherwise computed and stored (best effort). ``use``: whether to
    cache at all (default: ``enabled()``, this process's setting)."""
    entry = _entry(paths, extra, use)
    if entry is None:
        return compute()
    folder = entry.parent
    value = _read_entry(entry, valid)
    if value is not _MISSING:
        return value
    value = compute()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # (the cache's own folder: its owner's only)
        if not os.environ.get("TRACERECON_CACHE_DIR") and folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o077:
            os.chmod(folder, 0o700)  # (made open by an earlier tracerecon)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_HEADER.pack(_MAGIC, 0, 0))
                body = _Checksummed(fh)
                pickle.dump((entry.stem, value), body, protocol=pickle.HIGHEST_PROTOCOL)
                fh.seek(0)
                fh.write(_HEADER.pack(_MAGIC, body.crc, body.n))
            os.replace(tmp, entry)
        except BaseException:  # a full disk, or Ctrl-C while writing: no half-written file left
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _trim(folder)
    except OSError:
        pass  # a read-only or full cache directory: analyse without caching
    return value


DEFAULT_CAP_MB = 2048


def cap_setting(value: str) -> int | None:
    """A ``TRACERECON_CACHE_MB`` value in MB, None where it is no whole number."""
    return int(value) if value.isdecimal() else None


def _trim(folder: Path) -> None:
    mb = cap_setting(os.environ.get("TRACERECON_CACHE_MB", ""))
    cap = (DEFAULT_CAP_MB if mb is None else mb) * 1024 * 1024
    entries = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in entries)
    while entries and total > cap:
        old = entries.pop(0)
        total -= old.stat().st_size
        old.unlink(missing_ok=True)
