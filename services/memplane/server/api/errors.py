"""One table from `MemplaneError` classes to gRPC status codes, with `google.rpc` details.

Every error carries an `ErrorInfo` (reason UPPER_SNAKE_CASE, domain "memplane.io",
AIP-193) plus, by kind: `BadRequest` field violations, `ResourceInfo`, `QuotaFailure`.
Clients read them with `grpc_status.rpc_status.from_call` (memplane.client does).
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from memplane import errors

_log = logging.getLogger(__name__)

ERROR_DOMAIN = "memplane.io"

# Most specific class first.
STATUS_CODES: list[tuple[type[errors.MemplaneError], grpc.StatusCode]] = [
    (errors.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (errors.VersionConflictError, grpc.StatusCode.ABORTED),
    (errors.QuotaExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
]


def status_code_of(error: errors.MemplaneError) -> grpc.StatusCode:
    """The gRPC code for *error* (INTERNAL for the root class)."""
    for cls, code in STATUS_CODES:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


# gRPC carries the status in trailing metadata (default limit 16 KiB on the client), so
# replies are bounded: at most MAX_VIOLATIONS field violations, each text clipped.
MAX_VIOLATIONS = 20
MAX_TEXT = 200
MAX_MESSAGE = 1024


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _metadata(error: errors.MemplaneError) -> dict[str, str]:
    """The ErrorInfo metadata of *error*: a version conflict's memory id and both versions
    (`memory_id`, `expected_version`, `actual_version`), which the SDK reads back."""
    if isinstance(error, errors.VersionConflictError):
        return {
            "memory_id": error.memory_id,
            "expected_version": str(error.expected),
            "actual_version": str(error.actual),
        }
    return {}


def to_status(error: errors.MemplaneError) -> status_pb2.Status:
    """A `google.rpc.Status` with the code, message and details for *error*, bounded in
    size (the first MAX_VIOLATIONS violations; texts clipped) so it always fits in
    gRPC's trailing metadata."""
    code = status_code_of(error)
    details = [_pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=_metadata(error)))]
    if isinstance(error, errors.InvalidArgumentError):
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=_clip(v.field), description=_clip(v.description)
                        )
                        for v in error.violations[:MAX_VIOLATIONS]
                    ]
                )
            )
        )
    elif isinstance(error, errors.NotFoundError | errors.AlreadyExistsError):
        details.append(
            _pack(
                error_details_pb2.ResourceInfo(
                    resource_type=error.resource_type, resource_name=error.resource_name, description=str(error)
                )
            )
        )
    elif isinstance(error, errors.QuotaExceededError):
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=error.subject,
                            description=error.description,
                            quota_id=error.quota_id,
                            quota_value=error.limit,
                        )
                    ]
                )
            )
        )
    message = str(error)
    if isinstance(error, errors.InvalidArgumentError):
        shown = "; ".join(f"{_clip(v.field)}: {_clip(v.description)}" for v in error.violations[:3])
        more = len(error.violations) - 3
        message = shown + (f"; and {more} more (see BadRequest)" if more > 0 else "")
    return status_pb2.Status(code=code.value[0], message=_clip(message, MAX_MESSAGE), details=details)


async def abort_with(context: grpc.aio.ServicerContext[object, object], error: errors.MemplaneError) -> None:
    """Abort the RPC with the rich status of *error* (never returns)."""
    await context.abort_with_status(rpc_status.to_status(to_status(error)))  # type: ignore[attr-defined]


INTERNAL_STATUS = status_pb2.Status(code=code_pb2.INTERNAL, message="internal error")
