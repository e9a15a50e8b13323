"""The operator's configuration: environment variables with prefix ``MEMPLANE_OPERATOR_``
(pydantic-settings), read once by the entry point; every field states its unit and default."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class OperatorSettings(BaseSettings):
    """Where the services are, with which key, and how often to re-check every workspace."""

    model_config = SettingsConfigDict(env_prefix="MEMPLANE_OPERATOR_", extra="ignore")

    admin_target: str = Field(
        default="127.0.0.1:50051", description="host:port of the AdminService (the operator's only way in)."
    )
    admin_key: SecretStr | None = Field(
        default=None, description="The services' admin key (MEMPLANE_AUTH__ADMIN_KEY of the services)."
    )
    admin_key_file: Path | None = Field(
        default=None,
        description="A file holding the admin key (a mounted Secret); read at start, never written. "
        "One of admin_key and admin_key_file is required.",
    )
    service_target: str = Field(
        default="",
        description="The address agent pods reach the services at, written to each credentials Secret as "
        "MEMPLANE_TARGET (e.g. memplane.memplane.svc:50051). Empty: admin_target.",
    )
    service_targets: dict[str, str] = Field(
        default_factory=dict,
        description="Per-service addresses written to each Secret as MEMPLANE_<SERVICE>_TARGET (JSON object with "
        "keys retrieval, writeback, compaction), for a cluster that runs each service behind its own Service; "
        "AsyncMemplaneClient.from_env() reads them.",
    )
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to serve (JSON list); empty serves the whole cluster."
    )
    resync_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between checks of every workspace: drift repaired (a deleted Secret, changed "
        "quotas), usage reported, rotated keys revoked after their grace period.",
    )
    rpc_timeout_seconds: float = Field(default=15.0, gt=0, description="Deadline of one AdminService call.")
    sandbox_call_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Deadline of one sandbox backend call (ensure, suspend, destroy); past it the backend "
        "reads as unavailable (SandboxReady=False, BackendUnavailable) and the call is retried with backoff.",
    )
    sandbox_sync_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds between two sync passes of a running docker, pod or e2b sandbox's Memory/ view, for "
        "workspaces and SandboxClasses that set no syncInterval; 0: no sync unless they set one.",
    )
    sandbox_sync_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Deadline of one sync pass (waiting for another pass's lock included); past it the pass is "
        "cancelled and SandboxSynced=False, reason TimedOut; the next interval tries again.",
    )
    sandbox_sync_concurrency: int = Field(
        default=4, ge=1, description="Sync passes the operator process runs at once (the others wait their turn)."
    )
    sandbox_sync_target: str = Field(
        default="",
        description="host:port the operator's sync reaches the retrieval and write-back services at, with each "
        "workspace's own key. Empty: service_target (and service_targets), as an agent pod would.",
    )
    own_namespace: str = Field(
        default="",
        description="The operator's own namespace, where the Secrets a SandboxClass names live "
        "(spec.e2b.apiKeySecretRef). Empty: the namespace of its in-cluster ServiceAccount "
        "(/var/run/secrets/kubernetes.io/serviceaccount/namespace); the chart sets it from the downward API.",
    )
    health_host: str = Field(default="0.0.0.0", description="Address of the liveness endpoint (/healthz).")  # noqa: S104
    health_port: int = Field(default=8080, ge=0, le=65535, description="Port of the liveness endpoint; 0 disables it.")
    log_json: bool = Field(default=False, description="Log one JSON object per line (for clusters).")
    log_level: str = Field(default="INFO", description="stdlib logging level.")

    @model_validator(mode="after")
    def _one_key(self) -> OperatorSettings:
        if (self.admin_key is None) == (self.admin_key_file is None):
            raise ValueError("set exactly one of MEMPLANE_OPERATOR_ADMIN_KEY and MEMPLANE_OPERATOR_ADMIN_KEY_FILE")
        unknown = set(self.service_targets) - {"retrieval", "writeback", "compaction"}
        if unknown:
            raise ValueError(f"MEMPLANE_OPERATOR_SERVICE_TARGETS: unknown services {sorted(unknown)}")
        return self

    def read_admin_key(self) -> str:
        """The admin key, from the setting or the file (surrounding whitespace dropped).
        Raises `OSError` if the file cannot be read, `ValueError` if it is empty."""
        if self.admin_key is not None:
            return self.admin_key.get_secret_value()
        key = self.admin_key_file.read_text().strip() if self.admin_key_file is not None else ""
        if not key:
            raise ValueError(f"{self.admin_key_file} is empty")
        return key

    def class_secret_namespace(self) -> str:
        """`own_namespace`, else the in-cluster ServiceAccount's namespace, else "" (no
        Secret a SandboxClass names can be read)."""
        if self.own_namespace:
            return self.own_namespace
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            return ""

    def sync_targets(self) -> tuple[str, dict[str, str]]:
        """(target, per-service targets) of the operator's sync client: `sandbox_sync_target`
        for every service when set, else what agent pods get (`agent_target`, `service_targets`)."""
        if self.sandbox_sync_target:
            return self.sandbox_sync_target, {}
        return self.agent_target, dict(self.service_targets)

    @property
    def agent_target(self) -> str:
        """MEMPLANE_TARGET of the credentials Secrets."""
        return self.service_target or self.admin_target
