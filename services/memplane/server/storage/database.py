"""The connection pool and the two kinds of transaction: tenant and admin.

`tenant(workspace_key)` runs as role `memplane_tenant` with `memplane.workspace_key`
set, so row-level security hides every other workspace (the second wall; the first is
the explicit `workspace_key = %s` in every query). `admin()` runs as the DSN's user for
workspace DDL and cross-workspace reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from memplane.errors import DeadlineExceededError, QuotaExceededError, UnavailableError, WorkspaceDeletedError
from memplane.server.quota.fair import FairGate
from memplane.server.storage import commits
from memplane.server.storage.availability import Availability
from memplane.server.storage.binary_arrays import register_array_dumpers

_log = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[dict[str, Any]]

# Raised by memplane_enter_workspace() (0008_tenant_isolation.sql) when a tenant
# transaction names a deleted workspace: a credential cached before the deletion.
WORKSPACE_GONE_SQLSTATE = "MPW01"

# Raised by memplane_check_quotas() (0011_quota_check.sql) when a write would pass a
# workspace's max_memories or max_bytes; DETAIL is JSON {"subject", "quota_id", "limit"}.
QUOTA_EXCEEDED_SQLSTATE = "MPQ01"

_REPLAY_POLL_SECONDS = 0.005  # between checks of a standby's replay position while a read waits for it

# A cancelled or expired RPC cancels its statement (psycopg's AsyncConnection.wait() sends
# the server a cancel on CancelledError). Should the cancel miss (it races the next
# statement of a pipeline) or time out, psycopg closes the connection, and a backend
# blocked on a lock never reads its socket: it would wait on, holding its place in the
# lock queue, until statement_timeout. PostgreSQL >= 14 checks that the client is still
# there every client_connection_check_interval while a query runs, and ends the backend if
# not (PostgreSQL docs, "Connection Settings"; measured here: gone 0.6 s after the client).
CLIENT_CHECK_INTERVAL_MS = 1_000


class ReplicaBehindError(Exception):
    """A standby had not replayed a required WAL position within the wait (storage-internal:
    `ReadRouter` answers it by reading from the primary)."""


async def _discard_if_pipelined(conn: Connection) -> None:
    """The pool's check of each returned connection: one still in pipeline mode (psycopg's
    pipeline object left set, or libpq's pipeline not exited — a task cancelled while it
    left a pipeline block can leave either) raises, so the pool discards it. Kept, it
    would pipeline every later statement of whoever got it next: CI saw a plain DELETE
    report rowcount -1 and the blob sweeper log "deleted -1"."""
    if conn._pipeline is not None or conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
        raise psycopg.InterfaceError("connection returned in pipeline mode: discarded")


class Database:
    """An `AsyncConnectionPool` over one PostgreSQL with pgvector.

    Construct, then `await open()`; `await close()` at shutdown. Connections return rows
    as dicts, know the `vector` type and carry a statement timeout and a check that their
    client is still there (CLIENT_CHECK_INTERVAL_MS). Every value is a
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
        connect_timeout: float | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
        name: str = "",
    ) -> None:
        """*prepare*: run once the server first answers a probe, before the database
        counts as up (a cluster that was down when the process started: its migrations);
        until it succeeds the database stays down. *name*: the database cluster's, named
        in its availability's messages and log lines ("": one database)."""
        self.dsn = dsn
        self._prepare = prepare
        self._statement_timeout_ms = int(statement_timeout * 1000)
        self._timeout = timeout
        self._pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            configure=self._configure,
            reset=_discard_if_pipelined,
            kwargs={"row_factory": dict_row, "autocommit": False}
            | ({"connect_timeout": max(1, round(connect_timeout))} if connect_timeout else {}),
        )
        self.availability = Availability(dsn, recover=self._recover, connect_timeout=connect_timeout or 2.0, name=name)
        # Connections go to workspaces in fair order, one always left for another workspace
        # than the one holding the rest (memplane.server.quota.fair).
        self.gate = FairGate(max_size, reserve=1)

    async def _recover(self) -> None:
        """After a probe reached the server: *prepare* (once), then drop the pool's broken
        idle connections (`AsyncConnectionPool.check`)."""
        if self._prepare is not None:
            await self._prepare()
            self._prepare = None
        await self._pool.check()

    async def _configure(self, conn: Connection) -> None:
        await register_vector_async(conn)
        register_array_dumpers(conn)
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('timezone', 'UTC', false),"
            " set_config('client_connection_check_interval', %s, false)",
            (str(self._statement_timeout_ms), str(CLIENT_CHECK_INTERVAL_MS)),
        )
        await conn.commit()

    # Sessions run in UTC so that every timestamptz comes back as an aware UTC datetime.

    async def open(self, *, wait: bool = True) -> None:
        """Open the pool and, with *wait*, wait until *min_size* connections are ready
        (without: they connect in the background, and a request waits for one at most the
        pool timeout).

        Raises `UnavailableError` if the database cannot be reached within the pool timeout.
        """
        try:
            await self._pool.open(wait=wait, timeout=self._timeout)
        except PoolTimeout as exc:
            raise UnavailableError(f"database not reachable within {self._timeout} s") from exc

    async def close(self, seconds: float = 5.0) -> None:
        """Stop probing and close every idle connection, waiting up to *seconds* for the
        pool's workers (`AsyncConnectionPool.close(timeout=...)`); a connection still in
        use is closed when it comes back."""
        await self.availability.close()
        await self._pool.close(timeout=seconds)

    @asynccontextmanager
    async def admin(self) -> AsyncIterator[Connection]:
        """A transaction as the DSN's user (owner of the schema)."""
        async with self._connection() as conn, conn.transaction():
            yield conn

    async def delete_in_batches(self, statement: Any, params: Mapping[str, Any], *, batch_size: int) -> int:
        """Run *statement* (a DELETE of at most %(batch)s rows) in one admin transaction
        after another until a run deletes fewer than *batch_size*; the total deleted.
        Short transactions keep locks and WAL per commit bounded (the sweeps). Raises
        `ValueError` for a batch size < 1; database errors propagate."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        deleted = 0
        while True:
            async with self.admin() as conn:
                cur = await conn.execute(statement, {**params, "batch": batch_size})
                count = cur.rowcount
            deleted += count
            if count < batch_size:
                return deleted

    async def write_position(self, workspace_key: int) -> tuple[str, int]:
        """(the server's current WAL write position, `pg_current_wal_lsn()` "X/Y" hex; the
        workspace's history-event counter, the last id its sequence gave), read after the
        caller's commits and after every writer holding an id up to the counter has ended
        (`memplane_settled_event_counter`, migration 0014: it waits for them): a standby
        that has replayed up to the position shows every event up to the counter. Raises
        `UnavailableError` / `DeadlineExceededError` as every call."""
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT lsn::text AS lsn, counter FROM memplane_settled_event_counter(%(ws)s)", {"ws": workspace_key}
            )
            row = await fetch_one(cur)
            await conn.rollback()
        return str(row["lsn"]), int(row["counter"] or 0)

    async def read_token_key(self) -> bytes:
        """The 32-byte key that seals read-your-writes tokens (`server_secrets`, migration
        0009). Raises `UnavailableError` as every call."""
        async with self._connection() as conn:
            cur = await conn.execute("SELECT secret FROM server_secrets WHERE name = %(name)s", {"name": "read_token"})
            row = await fetch_one(cur)
            await conn.rollback()
        return bytes(row["secret"])

    async def replica_state(self) -> tuple[bool, float]:
        """(streaming, lag seconds) of a standby: whether a WAL receiver runs, and the age of
        the last replayed commit while replay is behind the received WAL (0.0 when caught
        up with everything received). A server not in recovery answers (True, 0.0)."""
        async with self._connection() as conn:
            cur = await conn.execute(_REPLICA_STATE)
            row = await fetch_one(cur)
            await conn.rollback()
        return bool(row["streaming"]), float(row["lag"] or 0.0)

    @asynccontextmanager
    async def tenant(
        self,
        workspace_key: int,
        *,
        pipeline: bool = False,
        after_lsn: str = "",
        wait_seconds: float = 0.0,
        lock_timeout_ms: int = 0,
    ) -> AsyncIterator[Connection]:
        """A transaction confined to one workspace by row-level security.

        *pipeline*: in psycopg's pipeline mode, statements go to the server without
        waiting for each other's results, which arrive when a result is fetched (or at
        COMMIT): a write of several statements costs a round trip per read instead of one
        per statement. The caller then reads results by fetching, never through
        `cursor.rowcount`, and sees a statement's error at the next fetch or at the end.

        *after_lsn* (a standby): first wait up to *wait_seconds* until the server has replayed
        that WAL position, on the connection that then runs the transaction (so a DSN that
        balances over several standbys is judged per connection); raises
        `ReplicaBehindError` past the wait.

        Raises `WorkspaceDeletedError` (UNAUTHENTICATED) when the workspace no longer exists
        (its key was verified before the deletion), at entry or, in pipeline mode, at the
        first fetch — entry holds the workspace until the transaction ends, so a deletion
        never lands inside it (`memplane_enter_workspace`, migration 0016);
        `QuotaExceededError` when a statement's `memplane_check_quotas()` refused a write.

        *lock_timeout_ms* (0: none): the transaction's lock_timeout, for background work
        that has no deadline of its own (a lock held elsewhere fails it, SQLSTATE 55P03,
        instead of holding a pooled connection until statement_timeout).
        """
        with commits.collected() as committed:
            async with (
                self._connection(after_lsn, wait_seconds) as conn,
                _pipelined_transaction(conn) if pipeline else conn.transaction(),
            ):
                # lock_timeout first: it bounds the entry's own wait for the workspace too
                await conn.execute(
                    "SELECT set_config('lock_timeout', coalesce(%s, current_setting('lock_timeout')), true),"
                    " set_config('role', 'memplane_tenant', true),"
                    " set_config('memplane.workspace_key', memplane_enter_workspace(%s), true)",
                    (f"{lock_timeout_ms}ms" if lock_timeout_ms else None, workspace_key),
                )
                yield conn
        commits.run(committed)  # reached only once the transaction has committed

    @asynccontextmanager
    async def autocommit(self, workspace_key: int) -> AsyncIterator[Connection]:
        """A pooled connection in autocommit mode for statements of *workspace_key* (the
        key a `RoutedDatabase` picks the cluster by; one database needs nothing of it):
        each statement is a transaction of its own, which the server commits as soon as
        the statement ends — no COMMIT round trip,
        and no row lock held while this process's event loop gets round to sending one.
        Only for statements that enter their workspace themselves
        (`memplane_insert_memories`, migration 0011); the connection leaves in transaction
        mode (closed, so the pool drops it, if it cannot be put back). Raises as every
        call, and `QuotaExceededError` when `memplane_check_quotas()` refused a write."""
        with commits.collected() as committed:
            async with self._connection() as conn, _autocommit(conn):
                yield conn
        commits.run(committed)  # each statement committed as it ended

    @asynccontextmanager
    async def tenant_pipeline(
        self, workspace_key: int, settings: Mapping[str, str], *, after_lsn: str = "", wait_seconds: float = 0.0
    ) -> AsyncIterator[Connection]:
        """A read-only tenant transaction in pipeline mode: the role, workspace and
        *settings* (`set_config(name, value, true)`, e.g. hnsw.ef_search) and the caller's
        statements go to the server together, in one round trip. Read the cursors' results
        after the block (they arrive when it exits). *after_lsn* and *wait_seconds* as in
        `tenant()`.

        No BEGIN or COMMIT: the connection is in autocommit mode for the block, and
        PostgreSQL runs a pipeline's statements up to its Sync (sent at the block's exit)
        as one implicit transaction, committed or rolled back at the Sync (PostgreSQL
        docs, "Pipelining" in the protocol chapter): the local settings hold for every
        statement of the block and end with it (tests/integration/test_tenant_pipeline.py).
        Two commands fewer for psycopg per search (docs/decisions/0002-one-statement-search.md).
        `transaction_read_only` is set
        with them, so a write in the block is refused (SQLSTATE 25006). Nothing in the block
        may make psycopg send a Sync (commit, rollback, `transaction()`, a nested
        `pipeline()`, an autocommit or read-only setter): statements after it would run
        without the tenant role. Fetching inside the block is safe (a Flush, not a Sync)."""
        names = ["role", "transaction_read_only", *settings]
        values = ["memplane_tenant", "on", *settings.values()]
        setting = "SELECT set_config('memplane.workspace_key', memplane_enter_workspace(%s), true), " + ", ".join(
            "set_config(%s, %s, true)" for _ in names
        )
        async with (
            self._connection(after_lsn, wait_seconds) as conn,
            _autocommit(conn),
            conn.pipeline(),
            _close_on_interrupt(conn),
        ):
            await conn.execute(setting, [workspace_key, *(v for pair in zip(names, values, strict=True) for v in pair)])
            yield conn

    @asynccontextmanager
    async def _fair_turn(self) -> AsyncIterator[None]:
        """The running request's turn for a connection (`FairGate`): PoolTimeout, as the
        pool's own wait, past the pool timeout."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(self._timeout):
                    await stack.enter_async_context(self.gate.hold())
            except TimeoutError:
                raise PoolTimeout(f"no connection granted within {self._timeout} s") from None
            yield

    @asynccontextmanager
    async def _connection(self, after_lsn: str = "", wait_seconds: float = 0.0) -> AsyncIterator[Connection]:
        """A pooled connection. While the database is known to be down (`availability`),
        `UnavailableError` within RECOVERY_WAIT_SECONDS instead of a wait for the pool timeout."""
        if not await self.availability.wait_up():
            raise UnavailableError(self.availability.describe())
        try:
            async with self._fair_turn(), self._pool.connection() as conn:
                if after_lsn:
                    await _await_replay(conn, after_lsn, wait_seconds)
                yield conn
        except PoolTimeout as exc:
            if self._pool.get_stats().get("pool_size", 1) == 0:  # it could not open a single connection
                self.availability.lost("no connection could be opened")
            raise UnavailableError("no database connection free within the pool timeout") from exc
        except psycopg.errors.QueryCanceled as exc:
            raise DeadlineExceededError(f"a statement ran past the statement timeout ({exc.sqlstate})") from exc
        except psycopg.OperationalError as exc:
            if exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P")):  # connection lost, server shut down
                self.availability.lost(str(exc).splitlines()[0] if str(exc) else "connection lost")
            raise UnavailableError(f"database unavailable: {exc.sqlstate or 'connection error'}") from exc
        except psycopg.DatabaseError as exc:
            if exc.sqlstate == QUOTA_EXCEEDED_SQLSTATE:
                raise _quota_exceeded(exc) from None
            if exc.sqlstate != WORKSPACE_GONE_SQLSTATE:
                raise
            raise WorkspaceDeletedError() from exc  # the gRPC edge names the caller's workspace


