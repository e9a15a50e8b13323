"""The grpc.aio server: the memplane handlers it is given + standard health checking and
reflection. It only registers handlers: the composition root builds them with the parts
they call (`memplane.server.serving` over a `memplane.server.app.App`), so the edge never imports the app.

`memplane serve` runs any subset of {retrieval, writeback, compaction, admin}; the chart runs each as
its own Deployment. Shutdown: health flips to NOT_SERVING (`enter_graceful_shutdown`),
then `server.stop(grace)` lets in-flight RPCs finish for `grace` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from memplane.server.api.admin import AdminServicer
from memplane.server.api.compaction import CompactionServicer
from memplane.server.api.decoding import GuardedRegistrar
from memplane.server.api.retrieval import RetrievalServicer
from memplane.server.api.tls import ReloadingCertificates, TlsFiles
from memplane.server.api.writeback import WriteBackServicer
from memplane.server.background import Listener
from memplane.server.shutdown import bounded
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

HEALTH_REPORT_SECONDS = 1.0  # NOT_SERVING is set at once unless a stuck Watch holds the health servicer's lock
STOP_AFTER_GRACE_SECONDS = 1.0  # the cancelled handlers' time to end, when stop() is given no bound of its own

Servicer = RetrievalServicer | WriteBackServicer | CompactionServicer | AdminServicer
"""A memplane handler, wired by the composition root."""

_REGISTRATIONS: dict[type[Any], tuple[str, Callable[[Any, grpc.aio.Server], None]]] = {
    RetrievalServicer: (
        retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"].full_name,
        retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server,
    ),
    WriteBackServicer: (
        writeback_pb2.DESCRIPTOR.services_by_name["WriteBackService"].full_name,
        writeback_pb2_grpc.add_WriteBackServiceServicer_to_server,
    ),
    CompactionServicer: (
        compaction_pb2.DESCRIPTOR.services_by_name["CompactionService"].full_name,
        compaction_pb2_grpc.add_CompactionServiceServicer_to_server,
    ),
    AdminServicer: (
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        admin_pb2_grpc.add_AdminServiceServicer_to_server,
    ),
}
_FULL_NAMES = {servicer: name for servicer, (name, _) in _REGISTRATIONS.items()}
CLUSTER_HEALTH_PREFIX = "cluster/"
"""The health check name of each database cluster is this and its name ("cluster/default"):
SERVING while its primary answers, NOT_SERVING while it is down (only its workspaces'
requests fail then)."""

EMBEDDING_SERVICES = frozenset({_FULL_NAMES[RetrievalServicer], _FULL_NAMES[WriteBackServicer]})
"""The services that cannot answer without the embedder (every search and every write
embeds); compaction embeds only for SummarizeSession and PrepareContext's write_memories."""


class UpDown(Protocol):
    """An up/down state readiness follows: the database's availability
    (`memplane.server.storage.availability.Availability`), an embedding endpoint's health."""

    @property
    def up(self) -> bool:
        """Whether it is up now."""
        ...

    def listen(self, listener: Listener) -> None:
        """Call `await listener(up)` on every change."""
        ...


@dataclass
class RunningServer:
    """A started server, its bound port and its health servicer."""

    server: grpc.aio.Server
    port: int
    health: Any  # grpc_health.v1.health.aio.HealthServicer (the package ships no stubs)

    async def stop(
        self, grace: float, drain: float = 0.0, cut_short: asyncio.Event | None = None, *, seconds: float | None = None
    ) -> bool:
        """Report NOT_SERVING, keep serving for *drain* seconds (while kube-proxy and load
        balancers take this endpoint out: a Pod's deletion and its SIGTERM race them) or
        until *cut_short* is set (a second signal), then stop accepting (clients get GOAWAY
        and reconnect elsewhere) and let in-flight RPCs finish for up to *grace* seconds;
        the calls still running then are cancelled. The drain is Kubernetes' preStop-sleep
        pattern done in the server, so that health answers NOT_SERVING during it.

        Bounded (`memplane.server.shutdown.bounded`): the health report gets at most
        HEALTH_REPORT_SECONDS (a Watch stream that does not read holds the health
        servicer's lock), and the server's stop *seconds* after the drain (default *grace*
        + STOP_AFTER_GRACE_SECONDS: handlers that do not end on cancellation). True if
        both finished; a WARNING names what was abandoned."""
        reported = await bounded("reporting NOT_SERVING", self.health.enter_graceful_shutdown, HEALTH_REPORT_SECONDS)
        if drain > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for((cut_short or asyncio.Event()).wait(), drain)
        limit = grace + STOP_AFTER_GRACE_SECONDS if seconds is None else seconds
        stopped = await bounded("stopping the gRPC server", lambda: self.server.stop(grace), limit)
        return reported and stopped


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


