"""tidemark stream: the Structured Streaming job, landing -> session panes in receipt partitions.

Session rules: the first start on a lake records them in the lake (<lake>/_rules/); later starts
take them from there and need no rule options. Options that disagree with the lake are refused,
unless --migrate-rules is given: then the new rules are recorded and every date re-deduplicated
under them (`tidemark rules migrate`) before the stream starts.
"""
from __future__ import annotations

LAKE_DEFAULT = "(default: the lake's recorded rules; for a new lake %s)"


def add_session_options(p, default_note: str | None = None) -> None:
    """--gap, --allowed-lateness, --watermark-delay. Default None: a command can tell what was typed
    (and check it against the lake's rules record) from what was not."""
    def note(code_default: str) -> str:
        return default_note or LAKE_DEFAULT % code_default

    p.add_argument("--gap", default=None,
                   help=f"session gap: events closer than this form one session {note('30m')}")
    p.add_argument("--allowed-lateness", default=None,
                   help=f"how long after its window closes a session still takes late events {note('1h')}")
    p.add_argument("--watermark-delay", default=None,
                   help=f"the watermark trails the maximum event time seen by this much {note('10m')}")


def register(subparsers) -> None:
    p = subparsers.add_parser("stream", help="run the streaming job (landing -> sessions lake)",
                              description=__doc__)
    p.add_argument("--landing", required=True, help="landing folder or URI of JSON-lines files")
    p.add_argument("--lake", required=True, help="lake folder or URI (gs://, file://, ...)")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or URI")
    add_session_options(p)
    p.add_argument("--max-clock-skew", default="1h", metavar="DURATION",  # docs/input-contract.md
                   help="quarantine events stamped later than their receipt time by more than this")
    p.add_argument("--migrate-rules", action="store_true",
                   help="the rule options deliberately change the lake's rules: record them and "
                        "re-deduplicate every date under them before starting (`tidemark rules migrate`)")
    p.add_argument("--trigger-interval", default="10s")
    p.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--notify-topic", default=None, help="projects/P/topics/T for availability notices")
    p.add_argument("--notice-coalesce", default=None, metavar="DURATION",
                   help="one notice per event_date per window of this length (default: one per partition)")
    p.add_argument("--notice-late-horizon", default=None, metavar="DURATION",
                   help="dates older than this behind the watermark go into a periodic digest notice")
    p.add_argument("--notice-digest-interval", default="1h", metavar="DURATION",
                   help="how often the late-data digest is published (with --notice-late-horizon)")
    p.set_defaults(handler=run)


def config_from_args(args):
    from streaming_job.job import StreamConfig
    from tidemark.contract import InputRules
    from tidemark.durations import parse_duration
    from tidemark.sessions import parse_overrides

    parse_duration(args.trigger_interval)
    if args.max_files_per_trigger is not None and args.max_files_per_trigger < 1:
        raise ValueError("--max-files-per-trigger must be positive")
    return StreamConfig(
        landing=args.landing, lake=args.lake, checkpoint=args.checkpoint,
        # Only what was typed: the rest comes from the lake's rules record (checked at start).
        rules=parse_overrides(args.gap, args.allowed_lateness, args.watermark_delay) or None,
        migrate_rules=args.migrate_rules,
        input_rules=InputRules(max_clock_skew=parse_duration(args.max_clock_skew)),
        trigger_interval=args.trigger_interval, available_now=args.available_now,
        max_files_per_trigger=args.max_files_per_trigger, master=args.master,
        notify_topic=args.notify_topic, **_notice_options(args))


def _notice_options(args) -> dict:
    """Cadence options, checked now so that a typo fails before Spark starts."""
    from tidemark.durations import parse_duration
    from tidemark.notices.cadence import CadencePolicy
    from tidemark.notices.publisher import check_topic

    if args.notify_topic:
        check_topic(args.notify_topic)
    CadencePolicy(
        coalesce=parse_duration(args.notice_coalesce) if args.notice_coalesce else None,
        late_horizon=parse_duration(args.notice_late_horizon) if args.notice_late_horizon else None,
        digest_interval=parse_duration(args.notice_digest_interval))
    return {"notice_coalesce": args.notice_coalesce, "notice_late_horizon": args.notice_late_horizon,
            "notice_digest_interval": args.notice_digest_interval}


def run(args) -> int:
    from streaming_job.job import run_stream

    run_stream(config_from_args(args))
    return 0
