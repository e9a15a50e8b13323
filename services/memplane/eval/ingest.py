"""LoCoMo conversations into memplane workspaces, through the public gRPC API only.

One workspace per conversation (AdminService, admin key), one API key for it, then one
WriteConversation per session: scope ``user_id`` = the sample id ("conv-26"),
``session_id`` = "session_N"; each turn is a USER message whose id is its dia_id, whose
name is the speaker and whose create_time is the session's date-time (UTC). The server
stores one EPISODIC memory per turn with the dia_id as ``metadata.message_id`` and in
``provenance.message_ids``, which is how search hits map back to LoCoMo evidence.

Each session's request carries the request id "locomo/<sample id>/session_N", so a
re-run over an existing workspace replays the first reply and stores nothing twice.
Used by `memplane import locomo`, `memplane eval locomo` and bench/locomo_recall.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from google.protobuf import timestamp_pb2

from memplane.client.aio import AsyncMemplaneClient
from memplane.errors import AlreadyExistsError, MemplaneError
from memplane.eval.concurrency import gather_bounded
from memplane.eval.locomo import Conversation, Session
from memplane.v1 import memory_pb2, writeback_pb2

_log = logging.getLogger(__name__)

ClientFactory = Callable[[str], AsyncMemplaneClient]
"""Makes a client for the server under test from an API key."""

MAX_MESSAGES_PER_WRITE = 128
"""Messages per WriteConversation (below the server's default max_batch_size of 256);
a longer session is written in parts with request ids ending "/part-N"."""

KEY_DISPLAY_NAME = "memplane locomo"


@dataclass(frozen=True)
class WorkspaceAccess:
    """A workspace the run writes to, with the key minted for it (revoked or deleted
    when the run ends). *created* is False when an existing workspace was reused."""

    sample_id: str
    name: str
    key_id: str
    api_key: str = field(repr=False)
    embedding_model: str
    embedding_dimensions: int
    created: bool


class WorkspaceSet:
    """The workspaces of one run and a client per workspace.

    Use as ``async with WorkspaceSet(admin, factory, delete=...) as spaces``. On exit each
    workspace is deleted (*delete* True) or its run key revoked (False), and clients are
    closed; failures there are logged, not raised, so cleanup goes on.
    """

    def __init__(self, admin: AsyncMemplaneClient, factory: ClientFactory, *, delete: bool) -> None:
        self._admin = admin
        self._factory = factory
        self._delete = delete
        self.accesses: list[WorkspaceAccess] = []
        self._clients: dict[str, AsyncMemplaneClient] = {}

    async def __aenter__(self) -> WorkspaceSet:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self, sample_id: str, name: str, *, reuse: bool) -> WorkspaceAccess:
        """Create workspace *name* (or, with *reuse*, take the existing one) and mint a key.

        Raises `AlreadyExistsError` if it exists and *reuse* is False; other
        `MemplaneError`s from AdminService as they come.
        """
        created = True
        try:
            workspace = await self._admin.create_workspace(name)
        except AlreadyExistsError:
            if not reuse:
                raise
            workspace = await self._admin.get_workspace(name)
            created = False
        key = await self._admin.create_api_key(name, KEY_DISPLAY_NAME)
        access = WorkspaceAccess(
            sample_id=sample_id,
            name=name,
            key_id=key.key_id,
            api_key=key.api_key,
            embedding_model=workspace.embedding_model,
            embedding_dimensions=workspace.embedding_dimensions,
            created=created,
        )
        self.accesses.append(access)
        self._clients[sample_id] = self._factory(key.api_key)
        _log.info("workspace %s %s", name, "created" if created else "reused")
        return access

    def client(self, sample_id: str) -> AsyncMemplaneClient:
        """The client holding the key of *sample_id*'s workspace (KeyError if not open)."""
        return self._clients[sample_id]

    async def close(self) -> None:
        """Delete the workspaces or revoke their run keys; close the clients."""
        for access in self.accesses:
            try:
                if self._delete:
                    await self._admin.delete_workspace(access.name)
                else:
                    await self._admin.revoke_api_key(access.key_id)
            except MemplaneError as error:
                _log.warning("cleanup of workspace %s failed: %s", access.name, error)
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def _timestamp(session: Session) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(session.time)
    return ts


def session_messages(session: Session) -> list[writeback_pb2.ConversationMessage]:
    """The session's turns as USER messages: id = dia_id, name = speaker, content =
    `Turn.content()` (text + image caption), create_time = the session's time (UTC)."""
    when = _timestamp(session)
    return [
        writeback_pb2.ConversationMessage(
            id=turn.dia_id,
            role=memory_pb2.MESSAGE_ROLE_USER,
            name=turn.speaker,
            content=turn.content(),
            create_time=when,
        )
        for turn in session.turns
    ]


def session_request_id(sample_id: str, session: Session, part: int = 0, parts: int = 1) -> str:
    """Stable idempotency key of one write: "locomo/<sample id>/session_N" (+ "/part-N")."""
    base = f"locomo/{sample_id}/{session.session_id}"
    return base if parts == 1 else f"{base}/part-{part}"


async def write_session(client: AsyncMemplaneClient, conversation: Conversation, session: Session) -> int:
    """Write one session (in parts of `MAX_MESSAGES_PER_WRITE`); return its turn count.

    Idempotent: a retry or re-run with the same data stores nothing new. Raises
    `MemplaneError` subclasses from WriteConversation.
    """
    messages = session_messages(session)
    scope = memory_pb2.Scope(user_id=conversation.sample_id, session_id=session.session_id)
    chunks = [messages[i : i + MAX_MESSAGES_PER_WRITE] for i in range(0, len(messages), MAX_MESSAGES_PER_WRITE)]
    for part, chunk in enumerate(chunks):
        request_id = session_request_id(conversation.sample_id, session, part, len(chunks))
        await client.write_conversation(scope, chunk, request_id=request_id)
    return len(messages)


async def ingest_conversations(
    spaces: WorkspaceSet,
    conversations: Sequence[Conversation],
    *,
    concurrency: int = 4,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Write every session of *conversations* (workspaces already open in *spaces*),
    at most *concurrency* requests in flight; *progress* gets each session's turn count.
    Returns the number of turns written. Raises the first `MemplaneError` (the other
    writes are cancelled)."""

    async def one(conversation: Conversation, session: Session) -> int:
        turns = await write_session(spaces.client(conversation.sample_id), conversation, session)
        if progress is not None:
            progress(turns)
        return turns

    jobs = [one(c, s) for c in conversations for s in c.sessions]
    return sum(await gather_bounded(jobs, concurrency))
