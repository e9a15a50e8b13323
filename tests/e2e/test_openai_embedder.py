"""provider=openai: embeddings from an OpenAI-compatible `/v1/embeddings` endpoint over
real HTTP (tests/fake_llm.py speaks OpenAI's wire format; OpenAI itself cannot be
reached from here). Vectors are asked for as base64 and decoded with numpy; a server
that answers float lists is read too; a failing endpoint is UNAVAILABLE, never a hang,
and one that refuses the request (a wrong key: 4xx) FAILED_PRECONDITION, not retried.
What is sent stays within OpenAI's limits, which the fake enforces as OpenAI does (HTTP
400): a long memory is embedded by its head of at most 8,191 cl100k_base tokens, and a
batch is split into requests of at most 300,000 tokens and 2,048 inputs."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator

import numpy as np
import openai
import pytest
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.errors import FailedPreconditionError, UnavailableError
from memplane.server.app import build_app
from memplane.server.embedding.base import normalize
from memplane.server.embedding.remote import OpenAIEmbedder
from memplane.server.serving import serve
from memplane.server.settings import EmbeddingSettings
from memplane.text.tokens import token_counter
from memplane.v1 import admin_pb2, retrieval_pb2
from tests.fake_llm import MAX_EMBEDDING_INPUT_TOKENS, MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_REQUEST_TOKENS, FakeLLM
from tests.fix_server import random_workspace_name, settings_for
from tests.support import mem

HEALTH_SECONDS = 30.0  # the probe's backoff reaches the endpoint well within this

TEXTS = [f"sentence number {i} about the lake" for i in range(7)]
MAX_BYTES = 32 * 1024  # limits.max_content_bytes
HEAD_TOKENS = 8191  # embedding.openai_max_input_tokens, by default
CL100K = token_counter("cl100k_base")

CHINESE = [
    "记忆服务把每一条长笔记都存进数据库，向量只覆盖开头的部分。",
    "全文检索覆盖全部内容，所以深处的句子也能按词找到。",
    "我们在周二讨论了发布计划，决定下个月迁移旧的计费接口。",
    "玛丽亚问新员工的入职清单能不能加上代码评审的礼仪。",
    "周五停电三个小时，构建集群停了，积压的任务中午才清完。",
    "读书会下个月选了一本关于灯塔看守人的小说。",
    "今年春天的雨水是往年的两倍，河边的小路封闭了一周。",
    "合唱团每周四晚上在图书馆旁边的社区礼堂排练。",
]


def _chinese(seed: int, size: int = MAX_BYTES) -> str:
    """About *size* UTF-8 bytes of Chinese notes (CHINESE shuffled by *seed*): ~1.1
    cl100k_base tokens a character, ~11,700 tokens in 32 KiB."""
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    while length + 100 < size:
        sentence = rng.choice(CHINESE)
        parts.append(sentence)
        length += len(sentence.encode())
    return "".join(parts)


def _log(seed: int, size: int = MAX_BYTES) -> str:
    """About *size* UTF-8 bytes of English log lines (timestamps, ids, numbers): ~2.3
    characters a cl100k_base token, ~14,300 tokens in 32 KiB."""
    rng = random.Random(seed)
    lines: list[str] = []
    length = 0
    while True:
        line = (
            f"2026-05-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z "
            f"worker-{rng.randint(1, 99)} job={rng.getrandbits(32):08x} "
            f"status={rng.choice(['ok', 'retry', 'failed'])} latency_ms={rng.randint(1, 9999)}"
        )
        if length + len(line) + 1 > size:
            return "\n".join(lines)
        lines.append(line)
        length += len(line) + 1


def _assert_within_limits(requests: list[dict[str, object]]) -> None:
    """Every embedding request within OpenAI's limits (which the fake would have refused)."""
    for request in requests:
        inputs = request["input"]
        assert isinstance(inputs, list)
        counts = CL100K.count_texts(inputs)
        assert len(inputs) <= MAX_EMBEDDING_INPUTS
        assert max(counts) <= HEAD_TOKENS
        assert sum(counts) <= MAX_EMBEDDING_REQUEST_TOKENS


_OPENED: list[OpenAIEmbedder] = []  # closed as the test ends (their HTTP sessions)


@pytest.fixture
async def endpoint() -> AsyncIterator[FakeLLM]:
    with FakeLLM(embedding_dimensions=24) as fake:
        try:
            yield fake
        finally:
            while _OPENED:
                await _OPENED.pop().close()


