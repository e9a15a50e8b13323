"""How the JSON backend answers a failure: one JSON shape, ``{"error": {"code", "message",
...}}``, and an HTTP status per `memplane.errors` class (404 for a memory outside the
key's workspace, exactly as for one that never existed)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from memplane import errors

# Most specific first: the first class the error is an instance of decides.
STATUS: tuple[tuple[type[errors.MemplaneError], int], ...] = (
    (errors.InvalidArgumentError, 400),
    (errors.UnauthenticatedError, 401),
    (errors.PermissionDeniedError, 403),
    (errors.NotFoundError, 404),
    (errors.VersionConflictError, 409),
    (errors.AlreadyExistsError, 409),
    (errors.FailedPreconditionError, 412),
    (errors.MessageTooLargeError, 413),
    (errors.QuotaExceededError, 429),
    (errors.UnavailableError, 503),
    (errors.DeadlineExceededError, 504),
)


class RefusedError(Exception):
    """The console itself refuses a request: *status*, a short *code*, a *message*."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra

    def response(self) -> JSONResponse:
        """The JSON error answer (with Retry-After when `retry_after_seconds` is given)."""
        response = error_response(self.status, self.code, str(self), **self.extra)
        if "retry_after_seconds" in self.extra:
            response.headers["retry-after"] = str(self.extra["retry_after_seconds"])
        return response


class BadRequestError(RefusedError):
    """Bad input to the JSON backend itself (400); the message names the field."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "BAD_REQUEST", message)


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    """``{"error": {"code": code, "message": message, **extra}}`` with *status*."""
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


def from_memplane(error: errors.MemplaneError) -> JSONResponse:
    """The JSON answer for a failed gRPC call: its reason as the code, the message, and
    for a version conflict the expected and the stored version."""
    status = next((s for cls, s in STATUS if isinstance(error, cls)), 502)
    extra: dict[str, Any] = {}
    if isinstance(error, errors.VersionConflictError):
        extra = {"expected_version": error.expected, "actual_version": error.actual}
    if isinstance(error, errors.InvalidArgumentError):
        extra = {"fields": [{"field": v.field, "description": v.description} for v in error.violations]}
    message = "not found" if isinstance(error, errors.NotFoundError) else str(error)
    if isinstance(error, errors.QuotaExceededError) and error.quota_id == "max_requests_per_second":
        message = f"the workspace's request quota ({error.limit} per second) was reached; try again in a moment"
        response = error_response(status, error.reason, message, quota_id=error.quota_id, limit=error.limit)
        response.headers["retry-after"] = "1"
        return response
    return error_response(status, error.reason, message, **extra)
