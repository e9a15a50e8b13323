"""OpenTelemetry: an RPC span per call, psycopg spans for its database work under it,
and nothing private in any span: no word of the memory or the query (not even one
stemmed lexeme), no scope id, no metadata value.

The global tracer provider can be set once per process, so this module installs it once
(or reuses an SDK provider already installed), runs its own small server whose pool is
created after psycopg was instrumented, and uninstruments psycopg when it is done.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from memplane.client import AsyncMemplaneClient
from memplane.server.api.interceptors import server_interceptors
from memplane.server.app import build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.telemetry import setup_telemetry
from memplane.v1 import filter_pb2
from tests.fix_server import random_workspace_name, settings_for
from tests.support import cond, mem

SECRET_CONTENT = "Ada keeps her spare house key under the blue flowerpot"
SECRET_QUERY = "where is the spare house key hidden"
# Single words of both, as the text search stems them (english: "house" -> "hous"), that
# no SQL statement or span name could hold by chance ("key" could: workspace_key).
SECRET_WORDS = ("ada", "spare", "hous", "flowerpot", "blue", "hidden")
# Scope ids and a metadata value, unique to this run; the search filters on each.
USER_ID = f"usr-{secrets.token_hex(6)}"
SESSION_ID = f"ses-{secrets.token_hex(6)}"
ROOM = f"room-{secrets.token_hex(6)}"


@dataclass
class Traced:
    target: str
    exporter: InMemorySpanExporter


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    processor = SimpleSpanProcessor(memory)
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # someone installed one already: share it
        current.add_span_processor(processor)
        PsycopgInstrumentor().instrument(enable_commenter=False, skip_dep_check=True)
    else:
        assert setup_telemetry(span_processor=processor)
    yield memory
    PsycopgInstrumentor().uninstrument()
    memory.clear()


@pytest.fixture(scope="module")
async def traced(
    exporter: InMemorySpanExporter,
    pg_dsn: str,
    admin_key: str,
    embedder: CachedEmbedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Traced]:
    app = await build_app(settings_for(tmp_path_factory.mktemp("traced"), pg_dsn, admin_key), embedder=embedder)
    app.start()
    running = await serve(app, host="127.0.0.1", port=0, interceptors=server_interceptors())
    yield Traced(f"127.0.0.1:{running.port}", exporter)
    await running.stop(0)
    await app.close()


def _all_attribute_text(span: ReadableSpan) -> str:
    parts = [span.name, *(f"{k}={v}" for k, v in (span.attributes or {}).items())]
    for event in span.events:
        parts += [event.name, *(f"{k}={v}" for k, v in (event.attributes or {}).items())]
    return "\n".join(parts)


async def test_search_is_traced_without_memory_text(traced: Traced, admin_key: str) -> None:
    name = random_workspace_name()
    async with AsyncMemplaneClient(traced.target, admin_key) as admin:
        await admin.create_workspace(name)
        try:
            key = (await admin.create_api_key(name)).api_key
            async with AsyncMemplaneClient(traced.target, key) as client:
                [stored] = await client.add_memories(
                    [mem(SECRET_CONTENT, user_id=USER_ID, session_id=SESSION_ID, metadata={"room": ROOM})]
                )
                traced.exporter.clear()
                reply = await client.search(
                    SECRET_QUERY,
                    filter=filter_pb2.MemoryFilter(
                        user_id=USER_ID,
                        session_id=SESSION_ID,
                        metadata=cond("room", filter_pb2.CONDITION_OPERATOR_EQ, ROOM),
                    ),
                )
                assert reply.hits[0].memory.id == stored.id
                spans = traced.exporter.get_finished_spans()
        finally:
            await admin.delete_workspace(name)

    [rpc] = [s for s in spans if s.name == "/memplane.v1.RetrievalService/SearchMemories"]
    assert rpc.kind == SpanKind.SERVER
    assert rpc.attributes is not None
    assert rpc.attributes.get("rpc.service") == "memplane.v1.RetrievalService"
    assert rpc.attributes.get("rpc.method") == "SearchMemories"
    db_spans = [
        s
        for s in spans
        if (s.attributes or {}).get("db.system") == "postgresql" and s.context.trace_id == rpc.context.trace_id
    ]
    assert len(db_spans) >= 3  # count, vector search, lexical search, load hits
    assert all(s.parent is not None for s in db_spans)
    statements = [str((s.attributes or {}).get("db.statement", "")) for s in db_spans]
    assert any("<=>" in st for st in statements)  # the vector search is among them
    assert any("ts_" in st or "tsquery" in st for st in statements)  # and the lexical one

    for span in spans:
        text = _all_attribute_text(span).lower()
        for word in SECRET_WORDS:  # at the start of a word: "hous" finds 'hous' and "house", not "metadata"
            assert not re.search(rf"\b{word}", text), f"span {span.name!r} carries the word {word!r}"
        for secret in (USER_ID, SESSION_ID, ROOM):
            assert secret not in text, f"span {span.name!r} carries {secret!r}"
