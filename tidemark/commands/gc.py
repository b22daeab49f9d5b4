"""tidemark gc: expire snapshots of the deduplicated table that stopped being current longer than
the retention ago, and remove the files nothing references any more (superseded versions, leftovers
of killed or refused runs, old metadata). Retentions below 1h are refused; the current version of
every date is always kept."""

from __future__ import annotations

import json
import sys

from tidemark.commands.options import LAKE, checked


def _retention(text: str):
    from tidemark.base.durations import parse_duration
    from tidemark.ops import gc

    return gc.check_retention(parse_duration(text))


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gc", help="expire old snapshots and remove unreferenced files after a retention", description=__doc__
    )
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument(
        "--retention",
        default="7d",
        type=checked(_retention, "retention"),
        help="keep what stopped being current for this long (at least 1h)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed")
    p.set_defaults(handler=run)


def run(args) -> int:
    from dataclasses import asdict

    from tidemark.ops import gc

    removed = gc.gc(args.lake, args.retention, dry_run=args.dry_run)
    for item in removed:
        sys.stdout.write(json.dumps({**asdict(item), "dry_run": args.dry_run}) + "\n")
    return 0
