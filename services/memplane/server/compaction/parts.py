"""Compaction's parts as the composition root wires them: one per RPC family, and the
pre-reasoning hook that orchestrates them all."""

from __future__ import annotations

from dataclasses import dataclass

from memplane.server.compaction.check import ContextChecker
from memplane.server.compaction.compactor import MessageCompactor
from memplane.server.compaction.offload import ToolResultOffloader
from memplane.server.compaction.prepare import ContextPreparer
from memplane.server.compaction.session_memory import SessionSummarizer
from memplane.server.compaction.transcript import SessionTranscript


@dataclass(frozen=True)
class CompactionParts:
    """What a compaction server calls: CheckContext (`checker`), CompactMessages
    (`compactor`), CompactToolResults and ReadToolResult (`offloader`), GetTranscript
    (`transcript`), SummarizeSession (`sessions`), PrepareContext (`preparer`)."""

    checker: ContextChecker
    compactor: MessageCompactor
    offloader: ToolResultOffloader
    transcript: SessionTranscript
    sessions: SessionSummarizer
    preparer: ContextPreparer
