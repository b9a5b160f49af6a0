"""A bit flipped in one node's envelope table on disk (its cluster made with data checksums,
tests/support/power_loss.py). Postgres refuses the page, so the node never serves the changed
envelope; it refuses to start, saying so (no traceback), while its peers serve everything;
once the operator drops the damaged page (docs/operations.md, "Corrupt pages") it starts,
finds the envelopes whose leaves it still holds lost, and fetches them from its peers, byte
for byte as signed; nobody is reported but the node while it was down."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import NodeProcess, NodeSpec
from tests.e2e.faults.test_power_loss import (
    BACK_WITHIN_S,
    NODES,
    Network,
    assert_nobody_convicted,
    by_sequence_id,
)
from tests.integration.export.helpers import Item, group, publish
from tests.integration.replication.test_replication import stored
from tests.support.power_loss import OwnPostgres, make_template
from tests.support.scratch import scratch_dir
from tests.support.waiting import eventually
from xnode.core.topics import TopicKind
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port

PAGE = 8192
PUBLISHED = 30  # per originator
GROUP_ITEM = Item(TopicKind.GROUP_MESSAGES, group(9))


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    root = scratch_dir("xnode-flips-template-")
    yield make_template(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def own_postgres(template: Path) -> Iterator[OwnPostgres]:
    root = scratch_dir("xnode-flips-")
    postgres = OwnPostgres(root, template, lazy=False)
    try:
        postgres.power_on()
        yield postgres
    finally:
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def network(
    pg_cluster: PgCluster,
    node_spec: NodeSpec,
    spawn_node: Callable[..., NodeProcess],
    own_postgres: OwnPostgres,
) -> Network:
    """Nodes 100 (on the test's own Postgres), 200 and 300."""
    addresses = {n: f"127.0.0.1:{free_port()}" for n in NODES}
    node_spec.write(addresses)
    dsns = {100: own_postgres.dsn}
    for n in (200, 300):
        name = f"bf_{n}_{free_port()}"
        pg_cluster.create_database(name, template="xnode_template")
        dsns[n] = pg_cluster.dsn(name)
    return Network(node_spec, spawn_node, addresses, dsns)


async def envelope_heap(dsn: str) -> Path:
    """The largest heap file of the envelope table's partitions, relative to the cluster."""
    conn = await asyncpg.connect(dsn)
    try:
        path = await conn.fetchval(
            "SELECT pg_relation_filepath(c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'originator_envelopes'::regclass"
            " ORDER BY pg_relation_size(c.oid) DESC LIMIT 1"
        )
    finally:
        await conn.close()
    return Path(path)


async def published_everywhere(network: Network) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {}
    for n in NODES:
        sent[n] = await publish(network.addresses[n], n, [GROUP_ITEM] * PUBLISHED)

    async def replicated() -> bool:
        for originator, raws in sent.items():
            for n in NODES:
                if not set(raws) <= set(await stored(network.addresses[n], originator)):
                    return False
        return True

    await eventually(replicated, within_s=120, what="every node holds every envelope")
    return sent


def flip_bit(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


async def damage_and_restart(
    network: Network, postgres: OwnPostgres, damage: Callable[[Path], None]
) -> NodeProcess:
    """Stops node 100 and its Postgres (every page written out, so the damage is what is
    read next), damages its envelope heap, and starts both again."""
    relation = await envelope_heap(postgres.dsn)
    network.processes.pop(100).terminate()
    assert postgres.cluster is not None
    postgres.cluster.stop()
    damage(postgres.backing / relation)
    postgres.power_on()
    return await asyncio.to_thread(network.start, 100, False)


async def drop_damaged_pages(dsn: str) -> None:
    """The runbook (docs/operations.md, "Corrupt pages"): the damaged pages zeroed."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET zero_damaged_pages = on")
        await conn.execute("VACUUM originator_envelopes")
    finally:
        await conn.close()


async def refused_then_healed(
    network: Network, postgres: OwnPostgres, damage: Callable[[Path], None]
) -> None:
    await asyncio.to_thread(network.start_all)
    sent = await published_everywhere(network)
    node = await damage_and_restart(network, postgres, damage)
    code = await asyncio.to_thread(node.proc.wait, 120)
    assert code == 2, f"node 100 ended with {code}:\n{node.output()[-2000:]}"
    assert "cannot start: the database holds a corrupt page" in node.output()
    assert "Traceback" not in node.output()
    for originator, raws in sent.items():  # its peers serve everything meanwhile
        for n in (200, 300):
            assert set(raws) <= set(await stored(network.addresses[n], originator))

    await drop_damaged_pages(postgres.dsn)
    await asyncio.to_thread(network.start, 100, False)
    if not await asyncio.to_thread(wait_serving, network.addresses[100], BACK_WITHIN_S):
        pytest.fail(f"node 100 did not serve again:\n{network.processes[100].output()[-3000:]}")

    async def healed() -> bool:
        for originator, raws in sent.items():
            if by_sequence_id(await stored(network.addresses[100], originator)) != (
                by_sequence_id(raws)
            ):
                return False
        return True

    await eventually(healed, within_s=120, what="node 100 holds every envelope again")
    await assert_nobody_convicted(network.dsns, down=100)


async def test_a_flipped_bit_in_an_envelope_page_refuses_the_start_and_heals_from_peers(
    network: Network, own_postgres: OwnPostgres
) -> None:
    await refused_then_healed(network, own_postgres, lambda heap: flip_bit(heap, PAGE - 300))
