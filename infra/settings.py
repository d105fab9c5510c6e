"""The one configuration object: every setting, read from `CONVDB_*` environment variables.

Nested sections use a double underscore, e.g. ``CONVDB_KAFKA__EXTRA='{"security.protocol": "SSL"}'``.
Build it once in an entry point (`Settings()`) and pass sections down; nothing else reads the
environment.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Section(BaseModel):
    """Base of the nested settings sections: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(Section):
    """Client settings shared by every producer and consumer."""

    embedded: bool = Field(
        False,
        description="True when the broker is the embedded Tansu: short group timeouts that a real "
        "Kafka rejects (group.min.session.timeout.ms=6000).",
    )
    session_timeout_ms: int = Field(10000, description="Consumer group session timeout on a real Kafka.")
    heartbeat_interval_ms: int = Field(
        1000,
        description="Heartbeat interval on a real Kafka. Under the KIP-848 consumer protocol (fleet "
        "runners) a member learns at its next heartbeat that a partition moves to or from it, so a "
        "moved partition waits one to two intervals.",
    )
    embedded_session_timeout_ms: int = Field(
        2000, description="Session timeout on the embedded broker (it holds joins session/2)."
    )
    embedded_heartbeat_interval_ms: int = Field(500, description="Heartbeat on the embedded broker.")
    linger_ms: float = Field(5.0, description="Producer linger: batching against latency.")
    fetch_wait_max_ms: int = Field(
        50, description="Longest a consumer fetch waits for data: latency against idle requests."
    )
    embedded_fetch_wait_max_ms: int = Field(
        10,
        description="The same on the embedded broker for readers that read to a partition's end (tail, "
        "export, audit, the API's owner lookup): an empty fetch at the end is held this long.",
    )
    embedded_group_fetch_wait_max_ms: int = Field(
        100,
        description="The same on the embedded broker for the long-lived group consumers (runners, "
        "read-side consumers, archive). It holds a fetch until this wait is out, even when records "
        "arrive meanwhile (measured: produce -> visible in the API at 1k events/s, p50 218 ms at 500, "
        "88 at 100, 67 at 50), while a short wait keeps an idle broker busy (one idle `consume all`: "
        "the broker at 0.9% of a core at 500, 2.7% at 100, 4.4% at 50).",
    )
    delivery_timeout_s: float = Field(
        30.0, description="How long a produce may wait for the broker before it fails loudly."
    )
    extra: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Raw librdkafka settings added to every client (SASL/TLS passthrough).",
    )


class S3Settings(Section):
    """Where the archive's S3 endpoint is and how to sign requests."""

    endpoint_url: str | None = Field(None, description="S3 endpoint; None means AWS itself.")
    region: str = Field("us-east-1", description="S3 region.")
    access_key_id: str | None = Field(None, description="Access key; None means boto3's chain.")
    secret_access_key: SecretStr | None = Field(None, description="Secret key.")


class ArchiveSettings(Section):
    """The S3 archive sink: when it closes an object (DESIGN §9)."""

    max_records: int = Field(
        10000, description="Close an archive object after this many records (deterministic rotation)."
    )
    max_bytes: int = Field(
        16 * 1024 * 1024,
        description="Close an archive object once its record bytes reach this (deterministic rotation).",
    )
    max_age_s: float = Field(
        60.0,
        description="Close a non-empty object this long after its first record arrived (wall clock; a "
        "crash before the commit is made safe by adopting the uploaded object's boundaries on restart).",
    )
    topics: tuple[str, ...] = Field(
        ("events", "state", "inbox", "receipts", "effects", "graph", "dlq"),
        description="Registry topic suffixes the archive sink copies.",
    )
    crash_at: str | None = Field(
        None,
        description="Fault-injection hook for tests only: 'after_put:N' SIGKILLs the sink after its Nth "
        "object upload, before the Kafka commit.",
    )


