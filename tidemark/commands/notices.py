"""tidemark notices: what was advertised on Pub/Sub, what is still owed, and (with --send) send it.

--topic availability (the default): the stream's availability notices, sent, owed or waiting in a
coalescing group. --topic corrected: the corrected-partition notices, one per published version
(event date, version, previous version, how the sessions changed), sent or owed. --topic all: both,
each row with its topic. --topic corrected --emit-asset-events: also post the versions owed to
Airflow as asset events of tidemark.sessions_dedup now (a `tidemark dedup` by hand reaches
consumer DAGs at once instead of at the reconcile DAG's next drain).

Exit status 1 with --check when a complete receipt partition is covered by no notice at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from typing import Any

from tidemark.base.layout import event_date_text
from tidemark.commands.options import LAKE, POSITIVE_FLOAT, TOPIC, Subparsers, UsageError, add_airflow_options

_COLUMNS = (
    "state",
    "kind",
    "event_date",
    "receipt_ts",
    "partitions",
    "rows",
    "events",
    "late",
    "notice_id",
    "published_at",
)
_CORRECTED_COLUMNS = (
    "state",
    "event_date",
    "version",
    "previous_version",
    "change",
    "rows",
    "notice_id",
    "published_at",
)
TOPICS = ("availability", "corrected", "all")

# The handler imports the notices' modules (they pull pyarrow and jsonschema) and rich (see
# tidemark.commands.console) itself, so that the CLI's start stays fast.

# A notice as notices.report lists it (JSON), and {state: notices}.
Row = dict[str, Any]
Status = dict[str, list[Row]]


def register(subparsers: Subparsers) -> None:
    """Add `tidemark notices` to the subcommands."""
    p = subparsers.add_parser("notices", help="availability notices: advertised, owed, waiting", description=__doc__)
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument(
        "--format",
        choices=["table", "jsonl", "summary"],
        default="table",
        help="a table, one JSON object per notice, or one JSON object of counts",
    )
    p.add_argument(
        "--topic",
        choices=TOPICS,
        default="availability",
        help="which notices: the availability topic's, the corrected topic's, or both",
    )
    p.add_argument(
        "--state",
        choices=["all", "sent", "owed", "waiting"],
        default="all",
        help="only notices in this state (waiting: availability notices only)",
    )
    p.add_argument(
        "--check", action="store_true", help="also list complete receipt partitions no notice covers (exit 1 if any)"
    )
    p.add_argument(
        "--backfill",
        action="store_true",
        help="record a notice for every complete partition no notice covers (then --send)",
    )
    p.add_argument(
        "--send",
        "--publish",
        dest="send",
        metavar="TOPIC",
        default=None,
        type=TOPIC,
        help="send what is owed on --topic (availability or corrected) to projects/P/topics/T, "
        "then exit (safe while the stream runs; --publish is an alias)",
    )
    p.add_argument(
        "--close-waiting",
        action="store_true",
        help="with --send: also close waiting coalescing groups now; ONLY while the "
        "stream is stopped (the running stream owns them)",
    )
    p.add_argument("--timeout", type=POSITIVE_FLOAT, default=60.0, help="seconds to keep trying with --send")
    p.add_argument(
        "--emit-asset-events",
        action="store_true",
        help="with --topic corrected: post the versions owed to Airflow as asset events "
        "(Airflow: --airflow-url, $AIRFLOW_BASE_URL or the local stack's)",
    )
    add_airflow_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark notices`; its exit status."""
    from tidemark.notices.report import backfill, notices_status, unadvertised  # lazy: see above

    if args.close_waiting and not args.send:
        raise UsageError("--close-waiting needs --send TOPIC")
    if args.topic != "availability":
        for flag, used in (
            ("--check", args.check),
            ("--backfill", args.backfill),
            ("--close-waiting", args.close_waiting),
        ):
            if used:
                raise UsageError(f"{flag} is about availability notices: not with --topic {args.topic}")
    if args.emit_asset_events and args.topic != "corrected":
        raise UsageError("--emit-asset-events is about corrected notices: add --topic corrected")
    if args.send and args.topic == "all":
        raise UsageError("--send sends one topic's notices: choose --topic availability or corrected")
    if args.topic == "corrected":
        return _corrected(args)
    if args.backfill:
        recorded = backfill(args.lake)
        print(f"tidemark notices: {len(recorded)} notice(s) recorded for unadvertised partitions", file=sys.stderr)
    if args.send:
        still_owed = _send(args)
        if still_owed:
            print(f"tidemark notices: {still_owed} notice(s) still owed after {args.timeout:g}s", file=sys.stderr)
    status = notices_status(args.lake)
    rows = [r for state in ("sent", "owed", "waiting") if args.state in ("all", state) for r in status[state]]
    if args.topic == "all":
        return _both(args, status, rows)
    missing = unadvertised(args.lake) if args.check else []
    if args.format == "jsonl":
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        for event_date, receipt_ts in missing:
            sys.stdout.write(
                json.dumps(
                    {"state": "unadvertised", "event_date": event_date_text(event_date), "receipt_ts": receipt_ts}
                )
                + "\n"
            )
    elif args.format == "summary":
        summary = {state: len(status[state]) for state in ("sent", "owed", "waiting")}
        if args.check:
            summary["unadvertised"] = len(missing)
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _print_table(rows, status, missing, args.check)
    if args.send and status["owed"]:
        return 1
    return 1 if missing else 0


