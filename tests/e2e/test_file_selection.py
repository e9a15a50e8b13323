"""SelectMemoryFiles over real gRPC against the real database: the LLM of `llm_server`
(the scripted OpenAI-compatible fake, real HTTP through the `openai` client) picks files
from the manifest it was sent; unknown names are reported, names past max_files cut; a
malformed answer, an HTTP error or a timeout falls back to hybrid search with the reason;
the session's main server (no LLM) always searches and says so; contents are bounded in
tokens; another workspace's files are never offered or returned; bad input is
INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.cli.main import main
from memplane.client import AsyncMemplaneClient, MemplaneClient
from memplane.errors import InvalidArgumentError, UnauthenticatedError
from memplane.filesync.convert import memory_from_proto
from memplane.mdview import render_view
from memplane.text.tokens import token_counter
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2
from tests.fake_llm import Delay, FakeLLM, HttpError, Respond
from tests.fix_llm import LLM_TIMEOUT_SECONDS
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import fields, list_all, mem, unit_vectors

LLM, SEARCH, NONE = (
    retrieval_pb2.SELECTION_METHOD_LLM,
    retrieval_pb2.SELECTION_METHOD_SEARCH,
    retrieval_pb2.SELECTION_METHOD_NONE,
)
T = memory_pb2
_LINE = re.compile(r"^- \[(?P<type>\w+)\] (?P<file>\S+\.md) \(\d{4}-\d{2}-\d{2}\)(?:: (?P<desc>.*))?$", re.M)

NOTES = [  # type, name, description, content
    (T.MEMORY_TYPE_FEEDBACK, "Run tests first", "Run the test suite before pushing", "Always run pytest first."),
    (T.MEMORY_TYPE_PROJECT, "Billing deadline", "Billing service ships on Friday", "The billing rewrite ships Friday."),
    (T.MEMORY_TYPE_USER, "Tea", "The user drinks green tea", "Ana drinks green tea every morning."),
    (T.MEMORY_TYPE_REFERENCE, "Grafana board", "Latency dashboard of the API", "Latency lives at grafana/d/api."),
]


def notes(**scope: str) -> list[memory_pb2.MemoryInput]:
    return [mem(c, type=t, name=n, description=d, **scope) for t, n, d, c in NOTES]  # type: ignore[arg-type]


def manifest(request: dict[str, Any]) -> dict[str, str]:
    """File name -> description of the manifest in the user message of *request*."""
    user = request["messages"][-1]["content"]
    return {m["file"]: m["desc"] or "" for m in _LINE.finditer(user)}


def pick(*needles: str, extra: tuple[str, ...] = ()) -> Respond:
    """An answer naming the offered files whose description holds each needle (in the
    needles' order), then *extra* names."""

    def reply(request: dict[str, Any]) -> str:
        offered = manifest(request)
        names = [next(f for f, d in offered.items() if needle in d) for needle in needles]
        return json.dumps({"selected_files": [*names, *extra]})

    return Respond(reply)


async def view_of(client: AsyncMemplaneClient) -> dict[str, str]:
    """The workspace's Markdown view as `memplane export markdown` renders it."""
    memories = [memory_from_proto(m) for m in await list_all(client)]
    return render_view(memories, now=datetime.now(UTC), count_tokens=token_counter("o200k_base").count_text).files


async def test_the_llm_picks_the_files_it_names_from_the_offered_descriptions(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    stored = await workspace.client.add_memories(notes(user_id="ana"))
    await workspace.client.add_memories(
        [
            mem("Bo runs the billing pipeline", type=T.MEMORY_TYPE_PROJECT, description="Billing owner", user_id="bo"),
            mem("ana: what ships on Friday?", type=T.MEMORY_TYPE_EPISODIC, user_id="ana"),
        ]
    )
    llm.script(pick("Billing service", "Run the test suite", extra=("made_up_7f00aa11.md",)))
    reply = await llm_client.select_memory_files(
        "ana: does billing ship this week?", filter=filter_pb2.MemoryFilter(user_id="ana")
    )

    assert reply.method == LLM
    assert reply.fallback_reason == ""
    assert reply.model == "fake-model"
    assert [f.memory_id for f in reply.files] == [stored[1].id, stored[0].id]  # the LLM's order
    assert list(reply.unknown_files) == ["made_up_7f00aa11.md"]
    assert list(reply.over_limit_files) == []
    assert (reply.offered_count, reply.unoffered_count) == (4, 0)  # ana's only; the episodic turn is the journal
    view = await view_of(workspace.client)
    for file in reply.files:
        assert file.content == view[file.path]  # the file as the view renders it
        assert not file.truncated
        assert file.content_tokens == file.file_tokens > 0
        assert file.score == 0
    billing, tests = reply.files
    assert re.fullmatch(r"Memory/project_billing-deadline_[0-9a-f]{8}\.md", billing.path)
    assert (billing.name, billing.description) == ("Billing deadline", "Billing service ships on Friday")
    assert billing.type == T.MEMORY_TYPE_PROJECT
    assert tests.content.startswith("---\nname: Run tests first\ndescription: Run the test suite before pushing\n")

    [request] = llm.requests
    assert request["response_format"]["type"] == "json_schema"
    system, user = request["messages"]
    assert "(up to 5)" in system["content"]
    assert user["content"].startswith("Query: ana: does billing ship this week?\n\nAvailable memories:\n")
    offered = manifest(request)
    assert len(offered) == 4
    assert {f.path.removeprefix("Memory/") for f in reply.files} <= set(offered)
    assert "Billing owner" not in offered.values()  # bo's memory is outside the scope


async def test_names_past_max_files_are_cut_and_reported(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    await workspace.client.add_memories(notes())
    llm.script(pick("Latency", "green tea", "Latency", "Billing", "Run the test"))
    reply = await llm_client.select_memory_files("what do I know?", max_files=2)
    assert reply.method == LLM
    assert [f.description for f in reply.files] == ["Latency dashboard of the API", "The user drinks green tea"]
    assert len(reply.over_limit_files) == 2  # the repeated name counts once
    assert "(up to 2)" in llm.requests[0]["messages"][0]["content"]


async def test_an_answer_naming_nothing_returns_nothing(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    await workspace.client.add_memories(notes())
    llm.script('{"selected_files": []}')
    reply = await llm_client.select_memory_files("the weather on Mars")
    assert (reply.method, list(reply.files), reply.fallback_reason) == (LLM, [], "")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("I would pick the billing and the tests files.", 'answer is not a {"selected_files"'),
        ('{"selected_files": "project_billing.md"}', 'answer is not a {"selected_files"'),
        ('{"selected_files": [1, 2]}', 'answer is not a {"selected_files"'),
        ('{"files": ["project_billing.md"]}', 'answer is not a {"selected_files"'),
        (HttpError(500), "HTTP 500 from the LLM endpoint"),
        (Delay(LLM_TIMEOUT_SECONDS + 1.0, '{"selected_files": []}'), f"timeout after {LLM_TIMEOUT_SECONDS:.1f} s"),
    ],
    ids=["prose", "not-a-list", "not-strings", "other-key", "http-500", "timeout"],
)
async def test_a_failed_llm_falls_back_to_search_and_says_why(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM, answer: Any, reason: str
) -> None:
    stored = await workspace.client.add_memories(notes())
    llm.script(answer)
    reply = await llm_client.select_memory_files("green tea", max_files=2)
    assert reply.method == SEARCH
    assert reply.fallback_reason.startswith("LLM failed: ")
    assert reason in reply.fallback_reason
    assert reply.model == ""
    assert reply.files[0].memory_id == stored[2].id  # "green tea" is the tea memory's text
    assert len(reply.files) == 2
    assert reply.files[0].score >= reply.files[1].score > 0
    assert reply.offered_count == 4


async def test_without_an_llm_search_picks_and_the_reply_says_so(server: str, workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories(notes())
    reply = await workspace.client.select_memory_files("Grafana latency dashboard", max_files=1)
    assert (reply.method, reply.fallback_reason) == (SEARCH, "no LLM configured")
    [file] = reply.files
    assert file.memory_id == stored[3].id
    assert file.content == (await view_of(workspace.client))[file.path]

    def blocking() -> retrieval_pb2.SelectMemoryFilesResponse:
        with MemplaneClient(server, workspace.key) as client:
            return client.select_memory_files("Grafana latency dashboard", max_files=1)  # type: ignore[no-any-return]

    assert (await asyncio.to_thread(blocking)).files[0].memory_id == stored[3].id


async def test_the_select_command_prints_the_files_and_who_picked_them(
    server: str, workspace: TestWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = await workspace.client.add_memories(notes())
    argv = ["select", "green tea", "--max-files", "2", "--target", server, "--api-key", workspace.key]
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)  # main() runs its own loop
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.splitlines()[-1] == "2 of 4 memory files picked by search (no LLM configured)"
    view = await view_of(workspace.client)
    [tea] = [path for path, text in view.items() if f"memplane_id: {stored[2].id}" in text]
    assert captured.out.startswith(f"==> {tea} <== (")
    assert view[tea] in captured.out


async def test_an_empty_scope_selects_nothing_and_asks_no_one(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    await workspace.client.add_memories([mem("hello", type=T.MEMORY_TYPE_EPISODIC)])
    reply = await llm_client.select_memory_files("hello")
    assert (reply.method, list(reply.files), reply.offered_count) == (NONE, [], 0)
    assert llm.requests == []


async def test_contents_are_bounded_in_tokens(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    def long(runbook: str) -> str:
        return " ".join(f"step {i} of {runbook}: check the pager rota and the runbook." for i in range(400))

    await workspace.client.add_memories(
        [
            mem(long("A"), type=T.MEMORY_TYPE_PROCEDURAL, name="Runbook A", description="Incident runbook A"),
            mem(long("B"), type=T.MEMORY_TYPE_PROCEDURAL, name="Runbook B", description="Incident runbook B"),
            mem("Page Ana first.", type=T.MEMORY_TYPE_PROCEDURAL, name="Who", description="Incident contact"),
        ]
    )
    count = token_counter("o200k_base").count_text
    llm.script(pick("runbook A", "contact", "runbook B"))
    reply = await llm_client.select_memory_files("incident", max_tokens=1_000)
    assert reply.method == LLM
    a, who, b = reply.files
    assert sum(f.content_tokens for f in reply.files) <= 1_000
    assert all(f.content_tokens == count(f.content) for f in reply.files)
    assert not who.truncated  # short: whole
    assert who.content_tokens == who.file_tokens
    for cut in (a, b):
        assert cut.truncated
        assert cut.file_tokens > 1_000
        assert cut.content_tokens > 400  # the short file's leftover is shared, not lost
        view = await view_of(workspace.client)
        assert view[cut.path].startswith(cut.content)

    searched = await workspace.client.select_memory_files("incident runbook", max_tokens=300)  # no LLM
    assert searched.method == SEARCH
    assert sum(count(f.content) for f in searched.files) <= 300
    assert any(f.truncated for f in searched.files)


async def test_another_workspaces_files_are_never_offered_nor_returned(
    workspace: TestWorkspace,
    workspace_factory: WorkspaceFactory,
    llm_server: str,
    llm: FakeLLM,
) -> None:
    other = await workspace_factory()
    theirs = await other.client.add_memories(notes())
    their_file = (await other.client.select_memory_files("green tea", max_files=1)).files[0]
    assert their_file.memory_id == theirs[2].id

    # A workspace with no memory files: nothing to offer, though the other one matches.
    alone = await workspace.client.select_memory_files("green tea")
    assert (alone.method, list(alone.files)) == (NONE, [])

    mine = await workspace.client.add_memories(
        [mem("Ana prefers oolong", type=T.MEMORY_TYPE_USER, name="Oolong", description="The user drinks oolong tea")]
    )
    searched = await workspace.client.select_memory_files("green tea every morning")
    assert [f.memory_id for f in searched.files] == [mine[0].id]

    llm.script(pick("oolong", extra=(their_file.path.removeprefix("Memory/"),)))
    async with AsyncMemplaneClient(llm_server, workspace.key) as client:
        reply = await client.select_memory_files("green tea")
    assert [f.memory_id for f in reply.files] == [mine[0].id]
    assert list(reply.unknown_files) == [their_file.path.removeprefix("Memory/")]
    offered = manifest(llm.requests[0])
    assert list(offered.values()) == ["The user drinks oolong tea"]


async def test_the_200_most_recently_updated_files_are_offered(
    workspace: TestWorkspace, llm_client: AsyncMemplaneClient, llm: FakeLLM
) -> None:
    vectors = unit_vectors(205, seed=13)  # given embeddings: the model need not embed 205 texts
    ref = T.MEMORY_TYPE_REFERENCE
    old = await workspace.client.add_memories(
        [mem(f"old note {i}", type=ref, description=f"old {i}", embedding=vectors[i]) for i in range(5)]
    )
    await workspace.client.add_memories(
        [mem(f"new note {i}", type=ref, description=f"new {i}", embedding=vectors[5 + i]) for i in range(200)]
    )
    refreshed = memory_pb2.MemoryInput(description="old 0 refreshed")
    await workspace.client.update_memory(old[0].id, refreshed, ["description"])
    llm.script('{"selected_files": []}')
    reply = await llm_client.select_memory_files("notes")
    assert (reply.offered_count, reply.unoffered_count) == (200, 5)
    descriptions = list(manifest(llm.requests[0]).values())
    assert len(descriptions) == 200
    assert descriptions[0] == "old 0 refreshed"  # most recently updated first, as MEMORY.md
    assert not {f"old {i}" for i in range(1, 5)} & set(descriptions)
    assert sum(d.startswith("new ") for d in descriptions) == 199


async def test_a_bad_key_is_unauthenticated(llm_server: str) -> None:
    async with AsyncMemplaneClient(llm_server, "mp_nosuchkey_secret") as client:
        with pytest.raises(UnauthenticatedError):
            await client.select_memory_files("tea")


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": " \n\t"}, "query"),
        ({"query": "x" * 5_000}, "query"),
        ({"max_files": 6}, "max_files"),
        ({"max_files": -1}, "max_files"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 100_001}, "max_tokens"),
        ({"filter": filter_pb2.MemoryFilter(types=[T.MEMORY_TYPE_EPISODIC])}, "filter.types"),
        ({"filter": filter_pb2.MemoryFilter(include_superseded=True)}, "filter.include_superseded"),
        ({"filter": filter_pb2.MemoryFilter(include_expired=True)}, "filter.include_expired"),
        ({"filter": filter_pb2.MemoryFilter(user_id="u" * 200)}, "filter.user_id"),
        ({"filter": filter_pb2.MemoryFilter(types=[99])}, "filter.types[0]"),  # type: ignore[list-item]
    ],
)
async def test_bad_input_is_invalid_argument_naming_the_field(
    workspace: TestWorkspace, request_fields: dict[str, Any], field: str
) -> None:
    args = {"query": "tea", **request_fields}
    query = args.pop("query")
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.select_memory_files(query, **args)
    assert fields(caught.value) == [field]
