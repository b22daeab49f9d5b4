"""tidemark stream: the Structured Streaming job, landing -> session panes in receipt partitions.

Session rules: the first start on a lake records them in the lake (<lake>/_rules/); later starts
take them from there and need no rule options. Options that disagree with the lake are refused,
unless --migrate-rules is given: then the new rules are recorded and every date re-deduplicated
under them (`tidemark rules migrate`) before the stream starts.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from tidemark.base.durations import parse_duration
from tidemark.base.session_rules import parse_overrides
from tidemark.commands.options import (
    DURATION_TEXT,
    LAKE,
    POSITIVE_INT,
    TOPIC,
    Subparsers,
    UsageError,
    add_session_options,
    user_input,
)
from tidemark.ingest.contract import InputRules

if TYPE_CHECKING:
    from streaming_job.job import StreamConfig
    from tidemark.panes.receipts import BatchReport

__all__ = ["config_from_args", "register", "run"]

# The handler imports the stream (pyspark) and the lake's modules (pyarrow) itself, so that the
# CLI's start stays fast.


def register(subparsers: Subparsers) -> None:
    """Add `tidemark stream` to the subcommands."""
    p = subparsers.add_parser("stream", help="run the streaming job (landing -> sessions lake)", description=__doc__)
    p.add_argument("--landing", required=True, help="landing folder or URI of JSON-lines files")
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI (gs://, file://, ...)")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or URI")
    add_session_options(p, boundary=True)
    p.add_argument(
        "--max-clock-skew",
        default="1h",
        metavar="DURATION",
        type=DURATION_TEXT,  # docs/input-contract.md
        help="quarantine events stamped later than their receipt time by more than this",
    )
    p.add_argument(
        "--migrate-rules",
        action="store_true",
        help="the rule options deliberately change the lake's rules: record them and "
        "re-deduplicate every date under them before starting (`tidemark rules migrate`)",
    )
    p.add_argument(
        "--trigger-interval", default="10s", metavar="DURATION", type=DURATION_TEXT, help="micro-batch interval"
    )
    p.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    p.add_argument(
        "--max-files-per-trigger",
        type=POSITIVE_INT,
        default=None,
        help="landed files read per micro-batch (default: all new ones)",
    )
    p.add_argument(
        "--archive",
        default=None,
        metavar="FOLDER",
        help="move each read input file here (under received=YYYY-MM-DD/) once its micro-batch is "
        "committed, so the landing holds only unread files (docs/input-contract.md, Landing)",
    )
    p.add_argument(
        "--checkpoint-rotation",
        type=POSITIVE_INT,
        default=None,
        metavar="BATCHES",
        help="with --archive: start a fresh file-source log after this many micro-batches "
        "(8640 is a day at a 10 s trigger), so the checkpoint does not grow with the landing's age",
    )
    p.add_argument(
        "--archive-interval",
        default="2s",
        metavar="DURATION",
        type=DURATION_TEXT,
        help="how often a running stream moves committed micro-batches' files to the archive",
    )
    p.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--notify-topic", default=None, type=TOPIC, help="projects/P/topics/T for availability notices")
    p.add_argument(
        "--notice-coalesce",
        default=None,
        metavar="DURATION",
        type=DURATION_TEXT,
        help="one notice per event_date per window of this length (default: one per partition)",
    )
    p.add_argument(
        "--notice-late-horizon",
        default=None,
        metavar="DURATION",
        type=DURATION_TEXT,
        help="dates older than this behind the watermark go into a periodic digest notice",
    )
    p.add_argument(
        "--notice-digest-interval",
        default="1h",
        metavar="DURATION",
        type=DURATION_TEXT,
        help="how often the late-data digest is published (with --notice-late-horizon)",
    )
    p.add_argument(
        "--metrics-port",
        type=POSITIVE_INT,
        default=None,
        help="serve the stream's metrics on 127.0.0.1:PORT/metrics for Prometheus (docs/metrics.md)",
    )
    p.set_defaults(handler=run)


def config_from_args(args: argparse.Namespace) -> StreamConfig:
    """The stream's configuration from `tidemark stream`'s options, checked before Spark starts."""
    from streaming_job.job import StreamConfig  # lazy: see above

    with user_input():  # only what was typed: the rest comes from the lake's rules record (checked at start)
        rules = parse_overrides(args.gap, args.allowed_lateness, args.watermark_delay, args.gap_boundary) or None
        input_rules = InputRules(max_clock_skew=parse_duration(args.max_clock_skew))
        if args.checkpoint_rotation and not args.archive:
            raise UsageError(
                "--checkpoint-rotation needs --archive: a fresh file-source log would read "
                "every file still in the landing again"
            )
    return StreamConfig(
        landing=args.landing,
        lake=args.lake,
        checkpoint=args.checkpoint,
        rules=rules,
        migrate_rules=args.migrate_rules,
        input_rules=input_rules,
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        max_files_per_trigger=args.max_files_per_trigger,
        master=args.master,
        archive=args.archive,
        rotate_after=args.checkpoint_rotation,
        archive_interval=parse_duration(args.archive_interval).total_seconds(),
        notify_topic=args.notify_topic,
        **_notice_options(args),
    )


class _NoticeOptions(TypedDict):
    """StreamConfig's notice cadence fields, as typed (durations as text)."""

    notice_coalesce: str | None
    notice_late_horizon: str | None
    notice_digest_interval: str


def _notice_options(args: argparse.Namespace) -> _NoticeOptions:
    """Cadence options, checked now so that a typo fails before Spark starts."""
    from tidemark.notices.cadence import CadencePolicy  # lazy: see above

    with user_input():  # the policy's own checks (a zero interval, ...)
        CadencePolicy(
            coalesce=parse_duration(args.notice_coalesce) if args.notice_coalesce else None,
            late_horizon=parse_duration(args.notice_late_horizon) if args.notice_late_horizon else None,
            digest_interval=parse_duration(args.notice_digest_interval),
        )
    return {
        "notice_coalesce": args.notice_coalesce,
        "notice_late_horizon": args.notice_late_horizon,
        "notice_digest_interval": args.notice_digest_interval,
    }


def run(args: argparse.Namespace) -> int:
    """Run `tidemark stream`; its exit status."""
    # lazy: see above
    from streaming_job.job import run_stream
    from tidemark.ops import metrics
    from tidemark.session.rules_record import RulesMismatch

    config = config_from_args(args)
    listeners: list[Callable[[BatchReport], None]] = []
    if args.metrics_port:  # the stream's instruments, fed by its BatchReport listener (tidemark/ops/metrics.py)
        metrics.serve_prometheus(args.metrics_port, service="tidemark-stream")
        listeners.append(metrics.StreamMetrics())
    try:
        run_stream(config, listeners=listeners)
    except RulesMismatch as exc:  # typed rules the lake's record disagrees with: refused before the first batch
        raise UsageError(str(exc)) from exc
    return 0
