"""`AsyncMemplaneClient`: one grpc.aio channel, the API key sent as bearer metadata on
every call, failures raised as `memplane.errors` classes.

    async with AsyncMemplaneClient("127.0.0.1:50051", api_key) as client:
        await client.add_memories([MemoryInput(content="I like green tea")])
        hits = await client.search("what drinks do I like?", top_k=5)

Replies are the generated `memplane.v1` messages (documented in proto/memplane/v1/).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc
from google.protobuf import field_mask_pb2

from memplane.client import health
from memplane.client.channels import TlsOptions, open_channel, parse_target
from memplane.client.errors import from_rpc_error
from memplane.client.retry import new_request_id
from memplane.domain.apikeys import VIA_METADATA_KEY
from memplane.domain.consistency import LSN_METADATA_KEY, newest_token
from memplane.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    compaction_pb2,
    compaction_pb2_grpc,
    filter_pb2,
    memory_pb2,
    retrieval_pb2,
    retrieval_pb2_grpc,
    writeback_pb2,
    writeback_pb2_grpc,
)

T = TypeVar("T")


def ranking_options(
    base: retrieval_pb2.RankingOptions | None, options: Mapping[str, float | None]
) -> retrieval_pb2.RankingOptions:
    """A copy of *base* (or an empty RankingOptions) with each of *options* not None set by
    field name (an int for an enum: `retrieval_pb2.FUSION_METHOD_RRF`). Raises `TypeError`
    naming an option that is not a RankingOptions field, as an unknown keyword would."""
    fields = retrieval_pb2.RankingOptions.DESCRIPTOR.fields_by_name
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise TypeError(f"search() got unexpected ranking option(s) {', '.join(unknown)}")
    out = retrieval_pb2.RankingOptions()
    if base is not None:
        out.CopyFrom(base)
    for name, value in options.items():
        if value is not None:
            setattr(out, name, value)
    return out


DEFAULT_TARGET = "127.0.0.1:50051"


SERVICE_NAMES = ("retrieval", "writeback", "compaction", "admin")


class AsyncMemplaneClient:
    """Async client of every memplane service.

    *target* is "host:port" of a server with every service; *targets* sends some
    services elsewhere (keys retrieval, writeback, compaction, admin: a cluster runs each
    as its own Deployment and Service), one channel per distinct address. *api_key* is a
    workspace key (memories) or the admin key (AdminService); *timeout* the per-call
    deadline in seconds. Raises `ValueError` for an unknown service in *targets*.

    Read-your-writes: the client keeps the newest `memplane-lsn` token its writes returned
    (`lsn`) and sends it with every later call, so a search served by a read replica sees
    this client's writes. Hand `lsn` to another client with `observe_lsn()` to extend that
    to it (e.g. a writer process and a reader process of one agent).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        api_key: str = "",
        *,
        timeout: float = 60.0,
        targets: Mapping[str, str] | None = None,
        retry_reads: bool = True,
        attempt_timeout: float | None = None,
        tls: bool | None = None,
        root_certificates: bytes | None = None,
        client_certificate: tuple[bytes, bytes] | None = None,
        via: str = "",
    ) -> None:
        """*retry_reads*: the channels retry idempotent calls — reads, and writes, which
        always carry a request_id — on UNAVAILABLE and DEADLINE_EXCEEDED within the
        call's deadline, throttled by a retry budget (`memplane.client.retry`); False
        sends every call once. *attempt_timeout*: seconds an attempt of an idempotent call
        may wait for its reply before it is retried (None: the whole deadline). TLS (`memplane.client.channels`): an "https://"
        target, or *tls* True, or a *root_certificates* PEM bundle (the CA that signed the
        server's certificate; None: the system's roots) turns it on; *client_certificate*
        is a (certificate chain, private key) PEM pair for a server asking for mutual TLS.
        *via* names the channel a person acts through (``"console"``): the server then
        records this client's writes with actor ``console:<key id>`` in memory history.
        Raises `ValueError` for an "http://" target with *tls* True."""
        unknown = set(targets or {}) - set(SERVICE_NAMES)
        if unknown:
            raise ValueError(f"unknown services in targets: {sorted(unknown)}; choose from {SERVICE_NAMES}")
        options = TlsOptions(tls, root_certificates, client_certificate)
        addresses = {name: (targets or {}).get(name) or target for name in SERVICE_NAMES}
        self._channels: dict[str, grpc.aio.Channel] = {}
        for address in [target, *addresses.values()]:
            if address not in self._channels:
                self._channels[address] = open_channel(
                    *parse_target(address, options), options, retry=retry_reads, attempt_timeout=attempt_timeout
                )
        self._channel = self._channels[target]
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        if via:
            self._metadata = (*self._metadata, (VIA_METADATA_KEY, via))
        self._timeout = timeout
        self.lsn = ""
        self.retrieval = retrieval_pb2_grpc.RetrievalServiceStub(self._channels[addresses["retrieval"]])
        self.writeback = writeback_pb2_grpc.WriteBackServiceStub(self._channels[addresses["writeback"]])
        self.compaction = compaction_pb2_grpc.CompactionServiceStub(self._channels[addresses["compaction"]])
        self.admin = admin_pb2_grpc.AdminServiceStub(self._channels[addresses["admin"]])

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, timeout: float = 60.0) -> AsyncMemplaneClient:
        """A client from MEMPLANE_TARGET and MEMPLANE_API_KEY, and MEMPLANE_RETRIEVAL_TARGET /
        _WRITEBACK_TARGET / _COMPACTION_TARGET when set (the keys of the Secret the
        operator writes for a MemoryWorkspace; mount it with `envFrom`), and TLS with
        the CA bundle at the path MEMPLANE_TLS_CA_FILE when set. *environ* defaults to
        `os.environ`. Raises `KeyError` naming a missing variable, `OSError` for an
        unreadable CA file."""
        env = os.environ if environ is None else environ
        missing = [name for name in ("MEMPLANE_TARGET", "MEMPLANE_API_KEY") if not env.get(name)]
        if missing:
            raise KeyError(f"set {' and '.join(missing)} (mount the MemoryWorkspace's Secret with envFrom)")
        targets = {
            n: env[f"MEMPLANE_{n.upper()}_TARGET"] for n in SERVICE_NAMES if env.get(f"MEMPLANE_{n.upper()}_TARGET")
        }
        ca_file = env.get("MEMPLANE_TLS_CA_FILE")
        return cls(
            env["MEMPLANE_TARGET"],
            env["MEMPLANE_API_KEY"],
            timeout=timeout,
            targets=targets,
            root_certificates=Path(ca_file).read_bytes() if ca_file else None,
        )

    async def __aenter__(self) -> AsyncMemplaneClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channels."""
        for channel in self._channels.values():
            await channel.close(None)

    def observe_lsn(self, lsn: str) -> None:
        """Remember read-your-writes token *lsn* (e.g. another client's `lsn` of the same
        workspace) if it is newer than the one kept; later reads see every write up to it.
        The token is opaque: a counter of the workspace's own writes, then the WAL position
        sealed (`memplane.server.api.read_tokens`). One that is not a token is ignored."""
        self.lsn = newest_token(self.lsn, lsn)

    async def _call(self, method: Callable[..., Awaitable[T]], request: Any) -> T:
        metadata = (*self._metadata, (LSN_METADATA_KEY, self.lsn)) if self.lsn else self._metadata
        try:
            call = method(request, metadata=metadata, timeout=self._timeout)
            reply: T = await call
            trailing = await call.trailing_metadata()  # type: ignore[attr-defined]
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error) from None
        for key, value in trailing or ():
            if key == LSN_METADATA_KEY and isinstance(value, str):
                self.observe_lsn(value)
        return reply

    # -- write-back ---------------------------------------------------------------
    async def add_memories(
        self, memories: Sequence[memory_pb2.MemoryInput], *, request_id: str = ""
    ) -> list[memory_pb2.Memory]:
        """Store memories as given; returns them with ids and versions. Every write of
        this client carries a *request_id* (a fresh one unless given: pass your own to
        retry a write yourself across processes), so the channel retries it safely."""
        return list((await self.add_memories_reply(memories, request_id=request_id)).memories)

    async def add_memories_reply(
        self, memories: Sequence[memory_pb2.MemoryInput], *, request_id: str = ""
    ) -> writeback_pb2.AddMemoriesResponse:
        """`add_memories`, answered with the whole reply: also `duplicate_indexes`, the
        inputs not stored because their content duplicates a memory of their scope."""
        return await self._call(
            self.writeback.AddMemories,
            writeback_pb2.AddMemoriesRequest(memories=memories, request_id=request_id or new_request_id()),
        )

    async def write_conversation(
        self,
        scope: memory_pb2.Scope,
        messages: Sequence[writeback_pb2.ConversationMessage],
        *,
        request_id: str = "",
        extract: bool = False,
        wait: bool = False,
        skip_episodic: bool = False,
    ) -> writeback_pb2.WriteConversationResponse:
        """Store a conversation's messages (transcript + one episodic memory each); with
        *extract*, queue an LLM extraction job over them (`reply.extraction_job`), and
        with *wait* reply once it is done (`reply.extracted_memories`); with
        *skip_episodic* too, no episodic memory is stored: only what extraction makes."""
        return await self._call(
            self.writeback.WriteConversation,
            writeback_pb2.WriteConversationRequest(
                scope=scope,
                messages=messages,
                request_id=request_id or new_request_id(),
                extract=extract,
                wait=wait,
                skip_episodic=skip_episodic,
            ),
        )

    async def get_extraction_job(self, job_id: str) -> writeback_pb2.ExtractionJob:
        """The state of an extraction job (NotFoundError when the workspace has none such)."""
        reply = await self._call(self.writeback.GetExtractionJob, writeback_pb2.GetExtractionJobRequest(id=job_id))
        return reply.job

    async def list_extraction_jobs(
        self, *, statuses: Sequence[int] = (), page_size: int = 0, page_token: str = ""
    ) -> writeback_pb2.ListExtractionJobsResponse:
        """A page of the workspace's extraction jobs, newest first; *statuses*
        (`writeback_pb2.EXTRACTION_JOB_STATUS_FAILED`, ...) keeps only those states;
        *page_size* 1-500 (0: 50). Raises `InvalidArgumentError` naming the field."""
        return await self._call(
            self.writeback.ListExtractionJobs,
            writeback_pb2.ListExtractionJobsRequest(
                statuses=statuses,  # type: ignore[arg-type]
                page_size=page_size,
                page_token=page_token,
            ),
        )

    async def update_memory(
        self,
        memory_id: str,
        memory: memory_pb2.MemoryInput,
        fields: Iterable[str],
        *,
        expected_version: int = 0,
        request_id: str = "",
    ) -> memory_pb2.Memory:
        """Change *fields* of a memory; VersionConflictError if expected_version is stale.
        A conversation turn's memory stays that turn's (its metadata keys kept unless named;
        InvalidArgumentError for another type or message_id: UpdateMemory in writeback.proto)."""
        reply = await self._call(
            self.writeback.UpdateMemory,
            writeback_pb2.UpdateMemoryRequest(
                id=memory_id,
                memory=memory,
                update_mask=field_mask_pb2.FieldMask(paths=list(fields)),
                expected_version=expected_version,
                request_id=request_id or new_request_id(),
            ),
        )
        return reply.memory

    async def delete_memory(self, memory_id: str, *, expected_version: int = 0, request_id: str = "") -> str:
        """Delete one memory; returns its id."""
        reply = await self._call(
            self.writeback.DeleteMemory,
            writeback_pb2.DeleteMemoryRequest(
                id=memory_id, expected_version=expected_version, request_id=request_id or new_request_id()
            ),
        )
        return reply.id

    async def delete_memories_by_scope(
        self, scope: memory_pb2.Scope, *, request_id: str = ""
    ) -> writeback_pb2.DeleteMemoriesByScopeResponse:
        """Erase every memory (and transcript message) of a scope."""
        return await self._call(
            self.writeback.DeleteMemoriesByScope,
            writeback_pb2.DeleteMemoriesByScopeRequest(scope=scope, request_id=request_id or new_request_id()),
        )

    async def list_memory_events(self, memory_id: str) -> list[memory_pb2.MemoryEvent]:
        """History of a memory, oldest first."""
        reply = await self._call(
            self.writeback.ListMemoryEvents, writeback_pb2.ListMemoryEventsRequest(memory_id=memory_id)
        )
        return list(reply.events)

    # -- retrieval ----------------------------------------------------------------
    async def search(
        self,
        queries: str | Sequence[str],
        *,
        top_k: int = 10,
        min_score: float = 0.0,
        min_relevance: float = 0.0,
        filter: filter_pb2.MemoryFilter | None = None,
        mode: int = retrieval_pb2.SEARCH_MODE_HYBRID,
        context_turns: int = 0,
        context_max_tokens: int = 0,
        ranking: retrieval_pb2.RankingOptions | None = None,
        **options: float | None,
    ) -> retrieval_pb2.SearchMemoriesResponse:
        """Hybrid search; *queries* may be one string or several (merged, de-duplicated).
        *min_relevance* (0..1, 0 keeps all) drops hits whose absolute relevance
        (`SearchHit.relevance`) is lower: an off-topic query then gets no hits; *min_score*
        cuts the rank score, which is relative to the query's candidates (the best is 1).
        A value outside 0..1 raises `InvalidArgumentError` naming the field.
        *options* set fields of the request's RankingOptions by name, over *ranking*
        (fusion, vector_weight, rrf_k, neighbour_window, neighbour_weight, speaker_weight,
        time_weight, phrase_weight, when_weight, prf_terms: proto/memplane/v1/retrieval.proto);
        one left None, or absent, takes the server's default (0 turns a term off). Raises
        `TypeError` naming an option RankingOptions does not have."""
        return await self._call(
            self.retrieval.SearchMemories,
            retrieval_pb2.SearchMemoriesRequest(
                queries=[queries] if isinstance(queries, str) else list(queries),
                top_k=top_k,
                min_score=min_score,
                min_relevance=min_relevance,
                filter=filter,
                mode=mode,  # type: ignore[arg-type]
                context_turns=context_turns,
                context_max_tokens=context_max_tokens,
                ranking=ranking_options(ranking, options),
            ),
        )

    async def get_memory(self, memory_id: str) -> memory_pb2.Memory:
        """One memory; NotFoundError if absent from the key's workspace."""
        reply = await self._call(self.retrieval.GetMemory, retrieval_pb2.GetMemoryRequest(id=memory_id))
        return reply.memory

    async def list_memories(
        self,
        *,
        filter: filter_pb2.MemoryFilter | None = None,
        page_size: int = 100,
        page_token: str = "",
        order: int = retrieval_pb2.MEMORY_ORDER_UNSPECIFIED,
    ) -> retrieval_pb2.ListMemoriesResponse:
        """One page of memories, newest first (*order* `MEMORY_ORDER_OLDEST_FIRST`: oldest
        first). A *page_token* is valid only with the order it was returned for; another
        raises `InvalidArgumentError` naming page_token, an unknown *order* naming order."""
        return await self._call(
            self.retrieval.ListMemories,
            retrieval_pb2.ListMemoriesRequest(filter=filter, page_size=page_size, page_token=page_token, order=order),  # type: ignore[arg-type]
        )

    async def get_daily_usage(self, days: int = 0) -> retrieval_pb2.GetDailyUsageResponse:
        """The workspace's searches and memories added on each of the last *days* UTC days
        (1-60; 0: 14), oldest first, today so far included. Searches reach it within
        `retrieval.search_count_flush_seconds` (default 5) of being answered by another
        retrieval process, at once from the one answering this call. Raises
        `InvalidArgumentError` naming `days` out of range."""
        return await self._call(self.retrieval.GetDailyUsage, retrieval_pb2.GetDailyUsageRequest(days=days))

    async def select_memory_files(
        self,
        query: str,
        *,
        filter: filter_pb2.MemoryFilter | None = None,
        max_files: int = 0,
        max_tokens: int = 0,
    ) -> retrieval_pb2.SelectMemoryFilesResponse:
        """The memory files (as the Markdown view renders them: path ``Memory/<file>.md``,
        name, description, content) most useful for *query* — AgentScope Agentic Memory's
        relevance retrieval: the server's LLM picks at most *max_files* (1-5; 0: 5) of the
        scope's 200 most recently updated files by their descriptions; without an LLM, or
        when it fails or times out, hybrid search picks them (reply `method`,
        `fallback_reason`). *max_tokens* (0: 10,000) bounds all contents together, each
        cut file flagged `truncated`. Raises `InvalidArgumentError` naming the field (an
        empty query, max_files or max_tokens out of range, a bad filter)."""
        return await self._call(
            self.retrieval.SelectMemoryFiles,
            retrieval_pb2.SelectMemoryFilesRequest(
                query=query, filter=filter, max_files=max_files, max_tokens=max_tokens
            ),
        )

    # -- compaction ---------------------------------------------------------------
    # Messages are `compaction_pb2.ContextMessage`s; `memplane.client.formats` converts
    # OpenAI chat messages and AgentScope `Msg` dicts to and from them. Keyword
    # arguments are the request's other fields (see proto/memplane/v1/compaction.proto).
    async def check_context(
        self, messages: Sequence[compaction_pb2.ContextMessage], **fields: Any
    ) -> compaction_pb2.ContextSplit:
        """Token counts and the compact/keep split (system_prompt, previous_summary,
        threshold_tokens, reserve_tokens, encoding)."""
        request = compaction_pb2.CheckContextRequest(messages=messages, **fields)
        return (await self._call(self.compaction.CheckContext, request)).split

    async def compact_messages(
        self, messages: Sequence[compaction_pb2.ContextMessage], **fields: Any
    ) -> compaction_pb2.CompactionResult:
        """Summarise *messages* (previous_summary, language, max_summary_tokens,
        summarizer, scope, encoding). Check `result.compacted` before dropping them."""
        request = compaction_pb2.CompactMessagesRequest(messages=messages, **fields)
        return (await self._call(self.compaction.CompactMessages, request)).result

    async def compact_tool_results(
        self, messages: Sequence[compaction_pb2.ContextMessage], **fields: Any
    ) -> compaction_pb2.CompactToolResultsResponse:
        """Cut long tool outputs (limits, scope); the whole outputs are stored."""
        request = compaction_pb2.CompactToolResultsRequest(messages=messages, **fields)
        return await self._call(self.compaction.CompactToolResults, request)

    async def read_tool_result(self, ref: str, **fields: Any) -> compaction_pb2.ReadToolResultResponse:
        """Read a stored tool output (start_line, start_column, line_count, max_bytes)."""
        request = compaction_pb2.ReadToolResultRequest(ref=ref, **fields)
        return await self._call(self.compaction.ReadToolResult, request)

    async def prepare_context(
        self, messages: Sequence[compaction_pb2.ContextMessage], **fields: Any
    ) -> compaction_pb2.PrepareContextResponse:
        """The pre-reasoning hook: cut tool outputs, check, compact when needed
        (system_prompt, previous_summary, max_input_tokens, compact_ratio, ...)."""
        request = compaction_pb2.PrepareContextRequest(messages=messages, **fields)
        return await self._call(self.compaction.PrepareContext, request)

    async def get_transcript(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> compaction_pb2.GetTranscriptResponse:
        """One page of a session's full transcript, oldest first."""
        request = compaction_pb2.GetTranscriptRequest(session_id=session_id, page_size=page_size, page_token=page_token)
        return await self._call(self.compaction.GetTranscript, request)

    async def summarize_session(
        self, scope: memory_pb2.Scope, messages: Sequence[compaction_pb2.ContextMessage] = (), **fields: Any
    ) -> compaction_pb2.SummarizeSessionResponse:
        """Turn a session span into memories (summary, language, summarizer, request_id:
        a fresh one unless given, so the channel's retry stores it once)."""
        fields["request_id"] = fields.get("request_id") or new_request_id()
        request = compaction_pb2.SummarizeSessionRequest(scope=scope, messages=messages, **fields)
        return await self._call(self.compaction.SummarizeSession, request)

    # -- health -------------------------------------------------------------------
    async def check_health(self, service: str = "", *, wait_for_ready: bool = False) -> str:
        """grpc.health.v1 status of *service* ("" = the server; or e.g.
        "memplane.v1.RetrievalService"): "SERVING", "NOT_SERVING", ... With
        *wait_for_ready*, a server not listening yet is waited for (up to the client's
        timeout) instead of failing at once. Raises `NotFoundError` for a service the
        server does not serve, `UnavailableError`, `DeadlineExceededError`."""
        try:
            return await health.check(self._channel, service, deadline=self._timeout, wait_for_ready=wait_for_ready)
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error) from None

    # -- admin --------------------------------------------------------------------
    async def create_workspace(
        self,
        name: str,
        *,
        quotas: admin_pb2.WorkspaceQuotas | None = None,
        retention: admin_pb2.RetentionPolicy | None = None,
        labels: Mapping[str, str] | None = None,
        token_encoding: str = "",
        placement: str = "",
    ) -> admin_pb2.Workspace:
        """Create a workspace (admin key); *token_encoding* is its CompactionService default,
        *placement* the database cluster to hold it ("": the server's rule picks one)."""
        reply = await self._call(
            self.admin.CreateWorkspace,
            admin_pb2.CreateWorkspaceRequest(
                name=name,
                quotas=quotas,
                retention=retention,
                labels=labels or {},
                token_encoding=token_encoding,
                placement=placement,
            ),
        )
        return reply.workspace

    async def update_workspace(self, workspace: admin_pb2.Workspace, fields: Iterable[str]) -> admin_pb2.Workspace:
        """Replace *fields* ("quotas", "retention", "labels", "token_encoding",
        "quotas.max_memories", ...) of the workspace named `workspace.name` (admin key)."""
        reply = await self._call(
            self.admin.UpdateWorkspace,
            admin_pb2.UpdateWorkspaceRequest(
                workspace=workspace, update_mask=field_mask_pb2.FieldMask(paths=list(fields))
            ),
        )
        return reply.workspace

    async def get_workspace(self, name: str) -> admin_pb2.Workspace:
        """One workspace (admin key)."""
        reply = await self._call(self.admin.GetWorkspace, admin_pb2.GetWorkspaceRequest(name=name))
        return reply.workspace

    async def list_workspaces(self, *, page_size: int = 100, page_token: str = "") -> admin_pb2.ListWorkspacesResponse:
        """A page of workspaces by name (admin key)."""
        return await self._call(
            self.admin.ListWorkspaces, admin_pb2.ListWorkspacesRequest(page_size=page_size, page_token=page_token)
        )

    async def delete_workspace(self, name: str) -> int:
        """Delete a workspace and all its rows; returns its memory count (admin key)."""
        reply = await self._call(self.admin.DeleteWorkspace, admin_pb2.DeleteWorkspaceRequest(name=name))
        return reply.deleted_memory_count

    async def create_api_key(
        self, workspace: str, display_name: str = "", *, api_key: str = ""
    ) -> admin_pb2.CreateApiKeyResponse:
        """A new key for a workspace; the secret is in the reply only (admin key). With
        *api_key* (see `memplane.client.generate_api_key`) that key is imported instead:
        idempotent, so a retry after a lost reply registers nothing twice."""
        return await self._call(
            self.admin.CreateApiKey,
            admin_pb2.CreateApiKeyRequest(workspace=workspace, display_name=display_name, api_key=api_key),
        )

    async def list_api_keys(
        self, workspace: str, *, page_size: int = 100, page_token: str = ""
    ) -> admin_pb2.ListApiKeysResponse:
        """A page of a workspace's keys by key id, revoked ones included (admin key)."""
        return await self._call(
            self.admin.ListApiKeys,
            admin_pb2.ListApiKeysRequest(workspace=workspace, page_size=page_size, page_token=page_token),
        )

    async def revoke_api_key(self, key_id: str) -> None:
        """Revoke a key (admin key)."""
        await self._call(self.admin.RevokeApiKey, admin_pb2.RevokeApiKeyRequest(key_id=key_id))

    async def get_workspace_usage(self, name: str) -> admin_pb2.GetWorkspaceUsageResponse:
        """Counts and sizes of a workspace (admin key)."""
        return await self._call(self.admin.GetWorkspaceUsage, admin_pb2.GetWorkspaceUsageRequest(name=name))
