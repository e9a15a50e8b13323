"""The public names of the bare client install, pinned as Temporal's SDK pins its exports:
`memplane`, `memplane.client` and `memplane.compat.mem0` export exactly the names in
`PUBLIC` (their `__all__`), every one of them importable, and nothing public beyond it.

A failure here means a public name was added, removed or renamed. Callers import these
names, so that is an API change: if it is deliberate, change the module's `__all__` and
`PUBLIC` below in the same commit, and say so in the commit message."""

from __future__ import annotations
import __future__

import importlib
from pathlib import Path
from types import ModuleType

import pytest

PUBLIC: dict[str, list[str]] = {
    "memplane": ["__version__", "client", "compat", "errors", "integrations"],
    "memplane.client": ["AsyncMemplaneClient", "MemplaneClient", "generate_api_key"],
    "memplane.compat.mem0": [
        "AsyncMemory",
        "AsyncMemoryClient",
        "Memory",
        "MemoryClient",
        "MemoryNotFoundError",
        "ValidationError",
    ],
}

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT)


def _how(module: ModuleType, change: str) -> str:
    source = Path(module.__file__ or module.__name__).resolve()
    where = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
    return (
        f"{module.__name__}'s public names changed: {change}. If this is deliberate, update "
        f"__all__ in {where} and PUBLIC in {THIS_FILE} "
        "in the same commit, and say in the commit message that the public API changed "
        "(a removed or renamed name breaks every caller that imports it)."
    )


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_the_pinned_list(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, _how(module, "it has no __all__")
    added = sorted(set(exported) - set(PUBLIC[name]))
    removed = sorted(set(PUBLIC[name]) - set(exported))
    change = f"__all__ names {added} that are not pinned, and lacks {removed} that are"
    assert (added, removed) == ([], []), _how(module, change)
    assert len(exported) == len(set(exported)), _how(module, f"__all__ names one twice: {exported}")


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_name_in_all_is_importable(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)  # noqa: S102 - a fixed module name from PUBLIC
    imported = sorted(key for key in namespace if key != "__builtins__")
    module = importlib.import_module(name)
    assert imported == sorted(module.__all__), _how(module, f"`from {name} import *` gives {imported}")


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_nothing_public_beyond_all(name: str) -> None:
    """A public (no leading underscore) attribute that is neither in `__all__` nor a
    submodule is exported by accident: an import meant for the module's own use."""
    module = importlib.import_module(name)
    stray = sorted(
        key
        for key, value in vars(module).items()
        if not key.startswith("_")
        and key not in module.__all__
        and not isinstance(value, ModuleType)
        and value is not __future__.annotations  # `from __future__ import annotations`
    )
    assert not stray, _how(module, f"{stray} are public but not in __all__ (make them private, or add them)")