@asynccontextmanager
async def _autocommit(conn: Connection) -> AsyncIterator[None]:
    """*conn* in autocommit mode for the block; back in transaction mode after it (closed,
    so the pool drops it, when that fails: a statement still running, cancelled)."""
    await conn.set_autocommit(True)
    try:
        yield
    finally:
        if not conn.closed:
            try:
                await conn.set_autocommit(False)
            except psycopg.Error:  # a statement still running (cancelled): never reuse it
                await conn.close()


@asynccontextmanager
async def _pipelined_transaction(conn: Connection) -> AsyncIterator[None]:
    """A transaction in pipeline mode on *conn* that closes the connection when the
    caller's block is cancelled (or interrupted).

    A pipelined statement's result is read only at a fetch or when the block exits, and
    libpq reports the connection IDLE meanwhile, so a cancellation that lands outside a
    fetch — at an await of the caller's, or at the event-loop yield psycopg makes after a
    completed send — comes with no cancel request from psycopg (it sends one only inside
    its own waits, for an ACTIVE connection), or with one PostgreSQL drops because it
    arrived between two messages (postgres.c, ProcessInterrupts: a cancel "while reading
    a command from the client" is ignored). The transaction's exit (ROLLBACK, then the
    pipeline's Sync) would then wait for that statement's result with nothing to bound
    it: a statement queued on a lock waited until the lock went, long after its RPC's
    deadline. Closed instead, the backend ends within CLIENT_CHECK_INTERVAL_MS and rolls
    back, the exits see a closed connection and skip (psycopg logs that it ignored the
    pipeline's exit), and the pool replaces it. A cancellation inside the COMMIT's own
    wait is psycopg's to cancel (it does, bounded at 5 s).
    tests/integration/test_cancelled_pipeline.py."""
    async with conn.pipeline(), conn.transaction(), _close_on_interrupt(conn):
        yield


