"""Requests whose bytes do not decode: INVALID_ARGUMENT naming the field, for every service.

gRPC decodes a request with the method's generated `FromString` before any servicer code
runs; a `DecodeError` there (malformed protobuf, invalid UTF-8 in a proto3 string field,
nesting past upb's limit of 100 message levels — metadata nested 40 levels is 120) would
reach grpcio's own handler: UNKNOWN, and a traceback logged per request.
`GuardedRegistrar` wraps the request deserializer of every method (health and
reflection included) as the service registers it, so such a body becomes a marker the
wrapped behaviour turns into INVALID_ARGUMENT with a `BadRequest` violation. (Done once
per method at registration, not by a server interceptor: an interceptor's coroutine and
wrapping ran on every call.) protobuf reports no position, so
`locate_violation` walks the wire format (https://protobuf.dev/programming-guides/encoding/)
to name the field: the deepest length-delimited field that fails to decode on its own.
A request stream (reflection's) is aborted when the handler reads the message that does
not decode; the ones before it were answered.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.api.errors import abort_with

# upb's decoder says "Exceeded upb_DecodeOptions_MaxDepth" for nesting past its limit (100).
_DEPTH_MARK = "MaxDepth"
_WELL_KNOWN = "google.protobuf."  # Struct, Value, ListValue, Timestamp…: named as one field
_WHOLE = "request"
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5

Context = grpc.aio.ServicerContext[Any, Any]


class _Undecodable:
    """What the guarded deserializer returns for bytes that do not decode."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgumentError) -> None:
        self.error = error


class _CorruptError(Exception):
    """The wire format ends or breaks inside the field being read."""


def _describe(error: Exception) -> str:
    if _DEPTH_MARK in str(error) or isinstance(error, RecursionError):
        return "nests too deeply to decode (protobuf's limit is 100 message levels)"
    if "UTF-8" in str(error):  # upb: "String field had bad UTF-8"
        return "must be valid UTF-8"
    return "is not valid protobuf (truncated or corrupt wire format)"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data) and shift < 70:  # a varint is at most 10 bytes
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos
    raise _CorruptError


def _skip(data: bytes, pos: int, wire_type: int, number: int) -> tuple[bytes | None, int]:
    """The payload of a length-delimited field (None for other wire types) and the
    position after the field. Raises `_CorruptError` where the bytes end or break."""
    if wire_type == _VARINT:
        return None, _varint(data, pos)[1]
    if wire_type in (_I64, _I32):
        end = pos + (8 if wire_type == _I64 else 4)
    elif wire_type == _LEN:
        length, pos = _varint(data, pos)
        end = pos + length
        if end > len(data):
            raise _CorruptError
        return data[pos:end], end
    elif wire_type == _SGROUP:  # a proto2 group: skip to its matching end tag
        while True:
            tag, pos = _varint(data, pos)
            if tag >> 3 == number and tag & 7 == _EGROUP:
                return None, pos
            _, pos = _skip(data, pos, tag & 7, tag >> 3)
    else:
        raise _CorruptError
    if end > len(data):
        raise _CorruptError
    return None, end


def _decodes(descriptor: Descriptor, data: bytes) -> Exception | None:
    try:
        message_factory.GetMessageClass(descriptor).FromString(data)
    except (pb_message.DecodeError, RecursionError) as error:
        return error
    return None


def _field_path(prefix: str, field: FieldDescriptor, index: int) -> str:
    name = f"{prefix}.{field.name}" if prefix else field.name
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    return f"{name}[{index}]" if field.is_repeated and not is_map else name


