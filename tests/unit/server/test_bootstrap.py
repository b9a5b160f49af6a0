"""Start-up: a read-only node (XIP-49 3.4) goes by no registry id, and cannot start without a
registry to replicate from; the start-up heap is moved out of the collector's way."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from xnode.config import Settings
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry
from xnode.server.bootstrap import READ_ONLY_NODE_ID, StartupError, resolve_node_id, settle_heap
from xnode.server.wiring import start_node
from xnode.static_registry import StaticRegistrySource


def test_a_read_only_node_needs_a_registry() -> None:
    settings = Settings(read_only=True)
    with pytest.raises(StartupError, match="read-only node replicates from the registry"):
        resolve_node_id(settings, SigningKey.generate(), None)


def test_an_unregistered_key_is_fine_for_a_read_only_node(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(Registry([NodeEntry(100, SigningKey.generate().public_key, "")]).to_json())
    source = StaticRegistrySource(nodes)
    stranger = SigningKey.generate()
    assert resolve_node_id(Settings(read_only=True), stranger, source) == READ_ONLY_NODE_ID
    with pytest.raises(StartupError):
        resolve_node_id(Settings(), stranger, source)


async def test_a_registered_node_still_needs_its_key() -> None:
    with pytest.raises(StartupError, match="signer key"):
        await start_node(Settings(read_only=False, signer_key=None, signer_key_file=None))


def test_settle_heap_moves_the_start_up_heap_out_of_collections() -> None:
    held = [[i] for i in range(1000)]  # containers the collector tracks
    try:
        settle_heap()
        assert gc.get_freeze_count() >= len(held)
        assert all(not any(x is h for x in gc.get_objects(2)) for h in held[:3])
    finally:
        gc.unfreeze()
