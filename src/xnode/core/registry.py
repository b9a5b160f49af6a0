"""The node registry as the core sees it: ids, keys, addresses, enabled flags (XIP-49 3.1.1)."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from xnode.core.crypto import PUBLIC_KEY_LENGTH

# node id -> every registry key it may have signed with. The NodeRegistry contract fixes a
# node's key when the node is added, so today this is one key per node; a registry with
# rotations (or a snapshot taken across one) passes each node's keys over time.
RegistryKeys = Mapping[int, Collection[bytes]]


@dataclass(frozen=True, slots=True)
class NodeEntry:
    node_id: int
    public_key: bytes
    http_address: str
    enabled: bool = True

    def __post_init__(self) -> None:
        if len(self.public_key) != PUBLIC_KEY_LENGTH or self.public_key[0] != 4:
            raise ValueError(f"node {self.node_id}: public key must be 65 bytes starting 0x04")


class RegistryError(RuntimeError):
    pass


class Registry:
    def __init__(self, nodes: Iterable[NodeEntry]) -> None:
        self.nodes = {n.node_id: n for n in nodes}

    def get(self, node_id: int) -> NodeEntry | None:
        return self.nodes.get(node_id)

    def public_keys(self) -> dict[int, bytes]:
        """node id -> its registry key, disabled nodes included: what they originated while
        enabled stays theirs."""
        return {n.node_id: n.public_key for n in self.nodes.values()}

    def keys(self) -> dict[int, tuple[bytes]]:
        """node id -> its registry key (RegistryKeys), as signatures are checked against."""
        return {node_id: (key,) for node_id, key in self.public_keys().items()}

    def find_by_key(self, public_key: bytes) -> NodeEntry | None:
        return next((n for n in self.nodes.values() if n.public_key == public_key), None)

    def resolve_self(self, public_key: bytes, configured_id: int | None) -> NodeEntry:
        """This node's entry, found by its signer's public key."""
        entry = self.find_by_key(public_key)
        if entry is None:
            raise RegistryError(
                f"this node's public key 0x{public_key.hex()} is not in the node registry; "
                "register it first"
            )
        if configured_id is not None and configured_id != entry.node_id:
            raise RegistryError(
                f"configured node id {configured_id} differs from the registry's "
                f"{entry.node_id} for this key"
            )
        if not entry.enabled:
            raise RegistryError(f"node {entry.node_id} is disabled in the registry")
        return entry

    @classmethod
    def from_json(cls, text: str) -> Registry:
        data = json.loads(text)
        return cls(
            NodeEntry(
                int(n["node_id"]),
                bytes.fromhex(n["public_key"].removeprefix("0x")),
                n.get("http_address", ""),
                bool(n.get("enabled", True)),
            )
            for n in data["nodes"]
        )

    def to_json(self) -> str:
        nodes = [
            {
                "node_id": n.node_id,
                "public_key": "0x" + n.public_key.hex(),
                "http_address": n.http_address,
                "enabled": n.enabled,
            }
            for n in sorted(self.nodes.values(), key=lambda n: n.node_id)
        ]
        return json.dumps({"nodes": nodes}, indent=2)
