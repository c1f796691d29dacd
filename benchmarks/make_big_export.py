"""Make a large, realistic nsys export from a real one: its activity repeated, each copy shifted
later in time with fresh correlation ids and event record numbers, until the file is as big as
asked.

    python benchmarks/make_big_export.py SRC.sqlite[.xz] OUT.sqlite --size-gb 1

Every table with a ``start`` column is repeated (kernels, memcpys, runtime calls, syncs, NVTX,
OS runtime calls...), and the CUDA event records with it. Copy k is shifted by k x (the trace's
span + 1 ms), so cycles follow each other as in a longer run of the same engine; correlation
ids move by k x (largest id + 1) in every table that has them, so each kernel still links to its
own launch, and event record numbers (``eventSyncId``) move the same way, so stream waits
still name their own records. Everything else (strings, processes, devices) is shared. The
result is an ordinary export: ``tracerecon`` and ``nsys stats`` read it like the source.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import sqlite3
import sys
import time
from pathlib import Path

GAP_NS = 1_000_000


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"pragma table_info('{table}')")]


def repeated_tables(db: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
    return [t for t in names if "start" in columns(db, t) or t == "CUPTI_ACTIVITY_KIND_CUDA_EVENT"]


def make(src: Path, out: Path, size_bytes: int) -> dict:
    t0 = time.perf_counter()
    if out.exists() and src.exists() and out.samefile(src):
        raise ValueError(f"{out} is the export to repeat: name another output")
    src.open("rb").close()  # (a missing source said before the output is touched)
    written = False
    try:
        with open(out, "wb") as fout:
            written = True  # (from here the output is ours: a file that could not be opened is not)
            with (lzma.open(src) if src.name.endswith(".xz") else open(src, "rb")) as fin:
                shutil.copyfileobj(fin, fout, 1 << 20)
        return _grow(src, out, size_bytes, t0)
    except BaseException:
        if written:
            out.unlink(missing_ok=True)  # a half-made output is never left to be read as an export
        raise


def _grow(src: Path, out: Path, size_bytes: int, t0: float) -> dict:
    db = sqlite3.connect(out)
    db.execute("pragma journal_mode = off")
    db.execute("pragma synchronous = off")
    tables = repeated_tables(db)
    lo, hi, max_corr, max_sync = None, None, 0, 0
    for t in tables:
        cols = columns(db, t)
        if "start" in cols:
            a, b = db.execute(f"select min(start), max(coalesce(end, start)) from {t}").fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        if "correlationId" in cols:
            max_corr = max(max_corr, db.execute(f"select coalesce(max(correlationId), 0) from {t}").fetchone()[0])
        if "eventSyncId" in cols:
            max_sync = max(max_sync, db.execute(f"select coalesce(max(eventSyncId), 0) from {t} where eventSyncId != 4294967295").fetchone()[0])
    if lo is None:
        raise ValueError(f"{src}: no timed activity to repeat (is it an nsys export?)")
    span = (hi - lo) + GAP_NS
    rows = {t: db.execute(f"select max(rowid) from {t}").fetchone()[0] or 0 for t in tables}
    copies = 1
    while out.stat().st_size < size_bytes:
        shift_t, shift_c, shift_s = copies * span, copies * (max_corr + 1), copies * (max_sync + 1)
        for t in tables:
            cols = columns(db, t)
            pk = {r[1] for r in db.execute(f"pragma table_info('{t}')") if r[5]}  # primary-key columns get fresh values
            exprs = []
            for c in cols:
                if c in pk:
                    exprs.append("NULL")
                elif c in ("start", "end"):
                    exprs.append(f"{c} + {shift_t}")
                elif c == "correlationId":
                    exprs.append(f"{c} + {shift_c}")
                elif c == "eventSyncId":
                    exprs.append(f"case when {c} = 4294967295 then {c} else {c} + {shift_s} end")
                else:
                    exprs.append(f'"{c}"')
            names = ", ".join(f'"{c}"' for c in cols)
            db.execute(f"insert into {t} ({names}) select {', '.join(exprs)} from {t} where rowid <= {rows[t]} order by rowid")
        db.commit()
        copies += 1
    db.close()
    return {"copies": copies, "bytes": out.stat().st_size, "seconds": round(time.perf_counter() - t0, 1)}


def size_gb(text: str) -> float:
    """A size in GiB: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a size in GiB above 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-gb", type=size_gb, default=1.0)
    args = ap.parse_args(argv)
    try:
        info = make(args.src, args.out, int(args.size_gb * (1 << 30)))
    except (OSError, EOFError, lzma.LZMAError, sqlite3.Error, ValueError) as exc:
        print(f"make_big_export.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {info['bytes'] / (1 << 30):.2f} GiB, {info['copies']} copies of {args.src.name}, {info['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
