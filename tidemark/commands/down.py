"""tidemark down: stop what `tidemark up` started in this state folder, and nothing else.

By process id. The stream stops gracefully (finishes its micro-batch, flushes owed notices).
Data (lake, checkpoint, Airflow DB, landing) stays: `tidemark up` resumes from it.
"""

from __future__ import annotations

import argparse

from tidemark.commands.console import wide_console
from tidemark.commands.options import Subparsers, add_home_option


def register(subparsers: Subparsers) -> None:
    """Add `tidemark down` to the subcommands."""
    p = subparsers.add_parser("down", help="stop the local stack started by `tidemark up`", description=__doc__)
    add_home_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark down`; its exit status."""
    from tidemark.devstack.stack import Stack  # lazy: pulls pyarrow and psutil, kept out of the CLI's start

    console = wide_console()
    stack = Stack(args.home)
    if stack.settings() is None:
        console.print(f"nothing to stop: {stack.home} holds no stack")
        return 0
    with console.status("stopping") as spinner:
        done = stack.down(say=spinner.update)
    if not done:
        console.print("nothing was running")
    for item in done:
        what = f"stopped in {item['seconds']}s" if item["stopped"] else "was not running (stale record removed)"
        console.print(f"{item['component']:<24} pid {item['pid']:<8} {what}")
    return 0
