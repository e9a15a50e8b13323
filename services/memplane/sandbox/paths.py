"""POSIX path logic of the sandboxes as pure string operations (`posixpath`, never the
host's filesystem, `cwd` or `$HOME`): a sandbox path is relative to the sandbox root and
must stay under it. Symlinks are the backends' part (`SandboxBackend._realpath`)."""

from __future__ import annotations

import posixpath

from memplane.sandbox.errors import SandboxPathError

ROOT = "."  # the sandbox root, as a relative path


def confine(path: str, *, allow_root: bool = True) -> str:
    """*path* normalised relative to the sandbox root ("Memory/MEMORY.md", or "." for the
    root itself). Raises `SandboxPathError` naming *path* when it is empty, holds a NUL
    byte, is absolute, or leaves the root through ``..`` (``a/../b`` is fine: it is
    ``b``); and when it is the root itself unless *allow_root*."""
    if not path:
        raise SandboxPathError(path, "is empty")
    if "\0" in path:
        raise SandboxPathError(path, "holds a NUL byte")
    if posixpath.isabs(path):
        raise SandboxPathError(path, "is absolute: sandbox paths are relative to the sandbox root")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise SandboxPathError(path, "leaves the sandbox root through '..'")
    if normal == ROOT and not allow_root:
        raise SandboxPathError(path, "is the sandbox root itself")
    return normal


def join_root(root: str, relative: str) -> str:
    """The absolute path (in the sandbox's environment) of *relative* (from `confine`)
    under *root*."""
    return root if relative == ROOT else posixpath.join(root, relative)


def is_within(root: str, path: str) -> bool:
    """Whether the absolute, symlink-free *path* is *root* or below it (both normalised)."""
    root, path = posixpath.normpath(root), posixpath.normpath(path)
    return path == root or path.startswith(root.rstrip("/") + "/")