@asynccontextmanager
async def _close_on_interrupt(conn: Connection) -> AsyncIterator[None]:
    """Close *conn* when the block is cancelled or interrupted (see `_pipelined_transaction`)."""
    try:
        yield
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        if not conn.closed:
            # Unconditionally: libpq reports the transaction IDLE here with a statement still
            # running (the results of a pipeline are psycopg's to track, not libpq's).
            _log.debug("pipelined transaction interrupted: connection closed (its statements may be in flight)")
            await conn.close()
        raise


def _quota_exceeded(exc: psycopg.DatabaseError) -> QuotaExceededError:
    """The `QuotaExceededError` that memplane_check_quotas() raised as SQLSTATE MPQ01."""
    detail = json.loads(exc.diag.message_detail or "{}")
    return QuotaExceededError(
        str(detail.get("subject", "workspace")),
        exc.diag.message_primary or "a workspace quota would be exceeded",
        quota_id=str(detail.get("quota_id", "")),
        limit=int(detail.get("limit", 0)),
    )


_REPLICA_STATE = """
SELECT NOT pg_is_in_recovery() OR EXISTS (SELECT 1 FROM pg_stat_wal_receiver) AS streaming,
       CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0.0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END AS lag
"""


async def _await_replay(conn: Connection, lsn: str, wait_seconds: float) -> None:
    """Poll the server's replay position every 5 ms until it reaches *lsn* or *wait_seconds*
    pass (then `ReplicaBehindError`). A server not in recovery has every position."""
    deadline = time.monotonic() + wait_seconds
    while True:
        cur = await conn.execute(
            "SELECT NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= %s::pg_lsn AS ok", (lsn,)
        )
        ok = bool((await fetch_one(cur))["ok"])
        await conn.rollback()
        if ok:
            return
        if time.monotonic() >= deadline:
            raise ReplicaBehindError(f"standby has not replayed {lsn} within {wait_seconds} s")
        await asyncio.sleep(_REPLAY_POLL_SECONDS)


async def fetch_one(cur: psycopg.AsyncCursor[dict[str, Any]]) -> dict[str, Any]:
    """The first row of a query that always returns one (aggregates, RETURNING).

    Raises `RuntimeError` if it returned none: a bug, not a user error.
    """
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("query returned no row")
    return row
