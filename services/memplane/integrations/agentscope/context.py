"""AgentScope's context compression (``Agent.compress_context``, run before every
reasoning step) done by CompactionService.PrepareContext.

The agent's ``state.context`` is sent (as `memplane.client.formats.from_agentscope`
reads it: hint blocks as their text, thinking dropped, messages without content — the
usage carriers AgentScope appends — left out) with the system prompt, the running
``state.summary`` and the model's window: ``max_input_tokens`` = ``model.context_size``,
``compact_ratio`` = ``ContextConfig.trigger_ratio``, ``reserve_tokens`` =
``reserve_ratio x context_size`` (kept below the server's threshold, x 0.95). When the
server compacted, ``state.summary`` becomes its summary and ``state.context`` the messages
from the split's first kept one on (the original ``Msg`` objects); tool outputs the server
cut are cut in place, the stored output's reference in the block's metadata
(`TRUNCATION_METADATA_KEY`, proto3 JSON). The compacted messages are recorded in the
session's transcript (the request carries the scope), so nothing said is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentscope.agent import ContextConfig
from agentscope.message import Msg, TextBlock
from google.protobuf import json_format

from memplane.client.aio import AsyncMemplaneClient
from memplane.client.formats import TRUNCATION_METADATA_KEY, ContextMessage, from_agentscope
from memplane.v1 import compaction_pb2, memory_pb2

if TYPE_CHECKING:
    from agentscope.agent import Agent

_log = logging.getLogger("memplane.integrations.agentscope")
SAFETY_FACTOR = 0.95  # the server's threshold = max_input_tokens x compact_ratio x 0.95


async def compact(
    client: AsyncMemplaneClient, agent: Agent, context_config: ContextConfig | None, scope: memory_pb2.Scope
) -> bool:
    """Compact *agent*'s context with PrepareContext (see the module docstring). Returns
    False, changing nothing, when the context holds what PrepareContext cannot read
    (images, audio: AgentScope's own compression should run instead). Raises the
    `memplane.errors` of the call (AgentScope's compress_context raises its own errors too)."""
    cfg = context_config or agent.context_config
    msgs = list(agent.state.context)
    items: list[tuple[int, ContextMessage]] = []
    for i, msg in enumerate(msgs):
        if not msg.content:
            continue
        dump = _readable(msg.model_dump(mode="json"))
        try:
            converted = from_agentscope([dump]) if dump is not None else None
        except ValueError as exc:
            _log.info("context compaction left to AgentScope: message %d: %s", i, exc)
            return False
        if converted is None:
            _log.info("context compaction left to AgentScope: message %d holds media", i)
            return False
        items.append((i, converted[0]))
    if not items:
        return False
    window = agent.model.context_size
    threshold = int(window * cfg.trigger_ratio * SAFETY_FACTOR)
    reply = await client.prepare_context(
        [message for _, message in items],
        system_prompt=await agent._get_system_prompt(),
        previous_summary=_summary_text(agent.state.summary),
        max_input_tokens=window,
        compact_ratio=cfg.trigger_ratio,
        reserve_tokens=max(1, min(int(window * cfg.reserve_ratio), threshold - 1)),
        scope=scope,
    )
    kept = msgs
    if reply.HasField("compaction") and reply.compaction.compacted:
        keep_from = reply.split.keep_from_index
        start = items[keep_from][0] if keep_from < len(items) else len(msgs)
        kept = msgs[start:]
        agent.state.summary = reply.summary
        agent.state.context = kept
        _log.info(
            "context compacted by memplane: session_id=%s messages=%d kept=%d",
            scope.session_id,
            reply.compaction.compacted_message_count,
            len(kept),
        )
    if reply.truncated_tool_results:
        _apply_cuts(kept, reply.messages)
    return True


def _readable(dump: dict[str, Any]) -> dict[str, Any] | None:
    """*dump* with hint blocks as text blocks; None when it holds data (media) blocks."""
    blocks: list[dict[str, Any]] = []
    for block in dump.get("content") or []:
        kind = block.get("type")
        if kind == "data":
            return None
        if kind == "hint":
            hint = block.get("hint")
            if isinstance(hint, list):
                if any(part.get("type") != "text" for part in hint):
                    return None
                hint = "\n".join(str(part.get("text", "")) for part in hint)
            blocks.append({"type": "text", "text": str(hint)})
        else:
            blocks.append(block)
    return {**dump, "content": blocks}


def _summary_text(summary: str | Sequence[Any]) -> str:
    """AgentScope's summary (a string, or text and data blocks) as text."""
    if isinstance(summary, str):
        return summary
    return "\n".join(block.text for block in summary if isinstance(block, TextBlock))


def _apply_cuts(msgs: Sequence[Msg], cut: Sequence[compaction_pb2.ContextMessage]) -> None:
    """Cut in place the tool outputs of *msgs* that the server cut in *cut* (by call id)."""
    results = {
        block.tool_result.tool_use_id: block.tool_result
        for message in cut
        for block in message.content
        if block.HasField("tool_result") and block.tool_result.HasField("truncation")
    }
    for msg in msgs:
        for block in msg.content:
            if block.type == "tool_result" and block.id in results:
                result = results[block.id]
                block.output = [TextBlock(text=result.output)]
                block.metadata[TRUNCATION_METADATA_KEY] = json_format.MessageToDict(
                    result.truncation, preserving_proto_field_name=True
                )
