"""`xnode audit` on a real Postgres: a clean node audits clean (also with expired envelopes
whose leaves are kept, and with a real fork); each kind of tampering is found and named; an
envelope gone before the expiry its leaf commits to is a loss."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish, received_row, run_cli_async
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, log_api
from xnode.commands.audit import AuditOptions, audit_node
from xnode.config import Settings
from xnode.core.audit import FaultKind, Verdict
from xnode.core.crypto import checkpoint_digest
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.forks import log_keeps
from xnode.core.topics import TopicKind
from xnode.store.forks import resolve_fork
from xnode_api.logs.v1 import logs_pb2

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
QUIET = AuditOptions(show_progress=False)


async def _node_history(start_node: Any, database: str, node_spec: NodeSpec) -> Settings:
    """A node that published 40 envelopes with checkpoints up to 40, then stopped."""
    settings = node_settings(database, node_spec, **FAST_CHECKPOINTS)
    node = await start_node(**settings)
    await publish(node.address, 100, [GROUP] * 40)
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, node_spec.keys[100].public_key, 40)
    await node.stop()
    return Settings(**settings)


async def _sql(dsn: str, statement: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(statement, *args)
    finally:
        await conn.close()


async def _tampered(
    settings: Settings, tamper: Callable[[], Awaitable[None]], undo: Callable[[], Awaitable[None]]
) -> Verdict:
    await tamper()
    try:
        return await audit_node(settings, QUIET)
    finally:
        await undo()


async def test_clean_node_audits_clean_and_each_tampering_is_named(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    settings = await _node_history(start_node, database, node_spec)
    key = node_spec.keys[100]
    clean = await audit_node(settings, QUIET)
    assert clean.clean, clean.describe()
    assert clean.envelopes == 40 and clean.checkpoints >= 1 and clean.checkpoints_unchecked == 0

    envelope_of = {
        r[0]: bytes(r[1])
        for r in await _sql(
            database,
            "SELECT originator_sequence_id, envelope FROM originator_envelopes"
            " WHERE originator_node_id = 100",
        )
    }
    seven = envelope_of[7]
    flipped = seven[:-10] + bytes([seven[-10] ^ 1]) + seven[-9:]
    set_seven = "UPDATE originator_envelopes SET envelope = $1 WHERE originator_sequence_id = 7"

    async def flip() -> None:
        await _sql(database, set_seven, flipped)

    async def unflip() -> None:
        await _sql(database, set_seven, seven)

    verdict = await _tampered(settings, flip, unflip)
    assert set(verdict.faults) == {FaultKind.BAD_SIGNATURE}, verdict.describe()
    assert verdict.details[0].sequence_id == 7

    # A missing sequence id that did not expire: neither its envelope nor its leaf is held.
    five = await _sql(database, "SELECT * FROM log_leaves WHERE sequence_id = 5")
    five_envelope = await _sql(
        database, "SELECT * FROM originator_envelopes WHERE originator_sequence_id = 5"
    )

    async def drop_five() -> None:
        await _sql(database, "DELETE FROM originator_envelopes WHERE originator_sequence_id = 5")
        await _sql(database, "DELETE FROM log_leaves WHERE sequence_id = 5")

    async def restore_five() -> None:
        await _sql(database, "INSERT INTO log_leaves VALUES ($1, $2, $3, $4, $5, $6)", *five[0])

    verdict = await _tampered(settings, drop_five, restore_five)
    assert verdict.faults[FaultKind.GAP] == 1, verdict.describe()
    assert "5..5" in verdict.details[0].detail
    assert not set(verdict.faults) - {FaultKind.GAP}  # roots past the gap are left unchecked
    # The envelope is gone, its leaf kept (the leaf of 5 is back, its envelope not): a loss
    # while the expiry the leaf commits to is ahead, expired once it has passed.
    lost = await audit_node(settings, QUIET)
    assert lost.faults == {FaultKind.LOST: 1} and lost.expired == 0, lost.describe()
    assert lost.details[0].sequence_id == 5
    after_expiry = AuditOptions(show_progress=False, now_unix=five[0]["expiry"])
    expired = await audit_node(settings, after_expiry)
    assert expired.clean and expired.expired == 1, expired.describe()
    await _sql(
        database,
        "INSERT INTO originator_envelopes VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        *five_envelope[0],
    )

    # The newest checkpoint re-signed by the originator over a root its leaves do not give,
    # and then over the right root but with a broken previous-hash link.
    rows = await _sql(
        database,
        "SELECT id, signed, tree_size, root, originator_ns, previous_hash FROM log_checkpoints"
        " WHERE originator_node_id = 100 ORDER BY tree_size",
    )
    newest = rows[-1]

    async def resign(root: bytes, previous_hash: bytes) -> None:
        unsigned = logs_pb2.UnsignedCheckpoint(
            originator_node_id=100,
            tree_size=newest["tree_size"],
            root=root,
            originator_ns=newest["originator_ns"],
            previous_hash=previous_hash,
            leaf_format=2,
        ).SerializeToString()
        forged = logs_pb2.Checkpoint(
            unsigned_checkpoint=unsigned, signature=key.sign(checkpoint_digest(unsigned))
        )
        await _sql(
            database,
            "UPDATE log_checkpoints SET signed = $2 WHERE id = $1",
            newest["id"],
            forged.SerializeToString(),
        )

    async def restore_newest() -> None:
        await _sql(
            database,
            "UPDATE log_checkpoints SET signed = $2 WHERE id = $1",
            newest["id"],
            bytes(newest["signed"]),
        )

    async def wrong_root() -> None:
        await resign(bytes(32), bytes(newest["previous_hash"]))

    verdict = await _tampered(settings, wrong_root, restore_newest)
    assert set(verdict.faults) == {FaultKind.CHECKPOINT_ROOT}, verdict.describe()
    assert verdict.details[0].sequence_id == newest["tree_size"]

    async def broken_link() -> None:
        await resign(bytes(newest["root"]), b"\x01" * 32)

    verdict = await _tampered(settings, broken_link, restore_newest)
    assert set(verdict.faults) == {FaultKind.CHECKPOINT_CHAIN}, verdict.describe()

    # A real fork: the originator signs a second envelope for sequence id 3. Both versions
    # are kept; the log keeps the rule's pick; its checkpoints over 3 are evidence, no fault.
    three_ns = parse_originator_envelope(envelope_of[3]).originator_ns
    other = received_row(100, key, 3, three_ns, Item(GROUP.kind, group(2)))
    conn = await asyncpg.connect(database)
    try:
        async with conn.transaction():
            assert await resolve_fork(conn, other) is not None
    finally:
        await conn.close()
    forked = await audit_node(settings, QUIET)
    assert forked.clean and forked.conflicts == 1, forked.describe()

    pick = log_keeps(envelope_of[3], other.raw)
    loser = other.raw if pick == envelope_of[3] else envelope_of[3]
    await _sql(
        database,
        "UPDATE originator_envelopes SET envelope = $1 WHERE originator_sequence_id = 3",
        loser,
    )
    wrong_pick = await audit_node(settings, QUIET)
    assert FaultKind.CONFLICT_WRONG_PICK in wrong_pick.faults, wrong_pick.describe()


async def test_audit_command_exit_codes(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    settings = await _node_history(start_node, database, node_spec)
    flags = ["--database-dsn", settings.database_dsn, "--nodes-file", str(node_spec.nodes_file)]
    clean = await run_cli_async("audit", "--no-progress", *flags)
    assert clean.returncode == 0, clean.stderr
    assert "audit: CLEAN" in clean.stdout
    await _sql(database, "DELETE FROM log_leaves WHERE sequence_id = 9")
    await _sql(database, "DELETE FROM originator_envelopes WHERE originator_sequence_id = 9")
    found = await run_cli_async("audit", *flags)
    assert found.returncode == 1, found.stderr
    assert FaultKind.GAP.value in found.stdout
    unreachable = await run_cli_async(
        "audit", "--database-dsn", "postgresql://nobody@127.0.0.1:1/none"
    )
    assert unreachable.returncode == 2
    assert "could not run" in unreachable.stderr
