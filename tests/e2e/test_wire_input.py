"""Hostile input below the SDK: raw bytes on a real gRPC channel (malformed protobuf,
invalid UTF-8 in string fields, metadata nested past protobuf's decoding depth) and
hostile headers. Each is a clear status code naming what is wrong — INVALID_ARGUMENT with
a BadRequest field violation for a body that does not decode — never UNKNOWN or
INTERNAL, with no traceback in the server's log, and nothing stored changes."""

from __future__ import annotations

import logging

import grpc
import pytest
from google.protobuf import struct_pb2

from memplane.client import AsyncMemplaneClient
from memplane.client.errors import from_rpc_error
from memplane.errors import InvalidArgumentError, UnauthenticatedError
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import fields, list_all, mem, unit_vectors

SEARCH = "/memplane.v1.RetrievalService/SearchMemories"
LIST = "/memplane.v1.RetrievalService/ListMemories"
ADD = "/memplane.v1.WriteBackService/AddMemories"
HEALTH = "/grpc.health.v1.Health/Check"


def _len_field(number: int, payload: bytes) -> bytes:
    """One length-delimited field in protobuf's wire format (tag, varint length, bytes)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def deep_struct(levels: int) -> bytes:
    """A Struct nested *levels* deep ({"d": {"d": ... {"leaf": 1}}}), serialized. Each
    level is three messages on the wire (Struct, its map entry, Value), so 40 levels pass
    upb's decoding limit of 100 (the SDK's own Struct builder would refuse to build it)."""
    inner = struct_pb2.Struct()
    inner.fields["leaf"].number_value = 1
    data = inner.SerializeToString()
    for _ in range(levels - 1):
        value = _len_field(5, data)  # Value.struct_value = 5
        entry = _len_field(1, b"d") + _len_field(2, value)  # map entry: key = 1, value = 2
        data = _len_field(1, entry)  # Struct.fields = 1
    return data


def _number(message: type, name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)  # type: ignore[attr-defined]


def _memory_input_bytes(content: bytes, metadata: bytes = b"") -> bytes:
    body = _len_field(_number(memory_pb2.MemoryInput, "content"), content)
    if metadata:
        body += _len_field(_number(memory_pb2.MemoryInput, "metadata"), metadata)
    return body


_FILTER = _number(retrieval_pb2.ListMemoriesRequest, "filter")
_MEMORIES = _number(writeback_pb2.AddMemoriesRequest, "memories")
_METADATA = _number(filter_pb2.MemoryFilter, "metadata")
_CONDITION = _number(filter_pb2.MetadataFilter, "condition")
_VALUE = _number(filter_pb2.MetadataCondition, "value")
_STRUCT_VALUE = _number(struct_pb2.Value, "struct_value")


def _nots(levels: int) -> bytes:
    """A MetadataFilter of *levels* nested `not`s around one EXISTS condition, serialized."""
    data = filter_pb2.MetadataFilter(
        condition=filter_pb2.MetadataCondition(key="k", operator=filter_pb2.CONDITION_OPERATOR_EXISTS)
    ).SerializeToString()
    for _ in range(levels - 1):
        data = _len_field(_number(filter_pb2.MetadataFilter, "not"), data)
    return data


RAW_CASES: list[tuple[str, str, bytes, str]] = [
    ("garbage", SEARCH, b"\xff\xff\xff\xff", "request"),
    ("truncated string", SEARCH, b"\x0a\x05ab", "queries[0]"),
    ("invalid utf-8 query", SEARCH, _len_field(1, b"spare \xff\xfe key"), "queries[0]"),
    ("invalid utf-8 second query", SEARCH, _len_field(1, b"ok") + _len_field(1, b"\xc3\x28"), "queries[1]"),
    (
        "invalid utf-8 filter scope",
        LIST,
        _len_field(_FILTER, _len_field(_number(filter_pb2.MemoryFilter, "user_id"), b"al\xffce")),
        "filter.user_id",
    ),
    ("invalid utf-8 content", ADD, _len_field(_MEMORIES, _memory_input_bytes(b"caf\xe9")), "memories[0].content"),
    (
        "metadata nested 40 levels",
        ADD,
        _len_field(_MEMORIES, _memory_input_bytes(b"deep", deep_struct(40))),
        "memories[0].metadata",
    ),
    (
        "second memory's metadata nested 60 levels",
        ADD,
        _len_field(_MEMORIES, _memory_input_bytes(b"fine"))
        + _len_field(_MEMORIES, _memory_input_bytes(b"deep", deep_struct(60))),
        "memories[1].metadata",
    ),
    (
        "filter value nested 40 levels",
        LIST,
        _len_field(
            _FILTER,
            _len_field(
                _METADATA,
                _len_field(_CONDITION, _len_field(_VALUE, _len_field(_STRUCT_VALUE, deep_struct(40)))),
            ),
        ),
        "filter.metadata.condition.value",
    ),
    (
        "metadata filter nested 120 levels",
        LIST,
        _len_field(_FILTER, _len_field(_METADATA, _nots(120))),
        "filter.metadata",
    ),
    ("invalid utf-8 health service name", HEALTH, _len_field(1, b"\xff"), "service"),
]


def _identity(data: bytes) -> bytes:
    return data


async def _raw_call(target: str, method: str, body: bytes, key: str) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(method, request_serializer=_identity, response_deserializer=_identity)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(body, metadata=(("authorization", f"Bearer {key}"),), timeout=30)
    return caught.value


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]


@pytest.mark.parametrize(("method", "body", "field"), [pytest.param(m, b, f, id=i) for i, m, b, f in RAW_CASES])
async def test_undecodable_request_is_invalid_argument_naming_the_field(
    server: str, workspace: TestWorkspace, caplog: pytest.LogCaptureFixture, method: str, body: bytes, field: str
) -> None:
    [stored] = await workspace.client.add_memories([mem("kept as it is", embedding=unit_vectors(1, seed=3)[0])])
    caplog.set_level(logging.DEBUG)
    caplog.clear()

    error = await _raw_call(server, method, body, workspace.key)

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert field in (error.details() or "")
    typed = from_rpc_error(error)
    assert isinstance(typed, InvalidArgumentError)
    assert fields(typed) == [field]
    assert _tracebacks(caplog) == []
    assert [m.id for m in await list_all(workspace.client)] == [stored.id]


async def test_a_body_that_decodes_still_reaches_the_service(server: str, workspace: TestWorkspace) -> None:
    # The decoding guard passes a well-formed body through untouched: the same raw path
    # with valid bytes gets a real reply.
    [stored] = await workspace.client.add_memories([mem("the spare key", embedding=unit_vectors(1, seed=4)[0])])
    async with grpc.aio.insecure_channel(server) as channel:
        call = channel.unary_unary(LIST, request_serializer=_identity, response_deserializer=_identity)
        raw = await call(b"", metadata=(("authorization", f"Bearer {workspace.key}"),), timeout=30)
    reply = retrieval_pb2.ListMemoriesResponse.FromString(raw)
    assert [m.id for m in reply.memories] == [stored.id]


# -- headers ------------------------------------------------------------------------------


async def _list_with(target: str, metadata: tuple[tuple[str, str | bytes], ...]) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(LIST, request_serializer=_identity, response_deserializer=_identity)
        try:
            await call(b"", metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


# gRPC's client refuses to send a NUL or any non-printable byte in a text header ("Bearer
# \x00" never leaves the channel), so a NUL can only arrive in a binary header, which the
# server does not read as a credential.
@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param((), grpc.StatusCode.UNAUTHENTICATED, id="missing"),
        pytest.param((("authorization-bin", b"Bearer \x00"),), grpc.StatusCode.UNAUTHENTICATED, id="binary NUL"),
        pytest.param((("authorization", "Basic abc"),), grpc.StatusCode.UNAUTHENTICATED, id="basic"),
        pytest.param((("authorization", "Bearer "),), grpc.StatusCode.UNAUTHENTICATED, id="empty bearer"),
        pytest.param((("authorization", "Bearer"),), grpc.StatusCode.UNAUTHENTICATED, id="scheme only"),
        pytest.param((("authorization", "Bearer ~~ ~~"),), grpc.StatusCode.UNAUTHENTICATED, id="bearer junk"),
        pytest.param((("authorization", "Bearer mp__"),), grpc.StatusCode.UNAUTHENTICATED, id="empty key parts"),
        pytest.param(
            (("authorization", "Bearer mp_x_" + "k" * 20_000),), grpc.StatusCode.RESOURCE_EXHAUSTED, id="20 KB key"
        ),
    ],
)
async def test_a_missing_or_garbage_authorization_header_is_a_clear_code(
    server: str,
    caplog: pytest.LogCaptureFixture,
    metadata: tuple[tuple[str, str | bytes], ...],
    expected: grpc.StatusCode,
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    assert await _list_with(server, metadata) == expected
    assert _tracebacks(caplog) == []


async def test_an_oversized_header_is_resource_exhausted(server: str, workspace: TestWorkspace) -> None:
    junk = (("x-junk", "j" * 65_536), ("authorization", f"Bearer {workspace.key}"))
    assert await _list_with(server, junk) == grpc.StatusCode.RESOURCE_EXHAUSTED
    # and the server is unharmed: the same key without the junk still reads
    assert await _list_with(server, (("authorization", f"Bearer {workspace.key}"),)) == grpc.StatusCode.OK


async def test_a_key_of_a_deleted_workspace_is_unauthenticated(
    server: str, admin_client: AsyncMemplaneClient, workspace: TestWorkspace
) -> None:
    await workspace.client.add_memories([mem("soon gone", embedding=unit_vectors(1, seed=6)[0])])
    await admin_client.delete_workspace(workspace.name)
    for call in (workspace.client.list_memories, lambda: workspace.client.search("soon gone")):
        with pytest.raises(UnauthenticatedError):
            await call()


async def test_a_key_of_a_re_created_workspace_is_unauthenticated(
    server: str, admin_client: AsyncMemplaneClient, workspace: TestWorkspace
) -> None:
    await workspace.client.add_memories([mem("old tenant", embedding=unit_vectors(1, seed=7)[0])])
    await admin_client.delete_workspace(workspace.name)
    await admin_client.create_workspace(workspace.name)
    new_key = (await admin_client.create_api_key(workspace.name)).api_key
    for call in (workspace.client.list_memories, lambda: workspace.client.search("old tenant")):
        with pytest.raises(UnauthenticatedError):
            await call()
    async with AsyncMemplaneClient(server, new_key) as fresh:
        assert await list_all(fresh) == []  # the new workspace sees nothing of the old one


REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


async def _read_to_the_end(stream: grpc.aio.StreamStreamCall[bytes, bytes]) -> None:
    while await stream.read() is not grpc.aio.EOF:
        pass


async def test_an_undecodable_message_in_a_request_stream_is_invalid_argument(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Reflection, the one method with a request stream: the first message decodes (a
    # list_services request, field 7) and is answered, the second is not protobuf.
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    async with grpc.aio.insecure_channel(server) as channel:
        call = channel.stream_stream(REFLECTION, request_serializer=_identity, response_deserializer=_identity)
        stream = call(timeout=30)
        await stream.write(_len_field(7, b""))
        assert await stream.read()  # the well-formed request got its answer
        await stream.write(b"\xff\xff\xff")
        await stream.done_writing()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _read_to_the_end(stream)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (caught.value.code(), caught.value.details())
    assert "request" in (caught.value.details() or "")
    assert _tracebacks(caplog) == []
