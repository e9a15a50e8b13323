"""Rich gRPC statuses back into `memplane.errors` classes (the inverse of api/errors.py).

The `google.rpc.Status` is read from the `grpc-status-details-bin` trailer here, as
grpcio-status's `rpc_status.from_call` does, so the bare client needs no grpcio-status."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from memplane import errors


def from_rpc_error(error: grpc.aio.AioRpcError | grpc.RpcError) -> errors.MemplaneError:
    """The typed exception for a failed call, details included (field violations,
    resource info, quota failure). Unknown codes become `MemplaneError`."""
    status = _rich_status(error)
    code = error.code()
    message = error.details() or ""
    violations: list[errors.FieldViolation] = []
    resource = ("", "")
    quota: tuple[str, str, str, int] = ("", "", "", 0)
    reason = ""
    metadata: dict[str, str] = {}
    for detail in status.details if status is not None else []:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [errors.FieldViolation(v.field, v.description) for v in bad.field_violations]
        elif detail.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
            info = error_details_pb2.ResourceInfo()
            detail.Unpack(info)
            resource = (info.resource_type, info.resource_name)
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            qf = error_details_pb2.QuotaFailure()
            detail.Unpack(qf)
            if qf.violations:
                first = qf.violations[0]
                quota = (first.subject, first.description, first.quota_id, first.quota_value)
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            ei = error_details_pb2.ErrorInfo()
            detail.Unpack(ei)
            reason, metadata = ei.reason, dict(ei.metadata)
    return _typed(
        code, message, violations=violations, resource=resource, quota=quota, reason=reason, metadata=metadata
    )


DETAILS_METADATA_KEY = "grpc-status-details-bin"


def _rich_status(error: grpc.aio.AioRpcError | grpc.RpcError) -> status_pb2.Status | None:
    """The `google.rpc.Status` of the call's trailers, None when there is none or it
    disagrees with the call's own code (then the code is what counts)."""
    trailers: Any = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == DETAILS_METADATA_KEY and isinstance(value, bytes):
            rich = status_pb2.Status.FromString(value)
            return rich if rich.code == error.code().value[0] else None
    return None


_SIMPLE: dict[grpc.StatusCode, type[errors.MemplaneError]] = {
    grpc.StatusCode.UNAUTHENTICATED: errors.UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: errors.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceededError,
}


def _typed(  # noqa: PLR0911 - one return per status code
    code: grpc.StatusCode,
    message: str,
    *,
    violations: list[errors.FieldViolation],
    resource: tuple[str, str],
    quota: tuple[str, str, str, int],
    reason: str,
    metadata: dict[str, str],
) -> errors.MemplaneError:
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return errors.InvalidArgumentError(violations or [errors.FieldViolation("", message)])
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS):
        cls = errors.NotFoundError if code == grpc.StatusCode.NOT_FOUND else errors.AlreadyExistsError
        return cls(*resource) if resource[0] else cls("resource", message)
    if code == grpc.StatusCode.ABORTED:
        return _version_conflict(message, metadata)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if quota[0]:  # memplane's own quota refusals always carry a QuotaFailure
            return errors.QuotaExceededError(quota[0], quota[1], quota_id=quota[2], limit=quota[3])
        if "larger than max" in message:  # gRPC's "Received message larger than max (n vs. m)"
            return errors.MessageTooLargeError(message)
        return errors.MemplaneError(f"{code.name}: {message}")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        found = errors.lookup(reason)  # the reason names the subclass (EMBEDDING_MISMATCH, KEY_REVOKED)
        precise = found is not None and issubclass(found, errors.FailedPreconditionError)
        return (found if found is not None and precise else errors.FailedPreconditionError)(message)
    if code in _SIMPLE:
        return _SIMPLE[code](message)
    return errors.MemplaneError(f"{code.name}: {message}")


def _version_conflict(message: str, metadata: dict[str, str]) -> errors.VersionConflictError:
    """The conflict the ErrorInfo metadata describes (memory id, expected and actual
    version); without it (an older server) the versions are 0 and the message is the server's."""
    err = errors.VersionConflictError(
        metadata.get("memory_id", ""), _int(metadata.get("expected_version")), _int(metadata.get("actual_version"))
    )
    err.args = (message,)
    return err


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