class LLMSettings(Section):
    """Which LLM the agent and the titles service call through litellm."""

    model: str = Field(
        "convdb/scripted",
        description="litellm model name; 'convdb/scripted' is the offline scripted model.",
    )
    title_model: str | None = Field(
        None, description="Model for LLM titles; None keeps the first-message title."
    )
    timeout_s: float = Field(60.0, description="Timeout of one LLM call.")
    scripted_backend: str = Field(
        "litellm",
        description="How 'convdb/scripted' runs: 'litellm' (litellm.completion with mock_response, "
        "priced) or 'direct' (same replies without importing litellm; for short-lived test processes).",
    )
    scripted_latency_ms: float = Field(
        0.0,
        ge=0,
        description="How long each 'convdb/scripted' turn takes (a provider's response time, spent "
        "waiting, not computing): benchmarks pace steps with it so the CPU is not what limits them.",
    )


class RuntimeSettings(Section):
    """Limits and knobs of the agent runtime (producers)."""

    max_iterations: int = Field(30, description="Agent steps per run() before it stops with 'error'.")
    max_budget_usd: float | None = Field(None, description="LLM cost per conversation before it stops.")
    action_concurrency: int = Field(4, description="Parallel actions of one LLM response run at once.")
    delegation_max_depth: int = Field(
        3, ge=0, description="Deepest task tree: a conversation at this depth may not delegate (0: none may)."
    )
    delegation_max_children: int = Field(8, ge=1, description="Most children one `delegate` call may start.")
    tool_timeout_s: float = Field(10.0, description="Timeout of one provider call made by a tool.")
    reconcile_after_s: float = Field(
        30.0, description="EffectProposed.reconcile_after: when the reconciler may look an operation up."
    )
    snapshot_every: int = Field(
        100,
        description="Fleet runners snapshot a conversation after this many events (K) and at every "
        "stop state; a restore reads at most about K events of its tail.",
    )
    inbox_batch: int = Field(
        200,
        ge=1,
        description="Fleet runners append up to this many inbox records the consumer already holds "
        "(OpenHands batches, dead letters) in one transaction with their offsets; a user message or "
        "command still ends the batch and runs on its own.",
    )
    instance_id: str | None = Field(
        None,
        description="This fleet runner's stable name in its group (`group.instance.id`, static "
        "membership): a runner restarted under the same name within the session timeout gets its "
        "partitions back and the others see no rebalance. Unique per live runner (a StatefulSet pod "
        "name; the k8s manifests set it); unset, every start is a new member.",
    )
    max_record_bytes: int = Field(
        1_000_000,
        ge=4096,
        description="Largest record a fleet runner writes (key and headers included): an event mapped "
        "from an inbox record above it is dead-lettered before anything is written, and a dead letter "
        "above it loses its value. Keep it at or under librdkafka's message.max.bytes (1,000,000 unless "
        "set in CONVDB_KAFKA__EXTRA) and the brokers' max.message.bytes: what they refuse anyway is "
        "dead-lettered only after a failed commit.",
    )


class ReconcilerSettings(Section):
    """The effect reconciler (faust worker, `convdb reconcile`) and its lookup resolvers."""

    tick_interval_s: float = Field(1.0, description="How often the timer checks deadlines and receipts.")
    receipt_grace_s: float = Field(
        2.0, description="How long a receipt waits for the runner's own confirmation before it is acted on."
    )
    max_lookups: int = Field(
        3, description="Lookups that may answer 'unknown' before the reconciler stops asking the provider."
    )
    lookup_timeout_s: float = Field(5.0, description="Timeout of one resolver lookup.")
    resolver_urls: dict[str, str] = Field(
        default_factory=dict,
        description='Resolver name -> provider base URL, e.g. {"tracker": "http://127.0.0.1:9000"}.',
    )


