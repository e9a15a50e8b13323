"""The client routes each service to its own address when told (a cluster runs each
service behind its own Service), and reads them from a MemoryWorkspace's Secret."""

from __future__ import annotations

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from tests.fix_server import TestWorkspace
from tests.support import mem, unit_vectors

NOWHERE = "127.0.0.1:1"  # nothing listens on port 1


async def test_each_service_goes_to_its_own_target(server: str, workspace: TestWorkspace) -> None:
    env = {"MEMPLANE_TARGET": server, "MEMPLANE_API_KEY": workspace.key, "MEMPLANE_WRITEBACK_TARGET": NOWHERE}
    async with AsyncMemplaneClient.from_env(env, timeout=3) as client:
        assert (await client.list_memories()).total_size == 0  # retrieval: the main target
        with pytest.raises(UnavailableError):
            await client.add_memories([mem("goes nowhere", embedding=unit_vectors(1, seed=7)[0])])
    async with AsyncMemplaneClient(NOWHERE, workspace.key, timeout=3, targets={"writeback": server}) as client:
        await client.add_memories([mem("goes to the server", embedding=unit_vectors(1, seed=8)[0])])
        with pytest.raises(UnavailableError):
            await client.list_memories()


def test_unknown_services_and_missing_variables_are_named() -> None:
    with pytest.raises(ValueError, match="search"):
        AsyncMemplaneClient("127.0.0.1:1", targets={"search": "x:1"})
    with pytest.raises(KeyError, match="MEMPLANE_API_KEY"):
        AsyncMemplaneClient.from_env({"MEMPLANE_TARGET": "x:1"})


async def test_the_cli_honours_each_services_target_from_the_mounted_secret(
    server: str, workspace: TestWorkspace
) -> None:
    """`memplane add` / `search` in an agent Pod with the workspace's Secret as its environment:
    MEMPLANE_TARGET names one Deployment, MEMPLANE_WRITEBACK_TARGET another (here: nothing
    listens at MEMPLANE_TARGET, so only a CLI that routes by service succeeds)."""
    import asyncio
    import os
    import sys

    env = {
        **os.environ,
        "MEMPLANE_TARGET": NOWHERE,
        "MEMPLANE_API_KEY": workspace.key,
        "MEMPLANE_RETRIEVAL_TARGET": server,
        "MEMPLANE_WRITEBACK_TARGET": server,
    }

    async def cli(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    code, out = await cli("add", "the agent pod keeps its notes in memplane")
    assert code == 0, out
    code, out = await cli("search", "where are the agent pod's notes")
    assert code == 0, out
    assert "keeps its notes in memplane" in out