def locate_violation(
    descriptor: Descriptor, data: bytes, error: Exception, prefix: str = "", outer: Mapping[str, str] | None = None
) -> FieldViolation:
    """The field of *data* (a serialized *descriptor* message that failed to decode with
    *error*) to blame: a string field that is not UTF-8, the deepest message field that
    does not decode on its own (a well-known type such as `Struct` counts as one field; for
    too deep a nesting, the outermost field of a type that nests itself), the field in
    which the bytes end, or ``request`` for bytes that are not protobuf at all.
    Paths read as the `BadRequest` violations of the services do: ``memories[1].metadata``."""
    outer = outer or {descriptor.full_name: prefix or _WHOLE}  # message type -> its outermost path
    counts: dict[int, int] = {}
    pos = 0
    while pos < len(data):
        try:
            tag, pos = _varint(data, pos)
        except _CorruptError:
            break
        number, wire_type = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        index = counts.get(number, 0)
        counts[number] = index + 1
        if field is None or descriptor.GetOptions().map_entry:  # a map's key and value: the map's field
            path = prefix or _WHOLE
        else:
            path = _field_path(prefix, field, index)
        try:
            payload, pos = _skip(data, pos, wire_type, number)
        except _CorruptError:
            return FieldViolation(path, "is not valid protobuf (truncated or corrupt wire format)")
        if field is None or payload is None:
            continue
        if field.type == FieldDescriptor.TYPE_STRING:
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError:
                return FieldViolation(path, "must be valid UTF-8")
        elif field.message_type is not None:
            inner = _decodes(field.message_type, payload)
            if inner is None:
                continue
            if field.message_type.full_name.startswith(_WELL_KNOWN):
                return FieldViolation(path, _describe(inner))
            kind = field.message_type.full_name
            if kind in outer and _DEPTH_MARK in str(inner):  # a type nesting itself: name its outermost field
                return FieldViolation(outer[kind], _describe(inner))
            return locate_violation(field.message_type, payload, inner, path, {kind: path, **outer})
    return FieldViolation(prefix or _WHOLE, _describe(error))


def guarded(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """*deserializer* (a generated message's `FromString`), returning an `_Undecodable`
    carrying the `InvalidArgumentError` instead of raising for bytes that do not decode."""
    descriptor: Descriptor | None = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (pb_message.DecodeError, RecursionError) as error:
            if descriptor is None:
                violation = FieldViolation(_WHOLE, _describe(error))
            else:
                violation = locate_violation(descriptor, data, error)
            return _Undecodable(InvalidArgumentError(violation))

    return deserialize


def _refusing(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    """*behaviour* (a unary-request handler), aborting with INVALID_ARGUMENT first when the
    request did not decode. Keeps the handler's kind: coroutine or async generator."""
    if inspect.isasyncgenfunction(behaviour):

        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await abort_with(context, request.error)
            async for reply in behaviour(request, context):
                yield reply

        return stream

    async def unary(request: Any, context: Context) -> Any:
        if isinstance(request, _Undecodable):
            await abort_with(context, request.error)
        return await behaviour(request, context)

    return unary


def _refusing_stream(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    """*behaviour* (a request-streaming handler) reading a request stream that aborts with
    INVALID_ARGUMENT at the first message that did not decode. Keeps the handler's kind."""

    async def requests(iterator: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        async for request in iterator:
            if isinstance(request, _Undecodable):
                await abort_with(context, request.error)
            yield request

    if inspect.isasyncgenfunction(behaviour):

        async def stream(iterator: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            async for reply in behaviour(requests(iterator, context), context):
                yield reply

        return stream

    async def unary(iterator: AsyncIterator[Any], context: Context) -> Any:
        return await behaviour(requests(iterator, context), context)

    return unary


def guard(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """*handler* with its request deserializer `guarded` and its behaviour refusing what
    did not decode (see the module): a unary request is refused before the behaviour runs,
    a streamed one when the behaviour reads it. A handler without a request deserializer
    (raw bytes) is returned as it is."""
    if handler.request_deserializer is None:
        return handler
    deserializer = guarded(handler.request_deserializer)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            _refusing_stream(handler.stream_stream),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _refusing_stream(handler.stream_unary),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _refusing(handler.unary_unary),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.unary_stream_rpc_method_handler(
        _refusing(handler.unary_stream),  # type: ignore[arg-type]
        request_deserializer=deserializer,
        response_serializer=handler.response_serializer,
    )


class _GuardedGeneric(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """A generic handler whose handlers are `guard`ed, each once: the first call of a
    method wraps it, later calls reuse that wrapping."""

    def __init__(self, inner: grpc.GenericRpcHandler[Any, Any]) -> None:
        self._inner = inner
        self._guarded: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        if method not in self._guarded:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # an unknown method: nothing kept for it
            self._guarded[method] = guard(handler)
        return self._guarded[method]


class GuardedRegistrar:
    """Stands for a `grpc.aio.Server` where a service registers itself (the generated
    `add_*Servicer_to_server`, health's, reflection's): every method handler it adds is
    `guard`ed once, here, so no interceptor runs on each call to do it. What is registered
    goes to *server*; nothing else of the server is reachable through this."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None:
        self._server.add_generic_rpc_handlers([_GuardedGeneric(h) for h in generic_rpc_handlers])

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        guarded_handlers = {name: guard(h) for name, h in method_handlers.items()}
        self._server.add_registered_method_handlers(service_name, guarded_handlers)  # type: ignore[attr-defined]
