"""The composition root: every dependency is one visible constructor call here.

`build_app(settings, services)` starts (or connects to) PostgreSQL, checks migrations,
loads the embedder and wires stores into the services named by *services*, and only
those: a retrieval process builds no write-back job, no compaction part and no admin
service (the chart runs one Deployment per service). `App.start()` starts the
background jobs of what it serves and `App.close()` stops them; `memplane.server.serving`
wires the gRPC edge (`memplane.server.api`) over a started App. Nothing else in the package
constructs collaborators or reads settings from the environment.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memplane.server.admin.auth import Authenticator
from memplane.server.admin.service import AdminService
from memplane.server.background import Job, one_job
from memplane.server.bootstrap import bootstrap
from memplane.server.compaction.check import ContextChecker
from memplane.server.compaction.compactor import MessageCompactor
from memplane.server.compaction.extractive import ExtractiveSummarizer
from memplane.server.compaction.llm import LLMSummarizer
from memplane.server.compaction.offload import ToolResultOffloader
from memplane.server.compaction.parts import CompactionParts
from memplane.server.compaction.prepare import ContextPreparer
from memplane.server.compaction.session_memory import SessionSummarizer, WriteSession
from memplane.server.compaction.transcript import SessionTranscript
from memplane.server.embedding.base import Embedder
from memplane.server.embedding.health import EndpointHealth
from memplane.server.llm.chat import ChatModel
from memplane.server.quota.concurrency import ConcurrencyLimiter
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.resources import (
    build_chat_model,
    build_embedder,
    idempotency_sweeper,
    open_clusters,
    retention_sweeper,
)
from memplane.server.retrieval.file_selection import FileSelector
from memplane.server.retrieval.rerank import Reranker
from memplane.server.retrieval.service import RetrievalService
from memplane.server.retrieval.usage import DailyUsage, SearchCounter
from memplane.server.settings import Settings
from memplane.server.shutdown import Budget, Step, close_all
from memplane.server.storage.blobs import BlobCleaner, ToolResultBlobStore
from memplane.server.storage.database import Database
from memplane.server.storage.idempotency import IdempotencyStore
from memplane.server.storage.invalidation import InvalidationListener
from memplane.server.storage.job_listener import JobListener
from memplane.server.storage.jobs import ExtractionJobStore
from memplane.server.storage.keys import ApiKeyStore
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.placement import Placement
from memplane.server.storage.routing import RoutedDatabase, RoutedReads, TenantDatabase
from memplane.server.storage.statistics import PartitionAnalyzer
from memplane.server.storage.transcripts import TranscriptStore
from memplane.server.storage.vector_index import VectorIndexer
from memplane.server.storage.workspaces import WorkspaceStore
from memplane.server.writeback.conversation import ConversationWriter
from memplane.server.writeback.jobs import ExtractionRunner
from memplane.server.writeback.requests import Ledger
from memplane.server.writeback.service import WriteBackService
from memplane.server.writeback.session_facts import SessionFactWriter
from memplane.text.tokens import token_counter

if TYPE_CHECKING:
    # Only on the embedded path, imported there (see `memplane.server.resources.start_database`).
    from memplane.server.storage.embedded_supervisor import EmbeddedSupervisor

_log = logging.getLogger(__name__)

SERVICES = ("retrieval", "writeback", "compaction", "admin")
"""What `memplane serve --services` may name; the chart runs each as its own Deployment."""

LLM_SERVICES = frozenset({"retrieval", "writeback", "compaction"})
"""The services that call the chat model when one is configured: SelectFiles (retrieval),
extraction jobs (write-back), summaries and SummarizeSession's extraction (compaction).
AdminService never does, so an admin process builds no LLM client."""

# The background jobs (`App.jobs`, `App.started`), in the order `App.start()` starts them.
EMBEDDED_SUPERVISOR = "embedded supervisor"  # restarts the embedded PostgreSQL (embedded path only)
INVALIDATION_LISTENER = "invalidation listener"  # key revokes made by other processes (every process)
RETENTION_SWEEPER = "retention sweeper"  # expired memories, erased by the servers that write them
IDEMPOTENCY_SWEEPER = "idempotency sweeper"  # request-id records past their retention
EXTRACTION_WORKERS = "extraction workers"  # extraction jobs, run by the servers that queue them (with an LLM)
JOB_LISTENER = "job listener"  # wakes the workers when another process queues a job
BLOB_CLEANER = "blob cleaner"  # expired tool outputs, deleted by the server that stores them
VECTOR_INDEXER = "vector indexer"  # new memories into their HNSW graph, by the servers that write them
PARTITION_ANALYZER = "partition analyzer"  # planner statistics of written workspaces, by the servers that write them
SEARCH_COUNTER = "search counter"  # searches per workspace and day, flushed by the retrieval servers that count them


@dataclass
class App:
    """The wired services of one process (None: not served here), its background jobs and
    what must be closed at shutdown."""

    settings: Settings
    services: tuple[str, ...]  # what this process serves, in SERVICES order
    db: Database  # the control cluster's primary (the only cluster unless database.clusters names several)
    placement: Placement  # every database cluster, and which workspace is on which
    routed: RoutedDatabase  # tenant transactions, each on its workspace's cluster's primary
    reads: RoutedReads  # RetrievalService's reads, each by its workspace's cluster's ReadRouter
    embedder: Embedder  # every service embeds, or records the model (admin's new workspaces)
    authenticator: Authenticator
    chat_model: ChatModel | None = None  # None without an LLM endpoint, or when no LLM_SERVICES are served
    retrieval: RetrievalService | None = None
    file_selector: FileSelector | None = None
    searches: SearchCounter | None = None  # the retrieval process's search counts (GetDailyUsage)
    daily_usage: DailyUsage | None = None
    reranker: Reranker | None = None  # the rerank endpoint's client; None without rerank.url
    writeback: WriteBackService | None = None  # also compaction's (SummarizeSession writes through it)
    conversations: ConversationWriter | None = None
    compaction: CompactionParts | None = None
    admin: AdminService | None = None
    jobs: dict[str, Job] = field(default_factory=dict)  # by name, in start order
    embedded: EmbeddedSupervisor | None = None  # the embedded default's PostgreSQL, kept running
    embedder_health: EndpointHealth | None = None  # an embedding endpoint's; None for a local model
    started: list[str] = field(default_factory=list)  # the jobs running, in the order started

    def start(self) -> None:
        """Start every background job not running yet, in `jobs` order (needs a running
        event loop); `started` names them. Idempotent."""
        for name, job in self.jobs.items():
            if name not in self.started:
                job.start()
                self.started.append(name)
        _log.info("services %s: started %s", ", ".join(self.services), ", ".join(self.started))

    async def close(self, seconds: float | None = None) -> bool:
        """Stop the started jobs, then close the embedding endpoint's, LLM's and rerank
        endpoint's clients, then the connection pools, then release the embedded
        PostgreSQL (stopping it if this process was its last holder) — all within
        *seconds* (default `grpc.close_seconds`). Each of those four stages gets at most
        an equal share of what is left (`memplane.server.shutdown.close_all`); a step still
        running at its bound is abandoned with a WARNING naming it, never waited for. True
        if every step finished."""
        budget = Budget(self.settings.grpc.close_seconds if seconds is None else seconds)
        jobs = [(f"stopping the {name}", self.jobs[name].stop) for name in reversed(self.started)]
        self.started.clear()
        clients: list[Step] = []
        if self.embedder_health is not None:
            clients.append(("closing the embedding endpoint's probe and client", self.embedder_health.close))
        if self.chat_model is not None:
            clients.append(("closing the LLM client", self.chat_model.close))
        if self.reranker is not None:
            clients.append(("closing the rerank client", self.reranker.close))
        pools: list[Step] = [
            (f"closing the database pool of cluster {c.name}", _closing(c.db, budget)) for c in self.placement.clusters
        ]
        pools.append(("closing the replica pools", self.reads.close))
        embedded: list[Step] = []
        if self.embedded is not None:
            embedded.append(("stopping the embedded PostgreSQL", self.embedded.close))
        finished = await close_all([jobs, clients, pools, embedded], budget)
        _log.info("closed in %.1f s%s", budget.seconds - budget.left(), "" if finished else " (steps abandoned)")
        return finished


def _closing(db: Database, budget: Budget) -> Callable[[], Awaitable[None]]:
    """The step that closes *db*'s pool within what is left of *budget* when it runs."""
    return lambda: db.close(budget.left())


