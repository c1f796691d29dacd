"""``tracerecon scrub``: a copy of an nsys SQLite export that is safe to share.

nsys stores the whole process environment (tokens included), the command line, the profiled
program's own stdout and stderr, paths, host and user names, and call chains. What scrub
guarantees of the copy (the input is opened read-only and never changed):

- gone: the captured environment (``TARGET_INFO_SYSTEM_ENV``, ``PROCESS_ENV*``, ``ENV_*``),
  every call-chain table, and the program's captured output (``ProcessStreams`` and the texts
  it points at);
- ``META_DATA_CAPTURE`` keeps only allow-listed capture settings (not the command line);
- host and user names of the export metadata are blanked, and every host name the trace
  itself names (export host, NCCL's ``host:pid:tid`` log prefix) is replaced everywhere;
- in every text value of every table (whatever its declared type; bytes of text that are not
  UTF-8 kept as they are, the rest scrubbed around them): whole absolute paths and ``file://`` URLs become
  ``[path]``; credentials in URLs, known token formats (Hugging Face, GitHub, OpenAI-style,
  Slack, AWS, JWT, bearer), ``--password X`` / ``--api-key X`` style options (also quoted, as
  in a printed Python list), ``key=value`` / ``key: value`` / JSON ``"key": "value"`` pairs
  whose key looks secret, and ``host=``, ``user=``, ``cwd=`` style values become
  ``[REDACTED]``; IPv4 and IPv6 addresses (shortened with ``::`` too) become ``[ip]``, and
  ``user@host`` becomes ``[user]@[host]``;
- the file is vacuumed, so nothing deleted lingers in free pages.

The analysis of the copy equals the original's (tests compare the report JSON).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import sqlite_utils

from tracerecon.errors import BadTraceError, TraceReconError, UsageError
from tracerecon.nsys.read_plan import XZ_SUFFIX
from tracerecon.nsys.sqlite_export import materialized, open_readonly, read_info, sidecar_warnings
from tracerecon.run_dir import RUN_JSON, refuse_special_output

DROP_TABLES_PATTERN = re.compile(r"(CALLCHAINS?$|^TARGET_INFO_SYSTEM_ENV$|^PROCESS_ENV|^ENV_|^ProcessStreams$)", re.I)
PROGRAM_OUTPUT = "[program output removed]"
CAPTURE_KEEP = re.compile(r"^(CUDA_GRAPH_TRACE_OPTIONS|CUDA_TRACE|NVTX|OSRT_TRACE|SAMPLING|CPU_CONTEXT|.*_VERSION$|.*VERSION_|TRACE_)", re.I)
EXPORT_META_BLANK = {"EXPORT_HOST": "[scrubbed]", "EXPORT_USER": ""}

REDACTED = "[REDACTED]"
SECRET_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),  # OpenAI-style keys (test keys are short)
    re.compile(r"\bxox[baprs]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # JWT
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"),
    # Digest and AWS signature credentials are several fields (user, nonce, response, signature):
    # the rest of the header's line goes
    re.compile(r"(?i)(\bauthorization['\"]?[ \t]*[:=][ \t]*['\"]?)(?:digest|aws4-hmac-sha256)[ \t][^\r\n]*"),
    re.compile(r"(?i)(basic\s+)[A-Za-z0-9+/=]{8,}"),  # HTTP basic credentials (user:password in base64)
    # PEM / OpenSSH private key blocks, whole (keys a program printed or was given on its command line)
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.S),
]
# (Names and schemes below are bounded, {0,64} rather than *: a pattern tried at every position
# of a long run it cannot match, a-a-a-... or a base64 blob, backtracked over the whole run each
# time, and a 20,000-character range name took 78 s to scrub.)
_SECRETISH = r"[A-Z0-9_-]{0,64}(?:TOKEN|SECRET|PASSWORD|PASSWD|PWD|API[_-]?KEY|ACCESS[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIAL|AUTH)[A-Z0-9_-]{0,64}"
_PERSONAL = r"(?:HOST|HOSTNAME|NODE|USER|USERNAME|LOGNAME|CWD|HOME|PWD)"
# A compound name whose last word says secret (db_pass, ssh-key, auth_bearer, id_jwt), as an argv
# list's secret option names are taken (SECRET_NAME_ALONE); alone (pass: 3, key=2) such a word is
# too common in range and kernel names to be taken as one.
_SECRET_COMPOUND = r"(?:[A-Z0-9]{1,32}[_-]){1,8}(?:PASS|KEY|BEARER|JWT)"
# An option name ending in such a word, alone too: --key X, --bearer X, --jwt X, --db-pass X.
_SECRET_OPTION_NAME = r"(?:[A-Z0-9]{1,32}[_-]){0,8}(?:PASS|KEY|BEARER|JWT)"
# An HTTP authorization scheme: the credentials are the word after it ("Authorization: Bearer X"),
# on the same line.
_AUTH_SCHEME = r"(?:bearer|basic|token|negotiate|ntlm|apikey)[ \t]+"
# A key whose value is a secret wherever it stands (personal keys are hidden only in some places)
_SECRET_KEY_NAME = rf"(?:{_SECRETISH}|{_SECRET_COMPOUND})"
_QUOTED_SECRET_KEY_NAME = re.compile(rf"(?i)['\"]?{_SECRET_KEY_NAME}['\"]?")
# key=value, key: value, "key": "value" (JSON / Python dicts) for secret-looking or personal keys
SECRET_KEY = re.compile(
    rf"(?i)(['\"]?\b(?:{_SECRET_KEY_NAME}|{_PERSONAL})\b['\"]?)(\s*[=:]\s*)(['\"]?)((?:{_AUTH_SCHEME})?[^\s'\",;}}]+)"
)
# --password X, --api-key=X, '--password', 'X' (a printed argv list)
# (a quoted value is hidden whole, to its closing quote: --password="two words")
SECRET_OPTION = re.compile(rf"(?i)(--?(?:{_SECRETISH}|{_SECRET_OPTION_NAME}|{_PERSONAL})\b)(['\"]?(?:\s*,\s*|\s+|=))(?:(['\"])([^'\"]*)(?=\3)|(['\"]?)([^\s'\",;]+))")


def _option_value_hidden(m: re.Match) -> str:
    """A ``SECRET_OPTION`` match with its value (quoted or not) as ``REDACTED``."""
    return f"{m.group(1)}{m.group(2)}{m.group(3) or m.group(5) or ''}{REDACTED}"


# an argv entry that is a secret option's or word's name alone: the next entry is its value
# (--api-key, --hf-token, --aws-secret-access-key, --password, --host; not --max-num-batched-tokens
# nor --tokenizer: engine settings a run.json should keep)
# (any name whose last word is key or pass, --secret-key, --ssh-key, --db-pass; or that holds
# secret anywhere, --secret-access-key)
_SECRET_LAST_WORD = r"(?:password|passwd|passphrase|pass|secret|token|key|bearer|jwt|credentials?|auth)"
SECRET_NAME_ALONE = re.compile(rf"(?i)^(?:--?(?:[a-z0-9]+[_-])*{_SECRET_LAST_WORD}|--?(?:[a-z0-9]+[_-])*secret(?:[_-][a-z0-9]+)*|--?{_PERSONAL}"
                               r"|password|passwd|passphrase|secret|api[_-]?key)$")
# "password hunter2": a secret word, then its value
SECRET_WORD = re.compile(r"(?i)\b(password|passwd|passphrase|secret|api[_-]?key)(\s+)([^\s'\",;]+)")
URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31})://([^\s'\"<>]*)")
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^\s/'\"<>@]{1,1024}@")  # scheme://user:password@
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# IPv6 in any form (full, "::"-shortened, with a zone): a run of hex groups and colons holding a
# digit, kept only where it parses as an address (not a time of day, nor a C++ name's "::").
IPV6 = re.compile(r"(?i)(?<![\w:.])(?=[0-9a-f:]*\d)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[\w.]+)?(?![\w:])")
# user@host (an ssh or scp target, an e-mail address): lower-case, as logins and host names are
# written (a symbol version, memcpy@GLIBC_2.14, is left).
USER_AT_HOST = re.compile(r"(?<![\w.@-])[a-z_][a-z0-9_.-]{0,31}@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*(?![\w@-])")
NCCL_PREFIX = re.compile(r"(?m)^([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[")  # NCCL's "host:pid:tid [rank]" log lines
ENV_ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.+)$", re.S)  # a captured environment entry
ENV_ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.+)$", re.S)  # one entry of a NUL-separated environment block
ABS_PATH = re.compile(r"(?<![\w./])(?:~|/)(?:[^\s/'\",:;=()<>\[\]]{1,255}/)+[^\s/'\",:;=()<>\[\]]*")
WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\s\\'\",;]+\\)+[^\s\\'\",;]*")


def _ipv6(m: re.Match) -> str:
    try:
        ipaddress.IPv6Address(m.group(0).split("%", 1)[0])
    except ValueError:
        return m.group(0)
    return "[ip]"


def _token_patterns_redacted(s: str) -> str:
    """``s`` with what ``SECRET_PATTERNS`` find (tokens, keys, JWTs, private key blocks) redacted."""
    for pat in SECRET_PATTERNS:
        s = pat.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, s)
    return s


def _known_secrets_redacted(s: str) -> str:
    """``s`` with URL credentials and ``SECRET_PATTERNS`` redacted, everything else kept."""
    return _token_patterns_redacted(URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{REDACTED}@", s))


def scrub_text(value, hosts: tuple[str, ...] = ()):
    """Redact secrets, addresses and host names and remove absolute paths in one text value
    (non-text passes through). ``hosts``: names to replace wherever they appear."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or not value:
        return value
    if "\x00" in value:
        # A block of NUL-separated entries (a child process's environment, as nsys stores what
        # a traced process passed to exec): every entry on its own, any NAME=VALUE redacted.
        return "\x00".join(f"{e.group(1)}={REDACTED}" if (e := ENV_ENTRY.match(part)) else scrub_text(part, hosts) for part in value.split("\x00"))
    env = ENV_ASSIGNMENT.match(value)
    if env:
        return f"{env.group(1)}={REDACTED}"
    s = value
    s = _token_patterns_redacted(URL.sub(lambda m: "[path]" if m.group(1).lower() == "file" else f"{m.group(1)}://{REDACTED}", s))
    s = SECRET_OPTION.sub(_option_value_hidden, s)
    s = SECRET_WORD.sub(lambda m: m.group(0) if m.group(3) == REDACTED else f"{m.group(1)}{m.group(2)}{REDACTED}", s)
    s = SECRET_KEY.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{REDACTED}", s)
    s = NCCL_PREFIX.sub(lambda m: f"[host]:{m.group(2)}:{m.group(3)} [", s)
    if hosts:
        s = _hosts_replaced(s, hosts)
    s = USER_AT_HOST.sub("[user]@[host]", s)
    s = IPV4.sub("[ip]", s)
    s = IPV6.sub(_ipv6, s)
    s = ABS_PATH.sub("[path]", s)
    s = WINDOWS_PATH.sub("[path]", s)
    return s


