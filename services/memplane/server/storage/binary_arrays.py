"""One-dimensional arrays sent to PostgreSQL in binary, typed by their wrapper.

`memplane_insert_memories` (migration 0011) takes one array per column, twenty of them
for every AddMemories call. psycopg dumps a Python list by inspecting its elements
first (the element's dumper, then the array's oid: `ListBinaryDumper.get_key` and
`upgrade`, in Python, per parameter and per call): on a one-memory insert that was the
largest part (55 % under cProfile) of the statement's Python CPU, 0.36 ms at 8
concurrent callers against 0.10 ms for a plain three-column INSERT; the parameters'
dumping took 51.5 µs, with these wrappers 21.1 µs (0.29 ms for the statement). A
wrapper whose type names the element type skips that: its dumper knows its oid and
writes PostgreSQL's binary array format directly (array_recv in
src/backend/utils/adt/arrayfuncs.c: ndim, has-null flag, element oid,
then length and lower bound 1, then each element as its length and its bytes, -1 for
NULL; the elements in the binary forms of `textsend`, `int4send`, `timestamptz_send`,
`jsonb_send` (version byte 1, then the JSON text) and pgvector's `vector_send` (dim,
unused, then big-endian float4s)).

`register_array_dumpers(conn)` installs the dumpers on a connection (the pool does it for
every connection it opens, after pgvector's type is registered); a wrapper sent on a
connection without them is psycopg's "cannot adapt type" error.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import numpy as np
import psycopg
from psycopg import pq
from psycopg.adapt import Dumper

_HEAD = struct.Struct("!iiiii")  # ndim 1, has null, element oid, length, lower bound 1
_EMPTY = struct.Struct("!iii")  # ndim 0, no null, element oid
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)
_INT4 = struct.Struct("!i")
_INT8 = struct.Struct("!q")
_VECTOR_HEAD = struct.Struct("!HH")
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz counts microseconds from it
_MICROSECOND = timedelta(microseconds=1)

TEXT_OID, INT4_OID, TIMESTAMPTZ_OID, JSONB_OID = 25, 23, 1184, 3802
TEXT_ARRAY_OID, INT4_ARRAY_OID, TIMESTAMPTZ_ARRAY_OID, JSONB_ARRAY_OID = 1009, 1007, 1185, 3807


class PgArray:
    """A sequence of values of one PostgreSQL type, sent as a one-dimensional array of it
    (the subclass names the type); None elements are NULL."""

    __slots__ = ("items",)
    element: ClassVar[str]

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.items)!r})"


class TextArray(PgArray):
    """text[] of str."""

    __slots__ = ()
    element = "text"


class Int4Array(PgArray):
    """int4[] of int (-2**31 .. 2**31-1)."""

    __slots__ = ()
    element = "int4"


class TimestamptzArray(PgArray):
    """timestamptz[] of aware datetimes (a naive one is taken as UTC, as psycopg does not:
    pass aware ones)."""

    __slots__ = ()
    element = "timestamptz"


class JsonbArray(PgArray):
    """jsonb[] of JSON-able values, serialised by `json.dumps` (psycopg's default)."""

    __slots__ = ()
    element = "jsonb"


class VectorArray(PgArray):
    """vector[] (pgvector) of float vectors (numpy arrays or sequences of floats)."""

    __slots__ = ()
    element = "vector"


class _ArrayDumper(Dumper):
    format = pq.Format.BINARY
    element_oid: int = 0  # the element type's oid (the class's, or the connection's for vector)

    def _element(self, item: Any) -> bytes:
        raise NotImplementedError

    def dump(self, obj: PgArray) -> bytes:
        items = obj.items
        if not items:
            return _EMPTY.pack(0, 0, self.element_oid)
        parts: list[bytes] = []
        hasnull = 0
        for item in items:
            if item is None:
                parts.append(_NULL)
                hasnull = 1
            else:
                data = self._element(item)
                parts.append(_LENGTH.pack(len(data)))
                parts.append(data)
        return _HEAD.pack(1, hasnull, self.element_oid, len(items), 1) + b"".join(parts)


class _TextArrayDumper(_ArrayDumper):
    oid, element_oid = TEXT_ARRAY_OID, TEXT_OID

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        self._encoding = self.connection.info.encoding if self.connection else "utf-8"

    def _element(self, item: str) -> bytes:
        return item.encode(self._encoding)


class _Int4ArrayDumper(_ArrayDumper):
    oid, element_oid = INT4_ARRAY_OID, INT4_OID

    def _element(self, item: int) -> bytes:
        return _INT4.pack(item)


class _TimestamptzArrayDumper(_ArrayDumper):
    oid, element_oid = TIMESTAMPTZ_ARRAY_OID, TIMESTAMPTZ_OID

    def _element(self, item: datetime) -> bytes:
        if item.tzinfo is None:
            item = item.replace(tzinfo=UTC)
        return _INT8.pack((item - _PG_EPOCH) // _MICROSECOND)


class _JsonbArrayDumper(_ArrayDumper):
    oid, element_oid = JSONB_ARRAY_OID, JSONB_OID

    def _element(self, item: Any) -> bytes:
        return b"\x01" + json.dumps(item).encode()


class _VectorArrayDumper(_ArrayDumper):
    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        info = self.connection.adapters.types.get("vector") if self.connection else None
        if info is None:
            raise psycopg.ProgrammingError("VectorArray needs pgvector's type registered on the connection")
        self.oid, self.element_oid = info.array_oid, info.oid

    def _element(self, item: Any) -> bytes:
        values = np.asarray(item, dtype=">f4")
        return _VECTOR_HEAD.pack(values.shape[0], 0) + values.tobytes()


_DUMPERS: dict[type[PgArray], type[_ArrayDumper]] = {
    TextArray: _TextArrayDumper,
    Int4Array: _Int4ArrayDumper,
    TimestamptzArray: _TimestamptzArrayDumper,
    JsonbArray: _JsonbArrayDumper,
    VectorArray: _VectorArrayDumper,
}


def register_array_dumpers(conn: psycopg.AsyncConnection[Any]) -> None:
    """Install the `PgArray` wrappers' dumpers on *conn* (after pgvector's
    `register_vector_async`, which `VectorArray` needs)."""
    for cls, dumper in _DUMPERS.items():
        conn.adapters.register_dumper(cls, dumper)