async def connect(fake: FakeLLM, *, dimensions: int | None = None, batch_size: int = 3) -> OpenAIEmbedder:
    embedder = await OpenAIEmbedder.connect(
        base_url=fake.base_url,
        api_key="sk-test",
        model="fake-embed",
        dimensions=dimensions,
        batch_size=batch_size,
        timeout_seconds=5.0,
    )
    _OPENED.append(embedder)
    return embedder


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
        try:
            got = await embedder.embed_queries(TEXTS[:2])
        finally:
            await _OPENED.pop().close()
    np.testing.assert_array_equal(got, normalize(np.stack([fake.vector(t) for t in TEXTS[:2]])))


async def test_a_200_without_a_list_of_embeddings_is_unavailable_naming_what_came() -> None:
    """An endpoint that answers 200 with something else than OpenAI's `data` list (a proxy's
    page, another API) is UNAVAILABLE saying so, not a KeyError."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"data": "not a list"}'
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    embedder = await OpenAIEmbedder.connect(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", model="m", dimensions=24, timeout_seconds=5.0
    )
    try:
        with pytest.raises(UnavailableError, match="returned no list of embeddings"):
            await embedder.embed_queries(["a question"])
    finally:
        await embedder.close()
        server.close()
        await server.wait_closed()


async def test_endpoint_errors_are_unavailable_and_its_refusals_failed_precondition(endpoint: FakeLLM) -> None:
    embedder = await connect(endpoint, dimensions=24)
    for status in (400, 401, 404):  # not retried by the openai client; no retry can help
        endpoint.fail_embeddings(1, status=status)
        with pytest.raises(FailedPreconditionError, match=f"embedding endpoint refused the request \\({status}\\b"):
            await embedder.embed_documents(TEXTS[:1])
    endpoint.fail_embeddings(3, status=503)  # the first try and both retries
    with pytest.raises(UnavailableError, match="embedding endpoint failed"):
        await embedder.embed_documents(TEXTS[:1])
    assert (await embedder.embed_documents(TEXTS[:1])).shape == (1, 24)  # and it recovers


async def test_the_fake_refuses_what_openai_refuses(endpoint: FakeLLM) -> None:
    """The fake answers as OpenAI does, read by OpenAI's own client."""
    async with openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="sk-test", max_retries=0) as client:
        too_long = _chinese(1)
        with pytest.raises(openai.BadRequestError, match="maximum context length is 8192 tokens") as refused:
            await client.embeddings.create(model="fake-embed", input=[too_long])
        assert refused.value.type == "invalid_request_error"
        within = _log(2, 16_000)  # ~7,000 tokens: within the input limit
        copies = MAX_EMBEDDING_REQUEST_TOKENS // CL100K.count_text(within) + 1
        with pytest.raises(openai.BadRequestError, match="max 300000 tokens per request") as refused:
            await client.embeddings.create(model="fake-embed", input=[within] * copies)
        assert refused.value.code == "max_tokens_per_request"
        with pytest.raises(openai.BadRequestError, match="input' is invalid"):
            await client.embeddings.create(model="fake-embed", input=["x"] * (MAX_EMBEDDING_INPUTS + 1))


async def test_a_text_past_the_endpoints_input_limit_is_embedded_by_its_head(endpoint: FakeLLM) -> None:
    embedder = await connect(endpoint, dimensions=24)
    for text in (_chinese(3), _log(4)):
        assert CL100K.count_text(text) > MAX_EMBEDDING_INPUT_TOKENS
        got = await embedder.embed_documents([text])
        [sent] = endpoint.embedding_requests[-1]["input"]
        assert text.startswith(sent)
        assert 0.95 * HEAD_TOKENS <= CL100K.count_text(sent) <= HEAD_TOKENS
        np.testing.assert_array_equal(got, normalize(endpoint.vector(sent)[None, :]))
    assert (await embedder.embed_queries([_chinese(5)])).shape == (1, 24)  # queries too


async def test_a_batch_is_split_within_the_endpoints_token_total_and_input_count(endpoint: FakeLLM) -> None:
    embedder = await connect(endpoint, dimensions=24, batch_size=4096)
    long_texts = [_log(seed, 16_000) for seed in range(50)]  # ~7,000 tokens each, ~350,000 in all
    assert sum(CL100K.count_texts(long_texts)) > MAX_EMBEDDING_REQUEST_TOKENS
    short_texts = [f"note {i}" for i in range(MAX_EMBEDDING_INPUTS + 100)]
    for texts in (long_texts, short_texts):
        endpoint.embedding_requests.clear()
        got = await embedder.embed_documents(texts)
        np.testing.assert_array_equal(got, normalize(np.stack([endpoint.vector(t) for t in texts])))
        assert len(endpoint.embedding_requests) == 2
        _assert_within_limits(endpoint.embedding_requests)


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
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
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