async def build_app(settings: Settings, services: Sequence[str] = SERVICES, *, embedder: Embedder | None = None) -> App:
    """Build what *services* (a subset of SERVICES) need and nothing else; nothing runs in
    the background until `App.start()`. *embedder* overrides the configured one (tests
    share one loaded model across servers). Every process makes the admin key known
    (`memplane.server.bootstrap`). Raises `ValueError` for an empty or unknown service name
    (before anything starts), `FailedPreconditionError` when migrations are missing and
    `database.migrate_on_start` is off, and what `bootstrap` raises."""
    unknown = sorted(set(services) - set(SERVICES))
    if unknown or not services:
        raise ValueError(f"unknown services {unknown}; choose one or more of {SERVICES}")
    clusters, embedded = await open_clusters(settings)
    placement = Placement(clusters)
    placed = await placement.load()
    await placement.check()
    if len(placement.names) > 1:  # one database: nothing to say that the pool's line does not
        _log.info("database clusters %s: %d workspaces placed", ", ".join(placement.names), placed)
    db = placement.control.db
    routed = RoutedDatabase(placement)
    embedder_health: EndpointHealth | None = None
    if embedder is None:
        embedder, embedder_health = await build_embedder(settings.embedding)
    workspaces = WorkspaceStore(db, placement)
    keys = ApiKeyStore(db)
    authenticator = Authenticator(
        keys,
        workspaces,
        settings.auth.key_cache_seconds,
        concurrency=ConcurrencyLimiter(
            settings.quota.max_concurrent_requests_per_workspace, settings.quota.max_queued_requests_per_workspace
        ),
        reachable=routed.reachable,
    )
    served = tuple(s for s in SERVICES if s in services)
    app = App(
        settings=settings,
        services=served,
        db=db,
        placement=placement,
        routed=routed,
        reads=RoutedReads(placement),
        embedder=embedder,
        authenticator=authenticator,
        chat_model=build_chat_model(settings.llm) if LLM_SERVICES.intersection(served) else None,
        embedder_health=embedder_health,
    )
    if embedded is not None:
        from memplane.server.storage.embedded_supervisor import EmbeddedSupervisor  # noqa: PLC0415 - embedded path only

        app.embedded = EmbeddedSupervisor(embedded, db.availability)
        app.jobs[EMBEDDED_SUPERVISOR] = app.embedded
    app.jobs[INVALIDATION_LISTENER] = InvalidationListener(db.dsn, authenticator)  # credentials: the control cluster
    meter = EmbeddingMeter(routed, embedder)
    indexer: VectorIndexer | None = None  # only a process that writes defers graph inserts
    if "writeback" in served or "compaction" in served:
        cfg = settings.vector_index
        indexer = VectorIndexer(
            routed,
            clusters=[c.db for c in placement.clusters],
            interval_seconds=cfg.interval_seconds,
            scan_interval_seconds=cfg.scan_interval_seconds,
            batch_size=cfg.batch_size,
            max_deferred=cfg.max_deferred,
            max_backlog=cfg.max_backlog,
        )
        app.jobs[VECTOR_INDEXER] = indexer
    analyzer: PartitionAnalyzer | None = None  # only a process that writes counts its writes
    if ("writeback" in served or "compaction" in served) and settings.analyze.enabled:
        analyzed = settings.analyze
        analyzer = PartitionAnalyzer(
            routed,
            quiet_seconds=analyzed.quiet_seconds,
            threshold=analyzed.threshold,
            scale_factor=analyzed.scale_factor,
            lock_timeout_ms=analyzed.lock_timeout_ms,
        )
        app.jobs[PARTITION_ANALYZER] = analyzer
    memories = MemoryStore(indexer, analyzer)
    if "retrieval" in served:
        _wire_retrieval(app, meter, memories)
    if "writeback" in served or "compaction" in served:
        _wire_writeback(app, meter, memories, workspaces)
    admin = AdminService(workspaces, keys, embedder, authenticator, settings.limits, clusters=placement.names)
    if "admin" in served:
        app.admin = admin
    await bootstrap(settings, keys, admin)  # the default workspace too, on a local first run
    return app


