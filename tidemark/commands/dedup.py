"""tidemark dedup: deduplicate one event date and publish a new version atomically.

The session rules come from the lake's rules record (written by the stream): no rule option is
needed, and options that disagree with the record are refused before Spark starts.

Prints one JSON line on stdout: {event_date, version, published, sessions, receipts_read, rows_read,
affected_dates, noop, seconds, mode, full_reason}. affected_dates are other event dates whose published version this
run may have made stale (rerun them; a rerun without new receipts is a no-op).
"""

from __future__ import annotations

import argparse
import json
import sys

from tidemark.base.spark import build_session
from tidemark.commands.options import EVENT_DATE, LAKE, Subparsers, UsageError, add_session_options, user_input
from tidemark.session.sessions import SessionRules, parse_overrides


def register(subparsers: Subparsers) -> None:
    """Add `tidemark dedup` to the subcommands."""
    p = subparsers.add_parser(
        "dedup", help="deduplicate one event date (Spark SQL) and publish it", description=__doc__
    )
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--event-date", required=True, type=EVENT_DATE, help="the event date, YYYY-MM-DD (UTC)")
    add_session_options(p)
    p.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    p.add_argument(
        "--full",
        action="store_true",
        help="re-sessionize every planned receipt instead of only the users new receipts touch; never a "
        "no-op: publishes unless the result equals the current version's (docs/dedup.md, 'Incremental corrections')",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark dedup`; its exit status."""
    # lazy: the lake's modules pull pyarrow and jsonschema, kept out of the CLI's start
    from tidemark.deduplication.dedup import run_dedup
    from tidemark.ops import metrics
    from tidemark.session import rules_record

    # Everything the user typed is checked before Spark starts or any path is built.
    event_date = args.event_date  # a date: parsed by the option's type
    with user_input():  # typed rules that break a rule (gap > 0, ...)
        overrides = parse_overrides(args.gap, args.allowed_lateness, args.watermark_delay)
    try:
        rules, _ = rules_record.check(args.lake, overrides or None, "tidemark dedup")
    except rules_record.RulesMismatch as exc:  # typed rules the lake's record disagrees with
        raise UsageError(str(exc)) from exc
    # no rule typed: run_dedup takes the lake's (and warns when the lake has no record)
    rules_given: SessionRules | None = rules if overrides else None
    spark = None
    if args.master:
        spark = build_session("tidemark-dedup", args.master)
    metrics.configure(service="tidemark-dedup")  # OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, else no-op
    try:
        with metrics.dedup_run(event_date) as outcome:  # runs by outcome, duration (docs/metrics.md)
            result = outcome["result"] = run_dedup(args.lake, event_date, rules_given, spark=spark, full=args.full)
    finally:
        metrics.shutdown()  # a short-lived process: flush before exit
    sys.stdout.write(json.dumps(result.to_json()) + "\n")
    sys.stdout.flush()
    return 0
