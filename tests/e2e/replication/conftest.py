"""A replicating network of `xnode run` processes whose registry is the NodeRegistry contract
on a real anvil, each node with its own Postgres database."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, ChainEnv, NodeProcess, NodeSpec
from xnode.chain.admin import set_node_status
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port


@dataclass
class ChainNetwork:
    chain: ChainEnv
    spec: NodeSpec
    spawn: Callable[..., NodeProcess]
    addresses: dict[int, str]
    dsns: dict[int, str]
    processes: dict[int, NodeProcess] = field(default_factory=dict)

    def env(self, **extra: Any) -> dict[str, str]:
        settings = {
            **self.chain.settings(chain_poll_seconds=0.1),
            **REPLICATION_TEST_SETTINGS,
            **extra,
        }
        return {k: str(v) for k, v in settings.items()}

    def start(self, *node_ids: int, **extra: Any) -> None:
        for node_id in node_ids:
            self.processes[node_id] = self.spawn(
                self.dsns[node_id],
                self.spec,
                node_id,
                wait=False,
                listen_address=self.addresses[node_id],
                **self.env(**extra),
            )
        for node_id in node_ids:
            if not wait_serving(self.addresses[node_id], 60):
                pytest.fail(f"node {node_id} did not start:\n{self.processes[node_id].output()}")

    def kill(self, node_id: int) -> None:
        self.processes.pop(node_id).kill()

    def set_enabled(self, node_id: int, enabled: bool) -> None:
        set_node_status(
            self.chain.w3, self.chain.owner, self.chain.contracts_file, node_id, enabled
        )

    async def vector_clock(self, node_id: int) -> dict[int, int]:
        conn = await asyncpg.connect(self.dsns[node_id])
        try:
            rows = await conn.fetch("SELECT originator_node_id, sequence_id FROM vector_clock")
        finally:
            await conn.close()
        return {r[0]: r[1] for r in rows if r[1]}

    async def envelopes(self, node_id: int, originators: Sequence[int]) -> list[bytes]:
        """Every stored envelope of these originators, in (originator, sequence id) order."""
        conn = await asyncpg.connect(self.dsns[node_id])
        try:
            rows = await conn.fetch(
                "SELECT envelope FROM originator_envelopes WHERE originator_node_id = ANY($1)"
                " ORDER BY originator_node_id, originator_sequence_id",
                list(originators),
            )
        finally:
            await conn.close()
        return [bytes(r[0]) for r in rows]


@pytest.fixture
def chain_network(
    chain_env: ChainEnv,
    pg_cluster: PgCluster,
    node_spec: NodeSpec,
    spawn_node: Callable[..., NodeProcess],
) -> ChainNetwork:
    """Nodes 100, 200, 300 registered on the chain with fixed addresses; none started."""
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    chain_env.register(node_spec, addresses)
    dsns = {}
    for node_id in node_spec.keys:
        name = f"r_{uuid.uuid4().hex[:12]}"
        pg_cluster.create_database(name)
        dsns[node_id] = pg_cluster.dsn(name)
    return ChainNetwork(chain_env, node_spec, spawn_node, addresses, dsns)
