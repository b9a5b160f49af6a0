"""Binds a database to one node: a database made for another node id is refused."""

from __future__ import annotations

import asyncpg


class WrongNodeError(RuntimeError):
    pass


async def claim_database(pool: asyncpg.Pool, node_id: int, public_key: bytes) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO node_info (node_id, public_key) VALUES ($1, $2)"
            " ON CONFLICT (singleton) DO NOTHING",
            node_id,
            public_key,
        )
        row = await conn.fetchrow("SELECT node_id, public_key FROM node_info")
        assert row is not None
        if row[0] != node_id or bytes(row[1]) != public_key:
            raise WrongNodeError(
                f"this database belongs to node {row[0]} (key {bytes(row[1]).hex()[:18]}...), "
                f"not node {node_id} (key {public_key.hex()[:18]}...); "
                "use that node's signer key or another database"
            )
        # The sequencer locks this row; it must exist before the first publish.
        await conn.execute(
            "INSERT INTO vector_clock (originator_node_id, sequence_id) VALUES ($1, 0)"
            " ON CONFLICT DO NOTHING",
            node_id,
        )
