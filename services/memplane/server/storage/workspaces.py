"""Workspaces: rows, per-workspace partitions and their indexes, usage, deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from memplane.domain.context import DEFAULT_TOKEN_ENCODING
from memplane.domain.models import MemoryType, Quotas, Retention, Workspace, WorkspaceUsage
from memplane.errors import AlreadyExistsError, NotFoundError, UnavailableError
from memplane.server.storage.database import Connection, Database, fetch_one
from memplane.server.storage.placement import Cluster, Placement

# Tables partitioned by workspace_key; each workspace gets "<table>_w<key>".
PARTITIONED_TABLES = ("memories", "memory_events", "transcript_messages", "lexeme_df", "extraction_jobs")

# Creating or dropping a workspace's partitions: how long one wait for the parent tables
# may last (below PostgreSQL's deadlock_timeout, 1 s) and how many tries (~20 s in all);
# how long a drop waits for the workspace's own partitions (above deadlock_timeout, so an
# autovacuum holding one is cancelled: `_outwait_vacuum`).
DDL_LOCK_TIMEOUT = "200ms"
DDL_LOCK_ATTEMPTS = 25
OWN_LOCK_TIMEOUT = "2s"

T = TypeVar("T")

# HNSW build parameters: pgvector's defaults (m=16, ef_construction=64).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


def partition_name(table: str, workspace_key: int) -> str:
    """Name of *table*'s partition for one workspace."""
    return f"{table}_w{workspace_key}"


# Rows of `workspace_counters` per workspace (migration 0014: a write updates its
# backend's, pid mod 8, so writers of one workspace on different connections lock
# different rows; the SQL functions there hold the same number).
COUNTER_SHARDS = 8


def event_sequence_name(workspace_key: int) -> str:
    """Name of the sequence a workspace's event ids come from (migration 0014)."""
    return f"memory_events_w{workspace_key}_id_seq"


# The workspaces columns UpdateWorkspace may set (Quotas fields keep their names).
POLICY_COLUMNS = (
    "max_memories",
    "max_bytes",
    "max_requests_per_second",
    "max_embedding_tokens_per_day",
    "scheduling_weight",
    "default_ttl_seconds",
    "type_ttl_seconds",
    "labels",
    "token_encoding",
)


def policy_columns(
    *, quotas: Quotas, retention: Retention, labels: Mapping[str, str], token_encoding: str
) -> dict[str, Any]:
    """The POLICY_COLUMNS values of a workspace's quotas, retention, labels and encoding."""
    return {
        "max_memories": quotas.max_memories,
        "max_bytes": quotas.max_bytes,
        "max_requests_per_second": quotas.max_requests_per_second,
        "max_embedding_tokens_per_day": quotas.max_embedding_tokens_per_day,
        "scheduling_weight": quotas.scheduling_weight,
        "default_ttl_seconds": retention.default_ttl_seconds,
        "type_ttl_seconds": {t.value: ttl for t, ttl in retention.type_ttl_seconds.items()},
        "labels": dict(labels),
        "token_encoding": token_encoding,
    }


def _workspace(row: dict[str, Any]) -> Workspace:
    return Workspace(
        key=row["key"],
        name=row["name"],
        embedding_model=row["embedding_model"],
        embedding_dimensions=row["embedding_dimensions"],
        created_at=row["created_at"],
        token_encoding=row.get("token_encoding", DEFAULT_TOKEN_ENCODING),
        quotas=Quotas(
            max_memories=row["max_memories"],
            max_bytes=row["max_bytes"],
            max_requests_per_second=row["max_requests_per_second"],
            max_embedding_tokens_per_day=row["max_embedding_tokens_per_day"],
            scheduling_weight=row["scheduling_weight"],
        ),
        retention=Retention(
            default_ttl_seconds=row["default_ttl_seconds"],
            type_ttl_seconds={MemoryType(t): int(ttl) for t, ttl in row["type_ttl_seconds"].items()},
        ),
        labels=dict(row["labels"]),
        updated_at=row["updated_at"],
        placement=row.get("placement") or "",
    )