class ApiSettings(Section):
    """The query API."""

    host: str = Field("127.0.0.1", description="Address the API binds to.")
    port: int = Field(8000, description="Port the API binds to.")
    keys: dict[str, str] = Field(
        default_factory=lambda: {"dev-key": "default"},
        description="API key -> tenant id. Each key sees only its tenant's data.",
    )
    receipt_secrets: dict[str, SecretStr] = Field(
        default_factory=dict, description="Provider name -> HMAC secret for POST /receipts."
    )
    receipt_tools: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Provider name -> the tools whose operations its receipts may settle, e.g. "
        '{"tracker": ["create_issue", "notify"]}; a provider bound to no tool has its receipts refused.',
    )
    receipt_max_bytes: int = Field(65536, ge=1024, description="Largest receipt body POST /receipts reads.")
    receipt_window_s: float = Field(
        86400.0, gt=0, description="How old a receipt's timestamp may be (seconds); older ones are refused."
    )
    receipt_skew_s: float = Field(
        300.0, ge=0, description="How far in the future a receipt's timestamp may be (clock skew, seconds)."
    )
    receipt_wait_s: float = Field(
        5.0,
        ge=0,
        description="How long POST /receipts waits for the read side to learn an operation proposed moments "
        "ago before it answers 404.",
    )
    publish_concurrency: int = Field(
        16,
        ge=1,
        description="Writes (messages, commands, receipts, decisions) one API process waits on the broker "
        "for at once; beyond, 503 at once. Reads never wait behind them.",
    )
    owner_scan_limit: int = Field(
        100_000,
        ge=1,
        description="Most records of a partition's unfolded log tail a post to a conversation the read side "
        "does not know reads to find its owner; beyond, 503 (the read side lags too far).",
    )
    publish_timeout_s: float = Field(
        10.0, gt=0, description="How long a write waits for the broker's acknowledgement before 503."
    )
    session_secret: SecretStr | None = Field(
        None,
        description="Key that signs the web console's session cookies; unset: a random key per process "
        "(sessions end when the API restarts; set the same value on every API replica).",
    )
    session_ttl_s: int = Field(12 * 3600, ge=60, description="Lifetime of a console session (seconds).")
    console_streams: int = Field(
        200, ge=1, description="Most live-update streams (server-sent events) one API process keeps open."
    )
    console_streams_per_session: int = Field(
        8, ge=1, description="Most live-update streams one console session may hold (one per open tab)."
    )
    console_poll_s: float = Field(
        0.5, gt=0, description="How often a live-update stream looks at the read side for news."
    )
    console_streams_per_tenant: int = Field(
        50,
        ge=1,
        description="Most live-update streams the sessions of one tenant may hold in one API process, so "
        "one tenant cannot take every slot of `console_streams`.",
    )
    console_sign_ins: int = Field(
        30,
        ge=1,
        description="Console sign-ins (sessions started) one tenant may make per `auth_window_s`; beyond, "
        "429 until the window passes. Failed ones count against `auth_failures`.",
    )
    auth_failures: int = Field(
        20,
        ge=1,
        description="Failed authentications (unknown API key, bad receipt signature, failed console "
        "sign-in) one client address, and one presented key prefix, may make per `auth_window_s`; "
        "beyond, failing attempts are answered 429 until the window passes. A valid key is never refused.",
    )
    auth_window_s: float = Field(60.0, gt=0, description="The window of `auth_failures` (seconds).")
    trusted_proxies: tuple[str, ...] = Field(
        (),
        description="Addresses or CIDR networks (JSON list) of the reverse proxies in front of the API "
        "whose X-Forwarded-For and X-Forwarded-Proto are believed: the client is the last address of "
        "X-Forwarded-For that is not a trusted proxy. Empty: forwarded headers are ignored and the "
        "client is the connecting peer.",
    )
    tenant_write_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of one API process's write slots one tenant may hold at once: of "
        "`publish_concurrency` (messages, commands, decisions) and of `openhands.max_waiting` (webhook "
        "posts), at least one each; beyond, that tenant's writes are answered 429 (webhooks 503).",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ValueError(f"trusted proxy {entry!r} is not an IP address or CIDR network") from exc
        return value


