"""Session memories: a session span written as memories through the write-back path
(ReMe's summary_memory): an EPISODIC session summary plus, with an LLM, the memories it
extracts with the extraction jobs' own prompt and parser (`memplane.server.llm.extraction`:
user, feedback, project, reference, procedural, tool; who said it; the date it became
true; the message ids it came from), reconciled there with what is stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from memplane.domain.context import ContextMessage, SummarizerChoice, SummaryMethod
from memplane.domain.models import Memory, MemoryType, NewMemory, Principal, Provenance, Scope, Workspace
from memplane.errors import FailedPreconditionError
from memplane.server.compaction.compactor import MessageCompactor
from memplane.server.compaction.knobs import language_for
from memplane.server.compaction.llm import LLMSummarizer, SummarizerError
from memplane.server.llm.extraction import Fact
from memplane.server.settings import LimitsSettings
from memplane.server.validation import Violations, check_request_id, check_scope, check_text

WriteSession = Callable[
    [Principal, Workspace, NewMemory, Sequence[NewMemory], str, str], Awaitable[tuple[list[Memory], str]]
]
"""The write-back path (`memplane.server.writeback.session_facts.SessionFactWriter.write`), injected
by the composition root so compaction and write-back stay independent modules:
`await write(principal, workspace, summary, facts, request_id, prompt_sha256)` stores
*summary* (a repeat is a NOOP duplicate) and reconciles *facts* with the stored memories
(*prompt_sha256*: the extraction prompt's, for the audit); returns the memories written
and how ("llm" or "none: <reason>")."""


@dataclass(frozen=True)
class SessionMemories:
    """Memories written from a session span and how they were made."""

    memories: list[Memory]
    summary_method: str
    extraction: str


class SessionSummarizer:
    """Turns session spans into memories (summary and, with an LLM, extracted ones)."""

    def __init__(
        self,
        *,
        compactor: MessageCompactor,
        llm: LLMSummarizer | None,
        write: WriteSession,
        limits: LimitsSettings,
    ) -> None:
        self._compactor = compactor
        self._llm = llm
        self._write = write
        self._limits = limits

    async def summarize_session(
        self,
        principal: Principal,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ContextMessage],
        *,
        summary: str = "",
        language: str = "",
        summarizer: SummarizerChoice = SummarizerChoice.AUTO,
        request_id: str = "",
        clip: bool = False,
    ) -> SessionMemories:
        """Write a session span as memories through the write-back path: an EPISODIC
        session summary (the given one, else the LLM's, else extractive — an LLM failure
        falls back to extractive and says so) plus, with an LLM, the memories it extracts
        (ReMe's summary_memory) with the extraction jobs' prompt and parser (six types;
        metadata `speaker`; `valid_from` the date the fact became true, else the span's last
        message time; provenance the message ids it came from, else the span's), reconciled
        with the stored ones (`WriteSession`). Forget requests in the answer
        are ignored: SummarizeSession never deletes. Raises `InvalidArgumentError` (scope.session_id,
        messages, summary, request_id) and what the write-back path raises (quota,
        embedding mismatch)."""
        v = Violations()
        check_scope(v, "scope", scope, self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        if not scope.session_id:
            v.add("scope.session_id", "must not be empty")
        if not messages and not summary.strip():
            v.add("messages", "must hold messages when no summary is given")
        if not clip:  # a summary the caller sent; one made here is clipped to fit instead
            check_text(v, "summary", summary, self._limits.max_content_bytes)
        v.raise_if_any()
        lang = language_for(language, messages)
        method = "given"
        if not summary.strip():
            outcome = await self._compactor.compact_messages(workspace, messages, language=lang, summarizer=summarizer)
            if not outcome.compacted and outcome.failure.startswith(SummaryMethod.LLM):
                failure = outcome.failure  # the LLM failed: an honest extract rather than nothing
                outcome = await self._compactor.compact_messages(
                    workspace, messages, language=lang, summarizer=SummarizerChoice.EXTRACTIVE
                )
                method = f"extractive ({failure})"
            else:
                method = str(outcome.method)
            if not outcome.compacted:
                raise FailedPreconditionError(f"no summary could be made: {outcome.failure}")
            summary = outcome.summary
        clipped = clip_utf8(summary, self._limits.max_content_bytes)
        extracted: list[Fact] = []
        model = prompt = ""
        extraction = "none: no LLM configured"
        if self._llm is not None and messages and summarizer is not SummarizerChoice.EXTRACTIVE:
            limits = (self._limits.max_name_bytes, self._limits.max_description_bytes, self._limits.max_content_bytes)
            try:
                answer = await self._llm.extract(messages, language=lang, limits=limits, workspace=workspace)
                extracted, model, prompt = answer.extraction.facts, answer.model, answer.prompt_sha256
                extraction = "llm"
            except SummarizerError as error:
                extraction = f"none: {error}"
        summary_memory = self._summary_memory(scope, messages, clipped, method, clipped=len(clipped) < len(summary))
        facts = [self._extracted_memory(scope, messages, f, model) for f in extracted]
        stored, reconciliation = await self._write(principal, workspace, summary_memory, facts, request_id, prompt)
        if facts and reconciliation != "llm":
            extraction = f"{extraction} (not reconciled with stored memories: {reconciliation})"
        return SessionMemories(stored, method, extraction)

    @staticmethod
    def _provenance(scope: Scope, messages: Sequence[ContextMessage]) -> Provenance:
        return Provenance(session_id=scope.session_id, message_ids=tuple(m.id for m in messages if m.id))

    def _summary_memory(
        self, scope: Scope, messages: Sequence[ContextMessage], summary: str, method: str, *, clipped: bool
    ) -> NewMemory:
        times = sorted(m.created_at for m in messages if m.created_at is not None)
        span = f" from {times[0]:%Y-%m-%d %H:%M} to {times[-1]:%Y-%m-%d %H:%M} UTC" if times else ""
        return NewMemory(
            content=summary,
            scope=scope,
            type=MemoryType.EPISODIC,
            name=f"Session {scope.session_id} summary"[: self._limits.max_name_bytes],
            description=f"Summary of {len(messages)} messages{span}"[: self._limits.max_description_bytes],
            metadata={
                "kind": "session_summary",
                "summary_method": method,
                "message_count": len(messages),
                "clipped": clipped,  # the summary was longer than limits.max_content_bytes
            },
            valid_from=times[0] if times else None,
            provenance=self._provenance(scope, messages),
        )

    def _extracted_memory(self, scope: Scope, messages: Sequence[ContextMessage], fact: Fact, model: str) -> NewMemory:
        """*fact* as a memory of *scope*: provenance the span's message ids it names (all
        the span's when it names none of them), valid from its date, else the span's last
        message time; metadata as the extraction jobs' (speaker, model)."""
        span = self._provenance(scope, messages)
        ids = tuple(i for i in fact.message_ids if i in span.message_ids) or span.message_ids
        times = [m.created_at for m in messages if m.created_at is not None]
        return NewMemory(
            content=fact.content,
            scope=scope,
            type=fact.type,
            name=fact.name,
            description=fact.description,
            metadata={"kind": "extracted", "extracted_by": "llm", "speaker": fact.speaker, "model": model},
            valid_from=fact.valid_from or (max(times) if times else None),
            provenance=Provenance(session_id=scope.session_id, message_ids=ids),
        )


def clip_utf8(text: str, max_bytes: int) -> str:
    """*text* cut to at most *max_bytes* UTF-8 bytes, on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")
