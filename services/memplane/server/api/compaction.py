"""memplane.v1.CompactionService over compaction's parts: each RPC calls the part that
does it (`check`, `compactor`, `offload`, `transcript`, `session_memory`), PrepareContext
the orchestration of them all (`prepare.ContextPreparer`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from memplane import convert
from memplane.domain.context import CompactionOutcome, ContextMessage, SummarizerChoice, SummaryMethod, ToolResultLimits
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.admin.auth import Authenticator
from memplane.server.api.context_convert import message_to_proto, messages_from_proto, split_to_proto
from memplane.server.api.handler import Context, rpc, workspace_of
from memplane.server.api.read_tokens import ReadYourWrites
from memplane.server.compaction.check import ContextChecker
from memplane.server.compaction.compactor import MessageCompactor
from memplane.server.compaction.knobs import OFFLOAD_MESSAGES  # the same size moves counting off the loop
from memplane.server.compaction.offload import ToolResultOffloader
from memplane.server.compaction.prepare import ContextPreparer, PrepareOptions
from memplane.server.compaction.session_memory import SessionSummarizer
from memplane.server.compaction.transcript import SessionTranscript
from memplane.server.settings import LimitsSettings
from memplane.v1 import compaction_pb2, compaction_pb2_grpc

_CHOICES = {
    compaction_pb2.SUMMARIZER_CHOICE_UNSPECIFIED: SummarizerChoice.AUTO,
    compaction_pb2.SUMMARIZER_CHOICE_LLM: SummarizerChoice.LLM,
    compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE: SummarizerChoice.EXTRACTIVE,
}
_METHODS = {
    SummaryMethod.LLM: compaction_pb2.SUMMARY_METHOD_LLM,
    SummaryMethod.EXTRACTIVE: compaction_pb2.SUMMARY_METHOD_EXTRACTIVE,
    SummaryMethod.PREVIOUS_KEPT: compaction_pb2.SUMMARY_METHOD_PREVIOUS_KEPT,
}


def _choice(value: compaction_pb2.SummarizerChoice.ValueType, field: str) -> SummarizerChoice:
    choice = _CHOICES.get(value)
    if choice is None:
        raise InvalidArgumentError(FieldViolation(field, "must be a known summarizer choice"))
    return choice


def _outcome_to_proto(outcome: CompactionOutcome) -> compaction_pb2.CompactionResult:
    return compaction_pb2.CompactionResult(
        summary=outcome.summary,
        method=_METHODS[outcome.method],
        compacted=outcome.compacted,
        failure=outcome.failure,
        compacted_message_count=outcome.compacted_message_count,
        input_tokens=outcome.input_tokens,
        summary_tokens=outcome.summary_tokens,
        language=outcome.language,
        transcript_message_ids=list(outcome.transcript_message_ids),
    )


class CompactionServicer(compaction_pb2_grpc.CompactionServiceServicer):
    """Context tools; the workspace comes from the API key. SummarizeSession, which stores
    memories, returns the `memplane-lsn` read-your-writes token as a write RPC does."""

    def __init__(
        self,
        *,
        checker: ContextChecker,
        compactor: MessageCompactor,
        offloader: ToolResultOffloader,
        transcript: SessionTranscript,
        sessions: SessionSummarizer,
        preparer: ContextPreparer,
        authenticator: Authenticator,
        limits: LimitsSettings,
        max_messages: int,
        consistency: ReadYourWrites,
    ) -> None:
        self._checker = checker
        self._compactor = compactor
        self._offloader = offloader
        self._transcript = transcript
        self._sessions = sessions
        self._preparer = preparer
        self._consistency = consistency
        self._auth = authenticator
        self._limits = limits
        self._max_messages = max_messages

    async def _messages(
        self, messages: Sequence[compaction_pb2.ContextMessage], *, required: bool = True
    ) -> list[ContextMessage]:
        """Validated domain messages; a large request converts in a worker thread so the
        event loop keeps serving other calls (a 1M-token request takes ~60 ms here)."""
        if len(messages) <= OFFLOAD_MESSAGES:
            return messages_from_proto(messages, self._limits, max_messages=self._max_messages, required=required)
        return await asyncio.to_thread(
            messages_from_proto, messages, self._limits, max_messages=self._max_messages, required=required
        )

    def _tool_limits(self, field: str, limits: compaction_pb2.ToolResultLimits) -> ToolResultLimits:
        default = self._offloader.default_limits()
        retention = default.retention_seconds
        if limits.HasField("retention"):
            retention = limits.retention.seconds + limits.retention.nanos / 1e9  # no overflow on huge values
        for name in ("recent_max_bytes", "old_max_bytes"):
            if getattr(limits, name) < 0:
                raise InvalidArgumentError(FieldViolation(f"{field}.{name}", "must not be negative"))
        keep = limits.keep_last_messages
        return ToolResultLimits(
            recent_max_bytes=limits.recent_max_bytes or default.recent_max_bytes,
            old_max_bytes=limits.old_max_bytes or default.old_max_bytes,
            keep_last_messages=default.keep_last_messages if keep == 0 else max(keep, 0),
            retention_seconds=retention,
        )

    @rpc
    async def CheckContext(
        self, request: compaction_pb2.CheckContextRequest, context: Context
    ) -> compaction_pb2.CheckContextResponse:
        _, workspace = await workspace_of(self._auth, context)
        messages = await self._messages(request.messages, required=False)
        split, encoding = await self._checker.check_context(
            workspace,
            messages,
            system_prompt=request.system_prompt,
            previous_summary=request.previous_summary,
            threshold_tokens=request.threshold_tokens,
            reserve_tokens=request.reserve_tokens,
            encoding=request.encoding,
        )
        return compaction_pb2.CheckContextResponse(split=split_to_proto(split, encoding))

    @rpc
    async def CompactMessages(
        self, request: compaction_pb2.CompactMessagesRequest, context: Context
    ) -> compaction_pb2.CompactMessagesResponse:
        _, workspace = await workspace_of(self._auth, context)
        messages = await self._messages(request.messages)
        outcome = await self._compactor.compact_messages(
            workspace,
            messages,
            previous_summary=request.previous_summary,
            language=request.language,
            max_summary_tokens=request.max_summary_tokens,
            summarizer=_choice(request.summarizer, "summarizer"),
            scope=convert.scope_from_proto(request.scope),
            encoding=request.encoding,
        )
        return compaction_pb2.CompactMessagesResponse(result=_outcome_to_proto(outcome))

    @rpc
    async def CompactToolResults(
        self, request: compaction_pb2.CompactToolResultsRequest, context: Context
    ) -> compaction_pb2.CompactToolResultsResponse:
        _, workspace = await workspace_of(self._auth, context)
        messages = await self._messages(request.messages)
        done = await self._offloader.compact_tool_results(
            workspace,
            messages,
            limits=self._tool_limits("limits", request.limits),
            scope=convert.scope_from_proto(request.scope),
        )
        return compaction_pb2.CompactToolResultsResponse(
            messages=[message_to_proto(m) for m in done.messages],
            truncated_count=done.truncated_count,
            removed_bytes=done.removed_bytes,
        )

    @rpc
    async def ReadToolResult(
        self, request: compaction_pb2.ReadToolResultRequest, context: Context
    ) -> compaction_pb2.ReadToolResultResponse:
        _, workspace = await workspace_of(self._auth, context)
        piece = await self._offloader.read_tool_result(
            workspace,
            request.ref,
            start_line=request.start_line,
            start_column=request.start_column,
            line_count=request.line_count,
            max_bytes=request.max_bytes,
        )
        return compaction_pb2.ReadToolResultResponse(
            text=piece.text,
            next_line=piece.next_line,
            next_column=piece.next_column,
            total_lines=piece.total_lines,
            total_bytes=piece.total_bytes,
            expire_time=convert.timestamp(piece.expires_at),
        )

    @rpc
    async def PrepareContext(
        self, request: compaction_pb2.PrepareContextRequest, context: Context
    ) -> compaction_pb2.PrepareContextResponse:
        principal, workspace = await workspace_of(self._auth, context)
        messages = await self._messages(request.messages, required=False)
        options = PrepareOptions(
            system_prompt=request.system_prompt,
            previous_summary=request.previous_summary,
            max_input_tokens=request.max_input_tokens,
            compact_ratio=request.compact_ratio,
            reserve_tokens=request.reserve_tokens,
            tool_result_limits=self._tool_limits("tool_result_limits", request.tool_result_limits),
            skip_tool_result_compaction=request.skip_tool_result_compaction,
            encoding=request.encoding,
            language=request.language,
            max_summary_tokens=request.max_summary_tokens,
            summarizer=_choice(request.summarizer, "summarizer"),
            scope=convert.scope_from_proto(request.scope),
            write_memories=request.write_memories,
        )
        prepared = await self._preparer.prepare_context(principal, workspace, messages, options)
        reply = compaction_pb2.PrepareContextResponse(
            messages=[message_to_proto(m) for m in prepared.messages],
            summary=prepared.summary,
            split=split_to_proto(prepared.split, prepared.encoding),
            truncated_tool_results=prepared.truncated_tool_results,
            memories=[convert.memory_to_proto(m) for m in prepared.memories],
        )
        if prepared.compaction is not None:
            reply.compaction.CopyFrom(_outcome_to_proto(prepared.compaction))
        return reply

    @rpc
    async def GetTranscript(
        self, request: compaction_pb2.GetTranscriptRequest, context: Context
    ) -> compaction_pb2.GetTranscriptResponse:
        _, workspace = await workspace_of(self._auth, context)
        entries, token = await self._transcript.page(
            workspace, request.session_id, page_size=request.page_size, page_token=request.page_token
        )
        return compaction_pb2.GetTranscriptResponse(
            messages=[
                compaction_pb2.TranscriptMessage(message=message_to_proto(e.message), seq=e.seq, compacted=e.compacted)
                for e in entries
            ],
            next_page_token=token,
        )

    @rpc
    async def SummarizeSession(
        self, request: compaction_pb2.SummarizeSessionRequest, context: Context
    ) -> compaction_pb2.SummarizeSessionResponse:
        principal, workspace = await workspace_of(self._auth, context)
        messages = await self._messages(request.messages, required=False)
        written = await self._sessions.summarize_session(
            principal,
            workspace,
            convert.scope_from_proto(request.scope),
            messages,
            summary=request.summary,
            language=request.language,
            summarizer=_choice(request.summarizer, "summarizer"),
            request_id=request.request_id,
        )
        await self._consistency.stamp(context, workspace)
        return compaction_pb2.SummarizeSessionResponse(
            memories=[convert.memory_to_proto(m) for m in written.memories],
            summary_method=written.summary_method,
            extraction=written.extraction,
        )
