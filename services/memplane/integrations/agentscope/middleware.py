"""`MemplaneMiddleware`: AgentScope 2.x long-term memory whose store is a memplane server.

The modes, hooks and parameters are those of AgentScope 2.0.11's `Mem0Middleware` and
`ReMeMiddleware` (agentscope/middleware/_longterm_memory/):

* ``static_control`` — when ``reply`` starts, a SearchMemories call over the user's new
  message(s) runs in the background (ReMe's way, not Mem0's blocking search); before a
  reasoning step, if it has finished, the memories are appended to ``agent.state.context``
  as ``AssistantMsg(name="memory", content=[HintBlock])`` — Mem0's and ReMe's message,
  one bullet per text (a turn and its identical extracted memory are one line). The
  first reasoning step waits for the search, as Mem0Middleware's reply waits for its
  search, but at most ``retrieval_wait`` seconds (`DEFAULT_RETRIEVAL_WAIT`, 10 s; 0 is
  ReMe's best effort: inject only what is already back).
* ``agent_control`` — the tools ``search_memory(keywords, limit)`` and
  ``add_memory(thinking, content)`` (Mem0's names and schemas, `tools.py`), and
  ``tool_instructions`` appended to the system prompt.
* ``both`` — both.

In every mode (as ReMe; Mem0 skips it in agent_control: pass ``write_back=False``) the
turn — the user's message(s) and the final assistant text — is written after the reply
with WriteConversation into the scope (``user_id``, ``agent_id``, the agent's session),
inline (``await_write=True``) or in the background; a failed write is logged at ERROR and
never raised into the reply. The transcript keeps the turn; the memories are what the
server extracts from it (``extract``: its LLM's facts, or without one the user's
statements and instructions), never the raw turn — an "ok" or an assistant's "Saved." is
nobody's memory (what Mem0Middleware stores through mem0's add(infer=True)).
``store_turns=True`` keeps each message as an `episodic` memory too (``extract=False``
stores them so, since nothing else would be stored). ``session_id`` is read from ``agent.state.session_id`` on
every hook, so one middleware serves many agents and sessions.

With ``compact_context=True`` AgentScope's context compression (the ``on_compress_context``
hook, run before every reasoning step) is delegated to CompactionService.PrepareContext
(`context.py`); by default AgentScope compresses by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentscope.event import ExternalExecutionResultEvent, ReplyFinishedReason, UserConfirmResultEvent
from agentscope.message import AssistantMsg, HintBlock, Msg
from agentscope.middleware import MiddlewareBase
from agentscope.tool import ToolBase

from memplane.client.aio import AsyncMemplaneClient
from memplane.errors import MemplaneError
from memplane.integrations.agentscope import context, tools
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2

if TYPE_CHECKING:
    from agentscope.agent import Agent

_log = logging.getLogger("memplane.integrations.agentscope")

Mode = Literal["static_control", "agent_control", "both"]
MODES: tuple[Mode, ...] = ("static_control", "agent_control", "both")
MEMORY_MSG_NAME = "memory"  # the name Mem0Middleware and ReMeMiddleware give the injected message
MAX_QUERY_BYTES = 4096  # the server's default limits.max_query_bytes; a longer query is cut
DEFAULT_THRESHOLD: float | None = None
"""The least relevance (SearchHit.relevance) of an injected memory by default: none, every
hit is injected (Mem0Middleware's default too). With the default local model, short facts
asked about in other words score as low as off-topic text ("where does alice live?" against
"I moved to Lisbon in March": 0.000), so a cut by default would drop them silently."""
LOCOMO_THRESHOLD = 0.3
"""The threshold picked on LoCoMo, for memories that are conversation turns: 56 % of off-topic
questions inject nothing while R@10 of categories 1-4 stays within 1 point (.762 against
.770; bench/relevance_curve.py, docs/benchmarks/relevance.md)."""
MAX_TOP_K = 100  # the server's limits.max_top_k
DEFAULT_RETRIEVAL_WAIT = 10.0
"""Seconds the first reasoning step of a reply waits for its search by default: far above
a SearchMemories call (milliseconds), so the reply sees the memories as Mem0Middleware's
does, yet bounded, so a slow server delays a reply by at most this much."""

# Mem0Middleware's defaults, word for word, so prompts do not change on migration.
DEFAULT_MEMORY_SECTION_HEADER = "## Relevant memories from past conversations"
DEFAULT_MEMORY_SECTION_INTRO = (
    "The following memories about the user may be relevant. Use them only if they are pertinent to the current request."
)
DEFAULT_TOOL_INSTRUCTIONS = (
    "## Long-term memory\n\n"
    "You have `search_memory` and `add_memory` tools available. Use "
    "them whenever the conversation depends on (search) or contributes "
    "(add) a durable fact about the user — see each tool's own "
    "description for the exact input shape and usage guidance."
)


@dataclass
class _Retrieval:
    """A session's background search of this reply, and whether a step waited for it."""

    task: asyncio.Task[list[str]]
    waited: bool = False


class MemplaneMiddleware(MiddlewareBase):
    """Long-term memory for AgentScope agents, kept by memplane (see the module docstring).

    Pass the tools to the agent's toolkit as with Mem0Middleware:
    ``Agent(..., toolkit=Toolkit(tools=await mw.list_tools()), middlewares=[mw])``.
    Call `close()` at shutdown: it waits for background writes and closes a client the
    middleware made itself.
    """

    def __init__(
        self,
        *,
        client: AsyncMemplaneClient | None = None,
        user_id: str | None = None,
        mode: Mode = "both",
        agent_id: str | None = None,
        top_k: int = 5,
        threshold: float | None = DEFAULT_THRESHOLD,
        scope_search_by_agent: bool = True,
        await_write: bool = True,
        write_back: bool = True,
        extract: bool = True,
        store_turns: bool = False,
        retrieval_wait: float = DEFAULT_RETRIEVAL_WAIT,
        compact_context: bool = False,
        memory_section_header: str = DEFAULT_MEMORY_SECTION_HEADER,
        memory_section_intro: str = DEFAULT_MEMORY_SECTION_INTRO,
        tool_instructions: str = DEFAULT_TOOL_INSTRUCTIONS,
    ) -> None:
        """*client*: a workspace-key client; None makes one from MEMPLANE_TARGET and
        MEMPLANE_API_KEY on first use (`AsyncMemplaneClient.from_env`, on the running loop).
        *user_id* / *agent_id*: the scope written and searched (Mem0Middleware's);
        *user_id* None searches the whole workspace (ReMeMiddleware's), an empty string is
        refused as Mem0Middleware refuses it. *top_k*: memories per static search, and the
        tool's default ``limit`` (1 to 100). *threshold*: drop hits whose relevance (absolute and
        calibrated, 0 to 1) is below it (SearchMemories ``min_relevance``; default
        `DEFAULT_THRESHOLD`, None: keeps all, as 0 does; `LOCOMO_THRESHOLD` is LoCoMo's pick). *scope_search_by_agent*:
        searches filter by *agent_id* too (when one is given). *await_write*: write the
        turn inline, or in a background task. *write_back*: write each turn at all.
        *extract*: ask the server to extract memories from the turn (WriteConversation
        ``extract``: its LLM's facts, or without one the user's first-person statements and
        instructions). *store_turns*: keep each message of the turn as an `episodic`
        memory too (default off: the memories are only what extraction makes, never an
        acknowledgement or the assistant's filler; the transcript keeps every message
        either way); with *extract* off the turns are stored so whatever this says.
        *retrieval_wait*: seconds the first reasoning step of a reply waits at most
        for the background search (default 10; 0: inject only if already done; a later
        step injects what comes back after). *compact_context*:
        delegate AgentScope's context compression to PrepareContext. The strings are
        Mem0Middleware's. Raises `ValueError` naming a bad argument."""
        if user_id is not None and not user_id.strip():
            raise ValueError("user_id: must be non-empty (or None to search the whole workspace)")
        if mode not in MODES:
            raise ValueError(f"mode: unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if not 1 <= top_k <= 100:
            raise ValueError(f"top_k: must be 1 to 100, got {top_k}")
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold: must be 0 to 1, got {threshold}")
        if retrieval_wait < 0:
            raise ValueError(f"retrieval_wait: must be >= 0 seconds, got {retrieval_wait}")
        self._client = client
        self._owns_client = client is None
        self.user_id = user_id or ""
        self.agent_id = agent_id or ""
        self.mode: Mode = mode
        self.top_k = top_k
        self.threshold = threshold
        self.scope_search_by_agent = scope_search_by_agent
        self.await_write = await_write
        self.write_back = write_back
        self.extract = extract
        self.store_turns = store_turns
        self.retrieval_wait = retrieval_wait
        self.compact_context = compact_context
        self.memory_section_header = memory_section_header
        self.memory_section_intro = memory_section_intro
        self.tool_instructions = tool_instructions
        # Keyed by session id, so one middleware shared by agents keeps their searches apart.
        self._retrievals: dict[str, _Retrieval] = {}
        self._writes: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> AsyncMemplaneClient:
        """The memplane client (made from the environment on first use when none was given)."""
        if self._client is None:
            self._client = AsyncMemplaneClient.from_env()
        return self._client

    async def close(self) -> None:
        """Wait for the background writes still running, then close the client if the
        middleware made it."""
        await self.flush()
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def flush(self) -> None:
        """Wait for the background writes (``await_write=False``) started so far."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    # -- hooks ------------------------------------------------------------------------
    async def on_reply(
        self, agent: Agent, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Start the background search (static_control, both), run the reply, then write
        the turn back (`write_back`): the user messages with text and the final assistant
        text. Nothing is written for a resumption event (no new user message), a reply
        without text, or an interrupted one (its text is AgentScope's canned notice)."""
        session_id = _session_id_of(agent)
        user_msgs = _user_messages(input_kwargs.get("inputs"))
        query = "\n".join(text for _, text in user_msgs)
        stale = self._retrievals.pop(session_id, None)
        if stale is not None:
            stale.task.cancel()
        if self.mode != "agent_control" and query:
            self._retrievals[session_id] = _Retrieval(asyncio.create_task(self._recall(query, session_id)))
        final: Msg | None = None
        try:
            async for item in next_handler(**input_kwargs):
                if isinstance(item, Msg) and item.role == "assistant":
                    final = item
                yield item
        finally:
            retrieval = self._retrievals.pop(session_id, None)
            if retrieval is not None and not retrieval.task.done():
                retrieval.task.cancel()
            if retrieval is not None:
                await asyncio.gather(retrieval.task, return_exceptions=True)
            answer = final.get_text_content() if final is not None else None
            interrupted = final is not None and final.finished_reason == ReplyFinishedReason.INTERRUPTED
            if self.write_back and user_msgs and final is not None and answer and not interrupted:
                turn = [
                    writeback_pb2.ConversationMessage(
                        id=m.id, role=memory_pb2.MESSAGE_ROLE_USER, name=m.name, content=t
                    )
                    for m, t in user_msgs
                ]
                turn.append(
                    writeback_pb2.ConversationMessage(
                        id=final.id, role=memory_pb2.MESSAGE_ROLE_ASSISTANT, name=final.name, content=answer
                    )
                )
                await self._dispatch_write(session_id, turn)

    async def on_reasoning(
        self, agent: Agent, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Before a reasoning step: append the memories found by this reply's search, once
        it has finished (the first step waits up to `retrieval_wait` seconds for it)."""
        session_id = _session_id_of(agent)
        retrieval = self._retrievals.get(session_id)
        if retrieval is not None:
            if not retrieval.task.done() and not retrieval.waited and self.retrieval_wait > 0:
                await asyncio.wait({retrieval.task}, timeout=self.retrieval_wait)
            retrieval.waited = True
            if retrieval.task.done():
                del self._retrievals[session_id]
                memories = [] if retrieval.task.cancelled() else retrieval.task.result()
                if memories:
                    agent.state.context.append(self.memory_message(memories))
        async for event in next_handler(**input_kwargs):
            yield event

    async def on_system_prompt(self, agent: Agent, current_prompt: str) -> str:
        """The prompt with `tool_instructions` appended (agent_control, both)."""
        if self.mode == "static_control":
            return current_prompt
        return f"{current_prompt}\n\n{self.tool_instructions}"

    async def on_compress_context(
        self, agent: Agent, input_kwargs: dict[str, Any], next_handler: Callable[..., Awaitable[None]]
    ) -> None:
        """With `compact_context`, PrepareContext compacts the agent's context (see
        `context.compact`); otherwise, when the context holds what PrepareContext cannot
        read (images), or when the call fails (logged as a warning), AgentScope's own
        compression runs."""
        if self.compact_context:
            session_id = _session_id_of(agent)
            scope = memory_pb2.Scope(user_id=self.user_id, agent_id=self.agent_id, session_id=session_id)
            try:
                if await context.compact(self.client, agent, input_kwargs.get("context_config"), scope):
                    return
            except MemplaneError as exc:  # the server's failure leaves the job to AgentScope
                _log.warning(
                    "memplane context compaction failed, AgentScope's runs: session_id=%s: %s", session_id, exc
                )
        await next_handler(**input_kwargs)

    async def list_tools(self) -> list[ToolBase]:
        """``search_memory`` and ``add_memory`` (agent_control, both); none in static_control."""
        if self.mode == "static_control":
            return []
        return [tools.SearchMemoryTool(self), tools.AddMemoryTool(self)]

    # -- calls ------------------------------------------------------------------------
    async def search(self, queries: Sequence[str], top_k: int) -> list[str]:
        """At most *top_k* memory texts for *queries*, best first, each text once: one
        SearchMemories call (several queries merged and de-duplicated by the server) in
        the user's scope (and the agent's, with `scope_search_by_agent`), asking twice
        *top_k* so that texts said twice (a turn and its identical extracted memory: equal
        after case folding and collapsing whitespace) leave room for others. Raises the
        `memplane.errors` of the call."""
        wanted, top_k = top_k, min(MAX_TOP_K, 2 * top_k)
        flt = filter_pb2.MemoryFilter(
            user_id=self.user_id, agent_id=self.agent_id if self.scope_search_by_agent else ""
        )
        clipped = [_clip(q) for q in queries]
        reply = await self.client.search(clipped, top_k=top_k, min_relevance=self.threshold or 0.0, filter=flt)
        return _unique([hit.memory.content for hit in reply.hits])[:wanted]

    async def _recall(self, query: str, session_id: str) -> list[str]:
        """The static search of a reply; a failure is logged (warning) and finds nothing."""
        try:
            return await self.search([query], self.top_k)
        except Exception as exc:  # a failed search must not break the reply (Mem0Middleware's rule)
            _log.warning("memplane search failed: session_id=%s: %s", session_id, exc)
            return []

    async def add(self, contents: Sequence[str], session_id: str) -> list[memory_pb2.Memory]:
        """Store each text as its own `user` memory in the scope (AddMemories, no LLM)."""
        scope = memory_pb2.Scope(user_id=self.user_id, agent_id=self.agent_id, session_id=session_id)
        provenance = memory_pb2.Provenance(session_id=session_id) if session_id else None
        inputs = [
            memory_pb2.MemoryInput(scope=scope, type=memory_pb2.MEMORY_TYPE_USER, content=c, provenance=provenance)
            for c in contents
        ]
        return await self.client.add_memories(inputs)

    def memory_message(self, memories: Sequence[str]) -> Msg:
        """The injected message: ``AssistantMsg(name="memory", content=[HintBlock])`` with
        the header, the intro and one "- " bullet per memory (Mem0Middleware's text)."""
        bullets = "\n".join(f"- {m}" for m in memories)
        hint = f"{self.memory_section_header}\n{self.memory_section_intro}\n{bullets}"
        return AssistantMsg(name=MEMORY_MSG_NAME, content=[HintBlock(hint=hint)])

    async def _dispatch_write(self, session_id: str, turn: list[writeback_pb2.ConversationMessage]) -> None:
        if self.await_write:
            await self._write(session_id, turn)
            return
        task = asyncio.create_task(self._write(session_id, turn))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, session_id: str, turn: list[writeback_pb2.ConversationMessage]) -> None:
        """WriteConversation of one turn (with `extract`, the turns kept in the transcript
        only unless `store_turns`: ``skip_episodic``); any failure is logged (ids and
        counts, never the text), never raised."""
        scope = memory_pb2.Scope(user_id=self.user_id, agent_id=self.agent_id, session_id=session_id)
        skip = self.extract and not self.store_turns
        try:
            reply = await self.client.write_conversation(scope, turn, extract=self.extract, skip_episodic=skip)
        except Exception as exc:  # a failed write must not break the reply (Mem0Middleware's rule)
            _log.error("memplane write-back failed: session_id=%s messages=%d: %s", session_id, len(turn), exc)
            return
        stored = len(reply.memories) + len(reply.extracted_memories)
        _log.info("memplane write-back: session_id=%s memories=%d", session_id, stored)


def _session_id_of(agent: Agent) -> str:
    """The agent's session, read at every hook (ReMeMiddleware's `_session_id_of`)."""
    return str(getattr(getattr(agent, "state", None), "session_id", "") or "")


def _user_messages(inputs: object) -> list[tuple[Msg, str]]:
    """The user messages of a reply's inputs that have text, with their text; none for
    the resumption events (Mem0Middleware's `_extract_query_text`, message by message)."""
    if inputs is None or isinstance(inputs, ExternalExecutionResultEvent | UserConfirmResultEvent):
        return []
    msgs = inputs if isinstance(inputs, list) else [inputs]
    out: list[tuple[Msg, str]] = []
    for m in msgs:
        if isinstance(m, Msg) and m.role == "user" and (text := m.get_text_content()):
            out.append((m, text))
    return out


def _unique(texts: Sequence[str]) -> list[str]:
    """*texts* in order, each kept once: the first of those equal after case folding and
    collapsing whitespace."""
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        key = " ".join(text.casefold().split())
        if key not in seen:
            seen.add(key)
            out.append(text)
    return out


def _clip(query: str) -> str:
    """*query* cut to MAX_QUERY_BYTES of UTF-8 (at a character boundary)."""
    data = query.encode()
    return query if len(data) <= MAX_QUERY_BYTES else data[:MAX_QUERY_BYTES].decode(errors="ignore")