async def _follow_cluster(health_servicer: Any, name: str, availability: UpDown) -> None:
    """Set health *name* from *availability* now and on every change."""

    async def follow(up: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
        await health_servicer.set(name, status)

    await follow(availability.up)
    availability.listen(follow)


async def start_server(
    servicers: Sequence[Servicer],
    *,
    max_message_bytes: int,
    database: UpDown,
    embedder: UpDown | None,
    host: str,
    port: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    tls: TlsFiles | None = None,
    reuse_port: bool = False,
    clusters: Mapping[str, UpDown] | None = None,
) -> RunningServer:
    """Register *servicers* (one per service), health and reflection on a server, bind it
    to host:port (port 0 picks a free one), plaintext, or TLS only with *tls*'s files,
    re-read when they change (`memplane.server.api.tls`), and start it. Readiness follows
    *database* for every service and *embedder* (an embedding endpoint's health; None for
    a local model) for EMBEDDING_SERVICES; each of *clusters* (database cluster name → its
    primary's availability) has a health name of its own, CLUSTER_HEALTH_PREFIX + name,
    that follows it; messages are limited to *max_message_bytes* each way. *reuse_port*:
    bind with SO_REUSEPORT, sharing the port with the other workers of `memplane serve
    --workers`.

    Raises `ValueError` for no servicer or two of one service, or unusable TLS files, and
    `RuntimeError` if the port cannot be bound.
    """
    names = [_FULL_NAMES[type(s)] for s in servicers]
    if not names or len(set(names)) < len(names):
        raise ValueError(f"serve each service once, at least one: got {names}")
    server = grpc.aio.server(
        interceptors=interceptors or None,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            # gRPC sets SO_REUSEPORT by default: a second server on the same port would start
            # and silently share its traffic. Fail with "address in use" instead, unless
            # sharing is the point (the workers of `memplane serve --workers`).
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ],
    )
    # Every method's request is guarded where it is registered (innermost, so a request that
    # does not decode is INVALID_ARGUMENT, not grpcio's UNKNOWN, and the telemetry
    # interceptors around it see that status).
    registrar = cast(grpc.aio.Server, GuardedRegistrar(server))
    for servicer in servicers:
        _, add = _REGISTRATIONS[type(servicer)]
        add(servicer, registrar)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, registrar)
    reflected = [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
    reflector = reflection.aio.ReflectionServicer(reflected)  # type: ignore[attr-defined]  # public: in its __all__
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflector, registrar)
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

    async def follow(_: bool) -> None:
        # Readiness: each service is NOT_SERVING while its database is unreachable, and the
        # services that embed (EMBEDDING_SERVICES) while an embedding endpoint is; "" (the
        # process, liveness) stays SERVING, so an outage does not restart pods.
        for name in names:
            up = database.up and (name not in EMBEDDING_SERVICES or embedder is None or embedder.up)
            await health_servicer.set(
                name, health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
            )

    database.listen(follow)
    for cluster, availability in (clusters or {}).items():
        await _follow_cluster(health_servicer, CLUSTER_HEALTH_PREFIX + cluster, availability)
    if embedder is not None:
        embedder.listen(follow)
    _log.info(
        "memplane listening on %s:%d (%s; services: %s)",
        host,
        bound,
        "plaintext" if tls is None else "TLS" + (", client certificates required" if tls.client_ca_file else ""),
        ", ".join(names),
    )
    return RunningServer(server=server, port=bound, health=health_servicer)
