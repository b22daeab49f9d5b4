"""tidemark landing: the landing folder against the stream's landing ledger (docs/input-contract.md).

Lists what the stream has not read and why: files no micro-batch has read yet (pending), files
under an in-progress name (`._COPYING_`, `.tmp`, `.part`: read once renamed), and files replaced
under a name already read (their new content is quarantined by the stream's audit, not read as
events). Read-only: it quarantines nothing itself. Exit status 0 when nothing is replaced, 3 when
some file was replaced and not yet quarantined by the stream.

With --archive (the stream's `--archive`): the files read and moved out of the landing, per day
received, and a file under a name already archived counts as pending (read in the stream's next
checkpoint generation), not as replaced.
"""

from __future__ import annotations

import argparse
import json
import sys

from tidemark.commands.options import LAKE, Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark landing` to the subcommands."""
    p = subparsers.add_parser(
        "landing", help="what the stream has not read from the landing, and why", description=__doc__
    )
    p.add_argument("--landing", required=True, help="landing folder or URI")
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--archive", default=None, help="the stream's archive folder (tidemark stream --archive)")
    p.add_argument("--format", choices=["json", "table"], default="table", help="one JSON object, or a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark landing`; its exit status."""
    # lazy: the ledger's modules pull pyarrow, rich costs the CLI's start (tidemark.commands.console)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tidemark.base import layout
    from tidemark.ingest import landing_archive, landing_ledger

    found = landing_ledger.audit(args.landing, args.lake, args.archive)
    status = 3 if found.replaced else 0
    archived = None
    if args.archive:
        archived = landing_archive.archived_days(args.archive)
    if args.format == "json":
        out = found.to_json()
        if archived is not None:
            out["archived"] = {layout.event_date_text(day): count for day, count in sorted(archived.items())}
        sys.stdout.write(json.dumps(out) + "\n")
        return status
    table = Table(title=f"landing: {len(found.read)} file(s) read, {len(found.hidden)} hidden")
    table.add_column("file", overflow="fold")
    table.add_column("state")
    for path in found.pending:
        table.add_row(escape(path), "pending: not read yet")
    for item in found.in_progress:
        table.add_row(escape(item.path), "in progress: read once renamed")
    for item in found.replaced:
        table.add_row(escape(item.path), "replaced after it was read: not read again")
    Console().print(table)
    if archived is not None:
        days = Table(title=f"archive: {sum(archived.values())} file(s) read and moved out of the landing")
        days.add_column("received")
        days.add_column("files", justify="right")
        for day, count in sorted(archived.items()):
            days.add_row(layout.event_date_text(day), str(count))
        Console().print(days)
    return status
