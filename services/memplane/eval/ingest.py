"""LoCoMo conversations into memplane workspaces, through the public gRPC API only.

One workspace per conversation (AdminService, admin key), one API key for it, then the
turns in one of three text formats (`TEXT_FORMATS`); all use scope ``user_id`` = the
sample id ("conv-26"), ``session_id`` = "session_N", and put the dia_id in
``metadata.message_id``, which is how search hits map back to LoCoMo evidence.

- "conversation" (the default): one WriteConversation per session; each turn is a USER
  message whose id is its dia_id, whose name is the speaker and whose create_time is the
  session's date-time (UTC). The server stores one EPISODIC memory per turn (description
  "[8 May 2023] <speaker>", content the turn, the dia_id also in
  ``provenance.message_ids``). Request id "locomo/<sample id>/session_N".
- "peer": the turns as a peer harness stores them, one AddMemories per session: each
  turn one EPISODIC memory whose content is "[<raw session date-time>] <speaker>: <text>"
  (e.g. "[1:56 pm on 8 May, 2023] Caroline: I went to a support group"), no name or
  description, metadata only ``message_id``. Request id "locomo-peer/<sample id>/session_N".
- "extract": as "conversation", with extraction on (WriteConversation extract=true,
  wait=true): the server's LLM, or without one its rules extractor, adds `user` /
  `procedural` / ... memories beside the turns, whose provenance names the turns they
  came from (so a hit on one maps back to evidence like a turn's). Request id
  "locomo-extract/<sample id>/session_N".

A session longer than `MAX_MESSAGES_PER_WRITE` turns is written in parts ("/part-N").
Request ids are stable, so a re-run over an existing workspace replays the first reply
and stores nothing twice. Each workspace created here is labelled with its text format
(`TEXT_FORMAT_LABEL`) and a reused workspace must carry the same one, so the formats
never mix. Used by `memplane import locomo`, `memplane eval locomo` and
bench/locomo_recall.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, TypeVar

from google.protobuf import struct_pb2, timestamp_pb2

from memplane.client.aio import AsyncMemplaneClient
from memplane.errors import AlreadyExistsError, FailedPreconditionError, MemplaneError
from memplane.eval.concurrency import gather_bounded
from memplane.eval.locomo import Conversation, Session, Turn
from memplane.v1 import memory_pb2, writeback_pb2

_log = logging.getLogger(__name__)

ClientFactory = Callable[[str], AsyncMemplaneClient]
"""Makes a client for the server under test from an API key."""

MAX_MESSAGES_PER_WRITE = 128
"""Messages per WriteConversation, or memories per AddMemories (below the server's
default max_batch_size of 256); a longer session is written in parts with request ids
ending "/part-N"."""

KEY_DISPLAY_NAME = "memplane locomo"

TextFormat = Literal["conversation", "peer", "extract"]
"""How turns are stored: "conversation" (WriteConversation), "peer" (AddMemories,
"[<date_time>] <speaker>: <text>") or "extract" (WriteConversation with extraction); see
the module docstring."""

TEXT_FORMATS: tuple[TextFormat, ...] = ("conversation", "peer", "extract")
"""The text formats, the default first."""

TEXT_FORMAT_LABEL = "memplane.eval/locomo-text-format"
"""Workspace label recording the text format of the turns written into it; a workspace
without it (made before the label existed, or by hand) counts as "conversation"."""


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

    async def open(
        self, sample_id: str, name: str, *, reuse: bool, text_format: TextFormat = "conversation"
    ) -> WorkspaceAccess:
        """Create workspace *name* labelled with *text_format* (or, with *reuse*, take the
        existing one) and mint a key.

        Raises `AlreadyExistsError` if it exists and *reuse* is False,
        `FailedPreconditionError` if the existing one holds another text format (its
        `TEXT_FORMAT_LABEL`, "conversation" when absent); other `MemplaneError`s from
        AdminService as they come.
        """
        created = True
        try:
            workspace = await self._admin.create_workspace(name, labels={TEXT_FORMAT_LABEL: text_format})
        except AlreadyExistsError:
            if not reuse:
                raise
            workspace = await self._admin.get_workspace(name)
            stored = workspace.labels.get(TEXT_FORMAT_LABEL, "conversation")
            if stored != text_format:
                raise FailedPreconditionError(
                    f"workspace {name} holds LoCoMo turns in text format {stored!r}, not {text_format!r}; "
                    "use another prefix"
                ) from None
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


def peer_content(session: Session, turn: Turn) -> str:
    """A turn in the peer format: "[<session date_time as in the file>] <speaker>: <text>"
    with the text of `Turn.content()` (image caption included)."""
    return f"[{session.date_time}] {turn.speaker}: {turn.content()}"


def peer_memories(conversation: Conversation, session: Session) -> list[memory_pb2.MemoryInput]:
    """The session's turns as peer-format memories: EPISODIC, scope user_id = sample id and
    session_id = "session_N", content `peer_content`, metadata ``message_id`` = dia_id."""
    scope = memory_pb2.Scope(user_id=conversation.sample_id, session_id=session.session_id)
    out = []
    for turn in session.turns:
        metadata = struct_pb2.Struct()
        metadata.update({"message_id": turn.dia_id})
        out.append(
            memory_pb2.MemoryInput(
                scope=scope,
                type=memory_pb2.MEMORY_TYPE_EPISODIC,
                content=peer_content(session, turn),
                metadata=metadata,
            )
        )
    return out


def session_request_id(
    sample_id: str, session: Session, part: int = 0, parts: int = 1, *, text_format: TextFormat = "conversation"
) -> str:
    """Stable idempotency key of one write: "locomo/<sample id>/session_N" ("locomo-peer/…"
    in the peer format), + "/part-N" when the session is written in several parts."""
    root = "locomo" if text_format == "conversation" else f"locomo-{text_format}"
    base = f"{root}/{sample_id}/{session.session_id}"
    return base if parts == 1 else f"{base}/part-{part}"


_T = TypeVar("_T")


def _parts(items: list[_T]) -> list[list[_T]]:
    return [items[i : i + MAX_MESSAGES_PER_WRITE] for i in range(0, len(items), MAX_MESSAGES_PER_WRITE)]


async def write_session(
    client: AsyncMemplaneClient,
    conversation: Conversation,
    session: Session,
    *,
    text_format: TextFormat = "conversation",
) -> int:
    """Write one session in *text_format* (in parts of `MAX_MESSAGES_PER_WRITE`); return
    its turn count.

    Idempotent: a retry or re-run with the same data stores nothing new. Raises
    `ValueError` for an unknown *text_format*, `MemplaneError` subclasses from
    WriteConversation or AddMemories.
    """
    sample_id = conversation.sample_id
    if text_format in ("conversation", "extract"):
        scope = memory_pb2.Scope(user_id=sample_id, session_id=session.session_id)
        chunks = _parts(session_messages(session))
        extract = text_format == "extract"
        for part, chunk in enumerate(chunks):
            request_id = session_request_id(sample_id, session, part, len(chunks), text_format=text_format)
            await client.write_conversation(scope, chunk, request_id=request_id, extract=extract, wait=extract)
    elif text_format == "peer":
        batches = _parts(peer_memories(conversation, session))
        for part, batch in enumerate(batches):
            request_id = session_request_id(sample_id, session, part, len(batches), text_format=text_format)
            await client.add_memories(batch, request_id=request_id)
    else:
        raise ValueError(f"unknown text format {text_format!r}; choose from {', '.join(TEXT_FORMATS)}")
    return len(session.turns)


async def ingest_conversations(
    spaces: WorkspaceSet,
    conversations: Sequence[Conversation],
    *,
    text_format: TextFormat = "conversation",
    concurrency: int = 4,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Write every session of *conversations* in *text_format* (workspaces already open in
    *spaces*), at most *concurrency* requests in flight; *progress* gets each session's
    turn count. Returns the number of turns written. Raises the first `MemplaneError`
    (the other writes are cancelled)."""

    async def one(conversation: Conversation, session: Session) -> int:
        client = spaces.client(conversation.sample_id)
        turns = await write_session(client, conversation, session, text_format=text_format)
        if progress is not None:
            progress(turns)
        return turns

    jobs = [one(c, s) for c in conversations for s in c.sessions]
    return sum(await gather_bounded(jobs, concurrency))
