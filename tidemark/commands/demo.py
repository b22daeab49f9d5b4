"""tidemark demo: generate a sample landing, stream it on the local defaults, show what was written."""
from __future__ import annotations

import os
import shutil


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run tidemark end to end on a generated workload",
                              description=__doc__)
    p.add_argument("--home", default=".tidemark", help="state folder (default ./.tidemark)")
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--fresh", action="store_true", help="start from an empty state folder")
    p.set_defaults(handler=run)


def run(args) -> int:
    from rich.console import Console

    from streaming_job.job import StreamConfig, run_stream
    from tidemark.generate import Workload, generate
    from tidemark.inspect import receipt_table

    console = Console()
    home = os.path.abspath(os.path.join(args.home, "demo"))
    if args.fresh and os.path.isdir(home):
        shutil.rmtree(home)
    landing, lake, checkpoint = (os.path.join(home, d) for d in ("landing", "lake", "checkpoint"))
    console.rule("1. landing a generated workload")
    summary = generate(landing, Workload(events=args.events, files=40))
    console.print({k: v for k, v in summary.items() if k != "workload"})
    console.rule("2. streaming it (available-now, 8 files per micro-batch)")
    run_stream(StreamConfig(landing=landing, lake=lake, checkpoint=checkpoint, available_now=True,
                            max_files_per_trigger=8))
    console.rule("3. what was written")
    console.print(receipt_table(lake))
    return 0
