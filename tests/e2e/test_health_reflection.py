"""Standard gRPC health checking and server reflection on the memplane server."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

SERVICES = ["memplane.v1.RetrievalService", "memplane.v1.WriteBackService", "memplane.v1.AdminService"]


@pytest.mark.parametrize("service", ["", *SERVICES, "cluster/default"])  # its one database cluster too
async def test_health_check_reports_serving(server: str, service: str) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_check_of_an_unknown_service_is_not_found(server: str) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="nope.v1.Nothing"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_lists_the_services_and_serves_their_descriptors(server: str) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="memplane.v1.RetrievalService"),
        ]
        replies = [r async for r in stub.ServerReflectionInfo(iter(requests))]
    names = {s.name for s in replies[0].list_services_response.service}
    assert set(SERVICES) <= names
    assert "grpc.health.v1.Health" in names
    assert "grpc.reflection.v1alpha.ServerReflection" in names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(f)
        for f in replies[1].file_descriptor_response.file_descriptor_proto
    ]
    retrieval = next(f for f in files if f.name == "memplane/v1/retrieval.proto")
    methods = {m.name for s in retrieval.service for m in s.method}
    assert {"SearchMemories", "GetMemory", "ListMemories"} <= methods


async def _health_cli(target: str, *args: str) -> tuple[int, str]:
    """`memplane health --target TARGET *args` as a process: its exit code and output."""
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", "health", "--target", target, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_health_command_exits_zero_only_when_serving(server: str) -> None:
    async def health(*args: str) -> tuple[int, str]:
        return await _health_cli(server, *args)

    assert await health() == (0, "server: SERVING\n")
    assert await health("--service", "memplane.v1.RetrievalService") == (0, "memplane.v1.RetrievalService: SERVING\n")
    code, out = await health("--service", "memplane.v1.NoSuchService")
    assert code == 1
    assert "NotFoundError" in out


async def test_health_wait_rides_over_a_server_not_listening_yet_and_gives_up_after_its_seconds(server: str) -> None:
    """`memplane health --wait` (the chart's `helm test` Pod): without it a refused connection
    fails at once; with it the check waits for the server, and gives up after its seconds."""
    import socket

    health = _health_cli

    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    code, out = await health(closed)
    assert code == 1
    assert "UnavailableError" in out
    code, out = await health(closed, "--wait", "1")
    assert (code, out) == (1, "server: not reachable within 1 s\n")
    assert await health(server, "--wait", "30") == (0, "server: SERVING\n")


@pytest.mark.parametrize("wait", ["-1", "soon", "inf"])
async def test_health_wait_refuses_a_bad_number_of_seconds_naming_the_flag(server: str, wait: str) -> None:
    code, out = await _health_cli(server, "--wait", wait)
    assert code == 2
    assert "--wait" in out
