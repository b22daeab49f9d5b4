"""What the subcommands share about their arguments.

The help formatter, option groups used by several commands, argparse `type=` checkers, and the line
between a usage error and a failure.

A usage error is the user's (a malformed date, a duration that is not one, two options that do not
go together): argparse reports it with the usage line and exit status 2. `type=` checkers below
turn the domain's ValueError into argparse's ArgumentTypeError; checks that need several options or
the lake raise UsageError (or run inside `user_input()`) and tidemark.cli hands them to the
subcommand's parser. Any other exception is a real failure (exit status 1, cause logged), even a
ValueError: a corrupt marker or an Arrow error is not something the user typed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from datetime import date
from typing import TYPE_CHECKING, Any, TypeAlias

from tidemark.base.durations import parse_duration
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import GAP_BOUNDARIES

if TYPE_CHECKING:
    from tidemark.store.lake import Lake

# What `Parser.add_subparsers()` returns, which every command's `register` adds its parser to
# (argparse's class is private; the string keeps it out of the runtime, where it is not subscriptable).
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


class UsageError(Exception):
    """A bad argument found by a handler: reported by argparse, exit status 2."""


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Checks of what the user typed: a ValueError raised inside becomes a UsageError."""
    try:
        yield
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keep the layout of `description=__doc__` and show each option's default.

    Except where there is nothing to show (None, a flag's False) or the help text already says it.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action) or text


class Parser(argparse.ArgumentParser):
    """ArgumentParser with HelpFormatter; add_subparsers() makes its subparsers of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Take ArgumentParser's arguments; the formatter is HelpFormatter unless one is given."""
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def checked(check: Callable[[str], object], name: str, keep_text: bool = False) -> Callable[[str], object]:
    """An argparse `type=` from a domain check raising ValueError.

    keep_text: return the typed text (the check only validates it), else the check's result.
    """

    def convert(text: str) -> object:
        try:
            value = check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
        return text if keep_text else value

    convert.__name__ = name  # argparse names the type in some of its messages
    return convert


def _event_date(text: str) -> date:
    """THE parse of an event date the user typed: a `datetime.date` from here on."""
    return as_event_date(text)


def _lake(text: str) -> Lake:
    from tidemark.store.lake import Lake  # lazy: pulls pyarrow, kept out of the CLI's start

    return Lake.open(text)


def _topic(text: str) -> str:
    from tidemark.notices.sender import check_destination  # lazy: pulls jsonschema, kept out of the CLI's start

    return check_destination(text)


def in_range(
    kind: type[int] | type[float], low: float | None = None, high: float | None = None, positive: bool = False
) -> Callable[[str], object]:
    """A check for a number of `kind` within [low, high], or above 0 (for checked())."""

    def check(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"invalid {kind.__name__} value {text!r}") from None
        if positive and not value > 0:
            raise ValueError(f"{text} is out of range: must be positive")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = (
                f"between {low:g} and {high:g}"
                if low is not None and high is not None
                else f"at least {low:g}"
                if low is not None
                else f"at most {high:g}"
            )
            raise ValueError(f"{text} is out of range: must be {bounds}")
        return value

    return check


EVENT_DATE = checked(_event_date, "event_date")
LAKE = checked(_lake, "lake")  # the adapters open the lake once; everything below takes the handle
DURATION_TEXT = checked(parse_duration, "duration", keep_text=True)
TOPIC = checked(_topic, "topic")
POSITIVE_INT = checked(in_range(int, low=1), "positive_int")
POSITIVE_FLOAT = checked(in_range(float, positive=True), "positive_float")
FRACTION = checked(in_range(float, low=0, high=1), "fraction")


def add_home_option(p: argparse.ArgumentParser) -> None:
    """--home: the local stack's state folder."""
    p.add_argument("--home", default=".tidemark", help="the local stack's state folder")


def add_session_options(p: argparse.ArgumentParser, default_note: str | None = None, boundary: bool = False) -> None:
    """Add --gap, --allowed-lateness, --watermark-delay (and --gap-boundary with boundary=True).

    --gap-boundary is for the commands that record rules. Default None: a command can tell what was
    typed (and check it against the lake's rules record) from what was not.
    """

    def note(code_default: str) -> str:
        return default_note or f"(default: the lake's recorded rules; for a new lake {code_default})"

    p.add_argument(
        "--gap",
        default=None,
        type=DURATION_TEXT,
        help=f"session gap: events closer than this form one session {note('30m')}",
    )
    p.add_argument(
        "--allowed-lateness",
        default=None,
        type=DURATION_TEXT,
        help=f"how long after its window closes a session still takes late events {note('1h')}",
    )
    p.add_argument(
        "--watermark-delay",
        default=None,
        type=DURATION_TEXT,
        help=f"the watermark trails the maximum event time seen by this much {note('10m')}",
    )
    if boundary:
        p.add_argument(
            "--gap-boundary",
            default=None,
            choices=GAP_BOUNDARIES,
            help="events exactly one gap apart: split = two sessions (Beam), merge = one session "
            f"(Spark's session_window, Flink) {note('split')}",
        )


def add_airflow_options(p: argparse.ArgumentParser) -> None:
    """--home, --airflow-url, --airflow-user, --airflow-password-file: which Airflow to talk to."""
    p.add_argument("--home", default=".tidemark", help="local stack state folder, for its Airflow")
    p.add_argument("--airflow-url", default=None, help="Airflow base URL (default: the local stack's, if up)")
    p.add_argument("--airflow-user", default="admin", help="Airflow user name (with --airflow-url)")
    p.add_argument(
        "--airflow-password-file", default=None, help="file holding the Airflow password (default: $AIRFLOW_PASSWORD)"
    )


def read_airflow_password(args: argparse.Namespace) -> str | None:
    """The password for --airflow-url: from --airflow-password-file, else $AIRFLOW_PASSWORD."""
    if args.airflow_password_file:
        with open(args.airflow_password_file) as handle:
            return handle.read().strip()
    return os.environ.get("AIRFLOW_PASSWORD")
