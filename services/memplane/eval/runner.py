"""Run the LoCoMo evidence-retrieval evaluation against a memplane server over gRPC.

Steps: every conversation into a fresh workspace (`memplane.eval.ingest`, exactly as
`memplane import locomo` in the default "conversation" text format; the "peer" format
stores each turn as "[<date_time>] <speaker>: <text>" through AddMemories instead, into
workspaces named "<prefix>-peer-<sample id>"), then every question of categories 1-4 that has evidence
(1,536 in locomo10) asked once per search mode through SearchMemories (the question
text as the only query, no filter, top_k 20), hits mapped back to dia_ids through the
memory's ``metadata.message_id`` (or ``provenance.message_ids``), scored with
`memplane.eval.metrics`. The workspaces are deleted at the end unless *keep*.
"""

from __future__ import annotations

import logging
import secrets
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf import duration_pb2
from tqdm import tqdm

from memplane.client.aio import AsyncMemplaneClient, ranking_options
from memplane.domain import ranking
from memplane.errors import NotFoundError
from memplane.eval.concurrency import gather_bounded
from memplane.eval.ingest import ClientFactory, TextFormat, WorkspaceSet, ingest_conversations
from memplane.eval.locomo import CATEGORY_NAMES, Conversation, Question, workspace_name
from memplane.eval.metrics import RECALL_KS, MetricRow, QuestionScore, score_question, summarize
from memplane.eval.report import format_baselines, format_table
from memplane.v1 import memory_pb2, retrieval_pb2

_log = logging.getLogger(__name__)

SEARCH_MODES: dict[str, int] = {
    "hybrid": retrieval_pb2.SEARCH_MODE_HYBRID,
    "vector": retrieval_pb2.SEARCH_MODE_VECTOR,
    "lexical": retrieval_pb2.SEARCH_MODE_LEXICAL,
}
"""Search modes by their CLI name."""

FUSIONS: dict[str, int] = {
    "default": retrieval_pb2.FUSION_METHOD_UNSPECIFIED,  # whatever the server is configured with
    "rrf": retrieval_pb2.FUSION_METHOD_RRF,
    "weighted": retrieval_pb2.FUSION_METHOD_WEIGHTED,
    "dbsf": retrieval_pb2.FUSION_METHOD_DBSF,
    "zscore": retrieval_pb2.FUSION_METHOD_ZSCORE,
}
"""Fusion methods of hybrid search by their CLI name."""


@dataclass(frozen=True)
class IngestStats:
    """What an ingestion wrote and how long it took (wall clock, seconds)."""

    workspaces: int
    reused: int
    turns: int
    seconds: float

    @property
    def turns_per_second(self) -> float:
        """Turns written per wall-clock second (0 if nothing took time)."""
        return self.turns / self.seconds if self.seconds > 0 else 0.0


TERMS_OFF: dict[str, float] = dict(ranking.TERMS_OFF)
"""`AsyncMemplaneClient.search` options turning every query-aware term and RM3 off: the
search as before issue 14's terms."""


@dataclass(frozen=True)
class EvalConfig:
    """How to run the evaluation. *concurrency*: requests in flight (ingest and search);
    *prefix*: workspace names are "<prefix>-<sample id>" (a fresh random one by default;
    "<prefix>-peer-<sample id>" in the peer format); *text_format*: how turns are stored
    (`memplane.eval.ingest.TEXT_FORMATS`)."""

    modes: tuple[str, ...] = ("hybrid", "vector", "lexical")
    top_k: int = max(RECALL_KS)
    concurrency: int = 4
    keep: bool = False
    prefix: str = field(default_factory=lambda: f"eval-{secrets.token_hex(3)}")
    progress: bool = True
    text_format: TextFormat = "conversation"
    split: bool = False  # also report the tuning and held-out halves (`split_label`)
    reuse: bool = False  # take the workspaces of an earlier import ("<prefix>-<sample id>"); kept
    ranking: Mapping[str, float] = field(default_factory=dict)  # RankingOptions fields set; the rest the server's


TUNING_CONVERSATIONS = 5
"""Conversations 1-5 of the file (its order) are the tuning half, 6-10 the held-out half
(issue 14: every weight, window and threshold is chosen on 1-5 only)."""

SPLITS = ("tuning", "held-out")
"""The halves of `--split`, as they appear in the mode column: "<mode>/tuning",
"<mode>/held-out"."""


def split_label(index: int) -> str:
    """The half of the conversation at 0-based *index* in the file: "tuning" for the first
    `TUNING_CONVERSATIONS`, "held-out" after them."""
    return SPLITS[0] if index < TUNING_CONVERSATIONS else SPLITS[1]


def split_rows(
    by_mode: Mapping[str, Sequence[tuple[str, QuestionScore]]], *, split: bool
) -> dict[str, list[MetricRow]]:
    """Table rows per mode from (half, score) pairs: every mode over all questions, and with
    *split* "<mode>/tuning" and "<mode>/held-out" after it (a half with no question is left
    out)."""
    rows: dict[str, list[MetricRow]] = {}
    for mode, scored in by_mode.items():
        rows[mode] = summarize(score for _, score in scored)
        if split:
            for half in SPLITS:
                chosen = [score for label, score in scored if label == half]
                if chosen:
                    rows[f"{mode}/{half}"] = summarize(chosen)
    return rows