# A file name in a text (a token ending in an extension): nsys names its outputs after the host
# (report_<host>_<pid>.sqlite), and so do log files.
FILE_NAME = re.compile(r"[^\s'\"<>|=:,;()\[\]]{0,255}\.[A-Za-z][A-Za-z0-9-]{0,9}(?![\w.-])")


def _hosts_replaced(s: str, hosts: tuple[str, ...]) -> str:
    """``s`` with each of ``hosts`` replaced by ``[host]``: inside a file name wherever it is
    bounded by no letter or digit (``report_dgxbox_1.sqlite``), elsewhere only as a word of its
    own (a host called ``gpu`` leaves ``gpu_kernel_impl`` and a phase ``prefill_gpu`` as they
    are: the copy's names, and so its analysis, stay the original's)."""
    def in_file_name(m: re.Match) -> str:
        name = m.group(0)
        for h in hosts:
            name = re.sub(rf"(?i)(?<![A-Za-z0-9]){re.escape(h)}(?![A-Za-z0-9])", "[host]", name)
        return name

    s = FILE_NAME.sub(in_file_name, s)
    for h in hosts:
        s = re.sub(rf"(?i)(?<![\w-]){re.escape(h)}(?![\w-])", "[host]", s)
    return s


def _after_secret_names_redacted(args: list, each: Callable) -> list:
    """``args`` with ``each`` applied to every entry, and the value of a secret option redacted:
    the entry after its name given alone (``SECRET_NAME_ALONE``), or after ``=`` in
    ``--name=VALUE``."""
    out, hide = [], False
    for a in args:
        name, eq, _ = a.partition("=") if isinstance(a, str) else ("", "", "")
        out.append(REDACTED if hide and isinstance(a, str) else f"{name}={REDACTED}" if eq and SECRET_NAME_ALONE.match(name) else each(a))
        hide = isinstance(a, str) and bool(SECRET_NAME_ALONE.match(a))
    return out