class OpsSettings(Section):
    """What a long-running service shows an operator: the ops HTTP endpoint and its logs."""

    port: int | None = Field(
        None,
        description="Port of the ops endpoint (/healthz, /metrics) of runner, consumers, archive, "
        "reconciler and API; None: no endpoint (the image sets 9100).",
    )
    host: str = Field("127.0.0.1", description="Address the ops endpoint binds to (0.0.0.0 in a container).")
    stall_after_s: float = Field(
        300.0,
        description="/healthz answers 503 when the service's loop made no progress for this long "
        "(longer than one agent step with its LLM and tool timeouts).",
    )
    unassigned_after_s: float = Field(
        60.0,
        description="A consumer-group member (runner, consumer, archive) without partitions this long "
        "says so: a WARNING log line, a /healthz problem (503), the convdb_group_unassigned_seconds gauge.",
    )
    stop_grace_s: float = Field(
        50.0,
        description="A service told to stop (SIGTERM, SIGINT) that is still running this long after "
        "exits at once with status 1: a clean stop waits on brokers that may be gone, and an "
        "orphaned service would otherwise never end (inside the deployment files' 60 s grace; "
        "their runners, which finish the run in hand, have 120 s and set 110).",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as text, or one JSON object per line (conversation, tenant, trace)."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = Field(
        None,
        description="Log level; None: INFO for long-running services, WARNING for one-shot commands "
        "(`-v` on the command line means DEBUG).",
    )


SAMPLE_CREDENTIALS = frozenset(
    {"dev-key", "sample-api-key-replace-me", "sample-receipt-secret-replace-me", "change-me"}
)
"""Credentials that ship in this repository (defaults, `infra/deploy/.env.example`): public, so a
service refuses them unless development mode is on."""


class OpenHandsSettings(Section):
    """The OpenHands bridge: webhook routes of `convdb serve`, import and export."""

    key_header: str = Field(
        "X-API-Key",
        description="Header holding the convdb API key on webhook posts (set it in the agent-server's "
        "webhook headers; its own X-Session-API-Key is never taken as a convdb credential).",
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024,
        description="Largest webhook body accepted (an agent-server batch is at most 5 MiB by default).",
    )
    max_events: int = Field(1000, description="Most events accepted in one webhook batch.")
    max_record_bytes: int = Field(
        900_000,
        description="Largest inbox record: a batch is split into records under this size, and one event "
        "larger than this is refused (Kafka's default message limit is 1 MB).",
    )
    max_waiting: int = Field(
        1000,
        description="Webhook posts of one API process waiting for the broker at once; beyond, 503 (the "
        "agent-server retries): a slow or absent broker never piles up request bodies.",
    )
    fault_lost_responses: int = Field(
        0,
        description="Fault injection for tests only: answer 503 to this many event batches after they "
        "were stored (a lost response), so the agent-server retries batches convdb already holds.",
    )