def _wire_retrieval(app: App, meter: EmbeddingMeter, memories: MemoryStore) -> None:
    """RetrievalService, the rerank endpoint's client, SelectFiles' FileSelector and the
    search counter (flushed to the primary by its background job)."""
    settings = app.settings
    reranker = Reranker(settings.rerank) if settings.rerank.url is not None else None
    retrieval = RetrievalService(
        app.reads,
        memories,
        meter,
        settings.limits,
        settings.retrieval,
        reranker=reranker,
        counter_for=lambda encoding: token_counter(encoding).count_text,
    )
    app.reranker = reranker
    app.retrieval = retrieval
    app.file_selector = FileSelector(
        app.reads,
        retrieval,
        app.chat_model,
        settings.limits,
        counter_for=lambda encoding: token_counter(encoding).count_text,
        timeout_seconds=settings.retrieval.file_selection_timeout,
    )
    app.searches = SearchCounter(app.routed, interval_seconds=settings.retrieval.search_count_flush_seconds)
    app.daily_usage = DailyUsage(app.routed, app.searches)
    app.jobs[SEARCH_COUNTER] = app.searches


def _wire_writeback(app: App, meter: EmbeddingMeter, memories: MemoryStore, workspaces: WorkspaceStore) -> None:
    """The write path: WriteBackService for a write-back process, and for a compaction one
    (SummarizeSession writes memories through it, reconciled by the extraction runner's
    LLM without starting its workers); WriteConversation's writer and the write-back
    jobs for a write-back process; compaction's parts and blob cleaner for a compaction
    one. The background jobs run on every database cluster."""
    settings, db, clusters = app.settings, app.routed, app.placement.clusters
    jobs = ExtractionJobStore()
    transcripts = TranscriptStore()
    blobs = ToolResultBlobStore()
    extraction = ExtractionRunner(
        db=db,
        jobs=jobs,
        memories=memories,
        workspaces=workspaces,
        meter=meter,
        chat=app.chat_model,
        settings=settings.extraction,
        retrieval=settings.retrieval,
        limits=settings.limits,
    )
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
        group_commit=settings.group_commit,
    )
    app.writeback = writeback
    if "writeback" in app.services:
        app.conversations = ConversationWriter(
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
        app.jobs[RETENTION_SWEEPER] = one_job([retention_sweeper(c.db, settings, c.name) for c in clusters])
        app.jobs[IDEMPOTENCY_SWEEPER] = one_job([idempotency_sweeper(c.db, settings, c.name) for c in clusters])
        if app.chat_model is not None:  # without an LLM no worker runs (`ExtractionRunner.start`)
            app.jobs[EXTRACTION_WORKERS] = extraction
        app.jobs[JOB_LISTENER] = one_job(
            [JobListener(c.db.dsn, on_new=extraction.wake, on_done=extraction.finished) for c in clusters]
        )
    if "compaction" in app.services:
        app.compaction = build_compaction(
            settings,
            db=db,
            blobs=blobs,
            transcripts=transcripts,
            chat_model=app.chat_model,
            write_session=SessionFactWriter(ledger, extraction, writeback.add).write,
        )
        interval = settings.compaction.blob_cleanup_interval_seconds
        app.jobs[BLOB_CLEANER] = one_job([BlobCleaner(blobs, c.db, interval_seconds=interval) for c in clusters])


def build_compaction(
    settings: Settings,
    *,
    db: TenantDatabase,
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
