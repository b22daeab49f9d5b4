"""tidemark generate: write a realistic, seeded sample landing."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="write a seeded sample landing of mobile viewing events",
                              description=__doc__)
    p.add_argument("--landing", required=True, help="folder to land JSON-lines files in")
    p.add_argument("--events", type=int, default=20_000, help="distinct events (default 20000)")
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--start", default="2026-03-06", help="first event date, YYYY-MM-DD")
    p.add_argument("--days", type=int, default=2, help="days of event time")
    p.add_argument("--files", type=int, default=40, help="landed files, in arrival order")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--duplicate-rate", type=float, default=0.03)
    p.add_argument("--malformed-rate", type=float, default=0.002)
    p.add_argument("--minutes-late-rate", type=float, default=0.10)
    p.add_argument("--offline-session-rate", type=float, default=0.02)
    p.set_defaults(handler=run)


def run(args) -> int:
    from tidemark.generate import Workload, generate
    from tidemark.layout import check_event_date

    check_event_date(args.start)
    for name in ("duplicate_rate", "malformed_rate", "minutes_late_rate", "offline_session_rate"):
        if not 0 <= getattr(args, name) <= 1:
            raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1")
    if args.events < 1 or args.users < 1 or args.days < 1 or args.files < 1:
        raise ValueError("--events, --users, --days and --files must be positive")
    workload = Workload(events=args.events, users=args.users, start=args.start, days=args.days,
                        files=args.files, seed=args.seed, duplicate_rate=args.duplicate_rate,
                        malformed_rate=args.malformed_rate, minutes_late_rate=args.minutes_late_rate,
                        offline_session_rate=args.offline_session_rate)
    summary = generate(args.landing, workload)
    print(json.dumps({k: v for k, v in summary.items() if k != "workload"}))
    return 0
