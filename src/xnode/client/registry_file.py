"""The registry a tool reads from a file: a static registry (nodes.json, the node's own
format) or the devnet's description (.xnode/devnet.json, nodes with `url`)."""

from __future__ import annotations

import json
from pathlib import Path

from xnode.core.registry import NodeEntry, Registry


class RegistryFileError(ValueError):
    pass


def load_registry(path: Path | str) -> Registry:
    try:
        data = json.loads(Path(path).read_text())
        return Registry(
            NodeEntry(
                int(n["node_id"]),
                bytes.fromhex(str(n["public_key"]).removeprefix("0x")),
                str(n.get("http_address") or n["url"]),
                bool(n.get("enabled", True)),
            )
            for n in data["nodes"]
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RegistryFileError(f"cannot read a node registry from {path}: {exc}") from exc