def redact_command(argv: list[str]) -> list[str]:
    """A command line with its secrets redacted, its paths, names and settings kept (what
    ``run --scrub`` echoes)."""
    return _after_secret_names_redacted(argv, _known_secrets_redacted)


def scrub_argv(args: list) -> list:
    """An argument list (``run.json``'s) with every entry scrubbed (``scrub_text``) and the
    value of every secret option redacted."""
    return _after_secret_names_redacted(args, scrub_text)


def scrub_secrets_in_bytes(value):
    """A blob (an NVTX payload, a value another tool stored as bytes) with the secrets the text
    patterns know redacted, its other bytes as they were (read as Latin-1: one character per
    byte, so nothing else changes); paths, addresses and host names are left, as a binary
    payload may match them by chance. Non-blobs pass through."""
    if not isinstance(value, bytes) or not value:
        return value
    s = value.decode("latin-1")
    # Each run of printable text on its own: a secret's value ends where the text does, at the
    # payload's next binary byte (a NUL, a length), which stays.
    out = _PRINTABLE_RUN.sub(lambda m: _secrets_in_text_redacted(m.group(0)), s)
    return value if out == s else out.encode("latin-1")


# Text: printable ASCII and whole UTF-8 sequences (a secret holding one is redacted whole); it
# ends at a control byte or a byte no UTF-8 text holds (a length, a float's byte), which stays.
_PRINTABLE_RUN = re.compile("(?:[\t\n\r\x20-\x7e]|[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3})+")