def _bind(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Column values as bound parameters (JSON columns wrapped for psycopg)."""
    return {k: Jsonb(v) if k in ("type_ttl_seconds", "labels") else v for k, v in columns.items()}


# A workspace's row with its placement (the control cluster's `placements`, migration 0022).
_SELECT = "SELECT w.*, p.cluster AS placement FROM workspaces w LEFT JOIN placements p ON p.workspace_key = w.key"


class WorkspaceStore:
    """Create, read, list and delete workspaces (admin transactions).

    *db* is the control cluster's primary: every workspace's row is there. With
    *placement* (several clusters), a workspace's partitions, counters and event sequence
    are made on the cluster it is placed on, with a copy of its row (same key) that the
    cluster's foreign keys, quota checks and `memplane_enter_workspace` read; without,
    everything is on *db*."""

    def __init__(self, db: Database, placement: Placement | None = None) -> None:
        self._db = db
        self._placement = placement

    async def create(
        self,
        name: str,
        *,
        embedding_model: str,
        embedding_dimensions: int,
        policy: Mapping[str, Any],
        placement: str = "",
    ) -> Workspace:
        """Insert the workspace (*policy*: POLICY_COLUMNS values, see `policy_columns`) on
        the cluster *placement* names, else the one the placement rule picks
        (`Placement.choose`), its COUNTER_SHARDS counter rows and its event-id sequence,
        and create its partitions with their own indexes: an HNSW index (cosine) on the
        embedding cast to its recorded dimension, partial over the rows the vector indexer
        has reached (`vector_indexed`, migration 0020), and a CHECK that every stored
        vector has that dimension. Raises `AlreadyExistsError`; `UnavailableError` when the control
        cluster or the chosen one is down (nothing is left behind on the control cluster
        then, unless this process dies in between: DeleteWorkspace removes such a one)."""
        columns = {"name": name, "embedding_model": embedding_model, "embedding_dimensions": embedding_dimensions}
        columns.update(_bind({k: policy[k] for k in POLICY_COLUMNS}))
        target = await self._placement.choose(placement) if self._placement is not None else None

        async def insert(conn: Connection) -> dict[str, Any]:
            try:
                cur = await conn.execute(
                    sql.SQL("INSERT INTO workspaces ({}) VALUES ({}) RETURNING *").format(
                        sql.SQL(", ").join(map(sql.Identifier, columns)),
                        sql.SQL(", ").join(map(sql.Placeholder, columns)),
                    ),
                    columns,
                )
            except psycopg.errors.UniqueViolation as exc:
                raise AlreadyExistsError("workspace", name) from exc
            row = await fetch_one(cur)
            if target is not None:
                await self._placement_of().record(conn, int(row["key"]), target)
            return row

        if target is None or target.db is self._db:

            async def create_here(conn: Connection) -> Workspace:
                row = await insert(conn)
                await _create_parts(conn, int(row["key"]), embedding_dimensions)
                return _workspace(row | {"placement": target.name if target is not None else ""})

            workspace = await _ddl(self._db, create_here)
        else:
            workspace = await self._create_on(target, insert, embedding_dimensions)
        if target is not None:
            self._placement_of().remember(workspace.key, target)
        return workspace

    async def _create_on(
        self,
        target: Cluster,
        insert: Callable[[Connection], Awaitable[dict[str, Any]]],
        embedding_dimensions: int,
    ) -> Workspace:
        """The row and placement on the control cluster (committed, so the key is taken),
        then the copy of the row and the parts on *target*; the control cluster's row is
        deleted again if that fails."""
        async with self._db.admin() as conn:
            row = await insert(conn)
        key = int(row["key"])

        async def create_there(conn: Connection) -> None:
            copy = {k: Jsonb(v) if isinstance(v, dict) else v for k, v in row.items()}
            await conn.execute(
                sql.SQL("INSERT INTO workspaces ({}) OVERRIDING SYSTEM VALUE VALUES ({})").format(
                    sql.SQL(", ").join(map(sql.Identifier, copy)),
                    sql.SQL(", ").join(map(sql.Placeholder, copy)),
                ),
                copy,
            )
            await _create_parts(conn, key, embedding_dimensions)

        try:
            await _ddl(target.db, create_there)
        except BaseException:
            async with self._db.admin() as conn:
                await conn.execute("DELETE FROM workspaces WHERE key = %s", (key,))
            raise
        return _workspace(row | {"placement": target.name})

    def _placement_of(self) -> Placement:
        if self._placement is None:
            raise RuntimeError("no placement: a store of one database")
        return self._placement

    async def _cluster(self, key: int) -> Database:
        """The primary of the cluster holding workspace *key*'s rows."""
        if self._placement is None:
            return self._db
        return (await self._placement.of(key)).db

    async def get(self, name: str) -> Workspace:
        """The workspace called *name*. Raises `NotFoundError`."""
        async with self._db.admin() as conn:
            cur = await conn.execute(_SELECT + " WHERE w.name = %s", (name,))
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("workspace", name)
        return _workspace(row)

    async def update(self, name: str, changes: Mapping[str, Any]) -> Workspace:
        """Set the POLICY_COLUMNS in *changes* and `updated_at` (on the workspace's cluster's
        copy of its row first, then on the control cluster's); return the workspace as
        stored. Raises `NotFoundError`, `ValueError` for another column, `UnavailableError`
        when either cluster is down (a retry completes it)."""
        unknown = set(changes) - set(POLICY_COLUMNS)
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        params = _bind(changes) | {"name": name}
        assignments: list[sql.Composable] = [
            sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in changes
        ]
        assignments.append(sql.SQL("updated_at = now()"))
        statement = sql.SQL("UPDATE workspaces SET {} WHERE name = %(name)s RETURNING *").format(
            sql.SQL(", ").join(assignments)
        )
        placed = ""
        if self._placement is not None:
            current = await self.get(name)
            placed = current.placement
            there = await self._cluster(current.key)
            if there is not self._db:
                async with there.admin() as conn:
                    await conn.execute(statement, params)
        async with self._db.admin() as conn:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("workspace", name)
        return _workspace(row | {"placement": placed})

    async def get_by_key(self, key: int) -> Workspace:
        """The workspace with partition key *key*. Raises `NotFoundError`."""
        async with self._db.admin() as conn:
            cur = await conn.execute(_SELECT + " WHERE w.key = %s", (key,))
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("workspace", str(key))
        return _workspace(row)

    async def list_page(self, *, after_name: str, limit: int) -> list[Workspace]:
        """Up to *limit* workspaces with names after *after_name*, by name."""
        async with self._db.admin() as conn:
            cur = await conn.execute(_SELECT + " WHERE w.name > %s ORDER BY w.name LIMIT %s", (after_name, limit))
            return [_workspace(r) for r in await cur.fetchall()]

    async def delete(self, name: str) -> int:
        """Drop the workspace's partitions, rows and event-id sequence (on its cluster, then
        its row on the control cluster, with its keys and placement); return its memory
        count. Touches no other workspace. Raises `NotFoundError`; `UnavailableError` when
        its cluster or the control cluster is down (a retry completes it)."""
        workspace = await self.get(name)
        there = await self._cluster(workspace.key)
        await _outwait_vacuum(there, workspace.key)
        if there is self._db:
            count = await _ddl(self._db, lambda conn: _drop(conn, name))
        else:
            try:
                count = await _ddl(there, lambda conn: _drop(conn, name))
            except NotFoundError:
                count = 0  # its cluster's part went before (a deletion cut short, or a creation)
            async with self._db.admin() as conn:
                cur = await conn.execute("DELETE FROM workspaces WHERE name = %s RETURNING key", (name,))
                if await cur.fetchone() is None:
                    raise NotFoundError("workspace", name)
        if self._placement is not None:
            self._placement.forget(workspace.key)
        return count

    async def usage(self, name: str) -> WorkspaceUsage:
        """Counts and sizes of one workspace. Raises `NotFoundError`."""
        workspace = await self.get(name)
        async with (await self._cluster(workspace.key)).admin() as conn:
            cur = await conn.execute(
                "SELECT s.memory_count, s.content_bytes,"
                " (SELECT count(*) FROM transcript_messages t WHERE t.workspace_key = s.workspace_key)"
                "   AS transcript_message_count,"
                " (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                "   WHERE c.relname = ANY(%s)) AS storage_bytes,"
                " (SELECT coalesce(sum(u.tokens), 0) FROM embedding_usage u WHERE u.workspace_key = s.workspace_key"
                "   AND u.day = (now() AT TIME ZONE 'UTC')::date) AS embedding_tokens_today,"
                " (SELECT coalesce(sum(b.bytes), 0) FROM workspace_blob_bytes b"
                "   WHERE b.workspace_key = s.workspace_key) AS tool_result_bytes"
                " FROM workspace_stats s WHERE s.workspace_key = %s",
                ([partition_name(t, workspace.key) for t in PARTITIONED_TABLES], workspace.key),
            )
            row = await fetch_one(cur)
        return WorkspaceUsage(
            memory_count=int(row["memory_count"]),
            content_bytes=int(row["content_bytes"]),
            transcript_message_count=int(row["transcript_message_count"]),
            storage_bytes=int(row["storage_bytes"]),
            embedding_tokens_today=int(row["embedding_tokens_today"]),
            tool_result_bytes=int(row["tool_result_bytes"]),
        )


