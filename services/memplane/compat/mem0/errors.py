"""The exceptions the mem0 facade raises where mem0 raises its own (mem0 2.2.1: a
`ValueError` for a missing memory or a bad argument in `memplane.compat.mem0.Memory`'s
counterpart, `mem0.Memory`). Each chains the memplane error it comes from (`__cause__`).
Other memplane errors (UnavailableError, UnauthenticatedError, ...) pass through as they are."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from memplane import errors


class ValidationError(ValueError):
    """A bad argument: no user_id / agent_id / run_id where one is required, an empty
    query, a filter operator memplane has no counterpart for, a field the server refused."""


class MemoryNotFoundError(ValueError):
    """No memory with that id in the key's workspace (mem0: "Memory with id ... not found")."""


@contextlib.contextmanager
def as_mem0() -> Iterator[None]:
    """memplane's refusals of bad input as mem0's ValueErrors (the original chained)."""
    try:
        yield
    except errors.InvalidArgumentError as exc:
        raise ValidationError(str(exc)) from exc
    except errors.NotFoundError as exc:
        raise MemoryNotFoundError(f"Memory with id {exc.resource_name} not found") from exc


def platform_only(name: str) -> str:
    """mem0's refusal of a Platform-only parameter, naming it."""
    return (
        f"The {name} parameter is not supported by the OSS Memory SDK (it is Platform-only in mem0), "
        "nor by memplane's mem0 facade."
    )
