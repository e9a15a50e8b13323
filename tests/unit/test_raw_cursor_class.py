"""`search._raw_cursor_class` gives a search the connection's own cursor class with
psycopg's raw-query mixin. The telemetry's psycopg instrumentation makes a new cursor
class for every connection it opens: the raw class made for one must not outlive it (a
table of them kept every class a long-running server ever made, one per pool refill)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from psycopg import AsyncCursor, AsyncRawCursor
from psycopg.raw_cursor import RawCursorMixin

from memplane.server.storage.search import _raw_cursor_class


def _per_connection_class() -> type[AsyncCursor[Any]]:
    """What the instrumentation does on each connect: a fresh subclass of the cursor class."""

    class TracedCursor(AsyncCursor[Any]):
        pass

    return TracedCursor


def test_psycopgs_own_cursor_gets_psycopgs_raw_cursor() -> None:
    assert _raw_cursor_class(AsyncCursor) is AsyncRawCursor
    assert _raw_cursor_class(AsyncRawCursor) is AsyncRawCursor


def test_a_connections_class_gets_one_raw_subclass_that_dies_with_it() -> None:
    factory = _per_connection_class()
    raw = _raw_cursor_class(factory)
    assert issubclass(raw, factory)
    assert issubclass(raw, RawCursorMixin)
    assert raw.__mro__.index(RawCursorMixin) < raw.__mro__.index(factory)  # the raw query class wins
    assert _raw_cursor_class(factory) is raw  # made once
    assert _raw_cursor_class(_per_connection_class()) is not raw  # each connection's own

    gone = weakref.ref(factory)
    del factory, raw
    gc.collect()
    assert gone() is None
