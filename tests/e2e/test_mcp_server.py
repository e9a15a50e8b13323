"""`memplane mcp` driven by the official MCP SDK's own client, over both transports,
against the session's real memplane server: stdio (`stdio_client` spawns `python -m
memplane mcp` as a subprocess) and streamable HTTP (the same command with `--transport
http --port 0` in its own process; the test waits for its "serving" line, then connects
with `streamable_http_client`). Each test uses fresh workspaces with their own keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory

START_SECONDS = 60.0  # importing the SDK and grpc on 2 busy cores
TOOL_NAMES = {"search_memories", "add_memory", "get_memories", "delete_memories", "list_memories"}
SERVING = "memplane mcp: serving streamable HTTP at "


def _command(server: str, key: str, *extra: str) -> list[str]:
    return ["-m", "memplane", "mcp", "--target", server, "--api-key", key, *extra]


@contextlib.asynccontextmanager
async def _stdio(server: str, key: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=_command(server, key))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def serving_http(argv: list[str], env: dict[str, str] | None = None) -> AsyncIterator[str]:
    """`memplane mcp --transport http ...` (*argv*, the words after the program) running;
    yields its URL, read from its "serving" line on stderr; stopped with SIGTERM and awaited."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        seen: list[str] = []
        async with asyncio.timeout(START_SECONDS):
            while not (line := (await process.stderr.readline()).decode()).startswith(SERVING):
                assert line, f"memplane mcp exited ({await process.wait()}) before serving: {''.join(seen)}"
                seen.append(line)
        yield line.removeprefix(SERVING).strip()
    finally:
        if process.returncode is None:
            process.terminate()
        code = await process.wait()
        assert code in (0, -15), f"memplane mcp --transport http exited with {code}"


@contextlib.asynccontextmanager
async def _http(server: str, key: str, *extra: str) -> AsyncIterator[ClientSession]:
    async with (
        serving_http([sys.executable, *_command(server, key, "--transport", "http", "--port", "0", *extra)]) as url,
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _http_stateless(server: str, key: str) -> contextlib.AbstractAsyncContextManager[ClientSession]:
    return _http(server, key, "--stateless")


TRANSPORTS = {"stdio": _stdio, "http": _http, "http-stateless": _http_stateless}


async def _call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The structured result of a successful call (its text is the same JSON)."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    assert not result.is_error, result.content
    (text,) = result.content
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structured_content
    payload: dict[str, Any] = result.structured_content
    return payload


async def _error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a call that must fail as a tool error."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    assert result.is_error, result.structured_content
    (text,) = result.content
    assert isinstance(text, types.TextContent)
    return text.text


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_tools_add_search_get_list_delete(server: str, workspace: TestWorkspace, transport: str) -> None:
    async with TRANSPORTS[transport](server, workspace.key) as session:
        listed = await session.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert set(tools) == TOOL_NAMES
        # Each declares its result's schema; the SDK's client checks every result below against it.
        assert all(tool.output_schema and tool.output_schema["type"] == "object" for tool in listed.tools)
        assert tools["search_memories"].input_schema["required"] == ["query"]
        assert set(tools["search_memories"].input_schema["properties"]) == {
            "query",
            "top_k",
            "min_relevance",
            "user_id",
            "agent_id",
            "session_id",
        }
        assert tools["add_memory"].input_schema["required"] == ["content"]
        assert tools["get_memories"].input_schema["properties"]["ids"]["type"] == "array"
        assert {"page_size", "page_token", "user_id"} <= set(tools["list_memories"].input_schema["properties"])
        assert tools["delete_memories"].annotations is not None
        assert tools["delete_memories"].annotations.destructive_hint is True

        added = await _call(
            session, "add_memory", content="Ana drinks green tea every morning", user_id="ana", metadata={"src": "t"}
        )
        memory = added["memory"]
        assert memory["content"] == "Ana drinks green tea every morning"
        assert (memory["user_id"], memory["type"], memory["metadata"]) == ("ana", "user", {"src": "t"})
        other = await _call(session, "add_memory", content="Bo drinks black coffee", user_id="bo", type="feedback")

        hits = (await _call(session, "search_memories", query="what does Ana drink?", user_id="ana"))["hits"]
        assert [h["id"] for h in hits] == [memory["id"]]
        assert hits[0]["score"] > 0
        assert 0.25 <= hits[0]["relevance"] <= 1
        unrelated = "What is the airspeed of an unladen swallow?"
        assert (await _call(session, "search_memories", query=unrelated, min_relevance=0.25))["hits"] == []
        everyone = (await _call(session, "search_memories", query="drinks", top_k=1))["hits"]
        assert len(everyone) == 1

        got = await _call(session, "get_memories", ids=[other["memory"]["id"], memory["id"]])
        assert [m["id"] for m in got["memories"]] == [other["memory"]["id"], memory["id"]]
        assert got["memories"][0]["type"] == "feedback"

        page = await _call(session, "list_memories", page_size=1)
        assert len(page["memories"]) == 1
        assert page["next_page_token"]
        rest = await _call(session, "list_memories", page_size=1, page_token=page["next_page_token"])
        assert {page["memories"][0]["id"], rest["memories"][0]["id"]} == {memory["id"], other["memory"]["id"]}
        only_bo = await _call(session, "list_memories", user_id="bo")
        assert [m["id"] for m in only_bo["memories"]] == [other["memory"]["id"]]

        assert await _call(session, "delete_memories", ids=[memory["id"]]) == {"deleted": [memory["id"]]}
        assert f"memory {memory['id']!r} not found" in await _error(session, "get_memories", ids=[memory["id"]])
    assert [m.id for m in (await workspace.client.list_memories()).memories] == [other["memory"]["id"]]


async def test_bad_calls_are_tool_errors_naming_the_argument_and_the_server_keeps_serving(
    server: str, workspace: TestWorkspace
) -> None:
    async with _stdio(server, workspace.key) as session:
        assert await _error(session, "search_memories", query="tea", top_k="five") == (
            "invalid argument: top_k: 'five' is not of type 'integer'"
        )
        assert await _error(session, "search_memories") == "invalid argument: query: is required"
        assert (await _error(session, "search_memories", query="tea", limit=3)).startswith(
            "invalid argument: limit: unknown argument"
            " (known: query, top_k, min_relevance, user_id, agent_id, session_id)"
        )
        assert await _error(session, "add_memory", content="x", type="gossip") == (
            "invalid argument: type: 'gossip' is not one of "
            "['user', 'feedback', 'project', 'reference', 'procedural', 'tool', 'episodic']"
        )
        assert await _error(session, "get_memories", ids=[]) == "invalid argument: ids: [] should be non-empty"
        # Past the schema, memplane's own checks, their fields named as the tool's arguments.
        too_many = await _error(session, "search_memories", query="tea", top_k=10**6)
        assert too_many.startswith("invalid argument: top_k: must be between 1 and "), too_many
        assert (await _error(session, "get_memories", ids=["not-a-uuid"])).startswith("invalid argument: ids[0]: ")
        long_content = await _error(session, "add_memory", content="x" * 10**6)
        assert long_content.startswith("invalid argument: content: "), long_content
        missing = str(uuid.uuid4())
        assert await _error(session, "get_memories", ids=[missing]) == f"NotFoundError: memory {missing!r} not found"
        assert await _error(session, "no_such_tool") == (
            "unknown tool 'no_such_tool'; the tools are: "
            "search_memories, add_memory, get_memories, delete_memories, list_memories"
        )
        # Nothing above stored anything, and the server still answers.
        assert (await _call(session, "list_memories"))["memories"] == []
        stored = await _call(session, "add_memory", content="still serving")
        assert stored["memory"]["content"] == "still serving"


async def test_another_workspaces_memory_is_not_found(
    server: str, workspace: TestWorkspace, workspace_factory: WorkspaceFactory
) -> None:
    other = await workspace_factory()
    (theirs,) = await other.client.add_memories([memory_pb2.MemoryInput(content="Cy's locker code is 4417")])
    async with _http(server, workspace.key) as session:
        not_found = f"NotFoundError: memory {theirs.id!r} not found"
        assert await _error(session, "get_memories", ids=[theirs.id]) == not_found
        # One id not in this workspace: the call fails naming it and deletes nothing, not even the others.
        mine = (await _call(session, "add_memory", content="my locker code is 1234"))["memory"]["id"]
        refused = await _error(session, "delete_memories", ids=[mine, theirs.id])
        assert refused == not_found
        assert [h["id"] for h in (await _call(session, "search_memories", query="locker code"))["hits"]] == [mine]
        assert [m["id"] for m in (await _call(session, "list_memories"))["memories"]] == [mine]
    assert (await other.client.get_memory(theirs.id)).content == "Cy's locker code is 4417"
    assert (await workspace.client.get_memory(mine)).id == mine


async def _exits(*argv: str) -> tuple[int | None, bytes, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), START_SECONDS)
    return process.returncode, out, err.decode()


