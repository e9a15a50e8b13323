"""CompactMessages, PrepareContext, GetTranscript and SummarizeSession over gRPC.

The LLM paths run against `llm_server`, whose OpenAI-compatible endpoint is the scripted
fake of tests/fake_llm.py (real HTTP through the `openai` client); the session's main
server has no LLM and summarises extractively. Every failure path checks that the
previous summary comes back whole and that no message is marked compacted.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import FailedPreconditionError, InvalidArgumentError, QuotaExceededError
from memplane.v1 import compaction_pb2, memory_pb2
from tests.fake_llm import Delay, FakeLLM, HttpError
from tests.fix_llm import LLM_TIMEOUT_SECONDS
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import fields, mem, text_message, tool_call, tool_output, workspace_blob_count

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
HEADINGS_EN = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)
HEADINGS_ZH = ("## 目标", "## 约束与偏好", "## 进展", "## 关键决策", "## 下一步", "## 关键上下文")
PREVIOUS = "## Goal\n- Ship v2 of the billing service\n## Progress\n- Schema migrated"

GOOD = {
    "goal": ["Ship v2 of the billing service by 2026-12-04"],
    "constraints": ["Postgres 16 only", "No downtime during business hours"],
    "progress": ["Invoices table migrated", "Load test passed at 2k rps"],
    "decisions": ["Use idempotency keys on every charge"],
    "next_steps": ["Deploy to staging on 2026-11-28"],
    "critical_context": ["/srv/billing/config.yaml", "ERROR 40P01: deadlock detected"],
}
GOOD_ZH = {
    "goal": ["在 2026-12-04 之前上线账单服务 v2"],
    "constraints": ["只用 Postgres 16"],
    "progress": ["发票表已迁移"],
    "decisions": ["每次扣费都用幂等键"],
    "next_steps": ["2026-11-28 部署到预发环境"],
    "critical_context": ["/srv/billing/config.yaml"],
}


def conversation() -> list[compaction_pb2.ContextMessage]:
    """An English agent session with a tool call, timestamps and ids."""
    lines = [
        ("user", "We need to ship v2 of the billing service by next Friday. Postgres 16 only."),
        ("assistant", "Understood. I will migrate the invoices table first and keep downtime at zero."),
        ("user", "The config lives in /srv/billing/config.yaml; do not touch prod during business hours."),
        ("assistant", "Migration done. The load test passed at 2k requests per second."),
        ("user", "Yesterday we saw ERROR 40P01: deadlock detected in the charge worker."),
        ("assistant", "I propose idempotency keys on every charge so retries cannot double-bill."),
    ]
    out = [text_message(r, t, id=f"b{i}", at=T0 + timedelta(minutes=5 * i)) for i, (r, t) in enumerate(lines)]
    out.append(tool_call("call_7", "run_tests", '{"suite": "billing"}', id="b6"))
    out.append(tool_output("call_7", "412 passed, 0 failed", tool="run_tests", id="b7"))
    return out


def chinese_conversation() -> list[compaction_pb2.ContextMessage]:
    lines = [
        ("user", "我们需要在下周五之前上线账单服务的第二版，数据库只能用 Postgres 16。"),
        ("assistant", "明白了。我会先迁移发票表，并保证零停机。"),
        ("user", "配置文件在 /srv/billing/config.yaml，工作时间不要动生产环境。"),
        ("assistant", "迁移已经完成，压测在每秒两千个请求下通过了。"),
        ("user", "昨天扣费任务里出现了死锁错误，需要排查原因。"),
        ("assistant", "我建议每次扣费都使用幂等键，这样重试就不会重复扣费。"),
    ]
    return [text_message(r, t, id=f"z{i}", at=T0 + timedelta(minutes=i)) for i, (r, t) in enumerate(lines)]


def prompt_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request["messages"])


# -- the LLM summariser ----------------------------------------------------------------
async def test_llm_writes_the_structured_summary(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    llm.script(json.dumps(GOOD))
    result = await llm_client.compact_messages(conversation())
    assert result.compacted
    assert not result.failure
    assert result.method == compaction_pb2.SUMMARY_METHOD_LLM
    positions = [result.summary.index(h) for h in HEADINGS_EN]
    assert positions == sorted(positions)  # all six, in order
    assert "ERROR 40P01: deadlock detected" in result.summary  # verbatim
    assert result.compacted_message_count == 8
    assert result.language == "en"
    assert result.summary_tokens > 0
    assert result.input_tokens > result.summary_tokens
    [request] = llm.requests
    assert request["model"] == "fake-model"
    assert request.get("response_format") == {"type": "json_object"}
    prompt = prompt_text(request)
    assert "/srv/billing/config.yaml" in prompt
    assert "2026-11-27" in prompt


async def test_an_incremental_compaction_sends_the_previous_summary(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    llm.script(json.dumps(GOOD))
    result = await llm_client.compact_messages(conversation()[4:], previous_summary=PREVIOUS)
    assert result.compacted
    assert "Ship v2 of the billing service" in prompt_text(llm.requests[0])


async def test_a_summary_leaving_sections_out_is_accepted_with_them_empty(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    llm.script(json.dumps({"goal": ["Ship v2 of the billing service"], "progress": None}))
    result = await llm_client.compact_messages(conversation())
    assert result.compacted
    assert result.method == compaction_pb2.SUMMARY_METHOD_LLM
    assert "Ship v2 of the billing service" in result.summary


async def test_prose_wrapped_json_is_accepted(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    llm.script(f"Sure! Here is the summary you asked for:\n```json\n{json.dumps(GOOD)}\n```\nLet me know.")
    result = await llm_client.compact_messages(conversation())
    assert result.compacted
    assert result.method == compaction_pb2.SUMMARY_METHOD_LLM
    assert "Use idempotency keys on every charge" in result.summary


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Hello! How can I help you today?", "section"),  # C007: no sections at all
        (json.dumps({"reply": "only a reply"}), "section"),  # JSON, but none of the sections
        (json.dumps({key: [] for key in GOOD}), "nothing"),  # six empty sections
        (json.dumps({key: ["None."] for key in GOOD}), "nothing"),  # six placeholders
        (json.dumps({**GOOD, "progress": ["step " * 9000]}), "budget"),  # far over 2,000 tokens
        (HttpError(500, "upstream exploded"), "500"),
        (Delay(LLM_TIMEOUT_SECONDS + 1.5, json.dumps(GOOD)), "time"),
    ],
    ids=["greeting", "no-sections-json", "empty-sections", "placeholders", "over-budget", "http-500", "timeout"],
)
async def test_c007_a_failed_summariser_keeps_the_previous_summary_and_the_messages(
    llm: FakeLLM, llm_client: AsyncMemplaneClient, reply: object, reason: str
) -> None:
    llm.script(reply)  # type: ignore[arg-type]
    session = f"s-{reason}"
    result = await llm_client.compact_messages(
        conversation(), previous_summary=PREVIOUS, scope=memory_pb2.Scope(session_id=session)
    )
    assert result.summary == PREVIOUS  # byte for byte
    assert not result.compacted
    assert result.compacted_message_count == 0
    assert result.method == compaction_pb2.SUMMARY_METHOD_PREVIOUS_KEPT
    assert "fail" in result.failure
    assert reason in result.failure.lower()
    transcript = await llm_client.get_transcript(session)
    assert not [m for m in transcript.messages if m.compacted]  # nothing marked compacted


async def test_a_chinese_conversation_is_summarised_in_chinese(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    llm.script(json.dumps(GOOD_ZH, ensure_ascii=False))
    result = await llm_client.compact_messages(chinese_conversation())
    assert result.compacted
    assert result.language == "zh"
    positions = [result.summary.index(h) for h in HEADINGS_ZH]
    assert positions == sorted(positions)
    assert "每次扣费都用幂等键" in result.summary
    prompt = prompt_text(llm.requests[0])
    assert "Chinese" in prompt or "中文" in prompt  # the model is told the language


async def test_prepare_context_keeps_everything_when_the_llm_fails(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    llm.script(HttpError(500, "boom"))
    messages = [m for _ in range(6) for m in conversation()]  # fresh objects: ids are set below
    for i, m in enumerate(messages):
        m.id = f"p{i}"
    reply = await llm_client.prepare_context(
        messages, previous_summary=PREVIOUS, max_input_tokens=1000, reserve_tokens=200
    )
    assert reply.split.needs_compaction
    assert reply.compaction.failure
    assert not reply.compaction.compacted
    assert reply.summary == PREVIOUS
    assert list(reply.messages) == messages


async def test_the_llm_extracts_memories_from_a_session(
    llm: FakeLLM, llm_client: AsyncMemplaneClient, workspace: TestWorkspace
) -> None:
    extracted = {
        "memories": [
            {
                "type": "user",
                "name": "Database",
                "description": "DB constraint",
                "content": "Uses Postgres 16 only",
                "speaker": "user",
                "valid_from": None,
                "message_ids": ["b0"],
            },
            {
                "type": "procedural",
                "name": "Billing retries",
                "description": "How to avoid double billing",
                "content": "Put an idempotency key on every charge",
                "speaker": "assistant",
                "valid_from": None,
                "message_ids": ["b5"],
            },
            {
                "type": "tool",
                "name": "run_tests",
                "description": "Test runner",
                "content": "run_tests takes a suite",
                "speaker": "assistant",
                "valid_from": None,
                "message_ids": ["b6", "b7"],
            },
        ],
        "forget": [],
    }
    llm.script(json.dumps(GOOD), json.dumps(extracted))
    scope = memory_pb2.Scope(user_id="u1", session_id="billing-1")
    reply = await llm_client.summarize_session(scope, conversation())
    assert reply.summary_method == "llm"
    assert reply.extraction == "llm"
    types = [m.type for m in reply.memories]
    assert types == [
        memory_pb2.MEMORY_TYPE_EPISODIC,
        memory_pb2.MEMORY_TYPE_USER,
        memory_pb2.MEMORY_TYPE_PROCEDURAL,
        memory_pb2.MEMORY_TYPE_TOOL,
    ]
    assert all(m.scope.session_id == "billing-1" and m.scope.user_id == "u1" for m in reply.memories)
    assert list(reply.memories[0].provenance.message_ids) == [f"b{i}" for i in range(8)]
    hits = await workspace.client.search("double billing idempotency", top_k=3)
    assert reply.memories[2].id in [h.memory.id for h in hits.hits]


# -- without an LLM ------------------------------------------------------------------
async def test_without_an_llm_the_summary_is_extractive_and_says_so(workspace: TestWorkspace) -> None:
    result = await workspace.client.compact_messages(conversation(), max_summary_tokens=120)
    assert result.compacted
    assert result.method == compaction_pb2.SUMMARY_METHOD_EXTRACTIVE
    assert "xtractive" in result.summary  # the summary itself says what it is
    assert 0 < result.summary_tokens <= 120
    with pytest.raises(FailedPreconditionError):
        await workspace.client.compact_messages(conversation(), summarizer=compaction_pb2.SUMMARIZER_CHOICE_LLM)


async def test_an_extractive_summary_of_a_chinese_conversation_is_chinese(workspace: TestWorkspace) -> None:
    result = await workspace.client.compact_messages(chinese_conversation())
    assert result.language == "zh"
    assert "摘录" in result.summary
    assert any(s in result.summary for s in ("幂等键", "发票表", "死锁", "Postgres 16"))


async def test_compaction_marks_the_transcript_and_the_full_transcript_is_readable(workspace: TestWorkspace) -> None:
    session = "sess-transcript"
    messages = conversation()
    result = await workspace.client.compact_messages(messages[:5], scope=memory_pb2.Scope(session_id=session))
    assert list(result.transcript_message_ids) == [f"b{i}" for i in range(5)]
    # The same messages compacted again are matched by id, not appended twice.
    await workspace.client.compact_messages(messages[:5], scope=memory_pb2.Scope(session_id=session))
    await workspace.client.compact_messages(messages[5:], scope=memory_pb2.Scope(session_id=session))
    page1 = await workspace.client.get_transcript(session, page_size=3)
    page2 = await workspace.client.get_transcript(session, page_size=3, page_token=page1.next_page_token)
    page3 = await workspace.client.get_transcript(session, page_size=3, page_token=page2.next_page_token)
    entries = [*page1.messages, *page2.messages, *page3.messages]
    assert page3.next_page_token == ""
    assert [e.message.id for e in entries] == [f"b{i}" for i in range(8)]
    assert all(e.compacted for e in entries)
    assert [e.seq for e in entries] == list(range(1, 9))
    # Blocks survive: the tool call and its result come back as they were sent.
    assert entries[6].message.content == messages[6].content
    assert entries[7].message.content == messages[7].content
    assert entries[0].message.create_time == messages[0].create_time
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.get_transcript("")
    assert fields(caught.value) == ["session_id"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.get_transcript(session, page_token="bogus")
    assert fields(caught.value) == ["page_token"]


async def test_prepare_context_writes_the_compacted_span_to_memory(workspace: TestWorkspace) -> None:
    messages = [m for _ in range(5) for m in conversation()]  # fresh objects: ids are set below
    for i, m in enumerate(messages):
        m.id = f"w{i}"
    scope = memory_pb2.Scope(user_id="u9", session_id="sess-write")
    reply = await workspace.client.prepare_context(
        messages, max_input_tokens=800, reserve_tokens=200, scope=scope, write_memories=True
    )
    k = reply.split.keep_from_index
    assert reply.compaction.compacted
    assert k > 0
    [summary] = reply.memories
    assert summary.type == memory_pb2.MEMORY_TYPE_EPISODIC
    assert summary.content == reply.summary
    assert list(summary.provenance.message_ids) == [f"w{i}" for i in range(k)]
    transcript = await workspace.client.get_transcript("sess-write", page_size=1000)
    assert [e.message.id for e in transcript.messages] == [f"w{i}" for i in range(k)]
    assert all(e.compacted for e in transcript.messages)


async def test_summarize_session_without_an_llm(workspace: TestWorkspace) -> None:
    scope = memory_pb2.Scope(session_id="sess-plain")
    reply = await workspace.client.summarize_session(scope, conversation())
    assert reply.summary_method == "extractive"
    assert reply.extraction.startswith("none")
    [memory] = reply.memories
    assert memory.type == memory_pb2.MEMORY_TYPE_EPISODIC
    assert memory.content
    given = await workspace.client.summarize_session(scope, summary=PREVIOUS)
    assert given.summary_method == "given"
    assert given.memories[0].content == PREVIOUS
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.summarize_session(memory_pb2.Scope(), conversation())
    assert fields(caught.value) == ["scope.session_id"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.summarize_session(scope)
    assert fields(caught.value) == ["messages"]


async def test_an_extract_without_content_is_not_a_compaction(workspace: TestWorkspace) -> None:
    tool_only = [tool_call("c1", "ls"), tool_output("c1", "")]
    result = await workspace.client.compact_messages(tool_only)
    assert not result.compacted  # a bare heading would drop the messages for nothing
    assert result.summary == ""
    assert "no content" in result.failure
    # With a running summary its items are carried over, so nothing is lost.
    carried = await workspace.client.compact_messages(tool_only, previous_summary=PREVIOUS)
    assert carried.compacted
    assert "Ship v2 of the billing service" in carried.summary
    assert "Schema migrated" in carried.summary
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.compact_messages(conversation(), max_summary_tokens=1)
    assert fields(caught.value) == ["max_summary_tokens"]


async def test_prepare_context_validates_everything_before_writing(workspace: TestWorkspace, pg_dsn: str) -> None:
    messages = [
        *conversation(),
        text_message("user", "fetch the log"),
        tool_call("c9", "read_log"),
        tool_output("c9", "log line\n" * 50_000),
        text_message("assistant", "done"),
    ]
    for knobs, field in (({"language": "de"}, "language"), ({"max_summary_tokens": -3}, "max_summary_tokens")):
        with pytest.raises(InvalidArgumentError) as caught:
            await workspace.client.prepare_context(messages, max_input_tokens=5000, **knobs)
        assert fields(caught.value) == [field]
    with pytest.raises(FailedPreconditionError):
        await workspace.client.prepare_context(
            messages, max_input_tokens=5000, summarizer=compaction_pb2.SUMMARIZER_CHOICE_LLM
        )
    assert await workspace_blob_count(pg_dsn, workspace.name) == 0  # the refused calls stored nothing


async def test_write_memories_over_quota_marks_nothing_compacted(workspace_factory: WorkspaceFactory) -> None:
    ws = await workspace_factory(max_memories=1)
    await ws.client.add_memories([mem("the one memory the quota allows")])
    messages = [m for _ in range(5) for m in conversation()]
    for i, m in enumerate(messages):
        m.id = f"q{i}"
    scope = memory_pb2.Scope(session_id="sess-quota")
    with pytest.raises(QuotaExceededError):
        await ws.client.prepare_context(messages, max_input_tokens=800, scope=scope, write_memories=True)
    transcript = await ws.client.get_transcript("sess-quota")
    assert list(transcript.messages) == []  # nothing marked: the client got no summary


async def test_messages_without_ids_are_recorded_once_however_often_compacted(workspace: TestWorkspace) -> None:
    plain = [text_message("user", "Where is the config?"), text_message("assistant", "In /srv/billing.")]
    plain.append(text_message("user", "Where is the config?"))  # the same words again, later in the list
    scope = memory_pb2.Scope(session_id="sess-noids")
    first = await workspace.client.compact_messages(plain, scope=scope)
    await asyncio.gather(*[workspace.client.compact_messages(plain, scope=scope) for _ in range(4)])
    transcript = await workspace.client.get_transcript("sess-noids")
    assert len(transcript.messages) == 3  # retries and concurrent repeats add nothing
    assert [e.message.id for e in transcript.messages] == list(first.transcript_message_ids)
    assert [e.message.content[0].text.text for e in transcript.messages] == [
        "Where is the config?",
        "In /srv/billing.",
        "Where is the config?",
    ]


async def test_equal_words_in_different_spans_stay_two_messages(workspace: TestWorkspace) -> None:
    scope = memory_pb2.Scope(session_id="sess-repeat")
    ask = "Please continue with the next step now."
    await workspace.client.compact_messages(
        [text_message("user", ask), text_message("assistant", "Step one is finished.")], scope=scope
    )
    await workspace.client.compact_messages(
        [text_message("user", ask), text_message("assistant", "Step two is finished.")], scope=scope
    )
    transcript = await workspace.client.get_transcript("sess-repeat")
    assert [e.message.content[0].text.text for e in transcript.messages] == [
        ask,
        "Step one is finished.",
        ask,
        "Step two is finished.",
    ]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.compact_messages([text_message("user", "x", id=transcript.messages[0].message.id)])
    assert fields(caught.value) == ["messages[0].id"]  # "~" ids are the server's


async def test_a_retried_prepare_context_writes_its_memories_once(workspace: TestWorkspace) -> None:
    messages = [m for _ in range(5) for m in conversation()]
    for i, m in enumerate(messages):
        m.id = f"r{i}"
    scope = memory_pb2.Scope(session_id="sess-retry")
    replies = await asyncio.gather(
        *[
            workspace.client.prepare_context(messages, max_input_tokens=800, scope=scope, write_memories=True)
            for _ in range(3)
        ]
    )
    again = await workspace.client.prepare_context(messages, max_input_tokens=800, scope=scope, write_memories=True)
    ids = {m.id for r in [*replies, again] for m in r.memories}
    assert len(ids) == 1  # one session summary, however often the call is retried


async def test_a_retry_after_a_pause_records_nothing_twice_and_keeps_outputs_whole(
    workspace: TestWorkspace,
) -> None:
    """Id-less messages (OpenAI-shaped clients) with a tool output that gets cut: a retry a
    few seconds later (the blob's expiry moved, so the marker text would differ) maps to
    the same transcript rows and the same memories, and the transcript holds the output
    uncut, not head + marker (it outlives the blob)."""
    log = "".join(f"step {i}: compiled module {i} without errors\n" for i in range(6000))  # ~250 KB
    opening = [
        text_message("user" if i % 2 == 0 else "assistant", m.content[0].text.text)
        for i, m in enumerate(conversation()[:6])
    ]
    follow_ups = [
        text_message("user" if i % 2 == 0 else "assistant", f"Follow-up number {i} about the build output.")
        for i in range(30)
    ]
    messages = [*opening, tool_call("call_b", "build"), tool_output("call_b", log), *follow_ups]
    scope = memory_pb2.Scope(session_id="sess-pause")

    async def prepare() -> compaction_pb2.PrepareContextResponse:
        return await workspace.client.prepare_context(messages, max_input_tokens=1500, scope=scope, write_memories=True)

    first = await prepare()
    assert first.compaction.compacted
    assert first.split.keep_from_index > 7  # the tool output was compacted
    await asyncio.sleep(1.5)
    second = await prepare()
    assert list(second.compaction.transcript_message_ids) == list(first.compaction.transcript_message_ids)
    assert [m.id for m in second.memories] == [m.id for m in first.memories]
    transcript = await workspace.client.get_transcript("sess-pause", page_size=1000)
    assert len(transcript.messages) == first.split.keep_from_index  # nothing recorded twice
    stored = [e for e in transcript.messages if e.message.content[0].WhichOneof("block") == "tool_result"]
    assert [e.message.content[0].tool_result.output for e in stored] == [log]  # uncut


async def test_bad_compaction_requests_name_the_field(workspace: TestWorkspace) -> None:
    cases: list[tuple[dict[str, object], list[str]]] = [
        ({"messages": []}, ["messages"]),
        ({"messages": conversation(), "summarizer": 99}, ["summarizer"]),
        ({"messages": conversation(), "language": "fr"}, ["language"]),
        ({"messages": conversation(), "scope": memory_pb2.Scope(session_id="s" * 200)}, ["scope.session_id"]),
        ({"messages": conversation(), "encoding": "p50k_base"}, ["encoding"]),
    ]
    for request, expected in cases:
        messages = request.pop("messages")
        with pytest.raises(InvalidArgumentError) as caught:
            await workspace.client.compact_messages(messages, **request)  # type: ignore[arg-type]
        assert fields(caught.value) == expected, request
