"""tidemark stream: the Structured Streaming job, landing -> session panes in receipt partitions."""
from __future__ import annotations


def add_session_options(p) -> None:
    p.add_argument("--gap", default="30m", help="session gap: events closer than this form one session")
    p.add_argument("--allowed-lateness", default="1h",
                   help="how long after its window closes a session still takes late events")
    p.add_argument("--watermark-delay", default="10m",
                   help="the watermark trails the maximum event time seen by this much")


def register(subparsers) -> None:
    p = subparsers.add_parser("stream", help="run the streaming job (landing -> sessions lake)",
                              description=__doc__)
    p.add_argument("--landing", required=True, help="landing folder or URI of JSON-lines files")
    p.add_argument("--lake", required=True, help="lake folder or URI (gs://, file://, ...)")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder or URI")
    add_session_options(p)
    p.add_argument("--trigger-interval", default="10s")
    p.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--notify-topic", default=None, help="projects/P/topics/T for availability notices")
    p.set_defaults(handler=run)


def config_from_args(args):
    from streaming_job.job import StreamConfig
    from tidemark.durations import parse_duration
    from tidemark.sessions import SessionRules

    parse_duration(args.trigger_interval)
    if args.max_files_per_trigger is not None and args.max_files_per_trigger < 1:
        raise ValueError("--max-files-per-trigger must be positive")
    return StreamConfig(
        landing=args.landing, lake=args.lake, checkpoint=args.checkpoint,
        rules=SessionRules.parse(args.gap, args.allowed_lateness, args.watermark_delay),
        trigger_interval=args.trigger_interval, available_now=args.available_now,
        max_files_per_trigger=args.max_files_per_trigger, master=args.master,
        notify_topic=args.notify_topic)


def run(args) -> int:
    from streaming_job.job import run_stream

    run_stream(config_from_args(args))
    return 0
