"""Issue 13's acceptance path for the file view: a real AgentScope `Agent` with the real
`AgenticMemoryMiddleware` and its own Read / Write tools (the scripted OpenAI-compatible
model server of tests/fake_llm.py decides the tool calls) works in a local sandbox
memplane rendered; it reads MEMORY.md, rewrites a memory file, and after a sync the edit
is found by SearchMemories from another agent of the workspace, and by no other
workspace."""

from __future__ import annotations

from pathlib import Path

from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.middleware import AgenticMemoryMiddleware
from agentscope.model import OpenAIChatModel
from agentscope.permission import AdditionalWorkingDirectory, PermissionContext, PermissionMode
from agentscope.state import AgentState
from agentscope.tool import Read, Toolkit, Write

from memplane.client import AsyncMemplaneClient
from memplane.filesync import sync_once
from memplane.filesync.convert import memory_from_proto
from memplane.mdview.names import file_name
from memplane.sandbox import LocalSandboxes
from memplane.text.tokens import DEFAULT_ENCODING, token_counter
from memplane.v1 import memory_pb2
from tests.fake_llm import FakeLLM, ToolCall, ToolCalls
from tests.fix_server import TestWorkspace, WorkspaceFactory

COUNT = token_counter(DEFAULT_ENCODING).count_text


async def test_an_agentscope_agents_write_is_found_by_another_agent_after_a_sync(
    server: str,
    admin_client: AsyncMemplaneClient,
    workspace: TestWorkspace,
    workspace_factory: WorkspaceFactory,
    llm: FakeLLM,
    tmp_path: Path,
) -> None:
    (tea,) = await workspace.client.add_memories(
        [memory_pb2.MemoryInput(content="Alice drinks green tea", name="Tea", description="what Alice drinks")]
    )
    backend = LocalSandboxes(tmp_path / "sandboxes")
    handle = await backend.ensure(workspace.name)
    await sync_once(workspace.client, backend, handle, count_tokens=COUNT)
    relative = f"Memory/{file_name(memory_from_proto(tea))}"
    path = f"{handle.root}/{relative}"
    rendered = (await backend.read_file(handle, relative)).decode()
    edited = rendered.replace("Alice drinks green tea", "Alice switched to hibiscus infusion")

    llm.script(
        ToolCalls((ToolCall("Read", {"file_path": path}, id="call_r1"),)),
        ToolCalls((ToolCall("Write", {"file_path": path, "content": edited}, id="call_w1"),)),
        "Noted: hibiscus now.",
    )
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-test", base_url=llm.base_url), model="fake-model", stream=False
    )
    middleware = AgenticMemoryMiddleware(
        workdir=handle.root, parameters=AgenticMemoryMiddleware.Parameters(retrieval_async=False)
    )
    permissions = PermissionContext(
        mode=PermissionMode.DONT_ASK,
        working_directories={handle.root: AdditionalWorkingDirectory(path=handle.root, source="session")},
    )
    agent = Agent(
        name="assistant",
        system_prompt="You help Alice.",
        model=model,
        middlewares=[middleware],
        toolkit=Toolkit(tools=[Read(), Write()]),
        state=AgentState(permission_context=permissions),
    )
    reply = await agent.reply(UserMsg(name="alice", content="I drink hibiscus now, remember that."))
    assert reply.get_text_content() == "Noted: hibiscus now."
    first = llm.requests[0]
    assert "- [Tea](" in str(first["messages"][0]["content"])  # MEMORY.md in the agent's system prompt
    assert (await backend.read_file(handle, relative)).decode() == edited  # written by AgentScope's Write tool

    report = await sync_once(workspace.client, backend, handle, count_tokens=COUNT)
    assert report.updated == [relative]
    other_key = await admin_client.create_api_key(workspace.name, "another agent")
    async with AsyncMemplaneClient(server, other_key.api_key) as other_agent:
        hits = (await other_agent.search("hibiscus infusion", top_k=3)).hits
    assert [h.memory.id for h in hits][:1] == [tea.id]
    assert hits[0].memory.content == "Alice switched to hibiscus infusion"
    stranger = await workspace_factory()
    await stranger.client.add_memories([memory_pb2.MemoryInput(content="Carol collects stamps")])
    assert tea.id not in {h.memory.id for h in (await stranger.client.search("hibiscus infusion", top_k=10)).hits}
