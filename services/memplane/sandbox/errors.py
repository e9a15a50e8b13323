"""Errors of the sandbox backends, under the one hierarchy of `memplane.errors` (each
with its own `reason`, so the gRPC edge maps it by its parent and the SDK back by reason)."""

from __future__ import annotations

from memplane.errors import DeadlineExceededError, FieldViolation, InvalidArgumentError, NotFoundError, UnavailableError


class SandboxPathError(InvalidArgumentError):
    """A path is refused: absolute, escaping the sandbox root (by ``..`` or a symlink),
    empty, or holding a NUL byte. The message names the path and why."""

    reason = "SANDBOX_PATH_REFUSED"

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(FieldViolation("path", f"{path!r} {why}"))


class SandboxNotFoundError(NotFoundError):
    """The workspace's sandbox does not exist (never ensured, or destroyed)."""

    reason = "SANDBOX_NOT_FOUND"

    def __init__(self, workspace: str) -> None:
        super().__init__("sandbox", workspace)


class SandboxFileNotFoundError(NotFoundError):
    """No file (or directory, for `list_dir`) at a path inside the sandbox."""

    reason = "SANDBOX_FILE_NOT_FOUND"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__("sandbox path", path)


class SandboxExecTimeoutError(DeadlineExceededError):
    """A command run by `exec` did not finish within its timeout (it was killed)."""

    reason = "SANDBOX_EXEC_TIMEOUT"

    def __init__(self, argv: list[str], timeout_seconds: float) -> None:
        self.argv, self.timeout_seconds = argv, timeout_seconds
        super().__init__(f"{argv[0]!r} did not finish within {timeout_seconds:g} s and was killed")


class SandboxNotReadyError(UnavailableError):
    """The sandbox was created or resumed but did not become ready in time (a pod not
    scheduled, its volume not bound, its image not pulled); the message says what it
    waits on. Retry later."""

    reason = "SANDBOX_NOT_READY"

    def __init__(self, workspace: str, why: str) -> None:
        self.workspace = workspace
        super().__init__(f"sandbox {workspace!r} is not ready: {why}")
