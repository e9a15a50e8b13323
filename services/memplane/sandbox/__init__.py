"""Sandboxes: where a workspace's Markdown view lives as files. One interface,
`SandboxBackend` (lifecycle for the operator, file I/O for the services); backends:
`LocalSandboxes` (a directory per workspace) here; `memplane.sandbox.docker.DockerSandboxes`
(extra `sandbox-docker`) and `memplane.sandbox.e2b.E2BSandboxes` (extra `sandbox-e2b`)
import their SDKs, so they are imported from their modules."""

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
