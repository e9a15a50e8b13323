"""Tool-output offload: long tool outputs cut to their byte limit in the context, each
whole output stored first as a tool-result blob and read back in slices.

The loss-proof rule: a cut tool output is stored whole before the cut message is
returned; an output cut before is never stored again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memplane.domain.blobs import utf8_size
from memplane.domain.context import ContextMessage, ToolResultBlock, ToolResultLimits
from memplane.domain.models import Scope, Workspace
from memplane.errors import FieldViolation, InvalidArgumentError, NotFoundError
from memplane.server.compaction import tool_output
from memplane.server.compaction.knobs import NO_SCOPE
from memplane.server.settings import CompactionSettings, LimitsSettings
from memplane.server.storage.blobs import MAX_RETENTION_SECONDS, MIN_RETENTION_SECONDS, ToolResultBlobStore
from memplane.server.storage.database import Connection
from memplane.server.storage.routing import TenantDatabase
from memplane.server.validation import Violations, check_scope

# A re-sent cut output pushes its blob's expiry out once this much would be gained.
EXTEND_AFTER = timedelta(minutes=10)


@dataclass(frozen=True)
class ToolCompaction:
    """Messages with long tool outputs cut; how many were cut and bytes removed."""

    messages: list[ContextMessage]
    truncated_count: int
    removed_bytes: int


@dataclass(frozen=True)
class ToolResultSlice:
    """Part of a stored tool output (see `tool_output.read`)."""

    text: str
    next_line: int
    next_column: int
    total_lines: int
    total_bytes: int
    expires_at: datetime


class ToolResultOffloader:
    """Cuts tool outputs into tool-result blobs and reads them back."""

    def __init__(
        self,
        *,
        db: TenantDatabase,
        blobs: ToolResultBlobStore,
        settings: CompactionSettings,
        limits: LimitsSettings,
    ) -> None:
        self._db = db
        self._blobs = blobs
        self._settings = settings
        self._limits = limits

    def default_limits(self) -> ToolResultLimits:
        """The server's tool-output limits."""
        s = self._settings
        return ToolResultLimits(
            recent_max_bytes=s.recent_tool_result_bytes,
            old_max_bytes=s.old_tool_result_bytes,
            keep_last_messages=s.keep_last_messages,
            retention_seconds=s.tool_result_retention_seconds,
        )

    async def compact_tool_results(
        self,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        *,
        limits: ToolResultLimits | None = None,
        scope: Scope = NO_SCOPE,
        limits_field: str = "limits",
    ) -> ToolCompaction:
        """Cut tool outputs over their byte limit (see `tool_output.plan_limits`), storing
        each whole output as a tool-result blob first (one transaction for the call).

        An output that claims to be cut already (our truncation field or marker) is only
        re-cut if its reference is a blob of this workspace whose content starts with the
        kept head (`ToolResultBlobStore.verify`); a forged, foreign or expired claim is
        treated as a new output and stored whole, marker text included. The same output
        sent again is stored once (the store deduplicates by content and scope). An output
        whose cut would save fewer bytes than the marker costs is left whole. Raises
        `InvalidArgumentError` for limits out of range or a bad scope."""
        lim = limits or self.default_limits()
        v = Violations()
        if lim.recent_max_bytes <= 0:
            v.add(f"{limits_field}.recent_max_bytes", "must be positive")
        if lim.old_max_bytes <= 0:
            v.add(f"{limits_field}.old_max_bytes", "must be positive")
        if not MIN_RETENTION_SECONDS <= lim.retention_seconds <= MAX_RETENTION_SECONDS:
            days = MAX_RETENTION_SECONDS // 86400
            v.add(f"{limits_field}.retention", f"must be {MIN_RETENTION_SECONDS} s to {days} days")
        check_scope(v, "scope", scope, self._limits)
        v.raise_if_any()
        per_message = tool_output.plan_limits(
            messages,
            recent_max_bytes=lim.recent_max_bytes,
            old_max_bytes=lim.old_max_bytes,
            keep_last_messages=lim.keep_last_messages,
        )
        sizes = {  # UTF-8 size of each output over its limit, measured once
            (i, j): size
            for i, m in enumerate(messages)
            for j, b in enumerate(m.blocks)
            if isinstance(b, ToolResultBlock) and (size := utf8_size(b.output)) > per_message[i]
        }
        if not sizes:
            return ToolCompaction(list(messages), 0, 0)
        now = datetime.now(UTC)
        retention = timedelta(seconds=lim.retention_seconds)
        out: list[ContextMessage] = []
        truncated = removed = 0
        async with self._db.tenant(workspace.key) as conn:
            for i, message in enumerate(messages):
                blocks = list(message.blocks)
                for j, block in enumerate(blocks):
                    if (i, j) not in sizes or not isinstance(block, ToolResultBlock):
                        continue
                    limit = per_message[i]
                    claim = tool_output.claimed_cut(block)
                    expires = None
                    if claim is not None:
                        expires = await self._blobs.verify(conn, workspace, claim[1].ref, claim[0], now=now)
                    if claim is not None and expires is not None:
                        new_block = tool_output.recut(block, limit)
                        if now + retention - expires > EXTEND_AFTER:
                            # Still in use: keep it longer. The marker's "kept until" stays
                            # as sent (a lower bound), so the agent's context text does not
                            # change from call to call (prompt caches keep their prefix).
                            await self._blobs.extend(conn, workspace, claim[1].ref, now + retention)
                    elif (cut := tool_output.profitable_cut(block.output, limit)) is not None:
                        new_block = await self._cut_and_store(
                            conn, workspace, block, cut, scope=scope, retention=retention, now=now
                        )
                        truncated += 1
                    else:
                        continue
                    removed += sizes[i, j] - utf8_size(new_block.output)
                    blocks[j] = new_block
                out.append(message.with_blocks(tuple(blocks)))
        return ToolCompaction(out, truncated, removed)

    async def _cut_and_store(
        self,
        conn: Connection,
        workspace: Workspace,
        block: ToolResultBlock,
        cut: tool_output.Cut,
        *,
        scope: Scope,
        retention: timedelta,
        now: datetime,
    ) -> ToolResultBlock:
        """Store *block*'s whole output, then return its *cut* head plus the marker."""
        stored = await self._blobs.put(
            conn,
            workspace,
            content=block.output,
            scope=scope,
            tool_use_id=block.tool_use_id,
            tool_name=block.name,
            retention=retention,
            now=now,
        )
        trunc = cut.truncation(ref=stored.ref, expires_at=stored.expires_at)
        return ToolResultBlock(
            tool_use_id=block.tool_use_id, name=block.name, output=tool_output.render(cut.head, trunc), truncation=trunc
        )

    async def read_tool_result(
        self,
        workspace: Workspace,
        ref: str,
        *,
        start_line: int = 0,
        start_column: int = 0,
        line_count: int = 0,
        max_bytes: int = 0,
    ) -> ToolResultSlice:
        """Part of a stored tool output. Raises `NotFoundError` for an unknown, expired or
        another workspace's ref, `InvalidArgumentError` for a bad range."""
        v = Violations()
        if start_line < 0:
            v.add("start_line", "must not be negative")
        if start_column < 0:
            v.add("start_column", "must not be negative")
        if line_count < 0:
            v.add("line_count", "must not be negative")
        if max_bytes < 0:
            v.add("max_bytes", "must not be negative")
        v.raise_if_any()
        async with self._db.tenant(workspace.key) as conn:
            blob = await self._blobs.get(conn, workspace, ref, now=datetime.now(UTC))
        if blob is None:
            raise NotFoundError("tool result", ref)
        try:
            piece = tool_output.read(
                blob.content,
                start_line=start_line or 1,
                start_column=start_column,
                line_count=line_count,
                max_bytes=max_bytes or self._settings.read_max_bytes,
            )
        except ValueError as error:  # tool_output.read names the field first: "start_line ..."
            field = str(error).split(" ", 1)[0].rstrip(":")
            known = ("start_line", "start_column", "line_count", "max_bytes")
            raise InvalidArgumentError(FieldViolation(field if field in known else "start_line", str(error))) from error
        return ToolResultSlice(
            text=piece.text,
            next_line=piece.next_line,
            next_column=piece.next_column,
            total_lines=blob.line_count,
            total_bytes=blob.byte_size,
            expires_at=blob.expires_at,
        )
