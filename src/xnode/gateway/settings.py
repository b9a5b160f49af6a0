"""Gateway settings: `XNODE_GATEWAY_*` environment variables, overridden by CLI flags.

The settings it shares with the node (registry and chain, serving, TLS, logging) are the
node's groups (xnode.config), read under this prefix; the node's registry code takes them
as they are."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from xnode.config import (
    ChainGroup,
    LoggingGroup,
    RegistryGroup,
    ServingGroup,
    TlsGroup,
    TrustedProxiesGroup,
    add_flags,
    from_args,
    host_port,
    key_from,
    settings_table,
)
from xnode.core.crypto import SigningKey
from xnode.core.limits import Limit
from xnode.gateway.clients import JwtPolicy, load_jwt_keys, parse_api_keys
from xnode.gateway.limits import ClientLimitPolicy

ENV_PREFIX = "XNODE_GATEWAY_"


class GatewaySettings(
    ServingGroup, RegistryGroup, TlsGroup, TrustedProxiesGroup, LoggingGroup, BaseSettings
):
    """The gateway's own settings, and the groups it shares with the node (serving, registry
    and its chain, TLS, trusted proxies, logging) under its own prefix."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    listen_address: str = Field("127.0.0.1:5040", description="gRPC listen host:port")
    http_node_urls: str = Field(
        "",
        description="GetNodes on the HTTP port: id=URL of each node's gRPC-web port, "
        "comma-separated (empty: the registry's URLs)",
    )
    payer_key: SecretStr | None = Field(
        None, description="Payer secp256k1 private key, hex (or use payer_key_file)"
    )
    payer_key_file: Path | None = Field(None, description="File holding the payer's hex key")
    # Redeclared for its default: the gateway polls only the registry, not an indexer.
    chain_poll_seconds: float = Field(
        1.0, description="How often the registry looks for new blocks", gt=0
    )
    publish_timeout_seconds: float = Field(
        # Longer than a node's chain publish timeout (30 s): commits and identity updates
        # are answered only once mined and indexed.
        45.0,
        description="Longest wait for a node to answer one publish",
        gt=0,
    )
    node_down_seconds: float = Field(
        5.0,
        description="A node that was unreachable is tried last for this long",
        ge=0,
    )
    read_url: str = Field(
        "",
        description="URL GetNodes gives clients to read from: this gateway as clients reach it, "
        "or the one address of several gateways; empty: http(s)://listen_address when that "
        "names a host",
    )
    http_read_url: str = Field(
        "",
        description="URL GetNodes on the HTTP port gives browsers to read from over gRPC-web:"
        " this gateway's HTTP port as browsers reach it; empty: http(s)://http_listen_address"
        " when that names a host and a port",
    )
    reads_through_gateway: bool = Field(
        True,
        description="GetNodes names the gateway, which serves reads from healthy nodes with "
        "failover; false: the nodes' own URLs (a client then reads from one node for good)",
    )
    node_check_seconds: float = Field(
        0.5,
        description="How often every node is health-checked (reads move off failing ones)",
        gt=0,
    )
    node_check_timeout_seconds: float = Field(
        1.5,
        description="A health check not answered this fast missed (node_check_failures in a row:"
        " the node is down)",
        gt=0,
    )
    node_check_failures: int = Field(
        2,
        description="Health checks in a row a node must miss (no answer in time) to be down; a"
        " refused connection or NOT_SERVING is down at once",
        ge=1,
    )
    node_check_connect_timeout_seconds: float = Field(
        5.0,
        description="Health check timeout when the check must first connect (it includes the "
        "TCP and TLS handshakes)",
        gt=0,
    )
    read_timeout_seconds: float = Field(
        30.0, description="Longest wait for one node's answer to a read before the next", gt=0
    )
    stream_connections_per_node: int = Field(
        4,
        description="Connections to each node that the streams served for clients share, in"
        " turn (a node's worker processes divide connections between them, not streams)",
        ge=1,
    )
    read_failover_seconds: float = Field(
        30.0,
        description="How long a stream looks for a node to resume on before it ends UNAVAILABLE",
        gt=0,
    )
    tls_ca_file: Path | None = Field(
        None, description="CA that https:// nodes' certificates chain to (default: system roots)"
    )
    tls_client_cert_file: Path | None = Field(
        None,
        description="PEM certificate shown to https:// nodes that ask for a client certificate "
        "(nodes run with tls_client_cert=require refuse a gateway without one)",
    )
    tls_client_key_file: Path | None = Field(None, description="PEM key of tls_client_cert_file")
    chain_visibility_seconds: float = Field(
        5.0,
        description="Longest wait for the other nodes to serve a commit or identity update",
        ge=0,
    )
    message_retention_days: int = Field(
        0, description="Retention asked of nodes per envelope (0: the node's default)", ge=0
    )
    api_keys: SecretStr | None = Field(
        None,
        description="Client API keys, name=key comma-separated (clients send authorization: "
        "Bearer KEY); unset: no authentication, clients told apart by IP",
    )
    jwt_public_keys_file: str = Field(
        "",
        description="PEM file of the public keys (P-256, Ed25519 or RSA) that sign client JWTs "
        "(authorization: Bearer JWT; exp and sub required, the client is jwt:SUB); empty: off",
    )
    jwt_audience: str = Field("", description="The aud client JWTs must name; empty: not checked")
    jwt_issuer: str = Field("", description="The iss client JWTs must name; empty: not checked")
    client_limits_enabled: bool = Field(
        True, description="Per-client rate and byte limits on PublishClientEnvelopes"
    )
    client_publish_envelopes_per_second: float = Field(
        200.0, description="Envelopes a client may publish per second", gt=0
    )
    client_publish_bytes_per_second: float = Field(
        4 * 1024 * 1024, description="Client envelope bytes a client may publish per second", gt=0
    )
    client_limit_burst_seconds: float = Field(
        2.0, description="A client's limit holds this many seconds of its rate as a burst", gt=0
    )
    client_envelopes_per_day: int = Field(
        0,
        description="Spending cap: envelopes one client (API key, JWT subject or IP) may have "
        "the payer pay for per day, refilled continuously; 0: no cap",
        ge=0,
    )
    client_bytes_per_day: int = Field(
        0,
        description="Spending cap: envelope bytes one client may have the payer pay for per "
        "day, refilled continuously; 0: no cap",
        ge=0,
    )
    anonymous_reads: bool = Field(
        True,
        description="With API keys or JWTs configured, serve reads without one too; false: "
        "reads need one (the official SDKs send theirs only with PayerApi calls, so they cannot"
        " read then); without keys configured, reads are open",
    )
    metrics_address: str = Field(
        "", description="Prometheus /metrics host:port (node_id label 0); empty: off"
    )
    usage_file: Path | None = Field(
        None,
        description="SQLite file recording what the gateway paid for per client and day "
        "(`xnode gateway usage`); unset: kept in memory",
    )

    @field_validator("metrics_address")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        return host_port(value)

    @field_validator("http_node_urls")
    @classmethod
    def _node_urls(cls, value: str) -> str:
        for item in filter(None, (i.strip() for i in value.split(","))):
            node_id, sep, url = item.partition("=")
            if not (sep and node_id.strip().isdigit() and "://" in url):
                raise ValueError(f"expected id=scheme://host:port, got {item!r}")
        return value

    @field_validator("api_keys")
    @classmethod
    def _api_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_api_keys(value.get_secret_value())
        return value

    @field_validator("listen_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if not value.rpartition(":")[2].isdigit():
            raise ValueError(f"expected host:port, got {value!r}")
        return value

    @field_validator("read_url", "http_read_url")
    @classmethod
    def _read_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected http://host:port or https://host:port, got {value!r}")
        return value.rstrip("/")

    def read_url_for(self, bound: str, tls: bool) -> str | None:
        """The URL GetNodes names for reads, given the address the gRPC port is bound to;
        None: the nodes' own URLs (reads through the gateway off, or no host to name)."""
        return self._reads_at(self.read_url, bound, tls)

    def http_read_url_for(self, tls: bool) -> str | None:
        """The same for browsers, on the HTTP port (gRPC-web): its address is known before
        it is bound, unless it is port 0."""
        if self.http_listen_address.endswith(":0"):
            return self.http_read_url or None
        return self._reads_at(self.http_read_url, self.http_listen_address, tls)

    def _reads_at(self, configured: str, bound: str, tls: bool) -> str | None:
        if not self.reads_through_gateway:
            return None
        if configured:
            return configured
        host = bound.rpartition(":")[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            return None
        return f"{'https' if tls else 'http'}://{bound}"

    @property
    def node_http_urls(self) -> dict[int, str] | None:
        if not self.http_node_urls:
            return None
        pairs = (item.split("=", 1) for item in self.http_node_urls.split(",") if item.strip())
        return {int(node_id): url.strip() for node_id, url in pairs}

    def client_jwt_policy(self) -> JwtPolicy | None:
        if not self.jwt_public_keys_file:
            return None
        try:
            pem = Path(self.jwt_public_keys_file).read_bytes()
        except OSError as exc:
            raise ValueError(f"jwt_public_keys_file: {exc}") from None
        return JwtPolicy(load_jwt_keys(pem), self.jwt_audience or None, self.jwt_issuer or None)

    def client_api_keys(self) -> dict[str, str]:
        """key -> client name."""
        return parse_api_keys(self.api_keys.get_secret_value() if self.api_keys else "")

    def client_limit_policy(self) -> ClientLimitPolicy:
        burst = self.client_limit_burst_seconds
        return ClientLimitPolicy(
            envelopes=Limit.per_second(self.client_publish_envelopes_per_second, burst),
            bytes=Limit.per_second(self.client_publish_bytes_per_second, burst),
            enabled=self.client_limits_enabled,
            daily_envelopes=_per_day(self.client_envelopes_per_day),
            daily_bytes=_per_day(self.client_bytes_per_day),
        )

    def payer_signing_key(self) -> SigningKey:
        key = key_from(self.payer_key, self.payer_key_file)
        if key is None:
            raise ValueError(
                f"no payer key: set {ENV_PREFIX}PAYER_KEY or {ENV_PREFIX}PAYER_KEY_FILE "
                "(see `xnode keygen`)"
            )
        return key


def _per_day(amount: int) -> Limit | None:
    """A day's cap as a bucket: the whole day's amount at once, refilled over the day."""
    return Limit(amount / 86_400, amount) if amount else None


# The settings shared with the node, by group, after the gateway's own (docs/gateway-reference.md).
GATEWAY_GROUPS: tuple[tuple[str, tuple[type[BaseModel], ...]], ...] = (
    ("serving", (ServingGroup,)),
    ("registry", (ChainGroup, RegistryGroup)),
    ("tls", (TlsGroup,)),
    ("trusted proxies", (TrustedProxiesGroup,)),
    ("logging", (LoggingGroup,)),
)


def gateway_settings_table() -> str:
    return settings_table(GatewaySettings, GATEWAY_GROUPS, rest="gateway")


def add_gateway_flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GatewaySettings)


def gateway_settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    return from_args(GatewaySettings, args)
