"""tidemark gc: remove deduplicated versions superseded for longer than the retention, and the
leftovers of killed or losing runs. The current and the newest version are always kept."""
from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("gc", help="remove superseded deduplicated versions after a retention",
                              description=__doc__)
    p.add_argument("--lake", required=True)
    p.add_argument("--retention", default="7d",
                   help="keep a superseded version this long after it was superseded (default 7d)")
    p.add_argument("--event-date", action="append", default=None,
                   help="only this event date (repeatable); default every date")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed")
    p.set_defaults(handler=run)


def run(args) -> int:
    from dataclasses import asdict

    from tidemark import layout, publish
    from tidemark.durations import parse_duration

    retention = parse_duration(args.retention)
    dates = [layout.check_event_date(d) for d in args.event_date] if args.event_date else None
    removed = publish.gc(args.lake, retention, event_dates=dates, dry_run=args.dry_run)
    for item in removed:
        sys.stdout.write(json.dumps({**asdict(item), "dry_run": args.dry_run}) + "\n")
    return 0
