"""The rerank stage of SearchMemories over real gRPC, against a loopback endpoint speaking
Cohere's /v2/rerank protocol (tests/fake_rerank.py): the reranker's order wins, a
reranker that hangs, fails, is unreachable or answers malformed leaves the fused order and
the reply says so, only the best top_n are re-scored, and a server
without a reranker replies as before. TEI's protocol is checked on the client itself."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.server.app import build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.retrieval.rerank import Reranker, RerankError
from memplane.server.serving import serve
from memplane.server.settings import RerankSettings
from memplane.v1 import retrieval_pb2
from tests.fake_rerank import FakeReranker
from tests.fix_server import TestWorkspace, settings_for
from tests.support import mem

TIMEOUT_SECONDS = 1.0
TOP_N = 20
NAMES = ("Alpha", "Beta", "Gamma", "Delta", "Epsilon")


@pytest.fixture(scope="module")
def fake_reranker() -> Iterator[FakeReranker]:
    """The loopback endpoint (one per module)."""
    with FakeReranker() as fake:
        yield fake


@pytest.fixture
def reranker(fake_reranker: FakeReranker) -> Iterator[FakeReranker]:
    """The endpoint with no scores, failures or log for this test; held calls released after."""
    fake_reranker.reset()
    yield fake_reranker
    fake_reranker.reset()


@asynccontextmanager
async def _serve(
    data_dir: Path, pg_dsn: str, admin_key: str, embedder: CachedEmbedder, url: str, top_n: int
) -> AsyncIterator[str]:
    """A server over the session database whose rerank stage is *url* (Cohere protocol,
    timeout 1 s); yields its target."""
    settings = settings_for(data_dir, pg_dsn, admin_key).model_copy(
        update={
            "rerank": RerankSettings(
                url=url,
                protocol="cohere",
                model="fake-rerank-v1",
                api_key=SecretStr("rk-test"),
                top_n=top_n,
                timeout=TIMEOUT_SECONDS,
            )
        }
    )
    app = await build_app(settings, embedder=embedder)
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
    try:
        yield f"127.0.0.1:{running.port}"
    finally:
        await running.stop(0)
        await app.close()


@pytest.fixture(scope="module")
async def rerank_server(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    fake_reranker: FakeReranker,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[str]:
    """Target of a server whose rerank stage is the fake (top_n 20, timeout 1 s)."""
    data_dir = tmp_path_factory.mktemp("memplane-rerank")
    url = f"{fake_reranker.base_url}/v2/rerank"
    async with _serve(data_dir, pg_dsn, admin_key, embedder, url, TOP_N) as target:
        yield target


@pytest.fixture
async def reranked(rerank_server: str, workspace: TestWorkspace) -> AsyncIterator[AsyncMemplaneClient]:
    """A client of the rerank server holding the test workspace's key."""
    async with AsyncMemplaneClient(rerank_server, workspace.key, timeout=30.0) as client:
        yield client


async def _projects(workspace: TestWorkspace) -> dict[str, str]:
    stored = await workspace.client.add_memories([mem(f"Project {n} uses PostgreSQL") for n in NAMES])
    return {m.id: name for m, name in zip(stored, NAMES, strict=True)}


async def test_hits_follow_the_rerankers_scores(
    workspace: TestWorkspace, reranked: AsyncMemplaneClient, reranker: FakeReranker
) -> None:
    names = await _projects(workspace)
    fused = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    fused_order = [names[h.memory.id] for h in fused.hits]
    assert fused_order[0] == "Gamma"
    wanted = list(reversed(fused_order))  # the reranker prefers what fusion ranked last
    reranker.scores = {f"Project {n} ": 10.0 - i for i, n in enumerate(wanted)}

    reply = await reranked.search("Project Gamma PostgreSQL", top_k=2)

    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_APPLIED
    assert reply.rerank_note == ""
    assert [names[h.memory.id] for h in reply.hits] == wanted[:2]  # re-scored beyond top_k: all 5 candidates
    assert [h.rerank.rank for h in reply.hits] == [1, 2]
    assert [h.rerank.score for h in reply.hits] == [10.0, 9.0]
    assert reply.hits[0].rerank.normalized_score == 1.0
    fused_scores = {h.memory.id: h.score for h in fused.hits}
    assert all(h.score == pytest.approx(fused_scores[h.memory.id]) for h in reply.hits)  # score stays fused
    assert reply.timing.rerank_duration.ToTimedelta().total_seconds() > 0
    [(path, headers, body)] = reranker.requests
    assert path == "/v2/rerank"
    assert headers["authorization"] == "Bearer rk-test"
    assert body["model"] == "fake-rerank-v1"
    assert body["query"] == "Project Gamma PostgreSQL"
    assert sorted(body["documents"]) == sorted(f"Project {n} uses PostgreSQL" for n in NAMES)
    assert body["top_n"] == len(NAMES)


async def test_only_top_n_candidates_are_rescored_the_rest_follow_fused(
    workspace: TestWorkspace,
    reranker: FakeReranker,
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    tmp_path: Path,
) -> None:
    names = await _projects(workspace)
    fused = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    fused_order = [names[h.memory.id] for h in fused.hits]
    reranker.scores = {f"Project {fused_order[1]} ": 5.0, f"Project {fused_order[0]} ": 1.0}
    url = f"{reranker.base_url}/v2/rerank"
    async with (
        _serve(tmp_path, pg_dsn, admin_key, embedder, url, top_n=2) as target,
        AsyncMemplaneClient(target, workspace.key, timeout=30.0) as client,
    ):
        reply = await client.search("Project Gamma PostgreSQL", top_k=5)
    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_APPLIED
    assert [names[h.memory.id] for h in reply.hits] == [fused_order[1], fused_order[0], *fused_order[2:]]
    assert [h.rerank.rank for h in reply.hits[:2]] == [1, 2]
    assert not any(h.HasField("rerank") for h in reply.hits[2:])
    [(_, _, body)] = reranker.requests
    assert len(body["documents"]) == 2


