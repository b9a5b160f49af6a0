"""Gateway settings: `XNODE_GATEWAY_*` environment variables, overridden by CLI flags.

The registry fields mean what the node's do (xnode.config.Settings); `node_settings()` hands
them to the node's registry code so both read the registry the same way."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from xnode.config import Settings, add_flags, cors_origins, from_args, key_from
from xnode.core.crypto import SigningKey
from xnode.core.limits import Limit
from xnode.gateway.clients import JwtPolicy, load_jwt_keys, parse_api_keys
from xnode.gateway.limits import ClientLimitPolicy

ENV_PREFIX = "XNODE_GATEWAY_"


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    listen_address: str = Field("127.0.0.1:5040", description="gRPC listen host:port")
    http_listen_address: str = Field(
        "", description="gRPC-web and HTTP/JSON (/mls/v2/payer/...) host:port; empty: off"
    )
    http_cors_origins: str = Field(
        "", description="Origins browsers may call the HTTP port from, comma-separated; * any"
    )
    http_node_urls: str = Field(
        "",
        description="GetNodes on the HTTP port: id=URL of each node's gRPC-web port, "
        "comma-separated (empty: the registry's URLs)",
    )
    payer_key: SecretStr | None = Field(
        None, description="Payer secp256k1 private key, hex (or use payer_key_file)"
    )
    payer_key_file: Path | None = Field(None, description="File holding the payer's hex key")
    nodes_file: Path | None = Field(None, description="Static node registry (JSON)")
    chain_rpc_url: str | None = Field(None, description="Chain JSON-RPC URL (http)")
    contracts_file: Path | None = Field(
        None, description="Chain id and contract addresses (`xnode chain deploy`)"
    )
    registry_rpc_url: str | None = Field(
        None, description="JSON-RPC URL of the registry's chain, if apart; unset: chain_rpc_url"
    )
    registry_contracts_file: Path | None = Field(
        None, description="Contracts file of the registry's chain; unset: contracts_file"
    )
    registry_source: Literal["auto", "chain", "file"] = Field(
        "auto", description="Node registry: chain, file (nodes_file) or auto (chain if set)"
    )
    chain_poll_seconds: float = Field(
        1.0, description="How often the registry looks for new blocks", gt=0
    )
    chain_rpc_timeout_seconds: float = Field(10.0, description="Chain RPC request timeout", gt=0)
    chain_registry_refresh_seconds: float = Field(
        60.0, description="Full re-read of the node registry every N seconds", gt=0
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
        1.5, description="A node that does not answer a health check this fast is down", gt=0
    )
    read_timeout_seconds: float = Field(
        30.0, description="Longest wait for one node's answer to a read before the next", gt=0
    )
    read_failover_seconds: float = Field(
        30.0,
        description="How long a stream looks for a node to resume on before it ends UNAVAILABLE",
        gt=0,
    )
    tls_ca_file: Path | None = Field(
        None, description="CA that https:// nodes' certificates chain to (default: system roots)"
    )
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate chain the gRPC and HTTP ports serve (unset: plaintext)"
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file")
    chain_visibility_seconds: float = Field(
        5.0,
        description="Longest wait for the other nodes to serve a commit or identity update",
        ge=0,
    )
    message_retention_days: int = Field(
        0, description="Retention asked of nodes per envelope (0: the node's default)", ge=0
    )
    max_message_mib: int = Field(25, description="Largest gRPC message, MiB", gt=0)
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
    metrics_address: str = Field(
        "", description="Prometheus /metrics host:port (node_id label 0); empty: off"
    )
    usage_file: Path | None = Field(
        None,
        description="SQLite file recording what the gateway paid for per client and day "
        "(`xnode gateway usage`); unset: kept in memory",
    )
    shutdown_grace_seconds: float = Field(
        10.0, description="How long SIGTERM waits for in-flight requests", ge=0
    )
    stop_step_seconds: float = Field(
        15.0,
        description="Stopping: how long each part may take to stop beyond the grace before it "
        "is forced (logged as node_stop_step_overran with the pending tasks' stacks)",
        gt=0,
    )
    log_level: str = Field("info", description="debug, info, warning or error")
    log_format: Literal["console", "json"] = Field("console", description="console or json")

    @field_validator("http_listen_address", "metrics_address")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        return cls._host_port(value) if value else value

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

    @field_validator("read_url")
    @classmethod
    def _read_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected http://host:port or https://host:port, got {value!r}")
        return value.rstrip("/")

    def read_url_for(self, bound: str, tls: bool) -> str | None:
        """The URL GetNodes names for reads, given the address the gRPC port is bound to;
        None: the nodes' own URLs (reads through the gateway off, or no host to name)."""
        if not self.reads_through_gateway:
            return None
        if self.read_url:
            return self.read_url
        host = bound.rpartition(":")[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            return None
        return f"{'https' if tls else 'http'}://{bound}"

    @property
    def cors_origins(self) -> list[str]:
        return cors_origins(self.http_cors_origins)

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
        )

    def payer_signing_key(self) -> SigningKey:
        key = key_from(self.payer_key, self.payer_key_file)
        if key is None:
            raise ValueError(
                f"no payer key: set {ENV_PREFIX}PAYER_KEY or {ENV_PREFIX}PAYER_KEY_FILE "
                "(see `xnode keygen`)"
            )
        return key

    def node_settings(self) -> Settings:
        """The registry part, as the node's settings, for the node's registry readers."""
        # model_construct: these values are validated already, and the node's XNODE_* environment
        # must not leak into the gateway.
        return Settings.model_construct(
            nodes_file=self.nodes_file,
            chain_rpc_url=self.chain_rpc_url,
            contracts_file=self.contracts_file,
            registry_rpc_url=self.registry_rpc_url,
            registry_contracts_file=self.registry_contracts_file,
            registry_source=self.registry_source,
            chain_poll_seconds=self.chain_poll_seconds,
            chain_rpc_timeout_seconds=self.chain_rpc_timeout_seconds,
            chain_registry_refresh_seconds=self.chain_registry_refresh_seconds,
        )


def add_gateway_flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GatewaySettings)


def gateway_settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    return from_args(GatewaySettings, args)
