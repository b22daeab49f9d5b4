"""Terminal output the subcommands share (rich, imported lazily so `tidemark --help` stays fast)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tidemark.devstack.stack import Stack


def wide_console(stderr: bool = False) -> Console:
    """A rich Console, wide enough off a terminal that ids and paths are not wrapped.

    Off a terminal: a pipe, a test, CI.
    """
    from rich.console import Console  # lazy: rich costs `tidemark --help` a third of its start

    stream = sys.stderr if stderr else sys.stdout
    return Console(width=None if stream.isatty() else 200, stderr=stderr)


def print_status(stack: Stack, console: Console) -> list[dict[str, Any]]:
    """The local stack's components as a table; returns the rows."""
    from rich.table import Table  # lazy: as in wide_console

    rows: list[dict[str, Any]] = stack.status()
    table = Table(title=f"tidemark stack in {stack.home}")
    for column in ("component", "state", "pid", "url", "detail", "log"):
        table.add_column(column, overflow="fold")
    colors = {"running": "green", "ended": "green", "unhealthy": "yellow", "stopped": "red"}
    for row in rows:
        table.add_row(
            row["component"],
            f"[{colors[row['state']]}]{row['state']}[/]",
            str(row["pid"] or ""),
            row["url"],
            row["detail"],
            row["log"],
        )
    console.print(table)
    return rows