async def test_an_endpoint_that_refuses_the_key_is_failed_precondition_at_once_over_grpc(
    openai_server: str, endpoint: FakeLLM, admin_key: str
) -> None:
    """A 401 (a wrong key in the server's settings) is FAILED_PRECONDITION naming the
    endpoint's answer, and the SDK does not retry it: one embedding request, not the retry
    policy's five. Before, it was UNAVAILABLE, retried in vain."""
    name = random_workspace_name()
    async with AsyncMemplaneClient(openai_server, admin_key) as admin:
        await admin.create_workspace(name)
        try:
            key = (await admin.create_api_key(name)).api_key
            async with AsyncMemplaneClient(openai_server, key) as client:
                endpoint.embedding_requests.clear()
                endpoint.fail_embeddings(10, status=401)
                with pytest.raises(FailedPreconditionError, match=r"embedding endpoint refused the request \(401"):
                    await client.add_memories([mem("a note that needs a vector")])
                assert len(endpoint.embedding_requests) == 1
                endpoint.heal_embeddings()
                assert await client.add_memories([mem("a note that needs a vector")])  # nothing was stored before
                assert len((await client.list_memories()).memories) == 1
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


@contextlib.asynccontextmanager
async def _workspace_client(
    server: str, admin_key: str, quotas: admin_pb2.WorkspaceQuotas | None = None
) -> AsyncIterator[tuple[AsyncMemplaneClient, AsyncMemplaneClient, str]]:
    """The admin client, a client of a new workspace on *server* (deleted afterwards) and
    the workspace's name."""
    name = random_workspace_name()
    async with AsyncMemplaneClient(server, admin_key) as admin:
        await admin.create_workspace(name, quotas=quotas)
        try:
            async with AsyncMemplaneClient(server, (await admin.create_api_key(name)).api_key) as client:
                yield admin, client, name
        finally:
            await admin.delete_workspace(name)


async def test_memories_past_the_endpoints_input_limit_are_stored_over_grpc(
    openai_server: str, endpoint: FakeLLM, admin_key: str
) -> None:
    chinese, log = _chinese(6), _log(7)
    quotas = admin_pb2.WorkspaceQuotas(max_embedding_tokens_per_day=1_000_000)
    async with _workspace_client(openai_server, admin_key, quotas) as (admin, client, name):
        endpoint.embedding_requests.clear()
        stored = await client.add_memories([mem(chinese), mem(log)])
        sent = [text for request in endpoint.embedding_requests for text in request["input"]]
        assert len(sent) == 2  # the head of each
        assert any(chinese.startswith(s) for s in sent)
        assert any(log.startswith(s) for s in sent)
        _assert_within_limits(endpoint.embedding_requests)
        # The lexical index holds the whole text: the last line of the log is found.
        last_line = log.rsplit("\n", 1)[1]
        assert last_line not in "".join(sent)
        reply = await client.search(last_line, mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
        assert reply.hits[0].memory.id == stored[1].id
        assert [(await client.get_memory(s.id)).content for s in stored] == [chinese, log]  # whole
        # The daily embedding-token quota is charged what was sent, not the whole texts.
        assert (await admin.get_workspace_usage(name)).embedding_tokens_today == sum(CL100K.count_texts(sent))


async def test_a_batch_past_the_endpoints_token_total_is_stored_over_grpc(
    openai_server: str, endpoint: FakeLLM, admin_key: str
) -> None:
    texts = [_chinese(100 + i) for i in range(28)]  # ~11,700 tokens each, ~330,000 in all
    assert sum(CL100K.count_texts(texts)) > MAX_EMBEDDING_REQUEST_TOKENS
    async with _workspace_client(openai_server, admin_key) as (_, client, _):
        endpoint.embedding_requests.clear()
        stored = await client.add_memories([mem(t) for t in texts])
        assert len(stored) == len(texts)
        assert sum(len(request["input"]) for request in endpoint.embedding_requests) == len(texts)
        _assert_within_limits(endpoint.embedding_requests)
