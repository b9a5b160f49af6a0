"""Settings: `XNODE_*` environment variables, overridden by matching CLI flags.

Each field below is one row of the settings table (docs/configuration.md) (`--listen-address` is
`XNODE_LISTEN_ADDRESS`, and so on). The fields are declared in groups (chain, registry,
replication, logs, limits, fees, TLS, ...); the node's Settings and the gateway's
GatewaySettings (xnode.gateway.settings) are made of them, each with its own env prefix, so a
setting both have is declared once and its environment name stays flat.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import structlog
from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from xnode.core import sizes
from xnode.core.crypto import SigningKey
from xnode.core.fees import FeeSchedule
from xnode.core.limits import Limit
from xnode.core.partitions import DEFAULT_PERIOD_DAYS
from xnode.core.proxies import TrustedProxies, parse_networks
from xnode.core.withholding import PATIENCE_S
from xnode.runtime.crypto_threads import share
from xnode.usecases.limits import LimitPolicy

log = structlog.get_logger(__name__)

# `workers = 0` starts one serving process per core, but no more than this many.
MAX_AUTO_WORKERS = 4


def host_port(value: str) -> str:
    """An optional host:port (empty: off)."""
    if value and not value.rpartition(":")[2].isdigit():
        raise ValueError(f"expected host:port, got {value!r}")
    return value


@dataclass(frozen=True)
class ConnectionLimits:
    """What a connection may cost a listener before it is closed (ServingGroup)."""

    handshake_s: float = 10.0
    idle_s: float = 120.0
    http_per_ip: int = 256
    grpc_calls_per_ip: int = 512


DEFAULT_CONNECTIONS = ConnectionLimits()


class ServingGroup(BaseModel):
    """The listeners, shared by node and gateway (each has its own listen_address and
    metrics_address)."""

    http_listen_address: str = Field(
        "", description="gRPC-web and HTTP/JSON (/mls/v2/...) host:port; empty: off"
    )
    http_cors_origins: str = Field(
        "", description="Origins browsers may call the HTTP port from, comma-separated; * any"
    )
    max_message_mib: int = Field(25, description="Largest gRPC message, MiB", gt=0)
    shutdown_grace_seconds: float = Field(
        10.0,
        description="SIGTERM: how long accepted publishes get to answer (new: UNAVAILABLE)",
        ge=0,
    )
    stop_step_seconds: float = Field(
        15.0,
        description="Stopping: how long each part may take to stop beyond the grace before it "
        "is forced (logged as node_stop_step_overran with the pending tasks' stacks)",
        gt=0,
    )
    connection_handshake_seconds: float = Field(
        10.0,
        description="A new connection is closed unless it completes its handshake (gRPC: TLS "
        "and HTTP/2 settings; HTTP port: a request's headers) within this",
        gt=0,
    )
    connection_idle_seconds: float = Field(
        120.0,
        description="A connection with no call in progress for this long is closed (gRPC: "
        "GOAWAY, clients reconnect on their next call; HTTP port: between requests)",
        gt=0,
    )
    http_connections_per_ip: int = Field(
        256,
        description="Open connections one client IP may hold on the HTTP port; more are "
        "closed at once (the gRPC port: see docs/operations.md#hostile-clients)",
        ge=1,
    )
    grpc_calls_per_ip: int = Field(
        512,
        description="gRPC calls one client IP (or peer node, by its token) may have in "
        "progress at once, streams included; more end at once with RESOURCE_EXHAUSTED "
        "(grpcio has no per-IP connection cap: docs/operations.md#hostile-clients); a node "
        "with limits_enabled=false caps none",
        ge=1,
    )

    @field_validator("http_listen_address")
    @classmethod
    def _http_host_port(cls, value: str) -> str:
        return host_port(value)

    @property
    def cors_origins(self) -> list[str]:
        return cors_origins(self.http_cors_origins)

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            self.connection_handshake_seconds,
            self.connection_idle_seconds,
            self.http_connections_per_ip,
            self.grpc_calls_per_ip,
        )


class LoggingGroup(BaseModel):
    """How the process logs (structlog), shared by node and gateway."""

    log_level: str = Field("info", description="debug, info, warning or error")
    log_format: Literal["console", "json"] = Field("console", description="console or json")


class ChainGroup(BaseModel):
    """The app chain's connection, shared by node and gateway."""

    chain_rpc_url: str | None = Field(
        None, description="Chain JSON-RPC URL (http); with contracts_file it enables the chain"
    )
    contracts_file: Path | None = Field(
        None, description="Chain id, contract addresses, deploy block (`xnode chain deploy`)"
    )
    chain_poll_seconds: float = Field(
        0.5, description="How often the indexer and registry look for new blocks", gt=0
    )
    chain_rpc_timeout_seconds: float = Field(10.0, description="Chain RPC request timeout", gt=0)

    @property
    def chain_enabled(self) -> bool:
        return bool(self.chain_rpc_url) and self.contracts_file is not None


