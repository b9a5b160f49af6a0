"""The registry's keys, as every signature check reads them: one lookup for all users."""

from __future__ import annotations

from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry

KEYS = {100: SigningKey.generate().public_key, 200: SigningKey.generate().public_key}


def test_a_disabled_node_keeps_its_key_for_what_it_originated() -> None:
    registry = Registry(
        [NodeEntry(100, KEYS[100], "http://a:5050"), NodeEntry(200, KEYS[200], "", enabled=False)]
    )
    assert registry.public_keys() == KEYS
    assert registry.keys() == {100: (KEYS[100],), 200: (KEYS[200],)}  # RegistryKeys