async def test_a_refused_key_stops_the_server_at_start(server: str, workspace: TestWorkspace) -> None:
    bad = f"mp_{uuid.uuid4().hex[:16]}_{uuid.uuid4().hex}"
    code, out, err = await _exits(*_command(server, bad))
    assert code == 1
    assert out == b""  # nothing on the MCP channel
    assert err.startswith(f"memplane mcp: memplane at {server} refused the API key: "), err


async def test_an_unreachable_memplane_or_a_taken_port_stops_the_server_at_start(
    server: str, workspace: TestWorkspace
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with socket.socket() as closed:  # bound, never listening: connections are refused
            closed.bind(("127.0.0.1", 0))
            unreachable = f"127.0.0.1:{closed.getsockname()[1]}"
            code, out, err = await _exits(*_command(unreachable, workspace.key))
        assert (code, out) == (1, b"")
        assert err.startswith(f"memplane mcp: cannot use memplane at {unreachable}: UnavailableError: "), err
        port = str(taken.getsockname()[1])  # this test listens there
        code, out, err = await _exits(*_command(server, workspace.key, "--transport", "http", "--port", port))
    assert (code, out) == (1, b"")
    assert err.startswith(f"memplane mcp: cannot listen on 127.0.0.1:{port}: "), err


async def test_a_key_revoked_while_serving_makes_each_call_a_tool_error(
    server: str, workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    async with _stdio(server, workspace.key) as session:
        await _call(session, "add_memory", content="before the revocation")
        await admin_client.revoke_api_key(workspace.key_id)
        refused = await _error(session, "search_memories", query="revocation")
        assert refused.startswith("memplane refused the API key this MCP server was started with: "), refused
        assert (await session.list_tools()).tools  # the server itself is still up