async def _create_parts(conn: Connection, key: int, embedding_dimensions: int) -> None:
    """Workspace *key*'s COUNTER_SHARDS counter rows, event-id sequence and partitions with
    their indexes, in the caller's DDL transaction on the cluster holding it."""
    await conn.execute(
        "INSERT INTO workspace_counters (workspace_key, shard) SELECT %s, s FROM generate_series(0, %s - 1) s",
        (key, COUNTER_SHARDS),
    )
    await conn.execute(
        sql.SQL("CREATE SEQUENCE {} AS bigint MINVALUE 1").format(sql.Identifier(event_sequence_name(key)))
    )
    for table in PARTITIONED_TABLES:
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
                sql.Identifier(partition_name(table, key)), sql.Identifier(table), sql.Literal(key)
            )
        )
    memories = sql.Identifier(partition_name("memories", key))
    dims = sql.Literal(embedding_dimensions)
    await conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (vector_dims(embedding) = {})").format(
            memories, sql.Identifier(f"memories_w{key}_dims"), dims
        )
    )
    await conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw ((embedding::vector({})) vector_cosine_ops)"
            " WITH (m = {}, ef_construction = {}) WHERE vector_indexed"
        ).format(
            sql.Identifier(f"memories_w{key}_hnsw"),
            memories,
            dims,
            sql.Literal(HNSW_M),
            sql.Literal(HNSW_EF_CONSTRUCTION),
        )
    )


