"""tidemark reindex: build the receipt index of a lake written before it (the one-time migration).

Planning reads the receipt index (tidemark/panes/receipt_index.py) instead of every marker of the lake once
the index is complete. A lake whose stream started on an empty lake is indexed from its first
partition; a lake written by an older tidemark is indexed by this command, which reads every marker
once and then marks the index complete. Safe to run while the stream runs, and to rerun. On a
terminal a progress bar shows the dates indexed and left; the logs get progress lines.
"""

from __future__ import annotations

import argparse
import json
import sys

from tidemark.commands.options import LAKE, Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark reindex` to the subcommands."""
    p = subparsers.add_parser(
        "reindex", help="build the receipt index of a lake written before it (once)", description=__doc__
    )
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark reindex`; its exit status."""
    # lazy: rich (tidemark.commands.console), the receipts' module pulls pyarrow
    from tidemark.commands import progress_bar
    from tidemark.panes import receipts

    dates = receipts.list_event_dates(args.lake)
    with progress_bar.kill_interrupts(), progress_bar.shown() as display:
        spanning = receipts.reindex(args.lake, display=display)
    sys.stdout.write(
        json.dumps(
            {"lake": str(args.lake), "event_dates": len(dates), "spanning_partitions": spanning, "complete": True}
        )
        + "\n"
    )
    return 0
