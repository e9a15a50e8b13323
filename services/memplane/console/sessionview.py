"""The session view's backend: a session's transcript (what was compacted marked), and
"what the agent will see": PrepareContext over the transcript at a chosen context window,
without a scope, so the preview records nothing (no compaction in the transcript, no
memories).

    GET  api/session/transcript?session_id=&page_token= -> {messages, next_page_token}
    POST api/session/preview?session_id= {max_input_tokens, system_prompt}
The session id is a query parameter, not a path segment: an id may hold "/" or be "." or
"..", which a URL path would split or a browser collapse.
         -> {messages, summary, summary_method, split, compacted, failure, truncated_tool_results,
             previewed_message_count}
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memplane.client import AsyncMemplaneClient
from memplane.console import inputs
from memplane.console.errors import BadRequestError
from memplane.console.sessions import Session
from memplane.v1 import compaction_pb2, memory_pb2

SERVER_ID_PREFIXES = ("#", "~")  # transcript ids the server assigned; PrepareContext refuses them from a client
TRANSCRIPT_PAGE_SIZE = 200
PREVIEW_MAX_MESSAGES = 1_000  # the newest messages of a long session are previewed

JsonObject = dict[str, Any]


def block(b: compaction_pb2.ContentBlock) -> JsonObject:
    """One content block: {"kind": "text", "text"} | {"kind": "tool_use", "name", "input_json"}
    | {"kind": "tool_result", "name", "output", "truncated"}."""
    which = b.WhichOneof("block")
    if which == "tool_use":
        return {"kind": "tool_use", "name": b.tool_use.name, "input_json": b.tool_use.input_json}
    if which == "tool_result":
        r = b.tool_result
        return {"kind": "tool_result", "name": r.name, "output": r.output, "truncated": r.HasField("truncation")}
    return {"kind": "text", "text": b.text.text}


def message(m: compaction_pb2.ContextMessage) -> JsonObject:
    """A context message: id, role ("user", ...), name, blocks, create_time."""
    role: str = memory_pb2.MessageRole.Name(m.role)
    return {
        "id": m.id,
        "role": role.removeprefix("MESSAGE_ROLE_").lower(),
        "name": m.name,
        "blocks": [block(b) for b in m.content],
        "create_time": m.create_time.ToJsonString() if m.HasField("create_time") else "",
    }


def _session_id(request: Request) -> str:
    session_id = request.query_params.get("session_id", "")
    if not session_id or len(session_id) > 256:
        raise BadRequestError("session_id: 1 to 256 characters")
    return session_id


async def transcript(request: Request, session: Session) -> Response:
    """One page (200 messages) of the session's transcript, oldest first, each with its
    sequence number and whether compaction covered it."""
    reply = await session.client.get_transcript(
        _session_id(request),
        page_size=TRANSCRIPT_PAGE_SIZE,
        page_token=inputs.text(request.query_params, "page_token", max_chars=4_096),
    )
    return JSONResponse(
        {
            "messages": [{"seq": t.seq, "compacted": t.compacted, **message(t.message)} for t in reply.messages],
            "next_page_token": reply.next_page_token,
        }
    )


def _as_sent(m: compaction_pb2.ContextMessage) -> compaction_pb2.ContextMessage:
    """*m* as a client may send it: a server-assigned id ("#<seq>" for a message written
    without an id, "~<hash>" for one compacted without) dropped; a client's id kept."""
    if not m.id.startswith(SERVER_ID_PREFIXES):
        return m
    sent = compaction_pb2.ContextMessage()
    sent.CopyFrom(m)
    sent.ClearField("id")
    return sent


async def _recent_messages(client: AsyncMemplaneClient, session_id: str) -> list[compaction_pb2.ContextMessage]:
    """The session's transcript, oldest first, at most the newest PREVIEW_MAX_MESSAGES,
    each as a client may send it to PrepareContext (`_as_sent`)."""
    out: list[compaction_pb2.ContextMessage] = []
    token = ""
    while True:
        page = await client.get_transcript(session_id, page_size=TRANSCRIPT_PAGE_SIZE, page_token=token)
        out += [_as_sent(t.message) for t in page.messages]
        out = out[-PREVIEW_MAX_MESSAGES:]
        token = page.next_page_token
        if not token:
            return out


async def preview(request: Request, session: Session) -> Response:
    """PrepareContext over the transcript at *max_input_tokens* (1,000 to 2,000,000;
    0: the server's 128,000), as the agent's pre-reasoning hook would run it — minus the
    scope, so nothing is recorded."""
    session_id = _session_id(request)
    body = await inputs.json_body(request)
    window = inputs.integer(body, "max_input_tokens", default=0, low=0, high=2_000_000)
    if 0 < window < 1_000:
        raise BadRequestError("max_input_tokens: 0 (the server's default) or 1,000 to 2,000,000")
    messages = await _recent_messages(session.client, session_id)
    if not messages:
        return JSONResponse({"previewed_message_count": 0, "messages": []})
    reply = await session.client.prepare_context(
        messages,
        max_input_tokens=window,
        system_prompt=inputs.text(body, "system_prompt", max_chars=20_000),
    )
    split = reply.split
    method: str = compaction_pb2.SummaryMethod.Name(reply.compaction.method)
    return JSONResponse(
        {
            "previewed_message_count": len(messages),
            "messages": [message(m) for m in reply.messages],
            "summary": reply.summary,
            "summary_method": method.removeprefix("SUMMARY_METHOD_").lower(),
            "compacted": reply.compaction.compacted,
            "failure": reply.compaction.failure,
            "truncated_tool_results": reply.truncated_tool_results,
            "split": {
                "total_tokens": split.total_tokens,
                "threshold_tokens": split.threshold_tokens,
                "needs_compaction": split.needs_compaction,
                "keep_from_index": split.keep_from_index,
                "kept_tokens": split.kept_tokens,
                "encoding": split.encoding,
            },
        }
    )
