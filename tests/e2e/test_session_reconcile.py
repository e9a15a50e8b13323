"""SummarizeSession reconciles what it extracts with what is stored (issue 11), over
gRPC with the scripted OpenAI-compatible server: summarising the same span again adds
nothing (the summary is a NOOP duplicate, the facts NOOP by the model's ordinals), and a
changed fact in a later session supersedes the old one, which stays readable."""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf import json_format

from memplane.client import AsyncMemplaneClient
from memplane.v1 import filter_pb2, memory_pb2
from tests.e2e.test_compaction_summaries import GOOD, conversation
from tests.fake_llm import FakeLLM, HttpError, Respond
from tests.fix_server import TestWorkspace
from tests.support import list_all

FACTS = {
    "memories": [
        {
            "type": "user",
            "name": "Home",
            "description": "Where Ana lives",
            "content": "Ana lives in Whitefield",
            "speaker": "user",
        },
        {
            "type": "user",
            "name": "Hobby",
            "description": "What Ana does for fun",
            "content": "Ana plays chess",
            "speaker": "user",
        },
    ]
}
MOVED = {
    "memories": [
        {
            "type": "user",
            "name": "Home",
            "description": "Where Ana lives",
            "content": "Ana moved to Electronic City",
            "speaker": "user",
        }
    ]
}


def shown(body: dict[str, Any]) -> dict[str, int]:
    """The stored memories the reconciliation prompt numbered, by name."""
    prompt = body["messages"][1]["content"]
    found = re.finditer(r"^\[(\d+)\] \([a-z]+, since [\d-]+\) ([^:]+):", prompt, re.M)
    return {m.group(2): int(m.group(1)) for m in found}


def kinds(events: list[memory_pb2.MemoryEvent]) -> list[str]:
    return [memory_pb2.EventKind.Name(e.kind) for e in events]


def everything(superseded: bool = False) -> filter_pb2.MemoryFilter:
    return filter_pb2.MemoryFilter(include_superseded=superseded)


async def test_a_repeated_summary_does_not_duplicate_and_a_changed_fact_supersedes(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    scope = memory_pb2.Scope(user_id="ana", session_id="s-1")
    llm.script(json.dumps(GOOD), json.dumps(FACTS))  # nothing stored nearby: no reconciliation call
    first = await llm_client.summarize_session(scope, conversation())
    assert first.extraction == "llm"
    summary, home, hobby = first.memories
    assert (home.content, hobby.content) == ("Ana lives in Whitefield", "Ana plays chess")
    assert len(llm.requests) == 2

    # The same span again: the model sees the stored facts as ordinals and says NOOP.
    def noop(body: dict[str, Any]) -> str:
        ordinals = shown(body)
        return json.dumps(
            {
                "operations": [
                    {"operation": "NOOP", "fact": 1, "memory": ordinals["Home"]},
                    {"operation": "NOOP", "fact": 2, "memory": ordinals["Hobby"]},
                ]
            }
        )

    llm.script(json.dumps(GOOD), json.dumps(FACTS), Respond(noop))
    again = await llm_client.summarize_session(scope, conversation())
    assert [m.id for m in again.memories] == [summary.id, home.id, hobby.id]
    assert len(await list_all(llm_client, everything(True))) == 3
    reconciliation = llm.requests[-1]["messages"][1]["content"]
    assert home.id not in reconciliation  # ordinals, never ids
    assert kinds(await llm_client.list_memory_events(summary.id)) == ["EVENT_KIND_ADD", "EVENT_KIND_NOOP"]
    events = await llm_client.list_memory_events(home.id)
    assert kinds(events) == ["EVENT_KIND_ADD", "EVENT_KIND_NOOP"]
    decision = json_format.MessageToDict(events[1].decision)
    assert (decision["operation"], decision["outcome"], decision["model"]) == ("NOOP", "applied", "fake-model")

    # A later session: Ana moved. The address is superseded, the hobby is untouched.
    def supersede(body: dict[str, Any]) -> str:
        return json.dumps({"operations": [{"operation": "SUPERSEDE", "fact": 1, "memory": shown(body)["Home"]}]})

    later = memory_pb2.Scope(user_id="ana", session_id="s-2")
    llm.script(json.dumps(GOOD), json.dumps(MOVED), Respond(supersede))
    third = await llm_client.summarize_session(later, conversation())
    _, moved = third.memories
    assert moved.content == "Ana moved to Electronic City"
    assert json_format.MessageToDict(moved.metadata)["supersedes"] == home.id
    old = await llm_client.get_memory(home.id)
    assert old.HasField("valid_to_time")  # closed, not erased
    assert (await llm_client.get_memory(hobby.id)).HasField("valid_to_time") is False
    current = {m.content for m in await list_all(llm_client)}
    assert "Ana lives in Whitefield" not in current
    assert {"Ana moved to Electronic City", "Ana plays chess"} <= current
    assert "Ana lives in Whitefield" in {m.content for m in await list_all(llm_client, everything(True))}


async def test_a_failed_reconciliation_adds_and_says_so(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    scope = memory_pb2.Scope(user_id="bo", session_id="s-1")
    llm.script(json.dumps(GOOD), json.dumps(FACTS))
    await llm_client.summarize_session(scope, conversation())
    # The reconciliation call fails (a 500): the facts are added as AddMemories adds
    # them — exact repeats of the stored ones still NOOP duplicates.
    llm.script(json.dumps(GOOD), json.dumps(FACTS), HttpError(500, "{}"))
    again = await llm_client.summarize_session(scope, conversation())
    assert "not reconciled" in again.extraction
    assert len(await list_all(llm_client)) == 3


async def test_without_an_llm_a_repeated_summary_is_stored_once(workspace: TestWorkspace) -> None:
    scope = memory_pb2.Scope(user_id="u1", session_id="s-1")
    first = await workspace.client.summarize_session(scope, conversation())
    again = await workspace.client.summarize_session(scope, conversation())
    assert [m.id for m in again.memories] == [m.id for m in first.memories]
    assert len(await list_all(workspace.client)) == 1
