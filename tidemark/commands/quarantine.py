"""tidemark quarantine: list malformed input lines with the reason they were refused."""
from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("quarantine", help="list quarantined (malformed) input lines",
                              description=__doc__)
    p.add_argument("--lake", required=True)
    p.add_argument("--format", choices=["jsonl", "table"], default="table")
    p.set_defaults(handler=run)


def run(args) -> int:
    from tidemark.quarantine import read_quarantine

    rows = read_quarantine(args.lake)
    if args.format == "jsonl":
        for row in rows:
            sys.stdout.write(json.dumps(row, default=str) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"quarantine: {len(rows)} line(s)")
    for column in ("receipt_ts", "source_file", "reason", "raw"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["receipt_ts"], row["source_file"], row["reason"], row["raw"][:200])
    Console().print(table)
    return 0
