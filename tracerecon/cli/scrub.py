"""``tracerecon scrub``: a copy of an export that is safe to share."""

from __future__ import annotations

import argparse
import os

from tracerecon.cli.common import output_path, say, warn_all
from tracerecon.json_text import one_line


def add(sub) -> None:
    p = sub.add_parser(
        "scrub", help="write a copy of an nsys SQLite export that is safe to share",
        description="Copies TRACE and, in the copy only, drops captured environment tables and call chains, keeps only allow-listed "
                    "capture metadata, blanks host and user names, redacts environment assignments and secret-looking values in every "
                    "text value and blob, replaces every absolute path with [path], IP addresses with [ip], the trace's host names "
                    "with [host], drops the program's captured output, and vacuums. The analysis of the copy is identical to the original's, "
                    "but for NVTX range names that held such text: they read as scrubbed (said), and a --phase naming one must name it so.",
    )
    p.add_argument("trace", metavar="TRACE.sqlite", help="the export to copy (never modified)")
    p.add_argument("-o", "--output", type=output_path, metavar="OUT", help="output file, xz-compressed if named .xz (default: TRACE.scrubbed.sqlite in the current directory, not over a file there)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from tracerecon.nsys.scrub import scrub_export

    s = scrub_export(args.trace, args.output)
    print(f"wrote {one_line(os.fsdecode(s.output))}: dropped {len(s.dropped_tables)} table(s), {s.capture_entries_removed} capture entries, changed {s.text_values_changed} text value(s)")
    warn_all(s.warnings)
    if s.renamed_ranges:
        shown = ", ".join(repr(n) for n in s.renamed_ranges[:5]) + (", ..." if len(s.renamed_ranges) > 5 else "")
        say(f"warning: {len(s.renamed_ranges)} NVTX range name(s) held a path, an address or a secret and read in the copy as {shown}: "
            "a --phase naming one must name it so there")
    return 0
