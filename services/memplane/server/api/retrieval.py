"""memplane.v1.RetrievalService over `memplane.server.retrieval.service.RetrievalService`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time
from typing import Any

from memplane import convert
from memplane.domain.ranking import BOOST_NAMES, Knob, knob_types
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.admin.auth import Authenticator
from memplane.server.api.handler import Context, rpc, workspace_of
from memplane.server.api.read_tokens import ReadYourWrites
from memplane.server.retrieval.file_selection import FileSelector, SelectedFile, SelectionMethod, SelectRequest
from memplane.server.retrieval.fusion import SignalHit
from memplane.server.retrieval.service import RerankStatus, RetrievalService, SearchMode, SearchRequest
from memplane.server.retrieval.usage import DailyUsage, SearchCounter
from memplane.v1 import retrieval_pb2, retrieval_pb2_grpc

_MODES = {
    retrieval_pb2.SEARCH_MODE_UNSPECIFIED: SearchMode.HYBRID,
    retrieval_pb2.SEARCH_MODE_HYBRID: SearchMode.HYBRID,
    retrieval_pb2.SEARCH_MODE_VECTOR: SearchMode.VECTOR,
    retrieval_pb2.SEARCH_MODE_LEXICAL: SearchMode.LEXICAL,
}

_RERANK_STATUSES = {
    RerankStatus.NONE: retrieval_pb2.RERANK_STATUS_UNSPECIFIED,
    RerankStatus.APPLIED: retrieval_pb2.RERANK_STATUS_APPLIED,
    RerankStatus.FALLBACK: retrieval_pb2.RERANK_STATUS_FALLBACK,
}

_OLDEST_FIRST = {
    retrieval_pb2.MEMORY_ORDER_UNSPECIFIED: False,
    retrieval_pb2.MEMORY_ORDER_NEWEST_FIRST: False,
    retrieval_pb2.MEMORY_ORDER_OLDEST_FIRST: True,
}

_SELECTION_METHODS = {
    SelectionMethod.LLM: retrieval_pb2.SELECTION_METHOD_LLM,
    SelectionMethod.SEARCH: retrieval_pb2.SELECTION_METHOD_SEARCH,
    SelectionMethod.NONE: retrieval_pb2.SELECTION_METHOD_NONE,
}


def _selected(file: SelectedFile) -> retrieval_pb2.SelectedMemoryFile:
    return retrieval_pb2.SelectedMemoryFile(
        path=file.path,
        name=file.name,
        description=file.description,
        content=file.content,
        truncated=file.truncated,
        content_tokens=file.content_tokens,
        file_tokens=file.file_tokens,
        memory_id=file.memory.id,
        type=convert.MEMORY_TYPE_VALUES[file.memory.type],  # type: ignore[arg-type]
        score=file.score,
    )


def ranking_overrides(options: retrieval_pb2.RankingOptions) -> dict[str, Knob]:
    """The knobs a request's RankingOptions sets, by field name (`memplane.domain.ranking.Ranking`):
    a field with presence (`optional`) when present, 0 included; another when not 0 (0 is
    unset, the server's default); an enum as the domain enum of the value's name without the
    enum's prefix (FUSION_METHOD_RRF: FusionMethod.RRF). Raises `InvalidArgumentError` naming
    "ranking.<field>" for an enum value this server does not know."""
    kinds = knob_types()
    out: dict[str, Knob] = {}
    for field, set_value in options.ListFields():  # set: present (`optional`) or not 0
        value: Any = set_value
        if field.enum_type is not None:
            words = re.sub(r"(?<!^)(?=[A-Z])", " ", field.enum_type.name).lower()  # FusionMethod: fusion method
            named = field.enum_type.values_by_number.get(value)
            try:
                if named is None:
                    raise ValueError(value)
                value = kinds[field.name](named.name.removeprefix(f"{words.replace(' ', '_').upper()}_").lower())
            except ValueError:
                violation = FieldViolation(f"ranking.{field.name}", f"must be a known {words}")
                raise InvalidArgumentError(violation) from None
        out[field.name] = value
    return out


def _signal(hit: SignalHit | None) -> retrieval_pb2.SignalScore | None:
    if hit is None:
        return None
    return retrieval_pb2.SignalScore(score=hit.score, normalized_score=hit.normalized, rank=hit.rank)


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    """Search, get, list, file selection and daily usage; the workspace comes from the API
    key. Each read of memories honours a `memplane-lsn` request metadata entry
    (read-your-writes: `memplane.server.api.read_tokens`, `memplane.server.storage.replica`).
    Each search answered (SearchMemories, SelectMemoryFiles) is counted in *searches*
    (`memplane.server.retrieval.usage`: in memory, flushed in the background)."""

    def __init__(
        self,
        service: RetrievalService,
        authenticator: Authenticator,
        consistency: ReadYourWrites,
        selector: FileSelector,
        *,
        searches: SearchCounter,
        usage: DailyUsage,
    ) -> None:
        self._service = service
        self._selector = selector
        self._searches = searches
        self._usage = usage
        self._auth = authenticator
        self._consistency = consistency

    @rpc
    async def SearchMemories(
        self, request: retrieval_pb2.SearchMemoriesRequest, context: Context
    ) -> retrieval_pb2.SearchMemoriesResponse:
        _, workspace = await workspace_of(self._auth, context)
        if request.mode not in _MODES:
            raise InvalidArgumentError(FieldViolation("mode", "must be a known search mode"))
        result = await self._service.search(
            workspace,
            SearchRequest(
                queries=tuple(request.queries),
                top_k=request.top_k or 10,
                min_score=request.min_score,
                min_relevance=request.min_relevance,
                filter=convert.filter_from_proto(request.filter),
                mode=_MODES[request.mode],
                ranking=ranking_overrides(request.ranking),
                context_turns=request.context_turns,
                context_max_tokens=request.context_max_tokens,
            ),
            after_lsn=self._consistency.after(context, workspace),
        )
        self._searches.count(workspace.key)
        return retrieval_pb2.SearchMemoriesResponse(
            hits=[
                retrieval_pb2.SearchHit(
                    memory=convert.memory_to_proto(h.memory),
                    score=h.score,
                    vector=_signal(h.vector),
                    lexical=_signal(h.lexical),
                    query_index=h.query_index,
                    rerank=_signal(h.rerank),
                    boosts=retrieval_pb2.ScoreBoosts(**{n: getattr(h.boosts, n) for n in BOOST_NAMES}),
                    context=[
                        retrieval_pb2.ContextTurn(
                            offset=c.turn.offset,
                            message_id=c.turn.message_id,
                            name=c.turn.name,
                            content=c.turn.content,
                            tokens=c.tokens,
                        )
                        for c in h.context
                    ],
                    relevance=h.relevance.score,
                    relevance_signals=retrieval_pb2.RelevanceSignals(
                        cosine=h.relevance.cosine, lexical_coverage=h.relevance.coverage
                    ),
                )
                for h in result.hits
            ],
            timing=retrieval_pb2.SearchTiming(
                embedding_duration=convert.duration(result.embedding_seconds),
                database_duration=convert.duration(result.database_seconds),
                total_duration=convert.duration(result.total_seconds),
                rerank_duration=convert.duration(result.rerank_seconds) if result.rerank_seconds else None,
            ),
            rerank_status=_RERANK_STATUSES[result.rerank_status],
            rerank_note=result.rerank_note,
        )

    @rpc
    async def GetMemory(
        self, request: retrieval_pb2.GetMemoryRequest, context: Context
    ) -> retrieval_pb2.GetMemoryResponse:
        _, workspace = await workspace_of(self._auth, context)
        memory = await self._service.get(workspace, request.id, after_lsn=self._consistency.after(context, workspace))
        return retrieval_pb2.GetMemoryResponse(memory=convert.memory_to_proto(memory))

    @rpc
    async def ListMemories(
        self, request: retrieval_pb2.ListMemoriesRequest, context: Context
    ) -> retrieval_pb2.ListMemoriesResponse:
        _, workspace = await workspace_of(self._auth, context)
        if request.order not in _OLDEST_FIRST:
            raise InvalidArgumentError(FieldViolation("order", "must be a known memory order"))
        page = await self._service.list(
            workspace,
            convert.filter_from_proto(request.filter),
            request.page_size,
            request.page_token,
            after_lsn=self._consistency.after(context, workspace),
            oldest_first=_OLDEST_FIRST[request.order],
        )
        return retrieval_pb2.ListMemoriesResponse(
            memories=[convert.memory_to_proto(m) for m in page.memories],
            next_page_token=page.next_page_token,
            total_size=page.total_size,
        )

    @rpc
    async def SelectMemoryFiles(
        self, request: retrieval_pb2.SelectMemoryFilesRequest, context: Context
    ) -> retrieval_pb2.SelectMemoryFilesResponse:
        _, workspace = await workspace_of(self._auth, context)
        selection = await self._selector.select(
            workspace,
            SelectRequest(
                query=request.query,
                filter=convert.filter_from_proto(request.filter),
                max_files=request.max_files,
                max_tokens=request.max_tokens,
            ),
            after_lsn=self._consistency.after(context, workspace),
        )
        self._searches.count(workspace.key)
        return retrieval_pb2.SelectMemoryFilesResponse(
            files=[_selected(f) for f in selection.files],
            method=_SELECTION_METHODS[selection.method],
            fallback_reason=selection.fallback_reason,
            offered_count=selection.offered,
            unoffered_count=selection.unoffered,
            unknown_files=selection.unknown,
            over_limit_files=selection.over_limit,
            model=selection.model,
        )

    @rpc
    async def GetDailyUsage(
        self, request: retrieval_pb2.GetDailyUsageRequest, context: Context
    ) -> retrieval_pb2.GetDailyUsageResponse:
        _, workspace = await workspace_of(self._auth, context)
        days = await self._usage.days(workspace, request.days)
        return retrieval_pb2.GetDailyUsageResponse(
            days=[
                retrieval_pb2.DailyUsage(
                    start_time=convert.timestamp(datetime.combine(d.day, time(), UTC)),
                    memories_added=d.memories_added,
                    search_count=d.searches,
                )
                for d in days
            ]
        )
