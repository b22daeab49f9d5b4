"""tidemark rules: the session rules a lake records (gap, allowed lateness, watermark delay, gap boundary).

  tidemark rules show --lake DIR      the lake's rules, their history, and the dates whose current
                                      version was made under other rules
  tidemark rules migrate --lake DIR --gap 20m [--allowed-lateness 2h] [--watermark-delay 5m]
                         [--gap-boundary split|merge]
                                      change them deliberately: records the new rules (rules not
                                      typed keep their current value) and re-deduplicates every
                                      date under them, with a progress bar on a terminal (dates
                                      done / left, the current one, the time left); interrupted
                                      (Ctrl-C, kill), it says the date it stopped at, and running
                                      it again with the same rules resumes there

The stream records its rules at its first start and refuses other ones later; the dedup and the
DAG read them from the lake. Stop the stream and pause the dedup DAG before migrating, then start
the stream again without rule options (docs/lake-layout.md, "Session rules record").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tidemark.base.session_rules import parse_overrides
from tidemark.base.spark import build_session
from tidemark.commands.console import wide_console
from tidemark.commands.options import LAKE, Subparsers, add_session_options, user_input

if TYPE_CHECKING:
    from tidemark.deduplication.dedup import DedupResult

# The handlers import the lake's modules (they pull pyarrow and jsonschema) and rich (see
# tidemark.commands.console) themselves, so that the CLI's start stays fast.


def register(subparsers: Subparsers) -> None:
    """Add `tidemark rules` to the subcommands."""
    p = subparsers.add_parser(
        "rules", help="the lake's session rules: show them, or migrate to new ones", description=__doc__
    )
    sub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)

    show = sub.add_parser("show", help="the lake's rules, their history, dates made under other rules")
    show.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    show.add_argument("--json", action="store_true", help="one JSON object per line instead of tables")
    show.set_defaults(handler=run_show)

    migrate = sub.add_parser("migrate", help="record new rules and re-deduplicate every date under them")
    migrate.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    add_session_options(migrate, "(default: the lake's current value)", boundary=True)
    migrate.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    migrate.set_defaults(handler=run_migrate)


def run_show(args: argparse.Namespace) -> int:
    """Run `tidemark rules show`; its exit status."""
    # lazy: see above
    from rich.table import Table

    from tidemark.deduplication import rules_migration
    from tidemark.session import rules_record

    records = rules_record.history(args.lake)
    rules, rules_id, _ = rules_record.rules_in_force(args.lake)
    stale = rules_migration.stale_dates(args.lake, rules)
    if args.json:
        print(
            json.dumps(
                {
                    "kind": "rules",
                    "recorded": bool(records),
                    "rules_id": rules_id,
                    **rules.describe(),
                    "gap_boundary": rules.gap_boundary,
                }
            )
        )
        for record in records:
            print(json.dumps({"kind": "record", **record.to_json()}))
        for item in stale:
            print(json.dumps({"kind": "stale_date", **item.to_json()}))
        return 0

    console = wide_console()
    if records:
        console.print(f"[bold]{args.lake}[/bold]: {rules_record.describe_rules(rules)} (id {rules_id})")
    else:
        console.print(
            f"[bold]{args.lake}[/bold] has no rules record: the dedup uses the defaults "
            f"({rules_record.describe_rules(rules)}); the stream records its rules at its next start"
        )
    if records:
        table = Table(title="rules history")
        for column in (
            "#",
            "recorded at (UTC)",
            "gap",
            "allowed lateness",
            "watermark delay",
            "gap boundary",
            "id",
            "by",
            "reason",
        ):
            table.add_column(column, overflow="fold")
        for record in records:
            rules_of = record.rules
            table.add_row(
                str(record.sequence),
                record.recorded_at,
                rules_of.value("gap"),
                rules_of.value("allowed_lateness"),
                rules_of.value("watermark_delay"),
                rules_of.gap_boundary,
                record.rules_id,
                record.recorded_by,
                record.reason,
            )
        console.print(table)
    if stale:
        table = Table(
            title="dates whose current version was made under other rules "
            f"(`tidemark rules migrate --lake {args.lake}` re-deduplicates them)"
        )
        for column in ("event_date", "version", "its gap", "its rules id"):
            table.add_column(column)
        for item in stale:
            shown = item.to_json()
            table.add_row(shown["event_date"], str(shown["version"]), str(shown["gap"]), str(item.rules_id or "-"))
        console.print(table)
    else:
        console.print("every published date was made under these rules")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """Run `tidemark rules migrate`; its exit status."""
    # lazy: see above
    from tidemark.commands import progress_bar
    from tidemark.deduplication import rules_migration
    from tidemark.session import rules_record

    # Checked before Spark starts or anything is recorded.
    with user_input():
        overrides = parse_overrides(args.gap, args.allowed_lateness, args.watermark_delay, args.gap_boundary)
    current, _, _ = rules_record.rules_in_force(args.lake)  # a corrupt record is a failure, not a usage error
    with user_input():  # the typed rules over the current ones must still make a valid set
        rules = rules_migration.target_rules(args.lake, current.with_overrides(overrides))
    spark = None
    if args.master:
        spark = build_session("tidemark-rules-migrate", args.master)

    def emit(result: DedupResult) -> None:
        sys.stdout.write(json.dumps({"kind": "date", **result.to_json()}) + "\n")
        sys.stdout.flush()

    try:
        with progress_bar.kill_interrupts(), progress_bar.shown() as display:
            migration = rules_migration.migrate(args.lake, rules, spark=spark, on_result=emit, display=display)
    except KeyboardInterrupt:
        dates = rules_migration.event_dates(args.lake)
        left = rules_migration.not_migrated(args.lake, rules, dates)
        where = f"stopped at {left[0]}" if left else "stopped after the last date"
        print(
            f"tidemark rules migrate: interrupted, {where}: {len(dates) - len(left)} of {len(dates)} dates are "
            "made under the new rules; run the same command again to resume there",
            file=sys.stderr,
        )
        raise
    sys.stdout.write(json.dumps(migration.to_json()) + "\n")
    return 0
