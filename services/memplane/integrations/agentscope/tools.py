"""The agent_control tools of `MemplaneMiddleware`: ``search_memory(keywords, limit)`` and
``add_memory(thinking, content)``, with Mem0Middleware's names, descriptions and input
schemas (agentscope/middleware/_longterm_memory/_mem0/_tools.py), so a model prompted for
those tools calls these unchanged. Both allow themselves (no permission prompt), as
Mem0Middleware's do; a failure comes back as a ``ToolChunk`` with state ERROR and the
error's text, for the model to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentscope.message import TextBlock, ToolResultState
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.state import AgentState
from agentscope.tool import ToolBase, ToolChunk

if TYPE_CHECKING:
    from memplane.integrations.agentscope.middleware import MemplaneMiddleware

MAX_TOP_K = 100  # the server's limits.max_top_k
MAX_QUERIES = 8  # the server's limits.max_queries


class _MemoryTool(ToolBase):
    """A tool of the middleware; auto-allowed."""

    is_external_tool = False
    is_mcp = False
    mcp_name = None

    def __init__(self, middleware: MemplaneMiddleware) -> None:
        super().__init__()
        self._mw = middleware

    async def check_permissions(self, *args: Any, **kwargs: Any) -> PermissionDecision:
        """Always ALLOW: memory tools are the agent's own capability."""
        del args, kwargs
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="auto-allowed: memplane memory tool")


class SearchMemoryTool(_MemoryTool):
    """``search_memory``: every keyword a query of ONE SearchMemories call, which merges
    and de-duplicates the hits (a memory found by several keeps its best score). At most
    ``limit`` hits per keyword, as Mem0Middleware (``limit x len(keywords)``, at most 100);
    repeated keywords count once, and only the first 8 (the server's limit) are asked."""

    name = "search_memory"
    description = (
        "Retrieve memories based on short, targeted search keywords. "
        "Each keyword is issued as an independent query; results are merged "
        "and deduplicated."
    )
    is_concurrency_safe = True
    is_read_only = True
    is_state_injected = False

    def __init__(self, middleware: MemplaneMiddleware) -> None:
        super().__init__(middleware)
        self.input_schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "keywords": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": (
                        "Short, targeted search phrases such as a person's name, "
                        "a specific date, a location, or a phrase describing what "
                        "to retrieve from memory."
                    ),
                },
                "limit": {
                    "type": "integer",
                    "description": "Maximum number of memories to retrieve per keyword.",
                    "default": middleware.top_k,
                },
            },
            "required": ["keywords"],
        }

    async def call(self, keywords: list[str], limit: int | None = None, **_: Any) -> ToolChunk:
        """Bulleted memory texts ("- ..."), "(no relevant memories found)", or an ERROR
        chunk naming what failed."""
        queries = list(dict.fromkeys(k.strip() for k in keywords if k.strip()))[:MAX_QUERIES]
        if not queries:
            return _text("(no keywords supplied — nothing to search)")
        per_keyword = self._mw.top_k if limit is None else limit
        if per_keyword < 1:
            return _error(f"limit: must be at least 1, got {per_keyword}")
        try:
            memories = await self._mw.search(queries, min(per_keyword * len(queries), MAX_TOP_K))
        except Exception as exc:  # the model reads the error and decides (Mem0Middleware's rule)
            return _error(f"Error retrieving memory: {exc}")
        if not memories:
            return _text("(no relevant memories found)")
        return _text("\n".join(f"- {m}" for m in memories))


class AddMemoryTool(_MemoryTool):
    """``add_memory``: each ``content`` item stored as its own `user` memory (AddMemories,
    no LLM), in the middleware's user/agent scope and the calling agent's session (read
    from the injected agent state); ``thinking`` stays in the tool result only."""

    name = "add_memory"
    description = (
        "Record important, durable information that may be useful later. "
        "Only the provided content is persisted; thinking is retained in the "
        "tool result for auditability."
    )
    input_schema: dict[str, Any] = {  # noqa: RUF012 - ToolBase declares it a class attribute
        "type": "object",
        "properties": {
            "thinking": {
                "type": "string",
                "description": "Reasoning about why this information is worth remembering. This is not persisted.",
            },
            "content": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Specific facts to remember. Each item should be a complete, standalone sentence.",
            },
        },
        "required": ["thinking", "content"],
    }
    is_concurrency_safe = False
    is_read_only = False
    is_state_injected = True  # the session of the calling agent (only read)

    async def call(
        self, thinking: str, content: list[str], _agent_state: AgentState | None = None, **_: Any
    ) -> ToolChunk:
        """A chunk "Successfully recorded N memories (rationale: ...) → ids", or an ERROR chunk."""
        facts = [c.strip() for c in content if c.strip()]
        if not facts:
            return _error("`content` is empty — nothing to record.")
        session_id = _agent_state.session_id if _agent_state is not None else ""
        try:
            stored = await self._mw.add(facts, session_id)
        except Exception as exc:
            return _error(f"Error recording memory: {exc}")
        rationale = f" (rationale: {thinking})" if thinking else ""
        ids = ", ".join(m.id for m in stored)
        return _text(f"Successfully recorded {len(stored)} memories{rationale} → {ids}")


def _text(message: str) -> ToolChunk:
    return ToolChunk(content=[TextBlock(type="text", text=message)])


def _error(message: str) -> ToolChunk:
    return ToolChunk(content=[TextBlock(type="text", text=message)], state=ToolResultState.ERROR)
