"""The snippets of README.md and of the guides run as written against the session server (the
mem0, AgentScope and MCP pages have their own runners beside their tests). README.md#using-it: its shell
lines (all but `memplane serve`, which the session server stands for, and the LoCoMo
import and eval, which tests/e2e/test_locomo_cli*.py and the quickstart run) through the
installed `memplane` command, and its Python snippet as a script. The issue this answers:
the snippet had no `asyncio.run`, no key and no user filter, so it did not run and would
have ranked another user's memory first. docs/guides/compaction.md: the PrepareContext loop
with OpenAI-shaped messages (it used `openai_messages`, `summary` and `api_key` from
nowhere); docs/guides/extraction.md and docs/guides/sandboxes.md: their Python snippets."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.docs_text import fenced, read, section
from tests.fix_server import TestWorkspace, random_workspace_name
from tests.support import mem

SKIPPED = ("memplane serve", "memplane import locomo", "memplane eval locomo")


def _section_blocks(language: str) -> list[str]:
    return fenced(section("README.md", "Using it"), language)


def _snippet(path: str, needle: str) -> str:
    """The one Python block of the page at *path* that holds *needle*."""
    (snippet,) = [block for block in fenced(read(path), "python") if needle in block]
    return snippet


def _env(server: str, api_key: str, admin_key: str, home: Path) -> dict[str, str]:
    # HOME elsewhere: nothing reads or writes the developer's credentials.json.
    return {**os.environ, "MEMPLANE_TARGET": server, "MEMPLANE_API_KEY": api_key, "MEMPLANE_ADMIN_KEY": admin_key,
            "HOME": str(home)}  # fmt: skip


async def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    """Run *argv* to its end (asynchronously: the session server serves on this loop) and
    return its stdout; fails the test with its stderr on a non-zero exit."""
    process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=PIPE, stderr=PIPE, cwd=cwd)
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, f"{argv}: {err.decode()}"
    return out.decode()


async def test_the_shell_lines_run_as_written(
    server: str, admin_key: str, admin_client: AsyncMemplaneClient, workspace: TestWorkspace, tmp_path: Path
) -> None:
    (block,) = _section_blocks("bash")
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    commands = [line for line in lines if line.startswith("memplane ") and not line.startswith(SKIPPED)]
    assert len(commands) == 5, commands  # add, search, workspace create, key create, export
    name = random_workspace_name()
    env = _env(server, workspace.key, admin_key, tmp_path)
    memplane = str(Path(sys.executable).with_name("memplane"))
    try:
        argvs = [[memplane, *shlex.split(command.replace("team-a", name))[1:]] for command in commands]
        outputs = [await _run(argv, env, cwd=tmp_path) for argv in argvs]
    finally:
        await admin_client.delete_workspace(name)
    _added, found, created, key, _exported = outputs
    assert "Lisbon" in found  # the memory just added, in alice's scope
    assert re.search(r"API key \(shown once\): mp_", created), created
    assert re.search(r"^key id \S+$", key, flags=re.M), key
    assert "Lisbon" in (tmp_path / "ws.jsonl").read_text()  # the workspace exported where the command ran


async def test_the_python_snippet_runs_as_written_and_finds_only_alices_memory(
    server: str, admin_key: str, workspace: TestWorkspace, tmp_path: Path
) -> None:
    (snippet,) = _section_blocks("python")
    other = await workspace.client.search("drink", top_k=1)  # nothing yet
    assert not other.hits

    await workspace.client.add_memories(  # another user's drink, worded to outrank alice's
        [
            memory_pb2.MemoryInput(
                content="what does bob drink? bob drinks coffee", scope=memory_pb2.Scope(user_id="bob")
            )
        ]
    )
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    out = await _run([sys.executable, str(script)], _env(server, workspace.key, admin_key, tmp_path))
    rows = out.strip().splitlines()
    assert rows, out
    assert rows[0].endswith("I prefer green tea"), out
    assert "coffee" not in out  # the filter names alice


async def test_the_compaction_snippet_runs_as_written_and_summarises(
    server: str, admin_key: str, workspace: TestWorkspace, tmp_path: Path
) -> None:
    snippet = _snippet("docs/guides/compaction.md", "client.prepare_context(")
    script = tmp_path / "compaction.py"
    script.write_text(snippet)
    out = await _run([sys.executable, str(script)], _env(server, workspace.key, admin_key, tmp_path))
    kept = int(out.split(" messages kept of 81", 1)[0])
    assert 1 < kept < 81, out  # the system prompt and the newest turns; the rest summarised
    assert "Extractive summary" in out  # no LLM on the session server: the extractive summary
    transcript = await workspace.client.get_transcript("s-42", page_size=100)
    # every summarised turn is kept in the session's transcript, marked compacted
    assert len(transcript.messages) == 81 - kept  # 80 turns less the kept ones (the system prompt is not a turn)
    assert all(m.compacted for m in transcript.messages)


async def test_the_extraction_snippet_runs_as_written(
    server: str, admin_key: str, workspace: TestWorkspace, tmp_path: Path
) -> None:
    # The session server has no LLM: the snippet meets the rules extractor (the LLM path's
    # own tests are tests/e2e/test_extraction.py).
    snippet = _snippet("docs/guides/extraction.md", "extract=True, wait=True")
    script = tmp_path / "extraction.py"
    script.write_text(snippet)
    out = await _run([sys.executable, str(script)], _env(server, workspace.key, admin_key, tmp_path))
    assert out.splitlines()[0].startswith("episodic+rules"), out  # no job without an LLM
    assert out.splitlines()[1] == "MEMORY_TYPE_USER I work at a bakery now.", out  # the statement, a user memory


async def test_the_file_selection_snippet_runs_as_written(
    server: str, admin_key: str, workspace: TestWorkspace, tmp_path: Path
) -> None:
    # The session server has no LLM: hybrid search picks (the LLM path's own tests are
    # tests/e2e/test_file_selection.py).
    await workspace.client.add_memories(
        [
            mem("Alex is vegetarian", type=memory_pb2.MEMORY_TYPE_USER, description="Diet", user_id="alex"),
            mem("Bo cooks pasta", type=memory_pb2.MEMORY_TYPE_USER, description="Bo's cooking", user_id="bo"),
        ]
    )
    snippet = _snippet("docs/guides/sandboxes.md", "client.select_memory_files(")
    script = tmp_path / "pick_files.py"  # not select.py: that would shadow the stdlib module
    script.write_text(snippet)
    out = await _run([sys.executable, str(script)], _env(server, workspace.key, admin_key, tmp_path))
    lines = out.splitlines()
    assert lines[0] == "SELECTION_METHOD_SEARCH no LLM configured", out
    assert re.fullmatch(r"Memory/user_alex-is-vegetarian_[0-9a-f]{8}\.md \d+ ", lines[1]), out
    assert "Bo" not in out  # the filter names alex
