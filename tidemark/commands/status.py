"""tidemark status: each local component's state, pid, URL and log (and the Airflow UI login)."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    from tidemark.commands.up import add_home_option

    p = subparsers.add_parser("status", help="show the local stack's components, URLs and logs",
                              description=__doc__)
    add_home_option(p)
    p.add_argument("--json", action="store_true", help="one JSON object per component")
    p.set_defaults(handler=run)


def wide_console():
    """A rich Console; when output is not a terminal (a pipe, a test, CI), wide enough that ids and
    paths are not wrapped across lines."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def print_status(stack, console) -> list[dict]:
    from rich.table import Table

    rows = stack.status()
    table = Table(title=f"tidemark stack in {stack.home}")
    for column in ("component", "state", "pid", "url", "detail", "log"):
        table.add_column(column, overflow="fold")
    colors = {"running": "green", "unhealthy": "yellow", "stopped": "red"}
    for row in rows:
        table.add_row(row["component"], f"[{colors[row['state']]}]{row['state']}[/]", str(row["pid"] or ""),
                      row["url"], row["detail"], row["log"])
    console.print(table)
    return rows


def run(args) -> int:
    from tidemark.localstack.stack import Stack

    stack = Stack(args.home)
    if stack.settings() is None:
        print(f"no stack in {stack.home}: run `tidemark up`")
        return 3
    if args.json:
        rows = stack.status()
        for row in rows:
            print(json.dumps(row))
    else:
        rows = print_status(stack, wide_console())
    # Like `systemctl status`: 0 only when everything runs.
    return 0 if all(r["state"] == "running" for r in rows) else 3
