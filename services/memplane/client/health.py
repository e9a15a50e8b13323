"""grpc.health.v1 `Health.Check` without the grpcio-health-checking package (the bare
client install needs only grpcio, protobuf and googleapis-common-protos).

The two messages of health.proto (github.com/grpc/grpc-proto, grpc/health/v1/health.proto)
are built here in a private descriptor pool, so they never clash with grpc_health's own
registration of the same file when a server runs in the same process.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CHECK_METHOD = "/grpc.health.v1.Health/Check"
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL


def _health_messages() -> tuple[type[Any], type[Any]]:
    """(HealthCheckRequest, HealthCheckResponse) as in health.proto: request
    `string service = 1`; response `ServingStatus status = 1` with UNKNOWN = 0,
    SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="memplane_client/health.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = fdp.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=_OPTIONAL)
    response = fdp.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


HealthCheckRequest, HealthCheckResponse = _health_messages()


async def check(channel: grpc.aio.Channel, service: str, *, deadline: float | None, wait_for_ready: bool) -> str:
    """The serving status of *service* ("" = the whole server) as its enum name
    ("SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "UNKNOWN"), *deadline* in seconds. Raises `grpc.aio.AioRpcError`
    (NOT_FOUND for a service the server does not know, UNAVAILABLE, DEADLINE_EXCEEDED)."""
    call = channel.unary_unary(
        CHECK_METHOD,
        request_serializer=HealthCheckRequest.SerializeToString,
        response_deserializer=HealthCheckResponse.FromString,
    )
    reply = await call(HealthCheckRequest(service=service), timeout=deadline, wait_for_ready=wait_for_ready)
    value = HealthCheckResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"].values_by_number.get(reply.status)
    return str(value.name) if value is not None else "UNKNOWN"  # a status newer than health.proto
