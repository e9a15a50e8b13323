"""Versioned SQL migrations, applied once under a PostgreSQL advisory lock.

Files `migrations/NNNN_name.sql` run in order; applied versions are recorded in
`schema_migrations`. Concurrent callers (several replicas starting at once) serialise on
`pg_advisory_lock(MIGRATION_LOCK_ID)`; the second finds the work done.
"""

from __future__ import annotations

import logging
from importlib import resources

import psycopg

_log = logging.getLogger(__name__)

# Arbitrary constant identifying memplane's migration lock (ASCII "mplanemi").
MIGRATION_LOCK_ID = 0x6D706C616E656D69


def _migrations() -> list[tuple[int, str, str]]:
    files = resources.files("memplane.server.storage") / "migrations"
    found = []
    for entry in files.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


async def apply_migrations(dsn: str, *, up_to: int | None = None) -> list[str]:
    """Apply pending migrations to the database at *dsn* (those numbered at most *up_to*,
    if given: a test of a migration's backfill); return the names applied.

    Each migration runs in its own transaction with its version row, so a failing one
    leaves the schema at the previous version. Raises `psycopg.Error` on SQL failure.
    """
    applied: list[str] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for version, name, text in _migrations():
                if version in done or (up_to is not None and version > up_to):
                    continue
                async with conn.transaction():
                    await conn.execute(text.encode())
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                _log.info("applied migration %s", name)
                applied.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied


async def pending_migrations(dsn: str) -> list[str]:
    """Names of the migrations the database at *dsn* has not applied yet (all of them for
    an empty database). Raises `psycopg.Error` if it cannot be read."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
        row = await cur.fetchone()
        done: set[int] = set()
        if row is not None and row[0]:
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {r[0] for r in await cur.fetchall()}
    return [name for version, name, _ in _migrations() if version not in done]


def unreachable(error: BaseException) -> bool:
    """Whether *error*, raised by `apply_migrations` or `pending_migrations`, says the
    server could not be reached (a connection error), rather than a failing migration."""
    if isinstance(error, OSError):
        return True
    # No SQLSTATE: libpq could not connect; 08: connection exceptions; 57P: the server shutting down.
    return isinstance(error, psycopg.OperationalError) and (error.sqlstate or "08").startswith(("08", "57P"))
