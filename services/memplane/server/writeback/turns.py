"""A conversation turn's memory under UpdateMemory: it stays that turn's.

A *turn* is the memory WriteConversation writes for one message (as migration 0013 defines
one, and peer harnesses write through AddMemories): type EPISODIC, metadata `message_id`
naming the message its provenance names, beside `speaker`, `role` and `turn_time`. memplane
itself reads those: a turn is its neighbours' context only while it is EPISODIC and its
metadata names the message (`memplane.server.storage.search_boosts.CONTEXT_COLUMN`), the speaker
term matches `metadata.speaker`, raw turns are never duplicates (migration 0013), and the
Markdown view journals episodic memories by speaker (`memplane.mdview.render`).

So a metadata replace keeps the turn keys the new metadata does not name, as mem0's
`_update_memory` keeps `role` and `actor_id` "only if not provided in new metadata" (mem0
2.2.1, `mem0/memory/main.py`); a value the client gives is its correction (another
speaker) and is kept. What cannot be kept together with the turn is refused: a type
other than EPISODIC (`memory.type`), a `message_id` other than the stored one
(`memory.metadata.message_id`: provenance names the turn and cannot change).

A statement the no-LLM extractor stored (`memplane.server.writeback.rules_writer`: metadata
`extracted_by: "rules"`) is found again by those keys — `statement` makes the same
statement a NOOP, `attribute` lets a move supersede the old address — so a metadata
replace keeps its `RULE_KEYS` the same way. `statement` is the key of its words
(`rules_writer.spoken_key`): a correction of its content re-keys it, so the corrected
words said again are NOOP and the first words said again are a new statement (a key
left on the old words made them NOOP against a memory that no longer held them). Its
type may change (the rules step then no longer reads it, as the user asked), also back
from EPISODIC: its metadata names the message it was said in as a turn's does, yet a
statement is never a turn here.
"""

from __future__ import annotations

from collections.abc import Sequence

from memplane.domain.models import JsonObject, Memory, MemoryType, NewMemory
from memplane.server.validation import Violations
from memplane.server.writeback.rules import METHOD as RULES
from memplane.server.writeback.rules_writer import spoken_key

TURN_KEYS = ("message_id", "speaker", "role", "turn_time")
"""The metadata keys WriteConversation gives a turn's memory (`memplane.server.writeback.conversation`)."""

RULE_KEYS = ("extracted_by", "statement", "attribute", "speaker", "speaker_name", "supersedes", "message_id")
"""The metadata keys the no-LLM extractor gives a statement (`memplane.server.writeback.rules_writer`)."""


def is_rules_statement(memory: Memory) -> bool:
    """Whether *memory* is a statement the no-LLM extractor stored (metadata `extracted_by: "rules"`)."""
    return memory.metadata.get("extracted_by") == RULES


def is_turn(memory: Memory) -> bool:
    """Whether *memory* is a conversation turn's: EPISODIC with metadata `message_id`, and
    no rules statement (one a user made EPISODIC names its message too)."""
    return memory.type is MemoryType.EPISODIC and "message_id" in memory.metadata and not is_rules_statement(memory)


def merge_update(v: Violations, field: str, current: Memory, values: NewMemory, mask: Sequence[str]) -> NewMemory:
    """The memory UpdateMemory stores when it changes *mask* (UpdateMemoryRequest's
    update_mask paths) of *current* to *values*: each named field's new value, the others
    as stored, the scope never changed; the metadata as `metadata_after_update` keeps it
    (violations added to *v* under *field*). An unset `valid_from_time` keeps the stored one."""
    return NewMemory(
        content=values.content if "content" in mask else current.content,
        scope=current.scope,
        type=values.type if "type" in mask else current.type,
        name=values.name if "name" in mask else current.name,
        description=values.description if "description" in mask else current.description,
        metadata=metadata_after_update(v, field, current, values, mask),
        valid_from=(values.valid_from or current.valid_from) if "valid_from_time" in mask else current.valid_from,
        valid_to=values.valid_to if "valid_to_time" in mask else current.valid_to,
        expires_at=values.expires_at if "expire_time" in mask else current.expires_at,
    )


def metadata_after_update(
    v: Violations, field: str, current: Memory, values: NewMemory, mask: Sequence[str]
) -> JsonObject:
    """The metadata UpdateMemory stores when it changes *mask* of *current* to *values*:
    `values.metadata` with, for a turn, the stored `TURN_KEYS` it does not name; adds to *v*
    (under *field*, e.g. "memory") a violation for each change that would end the turn.
    A rules statement's metadata keeps its `RULE_KEYS` the same way, its `statement`
    re-keyed when its content changes (so the metadata may change outside *mask*)."""
    if is_rules_statement(current):
        return _statement(current, values, mask)
    if not is_turn(current):
        return values.metadata if "metadata" in mask else current.metadata
    message_id = current.metadata["message_id"]
    if "type" in mask and values.type is not MemoryType.EPISODIC:
        v.add(
            f"{field}.type",
            f"must stay {MemoryType.EPISODIC.value}: this memory is conversation turn {message_id!r}"
            " (store a fact drawn from it as a new memory instead)",
        )
    if "metadata" not in mask:
        return current.metadata
    if "message_id" in values.metadata and values.metadata["message_id"] != message_id:
        v.add(
            f"{field}.metadata.message_id",
            f"must stay {message_id!r} (or be left out): it names the turn this memory was written for",
        )
    return _kept(current.metadata, values.metadata, TURN_KEYS)


def _statement(current: Memory, values: NewMemory, mask: Sequence[str]) -> JsonObject:
    """A rules statement's metadata after the update: its `RULE_KEYS` kept, and while it
    stays one, `statement` the key of its content (`rules_writer.spoken_key`)."""
    metadata = _kept(current.metadata, values.metadata, RULE_KEYS) if "metadata" in mask else current.metadata
    if "content" not in mask or values.content == current.content or metadata.get("extracted_by") != RULES:
        return metadata
    speaker = metadata.get("speaker_name")
    return {**metadata, "statement": spoken_key(speaker if isinstance(speaker, str) else "", values.content)}


def _kept(stored: JsonObject, given: JsonObject, keys: Sequence[str]) -> JsonObject:
    """*given* with the *keys* of *stored* it does not name."""
    return {**given, **{k: stored[k] for k in keys if k in stored and k not in given}}
