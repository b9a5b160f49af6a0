"""Migration 0003 on a database that already holds envelopes: their leaves are backfilled, and
the node builds its log's tree from them when it starts. Migration 0008 moves format 1 logs to
leaf format 2; migration 0012 keeps the content hash (the opening) beside each leaf."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config

from tests.conftest import NodeSpec, node_settings
from tests.integration.logs.helpers import checkpoint_at, log_api
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import FIRST_PREVIOUS, envelope_leaf, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.leaves import FORMAT_V1, content_hash_of
from xnode.core.reconciliation import fingerprint_part
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


def _signed(key: SigningKey, count: int) -> list[IndexedEnvelope]:
    return [
        originate(
            validate_payer_envelope(
                build_payer_envelope(group_message_envelope(b"g" * 16, b"%d" % s), PAYER, 100),
                100,
            ),
            100,
            s,
            time.time_ns() - 1000 + s,
            key,
        )
        for s in range(1, count + 1)
    ]


async def test_migration_0008_moves_logs_to_leaf_format_2(
    empty_database: str, node_spec: NodeSpec, start_node: Any
) -> None:
    """A format 1 log (37 leaves, a checkpoint at 36, the envelope of 30 already gone) becomes
    a format 2 log: held envelopes' leaves recomputed, the gone one's kept as format 1, the
    tree rebuilt, the format 1 checkpoint kept aside, and the node signs format 2 ones."""
    await asyncio.to_thread(upgrade_to, empty_database, "0007")
    key = node_spec.keys[100]
    signed = _signed(key, 37)
    v1 = [envelope_leaf(e.raw, FORMAT_V1) for e in signed]
    old = sign_checkpoint(key, 100, 36, merkle.root_of(v1[:36]), 1, None)
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.executemany(
            "INSERT INTO originator_envelopes VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [
                (100, e.sequence_id, e.originator_ns, e.topic, e.expiry, e.payer_address, e.raw)
                for e in signed
                if e.sequence_id != 30
            ],
        )
        await conn.executemany(
            "INSERT INTO log_leaves VALUES (100, $1, $2, $3)",
            [(s, leaf, fingerprint_part(leaf)) for s, leaf in enumerate(v1, 1)],
        )
        await conn.execute(
            "INSERT INTO vector_clock VALUES (100, 37, $1)", signed[-1].originator_ns
        )
        await conn.execute("INSERT INTO log_trees VALUES (100, 37)")
        await conn.execute(
            "INSERT INTO log_checkpoints (originator_node_id, tree_size, root, originator_ns,"
            " previous_hash, signed) VALUES (100, 36, $1, 1, $2, $3)",
            old.root,
            old.previous_hash,
            old.signed,
        )
        await asyncio.to_thread(upgrade_to_head, empty_database)
        rows = await conn.fetch(
            "SELECT sequence_id, leaf_hash, expiry, content_hash FROM log_leaves"
            " ORDER BY sequence_id"
        )
        aside = await conn.fetchval("SELECT conflict FROM log_checkpoints WHERE tree_size = 36")
        tree_size = await conn.fetchval("SELECT tree_size FROM log_trees")
    finally:
        await conn.close()
    expected = [v1[29] if e.sequence_id == 30 else envelope_leaf(e.raw) for e in signed]
    assert [bytes(r[1]) for r in rows] == expected
    assert [r[2] for r in rows] == [None if e.sequence_id == 30 else e.expiry for e in signed]
    # Migration 0012 keeps each held format 2 leaf's opening beside it (none for the gone one).
    openings = [None if r[3] is None else bytes(r[3]) for r in rows]
    assert openings == [None if e.sequence_id == 30 else content_hash_of(e.raw) for e in signed]
    assert aside is not None and "leaf format 1" in aside
    assert tree_size == 37
    node = await start_node(**node_settings(empty_database, node_spec, log_checkpoint_seconds=0.2))
    async with log_api(node.address) as api:
        checkpoint = await checkpoint_at(api, 100, key.public_key, 37)
    assert checkpoint.leaf_format == 2
    assert checkpoint.root == merkle.root_of(expected)
    assert checkpoint.previous_hash == FIRST_PREVIOUS  # a new chain: format 1 is not compared