def _secrets_in_text_redacted(s: str) -> str:
    out = _known_secrets_redacted(s)
    out = SECRET_OPTION.sub(_option_value_hidden, out)
    out = SECRET_WORD.sub(lambda m: m.group(0) if m.group(3) == REDACTED else f"{m.group(1)}{m.group(2)}{REDACTED}", out)
    return SECRET_KEY.sub(lambda m: m.group(0) if not _QUOTED_SECRET_KEY_NAME.fullmatch(m.group(1)) else f"{m.group(1)}{m.group(2)}{m.group(3)}{REDACTED}", out)


def hosts_named_in(conn: sqlite3.Connection, tables: list[str]) -> tuple[str, ...]:
    """Host names the trace itself records: the export host, NCCL log prefixes in any string."""
    found: set[str] = set()
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if meta in tables:
            for (v,) in conn.execute(f"select value from {meta} where name in ('EXPORT_HOST', 'HOST', 'HOSTNAME')"):
                if isinstance(v, str) and v.strip() and v != "[scrubbed]":
                    found.add(v.strip())
    if "StringIds" in tables:
        for (v,) in conn.execute("select value from StringIds where value like '%:%:% [%'"):
            if isinstance(v, str):
                found |= {m.group(1) for m in NCCL_PREFIX.finditer(v)}
    # Short generic words would blank too much: a host name worth hiding has 3+ characters.
    return tuple(sorted((h for h in found if len(h) >= 3 and h.lower() not in ("nccl", "info", "warn")), key=len, reverse=True))


