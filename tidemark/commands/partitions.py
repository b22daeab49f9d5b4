"""tidemark partitions: every event date's current deduplicated version, what is pending, and why.

Each event date with its current deduplicated version, the receipt
partitions pending deduplication (complete, but not in the current version), the lag (how long
the oldest pending one has waited), and whether the current version is stale and why (the reasons
`tidemark reconcile` acts on: receipts a run of the date would read that the version lacks,
including other dates' receipts its multi-day sessions reach; a rerun owed by another date; a
version planned by an older tidemark; rules changed). Reads markers and the table's metadata only:
cheap on a bucket, no JVM.
"""

from __future__ import annotations

import argparse
import json

from tidemark.base.layout import event_date_text
from tidemark.commands.console import wide_console
from tidemark.commands.options import EVENT_DATE, LAKE, Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark partitions` to the subcommands."""
    p = subparsers.add_parser(
        "partitions", help="event dates: current version, pending receipts, lag", description=__doc__
    )
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--json", action="store_true", help="one JSON object per date")
    p.add_argument("--since", type=EVENT_DATE, help="only event dates from this one (YYYY-MM-DD)")
    p.add_argument("--until", type=EVENT_DATE, help="only event dates up to this one (YYYY-MM-DD)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark partitions`; its exit status."""
    # lazy: rich costs the CLI's start (tidemark.commands.console), the lake's modules pull pyarrow
    from rich.table import Table

    from tidemark.ops import inspect
    from tidemark.orchestration import reconcile

    since, until = args.since, args.until
    rows = inspect.partitions(args.lake, since=since, until=until)
    # every stale date of the lake, from what changed since reconciliation's last pass, by its text
    # as the rows spell it
    stale = {
        event_date_text(item.event_date): item
        for item in reconcile.staleness(args.lake)
        if (not since or item.event_date >= since) and (not until or item.event_date <= until)
    }
    known = {row["event_date"] for row in rows}
    for text in stale:
        if text not in known:  # only owed a rerun: no receipts, no version yet
            rows.append(
                {
                    "event_date": text,
                    "version": None,
                    "sessions": None,
                    "version_created_at": None,
                    "receipts": 0,
                    "included": 0,
                    "pending": 0,
                    "pending_receipts": [],
                    "newest_receipt": None,
                    "lag_s": 0.0,
                }
            )
    rows.sort(key=lambda r: r["event_date"])
    for row in rows:
        stale_item = stale.get(row["event_date"])
        row["stale"] = sorted(set(stale_item.kinds)) if stale_item else []
        row["why"] = stale_item.reasons if stale_item else []
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    table = Table(title=f"event dates in {args.lake}")
    for column in ("event_date", "current version", "sessions", "receipts", "pending", "lag", "stale: why"):
        table.add_column(column, overflow="fold")
    for row in rows:
        pending = str(row["pending"]) if row["pending"] else "0"
        table.add_row(
            row["event_date"],
            row["version"] or "[red]none yet[/]",
            "" if row["sessions"] is None else str(row["sessions"]),
            str(row["receipts"]),
            f"[yellow]{pending}[/]" if row["pending"] else pending,
            f"{row['lag_s']:.0f}s" if row["pending"] else "-",
            "[yellow]" + "\n".join(row["why"]) + "[/]" if row["why"] else "",
        )
    wide_console().print(table)
    if not rows:
        print(f"no event dates in {args.lake}")
    return 0
