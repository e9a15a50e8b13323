"""Sandboxes: where a workspace's Markdown view lives as files (issue 13). One interface,
`SandboxBackend` (lifecycle for the operator, file I/O for the services); backends:
`LocalSandboxes` (a directory per workspace)."""

from memplane.sandbox.base import DirEntry, ExecResult, SandboxBackend, SandboxHandle
from memplane.sandbox.errors import (
    SandboxExecTimeoutError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    SandboxPathError,
)
from memplane.sandbox.local import LocalSandboxes

__all__ = [
    "DirEntry",
    "ExecResult",
    "LocalSandboxes",
    "SandboxBackend",
    "SandboxExecTimeoutError",
    "SandboxFileNotFoundError",
    "SandboxHandle",
    "SandboxNotFoundError",
    "SandboxPathError",
]
