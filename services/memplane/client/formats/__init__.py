"""Agent message formats to and from the compaction service's `ContextMessage`.

Two formats are converted, both ways:

* OpenAI Chat Completions messages (API reference, "Create chat completion",
  `messages`): `{"role": "system" | "developer" | "user" | "assistant" | "tool", ...}`
  dicts, as sent to `client.chat.completions.create(messages=...)`.
  `from_openai` / `to_openai`.
* AgentScope `Msg` dicts: AgentScope 2.x `Msg.model_dump()` (`created_at`, blocks
  `text` / `thinking` / `tool_call` / `tool_result` / `data` / `hint` of
  `agentscope.message`) and, on input, AgentScope 1.x `Msg.to_dict()` (`timestamp`,
  blocks `text` / `tool_use` / `tool_result` / `image` / `audio` / `video`).
  `from_agentscope` / `to_agentscope` (`version=2`, the default, or `version=1`).

Everything the model reads is carried losslessly: text, tool calls (id, name and the
input exactly as the model produced it) and tool outputs (call id, tool name, output
text). What the model never reads is not: OpenAI has no message ids or times, and
AgentScope's bookkeeping (block ids and times, tool-call and tool-result states,
`metadata`, `usage`, `finished_*`) is dropped and takes AgentScope's defaults on the
way back. Each function's docstring lists the exact normalisations; inputs already in
normal form round-trip exactly (`to_openai(*from_openai(m)) == m`,
`to_agentscope(from_agentscope(d)) == d`, `from_*(to_*(x)) == x`).

Content is text only: images, audio, files, video and AgentScope hint blocks have no
`ContextMessage` form and raise `ValueError`. Every `ValueError` names the offending
field as `messages[i].<field>` (OpenAI lists and `ContextMessage` lists) or
`msgs[i].<field>` (AgentScope lists), e.g. `messages[2].content[1].type`.
"""

from __future__ import annotations

from memplane.client.formats._common import TRUNCATION_METADATA_KEY, ContextMessage, assistant, user
from memplane.client.formats.agentscope_msgs import from_agentscope, to_agentscope
from memplane.client.formats.chat_completions import from_openai, to_openai

__all__ = [
    "TRUNCATION_METADATA_KEY",
    "ContextMessage",
    "assistant",
    "from_agentscope",
    "from_openai",
    "to_agentscope",
    "to_openai",
    "user",
]