@dataclass(frozen=True)
class ScrubSummary:
    output: str
    dropped_tables: tuple[str, ...]
    capture_entries_removed: int
    text_values_changed: int
    # NVTX range names that held a path, an address or a secret, as they read in the copy:
    # a --phase naming one must name it so there.
    renamed_ranges: tuple[str, ...] = ()
    # What the files beside the input mean for the copy (``sqlite_export.sidecar_warnings``): a
    # write-ahead log's changes are not in it.
    warnings: tuple[str, ...] = ()


def default_output(src: Path) -> Path:
    """``<name>.scrubbed.sqlite`` in the current directory: nothing is created beside an input."""
    base = src.name[: -len(XZ_SUFFIX)] if src.name.endswith(XZ_SUFFIX) else src.name
    return Path(Path(base).stem + ".scrubbed.sqlite")


def scrub_export(src: str | os.PathLike, dst: str | os.PathLike | None = None) -> ScrubSummary:
    """Write a scrubbed copy of ``src`` to ``dst`` (default ``default_output``), xz-compressed
    where ``dst`` ends in ``.xz``. ``dst`` must not be there yet (never the input under any
    name, a link, a device, another export or any other file: refused, nothing written)."""
    if not os.fspath(src):
        raise UsageError("an empty path was given as a trace (an unset shell variable?)")
    src_p = Path(src)
    if src_p.is_dir() or not src_p.name:  # (".", "/": no name to put ".scrubbed" in either)
        raise BadTraceError(f"{src}: not a file (scrub copies one export)")
    dst_p = Path(dst) if dst else default_output(src_p)
    if not dst and (dst_p.exists() or dst_p.is_symlink()):  # another export's scrubbed copy, often (nsys names them alike)
        raise UsageError(f"{dst_p}: exists; scrub never writes over a file: give -o to name another (or remove it first)")
    if src_p.name.endswith(XZ_SUFFIX):  # as every analysing command reads it: decompressed first
        with materialized(src_p) as real:
            return _scrub_export(real, src_p, dst_p)
    return _scrub_export(src_p, src_p, dst_p)


