"""The `tidemark` command: one subcommand per module in tidemark/commands/."""
from __future__ import annotations

import argparse
import importlib
import sys

from tidemark import __version__
from tidemark.commands import COMMAND_MODULES


class UsageError(Exception):
    """A bad argument: printed as a one-line message, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="Late, duplicated, out-of-order events into event-time partitions you can trust.")
    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"tidemark.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (UsageError, ValueError) as exc:
        print(f"tidemark {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
