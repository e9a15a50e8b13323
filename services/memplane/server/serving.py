"""The gRPC edge wired over an App: each service the app serves gets its handler, built
here with the parts it calls, and `memplane.server.api.server.start_server` registers them
(the edge only registers handlers; it never imports the app)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
from memplane.server.shutdown import Budget, join_threads

T = TypeVar("T")

_log = logging.getLogger(__name__)

THREAD_JOIN_SECONDS = 0.5  # of the close budget, kept for the worker threads' end


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
        clusters={c.name: c.db.availability for c in app.placement.clusters},
        embedder=app.embedder_health,
        host=host,
        port=port,
        interceptors=interceptors,
        tls=tls,
        reuse_port=app.settings.grpc.reuse_port,
    )


async def stop_serving(
    running: RunningServer,
    app: App,
    *,
    cut_short: asyncio.Event | None = None,
    threads: ThreadPoolExecutor | None = None,
) -> bool:
    """Stop *running* and close *app* within `grpc.drain_seconds` + `grpc.grace_period`
    + `grpc.close_seconds` of the call (docs/operations/failure-behaviour.md#stopping):
    NOT_SERVING, the drain (ended early when *cut_short* is set), the grace in-flight
    calls get, then `App.close` and the end of the *threads* (the loop's default
    executor) with what is left. True if everything ended; False if a step was abandoned
    (a WARNING names it) or a worker thread is still busy, which the caller's process
    must not wait for (`memplane serve` exits at once)."""
    grpc_settings = app.settings.grpc
    drain, grace, close = grpc_settings.drain_seconds, grpc_settings.grace_period, grpc_settings.close_seconds
    budget = Budget(drain + grace + close)
    _log.info("shutting down (drain %.1f s, grace %.1f s, close %.1f s)", drain, grace, close)
    stopped = await running.stop(grace, drain, cut_short=cut_short)
    closed = await app.close(max(0.0, budget.left() - (THREAD_JOIN_SECONDS if threads is not None else 0.0)))
    joined = threads is None or await join_threads(threads, budget.left())
    _log.info("stopped in %.1f s", budget.seconds - budget.left())
    return stopped and closed and joined


def handler(app: App, service: str, consistency: ReadYourWrites) -> Servicer:
    """The handler of *service* (a name of `memplane.server.app.SERVICES`) over *app*'s parts.
    Raises `ValueError` for a service the app was not built to serve."""
    auth = app.authenticator
    if service == "retrieval":
        return RetrievalServicer(
            _built(app.retrieval, service),
            auth,
            consistency,
            _built(app.file_selector, service),
            searches=_built(app.searches, service),
            usage=_built(app.daily_usage, service),
        )
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
