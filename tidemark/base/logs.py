"""Structured JSON logs (one object per line on stderr) for every tidemark component.

Inside an Airflow task the lines go to the standard logger `tidemark.<component>` at their own
level instead (`LineSink`): Airflow 3 records whatever a task writes to stderr at level ERROR.

Log lines name what happened to which partition: pass event_date=, receipt_ts=, version= ... as
keyword fields, never interpolated into the message.

Loggers are wrapped here rather than through structlog.configure(): global configuration would be
shared with (and overwritten by) any other structlog user in the same process, such as the Cloud
Function's Cloud Logging format.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from datetime import date, datetime
from typing import Any, TextIO, TypeAlias, cast

import structlog
from structlog.typing import FilteringBoundLogger, Processor

from tidemark.base import times


def _json_field(value: object) -> object:
    """A field JSON has no type for: dates and instants as ISO 8601 text, the rest as structlog does."""
    if isinstance(value, datetime):
        return times.iso_z(value, "auto")
    if isinstance(value, date):
        return value.isoformat()
    custom = getattr(value, "__structlog__", None)
    return custom() if callable(custom) else repr(value)


# What get_logger returns: info/warning/error/exception(event, **fields), bind(**fields).
Logger: TypeAlias = FilteringBoundLogger

_PROCESSORS: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.format_exc_info,
    structlog.processors.JSONRenderer(sort_keys=False, default=_json_field),
]
_stdlib_configured = False


class CurrentStream:
    """Writes to sys.<name> as it is at each write, so redirected or captured streams get the lines."""

    def __init__(self, name: str):
        """Write to `sys.<name>` ("stdout" or "stderr")."""
        self.name = name

    def write(self, text: str) -> None:
        """Write `text` to the stream as it is now."""
        getattr(sys, self.name).write(text)

    def flush(self) -> None:
        """Flush the stream as it is now."""
        getattr(sys, self.name).flush()


# Set in the environment of an Airflow task while it executes (airflow.sdk's task runner, with the
# other AIRFLOW_CTX_* variables) and inherited by what it starts.
AIRFLOW_TASK_ENV = "AIRFLOW_CTX_TASK_ID"


class LineSink:
    """Where a component's rendered lines go, chosen at each line.

    On stderr as they are (CurrentStream: a redirected or captured stderr gets them), except inside
    an Airflow task: its supervisor records the task's stderr at level ERROR, so every line of a
    successful dedup showed as an error in the Airflow UI. There a line goes to the standard logger
    `tidemark.<component>` at the level it was logged at, which Airflow records as it is (a
    process the task starts, such as spark-submit, logs it through the standard logging configured
    below: the same line on stderr).
    """

    def __init__(self, component: str):
        """Lines of `component`."""
        self._stderr = structlog.PrintLogger(file=cast(TextIO, CurrentStream("stderr")))
        self._logger = logging.getLogger(f"tidemark.{component}")

    def _write(self, level: int, line: str) -> None:
        if os.environ.get(AIRFLOW_TASK_ENV):
            self._logger.log(level, line)
        else:
            self._stderr.msg(line)

    def debug(self, line: str) -> None:
        """A DEBUG line."""
        self._write(logging.DEBUG, line)

    def info(self, line: str) -> None:
        """An INFO line."""
        self._write(logging.INFO, line)

    def warning(self, line: str) -> None:
        """A WARNING line."""
        self._write(logging.WARNING, line)

    def error(self, line: str) -> None:
        """An ERROR line (exception() logs through it)."""
        self._write(logging.ERROR, line)

    def critical(self, line: str) -> None:
        """A CRITICAL line."""
        self._write(logging.CRITICAL, line)

    # structlog's other spellings of the same levels
    warn = warning
    exception = error
    fatal = critical
    msg = info


def _level() -> int:
    return getattr(logging, os.environ.get("TIDEMARK_LOG_LEVEL", "INFO").upper(), logging.INFO)


def configure(level: str | None = None) -> None:
    """Standard logging of the libraries underneath (once): to stderr, py4j quieted."""
    global _stdlib_configured
    if _stdlib_configured:
        return
    logging.basicConfig(
        stream=sys.stderr, level=(level or os.environ.get("TIDEMARK_LOG_LEVEL", "INFO")).upper(), format="%(message)s"
    )
    # py4j logs every callback at INFO (one line per micro-batch); only its problems matter here.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    _stdlib_configured = True


def get_logger(component: str) -> Logger:
    """A structured logger whose every line names `component`, at TIDEMARK_LOG_LEVEL (INFO by default)."""
    configure()
    # wrap_logger is typed to return Any; the wrapper class asked for is a FilteringBoundLogger.
    logger: Logger = structlog.wrap_logger(
        LineSink(component),
        processors=_PROCESSORS,
        wrapper_class=structlog.make_filtering_bound_logger(_level()),
        component=component,
    )
    return logger


def read_log_lines(text: str) -> list[dict[str, Any]]:
    """The structured (JSON object) lines of a log's text, skipping everything else.

    Skipped: a library's plain lines, a line cut short by a kill. This is how tests, benchmarks and
    `tidemark status` read what a component logged.
    """
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
