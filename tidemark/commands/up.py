"""tidemark up: start the whole system locally, on 127.0.0.1.

The Pub/Sub emulator (topic + push subscription to the function), Airflow 3 (api-server,
scheduler, dag-processor; SQLite unless --db-url), the Cloud Function under functions-framework,
and the streaming job on the landing folder (`tidemark stream --notify-topic ...`, in the
background), then the lake's SLO exporter (`tidemark exporter`) and a Prometheus server that
scrapes it and the stream and evaluates the SLO alerts (docs/metrics.md). Ports are free ones picked at the first `up` (or the ones given) and recorded in the
state folder, so `tidemark down` then `tidemark up` resumes with the same addresses, lake,
checkpoint, Airflow database and emulator data folder. Drop JSON-lines files into the landing
folder and watch `tidemark partitions` / `tidemark history`.

Session rules: the lake records them (tidemark/session/rules_record.py). --gap / --allowed-lateness /
--watermark-delay set them for a new lake; on a lake that records other rules they are refused
before anything starts (change rules with `tidemark rules migrate`). The stream and the DAG take
them from the lake.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tidemark.base.session_rules import parse_overrides
from tidemark.commands.console import print_status, wide_console
from tidemark.commands.options import (
    DURATION_TEXT,
    POSITIVE_FLOAT,
    Subparsers,
    UsageError,
    add_home_option,
    add_session_options,
    checked,
    in_range,
    user_input,
)

PORT = checked(in_range(int, 1, 65535), "port")


def register(subparsers: Subparsers) -> None:
    """Add `tidemark up` to the subcommands."""
    p = subparsers.add_parser(
        "up", help="start the local stack (emulator, Airflow, function, stream)", description=__doc__
    )
    add_home_option(p)
    p.add_argument("--lake", default=None, help="lake folder (default HOME/lake)")
    p.add_argument("--landing", default=None, help="landing folder the stream watches (default HOME/landing)")
    p.add_argument("--checkpoint", default=None, help="stream checkpoint (default HOME/checkpoint)")
    p.add_argument(
        "--db-url",
        default=None,
        help="Airflow metadata DB (SQLAlchemy URL, e.g. postgresql+psycopg2://u:p@127.0.0.1/airflow); "
        "default SQLite under HOME/airflow",
    )
    p.add_argument(
        "--pubsub-port",
        type=PORT,
        default=None,
        help="the Pub/Sub emulator's port (default: the recorded one, else a free one)",
    )
    p.add_argument(
        "--airflow-port",
        type=PORT,
        default=None,
        help="Airflow's API server port (default: the recorded one, else a free one)",
    )
    p.add_argument(
        "--function-port",
        type=PORT,
        default=None,
        help="the Cloud Function's port (default: the recorded one, else a free one)",
    )
    p.add_argument(
        "--spark-connect-port",
        type=PORT,
        default=None,
        help="the Spark Connect server's port (default: the recorded one, else a free one)",
    )
    p.add_argument(
        "--spark-submit",
        action="store_true",
        help="the DAG's dedup as a spark-submit per run instead of a client of the stack's "
        "warm Spark Connect server (fixed at the home's first up)",
    )
    p.add_argument(
        "--dedup-concurrency",
        type=checked(in_range(int, 1, 64), "dedup concurrency"),
        default=None,
        help="dedup tasks running at once across the DAG's runs, each of another date "
        "(TIDEMARK_DEDUP_CONCURRENCY; default 1; fixed at the home's first up)",
    )
    p.add_argument(
        "--trigger-interval", default=None, type=DURATION_TEXT, help="stream micro-batch interval (default 5s)"
    )
    add_session_options(p)
    p.add_argument("--timeout", type=POSITIVE_FLOAT, default=600, help="seconds each component may take to start")
    p.set_defaults(handler=run)


if TYPE_CHECKING:
    from rich.console import Console

    from tidemark.devstack.stack import Stack, StackSettings


def start(args: argparse.Namespace, console: Console) -> tuple[Stack, StackSettings]:
    """Bring the stack up with a spinner; returns (stack, settings). Shared with `tidemark demo`."""
    from tidemark.devstack.stack import Stack  # lazy: the stack's modules pull pyarrow and psutil

    # Typed rules are checked (format now, against the lake's record in up()) before anything starts.
    with user_input():
        rules = parse_overrides(
            getattr(args, "gap", None), getattr(args, "allowed_lateness", None), getattr(args, "watermark_delay", None)
        )
    stack = Stack(args.home)
    ports = {
        "pubsub": getattr(args, "pubsub_port", None),
        "airflow": getattr(args, "airflow_port", None),
        "function": getattr(args, "function_port", None),
        "spark-connect": getattr(args, "spark_connect_port", None),
    }
    with console.status("starting the local stack") as spinner:

        def say(text: str) -> None:
            spinner.update(text)
            if "ready" in text or text.startswith(("session rules", "spark-connect warm-up")):
                console.log(text)

        settings = stack.up(
            say=say,
            timeout=args.timeout,
            lake=getattr(args, "lake", None),
            landing=getattr(args, "landing", None),
            checkpoint=getattr(args, "checkpoint", None),
            db_url=getattr(args, "db_url", None),
            ports=ports,
            trigger_interval=getattr(args, "trigger_interval", None),
            rules=rules,
            spark_connect=False if getattr(args, "spark_submit", False) else None,
            dedup_concurrency=getattr(args, "dedup_concurrency", None),
        )
    return stack, settings


def run(args: argparse.Namespace) -> int:
    """Run `tidemark up`; its exit status."""
    from tidemark.devstack.stack import SettingsConflict, StackError  # lazy: as in start
    from tidemark.session.rules_record import RulesMismatch  # lazy: pulls pyarrow

    console = wide_console(stderr=True)
    try:
        stack, settings = start(args, console)
    except (SettingsConflict, RulesMismatch) as exc:  # refused before anything started
        raise UsageError(str(exc)) from exc
    except StackError as exc:
        console.print(f"[red]tidemark up failed[/red]: {exc}")
        return 1
    print_status(stack, wide_console())
    wide_console().print(
        f"land JSON-lines files in [bold]{settings.landing}[/bold]; "
        f"`tidemark partitions --lake {settings.lake}`; `tidemark down --home {args.home}` to stop"
    )
    return 0