async def test_unreachable_reranker_leaves_the_fused_order(
    workspace: TestWorkspace, pg_dsn: str, embedder: CachedEmbedder, admin_key: str, tmp_path: Path
) -> None:
    names = await _projects(workspace)
    fused = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v2/rerank"
    async with (
        _serve(tmp_path, pg_dsn, admin_key, embedder, url, top_n=TOP_N) as target,
        AsyncMemplaneClient(target, workspace.key, timeout=30.0) as client,
    ):
        reply = await client.search("Project Gamma PostgreSQL", top_k=5)
    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_FALLBACK
    assert "ConnectError" in reply.rerank_note
    assert [names[h.memory.id] for h in reply.hits] == [names[h.memory.id] for h in fused.hits]


async def test_reranker_past_its_timeout_leaves_the_fused_order(
    workspace: TestWorkspace, reranked: AsyncMemplaneClient, reranker: FakeReranker
) -> None:
    names = await _projects(workspace)
    fused = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    reranker.hang()

    reply = await reranked.search("Project Gamma PostgreSQL", top_k=5)  # the server's 1 s timeout ends it

    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_FALLBACK
    assert "no reply within 1 s" in reply.rerank_note
    assert [names[h.memory.id] for h in reply.hits] == [names[h.memory.id] for h in fused.hits]
    assert not any(h.HasField("rerank") for h in reply.hits)
    assert len(reranker.requests) == 1  # the call was made and held, not skipped


@pytest.mark.parametrize("status", [500, 503])
async def test_reranker_error_leaves_the_fused_order(
    workspace: TestWorkspace, reranked: AsyncMemplaneClient, reranker: FakeReranker, status: int
) -> None:
    names = await _projects(workspace)
    fused = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    reranker.fail(status)

    reply = await reranked.search("Project Gamma PostgreSQL", top_k=5)

    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_FALLBACK
    assert f"HTTP {status}" in reply.rerank_note
    assert [names[h.memory.id] for h in reply.hits] == [names[h.memory.id] for h in fused.hits]
    assert [h.score for h in reply.hits] == pytest.approx([h.score for h in fused.hits])


async def test_malformed_reply_leaves_the_fused_order(
    workspace: TestWorkspace, reranked: AsyncMemplaneClient, reranker: FakeReranker
) -> None:
    await _projects(workspace)
    reranker.malformed()
    reply = await reranked.search("Project Gamma PostgreSQL", top_k=5)
    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_FALLBACK
    assert "5 of 5 documents have no score" in reply.rerank_note
    assert len(reply.hits) == 5


async def test_server_without_reranker_replies_as_before(workspace: TestWorkspace, reranker: FakeReranker) -> None:
    await _projects(workspace)
    reply = await workspace.client.search("Project Gamma PostgreSQL", top_k=5)
    assert len(reply.hits) == 5
    assert reply.rerank_status == retrieval_pb2.RERANK_STATUS_UNSPECIFIED
    assert reply.rerank_note == ""
    assert not reply.timing.HasField("rerank_duration")
    assert not any(h.HasField("rerank") for h in reply.hits)
    assert reranker.requests == []
    # The wire form carries none of the new fields: byte-identical to a reply built without them.
    bare = retrieval_pb2.SearchMemoriesResponse(hits=reply.hits, timing=reply.timing)
    assert reply.SerializeToString(deterministic=True) == bare.SerializeToString(deterministic=True)


async def test_tei_protocol_scores_in_input_order(reranker: FakeReranker) -> None:
    client = Reranker(RerankSettings(url=f"{reranker.base_url}/rerank", protocol="tei", timeout=TIMEOUT_SECONDS))
    try:
        reranker.scores = {"cello": 3.0, "tea": 1.0}
        hits = await client.rescore(["what music"], ["drinks tea", "plays the cello", "runs"])
        assert [h.score for h in hits] == [1.0, 3.0, 0.0]
        assert [h.rank for h in hits] == [2, 1, 3]
        assert [h.normalized for h in hits] == pytest.approx([1 / 3, 1.0, 0.0])
        [(path, _, body)] = reranker.requests
        assert path == "/rerank"
        assert body == {"query": "what music", "texts": ["drinks tea", "plays the cello", "runs"], "truncate": True}
        reranker.malformed()
        with pytest.raises(RerankError, match="3 of 3 documents have no score"):
            await client.rescore(["what music"], ["drinks tea", "plays the cello", "runs"])
    finally:
        await client.close()


async def test_several_queries_keep_each_documents_best_score(reranker: FakeReranker) -> None:
    client = Reranker(RerankSettings(url=f"{reranker.base_url}/v1/rerank", timeout=TIMEOUT_SECONDS))
    try:
        reranker.scores = {"cello": 2.0}
        hits = await client.rescore(["music", "drinks"], ["drinks tea", "plays the cello"])
        assert [h.rank for h in hits] == [2, 1]
        assert sorted(b["query"] for _, _, b in reranker.requests) == ["drinks", "music"]
        assert "model" not in reranker.requests[0][2]  # no model configured: none sent
    finally:
        await client.close()
