"""Envelopes of every topic kind for export and prune tests: published through a real node's
API, or stored as if received from another originator (for timestamps in the past)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from tests.support.identity_signers import Inbox
from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient, key_package_envelope, mls_group_message
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    parse_originator_envelope,
    validate_payer_envelope,
)
from xnode.core.topics import Topic, TopicKind
from xnode.store.misbehavior import MisbehaviorStore
from xnode.store.replication import ReplicationStore

PAYER = SigningKey.generate()
_PUBLISHED = itertools.count()
NS_PER_S = 1_000_000_000
DAY_S = 86_400


def client_envelope(
    kind: TopicKind, identifier: bytes, data: bytes
) -> envelopes_pb2.ClientEnvelope:
    """A valid client envelope of `kind` on topic kind byte + `identifier` (32 bytes); for
    key packages `identifier` is the installation's Ed25519 seed (the topic is its public
    key) and `data` is not used; group messages carry `data` in an MLS PrivateMessage;
    identity updates create a new inbox (its id is the topic)."""
    if kind is TopicKind.KEY_PACKAGES:  # made at another second for each `data`
        return key_package_envelope(identifier, int(time.time()) - 60 - zlib.crc32(data) % 600)
    aad = envelopes_pb2.AuthenticatedData(target_topic=Topic(kind, identifier).raw)
    if kind is TopicKind.GROUP_MESSAGES:
        v1 = mls_pb2.GroupMessageInput.V1(data=mls_group_message(identifier, data))
        return envelopes_pb2.ClientEnvelope(aad=aad, group_message=mls_pb2.GroupMessageInput(v1=v1))
    if kind is TopicKind.WELCOME_MESSAGES:
        w1 = mls_pb2.WelcomeMessageInput.V1(installation_key=identifier, data=data)
        return envelopes_pb2.ClientEnvelope(
            aad=aad, welcome_message=mls_pb2.WelcomeMessageInput(v1=w1)
        )
    # Identity updates must apply (XIP-46): a new wallet creates a new inbox, whose id is
    # the topic; `identifier` and `data` are not used.
    inbox = Inbox()
    update = inbox.create()
    aad = envelopes_pb2.AuthenticatedData(target_topic=Topic(kind, inbox.key).raw)
    return envelopes_pb2.ClientEnvelope(aad=aad, identity_update=update)


@dataclass(frozen=True)
class Item:
    kind: TopicKind
    identifier: bytes
    data: bytes = b"payload"
    retention_days: int = 0


def group(n: int) -> bytes:
    return bytes([n]) * 32


async def publish(address: str, node_id: int, items: Sequence[Item]) -> list[bytes]:
    """Publishes through the node's API; returns the signed OriginatorEnvelopes, in order.
    Each published envelope is another (a node stores a payer envelope once): its data ends
    with a number of its own."""
    payers = [
        build_payer_envelope(
            client_envelope(i.kind, i.identifier, i.data + b"#%d" % next(_PUBLISHED)),
            PAYER,
            node_id,
            i.retention_days,
        )
        for i in items
    ]
    async with NodeClient(address) as client:
        return [e.SerializeToString() for e in await client.publish(payers)]


def received_row(
    originator: int, key: SigningKey, seq: int, originator_ns: int, item: Item
) -> IndexedEnvelope:
    """An envelope as ReplicationStore.insert_received takes it: signed by `originator` itself."""
    payer = build_payer_envelope(
        client_envelope(item.kind, item.identifier, item.data),
        PAYER,
        originator,
        item.retention_days,
    )
    valid = validate_payer_envelope(payer, originator)
    return originate(valid, originator, seq, originator_ns, key)


def chain_row(originator: int, seq: int, originator_ns: int, item: Item) -> IndexedEnvelope:
    """An envelope as the chain indexer stores it for originator 0 or 1: no payer, no expiry.
    The proof here is a signature, not a blockchain proof: only the columns matter here."""
    env = received_row(originator, SigningKey.generate(), seq, originator_ns, item)
    return dataclasses.replace(env, expiry=0, payer_address=None)


async def store_received(dsn: str, rows: Sequence[IndexedEnvelope], token: str = "test") -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await ReplicationStore(pool).insert_received(rows, token)
    finally:
        await pool.close()


async def add_reports(dsn: str, key: SigningKey, misbehaving: Sequence[int]) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        store = MisbehaviorStore(pool, key)
        for node_id in misbehaving:
            await store.add(
                mb.UnsignedMisbehaviorReport(
                    reporter_time_ns=time.time_ns(),
                    misbehaving_node_id=node_id,
                    type=mb.MISBEHAVIOR_UNRESPONSIVE_NODE,
                    liveness=mb.LivenessFailure(response_time_ns=5),
                    submitted_by_node=True,
                )
            )
    finally:
        await pool.close()


async def table_rows(dsn: str) -> dict[tuple[int, int], asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT * FROM originator_envelopes")
    finally:
        await conn.close()
    return {(r["originator_node_id"], r["originator_sequence_id"]): r for r in rows}


def sequence_ids(raw: Sequence[bytes]) -> list[int]:
    return [parse_originator_envelope(r).sequence_id for r in raw]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`xnode <args>` in a subprocess (the commands call asyncio.run themselves)."""
    return subprocess.run(
        [sys.executable, "-m", "xnode.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def run_cli_async(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run_cli, *args)


def write_plan(
    path: Path, ranges: Sequence[tuple[int, int, int]], as_of: int, **extra: Any
) -> Path:
    document = {
        "version": 1,
        "as_of_unixtime": as_of,
        "envelope_count": sum(last - first + 1 for _, first, last in ranges),
        "ranges": [
            {"originator_node_id": o, "first_sequence_id": f, "last_sequence_id": last}
            for o, f, last in ranges
        ],
        **extra,
    }
    path.write_text(json.dumps(document))
    return path
