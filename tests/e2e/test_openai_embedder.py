"""provider=openai: embeddings from an OpenAI-compatible `/v1/embeddings` endpoint over
real HTTP (tests/fake_llm.py speaks OpenAI's wire format; OpenAI itself cannot be
reached from here). Vectors are asked for as base64 and decoded with numpy; a server
that answers float lists is read too; a failing endpoint is UNAVAILABLE, never a hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest
from pydantic import SecretStr

from memplane.api.server import start_server
from memplane.app import build_app
from memplane.client import AsyncMemplaneClient
from memplane.embedding.base import normalize
from memplane.embedding.remote import OpenAIEmbedder
from memplane.errors import UnavailableError
from memplane.settings import EmbeddingSettings
from memplane.v1 import retrieval_pb2
from tests.fake_llm import FakeLLM
from tests.fix_server import random_workspace_name, settings_for
from tests.support import mem

HEALTH_SECONDS = 30.0  # the probe's backoff reaches the endpoint well within this

TEXTS = [f"sentence number {i} about the lake" for i in range(7)]


@pytest.fixture
def endpoint() -> Iterator[FakeLLM]:
    with FakeLLM(embedding_dimensions=24) as fake:
        yield fake


async def connect(fake: FakeLLM, *, dimensions: int | None = None) -> OpenAIEmbedder:
    return await OpenAIEmbedder.connect(
        base_url=fake.base_url,
        api_key="sk-test",
        model="fake-embed",
        dimensions=dimensions,
        batch_size=3,
        timeout_seconds=5.0,
    )


async def test_vectors_come_as_base64_and_decode_to_the_served_floats(endpoint: FakeLLM) -> None:
    embedder = await connect(endpoint)
    assert embedder.dimensions == 24  # probed once
    assert embedder.model_id == "openai/fake-embed"
    got = await embedder.embed_documents(TEXTS)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, normalize(np.stack([endpoint.vector(t) for t in TEXTS])))
    calls = endpoint.embedding_requests[1:]  # after the probe
    assert [len(c["input"]) for c in calls] == [3, 3, 1]
    assert {c["encoding_format"] for c in endpoint.embedding_requests} == {"base64"}
    assert (await embedder.embed_queries([])).shape == (0, 24)


async def test_a_server_answering_float_lists_is_read_the_same() -> None:
    with FakeLLM(embedding_dimensions=24, floats_only=True) as fake:
        embedder = await connect(fake, dimensions=24)
        got = await embedder.embed_queries(TEXTS[:2])
    np.testing.assert_array_equal(got, normalize(np.stack([fake.vector(t) for t in TEXTS[:2]])))


async def test_endpoint_errors_are_unavailable(endpoint: FakeLLM) -> None:
    embedder = await connect(endpoint, dimensions=24)
    endpoint.fail_embeddings(1, status=400)  # not retried by the openai client
    with pytest.raises(UnavailableError, match="embedding endpoint failed"):
        await embedder.embed_documents(TEXTS[:1])
    endpoint.fail_embeddings(3, status=503)  # the first try and both retries
    with pytest.raises(UnavailableError, match="embedding endpoint failed"):
        await embedder.embed_documents(TEXTS[:1])
    assert (await embedder.embed_documents(TEXTS[:1])).shape == (1, 24)  # and it recovers


@pytest.fixture
async def openai_server(
    endpoint: FakeLLM, pg_dsn: str, admin_key: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A memplane server whose embedder is the endpoint (built from its settings)."""
    base = settings_for(tmp_path_factory.mktemp("openai-server"), pg_dsn, admin_key)
    embedding = EmbeddingSettings(
        provider="openai", base_url=endpoint.base_url, api_key=SecretStr("sk-test"), model="fake-embed", timeout=5.0
    )
    app = await build_app(base.model_copy(update={"embedding": embedding}))
    running = await start_server(app, host="127.0.0.1", port=0)
    yield f"127.0.0.1:{running.port}"
    await running.stop(0)
    await app.close()


async def test_a_server_on_the_endpoint_writes_and_searches_over_grpc(
    openai_server: str, endpoint: FakeLLM, admin_key: str
) -> None:
    name = random_workspace_name()
    async with AsyncMemplaneClient(openai_server, admin_key) as admin:
        created = await admin.create_workspace(name)
        try:
            assert (created.embedding_model, created.embedding_dimensions) == ("openai/fake-embed", 24)
            key = (await admin.create_api_key(name)).api_key
            async with AsyncMemplaneClient(openai_server, key) as client:
                stored = await client.add_memories([mem(t) for t in TEXTS[:4]])
                # The served vector of a stored text is its own nearest neighbour.
                reply = await client.search(TEXTS[2], mode=retrieval_pb2.SEARCH_MODE_VECTOR)
                assert reply.hits[0].memory.id == stored[2].id
                assert reply.hits[0].vector.score == pytest.approx(1.0, abs=1e-5)
                # One server-side embedding call (three tries) fails: the SDK's read retry gets through.
                endpoint.fail_embeddings(3, status=503)
                assert (await client.search("anything new")).hits
            async with AsyncMemplaneClient(openai_server, key, retry_reads=False) as once:
                # The failure above marked the endpoint down; its probe must be done before
                # the next failures are scripted, or it would take them.
                await _health_until(once, {"memplane.v1.RetrievalService": "SERVING"}, "after the first failure")
                endpoint.fail_embeddings(3, status=503)
                with pytest.raises(UnavailableError):
                    await once.search("anything else new")
        finally:
            await admin.delete_workspace(name)


async def _health_until(client: AsyncMemplaneClient, expected: dict[str, str], what: str) -> None:
    """Poll the health service until every service in *expected* reports its status."""
    deadline = time.monotonic() + HEALTH_SECONDS
    while True:
        seen = {service: await client.check_health(service) for service in expected}
        if seen == expected:
            return
        assert time.monotonic() < deadline, f"{what}: health is {seen}"
        await asyncio.sleep(0.05)  # between looks at the health service


async def test_an_unreachable_endpoint_makes_the_embedding_services_not_serving_until_it_answers(
    openai_server: str, endpoint: FakeLLM, admin_key: str
) -> None:
    retrieval, writeback = "memplane.v1.RetrievalService", "memplane.v1.WriteBackService"
    others = {"": "SERVING", "memplane.v1.CompactionService": "SERVING", "memplane.v1.AdminService": "SERVING"}
    name = random_workspace_name()
    async with AsyncMemplaneClient(openai_server, admin_key) as admin:
        await admin.create_workspace(name)
        try:
            key = (await admin.create_api_key(name)).api_key
            async with AsyncMemplaneClient(openai_server, key, retry_reads=False) as client:
                await _health_until(client, {retrieval: "SERVING", writeback: "SERVING", **others}, "before")
                endpoint.fail_embeddings(10_000, status=503)  # down until healed
                with pytest.raises(UnavailableError):
                    await client.search("a question nobody asked before")
                down = {retrieval: "NOT_SERVING", writeback: "NOT_SERVING", **others}
                await _health_until(client, down, "while the endpoint fails")
                endpoint.heal_embeddings()
                await _health_until(client, {retrieval: "SERVING", writeback: "SERVING", **others}, "once it answers")
                [stored] = await client.add_memories([mem("the endpoint answers again")])
                assert (await client.search("does the endpoint answer again")).hits[0].memory.id == stored.id
        finally:
            await admin.delete_workspace(name)
