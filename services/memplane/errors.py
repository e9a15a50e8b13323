"""The one exception hierarchy. Domain code raises these; the gRPC edge maps each class
to a status code and a `google.rpc.ErrorInfo` reason (`memplane.server.api.errors`); the client
SDK turns statuses back into the same classes. Driver errors never leave storage/."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: *field* is a path such as ``memories[2].metadata``."""

    field: str
    description: str


class MemplaneError(Exception):
    """Root of every memplane error. Each class's `reason` (the `google.rpc.ErrorInfo`
    reason on the wire) is registered once, so the SDK maps a reason back to its class."""

    reason = "INTERNAL"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _BY_REASON[cls.reason] = cls


_BY_REASON: dict[str, type[MemplaneError]] = {}


def lookup(reason: str) -> type[MemplaneError] | None:
    """The error class whose `reason` is *reason* (None if no class has it)."""
    return _BY_REASON.get(reason)


class InvalidArgumentError(MemplaneError):
    """The request is malformed; `violations` names each bad field."""

    reason = "INVALID_ARGUMENT"

    def __init__(self, violations: list[FieldViolation] | FieldViolation) -> None:
        self.violations = violations if isinstance(violations, list) else [violations]
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))


class NotFoundError(MemplaneError):
    """A resource does not exist in the caller's workspace."""

    reason = "NOT_FOUND"

    def __init__(self, resource_type: str, resource_name: str) -> None:
        self.resource_type = resource_type
        self.resource_name = resource_name
        super().__init__(f"{resource_type} {resource_name!r} not found")


class AlreadyExistsError(MemplaneError):
    """A resource with that name already exists."""

    reason = "ALREADY_EXISTS"

    def __init__(self, resource_type: str, resource_name: str) -> None:
        self.resource_type = resource_type
        self.resource_name = resource_name
        super().__init__(f"{resource_type} {resource_name!r} already exists")


class VersionConflictError(MemplaneError):
    """The stored version differs from the expected one (optimistic concurrency)."""

    reason = "VERSION_CONFLICT"

    def __init__(self, memory_id: str, expected: int, actual: int) -> None:
        self.memory_id, self.expected, self.actual = memory_id, expected, actual
        super().__init__(f"memory {memory_id} is at version {actual}, not {expected}")


class QuotaExceededError(MemplaneError):
    """A workspace quota would be exceeded. *quota_id* names the quota as the proto's
    `WorkspaceQuotas` field does (e.g. ``max_memories``); *limit* is its value."""

    reason = "QUOTA_EXCEEDED"

    def __init__(self, subject: str, description: str, *, quota_id: str = "", limit: int = 0) -> None:
        self.subject, self.description = subject, description
        self.quota_id, self.limit = quota_id, limit
        super().__init__(f"{subject}: {description}")


class MessageTooLargeError(MemplaneError):
    """A request or reply is larger than gRPC's message limit (`grpc.max_message_bytes`,
    16 MiB by default); gRPC itself refuses it with RESOURCE_EXHAUSTED, before memplane."""

    reason = "MESSAGE_TOO_LARGE"


class FailedPreconditionError(MemplaneError):
    """The system is not in a state the request needs (e.g. embedding dimension mismatch)."""

    reason = "FAILED_PRECONDITION"


class EmbeddingMismatchError(FailedPreconditionError):
    """The server's embedding model or dimension differs from the workspace's."""

    reason = "EMBEDDING_MISMATCH"


class KeyRevokedError(FailedPreconditionError):
    """An API key given to CreateApiKey for import was revoked before."""

    reason = "KEY_REVOKED"


class UnauthenticatedError(MemplaneError):
    """No credential, or an unknown or revoked one."""

    reason = "UNAUTHENTICATED"


class WorkspaceDeletedError(UnauthenticatedError):
    """The caller's workspace was deleted while its request ran (its key was verified
    before the deletion); every later request with the key is `UnauthenticatedError`."""

    reason = "WORKSPACE_DELETED"

    def __init__(self, workspace: str = "") -> None:
        self.workspace = workspace
        super().__init__(f"workspace {workspace!r} was deleted" if workspace else "the workspace was deleted")


class PermissionDeniedError(MemplaneError):
    """The credential is valid but not allowed this call."""

    reason = "PERMISSION_DENIED"


class DeadlineExceededError(MemplaneError):
    """The database cancelled a statement that ran past `database.statement_timeout`."""

    reason = "DEADLINE_EXCEEDED"


class UnavailableError(MemplaneError):
    """A dependency (database, embedding endpoint) cannot be reached; retry later."""

    reason = "UNAVAILABLE"


_BY_REASON[MemplaneError.reason] = MemplaneError
