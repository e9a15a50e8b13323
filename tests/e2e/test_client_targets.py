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
