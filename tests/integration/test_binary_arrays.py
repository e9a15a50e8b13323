"""The typed arrays of `memplane.server.storage.binary_arrays` arrive in PostgreSQL as the same
values as psycopg's own dumping of the plain lists (what `memplane_insert_memories` was
sent before), on a connection of the app's pool: NULLs, empty arrays, non-ASCII text,
times before 2000 and out to 9999, nested JSON, vectors; a pgvector-less connection gets
a clear error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from memplane.server.app import App
from memplane.server.storage.binary_arrays import (
    Int4Array,
    JsonbArray,
    PgArray,
    TextArray,
    TimestamptzArray,
    VectorArray,
    register_array_dumpers,
)

_TIMES = [
    datetime(2026, 12, 5, 17, 36, 35, 643900, tzinfo=UTC),
    None,
    datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(2000, 1, 1, tzinfo=timezone(timedelta(hours=9))),
]
_JSON = [{}, {"a": [1, 2.5, None, True], "ｂ": {"c": "é\u3000x"}}, [], "s", 3]


def _cases() -> list[tuple[str, PgArray, Any]]:
    """(SQL type, typed array, the plain value psycopg dumped before)."""
    vectors = [np.array([0.5, -1.25, 3.0e-7], dtype=np.float32), np.array([1.0, 0.0, 2.0], dtype=np.float32)]
    texts = ["", "plain", "é ＡＢＣ 中文 🙂", "quote ' and \\ back", "[]"]
    return [
        ("text[]", TextArray(texts), texts),
        ("text[]", TextArray(["a", None, "c"]), ["a", None, "c"]),
        ("text[]", TextArray([]), []),
        ("uuid[]", TextArray(["5f2b8c44-2d0e-4c5e-9a39-1b0f5f0d7a11"]), ["5f2b8c44-2d0e-4c5e-9a39-1b0f5f0d7a11"]),
        ("int[]", Int4Array([0, 1, -1, 2**31 - 1, -(2**31)]), [0, 1, -1, 2**31 - 1, -(2**31)]),
        ("timestamptz[]", TimestamptzArray(_TIMES), _TIMES),
        ("timestamptz[]", TimestamptzArray([None, None]), [None, None]),
        ("jsonb[]", JsonbArray(_JSON), [Jsonb(j) for j in _JSON]),
        ("vector[]", VectorArray(vectors), vectors),
    ]


@pytest.mark.parametrize("case", range(len(_cases())))
async def test_a_typed_array_arrives_as_psycopgs_list_did(app: App, case: int) -> None:
    sql_type, typed, plain = _cases()[case]
    async with app.db.admin() as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT %(typed)b::{t} AS typed, %(plain)b::{t} AS plain,"
                " %(typed)b::{t}::text AS typed_text, %(plain)b::{t}::text AS plain_text"
            ).format(t=sql.SQL(sql_type)),  # a type name of this test's table, not a value
            {"typed": typed, "plain": plain},
        )
        row = await cur.fetchone()
    assert row is not None
    assert row["typed_text"] == row["plain_text"]
    if sql_type == "vector[]":
        assert [v.to_list() for v in row["typed"]] == [v.to_list() for v in row["plain"]]
    else:
        assert row["typed"] == row["plain"]


async def test_a_vector_array_needs_pgvector_registered_on_the_connection(app: App) -> None:
    async with await psycopg.AsyncConnection.connect(app.db.dsn, autocommit=True) as conn:
        register_array_dumpers(conn)  # but not pgvector's type
        with pytest.raises(psycopg.ProgrammingError, match="pgvector"):
            await conn.execute("SELECT %b::vector[]", (VectorArray([np.ones(3, dtype=np.float32)]),))
