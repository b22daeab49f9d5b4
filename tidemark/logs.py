"""Structured JSON logs (one object per line on stderr) for every tidemark component.

Log lines name what happened to which partition: pass event_date=, receipt_ts=, version= ... as
keyword fields, never interpolated into the message.
"""
from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


def configure(level: str | None = None) -> None:
    global _configured
    if _configured:
        return
    level_name = (level or os.environ.get("TIDEMARK_LOG_LEVEL", "INFO")).upper()
    logging.basicConfig(stream=sys.stderr, level=level_name, format="%(message)s")
    # py4j logs every callback at INFO (one line per micro-batch); only its problems matter here.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(component: str):
    configure()
    return structlog.get_logger(component=component)
