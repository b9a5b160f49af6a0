"""Structured logs: one event per line, JSON for machines or colored console for people."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
    # asyncpg's pool warns with a traceback at each retry to refill its connections while the
    # database is lost: unstructured lines the node's one `database_lost` already covers.
    logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)
