"""Settings: `XNODE_*` environment variables, overridden by matching CLI flags.

Each field below is one row of the README's settings table (`--listen-address` is
`XNODE_LISTEN_ADDRESS`, and so on).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from xnode.crypto import SigningKey


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XNODE_", extra="ignore")

    listen_address: str = Field("127.0.0.1:5050", description="gRPC listen host:port")
    database_dsn: str = Field(
        "postgresql://postgres@127.0.0.1:5432/xnode", description="PostgreSQL DSN"
    )
    signer_key: SecretStr | None = Field(
        None, description="Node secp256k1 private key, hex (or use signer_key_file)"
    )
    signer_key_file: Path | None = Field(None, description="File holding the hex private key")
    node_id: int | None = Field(
        None, description="This node's id; checked against the registry when one is given"
    )
    nodes_file: Path | None = Field(
        None, description="Static node registry (JSON) for private deployments"
    )
    metrics_address: str = Field(
        "127.0.0.1:9464", description="Prometheus host:port; empty disables metrics"
    )
    log_level: str = Field("info", description="debug, info, warning or error")
    log_format: Literal["console", "json"] = Field("console", description="console or json")
    max_batch: int = Field(1000, description="Most envelopes one group commit takes", gt=0)
    keepalive_seconds: float = Field(
        30.0, description="Empty message on idle subscriptions every N seconds", gt=0
    )
    max_message_mib: int = Field(25, description="Largest gRPC message, MiB", gt=0)
    shutdown_grace_seconds: float = Field(
        10.0, description="How long SIGTERM waits for in-flight requests", ge=0
    )
    migrate_on_start: bool = Field(True, description="Apply database migrations at start-up")
    db_pool_size: int = Field(16, description="Most Postgres connections per process", gt=1)

    @field_validator("listen_address", "metrics_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value and not value.rpartition(":")[2].isdigit():
            raise ValueError(f"expected host:port, got {value!r}")
        return value

    def signing_key(self) -> SigningKey:
        if self.signer_key is not None:
            return SigningKey.from_hex(self.signer_key.get_secret_value())
        if self.signer_key_file is not None:
            return SigningKey.from_hex(self.signer_key_file.read_text())
        raise ValueError(
            "no signer key: set XNODE_SIGNER_KEY or XNODE_SIGNER_KEY_FILE (see `xnode keygen`)"
        )


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, info in Settings.model_fields.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            help=f"{info.description} [env XNODE_{name.upper()}]",
        )


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {
        name: value
        for name in Settings.model_fields
        if (value := getattr(args, name, None)) is not None
    }
    return Settings(**overrides)


def settings_table() -> str:
    """The README's settings table, generated so it cannot drift from the code."""
    rows = ["| env var | flag | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = info.default if info.default not in (None, "") else "(unset)"
        rows.append(
            f"| `XNODE_{name.upper()}` | `--{name.replace('_', '-')}` | `{default}` "
            f"| {info.description} |"
        )
    return "\n".join(rows)
