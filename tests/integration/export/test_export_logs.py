"""`xnode export --with-logs`: the committed logs (leaf hashes, checkpoints, forks) written
whole under node-<id>/logs/, replaced atomically by the next export (docs/export-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, leaves_of, log_api
from xnode.commands.export import export_node
from xnode.config import Settings
from xnode.core.checkpoints import verify_checkpoint
from xnode.core.leaves import signed_content
from xnode.core.topics import TopicKind

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))


async def test_with_logs_exports_leaves_and_checkpoints_whole(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    settings = node_settings(database, node_spec, **FAST_CHECKPOINTS)
    node = await start_node(**settings)
    sent = await publish(node.address, 100, [GROUP] * 25)
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, node_spec.keys[100].public_key, 25)
    for _ in range(2):  # the second export replaces the snapshot, it does not add to it
        await export_node(
            Settings(**settings), tmp_path, with_payloads=True, show_progress=False, with_logs=True
        )
    logs = tmp_path / "node-100" / "logs"
    leaves = pq.read_table(logs / "leaves").sort_by("sequence_id")
    assert leaves.column("sequence_id").to_pylist() == list(range(1, 26))
    assert leaves.column("originator_node_id").to_pylist() == [100] * 25
    assert leaves.column("leaf_hash").to_pylist() == leaves_of(sent)
    # The committed expiry, so the council's jobs tell an expired envelope from a lost one.
    assert leaves.column("expiry").to_pylist() == [signed_content(r)[1] for r in sent]
    checkpoints = pq.read_table(logs / "checkpoints").to_pylist()
    key = node_spec.keys[100].public_key
    assert {verify_checkpoint(c["signed"], key).tree_size for c in checkpoints} >= {25}
    assert all(c["conflict"] is None for c in checkpoints)
    assert not (logs / "forks").exists()
    assert sorted(p.name for p in logs.parent.iterdir() if p.name.startswith(".logs")) == []
