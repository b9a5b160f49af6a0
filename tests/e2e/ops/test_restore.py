"""A node restored from an older backup of its database does not sign a sequence id twice
(issue 13): at start-up it takes back from its peers the envelopes it signed after the backup,
and sequences past them."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, NodeProcess, NodeSpec
from tests.support.waiting import eventually
from xnode.client.node import NodeClient
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port

A, B = 100, 200
PAYER = SigningKey.generate()
GROUP = bytes([7]) * 16


def two_nodes(directory: Path) -> tuple[NodeSpec, dict[int, str]]:
    spec = NodeSpec(directory, {A: SigningKey.generate(), B: SigningKey.generate()})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in spec.keys}
    spec.write(addresses)
    return spec, addresses


def start(
    spawn: Callable[..., NodeProcess], dsn: str, spec: NodeSpec, node_id: int, address: str
) -> NodeProcess:
    """`xnode run` listening on the address the registry gives it."""
    extra = {k: str(v) for k, v in REPLICATION_TEST_SETTINGS.items()}
    node = spawn(dsn, spec, node_id, wait=False, listen_address=address, **extra)
    if not wait_serving(address, 60):
        pytest.fail(f"node {node_id} did not start:\n{node.output()[-3000:]}")
    return node


async def log_of(dsn: str, originator: int) -> dict[int, bytes]:
    """Every stored envelope of `originator`, by sequence id."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT originator_sequence_id, envelope FROM originator_envelopes"
            " WHERE originator_node_id = $1",
            originator,
        )
    finally:
        await conn.close()
    return {r[0]: bytes(r[1]) for r in rows}


async def publish(address: str, payloads: list[bytes]) -> list[int]:
    """The sequence ids the node gave these publishes."""
    async with NodeClient(address) as client:
        got = await client.publish_group_messages(PAYER, A, GROUP, payloads)
    return [parse_originator_envelope(e.SerializeToString()).sequence_id for e in got]


async def holds(dsn: str, count: int) -> None:
    async def check() -> bool:
        return len(await log_of(dsn, A)) == count

    await eventually(check)


def events(node: NodeProcess, name: str) -> list[dict[str, object]]:
    found = []
    for line in node.output().splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            found.append(json.loads(line))
    return [e for e in found if e.get("event") == name]


def dump(cluster: PgCluster, dsn: str, out: Path) -> None:
    subprocess.run(["pg_dump", "-Fc", "-f", str(out), dsn], check=True, capture_output=True)


def restore(cluster: PgCluster, dumped: Path) -> str:
    """A fresh database with the dump restored into it."""
    name = f"restored_{uuid.uuid4().hex[:8]}"
    cluster.create_database(name)
    dsn = cluster.dsn(name)
    subprocess.run(
        ["pg_restore", "--no-owner", "-d", dsn, str(dumped)], check=True, capture_output=True
    )
    return dsn


async def test_node_restored_from_an_older_dump_never_signs_a_sequence_id_twice(
    tmp_path: Path,
    pg_cluster: PgCluster,
    new_database: Callable[[], str],
    spawn_node: Callable[..., NodeProcess],
) -> None:
    spec, addresses = two_nodes(tmp_path)
    dsn_a, dsn_b = new_database(), new_database()
    node_a = start(spawn_node, dsn_a, spec, A, addresses[A])
    start(spawn_node, dsn_b, spec, B, addresses[B])

    assert await publish(addresses[A], [b"m%d" % i for i in range(10)]) == list(range(1, 11))
    dumped = tmp_path / "a.dump"
    dump(pg_cluster, dsn_a, dumped)  # the backup: A's log up to 10
    assert await publish(addresses[A], [b"m%d" % i for i in range(10, 20)]) == list(range(11, 21))
    await holds(dsn_b, 20)
    assert node_a.terminate() == 0

    restored = restore(pg_cluster, dumped)
    assert set(await log_of(restored, A)) == set(range(1, 11))
    node_a = start(spawn_node, restored, spec, A, addresses[A])
    assert await publish(addresses[A], [b"n%d" % i for i in range(5)]) == list(range(21, 26))

    [recovered] = events(node_a, "own_log_recovered")
    assert (recovered["local_top"], recovered["peer_top"]) == (10, 20)
    await holds(dsn_b, 25)
    on_a, on_b = await log_of(restored, A), await log_of(dsn_b, A)
    assert set(on_a) == set(on_b) == set(range(1, 26))
    assert on_a == on_b  # one envelope per (originator, sequence id), wherever it is stored
    for dsn in (restored, dsn_b):  # and nobody saw an equivocation of A's
        conn = await asyncpg.connect(dsn)
        try:
            safety = await conn.fetchval(
                "SELECT count(*) FROM misbehavior_reports WHERE type = ANY($1)",
                list(misbehavior.SAFETY_TYPES),
            )
        finally:
            await conn.close()
        assert safety == 0


async def test_node_whose_peers_cannot_be_asked_starts_with_a_loud_warning(
    tmp_path: Path,
    new_database: Callable[[], str],
    spawn_node: Callable[..., NodeProcess],
) -> None:
    spec, addresses = two_nodes(tmp_path)  # B is never started
    node_a = start(spawn_node, new_database(), spec, A, addresses[A])
    assert await publish(addresses[A], [b"x"]) == [1]

    [warning] = events(node_a, "own_log_unverified")
    assert warning["level"] == "warning"
    assert list(warning["failed"]) == [str(B)]  # type: ignore[call-overload]
