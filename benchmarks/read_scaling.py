"""How the two bulk reads of a cold ``report`` scale with the connections they are cut into,
and what part of a read is SQLite's and what part the Arrow buffers the driver fills.

    python3 benchmarks/read_scaling.py TRACE.sqlite [ROUNDS] [THREADS,THREADS,...]

For the kernels and the filtered CUDA API calls (the very SQL ``report`` runs,
``tracerecon.nsys.read_plan``), each cut into N rowid ranges read at once on N threads:

- ``sqlite``: the same rows and columns aggregated inside SQLite (``select total(...)``), so
  no value leaves SQLite: the scan and the record decoding alone (Python's sqlite3 releases the
  GIL while a statement steps);
- ``adbc``: the read ``report`` makes (the ADBC driver fills one Arrow batch per part), until
  every part's rows are in the driver's buffers;
- ``adbc+numpy``: the same and the parts taken as numpy columns (``fetch_int_columns``).

Rounds alternate the thread counts; the median wall time of each is printed, with the CPU time
(user + system) the process spent in it. Nothing is written beside the trace.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sqlite3
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracerecon.nsys import native_read, read_plan  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def reads(path: Path) -> dict[str, tuple[str, list[str], str]]:
    """name -> (uri, column expressions, rest) of the two bulk reads of ``path``."""
    conn = read_plan.open_readonly(path)
    try:
        tables = read_plan.table_names(conn)
        out = {}
        out["api_calls"] = (conn.bulk_uri, *read_plan.split_select(read_plan.api_calls_sql(read_plan.relevant_name_ids(*read_plan.string_rows(conn, tables)))))
        out["kernels"] = (conn.bulk_uri, *read_plan.split_select(read_plan.kernels_sql(read_plan.columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL"))))
        return out
    finally:
        conn.close()


def sqlite_total(uri: str, exprs: list[str], rest: str, n: int) -> None:
    parts = native_read._parts(uri, rest, n)
    plain = native_read._plain(exprs)
    queries = [q.replace("select " + ", ".join(plain), "select " + " + ".join(f"total({e})" for e in plain), 1) for q in parts.queries(plain)]

    def run(q: str) -> float:
        c = sqlite3.connect(uri, uri=True)
        try:
            return c.execute(q).fetchone()[0]
        finally:
            c.close()

    with ThreadPoolExecutor(len(queries)) as pool:
        list(pool.map(run, queries))


def adbc(uri: str, exprs: list[str], rest: str, n: int, take: bool) -> None:
    parts = native_read._parts(uri, rest, n)
    futures = native_read._execute_all(uri, parts, native_read._plain(exprs), inline_one=True)
    for fut in futures:
        ex = fut.result()
        if take:
            native_read._int64_columns(ex.table(), len(native_read._plain(exprs)), nulls=True)
        else:
            ex.close()


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    rounds = int(argv[1]) if len(argv) > 1 else 5
    threads = [int(t) for t in argv[2].split(",")] if len(argv) > 2 else [1, 2, 4, 7, 14]
    for module in ("numpy", "pyarrow"):  # imported before any clock starts
        importlib.import_module(module)

    plan = reads(path)
    ways = {"sqlite": lambda u, e, r, n: sqlite_total(u, e, r, n), "adbc": lambda u, e, r, n: adbc(u, e, r, n, False),
            "adbc+numpy": lambda u, e, r, n: adbc(u, e, r, n, True)}
    results: dict[tuple, list[tuple[float, float]]] = {}
    for i in range(rounds):
        order = threads if i % 2 == 0 else threads[::-1]
        for name, (uri, exprs, rest) in plan.items():
            for way, fn in ways.items():
                for n in order:
                    c, t = _cpu(), time.perf_counter()
                    fn(uri, exprs, rest, n)
                    results.setdefault((name, way, n), []).append((time.perf_counter() - t, _cpu() - c))
    print(f"{'read':10} {'way':11} " + " ".join(f"{n:>16}" for n in threads))
    for name in plan:
        for way in ways:
            cells = []
            for n in threads:
                runs = results[(name, way, n)]
                cells.append(f"{statistics.median(w for w, _ in runs):7.3f}s/{statistics.median(c for _, c in runs):6.3f}c")
            print(f"{name:10} {way:11} " + " ".join(f"{c:>16}" for c in cells))
    print("(each cell: median wall seconds / median CPU seconds of the process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
