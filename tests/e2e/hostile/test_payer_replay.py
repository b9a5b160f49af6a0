"""A payer's envelope sent again to an `xnode run` process on real Postgres: as it was (a
client retrying a publish whose answer it lost, or a stranger replaying it), it is answered
with the envelope stored; with another retention, or beside a new envelope, it is refused.
Either way nothing is stored again and the payer is billed once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import asyncpg
import grpc
import pytest

from tests.conftest import NodeProcess, NodeSpec
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.core.sizes import DEFAULT_MAX_RETENTION_DAYS

GROUP = b"\x05" * 16
FEES = {"fee_envelope_picodollars": "1000", "fee_byte_day_picodollars": "3"}


async def usage(dsn: str, payer: SigningKey) -> tuple[int, int]:
    """(envelopes, base fees in picodollars) the node counted for the payer."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT sum(envelopes), sum(base_fee_picodollars) FROM payer_usage"
            " WHERE payer_address = $1",
            payer.address,
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row[0] or 0), int(row[1] or 0)


def with_retention(payer: envelopes_pb2.PayerEnvelope, days: int) -> envelopes_pb2.PayerEnvelope:
    """The payer's signed envelope with another retention: the signature does not cover it."""
    replay = envelopes_pb2.PayerEnvelope()
    replay.CopyFrom(payer)
    replay.message_retention_days = days
    return replay


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_replayed_payer_envelope_is_answered_as_stored_and_bills_nobody(
    tmp_path: Path, empty_database: str, spawn_node: Callable[..., NodeProcess], workers: str
) -> None:
    """With two workers, replays also come through the one that forwards its batches to the
    other's sequencer (connections of their own spread over both)."""
    spec = NodeSpec(tmp_path, {100: SigningKey.generate()})
    spec.write()
    node = spawn_node(empty_database, spec, 100, workers=workers, **FEES)
    payer = SigningKey.generate()
    signed = build_payer_envelope(
        group_message_envelope(GROUP, b"paid once"), payer, 100, retention_days=30
    )
    async with NodeClient(node.address) as attacker:
        (stored,) = await attacker.publish([signed])
        billed = await usage(empty_database, payer)
        assert billed[0] == 1 and billed[1] > 0

        for _ in range(4):
            async with NodeClient(node.address, own_connection=True) as connection:
                assert await connection.publish([signed]) == [stored]
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await connection.publish([with_retention(signed, DEFAULT_MAX_RETENTION_DAYS)])
            assert refused.value.code() is grpc.StatusCode.ALREADY_EXISTS
            assert "with other unsigned fields, such as message_retention_days" in (
                refused.value.details() or ""
            )
        # The replay that once billed 717,259,538,365 picodollars: retention 4,294,967,295
        # days is over the cap, refused before anything else.
        with pytest.raises(grpc.aio.AioRpcError) as capped:
            await attacker.publish([with_retention(signed, 2**32 - 1)])
        assert capped.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "message_retention_days is 4294967295" in (capped.value.details() or "")
        # A replay in one request with a new envelope: the request is refused whole.
        fresh = build_payer_envelope(group_message_envelope(GROUP, b"new"), payer, 100)
        with pytest.raises(grpc.aio.AioRpcError) as mixed:
            await attacker.publish([fresh, signed])
        assert mixed.value.code() is grpc.StatusCode.ALREADY_EXISTS
        assert "payer_envelopes[1] was published here already as sequence id 1" in (
            mixed.value.details() or ""
        )
        held = await attacker.query(originators=[100])
    assert len(held) == 1
    assert await usage(empty_database, payer) == billed