async def _drop(conn: Connection, name: str) -> int:
    """Drop workspace *name*'s partitions, row (and counters, by cascade) and event-id
    sequence in the caller's DDL transaction (the parents already held: `_ddl`); its memory
    count. Its row, then its own partitions: after the parents, the order of a tenant's
    statement (parent, then partition), so the DDL closes no lock cycle with one. Raises
    `NotFoundError`."""
    cur = await conn.execute(
        "SELECT w.key, (SELECT s.memory_count FROM workspace_stats s WHERE s.workspace_key = w.key)"
        " AS memory_count FROM workspaces w WHERE w.name = %s FOR UPDATE OF w",
        (name,),
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFoundError("workspace", name)
    key = int(row["key"])
    await conn.execute(_lock_own(key, "ACCESS EXCLUSIVE"))
    for table in PARTITIONED_TABLES:
        await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(partition_name(table, key))))
    await conn.execute("DELETE FROM workspaces WHERE key = %s", (key,))  # and its counters (cascade)
    await conn.execute(sql.SQL("DROP SEQUENCE IF EXISTS {}").format(sql.Identifier(event_sequence_name(key))))
    return int(row["memory_count"] or 0)


async def _outwait_vacuum(db: Database, key: int) -> None:
    """Before a drop: hold workspace *key*'s partitions SHARE UPDATE EXCLUSIVE for a moment,
    waiting up to OWN_LOCK_TIMEOUT, longer than PostgreSQL's deadlock_timeout, after which
    PostgreSQL cancels an autovacuum that blocks the wait (the drop's own tries, each cut
    off sooner, never would, and a VACUUM of a big partition can outlast all of them). The
    mode conflicts with VACUUM, ANALYZE and DDL only, never with a tenant's read or write,
    so the wait blocks no tenant. Best effort: a lock not had in time, or partitions
    already gone, leave it to the drop."""
    try:
        async with db.admin() as conn:
            await _lock_timeout(conn, OWN_LOCK_TIMEOUT)
            await conn.execute(_lock_own(key, "SHARE UPDATE EXCLUSIVE"))
    except psycopg.errors.UndefinedTable:
        pass
    except UnavailableError as error:
        if not _lock_refused(error):
            raise


