"""Extraction jobs: what WriteConversation(extract=true) queues and GetExtractionJob shows."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memplane.domain.models import Scope


class JobStatus(enum.StrEnum):
    """queued (waiting for a worker, or for its next attempt after a failure), running
    (a worker holds its lease), done (its memory changes are committed), failed (gave up
    after the last attempt; `error` says why)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class FailedAttempt:
    """One failed attempt of a job: its number (from 1), the reason (memplane's words,
    never memory text; at most 500 characters) and when it failed (UTC)."""

    attempt: int
    error: str
    time: datetime


@dataclass(frozen=True)
class ExtractionJob:
    """One extraction job. `result` (once done): {"memory_ids": [...], "operations":
    [{"operation", "fact", "target", "memory_id", "outcome", ...}, ...], "model",
    "prompt_sha256": [...], "repairs": [...]}; `error`: the last attempt's failure;
    `failed_attempts`: the latest 10 failures, oldest first."""

    id: str
    workspace_key: int
    status: JobStatus
    scope: Scope
    message_ids: tuple[str, ...]
    actor: str
    request_id: str
    attempts: int
    error: str
    created_at: datetime
    updated_at: datetime
    result: dict[str, Any] = field(default_factory=dict)
    failed_attempts: tuple[FailedAttempt, ...] = ()

    @property
    def finished(self) -> bool:
        """Done or failed: nothing more will happen to it."""
        return self.status in (JobStatus.DONE, JobStatus.FAILED)
