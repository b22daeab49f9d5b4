"""JSON log lines that Cloud Logging understands.

One object per line on stdout with `severity` and `message` (Cloud Run functions parse those into
the entry's severity and summary); every other key becomes a jsonPayload field, so filters like
jsonPayload.run_id="..." work.

Callers pass what a log line is about (notice_id, event_date, run_id ...) as keyword fields.
Never pass a credential: nothing here can tell one apart.
"""

from __future__ import annotations

import sys
from typing import TextIO, cast

import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "critical": "CRITICAL",
    "exception": "ERROR",
}


def _severity(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["severity"] = _SEVERITY.get(method_name, "DEFAULT")
    return event_dict


class _Stdout:
    """Writes to sys.stdout as it is at each write (redirected or captured streams get the lines)."""

    def write(self, text: str) -> None:
        """Write to the current sys.stdout."""
        sys.stdout.write(text)

    def flush(self) -> None:
        """Flush the current sys.stdout."""
        sys.stdout.flush()


_PROCESSORS: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    _severity,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
    structlog.processors.format_exc_info,
    structlog.processors.EventRenamer("message"),
    structlog.processors.JSONRenderer(sort_keys=False),
]


def get_logger(component: str) -> FilteringBoundLogger:
    """A logger whose lines carry `component` and Cloud Logging's severity."""
    # Wrapped, not structlog.configure()d: global configuration would be shared with any other
    # structlog user in the process (tidemark's own logs, in tests and local runs).
    logger = structlog.wrap_logger(
        structlog.PrintLogger(file=cast(TextIO, _Stdout())), processors=_PROCESSORS, component=component
    )
    # wrap_logger returns Any; with the default wrapper class the logger is a filtering bound logger
    return cast(FilteringBoundLogger, logger)
