"""`locate_violation` names the field of a request body that does not decode, across
protobuf's wire types, and `GuardedRegistrar` guards a service's handlers on both of
grpc's registration paths (tests/e2e/test_wire_input.py sends such bodies over gRPC)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import message as pb_message

from memplane.errors import FieldViolation
from memplane.server.api.decoding import GuardedRegistrar, guarded, locate_violation
from memplane.v1 import admin_pb2, memory_pb2, retrieval_pb2, writeback_pb2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    tag = _varint(number << 3 | wire_type)
    return tag + (_varint(len(payload)) + payload if wire_type == 2 else payload)


TOP_K = _field(2, 0, _varint(5))  # SearchMemoriesRequest.top_k, a varint
MIN_SCORE = _field(3, 1, struct.pack("<d", 0.5))  # min_score, a double (fixed 64 bits)
UNKNOWN_FIXED32 = _field(90, 5, b"\x00\x00\x00\x00")
UNKNOWN_GROUP = _varint(91 << 3 | 3) + _field(1, 0, b"\x01") + _varint(91 << 3 | 4)


def _located(message: type[pb_message.Message], data: bytes) -> FieldViolation:
    with pytest.raises(pb_message.DecodeError) as caught:
        message.FromString(data)
    return locate_violation(message.DESCRIPTOR, data, caught.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(TOP_K + MIN_SCORE + _field(1, 2, b"\xff"), "queries[0]", id="after varint and fixed64"),
        pytest.param(UNKNOWN_FIXED32 + UNKNOWN_GROUP + _field(1, 2, b"\xc3"), "queries[0]", id="after unknown fields"),
        pytest.param(TOP_K + b"\x1d\x00", "min_score", id="fixed64 cut short"),
        pytest.param(TOP_K + b"\x10", "top_k", id="varint cut short"),
        pytest.param(b"\x07", "request", id="wire type 7"),
    ],
)
def test_the_field_is_named_across_wire_types(data: bytes, field: str) -> None:
    assert _located(retrieval_pb2.SearchMemoriesRequest, data).field == field


def test_a_map_value_that_is_not_utf8_names_the_map() -> None:
    entry = _field(1, 2, b"team") + _field(2, 2, b"\xff")
    data = _field(1, 2, b"ws") + _field(6, 2, entry)  # CreateWorkspaceRequest.labels = 6
    violation = _located(admin_pb2.CreateWorkspaceRequest, data)
    assert (violation.field, violation.description) == ("labels", "must be valid UTF-8")


def test_a_struct_key_that_is_not_utf8_names_the_struct_field() -> None:
    entry = _field(1, 2, b"\xff") + _field(2, 2, b"")  # a Struct.fields entry: bad key, empty Value
    memory = _field(memory_pb2.MemoryInput.DESCRIPTOR.fields_by_name["metadata"].number, 2, _field(1, 2, entry))
    data = _field(1, 2, b"") + _field(1, 2, memory)  # AddMemoriesRequest.memories = 1
    violation = _located(writeback_pb2.AddMemoriesRequest, data)
    assert (violation.field, violation.description) == ("memories[1].metadata", "must be valid UTF-8")


def test_guarded_passes_a_good_body_through() -> None:
    request = retrieval_pb2.SearchMemoriesRequest(queries=["spare key"], top_k=3)
    decoded = guarded(retrieval_pb2.SearchMemoriesRequest.FromString)(request.SerializeToString())
    assert decoded == request


class _Recorder:
    """What `GuardedRegistrar` registers into (a grpc.aio.Server's two registration calls)."""

    def __init__(self) -> None:
        self.generic: list[grpc.GenericRpcHandler[Any, Any]] = []
        self.registered: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.registered.update({f"/{service}/{name}": h for name, h in handlers.items()})


@dataclass(frozen=True)
class _Details:
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


async def _search(
    request: retrieval_pb2.SearchMemoriesRequest, context: object
) -> retrieval_pb2.SearchMemoriesResponse:
    return retrieval_pb2.SearchMemoriesResponse()


def _registered_both_ways() -> _Recorder:
    """A service registered through `GuardedRegistrar` as generated code does: its
    handlers both as a generic handler and as registered method handlers."""
    handlers = {
        "SearchMemories": grpc.unary_unary_rpc_method_handler(
            _search,
            request_deserializer=retrieval_pb2.SearchMemoriesRequest.FromString,
            response_serializer=retrieval_pb2.SearchMemoriesResponse.SerializeToString,
        )
    }
    recorder = _Recorder()
    registrar = GuardedRegistrar(recorder)  # type: ignore[arg-type]
    registrar.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("memplane.v1.RetrievalService", handlers)])
    registrar.add_registered_method_handlers("memplane.v1.RetrievalService", handlers)
    return recorder


METHOD = "/memplane.v1.RetrievalService/SearchMemories"
UNDECODABLE = _field(1, 2, b"\xff")  # queries[0] is not UTF-8


@pytest.mark.parametrize("path", ["generic", "registered"])
def test_a_registered_method_refuses_a_body_that_does_not_decode(path: str) -> None:
    recorder = _registered_both_ways()
    handler = recorder.generic[0].service(_Details(METHOD)) if path == "generic" else recorder.registered[METHOD]
    assert handler is not None
    assert handler.request_deserializer is not None
    marker = handler.request_deserializer(UNDECODABLE)
    assert not isinstance(marker, retrieval_pb2.SearchMemoriesRequest)
    assert marker.error.violations[0].field == "queries[0]"
    good = retrieval_pb2.SearchMemoriesRequest(queries=["spare key"], top_k=3)
    assert handler.request_deserializer(good.SerializeToString()) == good


def test_the_generic_path_wraps_a_method_once_and_an_unknown_one_not_at_all() -> None:
    generic = _registered_both_ways().generic[0]
    assert generic.service(_Details(METHOD)) is generic.service(_Details(METHOD))
    assert generic.service(_Details("/memplane.v1.RetrievalService/Nope")) is None
