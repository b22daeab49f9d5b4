"""Benchmarks of tidemark. Each is a module `bench/<name>.py` with `main(argv)` that prints a rich
table and writes `bench/results/<name>.md` (with the machine it ran on). Speed lives here, never in
the tests.

This module holds what they share: the machine description and the results writer.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from contextlib import contextmanager

from tidemark.base.times import now_iso_z

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def arguments(name: str, doc: str | None, workdir: bool = True) -> argparse.ArgumentParser:
    """The parser every benchmark starts from: `python -m bench.<name>`, its module docstring as
    the help, and (with `workdir`) `--workdir` under /tmp/tidemark-bench/<name>."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench.{name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if workdir:
        parser.add_argument("--workdir", default=f"/tmp/tidemark-bench/{name}")
    return parser


def add_date_shape(parser: argparse.ArgumentParser, sessions: int = 1_000_000) -> None:
    """The synthesized date the dedup benchmarks share (bench.dedup_partition builds it): its
    sessions and how their panes spread over receipt partitions."""
    parser.add_argument("--sessions", type=int, default=sessions)
    parser.add_argument("--events-per-session", type=int, default=4)
    parser.add_argument("--receipts", type=int, default=6, help="receipt partitions holding the date's panes")
    parser.add_argument("--early-rate", type=float, default=0.3, help="share of sessions with an early pane")
    parser.add_argument("--fragment-rate", type=float, default=0.05, help="share with a redelivered fragment")


def machine() -> dict:
    """Cores, RAM, Python, Java and pyspark versions, and the load when the benchmark started."""
    import psutil

    ram_gb = round(psutil.virtual_memory().total / 1024**3, 1)
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
        java = java.splitlines()[0] if java else "unknown"
    except (OSError, subprocess.SubprocessError):
        java = "unknown"
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    try:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return {
        "cores": os.cpu_count(),
        "ram_gb": ram_gb,
        "python": platform.python_version(),
        "java": java,
        "pyspark": spark_version,
        "os": platform.platform(terse=True),
        "load average at start (1, 5, 15 min)": load,
        "date": now_iso_z("seconds"),
    }


@contextmanager
def stopwatch():
    """`with stopwatch() as t: ...` then t["seconds"]."""
    box = {}
    started = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = round(time.perf_counter() - started, 2)


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console().print(table)


def markdown_table(columns: list[str], rows: list[list]) -> list[str]:
    """A markdown table's lines: header, separator, one line per row."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + [
        "| " + " | ".join(str(v) for v in row) + " |" for row in rows
    ]


def write_results(
    name: str,
    title: str,
    columns: list[str],
    rows: list[list],
    notes: str,
    setup: dict,
    env: dict | None = None,
    command: str | None = None,
    after: str = "",
) -> str:
    """bench/results/<name>.md: the figures, how they were produced, and on what machine; `after`
    (markdown, e.g. a second table) follows the main table."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    env = env or machine()
    lines = [f"# {title}", "", notes.strip(), "", *markdown_table(columns, rows)]
    lines += ["", after.strip()] if after.strip() else []
    lines += ["", "## Setup", ""] + [f"- {k}: {v}" for k, v in setup.items()]
    lines += ["", "## Machine", ""] + [f"- {k}: {v}" for k, v in env.items()]
    lines += ["", f"Reproduce: `{command or f'.venv/bin/python -m bench.{name}'}` (see `--help`).", ""]
    path = os.path.join(RESULTS_DIR, f"{name}.md")
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines))
    return path
