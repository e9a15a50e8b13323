"""The gRPC edge wired over an App: each service the app serves gets its handler, built
here with the parts it calls, and `memplane.server.api.server.start_server` registers them
(the edge only registers handlers; it never imports the app)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import grpc

from memplane.server.api.admin import AdminServicer
from memplane.server.api.compaction import CompactionServicer
from memplane.server.api.read_tokens import ReadTokens, ReadYourWrites
from memplane.server.api.retrieval import RetrievalServicer
from memplane.server.api.server import RunningServer, Servicer, start_server
from memplane.server.api.tls import TlsFiles
from memplane.server.api.writeback import WriteBackServicer
from memplane.server.app import App

T = TypeVar("T")


async def serve(
    app: App,
    *,
    host: str,
    port: int,
    services: Sequence[str] | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    tls: TlsFiles | None = None,
) -> RunningServer:
    """Serve *services* (default: every service *app* serves; a subset of `app.services`)
    of a started *app* on host:port (port 0 picks a free one), with health and
    reflection, plaintext or TLS (see `start_server`). The background jobs are the
    app's (`App.start()`), not the server's: several servers may serve one app.

    Raises `ValueError` for a service the app does not serve, `RuntimeError` when the
    app is not started or the port cannot be bound.
    """
    chosen = app.services if services is None else tuple(services)
    missing = sorted(set(chosen) - set(app.services))
    if missing or not chosen:
        raise ValueError(f"this app does not serve {missing or 'nothing'}; it serves {list(app.services)}")
    if not app.started:
        raise RuntimeError("start the app (App.start) before serving it: its background jobs would not run")
    tokens = ReadTokens(await app.db.read_token_key()) if app.reads.has_replica else None
    consistency = ReadYourWrites(tokens, app.reads.write_position)
    return await start_server(
        [handler(app, name, consistency) for name in chosen],
        max_message_bytes=app.settings.grpc.max_message_bytes,
        database=app.db.availability,
        embedder=app.embedder_health,
        host=host,
        port=port,
        interceptors=interceptors,
        tls=tls,
    )


def handler(app: App, service: str, consistency: ReadYourWrites) -> Servicer:
    """The handler of *service* (a name of `memplane.server.app.SERVICES`) over *app*'s parts.
    Raises `ValueError` for a service the app was not built to serve."""
    auth = app.authenticator
    if service == "retrieval":
        return RetrievalServicer(_built(app.retrieval, service), auth, consistency, _built(app.file_selector, service))
    if service == "writeback":
        return WriteBackServicer(
            service=_built(app.writeback, service),
            conversations=_built(app.conversations, service),
            authenticator=auth,
            max_batch_size=app.settings.limits.max_batch_size,
            consistency=consistency,
        )
    if service == "compaction":
        parts = _built(app.compaction, service)
        return CompactionServicer(
            checker=parts.checker,
            compactor=parts.compactor,
            offloader=parts.offloader,
            transcript=parts.transcript,
            sessions=parts.sessions,
            preparer=parts.preparer,
            authenticator=auth,
            limits=app.settings.limits,
            max_messages=app.settings.compaction.max_messages,
            consistency=consistency,
        )
    if service == "admin":
        return AdminServicer(_built(app.admin, service), auth)
    raise ValueError(f"unknown service {service!r}")


def _built(part: T | None, service: str) -> T:
    if part is None:
        raise ValueError(f"the app was not built to serve {service}")
    return part
