"""The connection pool and the two kinds of transaction: tenant and admin.

`tenant(workspace_key)` runs as role `memplane_tenant` with `memplane.workspace_key`
set, so row-level security hides every other workspace (the second wall; the first is
the explicit `workspace_key = %s` in every query). `admin()` runs as the DSN's user for
workspace DDL and cross-workspace reads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from memplane.errors import DeadlineExceededError, UnavailableError

_log = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[dict[str, Any]]


class Database:
    """An `AsyncConnectionPool` over one PostgreSQL with pgvector.

    Construct, then `await open()`; `await close()` at shutdown. Connections return rows
    as dicts, know the `vector` type and carry a statement timeout. Every value is a
    bound parameter, so psycopg prepares a repeated statement (after 5 uses) and
    PostgreSQL may reuse its plan (a generic plan prunes the workspace's partitions when
    it runs).
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 2,
        max_size: int = 16,
        timeout: float = 30.0,
        statement_timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self._statement_timeout_ms = int(statement_timeout * 1000)
        self._timeout = timeout
        self._pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            configure=self._configure,
            kwargs={"row_factory": dict_row, "autocommit": False},
        )

    async def _configure(self, conn: Connection) -> None:
        await register_vector_async(conn)
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('timezone', 'UTC', false)",
            (str(self._statement_timeout_ms),),
        )
        await conn.commit()

    # Sessions run in UTC so that every timestamptz comes back as an aware UTC datetime.

    async def open(self) -> None:
        """Open the pool and wait until *min_size* connections are ready.

        Raises `UnavailableError` if the database cannot be reached within the pool timeout.
        """
        try:
            await self._pool.open(wait=True, timeout=self._timeout)
        except PoolTimeout as exc:
            raise UnavailableError(f"database not reachable within {self._timeout} s") from exc

    async def close(self) -> None:
        """Close every connection."""
        await self._pool.close()

    @asynccontextmanager
    async def admin(self) -> AsyncIterator[Connection]:
        """A transaction as the DSN's user (owner of the schema)."""
        async with self._connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def tenant(self, workspace_key: int, *, pipeline: bool = False) -> AsyncIterator[Connection]:
        """A transaction confined to one workspace by row-level security.

        *pipeline*: in psycopg's pipeline mode, statements go to the server without
        waiting for each other's results, which arrive when a result is fetched (or at
        COMMIT): a write of several statements costs a round trip per read instead of one
        per statement. The caller then reads results by fetching, never through
        `cursor.rowcount`, and sees a statement's error at the next fetch or at the end.
        """
        async with (
            self._connection() as conn,
            conn.pipeline() if pipeline else contextlib.nullcontext(),
            conn.transaction(),
        ):
            await conn.execute(
                "SELECT set_config('role', 'memplane_tenant', true), set_config('memplane.workspace_key', %s, true)",
                (str(workspace_key),),
            )
            yield conn

    @asynccontextmanager
    async def tenant_pipeline(self, workspace_key: int, settings: Mapping[str, str]) -> AsyncIterator[Connection]:
        """A tenant transaction in pipeline mode, for reads: BEGIN, the role and workspace
        and *settings* (`set_config(name, value, true)`, e.g. hnsw.ef_search), the caller's
        statements and COMMIT go to the server together, in one round trip. Read the
        cursors' results after the block (they arrive when it exits)."""
        names = ["role", "memplane.workspace_key", *settings]
        values = ["memplane_tenant", str(workspace_key), *settings.values()]
        setting = "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in names)
        async with self._connection() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(setting, [v for pair in zip(names, values, strict=True) for v in pair])
            yield conn

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        try:
            async with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise UnavailableError("no database connection free within the pool timeout") from exc
        except psycopg.errors.QueryCanceled as exc:
            raise DeadlineExceededError(f"a statement ran past the statement timeout ({exc.sqlstate})") from exc
        except psycopg.OperationalError as exc:
            raise UnavailableError(f"database unavailable: {exc.sqlstate or 'connection error'}") from exc


async def fetch_one(cur: psycopg.AsyncCursor[dict[str, Any]]) -> dict[str, Any]:
    """The first row of a query that always returns one (aggregates, RETURNING).

    Raises `RuntimeError` if it returned none: a bug, not a user error.
    """
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("query returned no row")
    return row
