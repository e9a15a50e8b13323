"""docs/integrations/mcp.md, run as written against the session's real server: its
fenced blocks are read from the page, the placeholders `mp_...` and `127.0.0.1:50051`
replaced by a fresh workspace's key and the server's target, and `memplane` found on
PATH (this venv's bin/). The shell block runs line by line — but its `pip install`
line: this venv has the extra; tests/e2e/test_client_only_install.py installs wheels —
with `memplane mcp` (stdio) reading an empty stdin and the `--transport http` line left
running for the HTTP snippet; the JSON config is handed to the SDK's stdio_client; each
Python snippet runs in its own interpreter (they call `asyncio.run`, and the server under
test runs on this test's event loop)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.docs_text import read
from tests.e2e.test_mcp_server import START_SECONDS, TOOL_NAMES, serving_http
from tests.fix_server import TestWorkspace

PAGE = "docs/integrations/mcp.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks(workspace: TestWorkspace, server: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of docs/integrations/mcp.md, placeholders filled."""
    page = read(PAGE).replace("mp_...", workspace.key).replace("127.0.0.1:50051", server)
    return FENCE.findall(page)


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


async def _python(snippet: str, env: dict[str, str]) -> list[str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", snippet, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), START_SECONDS * 2)
    assert child.returncode == 0, err.decode()
    return out.decode().splitlines()


async def test_the_json_config_starts_a_server_with_the_five_tools(server: str, workspace: TestWorkspace) -> None:
    (config,) = [json.loads(text) for lang, text in _blocks(workspace, server) if lang == "json"]
    entry = config["mcpServers"]["memplane"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env={**_env(), **entry["env"]})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert {tool.name for tool in (await session.list_tools()).tools} == TOOL_NAMES
        searched = await session.call_tool("search_memories", {"query": "anything"})
        assert not searched.is_error, searched.content


async def test_the_shell_and_python_snippets_run(server: str, workspace: TestWorkspace) -> None:
    blocks = _blocks(workspace, server)
    (shell,) = [text for lang, text in blocks if lang == "bash"]
    stdio_snippet, http_snippet = [text for lang, text in blocks if lang == "python"]
    env = {k: v for k, v in _env().items() if not k.startswith("MEMPLANE_")}
    http_line: list[str] = []
    for line in shell.splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[:2] == ["pip", "install"]:
            continue
        if words[0] == "export":
            for word in words[1:]:
                name, _, value = word.partition("=")
                env[name] = value
        elif "--transport" in words:
            http_line = words
        else:  # stdio: serves until stdin closes, so an empty stdin ends it at once
            child = await asyncio.create_subprocess_exec(
                *words, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
            )
            out, _ = await asyncio.wait_for(child.communicate(), START_SECONDS)
            assert (child.returncode, out) == (0, b""), line
    assert env["MEMPLANE_API_KEY"] == workspace.key
    assert env["MEMPLANE_TARGET"] == server

    assert await _python(stdio_snippet, env) == [
        str(sorted(TOOL_NAMES)),
        "Alice is allergic to peanuts",
    ]
    async with serving_http(http_line, env) as url:
        assert url == "http://127.0.0.1:8765/mcp"
        (line,) = await _python(http_snippet, env)
    memory_id, content = line.split(" ", 1)
    assert content == "Alice is allergic to peanuts"
    assert (await workspace.client.get_memory(memory_id)).scope.user_id == "alice"
