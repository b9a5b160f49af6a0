"""What each run does: node 500 as a MisbehavingPeer while the honest nodes replicate from it,
or all five nodes honest under conditions that must convict nobody. Each play returns once
its condition holds (a report filed, everything held again) and leaves every node stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from xnode.client.node import NodeClient, group_message_envelope, key_package_envelope
from xnode.core import misbehavior
from xnode.core.constants import NS_PER_SECOND
from xnode.core.envelopes import build_payer_envelope, validate_payer_envelope
from xnode.core.mls import ContentType, WireFormat, encode_framing
from xnode.devtools.byzantine import peer
from xnode.devtools.byzantine.network import NODE_IDS, HarnessError, Network
from xnode.store.identity import claim_database
from xnode.store.migrate import upgrade_to_head
from xnode.store.sequencer import Sequencer

ACCUSED = 500
HONEST = tuple(n for n in NODE_IDS if n != ACCUSED)
DEADLINE_S = 90.0
Play = Callable[[Network], Awaitable[None]]


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise HarnessError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.3)


async def fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def reporters(network: Network, kind: int) -> set[int]:
    """The honest nodes that filed a `kind` report against the accused."""
    found = set()
    for node_id in HONEST:
        rows = await fetch(
            network.dsns[node_id],
            "SELECT 1 FROM misbehavior_reports WHERE misbehaving_node_id = $1 AND type = $2",
            ACCUSED,
            kind,
        )
        if rows:
            found.add(node_id)
    return found


async def until_reported(network: Network, kind: int, needed: int = 1) -> None:
    async def filed() -> bool:
        return len(await reporters(network, kind)) >= needed

    name = misbehavior.type_name(kind)
    await until(filed, f"{needed} honest node(s) report {name}", DEADLINE_S)


@asynccontextmanager
async def peer_and_honest_nodes(
    network: Network, behavior: peer.Script
) -> AsyncIterator[tuple[peer.MisbehavingPeer, peer.Originator]]:
    """Node 500 as a MisbehavingPeer and the honest nodes started; all stopped after."""
    originator = peer.Originator(ACCUSED, network.keys[ACCUSED])
    server = peer.MisbehavingPeer(ACCUSED, behavior(originator))
    await server.start(network.addresses[ACCUSED])
    try:
        await asyncio.to_thread(network.start, *HONEST)
        yield server, originator
    finally:
        await asyncio.to_thread(network.stop)
        await server.stop()


def misbehaving(behavior: peer.Script, kind: int, needed: int = len(HONEST)) -> Play:
    """Node 500 is a MisbehavingPeer; done once `needed` honest nodes filed `kind`."""

    async def play(network: Network) -> None:
        async with peer_and_honest_nodes(network, behavior):
            await until_reported(network, kind, needed)

    return play


async def held(network: Network, node_id: int, originator: int) -> int:
    rows = await fetch(
        network.dsns[node_id],
        "SELECT count(*) FROM originator_envelopes WHERE originator_node_id = $1",
        originator,
    )
    return int(rows[0][0])


async def everyone_holds(network: Network, originator: int, count: int) -> None:
    async def check() -> bool:
        counts = [await held(network, n, originator) for n in network.processes]
        return all(c >= count for c in counts)

    await until(check, f"every node holds {count} envelopes of {originator}", DEADLINE_S)


async def publish(network: Network, node_id: int, count: int, tag: bytes) -> None:
    payer = peer.Originator(node_id, network.keys[node_id]).payer
    payloads = [tag + b"%d" % i for i in range(count)]
    async with NodeClient(network.addresses[node_id]) as client:
        for start in range(0, count, 50):
            await client.publish_group_messages(
                payer, node_id, peer.GROUP, payloads[start : start + 50]
            )


MESSAGES = 100


async def lost_rows(network: Network) -> None:
    """Node 300 loses 5% of node 100's envelopes (their leaves stay) and fetches them again."""
    await asyncio.to_thread(network.start, *NODE_IDS)
    try:
        await publish(network, 100, MESSAGES, b"m")
        await everyone_holds(network, 100, MESSAGES)
        await fetch(
            network.dsns[300],
            "DELETE FROM originator_envelopes WHERE originator_node_id = 100"
            " AND originator_sequence_id % 20 = 7",
        )
        assert await held(network, 300, 100) < MESSAGES
        await everyone_holds(network, 100, MESSAGES)
    finally:
        await asyncio.to_thread(network.stop)