class Settings(BaseSettings):
    """Everything convdb can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="CONVDB_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    namespace: str = Field("convdb", description="Prefix of every topic and consumer group.")
    partitions: int = Field(4, description="Partitions of every topic (they are co-partitioned).")
    replication_factor: int = Field(1, description="Replication factor of new topics.")
    bootstrap_servers: str | None = Field(
        None, description="Kafka bootstrap servers; unset means the embedded broker."
    )
    schema_registry_url: str | None = Field(
        None, description="Confluent schema registry; unset means Avro single-object encoding."
    )
    data_dir: Path = Field(Path(".convdb"), description="Local state: dev stack info, SQLite files.")
    store_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the projection store; default a SQLite file in data_dir.",
    )
    archive_url: str | None = Field(None, description="Archive location: s3://bucket/prefix or file:///dir.")
    kafka: KafkaSettings = Field(
        default_factory=KafkaSettings, description="Kafka client settings (CONVDB_KAFKA__*)."
    )
    s3: S3Settings = Field(
        default_factory=S3Settings, description="The archive's S3 endpoint and credentials (CONVDB_S3__*)."
    )
    llm: LLMSettings = Field(
        default_factory=LLMSettings, description="Which LLM the agent and titles call (CONVDB_LLM__*)."
    )
    archive: ArchiveSettings = Field(
        default_factory=ArchiveSettings,
        description="When the S3 archive sink closes an object (CONVDB_ARCHIVE__*).",
    )
    api: ApiSettings = Field(
        default_factory=ApiSettings, description="The query API and console (CONVDB_API__*)."
    )
    runtime: RuntimeSettings = Field(
        default_factory=RuntimeSettings, description="Limits of the agent runtime (CONVDB_RUNTIME__*)."
    )
    reconciler: ReconcilerSettings = Field(
        default_factory=ReconcilerSettings, description="The effect reconciler (CONVDB_RECONCILER__*)."
    )
    ops: OpsSettings = Field(
        default_factory=OpsSettings,
        description="Ops endpoint and logs of long-running services (CONVDB_OPS__*).",
    )
    dev: bool | None = Field(
        None,
        description="Development mode: accept the sample API key and receipt secret. None: on exactly "
        "when the broker is the embedded one (the dev stack, `convdb demo`, tests on Tansu).",
    )
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Registered secrets, name -> value: replaced by <secret:NAME> before anything is "
        "written (topics, stores, archive, logs); tools get the value back. See also `--secrets-file`.",
    )
    openhands: OpenHandsSettings = Field(
        default_factory=OpenHandsSettings, description="The OpenHands bridge (CONVDB_OPENHANDS__*)."
    )
    crash_at: str | None = Field(
        None, description="Fault injection: SIGKILL the runner at this named crash point (tests only)."
    )
    crash_tool: str | None = Field(None, description="Fault injection: only for actions of this tool.")
    crash_signal: str = Field(
        "SIGKILL",
        description="Fault injection: the signal sent at the crash point; SIGSTOP freezes a fleet runner "
        "once (a zombie for fencing tests).",
    )

    def secret_values(self) -> dict[str, str]:
        """The registered secrets, revealed (for the redaction registry only)."""
        return {name: value.get_secret_value() for name, value in self.secrets.items()}

    def topic(self, suffix: str) -> str:
        """Full name of a topic under this namespace."""
        return f"{self.namespace}.{suffix}"

    def group(self, consumer: str) -> str:
        """Consumer group of a consumer: ``<namespace>.<consumer name>``."""
        return f"{self.namespace}.{consumer}"

    @property
    def resolved_store_url(self) -> str:
        """The store URL, defaulting to a SQLite file under the data dir."""
        return self.store_url or f"sqlite:///{(self.data_dir / 'convdb.db').resolve()}"

    @property
    def dev_mode(self) -> bool:
        """Whether sample credentials are acceptable (see `dev`)."""
        return self.dev if self.dev is not None else self.kafka.embedded

    def sample_credentials(self, *, serving_api: bool = True) -> list[str]:
        """The settings that hold a credential published in this repository (see SAMPLE_CREDENTIALS).

        Names only, never the secret values (the API key itself is public: it is a sample).
        `serving_api=False`: a process that does not serve the API ignores the API's default keys
        (nobody chose them for it); keys it was given are still checked.
        """
        keys = self.api.keys if serving_api or "keys" in self.api.model_fields_set else {}
        found = [f"CONVDB_API__KEYS ({key!r})" for key in keys if key in SAMPLE_CREDENTIALS]
        found += [
            f"CONVDB_API__RECEIPT_SECRETS ({name!r})"
            for name, secret in self.api.receipt_secrets.items()
            if secret.get_secret_value() in SAMPLE_CREDENTIALS
        ]
        session = self.api.session_secret
        if serving_api and session is not None and session.get_secret_value() in SAMPLE_CREDENTIALS:
            found.append("CONVDB_API__SESSION_SECRET")
        s3_secret = self.s3.secret_access_key
        if s3_secret is not None and s3_secret.get_secret_value() in SAMPLE_CREDENTIALS:
            found.append("CONVDB_S3__SECRET_ACCESS_KEY")
        if self.store_url and urlsplit(self.store_url).password in SAMPLE_CREDENTIALS:
            found.append("the password in CONVDB_STORE_URL")
        return found

    def with_broker(self, bootstrap_servers: str, *, embedded: bool) -> Settings:
        """A copy pointed at a broker (used once the embedded broker is up)."""
        kafka = self.kafka.model_copy(update={"embedded": embedded})
        return self.model_copy(update={"bootstrap_servers": bootstrap_servers, "kafka": kafka})

    def to_env(self) -> dict[str, str]:
        """These settings as `CONVDB_*` variables, to hand to a child process unchanged."""
        env: dict[str, str] = {}
        for name, value in self.model_dump(exclude_none=True).items():
            if isinstance(value, dict):
                env[f"CONVDB_{name.upper()}"] = json.dumps(value, default=_reveal)
            else:
                env[f"CONVDB_{name.upper()}"] = str(value)
        return env


def _reveal(value: object) -> object:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    raise TypeError(f"cannot put {type(value).__name__} in the environment")
