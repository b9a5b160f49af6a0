"""Migration 0003 on a database that already holds envelopes: their leaves are backfilled, and
the node builds its log's tree from them when it starts."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config

from tests.conftest import NodeSpec, node_settings
from tests.integration.logs.helpers import checkpoint_at, log_api
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import envelope_leaf
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.store.migrate import migrations_dir, sqlalchemy_url, upgrade_to_head

PAYER = SigningKey.generate()


def upgrade_to(dsn: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    command.upgrade(config, revision)


async def test_existing_envelopes_get_leaves_and_a_tree(
    empty_database: str, node_spec: NodeSpec, start_node: Any
) -> None:
    await asyncio.to_thread(upgrade_to, empty_database, "0002")
    key = node_spec.keys[100]
    signed = [
        originate(
            validate_payer_envelope(
                build_payer_envelope(group_message_envelope(b"g" * 16, b"%d" % s), PAYER, 100),
                100,
            ),
            100,
            s,
            1000 + s,
            key,
        )
        for s in range(1, 24)
    ]
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.executemany(
            "INSERT INTO originator_envelopes VALUES ($1, $2, $3, $4, NULL, $5, $6)",
            [
                (e.originator_node_id, e.sequence_id, e.originator_ns, e.topic,
                 e.payer_address, e.raw)
                for e in signed
            ],
        )  # fmt: skip
        await conn.execute("INSERT INTO vector_clock VALUES (100, 23, 1023)")
        await asyncio.to_thread(upgrade_to_head, empty_database)
        rows = await conn.fetch("SELECT leaf_hash FROM log_leaves ORDER BY sequence_id")
    finally:
        await conn.close()
    leaves = [envelope_leaf(e.raw) for e in signed]
    assert [r[0] for r in rows] == leaves
    node = await start_node(**node_settings(empty_database, node_spec, log_checkpoint_seconds=0.2))
    async with log_api(node.address) as api:
        checkpoint = await checkpoint_at(api, 100, key.public_key, 23)
    assert checkpoint.root == merkle.root_of(leaves)
