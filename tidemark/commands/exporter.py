"""tidemark exporter: serve the lake's SLO gauges on /metrics for Prometheus to scrape.

Per stale event date its staleness, the notices owed and the oldest one's age, the dates
reconciliation gave up on, and the SLO objectives (docs/metrics.md has every metric). The lake is
read at most once per --refresh (never per scrape: a lake may hold millions of receipt partitions).
Runs until SIGTERM or Ctrl-C. `tidemark up` starts one for the local stack.
"""

from __future__ import annotations

import argparse
import signal
import threading

from tidemark.commands.options import POSITIVE_FLOAT, POSITIVE_INT, Subparsers
from tidemark.commands.slo_options import add_slo_options, objectives, run_state


def register(subparsers: Subparsers) -> None:
    """Add `tidemark exporter` to the subcommands."""
    p = subparsers.add_parser("exporter", help="serve the lake's SLO gauges for Prometheus", description=__doc__)
    add_slo_options(p)
    p.add_argument("--port", type=POSITIVE_INT, default=9464, help="port of /metrics (on --bind)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default loopback only)")
    p.add_argument("--refresh", type=POSITIVE_FLOAT, default=60.0, help="seconds between two readings of the lake")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark exporter`; its exit status."""
    # lazy: the exporter pulls pyarrow, the logs rich (tracebacks)
    from tidemark.base.logs import get_logger
    from tidemark.ops.exporter import LakeExporter

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    exporter = LakeExporter(args.lake, objectives(args), args.refresh, run_state(args), args.max_attempts)
    exporter.start(args.port, args.bind)
    get_logger("exporter").info("exporter starting", lake=args.lake, port=args.port, refresh=args.refresh)
    try:
        stop.wait()
    finally:
        exporter.stop()
    return 0
