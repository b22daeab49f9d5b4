"""The `tidemark` command: one subcommand per module in tidemark/commands/ (COMMANDS).

Exit status: 0 done; 2 a usage error (argparse's: a malformed or conflicting argument, nothing
done); 1 a failure (the cause is logged on stderr as a JSON line with its traceback); a command may
document others (`status` 3: not everything runs); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from tidemark import __version__
from tidemark.commands import (
    class_archive,
    dedup,
    demo,
    down,
    exporter,
    function_bundle,
    gc,
    generate,
    health,
    history,
    landing,
    notices,
    partitions,
    quarantine,
    read,
    reconcile,
    reindex,
    rules,
    status,
    stream,
    up,
)
from tidemark.commands.options import Parser, Subparsers, UsageError

__all__ = ["COMMANDS", "UsageError", "build_parser", "main"]

# Each subcommand's `register`, in the order `tidemark --help` lists them.
COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    generate.register,
    stream.register,
    quarantine.register,
    landing.register,
    notices.register,
    dedup.register,
    rules.register,
    read.register,
    gc.register,
    reindex.register,
    demo.register,
    up.register,
    down.register,
    status.register,
    history.register,
    partitions.register,
    reconcile.register,
    function_bundle.register,
    exporter.register,
    health.register,
    class_archive.register,
)


def build_parser() -> argparse.ArgumentParser:
    """The `tidemark` parser with every subcommand of COMMANDS."""
    parser = Parser(
        prog="tidemark", description="Late, duplicated, out-of-order events into event-time partitions you can trust."
    )
    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in COMMANDS:
        register(subparsers)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Make each (sub)parser record itself as args.usage_parser.

    A handler's UsageError is then reported by the parser of the command that was typed (the
    innermost one wins).
    """
    parser.set_defaults(usage_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                _remember_parsers(sub)


def main(argv: list[str] | None = None) -> int:
    """Run one `tidemark` command line; its exit status (see the module's docstring)."""
    parser = build_parser()
    args = argparse.Namespace(command=None)
    if argv is not None:  # path-like arguments (a Lake, a pathlib.Path) as subprocess takes them
        argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
    try:
        args = parser.parse_args(argv)
        try:
            return int(args.handler(args) or 0)
        except UsageError as exc:
            args.usage_parser.error(str(exc))  # prints the usage line; raises SystemExit(2)
            raise  # not reached: error() exits
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: any failure is logged, exit status 1
        from tidemark.base.logs import get_logger  # lazy: its rich tracebacks cost the CLI's start

        get_logger("tidemark.cli").error(
            "command failed", command=args.command, error=f"{type(exc).__name__}: {exc}", exc_info=True
        )
        print(f"tidemark {args.command}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
