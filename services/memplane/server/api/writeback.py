"""memplane.v1.WriteBackService over `memplane.server.writeback.service.WriteBackService` (memories
one by one) and `memplane.server.writeback.conversation.ConversationWriter` (WriteConversation)."""

from __future__ import annotations

from memplane import convert
from memplane.domain.models import MemoryType, NewMemory
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.admin.auth import Authenticator
from memplane.server.api.extraction_convert import job_to_proto, statuses_from_proto
from memplane.server.api.handler import Context, rpc, workspace_of
from memplane.server.api.read_tokens import ReadYourWrites
from memplane.server.writeback.conversation import ConversationWriter
from memplane.server.writeback.service import WriteBackService
from memplane.v1 import writeback_pb2, writeback_pb2_grpc


class WriteBackServicer(writeback_pb2_grpc.WriteBackServiceServicer):
    """Writes; the workspace comes from the API key, the actor is the key id. Every write
    RPC's trailing metadata carries `memplane-lsn` when a replica serves reads: the
    read-your-writes token (`memplane.server.api.read_tokens`)."""

    def __init__(
        self,
        *,
        service: WriteBackService,
        conversations: ConversationWriter,
        authenticator: Authenticator,
        max_batch_size: int,
        consistency: ReadYourWrites,
    ) -> None:
        self._service = service
        self._conversations = conversations
        self._consistency = consistency
        self._auth = authenticator
        self._max_batch = max_batch_size

    def _check_batch(self, field: str, size: int) -> None:
        # Refuse an oversized batch before converting it (cheap, and names the field), in
        # `validation.check_batch`'s words: the mem0 facade reads the limit from them.
        if size > self._max_batch:
            raise InvalidArgumentError(FieldViolation(field, f"holds {size} entries; the limit is {self._max_batch}"))

    @rpc
    async def AddMemories(
        self, request: writeback_pb2.AddMemoriesRequest, context: Context
    ) -> writeback_pb2.AddMemoriesResponse:
        principal, workspace = await workspace_of(self._auth, context)
        self._check_batch("memories", len(request.memories))
        items = [convert.new_memory_from_proto(m, f"memories[{i}]") for i, m in enumerate(request.memories)]
        added = await self._service.add_reply(principal, workspace, items, request.request_id)
        await self._consistency.stamp(context, workspace)
        return writeback_pb2.AddMemoriesResponse(
            memories=[convert.memory_to_proto(m) for m in added.memories], duplicate_indexes=added.duplicates
        )

    @rpc
    async def WriteConversation(
        self, request: writeback_pb2.WriteConversationRequest, context: Context
    ) -> writeback_pb2.WriteConversationResponse:
        principal, workspace = await workspace_of(self._auth, context)
        self._check_batch("messages", len(request.messages))
        messages = [convert.message_from_proto(m, f"messages[{i}]") for i, m in enumerate(request.messages)]
        result = await self._conversations.write(
            principal,
            workspace,
            convert.scope_from_proto(request.scope),
            messages,
            request.request_id,
            extract=request.extract,
            wait=request.wait,
            skip_episodic=request.skip_episodic,
        )
        await self._consistency.stamp(context, workspace)
        return writeback_pb2.WriteConversationResponse(
            memories=[convert.memory_to_proto(m) for m in result.memories],
            transcript_message_count=result.transcript_message_count,
            method=result.method,
            extraction_job=job_to_proto(result.job) if result.job is not None else None,
            extracted_memories=[convert.memory_to_proto(m) for m in result.extracted],
        )

    @rpc
    async def GetExtractionJob(
        self, request: writeback_pb2.GetExtractionJobRequest, context: Context
    ) -> writeback_pb2.GetExtractionJobResponse:
        _, workspace = await workspace_of(self._auth, context)
        job = await self._service.extraction_job(workspace, request.id)
        return writeback_pb2.GetExtractionJobResponse(job=job_to_proto(job))

    @rpc
    async def ListExtractionJobs(
        self, request: writeback_pb2.ListExtractionJobsRequest, context: Context
    ) -> writeback_pb2.ListExtractionJobsResponse:
        _, workspace = await workspace_of(self._auth, context)
        statuses = statuses_from_proto(request.statuses, "statuses")
        jobs, token = await self._service.extraction_jobs(workspace, statuses, request.page_size, request.page_token)
        return writeback_pb2.ListExtractionJobsResponse(jobs=[job_to_proto(j) for j in jobs], next_page_token=token)

    @rpc
    async def UpdateMemory(
        self, request: writeback_pb2.UpdateMemoryRequest, context: Context
    ) -> writeback_pb2.UpdateMemoryResponse:
        principal, workspace = await workspace_of(self._auth, context)
        mask = list(request.update_mask.paths)
        values = request.memory
        new = NewMemory(
            content=values.content,
            type=convert.memory_type_from_proto(values.type, "memory.type", default=None)
            if "type" in mask
            else MemoryType.USER,
            name=values.name,
            description=values.description,
            metadata=convert.struct_to_dict(values.metadata, "memory.metadata"),
            valid_from=convert.opt_time(values, "valid_from_time", "memory.valid_from_time"),
            valid_to=convert.opt_time(values, "valid_to_time", "memory.valid_to_time"),
            expires_at=convert.opt_time(values, "expire_time", "memory.expire_time"),
        )
        updated = await self._service.update(
            principal,
            workspace,
            request.id,
            new,
            mask,
            expected_version=request.expected_version,
            request_id=request.request_id,
        )
        await self._consistency.stamp(context, workspace)
        return writeback_pb2.UpdateMemoryResponse(memory=convert.memory_to_proto(updated))

    @rpc
    async def DeleteMemory(
        self, request: writeback_pb2.DeleteMemoryRequest, context: Context
    ) -> writeback_pb2.DeleteMemoryResponse:
        principal, workspace = await workspace_of(self._auth, context)
        deleted = await self._service.delete(
            principal, workspace, request.id, expected_version=request.expected_version, request_id=request.request_id
        )
        await self._consistency.stamp(context, workspace)
        return writeback_pb2.DeleteMemoryResponse(id=deleted)

    @rpc
    async def DeleteMemoriesByScope(
        self, request: writeback_pb2.DeleteMemoriesByScopeRequest, context: Context
    ) -> writeback_pb2.DeleteMemoriesByScopeResponse:
        principal, workspace = await workspace_of(self._auth, context)
        memories, messages = await self._service.delete_by_scope(
            principal, workspace, convert.scope_from_proto(request.scope), request.request_id
        )
        await self._consistency.stamp(context, workspace)
        return writeback_pb2.DeleteMemoriesByScopeResponse(deleted_count=memories, deleted_message_count=messages)

    @rpc
    async def ListMemoryEvents(
        self, request: writeback_pb2.ListMemoryEventsRequest, context: Context
    ) -> writeback_pb2.ListMemoryEventsResponse:
        _, workspace = await workspace_of(self._auth, context)
        events = await self._service.history(workspace, request.memory_id)
        return writeback_pb2.ListMemoryEventsResponse(events=[convert.event_to_proto(e) for e in events])