class RegistryGroup(ChainGroup):
    """Where the node registry is read: a file, or the NodeRegistry contract (on the app
    chain, or a registry chain of its own); shared by node and gateway."""

    nodes_file: Path | None = Field(
        None, description="Static node registry (JSON) for private deployments"
    )
    registry_rpc_url: str | None = Field(
        None,
        description="JSON-RPC URL of the chain holding the NodeRegistry (XIP: L1) when it is "
        "not the app chain of the payload contracts; unset: chain_rpc_url",
    )
    registry_contracts_file: Path | None = Field(
        None,
        description="Contracts file (chain_id, node_registry) of the registry chain; unset: "
        "contracts_file",
    )
    registry_source: Literal["auto", "chain", "file"] = Field(
        "auto", description="Node registry: chain, file (nodes_file) or auto (chain if set)"
    )
    chain_registry_refresh_seconds: float = Field(
        60.0, description="Full re-read of the node registry every N seconds", gt=0
    )

    @property
    def registry_chain_apart(self) -> bool:
        return bool(self.registry_rpc_url) or self.registry_contracts_file is not None


class TlsGroup(BaseModel):
    """The certificate the ports serve, shared by node and gateway."""

    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain served on the gRPC and HTTP ports (a node's metrics "
        "port too, and a node shows it to https:// peers that ask for a client certificate); "
        "unset: plaintext, for local development",
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file")


class NodeGroup(BaseModel):
    """The node itself: its ports, identity, processes and live delivery."""

    listen_address: str = Field("127.0.0.1:5050", description="gRPC listen host:port")
    metrics_address: str = Field(
        "127.0.0.1:9464", description="Prometheus host:port; empty disables metrics"
    )
    signer_key: SecretStr | None = Field(
        None, description="Node secp256k1 private key, hex (or use signer_key_file)"
    )
    signer_key_file: Path | None = Field(None, description="File holding the hex private key")
    node_id: int | None = Field(
        None, description="This node's id; checked against the registry when one is given"
    )
    read_only: bool = Field(
        False,
        description="Read-only node (XIP 3.4): needs no registered key (one is made if none is "
        "set); replicates every originator from the registry's nodes, serves queries and "
        "subscriptions, refuses publishes (FAILED_PRECONDITION), originates and reports nothing",
    )
    accept_read_only_peers: bool = Field(
        True, description="Read-only nodes' tokens may open replication streams here"
    )
    # Default: one per core. With one sequencer per node (runtime.forwarding), each added
    # worker adds throughput (docs/benchmarks.md, "Measurements behind choices in the code").
    workers: int = Field(
        0,
        description="Serving processes sharing the node's ports, database and key "
        f"(`xnode run --workers N`); 0: the number of cores, at most {MAX_AUTO_WORKERS}",
        ge=0,
    )
    crypto_threads: int = Field(
        0,
        description="Threads per serving process recovering and signing publishes' signatures "
        "off the event loop; 0: the cores this process may run on divided by the workers (at "
        "least 1). More threads than that only wait for the GIL (docs/benchmarks.md)",
        ge=0,
    )
    max_batch: int = Field(1000, description="Most envelopes one group commit takes", gt=0)
    keepalive_seconds: float = Field(
        30.0, description="Empty message on idle subscriptions every N seconds", gt=0
    )
    subscription_batch_seconds: float = Field(
        0.05,
        description="After a commit delivered to 100 or more live streams, the next commits "
        "within this long are delivered together, one frame per stream (0: each at once)",
        ge=0,
    )
    subscription_max_lag_seconds: float = Field(
        5.0,
        description="A live subscription whose stream leaves envelopes waiting this long is "
        "ended (UNAVAILABLE, with its cursor), for its client to resubscribe from there",
        gt=0,
    )

    @field_validator("listen_address", "metrics_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        return host_port(value)


class DatabaseGroup(BaseModel):
    """The node's Postgres: primary (or several hosts), replica, pool, migrations."""

    database_dsn: str = Field(
        "postgresql://postgres@127.0.0.1:5432/xnode",
        description="PostgreSQL DSN; several hosts (postgresql://u@h1:p1,h2:p2/db): the one "
        "taking writes is used and followed across failovers (docs/ha.md)",
    )
    database_connect_timeout_seconds: float = Field(
        2.0, description="Longest wait for one database host to answer a connect", gt=0
    )
    database_replica_dsn: str = Field(
        "",
        description="A streaming replica of the node's database: envelope queries and "
        "subscriptions' catch-up read there when it holds what they ask for (docs/ha.md); "
        "empty: everything reads the primary",
    )
    database_replica_check_seconds: float = Field(
        0.5, description="How often the replica's clock and lag are read", gt=0
    )
    database_primary_check_seconds: float = Field(
        0.5,
        description="With several database hosts: how often they are asked which takes writes",
        gt=0,
    )
    db_pool_size: int = Field(16, description="Most Postgres connections per process", gt=1)
    migrate_on_start: bool = Field(True, description="Apply database migrations at start-up")
    migrations_dir: Path | None = Field(
        None, description="Directory of the alembic migrations; unset: the source checkout's"
    )


class NodeChainGroup(ChainGroup):
    """What the node does on the chain: indexing, publishing, administration."""

    chain_confirmations: int = Field(
        0, description="Blocks mined on top of a block before it is indexed (soft finality)", ge=0
    )
    chain_page_blocks: int = Field(
        2000, description="Most blocks one eth_getLogs request covers when backfilling", gt=0
    )
    chain_max_lag_blocks: int = Field(
        2, description="Chain publishes get UNAVAILABLE when the index trails more", ge=0
    )
    chain_publisher_key: SecretStr | None = Field(
        None, description="Key paying for chain transactions, hex (default: the signer key)"
    )
    chain_publisher_key_file: Path | None = Field(
        None, description="File holding the chain publisher's hex private key"
    )
    chain_publish_timeout_seconds: float = Field(
        30.0, description="Longest wait for a chain payload to be mined and indexed", gt=0
    )
    chain_owner_key: SecretStr | None = Field(
        None, description="`xnode chain`: hex private key of the deployer / registry owner"
    )
    anvil_bin: Path | None = Field(
        None, description="anvil binary for `xnode devnet` and the tests; unset: node_modules/"
    )


class NodeTlsGroup(TlsGroup):
    """Client certificates asked of callers, and the CA of https:// peers."""

    tls_client_ca_file: Path | None = Field(
        None, description="PEM CA that client certificates are checked against; unset: none asked"
    )
    tls_client_cert: Literal["optional", "require"] = Field(
        "optional",
        description="With tls_client_ca_file: require a client certificate, or check one if given",
    )
    tls_peer_ca_file: Path | None = Field(
        None, description="PEM CA that https:// peers' certificates must chain to (default: system)"
    )


class ReplicationGroup(BaseModel):
    """Peer streams, fallback relays, repair and scrub (XIP-49 3.2)."""

    replication_response_timeout_seconds: float = Field(
        10.0, description="A peer stream unanswered this long is UNRESPONSIVE_NODE (XIP T)", gt=0
    )
    replication_slow_seconds: float = Field(
        2.0, description="A peer's first answer slower than this is SLOW_NODE (XIP t)", gt=0
    )
    replication_idle_timeout_seconds: float = Field(
        90.0, description="A peer stream silent this long (no keepalive) is reconnected", gt=0
    )
    replication_backoff_initial_seconds: float = Field(
        0.5, description="First reconnect delay of a peer stream (doubles, with jitter)", gt=0
    )
    replication_backoff_max_seconds: float = Field(
        30.0, description="Longest reconnect delay of a peer stream", gt=0
    )
    replication_fallback_peers: int = Field(
        5,
        description="Least peers in the delivery group that relays an unreachable or disabled"
        " node's envelopes (f+1 when that is more)",
        ge=1,
    )
    replication_disabled_fallback_seconds: float = Field(
        21600.0, description="How long a disabled node's envelopes are fetched via others", ge=0
    )
    recover_own_log_on_start: bool = Field(
        True,
        description="Before serving publishes, fetch this node's own envelopes that peers hold "
        "beyond its database (after a restore from backup) and sequence past them",
    )
    scrub_envelopes_per_second: float = Field(
        120.0,
        description="Scrub: re-check this many stored envelopes per second against their log"
        " leaves; one that does not match is withdrawn and, like a missing one, fetched again"
        " from peers by repair (0: off). The default goes through 10 million envelopes a day",
        ge=0,
    )
    replication_repair_seconds: float = Field(
        60.0,
        description="Anti-entropy repair: compare every originator's log with every peer's"
        " and fetch what is missing, every N seconds (0: off)",
        ge=0,
    )
    withholding_patience_seconds: float = Field(
        PATIENCE_S,
        description="How long an originator may leave a sequence id its checkpoint covers"
        " unserved and unaccounted for (HoldingsApi unanswered) before repair files a"
        " WITHHOLDING_ACCUSATION; an honest node heals a loss within a minute",
        ge=0,
    )
    replication_verify_threads: int = Field(
        2, description="Threads verifying signatures of envelopes received from peers", ge=1
    )
    # They die with the node however it dies, SIGKILL included (xnode.replication.lifeline).
    replication_verify_processes: int = Field(
        2,
        description="Processes verifying large repairs (threads contend for the GIL there);"
        " they exit with the node, even one killed with SIGKILL; 0: threads only",
        ge=0,
    )


class RetentionGroup(BaseModel):
    """Envelope partitions made ahead and dropped once expired (docs/operations.md)."""

    retention_seconds: float = Field(
        3600.0,
        description="Retention: every N seconds add envelope partitions ahead, drop those"
        " whose every envelope has expired, and apply `retention_plan_file` if it changed"
        " (0: off; `xnode partitions` does one run by hand)",
        ge=0,
    )
    retention_partition_days: int = Field(
        DEFAULT_PERIOD_DAYS,
        description="Days of envelope expiry each new envelope partition covers (a topic"
        " query reads every partition: fewer, longer ones read faster; docs/benchmarks.md)",
        ge=1,
    )
    retention_partitions_ahead_days: int = Field(
        200,
        description="Keep envelope partitions made this many days of expiry ahead of now"
        " (longer retentions wait in one partition until then)",
        ge=1,
    )
    retention_plan_file: Path | None = Field(
        None,
        description="A plan of spark_jobs.retention_expiry, applied (as `xnode prune`) by"
        " each retention run after it changes",
    )


class LogsGroup(BaseModel):
    """The node's committed log (leaves, tree, signed checkpoints); not logging."""

    # Checkpoints are spaced so that signing them stays a small share of a fast node's publish
    # CPU, and a slow node still gets one every few seconds from the timer
    # (docs/benchmarks.md, "Measurements behind choices in the code").
    log_commit_enabled: bool = Field(
        True,
        description="Commit this node's own log as it publishes (leaf hashes, tree, signed"
        " checkpoints). false only to measure what that costs (bench/bench_logs.py): envelopes"
        " published meanwhile have no leaves, so no proofs, checkpoints or repair by log",
    )
    log_checkpoint_envelopes: int = Field(
        10_000, description="Sign a checkpoint of this node's log after N new envelopes", gt=0
    )
    log_checkpoint_seconds: float = Field(
        5.0, description="Sign a checkpoint of this node's log every N seconds, when it grew", gt=0
    )
    log_topic_commitments: bool = Field(
        True,
        description="Commit, in each checkpoint, to this node's envelopes by topic (a topic map,"
        " docs/proofs.md): what completeness proofs (CompletenessApi) are checked against."
        " false only to measure what that costs (bench/bench_logs.py)",
    )


class FeesGroup(BaseModel):
    """The fee schedule the node prices envelopes by (XIP-49 3.2.1)."""

    fee_envelope_picodollars: int = Field(
        0, description="Base fee per envelope, picodollars (XIP 3.2.1; docs/protocol.md)", ge=0
    )
    fee_byte_day_picodollars: int = Field(
        0, description="Base fee per payer-envelope byte per retention day, picodollars", ge=0
    )
    fee_target_rate: int = Field(
        1000, description="Publish rate (envelopes/s) above which the congestion fee rises", ge=1
    )
    fee_congestion_step_picodollars: int = Field(
        0, description="Congestion fee per 100% of publish rate above the target", ge=0
    )
    fee_congestion_max_picodollars: int = Field(
        0, description="Highest congestion fee per envelope, picodollars", ge=0
    )
    fee_rate_window_seconds: int = Field(
        10, description="Window of the publish rate the congestion fee follows", ge=1
    )

    def fee_schedule(self) -> FeeSchedule:
        return FeeSchedule(
            self.fee_envelope_picodollars,
            self.fee_byte_day_picodollars,
            self.fee_target_rate,
            self.fee_congestion_step_picodollars,
            self.fee_congestion_max_picodollars,
        )


class TrustedProxiesGroup(BaseModel):
    """Who may name the client a request is limited as (core.proxies); node and gateway."""

    trusted_proxies: str = Field(
        "",
        description="Proxies (load balancers, payer gateways) trusted to name their clients: "
        "addresses or CIDR networks, comma-separated. A request from one is limited as the "
        "right-most address of its x-forwarded-for header that is not trusted; from any "
        "other caller the header is ignored. Empty: every caller is limited as its own address",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: str) -> str:
        parse_networks(value)
        return value

    def proxies_trusted(self) -> TrustedProxies:
        return TrustedProxies.parse(self.trusted_proxies)


class LimitsGroup(TrustedProxiesGroup):
    """Rate and byte limits on the APIs, and the payers allowed (XIP-49 3.2.5)."""

    limits_enabled: bool = Field(True, description="Rate and byte limits on the APIs (XIP 3.2.5)")
    limit_burst_seconds: float = Field(
        2.0, description="A limit's bucket holds this many seconds of its rate", gt=0
    )
    limit_publish_envelopes_per_second: float = Field(
        200.0, description="Published envelopes per second per payer address", gt=0
    )
    limit_publish_bytes_per_second: float = Field(
        4_194_304.0, description="Published bytes per second per payer address", gt=0
    )
    limit_publish_ip_envelopes_per_second: float = Field(
        1000.0, description="Published envelopes per second per client IP", gt=0
    )
    limit_publish_ip_bytes_per_second: float = Field(
        16_777_216.0, description="Published bytes per second per client IP", gt=0
    )
    limit_query_requests_per_second: float = Field(
        50.0, description="Queries per second per client IP", gt=0
    )
    limit_query_bytes_per_second: float = Field(
        16_777_216.0, description="Bytes of query answers per second per client IP", gt=0
    )
    limit_subscribe_requests_per_second: float = Field(
        5.0, description="New subscriptions per second per client IP", gt=0
    )
    limit_subscriptions_per_ip: int = Field(
        100,
        description="Concurrent subscriptions per client IP (across the node's processes)",
        ge=1,
    )
    limit_peer_multiplier: float = Field(
        20.0, description="Callers with a valid node token get limits this many times higher", ge=1
    )
    limit_reports_per_minute: float = Field(
        10.0, description="Misbehavior reports per minute per reporter (client IP or node)", gt=0
    )
    payer_allow_list: str = Field(
        "", description="Payer addresses (0x hex, comma separated) never limited here"
    )
    payer_deny_list: str = Field(
        "", description="Payer addresses (0x hex, comma separated) whose publishes are refused"
    )

    @field_validator("payer_allow_list", "payer_deny_list")
    @classmethod
    def _addresses(cls, value: str) -> str:
        for address in _addresses(value):
            if len(address) != 20:
                raise ValueError(f"expected 20-byte 0x addresses, got 0x{address.hex()}")
        return value

    def limit_policy(self) -> LimitPolicy:
        burst = self.limit_burst_seconds

        def per_second(rate: float) -> Limit:
            return Limit.per_second(rate, burst)

        return LimitPolicy(
            publish_envelopes=per_second(self.limit_publish_envelopes_per_second),
            publish_bytes=per_second(self.limit_publish_bytes_per_second),
            publish_ip_envelopes=per_second(self.limit_publish_ip_envelopes_per_second),
            publish_ip_bytes=per_second(self.limit_publish_ip_bytes_per_second),
            query_requests=per_second(self.limit_query_requests_per_second),
            query_bytes=per_second(self.limit_query_bytes_per_second),
            subscribe_requests=per_second(self.limit_subscribe_requests_per_second),
            subscriptions_per_ip=self.limit_subscriptions_per_ip,
            # a minute's worth of reports at once, then the rate
            reports=Limit(self.limit_reports_per_minute / 60, self.limit_reports_per_minute),
            peer_multiplier=self.limit_peer_multiplier,
            allowed_payers=self.payers_allowed(),
            denied_payers=self.payers_denied(),
            enabled=self.limits_enabled,
        )

    def payers_allowed(self) -> frozenset[bytes]:
        return _addresses(self.payer_allow_list)

    def payers_denied(self) -> frozenset[bytes]:
        return _addresses(self.payer_deny_list)


class SizesGroup(BaseModel):
    """Sizes and byte budgets (core.sizes): what is stored can always be sent, and no answer
    is built past a budget below the message limit (docs/operations.md, "Sizes and
    budgets")."""

    max_payer_envelope_bytes: int = Field(
        sizes.DEFAULT_MAX_PAYER_ENVELOPE_BYTES,
        description="Largest payer envelope a publish may carry (bigger: INVALID_ARGUMENT); "
        f"with the originator envelope's framing ({sizes.ENVELOPE_FRAMING_OVERHEAD} bytes) it "
        "must fit answer_budget_bytes",
        gt=0,
    )
    max_retention_days: int = Field(
        sizes.DEFAULT_MAX_RETENTION_DAYS,
        description="Largest message_retention_days a payer envelope may ask for "
        "(larger: INVALID_ARGUMENT)",
        gt=0,
    )
    answer_budget_bytes: int = Field(
        sizes.DEFAULT_ANSWER_BUDGET_BYTES,
        description="Bytes of envelopes or reports one answer holds at most (QueryEnvelopes, "
        "GetNewestEnvelope, QueryMisbehaviorReports): it stops adding rows there, always "
        "holding the first, and says so in the `xnode-answer-cut` trailer; at most the "
        "message limit",
        gt=0,
    )
    max_report_bytes: int = Field(
        sizes.DEFAULT_MAX_REPORT_BYTES,
        description="Largest misbehavior report a client may submit (bigger: "
        f"INVALID_ARGUMENT); liveness reports at most {sizes.MAX_LIVENESS_REPORT_BYTES}",
        gt=0,
    )


class WatchdogGroup(BaseModel):
    """`xnode watchdog`: probes of every registered node."""

    watchdog_interval_seconds: float = Field(
        30.0, description="xnode watchdog: seconds between two rounds of probes", gt=0
    )
    watchdog_timeout_seconds: float = Field(
        10.0,
        description="xnode watchdog: a probe unanswered this long is UNRESPONSIVE_NODE (XIP T)",
        gt=0,
    )
    watchdog_slow_seconds: float = Field(
        5.0,
        description="xnode watchdog: an answer slower than this is SLOW_NODE (XIP t)",
        gt=0,
    )
    watchdog_as_node: bool = Field(
        False,
        description="xnode watchdog files its reports as this node (its database, signed with "
        "its key); otherwise it submits them as a client to other nodes",
    )
    watchdog_report_copies: int = Field(
        2, description="xnode watchdog as a client: nodes each report is submitted to", ge=1
    )
    watchdog_envelopes_per_round: int = Field(
        200,
        description="xnode watchdog: envelopes asked of each node per round (compared across "
        "nodes and, for chain payloads, with the chain)",
        ge=1,
    )


class Settings(
    NodeGroup,
    ServingGroup,
    DatabaseGroup,
    NodeChainGroup,
    RegistryGroup,
    NodeTlsGroup,
    ReplicationGroup,
    RetentionGroup,
    LogsGroup,
    FeesGroup,
    LimitsGroup,
    SizesGroup,
    WatchdogGroup,
    LoggingGroup,
    BaseSettings,
):
    model_config = SettingsConfigDict(env_prefix="XNODE_", extra="ignore")

    @model_validator(mode="after")
    def _sizes_hold_together(self) -> Settings:
        problem = self.size_caps().problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def size_caps(self) -> sizes.Sizes:
        return sizes.Sizes(
            message_bytes=self.max_message_mib * sizes.MIB,
            payer_envelope_bytes=self.max_payer_envelope_bytes,
            answer_budget_bytes=self.answer_budget_bytes,
            report_bytes=self.max_report_bytes,
            retention_days=self.max_retention_days,
        )

    def signing_key(self) -> SigningKey:
        key = key_from(self.signer_key, self.signer_key_file)
        if key is None:
            raise ValueError(
                "no signer key: set XNODE_SIGNER_KEY or XNODE_SIGNER_KEY_FILE (see `xnode keygen`)"
            )
        return key

    def worker_count(self) -> int:
        """`workers`, or with 0 the cores this process may run on (at most MAX_AUTO_WORKERS)."""
        if self.workers:
            return self.workers
        return max(1, min(len(os.sched_getaffinity(0)), MAX_AUTO_WORKERS))

    def crypto_thread_count(self) -> int:
        """`crypto_threads`, or with 0 this process's share of the cores."""
        if self.crypto_threads:
            return self.crypto_threads
        return share(len(os.sched_getaffinity(0)), self.worker_count())

    def chain_publisher_signing_key(self) -> SigningKey:
        key = key_from(self.chain_publisher_key, self.chain_publisher_key_file)
        return key if key is not None else self.signing_key()


def _addresses(listed: str) -> frozenset[bytes]:
    """Comma-separated 0x addresses as bytes; raises ValueError on anything else."""
    return frozenset(
        bytes.fromhex(a.strip().lower().removeprefix("0x")) for a in listed.split(",") if a.strip()
    )


M = TypeVar("M", bound=BaseSettings)


def add_flags(parser: argparse.ArgumentParser, model: type[BaseSettings]) -> None:
    """One flag per field of a settings model, named after its env var in the help."""
    prefix = model.model_config.get("env_prefix", "")
    for name, info in model.model_fields.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            # argparse formats help with %, so a description's own % must be doubled.
            help=f"{info.description} [env {prefix}{name.upper()}]".replace("%", "%%"),
        )


def from_args(model: type[M], args: argparse.Namespace) -> M:
    """The model from its env vars, with the flags given on the command line winning."""
    overrides: dict[str, Any] = {
        name: value
        for name in model.model_fields
        if (value := getattr(args, name, None)) is not None
    }
    return model(**overrides)


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, Settings)