async def _ddl(db: Database, body: Callable[[Connection], Awaitable[T]]) -> T:
    """Run *body* in an admin transaction on *db* that first holds every partitioned parent
    table (`_lock_parents`). Each lock wait, the parents' and *body*'s, is bounded by
    DDL_LOCK_TIMEOUT, below PostgreSQL's deadlock_timeout (1 s): where the DDL would close
    a lock cycle with a tenant's search or write, the DDL gives up first and is retried,
    so the deadlock detector never aborts the tenant's statement. Raises
    `UnavailableError` after DDL_LOCK_ATTEMPTS."""
    for attempt in range(DDL_LOCK_ATTEMPTS):
        try:
            async with db.admin() as conn:
                await _lock_timeout(conn, DDL_LOCK_TIMEOUT)
                await _lock_parents(conn)
                return await body(conn)
        except UnavailableError as error:
            if not _lock_refused(error):
                raise
        await asyncio.sleep(min(0.05 * 2**attempt, 1.0))  # back off before the next try
    raise UnavailableError("the workspace tables stayed locked by running statements; retry")


async def _lock_timeout(conn: Connection, interval: str) -> None:
    """Bound each lock wait of *conn*'s transaction by *interval* (a PostgreSQL interval, "200ms")."""
    await conn.execute("SELECT set_config('lock_timeout', %s, true)", (interval,))


def _lock_refused(error: UnavailableError) -> bool:
    """Whether *error* is a lock wait that ran past its lock_timeout."""
    return isinstance(error.__cause__, psycopg.errors.LockNotAvailable)


async def _lock_parents(conn: Connection) -> None:
    """Hold every partitioned parent table, ONLY the parents (creating or dropping a
    partition locks its parent ACCESS EXCLUSIVE, which every tenant statement also locks,
    shared, in an order of its own). Without ONLY the lock would recurse into every
    workspace's partitions, and one VACUUM or ANALYZE of any of them (SHARE UPDATE
    EXCLUSIVE, for seconds) would hold up every creation and deletion."""
    await conn.execute(
        sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
            sql.SQL(", ").join(sql.SQL("ONLY {}").format(sql.Identifier(t)) for t in PARTITIONED_TABLES)
        )
    )


def _lock_own(key: int, mode: str) -> sql.Composed:
    """LOCK TABLE of workspace *key*'s partitions in *mode* (a PostgreSQL lock mode)."""
    return sql.SQL("LOCK TABLE {} IN {} MODE").format(
        sql.SQL(", ").join(sql.Identifier(partition_name(t, key)) for t in PARTITIONED_TABLES), sql.SQL(mode)
    )
