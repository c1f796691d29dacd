"""Every real input's results, as one JSON line each, to compare two versions of tracerecon.

Not a test: a developer's check that a change moved no number it was not meant to. Each
export under ``sample_traces/`` and ``../shared/traces/`` (but ``big/``) is loaded alone, cache
off, and each of its ranks' tables (ranges, GPU ops, syncs, phases, cycles) is written as its
row count and a digest of its rows; with the report's JSON and the warnings. Each folder holding
two or more exports is loaded as one run too (its report JSON and warnings).

    PYTHONPATH=TREE python tests/regression_dump.py OUT.jsonl [-j 2] [--only SUBSTRING]
    python tests/regression_dump.py --compare OLD.jsonl NEW.jsonl

The second form names each input whose line differs, and which of its parts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACES = (ROOT / "sample_traces", ROOT.parent / "shared" / "traces")


def inputs() -> list[tuple[str, list[str]]]:
    """(name, files) for every export alone and every folder of two or more exports."""
    out, folders = [], {}
    for place in PLACES:
        if not place.is_dir():
            continue
        for f in sorted(place.rglob("*")):
            if "big" in f.relative_to(place).parts[:1] or not (f.name.endswith(".sqlite") or f.name.endswith(".sqlite.xz")):
                continue
            # (named from the place on: the same in any checkout's directory)
            name = f"{place.name}/{f.relative_to(place)}"
            out.append((name, [str(f)]))
            folders.setdefault((place, f.parent), []).append(str(f))
    for (place, folder), files in sorted(folders.items()):
        if len(files) >= 2:
            out.append((f"{place.name}/{folder.relative_to(place)}/", [str(folder)]))
    return out


def _digest(table) -> dict:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table.combine_chunks() if table.num_rows else table)
    return {"rows": table.num_rows, "sha": hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]}


def dump_one(item: tuple[str, list[str]]) -> dict:
    os.environ["TRACERECON_NO_CACHE"] = "1"
    from tracerecon import api
    from tracerecon.errors import TraceReconError

    name, files = item
    try:
        analysis = api.load(files, jobs=1)
        report = api.report(files, jobs=1, analysis=analysis)
    except TraceReconError as exc:
        return {"input": name, "error": str(exc), "exit": exc.exit_code}
    line = {"input": name, "warnings": list(analysis.warnings), "report": report.to_json()}
    # (the lines under each rank's table: the report JSON has not the "most misleading" pick)
    from tracerecon.present import rank_notes

    line["notes"] = {str(r.rank): [text for text, _ in rank_notes(r, report.skip_cycles)] for r in report.ranks}
    if len(files) == 1 and not Path(files[0]).is_dir():
        line["ranks"] = {str(r.rank): {t: _digest(getattr(r, t)) for t in ("ranges", "gpu_ops", "syncs", "phases", "cycles")} for r in analysis.ranks}
    return line


def compare(old: str, new: str) -> int:
    def lines(path):
        return {d["input"]: d for d in map(json.loads, Path(path).read_text().splitlines())}

    a, b = lines(old), lines(new)
    changed = 0
    for name in sorted(set(a) | set(b)):
        if a.get(name) == b.get(name):
            continue
        changed += 1
        if name not in a or name not in b:
            print(f"{name}: only in {'new' if name not in a else 'old'}")
            continue
        parts = sorted(k for k in set(a[name]) | set(b[name]) if a[name].get(k) != b[name].get(k))
        print(f"{name}: {', '.join(parts)}")
    print(f"{len(set(a) | set(b))} inputs, {changed} differ")
    return 1 if changed else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    items = [i for i in inputs() if args.only in i[0]]
    with ProcessPoolExecutor(args.j) as pool, open(args.out, "w") as fh:
        for line in pool.map(dump_one, items):
            fh.write(json.dumps(line, sort_keys=True) + "\n")
    print(f"{len(items)} inputs -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