def settings_from_args(args: argparse.Namespace) -> Settings:
    return from_args(Settings, args)


def cors_origins(setting: str) -> list[str]:
    return [o.strip() for o in setting.split(",") if o.strip()]


def key_from(secret: SecretStr | None, path: Path | None) -> SigningKey | None:
    """A hex private key given inline or in a file, or None when neither is set."""
    if secret is not None:
        return SigningKey.from_hex(secret.get_secret_value())
    if path is not None:
        warn_if_readable_by_others(path)
        return SigningKey.from_hex(path.read_text())
    return None


def warn_if_readable_by_others(path: Path) -> bool:
    """Warns (once per start, logged) when a private key file can be read by its group or
    by anyone. A warning, not ssh's refusal: container and Kubernetes secret mounts are
    0644 by default, readable only inside their container, and refusing them would stop
    nodes that are safe. True when it warned."""
    mode = path.stat().st_mode
    if not mode & 0o077:
        return False
    log.warning(
        "key_file_readable_by_others",
        path=str(path),
        mode=oct(mode & 0o777),
        detail=f"anyone who can read it can sign as this node or payer: chmod 600 {path}",
    )
    return True


def write_private(path: Path, text: str) -> None:
    """Writes a file only its owner can read (keys, files listing keys), from its creation."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as out:
        out.write(text)


# The node's settings by group, in the order docs/configuration.md lists them.
NODE_GROUPS: tuple[tuple[str, tuple[type[BaseModel], ...]], ...] = (
    ("node", (NodeGroup,)),
    ("serving", (ServingGroup,)),
    ("database", (DatabaseGroup,)),
    ("chain", (ChainGroup, NodeChainGroup)),
    ("registry", (RegistryGroup,)),
    ("tls", (TlsGroup, NodeTlsGroup)),
    ("replication", (ReplicationGroup,)),
    ("retention", (RetentionGroup,)),
    ("logs", (LogsGroup,)),
    ("fees", (FeesGroup,)),
    ("limits", (LimitsGroup, TrustedProxiesGroup)),
    ("sizes", (SizesGroup,)),
    ("watchdog", (WatchdogGroup,)),
    ("logging", (LoggingGroup,)),
)


def _declared(group: type[BaseModel]) -> list[str]:
    """The fields a group declares itself (not those of the group it extends)."""
    return [name for name in group.__annotations__ if name in group.model_fields]


def settings_table(
    model: type[BaseSettings] | None = None,
    groups: tuple[tuple[str, tuple[type[BaseModel], ...]], ...] = NODE_GROUPS,
    rest: str = "other",
) -> str:
    """The settings tables of docs/configuration.md (one per group; the model's fields of no
    group under `rest`), generated so they cannot drift from the code."""
    model = model or Settings
    prefix = model.model_config.get("env_prefix", "")
    listed = [(title, [n for g in members for n in _declared(g)]) for title, members in groups]
    grouped = {n for _, names in listed for n in names}
    others = [n for n in model.model_fields if n not in grouped]
    sections = []
    for title, names in [*([(rest, others)] if others else []), *listed]:
        rows = [f"### {title}", "", "| env var | flag | default | meaning |", "|---|---|---|---|"]
        for name in names:
            info = model.model_fields[name]
            default = info.default if info.default not in (None, "") else "(unset)"
            rows.append(
                f"| `{prefix}{name.upper()}` | `--{name.replace('_', '-')}` | `{default}` "
                f"| {info.description} |"
            )
        sections.append("\n".join(rows))
    return "\n\n".join(sections)
