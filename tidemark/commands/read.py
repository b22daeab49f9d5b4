"""tidemark read: print the deduplicated sessions of an event date (pyarrow only, no JVM).

Reads the Iceberg table's current snapshot; --as-of answers with the newest version whose receipts
were all received at or before that time; --raw lists the stream's receipt panes instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from datetime import date
from typing import TYPE_CHECKING, TextIO

from tidemark.commands.options import EVENT_DATE, LAKE, Subparsers, UsageError, checked

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.store.version_record import VersionRecord

# This module is the pyarrow-only reader: pyarrow, pyiceberg and rich are imported by the handler,
# so that the CLI's start stays fast.


def _as_of(text: str) -> str:
    """THE parse of --as-of: a receipt_ts."""
    from tidemark.iceberg.reader import parse_as_of  # lazy: see above

    return parse_as_of(text)


def register(subparsers: Subparsers) -> None:
    """Add `tidemark read` to the subcommands."""
    p = subparsers.add_parser("read", help="print the deduplicated sessions of an event date", description=__doc__)
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--event-date", required=True, type=EVENT_DATE, help="YYYY-MM-DD")
    p.add_argument(
        "--as-of",
        default=None,
        type=checked(_as_of, "as_of"),
        help="receipt_ts (20260307T201500123Z) or RFC 3339 time: read as of then",
    )
    p.add_argument("--raw", action="store_true", help="list the receipt panes instead of sessions")
    p.add_argument(
        "--format",
        choices=["jsonl", "parquet", "table"],
        default="table",
        help="one JSON object per row, a Parquet file, or a table",
    )
    p.add_argument("--events", action="store_true", help="include the events themselves (jsonl, parquet)")
    p.add_argument("--output", default=None, help="write here instead of stdout (parquet: required on a terminal)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark read`; its exit status."""
    from tidemark.iceberg import reader  # lazy: see above

    event_date, as_of = args.event_date, args.as_of
    marker: VersionRecord | None
    if args.format == "parquet" and not args.output and sys.stdout.isatty():
        raise UsageError("--format parquet needs --output FILE (or a pipe)")
    try:
        if args.raw:
            table = reader.read_panes(args.lake, event_date, as_of)
            marker = None
        else:
            marker = reader.resolve(args.lake, event_date, as_of)
            table = reader.read_sessions(args.lake, event_date, as_of)
    except reader.NoVersion as exc:
        print(f"tidemark read: {exc}", file=sys.stderr)
        return 1
    if not args.events and "events" in table.column_names:
        table = table.drop_columns(["events"])
    if args.format == "parquet":
        return _write_parquet(table, args.output)
    with contextlib.ExitStack() as stack:
        out: TextIO = stack.enter_context(open(args.output, "w", encoding="utf-8")) if args.output else sys.stdout
        try:
            if args.format == "jsonl":
                for row in reader.to_records(table):
                    out.write(json.dumps(row) + "\n")
            else:
                _print_table(table, event_date, marker, args.raw, out)
            out.flush()
        except BrokenPipeError:
            # `tidemark read ... | head`: the consumer has what it wanted.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _write_parquet(table: pa.Table, output: str | None) -> int:
    """Write the rows as Parquet to `output`, or to stdout (a pipe)."""
    import pyarrow.parquet as pq  # lazy: see above

    if output:
        pq.write_table(table, output)
        return 0
    pq.write_table(table, sys.stdout.buffer)
    return 0


def _print_table(table: pa.Table, event_date: date, marker: VersionRecord | None, raw: bool, out: TextIO) -> None:
    """The rows' summary columns as a table, titled with the version (or the panes' count)."""
    # lazy: see above
    from rich.console import Console
    from rich.table import Table

    from tidemark.iceberg import reader

    columns = [c for c in (reader.PANE_SUMMARY_COLUMNS if raw else reader.SUMMARY_COLUMNS) if c in table.column_names]
    title = (
        f"{event_date}: {table.num_rows} pane(s)"
        if raw or marker is None
        else f"{event_date} version {marker.version}: {table.num_rows} session(s) "
        f"from {len(marker.receipts)} receipt partition(s)"
    )
    view = Table(title=title)
    for column in columns:
        view.add_column(column, overflow="fold")
    for row in reader.to_records(table.select(columns)):
        view.add_row(*(str(row[c]) for c in columns))
    Console(file=out, width=200 if out is not sys.stdout else None).print(view)