@dataclass(frozen=True)
class ModeTiming:
    """Milliseconds per search of one mode: the client's round trip (p50, p95; queueing
    behind the other requests in flight included) and the server's own embedding and
    database time (p50, from SearchMemoriesResponse.timing)."""

    requests: int
    round_trip_ms_p50: float
    round_trip_ms_p95: float
    server_embedding_ms_p50: float
    server_database_ms_p50: float

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"round trip p50 {self.round_trip_ms_p50:.1f} ms, p95 {self.round_trip_ms_p95:.1f} ms; "
            f"server p50 embedding {self.server_embedding_ms_p50:.1f} ms, "
            f"database {self.server_database_ms_p50:.1f} ms"
        )


@dataclass(frozen=True)
class EvalReport:
    """Rows per mode (categories, then overall), the model, and where the time went."""

    rows: Mapping[str, Sequence[MetricRow]]
    embedding_models: tuple[str, ...]
    ingest: IngestStats
    searches: int
    search_seconds: float
    timings: Mapping[str, ModeTiming]
    concurrency: int
    workspaces: tuple[str, ...]
    kept: bool
    text_format: TextFormat = "conversation"

    def format(self) -> str:
        """The table, the timings and the baselines, for printing."""
        kept = f"; kept workspaces: {', '.join(self.workspaces)}" if self.kept else ""
        return "\n".join(
            [
                f"embedder: {', '.join(self.embedding_models)}; text format: {self.text_format}",
                format_table(self.rows),
                "",
                f"ingest: {self.ingest.turns} turns into {self.ingest.workspaces} workspaces in "
                f"{self.ingest.seconds:.1f} s ({self.ingest.turns_per_second:.1f} turns/s)",
                f"search: {self.searches} requests in {self.search_seconds:.1f} s, {self.concurrency} in flight{kept}",
                *(f"  {mode}: {timing.describe()}" for mode, timing in self.timings.items()),
                "",
                format_baselines(),
            ]
        )


def category_label(category: int) -> str:
    """ "1 multi-hop", "2 temporal", … (sorts by category number)."""
    return f"{category} {CATEGORY_NAMES.get(category, 'unknown')}"


def workspace_prefix(prefix: str, text_format: TextFormat) -> str:
    """The workspace name prefix of *text_format*: *prefix* itself for "conversation"
    (the names `memplane import locomo` always used), "<prefix>-<format>" otherwise, so
    the formats never share a workspace name."""
    return prefix if text_format == "conversation" else f"{prefix}-{text_format}"


async def missing_workspaces(
    admin: AsyncMemplaneClient, conversations: Sequence[Conversation], *, prefix: str, text_format: TextFormat
) -> list[str]:
    """The names of the conversations' workspaces under *prefix* in *text_format* (as
    `ingest_locomo` names them) that do not exist, in the conversations' order (admin
    key; one GetWorkspace each). Raises `MemplaneError` other than `NotFoundError`."""
    names = workspace_prefix(prefix, text_format)
    missing = []
    for conversation in conversations:
        name = workspace_name(names, conversation.sample_id)
        try:
            await admin.get_workspace(name)
        except NotFoundError:
            missing.append(name)
    return missing


def hit_message_id(memory: memory_pb2.Memory) -> str:
    """The LoCoMo dia_id of a hit: metadata "message_id", else the first provenance
    message id, else "" (a memory not written by the ingestion)."""
    fields = memory.metadata.fields
    if "message_id" in fields and fields["message_id"].WhichOneof("kind") == "string_value":
        return fields["message_id"].string_value
    return memory.provenance.message_ids[0] if memory.provenance.message_ids else ""


async def ingest_locomo(
    spaces: WorkspaceSet,
    conversations: Sequence[Conversation],
    *,
    prefix: str,
    reuse: bool,
    text_format: TextFormat = "conversation",
    concurrency: int = 4,
    progress: bool = True,
) -> IngestStats:
    """Open one workspace per conversation (named `workspace_prefix` + "-<sample id>",
    reused when *reuse* and in the same *text_format*) and write every turn in
    *text_format*, with a progress bar in turns. Raises `MemplaneError`
    (`FailedPreconditionError` if a reused workspace holds another text format)."""
    started = time.perf_counter()
    names = workspace_prefix(prefix, text_format)
    for conversation in conversations:
        name = workspace_name(names, conversation.sample_id)
        await spaces.open(conversation.sample_id, name, reuse=reuse, text_format=text_format)
    total = sum(c.turn_count for c in conversations)
    with tqdm(total=total, unit="turn", desc="ingest", disable=not progress) as bar:
        turns = await ingest_conversations(
            spaces, conversations, text_format=text_format, concurrency=concurrency, progress=bar.update
        )
    reused = sum(1 for a in spaces.accesses if not a.created)
    return IngestStats(len(spaces.accesses), reused, turns, time.perf_counter() - started)


