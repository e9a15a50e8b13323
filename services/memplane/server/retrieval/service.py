"""RetrievalService: hybrid search, get and list over one workspace.

Search, per request: validate → embed all queries in one call → in one tenant
transaction, for each query fetch vector and lexical candidates (top_k x multiplier,
at least `min_candidates`) → fuse per query → merge queries keeping each memory's best
score → cut at min_score → give each hit its relevance (`memplane.server.retrieval.relevance`)
and cut at min_relevance → cut at top_k → load the memories. With a reranker configured
(`memplane.server.retrieval.rerank`), SQL keeps max(top_k, rerank.top_n) hits per query and the
best top_n merged candidates are re-scored and reordered before the cut; a reranker that
fails or times out leaves the fused order, and the result says so.

Vector plan: a filter selecting at most `exact_scan_max_rows` rows is scanned exactly
through the btree scope indexes (recall 1.0; shared case C003: HNSW post-filtering
returns too few rows for a small scope); larger sets use the partition's HNSW index with
pgvector's iterative scan. bench/vector_plan.py measures the crossover.

Every read goes through a `ReadRouter`: a streaming replica when `database.read_dsn` is
set, with read-your-writes for a request carrying a WAL position (*after_lsn*, the
`memplane-lsn` metadata a write returned); see `memplane.server.storage.replica`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np

from memplane.domain.consistency import LSN_METADATA_KEY, parse_lsn
from memplane.domain.filters import MemoryFilter
from memplane.domain.models import Memory, Workspace
from memplane.domain.ranking import Boosts, Knob, Ranking
from memplane.errors import FieldViolation, InvalidArgumentError, NotFoundError
from memplane.server.embedding.calibration import RelevanceCalibration, calibration_for
from memplane.server.embedding.compat import ensure_compatible
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.retrieval.context import DEFAULT_CONTEXT_TOKENS, CountedTurn, bound_context
from memplane.server.retrieval.fusion import SignalHit
from memplane.server.retrieval.query import asks_when, query_names, query_phrases, query_time
from memplane.server.retrieval.ranking import check_ranking
from memplane.server.retrieval.relevance import Relevance, relevance
from memplane.server.retrieval.rerank import Reranker, RerankError
from memplane.server.settings import LimitsSettings, RetrievalSettings
from memplane.server.storage import search as search_sql
from memplane.server.storage.database import Connection
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.routing import RoutedReads
from memplane.server.storage.search import ContextTurn, QueryText, SearchRow, SearchSpec
from memplane.server.validation import Violations, check_filter, check_text, parse_memory_id
from memplane.text.segment import segment

_log = logging.getLogger(__name__)


class SearchMode:
    """Signals a search uses."""

    HYBRID = "hybrid"
    VECTOR = "vector"
    LEXICAL = "lexical"


@dataclass(frozen=True)
class SearchRequest:
    """A validated-on-use search. `ranking` holds the ranking knobs the request sets
    (`memplane.domain.ranking.Ranking` field name -> value); a knob absent is the server's
    (`Ranking.resolve`: a fusion method without a vector weight takes that method's)."""

    queries: tuple[str, ...]
    top_k: int = 10
    min_score: float = 0.0
    min_relevance: float = 0.0  # drop hits less relevant (0 keeps all)
    filter: MemoryFilter = field(default_factory=MemoryFilter)
    mode: str = SearchMode.HYBRID
    ranking: Mapping[str, Knob] = field(default_factory=dict)
    context_turns: int = 0  # transcript turns returned each side of a hit
    context_max_tokens: int = 0  # 0: DEFAULT_CONTEXT_TOKENS


@dataclass(frozen=True)
class Hit:
    """A memory with its fused score, per-signal details and the best query's index;
    `rerank` is the reranker's score, normalised score and rank among the re-scored
    candidates (None: not re-scored)."""

    memory: Memory
    score: float
    vector: SignalHit | None
    lexical: SignalHit | None
    query_index: int
    rerank: SignalHit | None = None
    boosts: Boosts = field(default_factory=Boosts)  # what each query-aware term added (weighted)
    context: tuple[CountedTurn, ...] = ()  # turns around the hit (context_turns), transcript order
    relevance: Relevance = field(default_factory=Relevance)  # absolute, the best over the queries


class RerankStatus:
    """What the rerank stage did to a search."""

    NONE = ""  # no reranker configured, or no hits
    APPLIED = "applied"  # the re-scored candidates are in the reranker's order
    FALLBACK = "fallback"  # it failed or timed out: fused order, `rerank_note` says why


@dataclass(frozen=True)
class SearchResult:
    """Hits best first, where the server's time went (seconds), and the rerank stage's
    outcome (`RerankStatus`, a note on a fallback)."""

    hits: list[Hit]
    embedding_seconds: float
    database_seconds: float
    total_seconds: float
    rerank_seconds: float = 0.0
    rerank_status: str = RerankStatus.NONE
    rerank_note: str = ""


@dataclass(frozen=True)
class Page:
    """One page of a list."""

    memories: list[Memory]
    next_page_token: str
    total_size: int


class RetrievalService:
    """Reads of one workspace at a time; the workspace comes from the caller's principal.
    *reads* decides whether each read runs on the replica or the primary."""

    def __init__(
        self,
        reads: RoutedReads,
        memories: MemoryStore,
        meter: EmbeddingMeter,
        limits: LimitsSettings,
        settings: RetrievalSettings,
        *,
        reranker: Reranker | None = None,
        counter_for: Callable[[str], Callable[[str], int]] | None = None,
    ) -> None:
        """*counter_for* gives the token counter of an encoding (context bounds; without
        it, a context turn counts as its length in characters / 4)."""
        self._reads = reads
        self._memories = memories
        self._meter = meter
        self._embedder = meter.embedder
        self._limits = limits
        self._settings = settings
        self._reranker = reranker
        self._counter_for = counter_for or (lambda _encoding: _approximate_tokens)
        self._counts: dict[tuple[int, str], tuple[float, int]] = {}

    def _validate_search(self, request: SearchRequest) -> None:
        v = Violations()
        if not request.queries:
            v.add("queries", "must hold at least one query")
        elif len(request.queries) > self._limits.max_queries:
            v.add("queries", f"holds {len(request.queries)} queries; the limit is {self._limits.max_queries}")
        for i, q in enumerate(request.queries):
            check_text(v, f"queries[{i}]", q, self._limits.max_query_bytes, required=True)
        if not 1 <= request.top_k <= self._limits.max_top_k:
            v.add("top_k", f"must be between 1 and {self._limits.max_top_k}")
        if not 0.0 <= request.min_score <= 1.0:
            v.add("min_score", "must be between 0 and 1")
        if not 0.0 <= request.min_relevance <= 1.0:  # also refuses NaN
            v.add("min_relevance", "must be between 0 and 1")
        check_ranking(v, "ranking", request.ranking)
        for name, high in (("context_turns", MAX_CONTEXT_TURNS), ("context_max_tokens", MAX_CONTEXT_TOKENS)):
            if not 0 <= getattr(request, name) <= high:
                v.add(name, f"must be between 0 and {high}")
        check_filter(v, "filter", request.filter, self._limits)
        v.raise_if_any()

    async def search(self, workspace: Workspace, request: SearchRequest, *, after_lsn: str = "") -> SearchResult:
        """Hybrid / vector / lexical search that sees every write up to WAL position
        *after_lsn* ("X/Y"; "" for none). Raises `InvalidArgumentError` naming the field
        (`memplane-lsn` for a malformed position), `EmbeddingMismatchError` when the
        embedder differs from the workspace's, `QuotaExceededError` past the workspace's
        daily embedding tokens, `UnavailableError` when no database answers."""
        started = time.perf_counter()
        check_lsn(after_lsn)
        self._validate_search(request)
        use_vector = request.mode in (SearchMode.HYBRID, SearchMode.VECTOR)
        use_lexical = request.mode in (SearchMode.HYBRID, SearchMode.LEXICAL)
        depth = max(request.top_k * self._settings.candidate_multiplier, self._settings.min_candidates)
        now = datetime.now(UTC)
        ranking = Ranking.resolve(self._settings, request.ranking)
        if not use_lexical:
            ranking = replace(ranking, prf_terms=0)  # RM3 expands the lexical signal only
        # The queries embed (an HTTP round trip, or the model in a thread) while this task
        # counts the scope's rows (a round trip unless cached) and reads the query texts.
        embedding: asyncio.Future[tuple[np.ndarray, float]] | None = None
        if use_vector:
            ensure_compatible(workspace, self._embedder)
            embedding = asyncio.ensure_future(
                _timed(self._meter.for_workspace(workspace).embed_queries(request.queries))
            )
            embedding.add_done_callback(_consume)
        vectors, embed_seconds = None, 0.0
        try:
            t0 = time.perf_counter()
            exact = await self._exact(workspace, request.filter, now)
            count_seconds = time.perf_counter() - t0
            keep = max(request.top_k, self._reranker.top_n) if self._reranker is not None else request.top_k
            if request.min_relevance > 0:  # room for the next relevant hits after those cut
                keep = max(keep, min(depth, RELEVANCE_OVERFETCH * request.top_k))
            spec = SearchSpec(
                use_vector=use_vector,
                use_lexical=use_lexical,
                depth=depth,
                top_k=keep,
                min_score=request.min_score,
                exact=exact,
                prefilter=exact and request.filter.narrows,
                lexical_budget=self._settings.lexical_candidate_postings,
                lexical_cap=self._settings.lexical_max_candidates,
                ranking=ranking,
                k1=self._settings.bm25_k1,
                b=self._settings.bm25_b,
                prf_docs=self._settings.prf_docs,
                prf_weight=self._settings.prf_weight,
                context_turns=request.context_turns,
            )
            texts = [segment(q) if use_lexical else "" for q in request.queries]
            # Query understanding (names, time, phrases, when) only when a term reads it.
            queries = [
                _query_text(q, text, None, now, self._settings) if spec.boosted else QueryText(text, None)
                for q, text in zip(request.queries, texts, strict=True)
            ]
            if embedding is not None:
                vectors, embed_seconds = await embedding
        finally:
            if embedding is not None:
                embedding.cancel()  # a no-op once done; stops the embedding when the count failed
        t0 = time.perf_counter()
        if vectors is not None:
            queries = [replace(q, vector=vectors[i]) for i, q in enumerate(queries)]
        settings = {} if exact or not use_vector else _hnsw_settings(self._settings.hnsw_ef_search, depth)

        async def send(conn: Connection) -> list[search_sql.Cursor]:
            return await search_sql.send(conn, workspace, queries, spec, request.filter, now=now)

        cursors = await self._reads.read(workspace.key, send, after_lsn=after_lsn, pipeline_settings=settings)
        per_query = await search_sql.read(cursors)
        db_seconds = count_seconds + time.perf_counter() - t0  # the count's (beside the embedding) and the statement's
        merged = search_sql.merge_queries(per_query)
        relevances = _relevances(calibration_for(workspace.embedding_model), per_query)
        if request.min_relevance > 0:
            merged = [(r, i) for r, i in merged if relevances[r.memory.id].score >= request.min_relevance]
        hits = [
            Hit(
                memory=r.memory,
                score=r.score,
                vector=_hit(r.vector),
                lexical=_hit(r.lexical),
                query_index=i,
                boosts=r.boosts,
                context=self._context(workspace, r.context, request.context_max_tokens),
                relevance=relevances[r.memory.id],
            )
            for r, i in merged[: max(request.top_k, self._reranker.top_n if self._reranker else 0)]
        ]
        if self._reranker is None or not hits:
            return SearchResult(hits[: request.top_k], embed_seconds, db_seconds, time.perf_counter() - started)
        t0 = time.perf_counter()
        hits, status, note = await _rerank(self._reranker, request.queries, hits)
        rerank_seconds = time.perf_counter() - t0
        return SearchResult(
            hits[: request.top_k],
            embed_seconds,
            db_seconds,
            time.perf_counter() - started,
            rerank_seconds=rerank_seconds,
            rerank_status=status,
            rerank_note=note,
        )

    def _context(self, workspace: Workspace, turns: Sequence[ContextTurn], max_tokens: int) -> tuple[CountedTurn, ...]:
        if not turns:
            return ()
        count = self._counter_for(workspace.token_encoding)
        return tuple(bound_context(turns, max_tokens or DEFAULT_CONTEXT_TOKENS, count))

    async def _exact(self, workspace: Workspace, flt: MemoryFilter, now: datetime) -> bool:
        """Whether the filtered rows are few enough (`exact_scan_max_rows`) to scan exactly:
        the count through the btree scope indexes (or the workspace's total for a filter
        of validity only), reused for `scope_count_cache_seconds`."""
        cap = self._settings.exact_scan_max_rows
        key = (workspace.key, repr(flt))  # validity is judged at each count's time; counts move slowly
        clock = time.monotonic()
        cached = self._counts.get(key)
        if cached is not None and cached[0] > clock:
            return cached[1] <= cap

        async def count(conn: Connection) -> int:
            if flt.narrows:
                return await self._memories.count_matching(conn, workspace, flt, now=now, cap=cap)
            return await self._memories.memory_count(conn, workspace)

        rows = await self._reads.read(workspace.key, count)
        if len(self._counts) >= _MAX_CACHED_COUNTS:
            self._counts.clear()
        self._counts[key] = (clock + self._settings.scope_count_cache_seconds, rows)
        return rows <= cap

    async def get(self, workspace: Workspace, memory_id: str, *, after_lsn: str = "") -> Memory:
        """One memory, as of at least WAL position *after_lsn*. Raises
        `InvalidArgumentError` (malformed id or position), `NotFoundError`."""
        check_lsn(after_lsn)
        v = Violations()
        canonical = parse_memory_id(v, "id", memory_id)
        v.raise_if_any()

        async def load(conn: Connection) -> Memory | None:
            return await self._memories.get(conn, workspace, canonical)

        memory = await self._reads.read(workspace.key, load, after_lsn=after_lsn)
        if memory is None:
            raise NotFoundError("memory", memory_id)
        return memory

    async def list(
        self,
        workspace: Workspace,
        flt: MemoryFilter,
        page_size: int,
        page_token: str,
        *,
        after_lsn: str = "",
        oldest_first: bool = False,
    ) -> Page:
        """A page of memories, newest first (oldest first with *oldest_first*), as of at
        least WAL position *after_lsn*. page_size 0 means 100. Raises
        `InvalidArgumentError` for a bad page_size, filter or position, or a page_token
        not returned for the same order."""
        check_lsn(after_lsn)
        v = Violations()
        size = page_size or 100
        if not 1 <= size <= self._limits.max_page_size:
            v.add("page_size", f"must be between 1 and {self._limits.max_page_size}")
        after = _decode_token(v, page_token, oldest_first=oldest_first)
        check_filter(v, "filter", flt, self._limits)
        v.raise_if_any()
        now = datetime.now(UTC)

        async def page(conn: Connection) -> tuple[list[Memory], int]:
            return await self._memories.list_page(
                conn, workspace, flt, now=now, limit=size + 1, after=after, oldest_first=oldest_first
            )

        memories, total = await self._reads.read(workspace.key, page, after_lsn=after_lsn)
        next_token = ""
        if len(memories) > size:
            memories = memories[:size]
            last = memories[-1]
            next_token = _encode_token(last.created_at, last.id, oldest_first=oldest_first)
        return Page(memories, next_token, total)


_MAX_CACHED_COUNTS = 10_000

RELEVANCE_OVERFETCH = 3
"""With min_relevance set, SQL returns up to this many times top_k hits (at most the
candidate depth), so hits cut for relevance leave room for the next relevant ones."""


def _relevances(calibration: RelevanceCalibration, per_query: list[list[SearchRow]]) -> dict[str, Relevance]:
    """Each memory's relevance: the best over the queries that returned it."""
    best: dict[str, Relevance] = {}
    for rows in per_query:
        for row in rows:
            rel = relevance(
                calibration, row.cosine, row.lexical[0] if row.lexical is not None else None, row.lexical_max
            )
            if row.memory.id not in best or rel.score > best[row.memory.id].score:
                best[row.memory.id] = rel
    return best


MAX_CONTEXT_TURNS = 10
"""Turns each side of a hit its context may hold."""

MAX_CONTEXT_TOKENS = 10_000
"""Tokens of one hit's context a request may ask for."""


def _approximate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _query_text(
    query: str, text: str, vector: np.ndarray | None, now: datetime, settings: RetrievalSettings
) -> QueryText:
    """One query's statement values: its segmented *text* and *vector*, the names it
    mentions, the interval it names widened by `time_slack_days` and whether it asks for a
    time (`memplane.server.retrieval.query`)."""
    when = query_time(query, now)
    start, end = when.widened(settings.time_slack_days) if when is not None else (None, None)
    phrases = tuple(segment(p) for p in query_phrases(query))
    return QueryText(text, vector, tuple(query_names(query)), phrases, start, end, asks_when(query))


async def _rerank(reranker: Reranker, queries: tuple[str, ...], hits: list[Hit]) -> tuple[list[Hit], str, str]:
    """*hits* (fused order) with the first `top_n` re-scored and reordered by the
    reranker (ties keep fused order), the rest after them; on a `RerankError` the hits
    unchanged, status FALLBACK and the error as the note (also logged)."""
    head, tail = hits[: reranker.top_n], hits[reranker.top_n :]
    try:
        scores = await reranker.rescore(queries, [h.memory.content for h in head])
    except RerankError as exc:
        note = f"rerank failed, fused order kept: {exc}"
        _log.warning("%s", note)
        return hits, RerankStatus.FALLBACK, note
    rescored = [replace(h, rerank=s) for h, s in zip(head, scores, strict=True)]
    rescored.sort(key=lambda h: h.rerank.rank if h.rerank is not None else 0)
    return rescored + tail, RerankStatus.APPLIED, ""


def check_lsn(after_lsn: str) -> None:
    """Raise `InvalidArgumentError` naming the metadata entry if *after_lsn* is malformed."""
    if after_lsn:
        try:
            parse_lsn(after_lsn)
        except ValueError:
            raise InvalidArgumentError(
                FieldViolation(LSN_METADATA_KEY, "must be a WAL position 'X/Y' (hex) returned by a write")
            ) from None


def _hnsw_settings(ef_search: int, depth: int) -> dict[str, str]:
    """pgvector's settings for an HNSW walk: ef_search at least the depth, and the
    iterative scan so a filter still yields *depth* rows (pgvector >= 0.8)."""
    return {"hnsw.ef_search": str(max(ef_search, depth)), "hnsw.iterative_scan": "relaxed_order"}


async def _timed(embedding: Awaitable[np.ndarray]) -> tuple[np.ndarray, float]:
    """The vectors and the seconds the embedding took."""
    started = time.perf_counter()
    vectors = await embedding
    return vectors, time.perf_counter() - started


def _consume(task: asyncio.Future[tuple[np.ndarray, float]]) -> None:
    """Retrieve a finished embedding's exception (it reaches the caller through the await,
    or nobody when the count failed first), so asyncio does not log it as unretrieved."""
    if not task.cancelled():
        task.exception()


def _hit(signal: tuple[float, float, int] | None) -> SignalHit | None:
    return None if signal is None else SignalHit(score=signal[0], normalized=signal[1], rank=signal[2])


def _encode_token(created_at: datetime, memory_id: str, *, oldest_first: bool) -> str:
    data: dict[str, str | int] = {"t": created_at.isoformat(), "i": memory_id}
    if oldest_first:  # a newest-first token keeps its old form: tokens handed out before stay valid
        data["o"] = 1
    raw = json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(v: Violations, token: str, *, oldest_first: bool) -> tuple[datetime, str] | None:
    if not token:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(data, dict) or not isinstance(data.get("t"), str) or not isinstance(data.get("i"), str):
            raise TypeError("malformed token")
        created = datetime.fromisoformat(data["t"])
        memory_id = parse_memory_id(v, "page_token", data["i"])
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        v.add("page_token", "is not a token returned by ListMemories")
        return None
    if created.tzinfo is None:
        v.add("page_token", "is not a token returned by ListMemories")
        return None
    if (data.get("o") == 1) != oldest_first:
        order = "oldest-first" if data.get("o") == 1 else "newest-first"
        v.add("page_token", f"was returned for the {order} order; ask again from the first page for another order")
        return None
    return created, memory_id
