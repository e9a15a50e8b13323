"""WriteConversation with extraction, over gRPC against `llm_server`, whose model is the
scripted OpenAI-compatible fake (tests/fake_llm.py; real HTTP through the `openai`
client): typed memories with provenance and speaker, a reconciliation round (ADD,
UPDATE, SUPERSEDE, DELETE on a forget request, NOOP, unknown ordinals skipped and
recorded), malformed answers repaired or failing the job visibly, a Chinese
conversation, queued vs wait, and the same conversation written twice."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import json_format

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, NotFoundError
from memplane.server.writeback.rules_writer import RULES_METHOD
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.fake_llm import FakeLLM, Respond
from tests.fix_server import TestWorkspace
from tests.support import list_all, ts

SCOPE = memory_pb2.Scope(user_id="ana", agent_id="concierge", session_id="s1")
USER, ASSISTANT = memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT
T0 = datetime(2026, 11, 13, 9, 0, tzinfo=UTC)  # a Friday (in the past: validity is judged at the real now)
T1 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)  # a week later
DONE = writeback_pb2.EXTRACTION_JOB_STATUS_DONE
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EXTRACTED_TYPES = [
    memory_pb2.MEMORY_TYPE_USER,
    memory_pb2.MEMORY_TYPE_FEEDBACK,
    memory_pb2.MEMORY_TYPE_PROJECT,
    memory_pb2.MEMORY_TYPE_REFERENCE,
    memory_pb2.MEMORY_TYPE_PROCEDURAL,
    memory_pb2.MEMORY_TYPE_TOOL,
]


def message(id: str, role: int, content: str, minutes: int = 0, name: str = "", *, start: datetime = T0) -> Any:
    out = writeback_pb2.ConversationMessage(id=id, role=role, name=name, content=content)  # type: ignore[arg-type]
    out.create_time.CopyFrom(ts(start + timedelta(minutes=minutes)))
    return out


def fact(kind: str, name: str, content: str, *, speaker: str = "user", ids: list[str], **extra: Any) -> dict[str, Any]:
    return {"type": kind, "name": name, "description": f"About {name}", "content": content, "speaker": speaker,
            "message_ids": ids, **extra}  # fmt: skip


def answer(*facts: dict[str, Any], forget: list[str] | None = None) -> str:
    return json.dumps({"memories": list(facts), "forget": [{"content": f} for f in forget or []]}, ensure_ascii=False)


def decision_of(event: memory_pb2.MemoryEvent) -> dict[str, Any]:
    return json_format.MessageToDict(event.decision)


async def extracted(client: AsyncMemplaneClient, *, superseded: bool = False) -> list[memory_pb2.Memory]:
    flt = filter_pb2.MemoryFilter(types=EXTRACTED_TYPES, include_superseded=superseded)
    return await list_all(client, flt)


FIRST = [
    message("m1", USER, "I live in Whitefield, Bangalore. I paint on weekends.", 0, "Ana"),
    message("m2", ASSISTANT, "Nice! You could try the watercolour class at the community centre.", 1),
    message("m3", USER, "Ravi owns the billing project. I went to Goa in October. I'm vegetarian.", 2, "Ana"),
    message("m4", USER, "Running `pytest -x -n 4` fixed the flaky suite; -n 8 ran out of memory.", 3, "Ana"),
]
FIRST_FACTS = [
    fact("user", "Home", "Ana lives in Whitefield, Bangalore.", ids=["m1"]),
    fact("user", "Hobby", "Ana paints on weekends.", ids=["m1"]),
    fact("project", "Billing owner", "Ravi owns the billing project.", ids=["m3"]),
    fact("user", "Goa trip", "Ana went to Goa in October 2026.", ids=["m3"], valid_from="2026-10-01"),
    fact("user", "Diet", "Ana is vegetarian.", ids=["m3"]),
    fact("tool", "pytest workers", "pytest -x -n 4 works; -n 8 runs out of memory.", ids=["m4"]),
    fact("procedural", "Flaky suite", "Fewer pytest workers fixed the flaky suite.", ids=["m4"]),
    fact(
        "reference",
        "Watercolour class",
        "The assistant suggested the community centre's watercolour class.",
        speaker="assistant",
        ids=["m2"],
    ),
]


def check_cost(job: writeback_pb2.ExtractionJob, *, calls: int) -> None:
    assert job.cost.llm_call_count == calls
    assert job.cost.prompt_tokens > 0
    assert job.cost.completion_tokens > 0
    assert job.cost.llm_duration.ToTimedelta().total_seconds() > 0


def check_extraction_prompt(request: dict[str, Any]) -> None:
    """Structured output, message ids and times, the language, the speaker rule."""
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["name"] == "memories"
    system, prompt = request["messages"]
    assert "[m1] [2026-11-13 Fri 09:00 UTC] user (Ana): I live in Whitefield" in prompt["content"]
    assert "the language of the conversation: English" in system["content"]
    assert "absolute dates" in system["content"]
    assert "assistant's suggestion is NOT a fact about the user" in system["content"]


async def test_extraction_stores_typed_memories_with_provenance_speaker_and_audit(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    llm.script(answer(*FIRST_FACTS))
    reply = await llm_client.write_conversation(SCOPE, FIRST, extract=True, wait=True, request_id="first-write")
    assert reply.method == "episodic+llm"
    assert len(reply.memories) == 4  # the episodic turns are stored as before
    job = reply.extraction_job
    assert job.status == DONE, job.error
    assert job.attempt_count == 1
    assert list(job.message_ids) == ["m1", "m2", "m3", "m4"]
    assert job.model == "fake-model"
    check_cost(job, calls=1)  # nothing stored nearby: no reconciliation call
    assert [op.operation for op in job.operations] == ["ADD"] * 8
    assert all(op.outcome == "applied" for op in job.operations)
    by_name = {m.name: m for m in reply.extracted_memories}
    assert set(by_name) == {f["name"] for f in FIRST_FACTS}
    assert sorted(job.memory_ids) == sorted(m.id for m in reply.extracted_memories)

    home, trip, tool = by_name["Home"], by_name["Goa trip"], by_name["pytest workers"]
    assert home.type == memory_pb2.MEMORY_TYPE_USER
    assert tool.type == memory_pb2.MEMORY_TYPE_TOOL
    assert by_name["Flaky suite"].type == memory_pb2.MEMORY_TYPE_PROCEDURAL
    assert by_name["Billing owner"].type == memory_pb2.MEMORY_TYPE_PROJECT
    assert home.content == "Ana lives in Whitefield, Bangalore."
    assert home.description == "About Home"
    assert home.scope == SCOPE
    assert home.provenance.session_id == "s1"
    assert list(home.provenance.message_ids) == ["m1"]
    assert home.metadata["speaker"] == "user"
    assert home.metadata["extracted_by"] == "llm"
    assert home.metadata["job_id"] == job.id
    suggestion = by_name["Watercolour class"]
    assert suggestion.metadata["speaker"] == "assistant"  # an assistant's suggestion is not a user fact
    # valid_from: the date the model resolved, else the session's time (its last message)
    assert trip.valid_from_time.ToDatetime(UTC) == datetime(2026, 10, 1, tzinfo=UTC)
    assert home.valid_from_time.ToDatetime(UTC) == T0.replace(minute=3)

    [request] = llm.requests  # nothing stored nearby: no reconciliation call
    check_extraction_prompt(request)

    # Audit: the ADD event carries the decision.
    [event] = await llm_client.list_memory_events(home.id)
    assert event.kind == memory_pb2.EVENT_KIND_ADD
    decision = decision_of(event)
    assert decision["operation"] == "ADD"
    assert decision["model"] == "fake-model"
    assert decision["job_id"] == job.id
    assert decision["fact"] == "F1"
    assert decision["outcome"] == "applied"
    [digest] = decision["prompt_sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)

    # The same request again: the same job and memories, no model call, nothing new.
    again = await llm_client.write_conversation(SCOPE, FIRST, extract=True, wait=True, request_id="first-write")
    assert again.extraction_job.id == job.id
    assert sorted(m.id for m in again.extracted_memories) == sorted(job.memory_ids)
    assert len(llm.requests) == 1
    assert len(await extracted(llm_client)) == 8


def reconcile(body: dict[str, Any]) -> str:
    """The scripted reconciliation: reads the ordinals the server showed (by content)
    and answers one operation per fact, plus two naming ordinals that do not exist."""
    prompt = body["messages"][1]["content"]
    shown = {
        m.group(2): int(m.group(1)) for m in re.finditer(r"^\[(\d+)\] \([a-z]+, since [\d-]+\) ([^:]+):", prompt, re.M)
    }
    return json.dumps(
        {
            "operations": [
                {"operation": "SUPERSEDE", "fact": 1, "memory": shown["Home"]},
                {"operation": "UPDATE", "fact": 2, "memory": shown["Hobby"]},
                {"operation": "SUPERSEDE", "fact": 3, "memory": shown["Billing owner"]},
                {"operation": "ADD", "fact": 4},
                {"operation": "NOOP", "fact": 5, "memory": shown["Diet"]},
                {"operation": "DELETE", "memory": shown["Goa trip"]},
                {"operation": "UPDATE", "fact": 6, "memory": 99},
                {"operation": "ADD", "fact": 42},
            ]
        }
    )


async def test_a_reconciliation_round_applies_each_operation_and_records_the_skipped(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    llm.script(answer(*FIRST_FACTS))
    first = await llm_client.write_conversation(SCOPE, FIRST, extract=True, wait=True)
    stored = {m.name: m for m in first.extracted_memories}
    second = [
        message("n1", USER, "Last Monday I moved to Electronic City.", 30, "Ana", start=T1),
        message(
            "n2", USER, "Now I paint watercolours every Saturday. And I started guitar lessons.", 31, "Ana", start=T1
        ),
        message(
            "n3", USER, "Meera took over the billing project from Ravi. Still no meat for me.", 32, "Ana", start=T1
        ),
        message("n4", USER, "Please forget that I went to Goa. My cat is called Miso.", 33, "Ana", start=T1),
    ]
    facts = [
        fact("user", "Home", "Ana lives in Electronic City, Bangalore.", ids=["n1"], valid_from="2026-11-16"),
        fact("user", "Hobby", "Ana paints watercolours every Saturday.", ids=["n2"]),
        fact("project", "Billing owner", "Meera owns the billing project (took over from Ravi).", ids=["n3"]),
        fact("user", "Guitar", "Ana started guitar lessons.", ids=["n2"]),
        fact("user", "Diet", "Ana does not eat meat.", ids=["n3"]),
        fact("user", "Cat", "Ana's cat is called Miso.", ids=["n4"]),
    ]
    llm.script(answer(*facts, forget=["that Ana went to Goa"]), Respond(reconcile))
    scope = memory_pb2.Scope(user_id="ana", agent_id="concierge", session_id="s2")  # another session, same user
    reply = await llm_client.write_conversation(scope, second, extract=True, wait=True)
    job = reply.extraction_job
    assert job.status == DONE, job.error
    check_cost(job, calls=2)
    ops = [(op.operation, op.fact, op.memory, op.outcome) for op in job.operations]
    assert ("UPDATE", "F6", "[99]", "skipped: unknown memory ordinal [99]") in ops
    assert ("ADD", "F42", "", "skipped: unknown fact ordinal F42") in ops
    assert ops[-1] == ("ADD", "F6", "", "applied")  # a fact no applied operation decided is still added
    assert sum(op.outcome == "applied" for op in job.operations) == 7

    # The reconciliation prompt numbers memories; no stored id reaches the model.
    reconciliation = llm.requests[2]["messages"][1]["content"]
    assert "[1] (" in reconciliation
    assert "R1 that Ana went to Goa" in reconciliation
    assert not UUID.search(reconciliation)

    current = {m.name: m for m in await extracted(llm_client)}
    everything = await extracted(llm_client, superseded=True)
    # SUPERSEDE: the old address closed, still readable with include_superseded; the new one names it
    old_home = next(m for m in everything if m.id == stored["Home"].id)
    assert old_home.valid_to_time.ToDatetime(UTC) == datetime(2026, 11, 16, tzinfo=UTC)
    assert old_home.content == "Ana lives in Whitefield, Bangalore."
    assert current["Home"].content == "Ana lives in Electronic City, Bangalore."
    assert current["Home"].metadata["supersedes"] == old_home.id
    assert current["Home"].scope.session_id == "s2"
    assert stored["Home"].id not in {m.id for m in current.values()}
    assert current["Billing owner"].metadata["supersedes"] == stored["Billing owner"].id
    # UPDATE: the same memory, a new version
    assert current["Hobby"].id == stored["Hobby"].id
    assert current["Hobby"].version == 2
    assert current["Hobby"].content == "Ana paints watercolours every Saturday."
    # NOOP: unchanged, with a NOOP event
    assert current["Diet"].version == 1
    diet_events = await llm_client.list_memory_events(stored["Diet"].id)
    assert [e.kind for e in diet_events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_NOOP]
    assert decision_of(diet_events[1])["operation"] == "NOOP"
    # DELETE (a forget request): only the trip is gone
    with pytest.raises(NotFoundError):
        await llm_client.get_memory(stored["Goa trip"].id)
    trip_events = await llm_client.list_memory_events(stored["Goa trip"].id)
    assert trip_events[-1].kind == memory_pb2.EVENT_KIND_DELETE
    assert decision_of(trip_events[-1])["operation"] == "DELETE"
    assert set(current) == {f["name"] for f in FIRST_FACTS} - {"Goa trip"} | {"Guitar", "Cat"}
    # Audit of the supersession: the old memory's UPDATE event names the inputs and both prompts
    home_events = await llm_client.list_memory_events(old_home.id)
    assert home_events[-1].kind == memory_pb2.EVENT_KIND_UPDATE
    decision = decision_of(home_events[-1])
    assert decision["operation"] == "SUPERSEDE"
    assert old_home.id in list(decision["input_memory_ids"])
    assert len(decision["prompt_sha256"]) == 2


async def test_a_malformed_answer_is_repaired_and_garbage_fails_the_job_visibly(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    broken = (
        "Here you go:\n```json\n"
        '{"memories": [{"type": "tool", "name": "Notes path", "description": "Where notes are",'
        ' "content": "Ana keeps notes in C:\\Users\\ana\\Documents", "speaker": "user",},],}\n```'
    )
    llm.script(broken)
    reply = await llm_client.write_conversation(
        SCOPE, [message("b1", USER, "My notes are in C:\\Users\\ana\\Documents", 0)], extract=True, wait=True
    )
    assert reply.extraction_job.status == DONE, reply.extraction_job.error
    [memory] = reply.extracted_memories
    assert memory.content == "Ana keeps notes in C:\\Users\\ana\\Documents"

    llm.script("I'm sorry, I can't produce JSON today.", '{"memories": ')  # two attempts, both unreadable
    reply = await llm_client.write_conversation(SCOPE, [message("b2", USER, "I like tea.", 1)], extract=True, wait=True)
    job = reply.extraction_job
    assert job.status == writeback_pb2.EXTRACTION_JOB_STATUS_FAILED
    assert job.attempt_count == 2
    assert job.error == 'LLM: answer has no {"memories": [...]} object'
    assert not reply.extracted_memories
    assert (await llm_client.get_extraction_job(job.id)).status == writeback_pb2.EXTRACTION_JOB_STATUS_FAILED
    assert [m.content for m in await extracted(llm_client)] == [memory.content]  # nothing of it applied


async def test_a_chinese_conversation_yields_chinese_memories(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    llm.script(
        answer(
            fact("user", "居住地", "安娜住在杭州西湖区。", ids=["z1"]),
            fact("user", "饮食偏好", "安娜不吃辣。", ids=["z2"]),
        )
    )
    messages = [
        message("z1", USER, "我上个月搬到了杭州西湖区。", 0, "安娜"),
        message("z2", USER, "另外，我不吃辣，推荐餐厅时请注意。", 1, "安娜"),
    ]
    reply = await llm_client.write_conversation(SCOPE, messages, extract=True, wait=True)
    assert reply.extraction_job.status == DONE
    assert sorted(m.content for m in reply.extracted_memories) == sorted(["安娜住在杭州西湖区。", "安娜不吃辣。"])
    assert {m.name for m in reply.extracted_memories} == {"居住地", "饮食偏好"}
    system = llm.requests[0]["messages"][0]["content"]
    assert "the language of the conversation: Simplified Chinese" in system
    hits = await llm_client.search("杭州", filter=filter_pb2.MemoryFilter(types=EXTRACTED_TYPES))
    assert hits.hits[0].memory.content == "安娜住在杭州西湖区。"


async def test_queued_then_status_and_the_same_messages_again_are_one_job(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    gate = threading.Event()

    def held(_: dict[str, Any]) -> str:
        gate.wait(30)  # the model answers once the test has seen the job unfinished
        return answer(fact("user", "Tea", "Ana likes green tea.", ids=["q1"]))

    llm.script(Respond(held))
    messages = [message("q1", USER, "I like green tea.", 0)]
    queued = await llm_client.write_conversation(SCOPE, messages, extract=True)  # no wait
    job = queued.extraction_job
    assert job.status in (writeback_pb2.EXTRACTION_JOB_STATUS_QUEUED, writeback_pb2.EXTRACTION_JOB_STATUS_RUNNING)
    assert not queued.extracted_memories
    status = await llm_client.get_extraction_job(job.id)
    assert status.status != DONE
    assert status.id == job.id
    gate.set()
    # The same messages again (another request id): the first job, waited for; nothing appended.
    again = await llm_client.write_conversation(SCOPE, messages, extract=True, wait=True)
    assert again.extraction_job.id == job.id
    assert again.extraction_job.status == DONE
    assert again.transcript_message_count == 0
    assert [m.content for m in again.extracted_memories] == ["Ana likes green tea."]
    assert (await llm_client.get_extraction_job(job.id)).status == DONE
    assert [m.content for m in await extracted(llm_client)] == ["Ana likes green tea."]
    assert len(llm.requests) == 1
    # Without extract, the same ids stay an error, as before.
    with pytest.raises(InvalidArgumentError, match="already in the session's transcript"):
        await llm_client.write_conversation(SCOPE, messages)


async def test_a_job_of_another_workspace_is_not_found(llm_client: AsyncMemplaneClient, llm: FakeLLM) -> None:
    with pytest.raises(NotFoundError):
        await llm_client.get_extraction_job("00000000-0000-4000-8000-000000000000")
    with pytest.raises(InvalidArgumentError, match="extraction job id"):
        await llm_client.get_extraction_job("not-a-uuid")


async def test_without_an_llm_the_turns_are_stored_and_the_reply_says_so(workspace: TestWorkspace) -> None:
    reply = await workspace.client.write_conversation(
        SCOPE, [message("x1", USER, "I like green tea.", 0)], extract=True, wait=True
    )
    assert reply.method == RULES_METHOD  # the no-LLM extractor (tests/e2e/test_rules_extraction.py)
    assert not reply.HasField("extraction_job")
    assert len(reply.memories) == 1
    assert [m.content for m in reply.extracted_memories] == ["I like green tea."]
