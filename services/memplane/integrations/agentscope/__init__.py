"""AgentScope 2.x long-term memory over memplane: `MemplaneMiddleware`, a drop-in for
AgentScope's `Mem0Middleware` and `ReMeMiddleware` (`pip install 'memplane[agentscope]'`).

    from agentscope.tool import Toolkit
    from memplane.client import AsyncMemplaneClient
    from memplane.integrations.agentscope import MemplaneMiddleware

    mw = MemplaneMiddleware(client=AsyncMemplaneClient.from_env(), user_id="alice", mode="both")
    agent = Agent(..., toolkit=Toolkit(tools=await mw.list_tools()), middlewares=[mw])

Without AgentScope installed, importing this package raises `ModuleNotFoundError` naming
the extra.
"""

try:
    from memplane.integrations.agentscope.middleware import (
        DEFAULT_MEMORY_SECTION_HEADER,
        DEFAULT_MEMORY_SECTION_INTRO,
        DEFAULT_TOOL_INSTRUCTIONS,
        MemplaneMiddleware,
    )
except ModuleNotFoundError as exc:  # the bare client: say which extra brings AgentScope
    if (exc.name or "").split(".")[0] != "agentscope":
        raise
    raise ModuleNotFoundError(
        "memplane.integrations.agentscope needs AgentScope 2.x: pip install 'memplane[agentscope]'", name=exc.name
    ) from exc

__all__ = [
    "DEFAULT_MEMORY_SECTION_HEADER",
    "DEFAULT_MEMORY_SECTION_INTRO",
    "DEFAULT_TOOL_INSTRUCTIONS",
    "MemplaneMiddleware",
]