async def restored_backup(network: Network) -> None:
    """Node 300's database restored from a dump taken before half of the traffic."""
    await asyncio.to_thread(network.start, *NODE_IDS)
    try:
        await publish(network, 100, MESSAGES // 2, b"a")
        await publish(network, 300, 10, b"own")
        await everyone_holds(network, 100, MESSAGES // 2)
        dumped = await asyncio.to_thread(network.dump, 300)
        await publish(network, 100, MESSAGES // 2, b"b")
        await publish(network, 300, 10, b"own-after")
        await everyone_holds(network, 100, MESSAGES)
        await asyncio.to_thread(network.stop, 300)
        await asyncio.to_thread(network.restore, 300, dumped)
        await asyncio.to_thread(network.start, 300)
        await publish(network, 300, 5, b"own-restored")
        await everyone_holds(network, 100, MESSAGES)
        await everyone_holds(network, 300, 25)
    finally:
        await asyncio.to_thread(network.stop)


DAY_S = 86_400


async def originated_back_then(
    network: Network, node_id: int, batches: list[tuple[Any, int]]
) -> None:
    """The node's own sequencer, on its own database, signing each payload at its time (unix
    seconds): the log a node holds after running for months, or with a clock that ran
    ahead. Stamps never go back, so the node carries on from them when it starts."""
    await asyncio.to_thread(upgrade_to_head, network.dsns[node_id])
    key = network.keys[node_id]
    pool = await asyncpg.create_pool(network.dsns[node_id], min_size=1, max_size=2)
    try:
        await claim_database(pool, node_id, key.public_key)
        sequencer = Sequencer(pool, node_id, key, "byzantine-harness")
        await sequencer.prime()
        for payload, at_s in batches:
            await sequencer.append([payload], at_s * NS_PER_SECOND)
    finally:
        await pool.close()


def key_packages(
    originator: peer.Originator, made_s: int, count: int, retention_days: int
) -> list[tuple[Any, int]]:
    """Key packages made at `made_s` and originated a minute later, as accepted then."""
    batches = []
    for i in range(count):
        client = key_package_envelope(bytes([i + 1]) * 32, made_s, peer.KEY_PACKAGE_LIFETIME_S)
        payer = build_payer_envelope(client, originator.payer, originator.node_id, retention_days)
        at_s = made_s + 60 + i
        batches.append((validate_payer_envelope(payer, originator.node_id, at_s), at_s))
    return batches


def honest_history(
    history: Callable[[peer.Originator], list[tuple[Any, int]]], live: int = 10
) -> Callable[[Network], Awaitable[None]]:
    """Node 500 starts with `history` in its log and publishes `live` more; every node must
    end up holding all of it."""

    async def play(network: Network) -> None:
        originator = peer.Originator(ACCUSED, network.keys[ACCUSED])
        batches = history(originator)
        await originated_back_then(network, ACCUSED, batches)
        await asyncio.to_thread(network.start, *NODE_IDS)
        try:
            await publish(network, ACCUSED, live, b"live")
            await everyone_holds(network, ACCUSED, len(batches) + live)
        finally:
            await asyncio.to_thread(network.stop)

    return play


def days_ago(days: int, retention_days: int) -> Callable[[peer.Originator], list[tuple[Any, int]]]:
    return lambda o: key_packages(o, int(time.time()) - days * DAY_S, 5, retention_days)


def clock_ahead(minutes: int) -> Callable[[peer.Originator], list[tuple[Any, int]]]:
    def history(o: peer.Originator) -> list[tuple[Any, int]]:
        ahead_s = int(time.time()) + minutes * 60
        return [(validate_payer_envelope(p, o.node_id), ahead_s) for p in o.payer_envelopes(10)]

    return history


async def chain_payload(network: Network, node_id: int) -> bytes:
    """A chain payload (originator 0) the node indexed, with its own proof."""

    async def stored() -> list[asyncpg.Record]:
        return await fetch(
            network.dsns[node_id],
            "SELECT envelope FROM originator_envelopes WHERE originator_node_id = 0 LIMIT 1",
        )

    await until(lambda: _any(stored()), f"node {node_id} indexes a chain payload", DEADLINE_S)
    return bytes((await stored())[0][0])


async def _any(rows: Awaitable[list[asyncpg.Record]]) -> bool:
    return bool(await rows)


def false_chain_payload(kind: int) -> Play:
    """A commit goes to the chain through node 100; node 500 (a MisbehavingPeer) serves a
    chain payload it vouches for naming that transaction but carrying another message.
    `xnode watchdog --once` beside node 100 reads it and checks it against the chain."""

    async def play(network: Network) -> None:
        async with peer_and_honest_nodes(network, peer.quiet) as (server, originator):
            framed = encode_framing(WireFormat.PUBLIC_MESSAGE, peer.GROUP, 1, ContentType.COMMIT)
            payer = build_payer_envelope(
                group_message_envelope(peer.GROUP, framed), originator.payer, 100
            )
            async with NodeClient(network.addresses[100]) as client:
                await client.publish([payer])
            honest = await chain_payload(network, 100)
            server.served = [peer.false_chain_payload(originator, honest)]
            await asyncio.to_thread(network.watchdog_once, 100)
            await until_reported(network, kind)

    return play
