"""Every log line a block of code writes, captured: :func:`captured_logs` (the secret and
traceback tests search them for what must never be logged)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import structlog


@contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every structlog event and stdlib record at DEBUG and up, rendered with tracebacks,
    into one buffer; the logging configuration is restored afterwards."""
    buffer = io.StringIO()
    previous = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.WriteLoggerFactory(file=buffer),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        structlog.configure(**previous)
