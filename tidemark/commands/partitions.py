"""tidemark partitions: every event date with its current deduplicated version, the receipt
partitions pending deduplication (complete, but not in the current version) and the lag (how long
the oldest pending one has waited). Reads markers only: cheap on a bucket, no JVM."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    p = subparsers.add_parser("partitions", help="event dates: current version, pending receipts, lag",
                              description=__doc__)
    p.add_argument("--lake", required=True)
    p.add_argument("--json", action="store_true", help="one JSON object per date")
    p.set_defaults(handler=run)


def run(args) -> int:
    from tidemark.commands.status import wide_console
    from rich.table import Table

    from tidemark import inspect

    rows = inspect.partitions(args.lake)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    table = Table(title=f"event dates in {args.lake}")
    for column in ("event_date", "current version", "sessions", "receipts", "pending", "lag"):
        table.add_column(column)
    for row in rows:
        pending = str(row["pending"]) if row["pending"] else "0"
        table.add_row(row["event_date"], row["version"] or "[red]none yet[/]",
                      "" if row["sessions"] is None else str(row["sessions"]), str(row["receipts"]),
                      f"[yellow]{pending}[/]" if row["pending"] else pending,
                      f"{row['lag_s']:.0f}s" if row["pending"] else "-")
    wide_console().print(table)
    if not rows:
        print(f"no event dates in {args.lake}")
    return 0