def _corrected(args: argparse.Namespace) -> int:
    """--topic corrected: list (after --send, if given) the corrected notices."""
    # lazy: see above
    from tidemark.commands.reconcile import airflow_client
    from tidemark.notices import corrected_delivery
    from tidemark.notices.report import corrected_status

    if args.send:
        still_owed = corrected_delivery.send_owed(args.lake, args.send, timeout=args.timeout)
        if still_owed:
            print(
                f"tidemark notices: {still_owed} corrected notice(s) still owed after {args.timeout:g}s",
                file=sys.stderr,
            )
    events_owed = 0
    if args.emit_asset_events:
        client = airflow_client(args, required=False)
        if client is None:
            raise UsageError(
                "--emit-asset-events needs an Airflow: pass --airflow-url, set AIRFLOW_BASE_URL, "
                f"or start the local stack (none is up in {args.home})"
            )
        events_owed = corrected_delivery.emit_owed(args.lake, client, timeout=args.timeout)
        if events_owed:
            print(
                f"tidemark notices: {events_owed} asset event(s) still owed to Airflow after {args.timeout:g}s",
                file=sys.stderr,
            )
    status = corrected_status(args.lake)
    rows = _corrected_rows(status, args.state)
    if args.format == "jsonl":
        for row in rows:
            sys.stdout.write(json.dumps({"topic": "corrected", **row}) + "\n")
    elif args.format == "summary":
        sys.stdout.write(json.dumps({state: len(status[state]) for state in ("sent", "owed")}) + "\n")
    else:
        _print_corrected_table(rows, status)
    return 1 if (args.send and status["owed"]) or events_owed else 0


def _corrected_rows(status: Status, state: str) -> list[Row]:
    """The corrected notices in `state` ("all", "sent" or "owed")."""
    return [r for s in ("sent", "owed") if state in ("all", s) for r in status[s]]


def _both(args: argparse.Namespace, status: Status, rows: list[Row]) -> int:
    """--topic all: the availability notices, then the corrected ones, each row naming its topic."""
    from tidemark.notices.report import corrected_status  # lazy: see above

    corrected = corrected_status(args.lake)
    corrected_rows = _corrected_rows(corrected, args.state)
    if args.format == "jsonl":
        for topic, listed in (("availability", rows), ("corrected", corrected_rows)):
            for row in listed:
                sys.stdout.write(json.dumps({"topic": topic, **row}) + "\n")
    elif args.format == "summary":
        sys.stdout.write(
            json.dumps(
                {
                    "availability": {state: len(status[state]) for state in ("sent", "owed", "waiting")},
                    "corrected": {state: len(corrected[state]) for state in ("sent", "owed")},
                }
            )
            + "\n"
        )
    else:
        _print_table(rows, status, [], False)
        _print_corrected_table(corrected_rows, corrected)
    return 0


def _send(args: argparse.Namespace) -> int:
    """Send the owed availability notices to --send's topic; how many are still owed."""
    from tidemark.notices.service import NoticeService  # lazy: see above

    service = NoticeService(args.lake, args.send, close_groups=args.close_waiting).start()
    return service.stop(timeout=args.timeout, flush_groups=args.close_waiting)


def _change(change: dict[str, Any]) -> str:
    """'changed: +1 -0 ~2 =5' (added, removed, changed, unchanged sessions)."""
    counts = [change.get(k) for k in ("sessions_added", "sessions_removed", "sessions_changed", "sessions_unchanged")]
    if any(c is None for c in counts):
        return str(change["kind"])
    return f"{change['kind']}: +{counts[0]} -{counts[1]} ~{counts[2]} ={counts[3]}"


def _print_corrected_table(rows: list[Row], status: Status) -> None:
    """The corrected notices as a table."""
    from rich.console import Console  # lazy: see above
    from rich.table import Table

    table = Table(title=f"corrected notices: {len(status['sent'])} sent, {len(status['owed'])} owed")
    for column in _CORRECTED_COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_change(row[c]) if c == "change" else str(row.get(c) or "") for c in _CORRECTED_COLUMNS))
    Console().print(table)


def _print_table(rows: list[Row], status: Status, missing: list[tuple[date, str]], check: bool) -> None:
    """The availability notices as a table; with --check, the partitions no notice covers."""
    from rich.console import Console  # lazy: see above
    from rich.table import Table

    title = f"notices: {len(status['sent'])} sent, {len(status['owed'])} owed, {len(status['waiting'])} waiting"
    table = Table(title=title)
    for column in _COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(("yes" if row[c] else "") if c == "late" else str(row.get(c, "")) for c in _COLUMNS))
    console = Console()
    console.print(table)
    if check:
        if missing:
            console.print(f"[red]{len(missing)} complete receipt partition(s) covered by no notice:[/red]")
            for event_date, receipt_ts in missing:
                console.print(f"  event_date={event_date} receipt_ts={receipt_ts}")
        else:
            console.print("every complete receipt partition is covered by a notice")
