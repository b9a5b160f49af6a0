"""The devnet's gateway (payer service): its own key under the state directory, the nodes'
registry, and a port near the nodes'."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from xnode.devtools.processes import spawn_xnode
from xnode.gateway.settings import ENV_PREFIX

GATEWAY_PORT = 5040  # below the nodes' 5050, 5051, ...
GATEWAY_HTTP_PORT = 5140  # gRPC-web and JSON, below the nodes' 5150, 5151, ...


def gateway_env(node_registry_env: dict[str, str]) -> dict[str, str]:
    """The nodes' registry settings (XNODE_*) as the gateway's (XNODE_GATEWAY_*)."""
    return {
        ENV_PREFIX + name.removeprefix("XNODE_"): value for name, value in node_registry_env.items()
    }


def spawn_gateway(
    state: Path, address: str, key_file: Path, node_registry_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **gateway_env(node_registry_env),
        f"{ENV_PREFIX}LISTEN_ADDRESS": address,
        f"{ENV_PREFIX}PAYER_KEY_FILE": str(key_file),
    }
    return spawn_xnode("gateway", env, state / "gateway.log")
