"""The grpc.aio server: memplane services + standard health checking and reflection.

`memplane serve` runs any subset of {retrieval, writeback, compaction, admin}; the chart runs each as
its own Deployment. Shutdown: health flips to NOT_SERVING (`enter_graceful_shutdown`),
then `server.stop(grace)` lets in-flight RPCs finish for `grace` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from memplane.api.admin import AdminServicer
from memplane.api.compaction import CompactionServicer
from memplane.api.decoding import DecodingInterceptor
from memplane.api.read_tokens import ReadTokens, ReadYourWrites
from memplane.api.retrieval import RetrievalServicer
from memplane.api.tls import ReloadingCertificates, TlsFiles
from memplane.api.writeback import WriteBackServicer
from memplane.app import App
from memplane.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    compaction_pb2,
    compaction_pb2_grpc,
    retrieval_pb2,
    retrieval_pb2_grpc,
    writeback_pb2,
    writeback_pb2_grpc,
)

_log = logging.getLogger(__name__)

SERVICES = ("retrieval", "writeback", "compaction", "admin")

_FULL_NAMES = {
    "retrieval": retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"].full_name,
    "writeback": writeback_pb2.DESCRIPTOR.services_by_name["WriteBackService"].full_name,
    "compaction": compaction_pb2.DESCRIPTOR.services_by_name["CompactionService"].full_name,
    "admin": admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
}
EMBEDDING_SERVICES = frozenset({_FULL_NAMES["retrieval"], _FULL_NAMES["writeback"]})
"""The services that cannot answer without the embedder (every search and every write
embeds); compaction embeds only for SummarizeSession and PrepareContext's write_memories."""


@dataclass
class RunningServer:
    """A started server, its bound port and its health servicer."""

    server: grpc.aio.Server
    port: int
    health: Any  # grpc_health.v1.health.aio.HealthServicer (the package ships no stubs)

    async def stop(self, grace: float, drain: float = 0.0, cut_short: asyncio.Event | None = None) -> None:
        """Report NOT_SERVING, keep serving for *drain* seconds (while kube-proxy and load
        balancers take this endpoint out: a Pod's deletion and its SIGTERM race them) or
        until *cut_short* is set (a second signal), then stop accepting (clients get GOAWAY
        and reconnect elsewhere) and let in-flight RPCs finish for up to *grace* seconds.
        The drain is Kubernetes' preStop-sleep pattern done in the server, so that health
        answers NOT_SERVING during it."""
        await self.health.enter_graceful_shutdown()
        if drain > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for((cut_short or asyncio.Event()).wait(), drain)
        await self.server.stop(grace)


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive (modules, the embedding model's Python
    side, settings, caches filled at start) to the permanent generation (`gc.freeze`,
    Python 3.7+: frozen objects are ignored by every later collection), so the
    generation-2 collections of serving traverse only what requests allocate. For a
    process that serves from here on (`memplane serve`, bench/_harness.py as it); not in
    `start_server`, which tests call many times in one process.

    Measured with `python bench/peers_sql.py --scopes per-user whole --concurrency 8
    --passes 1 --requests 600` at LoCoMo size, three pairs alternated with the code
    without it: hybrid search per user at 8 clients, p99 71-78 ms against 94-117 ms, p50
    and QPS unchanged."""
    gc.collect()
    gc.freeze()


async def start_server(
    app: App,
    *,
    host: str,
    port: int,
    services: Sequence[str] = SERVICES,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    tls: TlsFiles | None = None,
) -> RunningServer:
    """Build, bind and start a server on host:port (port 0 picks a free one), plaintext,
    or TLS only with *tls*'s files, re-read when they change (`memplane.api.tls`).

    Raises `ValueError` for an unknown service name or unusable TLS files and
    `RuntimeError` if the port cannot be bound.
    """
    unknown = set(services) - set(SERVICES)
    if unknown:
        raise ValueError(f"unknown services {sorted(unknown)}; choose from {SERVICES}")
    max_bytes = app.settings.grpc.max_message_bytes
    server = grpc.aio.server(
        # Innermost: a request that does not decode is INVALID_ARGUMENT (not grpcio's UNKNOWN),
        # and the telemetry interceptors around it see that status.
        interceptors=[*interceptors, DecodingInterceptor()],
        options=[
            ("grpc.max_receive_message_length", max_bytes),
            ("grpc.max_send_message_length", max_bytes),
            # gRPC sets SO_REUSEPORT by default: a second server on the same port would start
            # and silently share its traffic. Fail with "address in use" instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    tokens = ReadTokens(await app.db.read_token_key()) if app.reads.has_replica else None
    consistency = ReadYourWrites(tokens, app.reads.write_position)
    if "retrieval" in services:
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(
            RetrievalServicer(app.retrieval, app.authenticator, consistency, app.file_selector), server
        )
    if "writeback" in services:
        writeback_pb2_grpc.add_WriteBackServiceServicer_to_server(
            WriteBackServicer(
                service=app.writeback,
                conversations=app.conversations,
                authenticator=app.authenticator,
                max_batch_size=app.settings.limits.max_batch_size,
                consistency=consistency,
            ),
            server,
        )
        app.retention_sweeper.start()  # expired memories are erased by the servers that write them
        app.idempotency_sweeper.start()  # and request-id records past their retention deleted
        app.extraction.start()  # extraction jobs are run by the servers that queue them
        app.job_listener.start()
    if "compaction" in services:
        compaction_pb2_grpc.add_CompactionServiceServicer_to_server(
            CompactionServicer(
                checker=app.compaction.checker,
                compactor=app.compaction.compactor,
                offloader=app.compaction.offloader,
                transcript=app.compaction.transcript,
                sessions=app.compaction.sessions,
                preparer=app.compaction.preparer,
                authenticator=app.authenticator,
                limits=app.settings.limits,
                max_messages=app.settings.compaction.max_messages,
                consistency=consistency,
            ),
            server,
        )
        app.blob_cleaner.start()  # expired tool outputs are deleted by the server that stores them
    if "admin" in services:
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(app.admin, app.authenticator), server)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [_FULL_NAMES[s] for s in services]
    reflection.enable_server_reflection(
        [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], server
    )
    address = f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, ReloadingCertificates(tls).credentials())
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc}") from exc
    await server.start()
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    embedder = app.embedder_health

    async def follow(_: bool) -> None:
        # Readiness: each service is NOT_SERVING while its database is unreachable, and the
        # services that embed (EMBEDDING_SERVICES) while an embedding endpoint is; "" (the
        # process, liveness) stays SERVING, so an outage does not restart pods.
        for name in names:
            up = app.db.availability.up and (name not in EMBEDDING_SERVICES or embedder is None or embedder.up)
            await health_servicer.set(
                name, health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
            )

    app.db.availability.listen(follow)
    if embedder is not None:
        embedder.listen(follow)
    _log.info(
        "memplane listening on %s:%d (%s; services: %s)",
        host,
        bound,
        "plaintext" if tls is None else "TLS" + (", client certificates required" if tls.client_ca_file else ""),
        ", ".join(services),
    )
    return RunningServer(server=server, port=bound, health=health_servicer)
