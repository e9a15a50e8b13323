"""The admin commands a new operator types (`memplane workspace create`, `memplane key
list|revoke`) against the session server, and help texts that show the environment's
defaults."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from memplane.cli.main import build_parser, main
from memplane.client.aio import AsyncMemplaneClient
from memplane.server.settings import Settings


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    # main() runs its own event loop: run it in a worker thread.
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)
    return code, capsys.readouterr().out


async def test_workspace_create_prints_the_key_id_and_key_list_shows_it_until_revoked(
    server: str, admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    conn = ["--target", server, "--api-key", admin_key]
    code, out = await _run(["workspace", "create", name, *conn], capsys)
    assert code == 0, out
    found = re.search(r"^key id (\S+)$", out, re.MULTILINE)
    key = re.search(r"^API key \(shown once\): (\S+)$", out, re.MULTILINE)
    assert found, out
    assert key, out
    key_id = found.group(1)
    async with AsyncMemplaneClient(server, key.group(1)) as client:  # the printed key works
        assert await client.check_health("") == "SERVING"
        await client.search("anything", top_k=1)

    code, out = await _run(["key", "list", name, *conn], capsys)
    assert code == 0, out
    (line,) = out.splitlines()
    assert line.startswith(f"{key_id}\tvalid\tcreated "), line
    assert line.endswith("\tcreated by the CLI"), line

    code, out = await _run(["key", "revoke", key_id, *conn], capsys)
    assert code == 0, out
    code, out = await _run(["key", "list", name, *conn], capsys)
    assert code == 0, out
    assert re.fullmatch(rf"{key_id}\trevoked \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\tcreated \S+\tcreated by the CLI\n", out)


def test_serve_help_shows_the_port_and_host_the_environment_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMPLANE_GRPC__PORT", "6123")
    monkeypatch.setenv("MEMPLANE_GRPC__HOST", "192.0.2.7")
    parser = build_parser(Settings())
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = " ".join(serve.format_help().split())
    assert "port (default 6123: MEMPLANE_GRPC__PORT" in text
    assert "address to bind (default 192.0.2.7: MEMPLANE_GRPC__HOST)" in text


async def test_key_commands_name_an_unknown_workspace_or_key_and_exit_1(
    server: str, admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = ["--target", server, "--api-key", admin_key]
    missing = f"cli-missing-{uuid.uuid4().hex[:8]}"
    code = await asyncio.get_running_loop().run_in_executor(None, main, ["key", "list", missing, *conn])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "NotFoundError" in captured.err
    assert missing in captured.err
    code = await asyncio.get_running_loop().run_in_executor(None, main, ["key", "list", "Not A Name!", *conn])
    captured = capsys.readouterr()
    assert code == 1
    assert "InvalidArgumentError" in captured.err
    assert "workspace" in captured.err
