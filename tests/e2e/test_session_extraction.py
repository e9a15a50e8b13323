"""SummarizeSession extracts with the extraction jobs' prompt and parser (issue 11, item
2), over gRPC with the scripted OpenAI-compatible server: the six memory types, who said
it (an assistant's suggestion is not a user fact), the date it became true, the message
ids it came from, and memories in the conversation's language."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format

from memplane.client import AsyncMemplaneClient
from memplane.domain.models import ConversationMessage, MessageRole
from memplane.server.llm.extraction import extraction_prompt, prompt_sha256
from memplane.text.language import detect_language
from memplane.v1 import memory_pb2
from tests.e2e.test_compaction_summaries import GOOD, GOOD_ZH, T0, chinese_conversation, conversation
from tests.e2e.test_session_reconcile import shown
from tests.fake_llm import FakeLLM, Respond

SESSION_END = T0 + timedelta(minutes=25)  # the last message of `conversation()` with a time
EXTRACTED = {
    "memories": [
        {
            "type": "procedural",
            "name": "Idempotent charges",
            "description": "When retries may double-bill",
            "content": "The assistant suggested an idempotency key on every charge so retries cannot double-bill",
            "speaker": "assistant",
            "valid_from": None,
            "message_ids": ["b5"],
        },
        {
            "type": "tool",
            "name": "run_tests billing suite",
            "description": "Running the billing tests",
            "content": 'run_tests with {"suite": "billing"} ran 412 tests, all passed',
            "speaker": "assistant",
            "valid_from": None,
            "message_ids": ["b6", "b7"],
        },
        {
            "type": "user",
            "name": "Postgres version",
            "description": "Choosing a database",
            "content": "The user allows Postgres 16 only",
            "speaker": "user",
            "valid_from": None,
            "message_ids": ["b0", "not-a-message-of-the-span"],
        },
        {
            "type": "project",
            "name": "Billing v2 deadline",
            "description": "Planning the billing release",
            "content": "Billing service v2 ships by 2026-12-04",
            "speaker": "user",
            "valid_from": "2026-11-27",
            "message_ids": ["unknown"],
        },
    ],
    "forget": [],
}
EXTRACTED_ZH = {
    "memories": [
        {
            "type": "user",
            "name": "数据库限制",
            "description": "选择数据库时",
            "content": "用户只允许使用 Postgres 16",
            "speaker": "user",
            "message_ids": ["z0"],
        },
        {
            "type": "procedural",
            "name": "幂等扣费",
            "description": "重试可能重复扣费时",
            "content": "助手建议每次扣费都使用幂等键，避免重试时重复扣费",
            "speaker": "assistant",
            "message_ids": ["z5"],
        },
    ]
}


def metadata(memory: memory_pb2.Memory) -> dict[str, Any]:
    return json_format.MessageToDict(memory.metadata)


def valid_from(memory: memory_pb2.Memory) -> datetime:
    return memory.valid_from_time.ToDatetime(tzinfo=UTC)


async def test_summarize_session_extracts_typed_memories_with_speaker_dates_and_provenance(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    scope = memory_pb2.Scope(user_id="u1", session_id="billing-1")
    llm.script(json.dumps(GOOD), json.dumps(EXTRACTED))  # nothing stored nearby: no reconciliation call
    reply = await llm_client.summarize_session(scope, conversation())
    assert reply.extraction == "llm"
    assert len(llm.requests) == 2
    summary, procedural, tool, user, project = reply.memories
    assert [m.type for m in reply.memories] == [
        memory_pb2.MEMORY_TYPE_EPISODIC,
        memory_pb2.MEMORY_TYPE_PROCEDURAL,
        memory_pb2.MEMORY_TYPE_TOOL,
        memory_pb2.MEMORY_TYPE_USER,
        memory_pb2.MEMORY_TYPE_PROJECT,
    ]
    assert metadata(summary)["kind"] == "session_summary"  # the summary is as before
    assert [metadata(m)["speaker"] for m in reply.memories[1:]] == ["assistant", "assistant", "user", "user"]
    assert all(metadata(m)["extracted_by"] == "llm" for m in reply.memories[1:])
    # Provenance: the span's ids the memory names; all the span's when it names none.
    assert list(procedural.provenance.message_ids) == ["b5"]
    assert list(tool.provenance.message_ids) == ["b6", "b7"]
    assert list(user.provenance.message_ids) == ["b0"]
    assert list(project.provenance.message_ids) == [f"b{i}" for i in range(8)]
    assert all(m.provenance.session_id == "billing-1" for m in reply.memories)
    # Valid from the date the conversation gives, else the session's last message time.
    assert valid_from(project) == datetime(2026, 11, 27, tzinfo=UTC)
    assert valid_from(user) == SESSION_END

    # The extraction call is the extraction jobs' own: same system prompt, same schema.
    request = llm.requests[1]
    reference = extraction_prompt([ConversationMessage("-", MessageRole.USER, created_at=SESSION_END)], now=T0)
    assert request["messages"][0]["content"] == reference[0]["content"]
    assert request["response_format"]["json_schema"]["name"] == "memories"
    span = request["messages"][1]["content"]
    assert "[b0] [2026-11-27 Fri 09:00 UTC] user: We need to ship v2" in span
    assert '[b6] [time unknown] assistant: [tool_use run_tests({"suite": "billing"})]' in span
    assert "[b7] [time unknown] tool: [tool_result run_tests] 412 passed, 0 failed" in span

    # Audit: the ADD event's decision names the model and the extraction prompt's hash.
    [event] = await llm_client.list_memory_events(procedural.id)
    decision = json_format.MessageToDict(event.decision)
    assert (decision["operation"], decision["outcome"], decision["model"]) == ("ADD", "applied", "fake-model")
    assert decision["prompt_sha256"] == [prompt_sha256(request["messages"])]

    # Summarised again: the reconciliation prompt carries who said each fact.
    def noop(body: dict[str, Any]) -> str:
        ordinals = shown(body)
        names = [m["name"] for m in EXTRACTED["memories"]]
        return json.dumps(
            {
                "operations": [
                    {"operation": "NOOP", "fact": n, "memory": ordinals[name]} for n, name in enumerate(names, 1)
                ]
            }
        )

    llm.script(json.dumps(GOOD), json.dumps(EXTRACTED), Respond(noop))
    again = await llm_client.summarize_session(scope, conversation())
    assert again.extraction == "llm"
    assert [m.id for m in again.memories] == [m.id for m in reply.memories]  # nothing duplicated
    facts = llm.requests[4]["messages"][1]["content"]
    # (a fact without its own date is valid from the session's end)
    assert "F1 (procedural, said by assistant, since 2026-11-27) Idempotent charges:" in facts
    assert "F3 (user, said by user, since 2026-11-27) Postgres version:" in facts
    assert "F4 (project, said by user, since 2026-11-27) Billing v2 deadline:" in facts
    events = await llm_client.list_memory_events(procedural.id)
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_NOOP]
    digests = json_format.MessageToDict(events[1].decision)["prompt_sha256"]
    assert digests == [prompt_sha256(llm.requests[3]["messages"]), prompt_sha256(llm.requests[4]["messages"])]


async def test_a_chinese_session_yields_chinese_memories(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    scope = memory_pb2.Scope(user_id="li", session_id="zh-1")
    llm.script(json.dumps(GOOD_ZH, ensure_ascii=False), json.dumps(EXTRACTED_ZH, ensure_ascii=False))
    reply = await llm_client.summarize_session(scope, chinese_conversation())
    assert reply.extraction == "llm"
    _, user, procedural = reply.memories
    for memory in (user, procedural):
        assert detect_language([memory.name, memory.description, memory.content]) == "zh"
    assert (user.content, metadata(user)["speaker"]) == ("用户只允许使用 Postgres 16", "user")
    assert (procedural.type, metadata(procedural)["speaker"]) == (memory_pb2.MEMORY_TYPE_PROCEDURAL, "assistant")
    assert list(procedural.provenance.message_ids) == ["z5"]
    system = llm.requests[1]["messages"][0]["content"]
    assert "in the language of the conversation: Simplified Chinese (简体中文)" in system


async def test_a_malformed_extraction_answer_keeps_the_summary_and_says_so(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    scope = memory_pb2.Scope(user_id="u2", session_id="s-1")
    llm.script(json.dumps(GOOD), "I found nothing worth remembering.")
    reply = await llm_client.summarize_session(scope, conversation())
    assert reply.extraction == 'none: answer has no {"memories": [...]} object'
    [summary] = reply.memories
    assert summary.type == memory_pb2.MEMORY_TYPE_EPISODIC
