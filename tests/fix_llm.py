"""LLM fixtures (registered as a plugin: ``-p tests.fix_llm``).

`fake_llm` is an OpenAI-compatible chat endpoint on a loopback port that replays
scripted answers (tests/fake_llm.py). `llm_server` is a second memplane server over the
session database whose settings point its LLM at that endpoint: the production code
talks real HTTP through the `openai` client and does not know the endpoint is scripted.
The session's main server has no LLM, so tests see both behaviours.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.server.app import build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.settings import ExtractionSettings, LLMSettings
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace, settings_for

# The LLM timeout of the test server: a scripted delay longer than this is a timeout.
LLM_TIMEOUT_SECONDS = 2.0


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLM]:
    """The scripted OpenAI-compatible endpoint (one per session)."""
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def llm(fake_llm: FakeLLM) -> Iterator[FakeLLM]:
    """The fake endpoint with an empty script and request log for this test; a reply the
    test scripted but the server never asked for fails the test."""
    fake_llm.reset()
    yield fake_llm
    leftover = fake_llm.pending
    fake_llm.reset()
    assert leftover == 0, f"{leftover} scripted LLM replies were never requested"


@pytest.fixture(scope="session")
async def llm_server(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    fake_llm: FakeLLM,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[str]:
    """Target of a server whose LLM is the fake endpoint (timeout 2 s, no retries), with
    two extraction workers (a failed job attempt retried after 0.05 s, 2 attempts)."""
    base = settings_for(tmp_path_factory.mktemp("memplane-llm"), pg_dsn, admin_key)
    settings = base.model_copy(
        update={
            "llm": LLMSettings(
                base_url=fake_llm.base_url,
                api_key=SecretStr("sk-test"),
                model="fake-model",
                timeout=LLM_TIMEOUT_SECONDS,
                max_retries=0,
            ),
            # a failed extraction attempt is retried at once, and a job fails on its second
            "extraction": ExtractionSettings(workers=2, retry_seconds=0.05, max_attempts=2),
        }
    )
    app = await build_app(settings, embedder=embedder)
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
    yield f"127.0.0.1:{running.port}"
    await running.stop(0)
    await app.close()


@pytest.fixture
async def llm_client(llm_server: str, workspace: TestWorkspace) -> AsyncIterator[AsyncMemplaneClient]:
    """A client of the LLM server holding the test workspace's key."""
    async with AsyncMemplaneClient(llm_server, workspace.key, timeout=60.0) as client:
        yield client
