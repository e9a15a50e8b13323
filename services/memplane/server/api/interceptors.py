"""gRPC server interceptors for OpenTelemetry: a span per RPC and a latency histogram."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import metrics


def server_interceptors() -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """OpenTelemetry's aio server interceptor (a span per RPC) and our latency metric."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor  # noqa: PLC0415 - only when tracing is on

    return [aio_server_interceptor(), RpcMetricsInterceptor()]  # type: ignore[no-untyped-call]


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Records `memplane.rpc.duration` (seconds) per unary RPC with method and code."""

    def __init__(self) -> None:
        self._histogram = metrics.get_meter("memplane").create_histogram(
            "memplane.rpc.duration", unit="s", description="Server-side duration of memplane RPCs"
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        method = handler_call_details.method
        histogram = self._histogram

        async def timed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            start = time.perf_counter()
            code = "OK"
            try:
                return await inner(request, context)  # type: ignore[arg-type]
            except BaseException:
                code = str(context.code().name) if context.code() is not None else "UNKNOWN"
                raise
            finally:
                histogram.record(time.perf_counter() - start, {"rpc.method": method, "rpc.grpc.status_code": code})

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
