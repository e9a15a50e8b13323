"""Imported API keys (the operator's path: write the key to a Secret, then register it)
and ListApiKeys, over real gRPC."""

from __future__ import annotations

import pytest

from memplane.client import AsyncMemplaneClient, generate_api_key
from memplane.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    KeyRevokedError,
    NotFoundError,
    UnauthenticatedError,
)
from tests.fix_server import WorkspaceFactory
from tests.support import fields


async def test_importing_a_key_is_idempotent_and_the_key_works(
    server: str, workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    key_id, api_key = generate_api_key()
    first = await admin_client.create_api_key(ws.name, "operator", api_key=api_key)
    again = await admin_client.create_api_key(ws.name, "operator", api_key=api_key)  # a retry after a lost reply
    assert (first.key_id, first.api_key) == (again.key_id, again.api_key) == (key_id, api_key)
    listed = (await admin_client.list_api_keys(ws.name)).api_keys
    assert sorted(k.key_id for k in listed) == sorted([ws.key_id, key_id])  # registered once
    async with AsyncMemplaneClient(server, api_key) as client:
        assert (await client.list_memories()).total_size == 0


async def test_an_imported_key_cannot_take_over_another_key_or_come_back_revoked(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    mine, other = await workspace_factory(), await workspace_factory()
    key_id, api_key = generate_api_key()
    await admin_client.create_api_key(mine.name, api_key=api_key)
    with pytest.raises(AlreadyExistsError):  # the same key id in another workspace
        await admin_client.create_api_key(other.name, api_key=api_key)
    _, forged = generate_api_key()
    with pytest.raises(AlreadyExistsError):  # the same key id with another secret
        await admin_client.create_api_key(mine.name, api_key=f"mp_{key_id}_{forged.split('_')[2]}")
    await admin_client.revoke_api_key(key_id)
    with pytest.raises(KeyRevokedError) as caught:
        await admin_client.create_api_key(mine.name, api_key=api_key)
    assert isinstance(caught.value, FailedPreconditionError)
    [revoked] = [k for k in (await admin_client.list_api_keys(mine.name)).api_keys if k.key_id == key_id]
    assert revoked.HasField("revoke_time")


async def test_bad_imports_and_listings_are_named(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    for bad in ("not-a-key", "mp_abc_short", "mp_a b_" + "x" * 43, "mp__" + "x" * 43):
        with pytest.raises(InvalidArgumentError) as caught:
            await admin_client.create_api_key(ws.name, api_key=bad)
        assert fields(caught.value) == ["api_key"]
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.list_api_keys(ws.name, page_size=5000, page_token="bad token!")
    assert fields(caught.value) == ["page_size", "page_token"]
    with pytest.raises(NotFoundError):
        await admin_client.list_api_keys("t-no-such-workspace")


async def test_list_api_keys_pages_by_key_id(
    server: str, workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    made = {ws.key_id} | {(await admin_client.create_api_key(ws.name, f"k{i}")).key_id for i in range(4)}
    seen: list[str] = []
    token = ""
    while True:
        page = await admin_client.list_api_keys(ws.name, page_size=2, page_token=token)
        assert len(page.api_keys) <= 2
        assert all(k.workspace == ws.name and k.create_time.seconds > 0 for k in page.api_keys)
        seen += [k.key_id for k in page.api_keys]
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(made)
    await admin_client.revoke_api_key(ws.key_id)
    async with AsyncMemplaneClient(server, ws.key) as client:
        with pytest.raises(UnauthenticatedError):
            await client.list_memories()
