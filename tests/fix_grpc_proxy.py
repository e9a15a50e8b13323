"""A gRPC proxy tests put between a client and a server (as psycopg's tests/fix_proxy.py
puts a TCP proxy in front of PostgreSQL): it forwards every unary call byte for byte,
counts calls per method, and can hold a method's call *after* the server has answered —
the moment where a client that dies has done the work without learning it.

    proxy = GrpcProxy(upstream="127.0.0.1:50051")
    port = await proxy.start()
    held = proxy.hold("/memplane.v1.AdminService/CreateApiKey")
    await held.reached.wait()      # the server has answered; the reply is held
    ... kill the client ...
    held.release()

It can also fail a method's next calls (`fail`): with a status before the server sees
them, with a status after the server has answered (the reply lost with its connection),
or by never answering (a hung attempt):

    proxy.fail("/memplane.v1.WriteBackService/AddMemories", grpc.StatusCode.UNAVAILABLE, after_upstream=True)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc


@dataclass
class Hold:
    """A held method: `reached` is set when a call has been answered upstream and is held;
    the held call (and every later one) goes on after `release()`."""

    method: str
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Fault:
    """The next *times* calls of *method* fail with *code* — after the server has done
    them and answered (*after_upstream*: a reply lost with its connection) or without
    reaching it — or, with *code* None, never answer (a hung attempt, until `stop`)."""

    method: str
    code: grpc.StatusCode | None
    times: int = 1
    after_upstream: bool = False


class GrpcProxy:
    """Forwards unary-unary calls to *upstream* ("host:port") on 127.0.0.1:<free port>."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._channel: grpc.aio.Channel | None = None
        self._server: grpc.aio.Server | None = None
        self._holds: dict[str, Hold] = {}
        self._faults: dict[str, Fault] = {}
        self._stopped = asyncio.Event()
        self.calls: Counter[str] = Counter()

    def fail(self, method: str, code: grpc.StatusCode | None, *, times: int = 1, after_upstream: bool = False) -> Fault:
        """Inject a `Fault` into the next *times* calls of *method* (a full name)."""
        fault = self._faults[method] = Fault(method, code, times, after_upstream)
        return fault

    def hold(self, method: str) -> Hold:
        """Hold the replies to *method* (a full name, "/package.Service/Method") from now on."""
        held = self._holds[method] = Hold(method)
        return held

    async def start(self, port: int = 0) -> int:
        """Start listening on *port* (0: a free one); return the port."""
        self._channel = grpc.aio.insecure_channel(self._upstream)
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([_Forward(self)])
        bound = self._server.add_insecure_port(f"127.0.0.1:{port}")
        await self._server.start()
        return bound

    async def stop(self) -> None:
        """Release every hold, stop, close the upstream channel."""
        for held in self._holds.values():
            held.release()
        self._stopped.set()
        if self._server is not None:
            await self._server.stop(0)
        if self._channel is not None:
            await self._channel.close(None)

    async def forward(self, method: str, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        """Call *method* upstream with the caller's metadata and deadline; relay the reply
        or the status (with its rich details in the trailing metadata)."""
        assert self._channel is not None
        self.calls[method] += 1
        fault = self._faults.get(method)
        if fault is not None and fault.times > 0:
            fault.times -= 1
        else:
            fault = None
        if fault is not None and fault.code is None:
            await self._stopped.wait()  # hung: the client's timeout ends the attempt
        if fault is not None and fault.code is not None and not fault.after_upstream:
            await context.abort(fault.code, f"injected by the test proxy before {method}")
        call = self._channel.unary_unary(method, None, None)  # no (de)serializers: bytes through
        metadata = tuple((k, v) for k, v in context.invocation_metadata() or () if not k.startswith("grpc-"))
        remaining = context.time_remaining()
        try:
            reply: bytes = await call(request, metadata=metadata, timeout=remaining)
        except grpc.aio.AioRpcError as error:
            context.set_trailing_metadata(tuple(error.trailing_metadata() or ()))  # type: ignore[arg-type]
            await context.abort(error.code(), error.details() or "")
            raise
        if fault is not None and fault.code is not None:
            await context.abort(fault.code, f"injected by the test proxy after {method} was answered")
        held = self._holds.get(method)
        if held is not None:
            held.reached.set()
            await held.released.wait()
        return reply


class _Forward(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    def __init__(self, proxy: GrpcProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        method = handler_call_details.method

        async def behaviour(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            return await self._proxy.forward(method, request, context)

        return grpc.unary_unary_rpc_method_handler(behaviour)
