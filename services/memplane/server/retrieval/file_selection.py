"""SelectMemoryFiles: AgentScope Agentic Memory's second retrieval path (an LLM picks the
memory files useful for a query from their frontmatter descriptions) served over the
Markdown view of a workspace or a scope (`memplane.mdview`).

Per request: validate → read the scope's `MAX_OFFERED` most recently updated memory
files (every type but episodic, current only: the files of the view, in MEMORY.md's
order — AgentScope's `_list_md_files` offers the newest 200 by mtime) → ask the LLM
(`memplane.server.llm.file_selection`), the whole step bounded by *timeout_seconds* → keep the
offered names of its answer in its order, at most *max_files* (unknown names and those
past the limit are reported) → render each picked memory's file and cut the contents to
*max_tokens* together. Without an LLM, or when it fails, times out, is rate-limited or
answers in another shape, hybrid search for the query over all the scope's memory files
picks them instead, and the result says why. A valid answer naming no file (or no
offered file) is the LLM's choice: nothing is returned, nothing falls back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import Memory, MemoryType, Workspace
from memplane.errors import QuotaExceededError
from memplane.mdview.names import file_names, title
from memplane.mdview.render import MEMORY_DIR, describe, memory_file
from memplane.server.llm.chat import ChatModel, LLMError
from memplane.server.llm.file_selection import SELECTION_SCHEMA, ManifestEntry, parse_selection, selection_messages
from memplane.server.retrieval.service import RetrievalService, SearchRequest, check_lsn
from memplane.server.settings import LimitsSettings
from memplane.server.storage.database import Connection
from memplane.server.storage.recent import recently_updated
from memplane.server.storage.routing import RoutedReads
from memplane.server.validation import Violations, check_filter, check_text

_log = logging.getLogger(__name__)

MAX_FILES = 5  # AgentScope: "Return a list of filenames ... (up to 5)"
MAX_OFFERED = 200  # AgentScope: retrieval_max_files
DEFAULT_MAX_TOKENS = 10_000  # 5 files x AgentScope's retrieval_max_tokens_per_md (2,000)
MAX_TOKENS_LIMIT = 100_000
NO_LLM = "no LLM configured"
_FILE_TYPES = tuple(t for t in MemoryType if t is not MemoryType.EPISODIC)

TokenCounterFor = Callable[[str], Callable[[str], int]]
"""An encoding name -> a function counting the tokens of a text in it."""


class SelectionMethod:
    """Who picked the files."""

    LLM = "llm"
    SEARCH = "search"
    NONE = "none"  # the scope has no memory files


@dataclass(frozen=True)
class SelectRequest:
    """A request, validated on use; 0 means the default (5 files, 10,000 tokens)."""

    query: str
    filter: MemoryFilter = field(default_factory=MemoryFilter)
    max_files: int = 0
    max_tokens: int = 0


@dataclass(frozen=True)
class SelectedFile:
    """A picked file: its view path (``Memory/<file>.md``), frontmatter name and
    description, content (the rendered file, cut to its share of the budget: `truncated`),
    tokens of that content and of the whole file, the memory, and the search score
    (0 when the LLM picked it)."""

    path: str
    name: str
    description: str
    content: str
    truncated: bool
    content_tokens: int
    file_tokens: int
    memory: Memory
    score: float = 0.0


@dataclass(frozen=True)
class Selection:
    """The picked files in order, the `SelectionMethod`, why the LLM did not pick
    ("" when it did), descriptions offered and the scope's files left unoffered, names
    of the answer that were unknown or past max_files, the model that answered."""

    files: list[SelectedFile]
    method: str
    fallback_reason: str = ""
    offered: int = 0
    unoffered: int = 0
    unknown: list[str] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)
    model: str = ""


@dataclass(frozen=True)
class _Pick:
    memories: list[Memory]
    scores: list[float]


class FileSelector:
    """SelectMemoryFiles over *reads* (the scope's memories) and *search* (the fallback);
    *chat* None: no LLM, search always picks. *counter_for* gives the token counter of
    the workspace's encoding; *timeout_seconds* bounds the LLM step (attempts, retries and
    rate-limit wait together)."""

    def __init__(
        self,
        reads: RoutedReads,
        search: RetrievalService,
        chat: ChatModel | None,
        limits: LimitsSettings,
        *,
        counter_for: TokenCounterFor,
        timeout_seconds: float,
    ) -> None:
        self._reads = reads
        self._search = search
        self._chat = chat
        self._limits = limits
        self._counter_for = counter_for
        self._timeout = timeout_seconds

    def _validate(self, request: SelectRequest) -> None:
        v = Violations()
        check_text(v, "query", request.query, self._limits.max_query_bytes, required=True)
        if not 0 <= request.max_files <= MAX_FILES:
            v.add("max_files", f"must be between 1 and {MAX_FILES} (0: {MAX_FILES})")
        if not 0 <= request.max_tokens <= MAX_TOKENS_LIMIT:
            v.add("max_tokens", f"must be between 1 and {MAX_TOKENS_LIMIT} (0: {DEFAULT_MAX_TOKENS})")
        check_filter(v, "filter", request.filter, self._limits)
        if request.filter.types and all(t is MemoryType.EPISODIC for t in request.filter.types):
            v.add("filter.types", "episodic memories are the journal, not memory files: name another type")
        if request.filter.include_superseded:
            v.add("filter.include_superseded", "memory files are of current memories only")
        if request.filter.include_expired:
            v.add("filter.include_expired", "memory files are of current memories only")
        v.raise_if_any()

    async def select(self, workspace: Workspace, request: SelectRequest, *, after_lsn: str = "") -> Selection:
        """The files of *workspace* picked for the request, seeing every write up to WAL
        position *after_lsn*. Raises `InvalidArgumentError` naming the field; from the
        search fallback `EmbeddingMismatchError`, `QuotaExceededError` (daily embedding
        tokens); `UnavailableError` when no database answers. LLM failures never raise."""
        started = time.perf_counter()
        check_lsn(after_lsn)
        self._validate(request)
        max_files = request.max_files or MAX_FILES
        flt = replace(request.filter, types=tuple(t for t in request.filter.types or _FILE_TYPES if t in _FILE_TYPES))
        now = datetime.now(UTC)

        async def load(conn: Connection) -> tuple[list[Memory], int]:
            return await recently_updated(conn, workspace, flt, now=now, limit=MAX_OFFERED)

        offered, total = await self._reads.read(workspace.key, load, after_lsn=after_lsn)
        if not offered:
            return Selection([], SelectionMethod.NONE)
        names = file_names(offered)
        outcome = Selection([], SelectionMethod.SEARCH, NO_LLM, len(offered), total - len(offered))
        chosen: list[Memory] | None = None
        if self._chat is not None:
            outcome, chosen = await self._ask(
                self._chat,
                workspace,
                query=request.query,
                offered=offered,
                names=names,
                max_files=max_files,
                outcome=outcome,
            )
        if chosen is not None:
            pick = _Pick(chosen, [0.0] * len(chosen))
        else:
            result = await self._search.search(
                workspace, SearchRequest(queries=(request.query,), top_k=max_files, filter=flt), after_lsn=after_lsn
            )
            pick = _Pick([h.memory for h in result.hits], [h.score for h in result.hits])
            if any(m.id not in names for m in pick.memories):
                names = file_names([*offered, *(m for m in pick.memories if m.id not in names)])
        files = self._files(workspace, pick, names, request.max_tokens or DEFAULT_MAX_TOKENS)
        _log.info(
            "selected %d memory files by %s from %d offered (%d unoffered) in %.3f s",
            len(files),
            outcome.method,
            outcome.offered,
            outcome.unoffered,
            time.perf_counter() - started,
        )
        return replace(outcome, files=files)

    async def _ask(
        self,
        chat: ChatModel,
        workspace: Workspace,
        *,
        query: str,
        offered: list[Memory],
        names: dict[str, str],
        max_files: int,
        outcome: Selection,
    ) -> tuple[Selection, list[Memory] | None]:
        """The LLM's pick (offered memories, its order) and the outcome saying so; or
        None and the outcome naming the failure (the caller then searches)."""
        entries = [ManifestEntry(names[m.id], m.type.value, m.updated_at, describe(m)) for m in offered]
        messages = selection_messages(query, entries, max_files)
        try:
            async with asyncio.timeout(self._timeout):
                completion = await chat.chat(
                    messages,
                    json_mode=True,
                    schema=SELECTION_SCHEMA,
                    schema_name="memory_selection",
                    workspace=workspace,
                )
            answer = parse_selection(completion.text)
        except TimeoutError:
            return replace(outcome, fallback_reason=f"LLM failed: no answer within {self._timeout:.1f} s"), None
        except (LLMError, QuotaExceededError) as exc:
            reason = exc.reason if isinstance(exc, LLMError) else str(exc)
            _log.warning("file selection: the LLM failed (%s); hybrid search picks", reason)
            return replace(outcome, fallback_reason=f"LLM failed: {reason}"), None
        by_name = {names[m.id]: m for m in offered}
        known = [n for n in answer if n in by_name]
        picked = Selection(
            [],
            SelectionMethod.LLM,
            offered=outcome.offered,
            unoffered=outcome.unoffered,
            unknown=[n for n in answer if n not in by_name],
            over_limit=known[max_files:],
            model=completion.model,
        )
        return picked, [by_name[n] for n in known[:max_files]]

    def _files(self, workspace: Workspace, pick: _Pick, names: dict[str, str], max_tokens: int) -> list[SelectedFile]:
        """The picked memories' rendered files, their contents cut to *max_tokens* in all
        (`shares`)."""
        count = self._counter_for(workspace.token_encoding)
        texts = [memory_file(m) for m in pick.memories]
        sizes = [count(t) for t in texts]
        files = []
        for memory, score, text, size, share in zip(
            pick.memories, pick.scores, texts, sizes, shares(sizes, max_tokens), strict=True
        ):
            content = text if size <= share else truncate_to_tokens(text, share, count)
            files.append(
                SelectedFile(
                    path=f"{MEMORY_DIR}/{names[memory.id]}",
                    name=title(memory),
                    description=describe(memory),
                    content=content,
                    truncated=size > share,
                    content_tokens=size if size <= share else count(content),
                    file_tokens=size,
                    memory=memory,
                    score=score,
                )
            )
        return files


def shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Tokens each of the files of *sizes* tokens may keep, *budget* in all: files
    shorter than an equal share keep all, the others share the rest equally (water
    filling); the shares sum to at most *budget*."""
    out = [0] * len(sizes)
    left, remaining = budget, len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        out[i] = min(sizes[i], left // remaining)
        left -= out[i]
        remaining -= 1
    return out


def truncate_to_tokens(text: str, budget: int, count: Callable[[str], int]) -> str:
    """The longest prefix of *text* (in characters) of at most *budget* tokens by
    *count* (binary search: O(log len) counts)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]
