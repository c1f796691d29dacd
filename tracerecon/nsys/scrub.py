"""``tracerecon scrub``: a copy of an nsys SQLite export that is safe to share.

nsys stores the whole process environment (tokens included), the command line, paths, host
and user names, and call chains. The copy keeps every table and row the analysis reads and:

- deletes the captured environment (``TARGET_INFO_SYSTEM_ENV``) and every call-chain table;
- keeps only allow-listed ``META_DATA_CAPTURE`` entries (capture settings, not the command);
- blanks host and user names in the export metadata;
- in every text value of every table: reduces absolute paths to their last component and
  redacts secrets (access tokens, ``KEY=value`` pairs whose key looks secret, bearer tokens);
- vacuums, so deleted data does not linger in free pages.

The input is opened read-only and never changed.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from tracerecon.errors import BadTraceError, TraceReconError
from tracerecon.nsys.sqlite_export import open_readonly, read_info

DROP_TABLES_PATTERN = re.compile(r"(CALLCHAINS?$|^TARGET_INFO_SYSTEM_ENV$|^PROCESS_ENV|^ENV_)", re.I)
CAPTURE_KEEP = re.compile(r"^(CUDA_GRAPH_TRACE_OPTIONS|CUDA_TRACE|NVTX|OSRT_TRACE|SAMPLING|CPU_CONTEXT|.*_VERSION$|.*VERSION_|TRACE_)", re.I)
EXPORT_META_BLANK = {"EXPORT_HOST": "[scrubbed]", "EXPORT_USER": ""}

REDACTED = "[REDACTED]"
SECRET_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI-style keys
    re.compile(r"\bxox[baprs]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # JWT
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"),
]
SECRET_KEY = re.compile(
    r"(?i)\b([A-Z0-9_]*(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)[A-Z0-9_]*)(\s*[=:]\s*)(['\"]?)([^\s'\",;]+)"
)
ENV_ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.+)$", re.S)  # a captured environment entry
ABS_PATH = re.compile(r"(?<![\w./])(?:~|/)(?:[^\s/'\",:;=()<>\[\]]+/)+([^\s/'\",:;=()<>\[\]]*)")
WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\s\\'\",;]+\\)+([^\s\\'\",;]*)")


def scrub_text(value):
    """Redact secrets and shorten absolute paths in one text value (non-text passes through)."""
    if not isinstance(value, str) or not value:
        return value
    env = ENV_ASSIGNMENT.match(value)
    if env:
        return f"{env.group(1)}={REDACTED}"
    s = value
    for pat in SECRET_PATTERNS:
        s = pat.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, s)
    s = SECRET_KEY.sub(lambda m: f"{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}", s)
    s = ABS_PATH.sub(lambda m: m.group(1) or "[path]", s)
    s = WINDOWS_PATH.sub(lambda m: m.group(1) or "[path]", s)
    return s


@dataclass(frozen=True)
class ScrubSummary:
    output: str
    dropped_tables: tuple[str, ...]
    capture_entries_removed: int
    text_values_changed: int


def default_output(src: Path) -> Path:
    return src.with_name(src.stem + ".scrubbed.sqlite")


def scrub_export(src: str | os.PathLike, dst: str | os.PathLike | None = None) -> ScrubSummary:
    """Write a scrubbed copy of ``src`` to ``dst`` (default ``<name>.scrubbed.sqlite``)."""
    src_p = Path(src)
    dst_p = Path(dst) if dst else default_output(src_p)
    conn = open_readonly(src_p)  # validates the input; read-only
    try:
        read_info(conn, str(src_p))
        if dst_p.exists() and dst_p.resolve() == src_p.resolve():
            raise TraceReconError(f"{dst_p}: refusing to overwrite the input; choose another -o")
        if dst_p.is_dir():
            raise TraceReconError(f"{dst_p}: is a directory; -o takes the output file's name")
        if not dst_p.parent.is_dir():
            raise TraceReconError(f"{dst_p.parent}: no such directory for the output")
        if dst_p.exists():
            dst_p.unlink()
        out = sqlite3.connect(dst_p)
        try:
            conn.backup(out)
        finally:
            out.close()
    except sqlite3.DatabaseError as exc:
        raise BadTraceError(f"{src_p}: cannot copy ({exc})") from None
    except OSError as exc:
        raise TraceReconError(f"{dst_p}: cannot write ({exc.strerror or exc})") from None
    finally:
        conn.close()
    try:
        return _scrub_in_place(dst_p)
    except sqlite3.DatabaseError as exc:
        dst_p.unlink(missing_ok=True)
        raise TraceReconError(f"{dst_p}: scrub failed ({exc})") from None


def _scrub_in_place(path: Path) -> ScrubSummary:
    db = sqlite_utils.Database(path)
    conn = db.conn
    conn.create_function("tr_scrub", 1, scrub_text, deterministic=True)
    dropped = []
    for name in db.table_names():
        if DROP_TABLES_PATTERN.search(name):
            db[name].drop()
            dropped.append(name)
    removed = 0
    if "META_DATA_CAPTURE" in db.table_names():
        names = [r[0] for r in conn.execute("select name from META_DATA_CAPTURE")]
        drop = [n for n in names if not CAPTURE_KEEP.match(n or "")]
        conn.executemany("delete from META_DATA_CAPTURE where name = ?", [(n,) for n in drop])
        removed = len(drop)
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if meta in db.table_names():
            for key, val in EXPORT_META_BLANK.items():
                conn.execute(f"update {meta} set value = ? where name = ?", (val, key))
    changed = 0
    for table in db.tables:
        text_cols = [c.name for c in table.columns if (c.type or "").upper() in ("TEXT", "") or "CHAR" in (c.type or "").upper()]
        for col in text_cols:
            cur = conn.execute(
                f'update "{table.name}" set "{col}" = tr_scrub("{col}") where typeof("{col}") = \'text\' and "{col}" != tr_scrub("{col}")'
            )
            changed += cur.rowcount if cur.rowcount > 0 else 0
    conn.commit()
    conn.execute("vacuum")
    conn.close()
    return ScrubSummary(str(path), tuple(dropped), removed, changed)