def _scrub_export(real: Path, src_p: Path, dst_p: Path) -> ScrubSummary:
    """``scrub_export`` of the SQLite file ``real`` (``src_p`` as the user gave it)."""
    if dst_p.parent.is_dir() and not os.access(dst_p.parent, os.W_OK):
        raise TraceReconError(f"{dst_p.parent}: not writable; choose another -o")
    conn = open_readonly(real, shown=src_p)  # validates the input; read-only
    try:
        read_info(conn, str(src_p))
        encoding = conn.execute("pragma encoding").fetchone()[0]
        if encoding.upper() != "UTF-8":
            # (its text, read as UTF-8 bytes, would pass unscrubbed; nsys writes UTF-8)
            raise BadTraceError(f"{src_p}: the database is {encoding}-encoded: scrub reads UTF-8 exports only, as nsys writes them")
        if dst_p.exists() and os.path.samefile(dst_p, src_p):  # a link or a hard link of the input too
            raise TraceReconError(f"{dst_p}: refusing to overwrite the input; choose another -o")
        # SQLite's files beside the input are part of it (a write-ahead log holds changes not yet in it).
        if os.path.realpath(dst_p) in {os.path.realpath(src_p) + side for side in ("-wal", "-shm", "-journal")}:
            raise TraceReconError(f"{dst_p}: is part of the input {src_p} (SQLite keeps its changes there); choose another -o")
        if dst_p.is_dir():
            raise TraceReconError(f"{dst_p}: is a directory; -o takes the output file's name")
        # Renamed over at the end: a device (/dev/full), a named pipe or a link would be replaced by a file.
        refuse_special_output(dst_p)  # (and a folder that is not there)
        # Nor over any other file: another rank's unscrubbed export, a run directory's run.json
        # under a mistyped -o were replaced without a word.
        if dst_p.exists():
            raise UsageError(f"{dst_p}: exists; scrub never writes over a file: choose another -o (or remove it first)")
        # Scrubbed in a hidden sibling, renamed over ``dst`` only once done: an interrupted or
        # failed scrub leaves no half-scrubbed copy (it still holds every secret) behind.
        tmp = dst_p.with_name(f".{dst_p.name}.tmp-{os.getpid()}")
        _remove(tmp)  # (and a journal an earlier run of this process id left: SQLite would roll it into the new copy)
        try:
            out = sqlite3.connect(tmp)
        except sqlite3.Error as exc:  # the output's folder, not the input, refused
            raise TraceReconError(f"{dst_p}: cannot write ({exc})") from None
        try:
            conn.backup(out)
        finally:
            out.close()
    except sqlite3.DatabaseError as exc:
        _remove(locals().get("tmp"))
        if not _blames_input(exc, copying=True):  # (a full disk, a write refused: the copy's side)
            raise TraceReconError(f"{dst_p}: cannot write ({exc})") from None
        raise BadTraceError(f"{src_p}: cannot copy ({exc})") from None
    except OSError as exc:
        _remove(locals().get("tmp"))
        raise TraceReconError(f"{dst_p}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        _remove(locals().get("tmp"))
        raise
    finally:
        conn.close()
    packed = None
    try:
        summary = _scrub_in_place(tmp)
        if dst_p.name.endswith(XZ_SUFFIX):  # as named: compressed (every command reads it so)
            packed = dst_p.with_name(f".{dst_p.name}.xz-{os.getpid()}")
            _xz_compressed(tmp, packed)
            _remove(tmp)
            tmp, packed = packed, None
        os.replace(tmp, dst_p)
    except sqlite3.DatabaseError as exc:
        _remove(tmp)
        if _INTERRUPTED_IN_SQL or "interrupt" in str(exc).lower():  # Ctrl-C inside a statement or one of its functions
            # Raised again as it came (SIGTERM's Terminated is said as such, not as Ctrl-C).
            caught = _INTERRUPTED_IN_SQL[0] if _INTERRUPTED_IN_SQL else KeyboardInterrupt()
            _INTERRUPTED_IN_SQL.clear()
            raise caught from None
        if _blames_input(exc, copying=False):  # the copy's pages: the input's
            raise BadTraceError(f"{src_p}: scrub failed, the export is damaged ({exc}); nothing written") from None
        raise TraceReconError(f"{dst_p}: scrub failed ({exc})") from None  # a full disk, an I/O error: the output's side
    except OSError as exc:
        _remove(tmp)
        _remove(packed)
        raise TraceReconError(f"{dst_p}: cannot write ({exc.strerror or exc})") from None
    except BaseException:  # Ctrl-C included
        _remove(tmp)
        _remove(packed)
        raise
    return replace(summary, output=str(dst_p), warnings=tuple(sidecar_warnings(src_p)) if real == src_p else ())


def _xz_compressed(src: Path, dst: Path) -> None:
    """``src`` written to ``dst`` xz-compressed, a megabyte at a time."""
    import lzma
    import shutil

    with open(src, "rb") as fin, lzma.open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


# Set when Ctrl-C lands inside one of scrub's SQL functions: SQLite reports it only as "user-defined
# function raised exception", which must not read as a failed scrub.
_INTERRUPTED_IN_SQL: list[KeyboardInterrupt] = []


def _noting_interrupts(fn):
    def call(value):
        try:
            return fn(value)
        except KeyboardInterrupt as exc:
            _INTERRUPTED_IN_SQL.append(exc)
            raise

    return call


def _blames_input(exc: sqlite3.DatabaseError, copying: bool) -> bool:
    """Whether SQLite's error is the input export's rather than the output's side (a full disk,
    a write refused, the copy locked): its pages are no database; while it is ``copying`` into
    the output's temporary copy, also a read of it that failed or the input locked (afterwards
    only the copy is touched)."""
    name = getattr(exc, "sqlite_errorname", "")
    # (a table or column the scrub reads missing from the copy: the input's schema, damaged or
    # edited, not the output's side)
    if name == "SQLITE_ERROR" and any(w in str(exc) for w in ("no such column", "no such table")):
        return True
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or copying and name in (
        "SQLITE_IOERR_READ", "SQLITE_IOERR_SHORT_READ", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_PERM", "SQLITE_AUTH")


def _remove(path: Path | None) -> None:
    """A temporary file gone, with SQLite's rollback journal (or WAL) beside it: an interrupted
    scrub leaves its transaction's journal, which holds pages of the unscrubbed copy."""
    if path is not None:
        for side in ("", "-journal", "-wal", "-shm"):
            try:
                path.with_name(path.name + side).unlink(missing_ok=True)
            except OSError:
                pass


def _scrub_in_place(path: Path) -> ScrubSummary:
    db = sqlite_utils.Database(path)
    conn = db.conn
    # Text as stored, bytes that are not UTF-8 kept (``_scrubbed_as_stored``): host names and
    # capture names read so match the values they name, and are given back as bytes.
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    tables = db.table_names()
    hosts = hosts_named_in(conn, tables)
    conn.create_function("tr_scrub", 1, _noting_interrupts(lambda v: _scrubbed_as_stored(v, hosts)), deterministic=True)
    conn.create_function("tr_scrub_bytes", 1, _noting_interrupts(scrub_secrets_in_bytes), deterministic=True)
    # The program's own stdout / stderr: nsys keeps it as strings that ProcessStreams (2022) or
    # ANALYSIS_FILE (2025: pid_N_stdout.log, pid_N_stderr.log) points at, or as ANALYSIS_FILE's
    # own text (2024: a ``content`` column). (An empty string is left: it may be another
    # column's empty text.)
    for holder in ("ProcessStreams", "ANALYSIS_FILE"):
        columns = {c.name for c in db[holder].columns} if holder in tables else set()
        if "contentId" in columns and "StringIds" in tables:
            conn.execute(f"update StringIds set value = ? where id in (select contentId from {holder}) and value != ''", (PROGRAM_OUTPUT,))
        if "content" in columns:
            conn.execute(f"update {holder} set content = ? where content is not null and length(content) > 0", (PROGRAM_OUTPUT,))
    dropped = []
    for name in tables:
        if DROP_TABLES_PATTERN.search(name):
            db[name].drop()
            dropped.append(name)
    removed = 0
    tables = db.table_names()
    if "META_DATA_CAPTURE" in tables:
        names = [r[0] for r in conn.execute("select name from META_DATA_CAPTURE")]
        drop = [n for n in names if not CAPTURE_KEEP.match(n or "")]
        conn.executemany("delete from META_DATA_CAPTURE where cast(name as blob) = ?", [(_stored(n),) for n in drop])
        removed = len(drop)
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if meta in tables:
            for key, val in EXPORT_META_BLANK.items():
                conn.execute(f"update {meta} set value = ? where name = ?", (val, key))
    renamed = _renamed_ranges(conn, tables, hosts)
    changed = 0
    for table in db.tables:
        for col in (c.name for c in table.columns):  # every column: nsys's declared types are not a promise
            cur = conn.execute(
                # as a blob: SQLite hands text that is not UTF-8 to Python only as bytes
                f'update "{table.name}" set "{col}" = cast(tr_scrub(cast("{col}" as blob)) as text) '
                f'where typeof("{col}") = \'text\' and cast("{col}" as blob) is not tr_scrub(cast("{col}" as blob))'
            )
            changed += cur.rowcount if cur.rowcount > 0 else 0
            cur = conn.execute(
                f'update "{table.name}" set "{col}" = tr_scrub_bytes("{col}") '
                f'where typeof("{col}") = \'blob\' and "{col}" is not tr_scrub_bytes("{col}")'
            )
            changed += cur.rowcount if cur.rowcount > 0 else 0
    conn.commit()
    conn.execute("vacuum")
    conn.close()
    return ScrubSummary(str(path), tuple(dropped), removed, changed, renamed)


def _scrubbed_as_stored(value: bytes, hosts: tuple[str, ...]) -> bytes:
    """A text value's bytes as SQLite stores them, scrubbed (``scrub_text``), as bytes: bytes
    that are not UTF-8 kept as they were (read and written back with ``surrogateescape``), so
    that names differing only in them stay apart (read with replacement characters, ``ph\\xfe``
    and ``ph\\xff`` had become one range name, their phases merged, unsaid)."""
    return _stored(scrub_text(value.decode("utf-8", "surrogateescape"), hosts))


def _renamed_ranges(conn, tables: list[str], hosts: tuple[str, ...]) -> tuple[str, ...]:
    """The NVTX range names (their own text or their StringIds entry) that scrubbing changes,
    as they will read, sorted."""
    if "NVTX_EVENTS" not in tables:
        return ()
    cols = {r[1] for r in conn.execute("pragma table_info('NVTX_EVENTS')")}
    names: set[str] = set()
    if "text" in cols:
        names |= {r[0] for r in conn.execute("select distinct text from NVTX_EVENTS where typeof(text) = 'text'")}
    if "textId" in cols and "StringIds" in tables:
        names |= {r[0] for r in conn.execute("select value from StringIds where id in (select textId from NVTX_EVENTS) and typeof(value) = 'text'")}
    # (as every command reads them: bytes that are not UTF-8 as \\xNN escapes)
    return tuple(sorted({_stored(new).decode("utf-8", "backslashreplace") for name in names if (new := scrub_text(name, hosts)) != name}))


def _stored(text: str) -> bytes:
    """Text read with ``surrogateescape`` (``_scrub_in_place``'s connection) as its bytes."""
    return text.encode("utf-8", "surrogateescape")


def scrub_run_dir(folder: str | os.PathLike) -> tuple[list[str], list[str]]:
    """``run --scrub``: scrub every text of ``run.json`` (the command line, nsys's path and
    arguments) and delete each ``.nsys-rep`` / ``.qdstrm`` file, which holds everything the
    scrubbed export no longer does, once that export (the same name, ``.sqlite``) is there. One
    whose import or export failed is the run's only copy of its trace (the error says how to
    retry with it): it is kept. Returns the names of the files removed and of those kept."""
    d = Path(folder)
    removed, kept = [], []
    for f in sorted(list(d.glob("*.nsys-rep")) + list(d.glob("*.qdstrm"))):
        if not f.with_suffix(".sqlite").is_file():
            kept.append(f.name)
            continue
        f.unlink()
        removed.append(f.name)
    run = d / RUN_JSON
    if run.is_file():
        doc = json.loads(run.read_text())

        def clean(x):
            if isinstance(x, str):
                return scrub_text(x)
            if isinstance(x, list):  # an argument list: an option's value is the next entry
                return scrub_argv(x) if all(isinstance(v, str) for v in x) else [clean(v) for v in x]
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            return x

        doc = clean(doc)
        for r in doc.get("reports", []):
            r["nsys_rep"] = None  # removed above
        run.write_text(json.dumps(doc, indent=2) + "\n")
    return removed, kept
