"""tidemark quarantine: list refused input lines with the reason they were refused.

Raw lines are shown whatever their bytes: in jsonl as text when they are UTF-8
("raw_encoding": "utf-8") and as base64 otherwise ("raw_encoding": "base64"); in the table with
invalid bytes and control characters escaped.
"""

from __future__ import annotations

import argparse
import json
import sys

from tidemark.commands.options import LAKE, Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark quarantine` to the subcommands."""
    p = subparsers.add_parser("quarantine", help="list quarantined (refused) input lines", description=__doc__)
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--format", choices=["jsonl", "table"], default="table", help="one JSON object per line, or a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark quarantine`; its exit status."""
    # lazy: the quarantine's module pulls pyarrow, rich costs the CLI's start (tidemark.commands.console)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tidemark.ingest.quarantine import display_raw, read_quarantine, to_json_record

    rows = read_quarantine(args.lake)
    if args.format == "jsonl":
        for row in rows:
            sys.stdout.write(json.dumps(to_json_record(row), default=str) + "\n")
        return 0
    table = Table(title=f"quarantine: {len(rows)} line(s)")
    for column in ("receipt_ts", "source_file", "reason", "raw"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["receipt_ts"],
            escape(str(row["source_file"])),
            escape(row["reason"]),
            escape(display_raw(row["raw"] or b"")),
        )
    Console().print(table)
    return 0
