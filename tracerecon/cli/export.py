"""``tracerecon export``: per-rank parquet datasets and ``manifest.json``, or one timeline file
(Chrome trace-event JSON or a native Perfetto trace)."""

from __future__ import annotations

import argparse
import os

from tracerecon.cli.common import add_analysis_command, config_from, load, output_path, say
from tracerecon.json_text import one_line


def add(sub) -> None:
    p = add_analysis_command(
        sub, "export", help="per-rank parquet datasets (ranges, phases, cycles, gpu_ops, syncs, collectives, critical_path) + manifest.json",
        description="Writes DIR/<table>/rank=<R>/part-0.parquet for ranges, phases, cycles, gpu_ops, syncs and collectives, "
                    "DIR/critical_path/part-0.parquet and DIR/manifest.json. `tracerecon report DIR` reads it back as the same report. "
                    "--format perfetto (native Perfetto trace, needs the `perfetto` extra) or --format chrome-json writes one "
                    "timeline file for ui.perfetto.dev instead.",
    )
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="DIR|FILE", help="output directory (parquet), replaced whole (a previous export there goes; anything else needs --force); "
                   "with --format perfetto or chrome-json, the output file (any name, e.g. run.pftrace / run.json)")
    p.add_argument("--format", choices=["parquet", "perfetto", "chrome-json"], default=None,
                   help="parquet (the default, unless -o ends in .pftrace / .perfetto-trace: perfetto, or .json: chrome-json): per-rank datasets; perfetto: one native Perfetto trace (protobuf) for ui.perfetto.dev, "
                        "compact and quick to open (needs the `perfetto` extra: pip install 'tracerecon[perfetto]'); chrome-json: the same "
                        "timeline as Chrome trace-event JSON, for tools that read only that (chrome://tracing). Both hold per rank the "
                        "CPU phases against the GPU phases, waits, every GPU op per stream, flows for waits and collectives")
    p.add_argument("--force", action="store_true", help="replace DIR even when it holds something other than a tracerecon export")
    p.set_defaults(func=main)


# Without --format, a timeline file's usual name says which one (a parquet export is a folder).
FORMAT_BY_SUFFIX = {".pftrace": "perfetto", ".perfetto-trace": "perfetto", ".json": "chrome-json"}
# Names of single table files: a parquet export there is a folder all the same, so it is said.
TABLE_FILE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xls")
PICTURE_SUFFIXES = (".svg", ".png", ".pdf", ".jpg", ".jpeg")


def main(args: argparse.Namespace) -> int:
    from tracerecon import api

    implied = next((f for suffix, f in FORMAT_BY_SUFFIX.items() if os.fsdecode(args.output).lower().endswith(suffix)), None)
    if args.format is None:
        args.format = implied or "parquet"
    elif implied is not None and implied != args.format:  # (a JSON file holding a protobuf trace, a folder named .json)
        what = "a folder of parquet tables" if args.format == "parquet" else f"a {args.format} timeline"
        say(f"warning: -o {one_line(os.fsdecode(args.output))} is named like a {implied} file; writing {what}, as --format {args.format} asks")

    table_file = next((sfx for sfx in TABLE_FILE_SUFFIXES if os.fsdecode(args.output).lower().endswith(sfx)), None)
    picture = next((sfx for sfx in PICTURE_SUFFIXES if os.fsdecode(args.output).lower().endswith(sfx)), None)
    if args.format == "parquet" and table_file:
        say(f"warning: -o {one_line(os.fsdecode(args.output))} is named like a {table_file[1:].upper()} file; writing a folder of parquet "
            "tables, as tracerecon writes no such file (pandas, polars or DuckDB read the parquet and write one)")
    elif args.format == "parquet" and picture:
        say(f"warning: -o {one_line(os.fsdecode(args.output))} is named like a {picture[1:].upper()} picture; writing a folder of parquet "
            "tables (`tracerecon plot TRACE -o FILE` draws the picture)")
    if args.format == "perfetto":
        from tracerecon.timeline_export import perfetto_messages

        perfetto_messages()  # a missing extra is said before the traces are read
    from pathlib import Path

    from tracerecon.nsys.read_plan import refuse_file_over_a_trace
    from tracerecon.run_dir import refuse_linked_folder, refuse_output_over_inputs, refuse_replacing_what_a_folder_reads, refuse_special_output

    # As given (an export directory too), before anything is read.
    refuse_output_over_inputs(Path(args.output), args.traces)
    if args.format in ("chrome-json", "perfetto"):
        refuse_special_output(Path(args.output))
        refuse_replacing_what_a_folder_reads(Path(args.output))
        refuse_file_over_a_trace(Path(args.output))
    else:
        refuse_linked_folder(Path(args.output))
    analysis = load(args.traces, config_from(args), args.jobs, args.dask)
    if args.format in ("chrome-json", "perfetto"):
        counts = api.export_timeline(analysis, args.output, args.format)
        print(f"wrote {one_line(os.fsdecode(args.output))}: {len(analysis.ranks)} rank(s); " + ", ".join(f"{k} {v}" for k, v in counts.items()) + " (open it in ui.perfetto.dev)")
        return 0
    manifest = api.export(analysis, args.output, force=args.force)
    rows = {t: (sum(v["rows_per_rank"].values()) if "rows_per_rank" in v else v["rows"]) for t, v in manifest["tables"].items()}
    print(f"wrote {one_line(os.fsdecode(args.output))}: {len(analysis.ranks)} rank(s); " + ", ".join(f"{t} {n}" for t, n in rows.items()))
    return 0
