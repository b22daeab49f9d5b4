"""tidemark generate: write a realistic, seeded sample landing."""

from __future__ import annotations

import argparse
import json

from tidemark.commands.options import EVENT_DATE, FRACTION, POSITIVE_INT, Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark generate` to the subcommands."""
    p = subparsers.add_parser(
        "generate", help="write a seeded sample landing of mobile viewing events", description=__doc__
    )
    p.add_argument("--landing", required=True, help="folder to land JSON-lines files in")
    p.add_argument("--events", type=POSITIVE_INT, default=20_000, help="distinct events")
    p.add_argument("--users", type=POSITIVE_INT, default=200, help="distinct users")
    p.add_argument("--start", type=EVENT_DATE, default="2026-03-06", help="first event date, YYYY-MM-DD")
    p.add_argument("--days", type=POSITIVE_INT, default=2, help="days of event time")
    p.add_argument("--files", type=POSITIVE_INT, default=40, help="landed files, in arrival order")
    p.add_argument("--seed", type=int, default=7, help="random seed: the same seed writes the same files")
    p.add_argument("--duplicate-rate", type=FRACTION, default=0.03, help="share of events delivered more than once")
    p.add_argument(
        "--malformed-rate",
        type=FRACTION,
        default=0.002,
        help="share of lines that are not valid events (the stream quarantines them)",
    )
    p.add_argument("--minutes-late-rate", type=FRACTION, default=0.10, help="share of events that arrive minutes late")
    p.add_argument(
        "--offline-session-rate",
        type=FRACTION,
        default=0.02,
        help="share of sessions recorded offline and uploaded hours later",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark generate`; its exit status."""
    from tidemark.demo.generate import Workload, generate  # lazy: pulls pyarrow, kept out of the CLI's start

    workload = Workload(
        events=args.events,
        users=args.users,
        start=args.start,
        days=args.days,
        files=args.files,
        seed=args.seed,
        duplicate_rate=args.duplicate_rate,
        malformed_rate=args.malformed_rate,
        minutes_late_rate=args.minutes_late_rate,
        offline_session_rate=args.offline_session_rate,
    )
    summary = generate(args.landing, workload)
    print(json.dumps({k: v for k, v in summary.items() if k != "workload"}))
    return 0
