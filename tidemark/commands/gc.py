"""tidemark gc: expire old snapshots of the deduplicated table, and remove unreferenced files.

Expired: the snapshots that stopped being current longer than the retention ago; removed: the files
nothing references any more (superseded versions, leftovers of killed or refused runs, old
metadata). Retentions below 1h are refused; the current version of every date is always kept.

Then the packing pass (tidemark/panes/pack_maintenance.py): every closed date with 500 or more receipt
partitions that no pack holds gets a pack of them (at most 50,000 partitions read per pass, newest
dates first); `--no-pack` skips it, `--dry-run` says which dates it would pack. One JSON line per
removal, then one per date packed ("what": "pack written", or would be with --dry-run). On a
terminal, a progress bar (stderr) shows the dates examined and packed, and the time left.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

from tidemark.base.durations import parse_duration
from tidemark.commands.options import LAKE, Subparsers, checked


def _retention(text: str) -> timedelta:
    """THE parse of --retention: a duration gc accepts."""
    from tidemark.ops import gc  # lazy: pulls pyarrow

    return gc.check_retention(parse_duration(text))


def register(subparsers: Subparsers) -> None:
    """Add `tidemark gc` to the subcommands."""
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
    p.add_argument("--dry-run", action="store_true", help="list what would be removed and packed, change nothing")
    p.add_argument("--no-pack", dest="pack", action="store_false", help="skip the packing pass of closed dates")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark gc`; its exit status."""
    # lazy: rich (tidemark.commands.console), and the lake's modules pull pyarrow
    from tidemark.commands import progress_bar
    from tidemark.ops import gc
    from tidemark.panes import pack_maintenance

    with progress_bar.kill_interrupts(), progress_bar.shown() as display:
        removed = gc.gc(args.lake, args.retention, dry_run=args.dry_run, display=display)
        for item in removed:
            sys.stdout.write(json.dumps({**item.to_json(), "dry_run": args.dry_run}) + "\n")
        if args.pack:  # after the removals: a pack written now is never judged by this gc
            for done in pack_maintenance.run_pass(args.lake, dry_run=args.dry_run, display=display).packed:
                sys.stdout.write(json.dumps({"what": "pack written", **done.to_json(), "dry_run": args.dry_run}) + "\n")
    return 0
