"""tidemark status: each local component's state, pid, URL and log (and the Airflow UI login).

Exit status 0 when every component runs (a task `up` starts, such as the Connect warm-up: running or
ended), 3 otherwise (like `systemctl status`).
"""

from __future__ import annotations

import argparse
import json
import sys

from tidemark.commands.console import print_status, wide_console
from tidemark.commands.options import Subparsers, add_home_option

HEALTHY_STATES = ("running", "ended")  # "ended": a task `up` starts (the Connect warm-up) that is done


def register(subparsers: Subparsers) -> None:
    """Add `tidemark status` to the subcommands."""
    p = subparsers.add_parser("status", help="show the local stack's components, URLs and logs", description=__doc__)
    add_home_option(p)
    p.add_argument("--json", action="store_true", help="one JSON object per component")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark status`; its exit status."""
    from tidemark.devstack.stack import Stack  # lazy: pulls pyarrow and psutil, kept out of the CLI's start

    stack = Stack(args.home)
    if stack.settings() is None:
        print(f"tidemark status: no stack in {stack.home}: run `tidemark up`", file=sys.stderr)
        return 3
    if args.json:
        rows = stack.status()
        for row in rows:
            print(json.dumps(row))
    else:
        rows = print_status(stack, wide_console())
    return 0 if all(r["state"] in HEALTHY_STATES for r in rows) else 3
