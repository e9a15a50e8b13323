"""The connection pool and the two kinds of transaction: tenant and admin.

`tenant(workspace_key)` runs as role `memplane_tenant` with `memplane.workspace_key`
set, so row-level security hides every other workspace (the second wall; the first is
the explicit `workspace_key = %s` in every query). `admin()` runs as the DSN's user for
workspace DDL and cross-workspace reads.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
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
    as dicts, know the `vector` type, use custom plans (partition pruning by literal
    workspace) and carry a statement timeout.
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
            "SELECT set_config('plan_cache_mode', 'force_custom_plan', false),"
            " set_config('statement_timeout', %s, false), set_config('timezone', 'UTC', false)",
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
    async def tenant(self, workspace_key: int) -> AsyncIterator[Connection]:
        """A transaction confined to one workspace by row-level security."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT set_config('role', 'memplane_tenant', true), set_config('memplane.workspace_key', %s, true)",
                (str(workspace_key),),
            )
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
