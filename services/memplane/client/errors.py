"""Rich gRPC statuses back into `memplane.errors` classes (the inverse of api/errors.py)."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from memplane import errors


def from_rpc_error(error: grpc.aio.AioRpcError | grpc.RpcError) -> errors.MemplaneError:
    """The typed exception for a failed call, details included (field violations,
    resource info, quota failure). Unknown codes become `MemplaneError`."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    code = error.code()  # type: ignore[attr-defined]
    message = error.details() or ""  # type: ignore[attr-defined]
    violations: list[errors.FieldViolation] = []
    resource = ("", "")
    quota = ("", "")
    reason = ""
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
                quota = (qf.violations[0].subject, qf.violations[0].description)
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            ei = error_details_pb2.ErrorInfo()
            detail.Unpack(ei)
            reason = ei.reason
    result: errors.MemplaneError
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        result = errors.InvalidArgumentError(violations or [errors.FieldViolation("", message)])
    elif code == grpc.StatusCode.NOT_FOUND:
        result = errors.NotFoundError(*resource) if resource[0] else errors.NotFoundError("resource", message)
    elif code == grpc.StatusCode.ALREADY_EXISTS:
        result = errors.AlreadyExistsError(*resource) if resource[0] else errors.AlreadyExistsError("resource", message)
    elif code == grpc.StatusCode.ABORTED:
        result = errors.MemplaneError(message)
        result = _version_conflict(message)
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        result = errors.QuotaExceededError(*quota) if quota[0] else errors.QuotaExceededError("quota", message)
    elif code == grpc.StatusCode.FAILED_PRECONDITION:
        cls = errors.EmbeddingMismatchError if reason == "EMBEDDING_MISMATCH" else errors.FailedPreconditionError
        result = cls(message)
    elif code == grpc.StatusCode.UNAUTHENTICATED:
        result = errors.UnauthenticatedError(message)
    elif code == grpc.StatusCode.PERMISSION_DENIED:
        result = errors.PermissionDeniedError(message)
    elif code == grpc.StatusCode.UNAVAILABLE:
        result = errors.UnavailableError(message)
    else:
        result = errors.MemplaneError(f"{code.name}: {message}")
    return result


def _version_conflict(message: str) -> errors.VersionConflictError:
    err = errors.VersionConflictError("", 0, 0)
    err.args = (message,)
    return err
