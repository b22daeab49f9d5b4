"""tidemark health: check the SLOs from the lake alone, print the breached ones, exit 4 if any.

For a cron job or an uptime check where Prometheus is not used.

Checks: no event date stale longer than --correction; no notice owed longer than --notice-owed; no
date that reconciliation gave up on (when an Airflow is found, as for `tidemark reconcile`). The
stream's batch lag is Prometheus's to alert on (docs/metrics.md). Exit status: 0 every SLO holds,
4 at least one is breached, 1 the lake could not be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from tidemark.commands.options import Subparsers, UsageError
from tidemark.commands.slo_options import add_slo_options, objectives, run_state

BREACHED = 4


def register(subparsers: Subparsers) -> None:
    """Add `tidemark health` to the subcommands."""
    p = subparsers.add_parser("health", help="check the SLOs; exit 4 listing the breached ones", description=__doc__)
    add_slo_options(p)
    p.add_argument("--json", action="store_true", help="one JSON object: the reading and the breaches")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark health`; its exit status."""
    from tidemark.ops.health import breaches, read_lake  # lazy: pulls pyarrow

    if args.lake.is_local and not os.path.exists(args.lake.root):
        raise UsageError(f"no lake at {args.lake}")
    reading = read_lake(args.lake, run_state(args), max_attempts=args.max_attempts)
    found = breaches(reading, objectives(args))
    if args.json:
        print(json.dumps({"healthy": not found, "breaches": [asdict(b) for b in found], "reading": reading.to_json()}))
    elif found:
        for breach in found:
            print(f"BREACHED {breach.slo}: {breach.detail}")
    else:
        given_up = "unknown (no Airflow)" if reading.given_up is None else str(len(reading.given_up))
        print(
            f"healthy: {len(reading.stale)} stale date(s) within objective, notices owed "
            f"{sum(v[0] for v in reading.owed.values())}, dates given up {given_up}"
        )
    sys.stdout.flush()
    return BREACHED if found else 0
