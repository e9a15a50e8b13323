"""The filter language of searches and lists, as a small AST.

Metadata conditions follow mem0's filter operators (eq, ne, gt, gte, lt, lte, in,
contains) combined with AND / OR / NOT; storage compiles the AST to SQL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memplane.domain.models import MemoryType


class Operator(enum.StrEnum):
    """Comparison of a metadata condition."""

    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LTE = "lte"
    GT = "gt"
    GTE = "gte"
    IN = "in"
    CONTAINS = "contains"
    EXISTS = "exists"


@dataclass(frozen=True)
class Condition:
    """``metadata[path] <operator> value``; *path* is the key split on dots."""

    path: tuple[str, ...]
    operator: Operator
    value: Any = None


@dataclass(frozen=True)
class All:
    """Every operand holds."""

    operands: tuple[MetadataExpr, ...]


@dataclass(frozen=True)
class AnyOf:
    """At least one operand holds."""

    operands: tuple[MetadataExpr, ...]


@dataclass(frozen=True)
class Not:
    """The operand does not hold."""

    operand: MetadataExpr


MetadataExpr = Condition | All | AnyOf | Not


@dataclass(frozen=True)
class MemoryFilter:
    """Everything a search or list can filter on; defaults filter nothing but hide
    superseded and expired memories."""

    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""
    types: tuple[MemoryType, ...] = ()
    metadata: MetadataExpr | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    include_superseded: bool = False
    include_expired: bool = False
    ids: tuple[str, ...] = field(default=())

    @property
    def narrows(self) -> bool:
        """True if the filter narrows by scope, type, metadata, ids or creation time (not
        only by validity: superseded and expired memories)."""
        return bool(
            self.user_id
            or self.agent_id
            or self.session_id
            or self.types
            or self.metadata is not None
            or self.ids
            or self.created_after
            or self.created_before
        )
