"""WriteConversation's extraction when no LLM is configured: the first-person statements
and instructions of `memplane.server.writeback.rules`, stored in the conversation's own
transaction as `user` and `procedural` memories (metadata `extracted_by: "rules"`), method
"episodic+rules".

Reconciliation without a model is by key, never by similarity:
- a statement whose normalised text (whitespace collapsed, case folded, NFKC) is already
  a current rules memory (user or procedural) of the same user and agent is NOOP (nothing stored, in any
  session of theirs);
- a statement of a single-valued attribute (`rules.RuleFact.attribute`) supersedes the
  current rules memory of that attribute of the same user and agent: its `valid_to` is
  closed at the new statement's time (readable with include_superseded, never erased)
  and the new memory's metadata names it (`supersedes`), as the LLM path's SUPERSEDE;
- of several statements of one attribute in one call, the last one is stored (the
  turns themselves keep every word).
Memories the LLM path wrote are never changed here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memplane.domain.filters import All, Condition, MemoryFilter, Operator
from memplane.domain.models import ConversationMessage, Memory, MemoryType, NewMemory, Provenance, Scope, Workspace
from memplane.server.storage.database import Connection
from memplane.server.storage.inserts import PreparedMemory
from memplane.server.storage.memories import Change, MemoryStore
from memplane.server.writeback.rules import METHOD, RuleFact, statements

RULES_METHOD = "episodic+rules (no LLM is configured on this server: first-person statements and instructions only)"
"""WriteConversation's `method` when `extract` was asked of a server without an LLM."""
RULE_TYPES = (MemoryType.USER, MemoryType.PROCEDURAL)
"""The types of the memories this extractor writes (statements, instructions), the ones it reads back."""
_CURRENT_LIMIT = 1_000
"""Current rules memories of one user looked at per call (the newest first)."""


def statement_key(text: str) -> str:
    """The key two statements share when they say the same thing: sha256 (hex, first 32)
    of the text NFKC-normalised, case folded, whitespace collapsed."""
    normal = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return hashlib.sha256(normal.encode()).hexdigest()[:32]


def spoken_key(speaker: str, content: str) -> str:
    """A statement's metadata `statement`: `statement_key` of *content* said by *speaker*
    (the message's name, "" when it has none): the same words from two people are two facts."""
    return statement_key(f"{speaker}\n{content}")


@dataclass(frozen=True)
class RuleMemory:
    """A statement ready to store (its `NewMemory`; provenance filled in the transaction)
    and what reconciliation needs of it."""

    memory: NewMemory
    attribute: str | None
    key: str
    message: int


def rule_memories(scope: Scope, messages: Sequence[ConversationMessage], now: datetime) -> list[RuleMemory]:
    """The statements of *messages* as memories in *scope* (valid from their message's
    time, else *now*); of several with one attribute, the last."""
    found = statements(messages)
    last = {f.attribute: i for i, f in enumerate(found) if f.attribute is not None}
    kept = [f for i, f in enumerate(found) if f.attribute is None or last[f.attribute] == i]
    return [_memory(scope, f, messages[f.message].name, now) for f in kept]


def _memory(scope: Scope, found: RuleFact, speaker: str, now: datetime) -> RuleMemory:
    fact = found.fact
    key = spoken_key(speaker, fact.content)
    metadata: dict[str, object] = {"extracted_by": METHOD, "speaker": "user", "statement": key}
    if speaker:
        metadata["speaker_name"] = speaker
    if found.attribute is not None:
        metadata["attribute"] = found.attribute
    memory = NewMemory(
        content=fact.content,
        scope=scope,
        type=fact.type,
        name=fact.name,
        description=fact.description,
        metadata=metadata,
        valid_from=fact.valid_from or now,
    )
    return RuleMemory(memory, found.attribute, key, found.message)


async def reconcile(
    conn: Connection,
    workspace: Workspace,
    store: MemoryStore,
    pending: Sequence[tuple[RuleMemory, PreparedMemory]],
    transcript_ids: Sequence[str],
    *,
    actor: str,
    request_id: str,
    now: datetime,
) -> list[PreparedMemory]:
    """In the caller's transaction: drop the NOOPs of *pending*, close the memories the
    others supersede, and return what to insert (provenance: the message each was said
    in, by *transcript_ids*; `supersedes` in metadata). The caller inserts them with the
    turns in ONE insert (two inserts in one transaction could deadlock on the stats row:
    see `reconcile.Applier`)."""
    if not pending:
        return []
    scope = pending[0][0].memory.scope
    current = await _current(conn, workspace, store, scope, now)
    known = {m.metadata.get("statement") for m in current}
    by_attribute = {str(m.metadata["attribute"]): m for m in reversed(current) if m.metadata.get("attribute")}
    out: list[PreparedMemory] = []
    for rule, prepared in pending:
        if rule.key in known:
            continue
        known.add(rule.key)
        metadata = dict(rule.memory.metadata)
        old = by_attribute.get(rule.attribute) if rule.attribute is not None else None
        valid_from = rule.memory.valid_from or now
        if old is not None:
            locked = await store.get(conn, workspace, old.id, lock=True)
            if locked is not None and locked.valid_to is None:
                closing = valid_from if valid_from > locked.valid_from else locked.valid_from + timedelta(seconds=1)
                change = Change(fields={"valid_to": closing})
                await store.update(conn, workspace, locked, change, actor=actor, request_id=request_id, now=now)
                metadata["supersedes"] = locked.id
                valid_from = closing
        message_id = transcript_ids[rule.message]
        memory = dataclasses.replace(
            rule.memory,
            metadata={**metadata, "message_id": message_id},
            valid_from=valid_from,
            provenance=Provenance(scope.session_id, (message_id,)),
        )
        out.append(PreparedMemory(memory=memory, lexical_text=prepared.lexical_text, embedding=prepared.embedding))
    return out


async def _current(
    conn: Connection, workspace: Workspace, store: MemoryStore, scope: Scope, now: datetime
) -> list[Memory]:
    """The current (not superseded) rules memories (`RULE_TYPES`) of exactly *scope*'s user and agent
    (an empty id matches only empty: the filter's "" would match every user), newest first."""
    flt = MemoryFilter(
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        types=RULE_TYPES,
        metadata=All((Condition(("extracted_by",), Operator.EQ, METHOD),)),
    )
    page = await store.list_matching(conn, workspace, flt, now=now, limit=_CURRENT_LIMIT)
    return [m for m in page if (m.scope.user_id, m.scope.agent_id) == (scope.user_id, scope.agent_id)]
