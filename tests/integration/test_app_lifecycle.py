"""Each single-service process builds only what it serves and starts only its own
background jobs (issue 26): `build_app(settings, services)` + `App.start()` over the
session's PostgreSQL, for the chart's four Deployments and the all-in-one `memplane
serve`. What started is read twice: the names the app reports (`App.started`) and the
asyncio tasks that really appeared (and are gone after `App.close()`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import SecretStr

from memplane.server.app import (
    BLOB_CLEANER,
    EXTRACTION_WORKERS,
    IDEMPOTENCY_SWEEPER,
    INVALIDATION_LISTENER,
    JOB_LISTENER,
    PARTITION_ANALYZER,
    RETENTION_SWEEPER,
    SEARCH_COUNTER,
    SERVICES,
    VECTOR_INDEXER,
    build_app,
)
from memplane.server.serving import serve
from memplane.server.settings import ExtractionSettings, LLMSettings, Settings
from tests.fake_llm import FakeLLM
from tests.fix_server import settings_for

WRITEBACK_JOBS = [RETENTION_SWEEPER, IDEMPOTENCY_SWEEPER, EXTRACTION_WORKERS, JOB_LISTENER]

# service set -> (jobs started, in order; the asyncio tasks they run)
STARTED = {
    ("retrieval",): [INVALIDATION_LISTENER, SEARCH_COUNTER],
    ("writeback",): [INVALIDATION_LISTENER, VECTOR_INDEXER, PARTITION_ANALYZER, *WRITEBACK_JOBS],
    ("compaction",): [INVALIDATION_LISTENER, VECTOR_INDEXER, PARTITION_ANALYZER, BLOB_CLEANER],
    ("admin",): [INVALIDATION_LISTENER],
    SERVICES: [
        INVALIDATION_LISTENER,
        VECTOR_INDEXER,
        PARTITION_ANALYZER,
        SEARCH_COUNTER,
        *WRITEBACK_JOBS,
        BLOB_CLEANER,
    ],
}
TASKS = {
    INVALIDATION_LISTENER: {"memplane-invalidation"},
    RETENTION_SWEEPER: {"memplane-sweep-expired-memories"},
    IDEMPOTENCY_SWEEPER: {"memplane-sweep-expired-idempotency-records"},
    EXTRACTION_WORKERS: {"memplane-extract-0"},
    JOB_LISTENER: {"memplane-job-listener"},
    BLOB_CLEANER: {"memplane-sweep-expired-tool-result-blobs"},
    VECTOR_INDEXER: {"memplane-vector-indexer"},
    PARTITION_ANALYZER: {"memplane-partition-analyzer"},
    SEARCH_COUNTER: {"memplane-search-counter"},
}


def _settings(tmp_path: Path, pg_dsn: str, admin_key: str, llm_url: str) -> Settings:
    """A test server's settings with an LLM endpoint configured (the session's fake, as
    the LLM server's: a worker that claims a job another test left behaves as that
    server's would) and one extraction worker, so that what needs an LLM shows whether it
    built one."""
    return settings_for(tmp_path, pg_dsn, admin_key).model_copy(
        update={
            "llm": LLMSettings(base_url=llm_url, api_key=SecretStr("sk-test"), model="fake-model"),
            "extraction": ExtractionSettings(workers=1),
        }
    )


def _ours() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t.get_name().startswith("memplane-")}


@pytest.mark.parametrize("services", list(STARTED), ids=lambda s: "+".join(s) if len(s) < 4 else "all")
async def test_a_process_builds_and_starts_only_what_it_serves(
    services: tuple[str, ...], tmp_path: Path, pg_dsn: str, admin_key: str, fake_llm: FakeLLM
) -> None:
    app = await build_app(_settings(tmp_path, pg_dsn, admin_key, fake_llm.base_url), services=services)
    try:
        assert app.services == services
        assert app.started == []  # nothing runs in the background before start()
        before = _ours()
        app.start()
        assert app.started == STARTED[services]
        new_tasks = {t.get_name() for t in _ours() - before}
        assert new_tasks == set().union(*(TASKS[name] for name in STARTED[services]))

        served = set(services)
        assert (app.retrieval is not None, app.file_selector is not None) == ("retrieval" in served,) * 2
        assert (app.conversations is not None) == ("writeback" in served)
        # SummarizeSession writes memories through WriteBackService: compaction builds it too
        assert (app.writeback is not None) == bool(served & {"writeback", "compaction"})
        assert (app.compaction is not None) == ("compaction" in served)
        assert (app.admin is not None) == ("admin" in served)
        # The chat model is built for what calls it (SelectFiles, extraction, summaries); admin never does.
        assert (app.chat_model is not None) == bool(served - {"admin"})
        # Every service embeds or records the model (admin's new workspaces): the embedder is always built.
        assert app.embedder.dimensions == 384

        running = await serve(app, host="127.0.0.1", port=0)  # the edge over exactly these services
        await running.stop(0)
        missing = [s for s in SERVICES if s not in served]
        if missing:
            with pytest.raises(ValueError, match="does not serve"):
                await serve(app, host="127.0.0.1", port=0, services=missing[:1])
    finally:
        await app.close()
    assert app.started == []
    assert not {t for t in _ours() - before if not t.done()}  # every job's task ended


async def test_an_unknown_service_is_refused_before_anything_starts(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)  # no DSN: had it gone further it would start an embedded server
    with pytest.raises(ValueError, match="unknown services"):
        await build_app(settings, services=("retrieval", "search"))
    with pytest.raises(ValueError, match="unknown services"):
        await build_app(settings, services=())
    assert not (tmp_path / "pgdata").exists()


async def test_serving_an_app_not_started_is_refused(tmp_path: Path, pg_dsn: str, admin_key: str) -> None:
    app = await build_app(settings_for(tmp_path, pg_dsn, admin_key), services=("admin",))
    try:
        with pytest.raises(RuntimeError, match="start the app"):
            await serve(app, host="127.0.0.1", port=0)
    finally:
        await app.close()
