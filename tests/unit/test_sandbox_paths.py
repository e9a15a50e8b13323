"""Sandbox path confinement as pure strings (memplane.sandbox.paths): no filesystem."""

from __future__ import annotations

import pytest

from memplane.sandbox.errors import SandboxPathError
from memplane.sandbox.paths import confine, is_within, join_root


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("Memory/MEMORY.md", "Memory/MEMORY.md"),
        ("./Memory//a.md", "Memory/a.md"),
        ("a/../b", "b"),
        ("a/b/../../c", "c"),
        (".", "."),
        ("a/..", "."),
        ("dir/", "dir"),
        ("..name/x", "..name/x"),  # a name that starts with dots is no parent reference
    ],
)
def test_confine_normalises(path: str, normal: str) -> None:
    assert confine(path) == normal


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "is empty"),
        ("a\0b", "NUL byte"),
        ("/etc/passwd", "is absolute"),
        ("//x", "is absolute"),
        ("..", "through '..'"),
        ("../x", "through '..'"),
        ("a/../../x", "through '..'"),
        ("./../x", "through '..'"),
    ],
)
def test_confine_refuses_naming_path_and_reason(path: str, why: str) -> None:
    with pytest.raises(SandboxPathError) as caught:
        confine(path)
    assert repr(path) in str(caught.value)
    assert why in str(caught.value)
    assert caught.value.path == path


def test_root_refused_where_asked() -> None:
    with pytest.raises(SandboxPathError, match="sandbox root itself"):
        confine("a/..", allow_root=False)


def test_join_and_within() -> None:
    assert join_root("/srv/ws", ".") == "/srv/ws"
    assert join_root("/srv/ws", "Memory/a.md") == "/srv/ws/Memory/a.md"
    assert is_within("/srv/ws", "/srv/ws")
    assert is_within("/srv/ws", "/srv/ws/a")
    assert is_within("/", "/anything")
    assert not is_within("/srv/ws", "/srv/ws-other/a")  # a prefix of the name is not inside
    assert not is_within("/srv/ws", "/srv")