def _seconds(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def _percentile_ms(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return 1000.0 * (values[0] if values else 0.0)
    return 1000.0 * statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class _SearchLog:
    """Per mode, seconds of each search: (round trip, server embedding, server database)."""

    samples: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)

    def add(self, mode: str, round_trip: float, reply: retrieval_pb2.SearchMemoriesResponse) -> None:
        timing = reply.timing
        sample = (round_trip, _seconds(timing.embedding_duration), _seconds(timing.database_duration))
        self.samples.setdefault(mode, []).append(sample)

    def count(self) -> int:
        return sum(len(v) for v in self.samples.values())

    def timing(self, mode: str) -> ModeTiming:
        rows = self.samples.get(mode, [])
        trips = [r[0] for r in rows]
        return ModeTiming(
            requests=len(rows),
            round_trip_ms_p50=_percentile_ms(trips, 50),
            round_trip_ms_p95=_percentile_ms(trips, 95),
            server_embedding_ms_p50=_percentile_ms([r[1] for r in rows], 50),
            server_database_ms_p50=_percentile_ms([r[2] for r in rows], 50),
        )


async def _ask(
    client: AsyncMemplaneClient, question: Question, mode: str, config: EvalConfig, log: _SearchLog
) -> QuestionScore:
    started = time.perf_counter()
    reply = await client.search(
        question.question,
        top_k=config.top_k,
        mode=SEARCH_MODES[mode],
        ranking=ranking_options(None, config.ranking),
    )
    log.add(mode, time.perf_counter() - started, reply)
    ranked = [d for d in (hit_message_id(h.memory) for h in reply.hits) if d]
    return score_question(category_label(question.category), ranked, question.evidence)


async def ask_questions(
    spaces: WorkspaceSet, conversations: Sequence[Conversation], config: EvalConfig, log: _SearchLog
) -> dict[str, list[tuple[str, QuestionScore]]]:
    """Ask every scored question once per mode; by mode, each score with the half of its
    conversation (`split_label` of its position in *conversations*)."""
    jobs = [
        (mode, conversation.sample_id, question)
        for conversation in conversations
        for question in conversation.scored_questions()
        for mode in config.modes
    ]
    half = {c.sample_id: split_label(index) for index, c in enumerate(conversations)}
    with tqdm(total=len(jobs), unit="search", desc="search", disable=not config.progress) as bar:

        async def one(mode: str, sample_id: str, question: Question) -> QuestionScore:
            score = await _ask(spaces.client(sample_id), question, mode, config, log)
            bar.update(1)
            return score

        scores = await gather_bounded([one(*job) for job in jobs], config.concurrency)
    by_mode: dict[str, list[tuple[str, QuestionScore]]] = {mode: [] for mode in config.modes}
    for (mode, sample_id, _), score in zip(jobs, scores, strict=True):
        by_mode[mode].append((half[sample_id], score))
    return by_mode


async def run_locomo_eval(
    admin: AsyncMemplaneClient,
    factory: ClientFactory,
    conversations: Sequence[Conversation],
    config: EvalConfig,
) -> EvalReport:
    """Ingest *conversations* into fresh workspaces (in `config.text_format`), ask, score; delete the workspaces
    afterwards (even on failure) unless `config.keep` (then only the run keys are revoked).
    With `config.reuse` the workspaces of an earlier `memplane import locomo` under
    `config.prefix` (same text format) are taken instead: their sessions are replayed
    (idempotent: nothing is embedded or stored again) and they are kept, so one import
    serves any number of evaluation passes.

    *admin* holds the admin key; *factory* makes workspace clients. Raises `MemplaneError`
    (e.g. `AlreadyExistsError` if a workspace name is taken, `NotFoundError` naming every
    missing workspace when `config.reuse` finds one absent (nothing is created then),
    `UnavailableError` if the server is down).
    """
    if config.reuse:
        missing = await missing_workspaces(admin, conversations, prefix=config.prefix, text_format=config.text_format)
        if missing:
            raise NotFoundError("workspace", ", ".join(missing))
    log = _SearchLog()
    keep = config.keep or config.reuse
    async with WorkspaceSet(admin, factory, delete=not keep) as spaces:
        ingest = await ingest_locomo(
            spaces,
            conversations,
            prefix=config.prefix,
            reuse=config.reuse,
            text_format=config.text_format,
            concurrency=config.concurrency,
            progress=config.progress,
        )
        started = time.perf_counter()
        by_mode = await ask_questions(spaces, conversations, config, log)
        search_seconds = time.perf_counter() - started
        models = tuple(sorted({a.embedding_model for a in spaces.accesses}))
        names = tuple(a.name for a in spaces.accesses)
    _log.info("evaluated %d searches over %d workspaces", log.count(), len(names))
    return EvalReport(
        rows=split_rows(by_mode, split=config.split),
        embedding_models=models,
        ingest=ingest,
        searches=log.count(),
        search_seconds=search_seconds,
        timings={mode: log.timing(mode) for mode in config.modes},
        concurrency=config.concurrency,
        workspaces=names,
        kept=keep,
        text_format=config.text_format,
    )
