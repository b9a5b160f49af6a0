"""What the dashboard reads from the node itself when it scrapes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import asyncpg

from xnode.chain.node import ChainServices
from xnode.observability.metrics import (
    ScrapedGauge,
    resident_memory,
)
from xnode.store.replica import Replica, ReplicaWatch
from xnode.tls import ServerTls, certificate_not_after
from xnode.usecases.node_state import NodeState


def node_gauges(
    state: NodeState, pool: asyncpg.Pool, chain: ChainServices | None, replica: Replica | None
) -> list[ScrapedGauge]:
    """What the dashboard reads from the node itself when it scrapes (docs/operations.md)."""

    def clock() -> list[tuple[Sequence[str], float]]:
        return [((str(o),), float(s)) for o, s in state.vector_clock().items()]

    def connections() -> list[tuple[Sequence[str], float]]:
        size = pool.get_size()
        in_use = size - pool.get_idle_size()
        return [(("in_use",), in_use), (("open",), size), (("max",), pool.get_max_size())]

    gauges = [
        ScrapedGauge(
            "xnode_vector_clock_sequence_id",
            "Highest sequence id stored, by originator (the node's vector clock)",
            ["originator"],
            clock,
        ),
        ScrapedGauge(
            "xnode_db_pool_connections",
            "Postgres connections of this process: in_use, open, max",
            ["state"],
            connections,
        ),
        ScrapedGauge("xnode_process_resident_memory_bytes", "Resident memory", [], resident_memory),
    ]
    if chain is not None:
        gauges += _chain_gauges(chain)
    if replica is not None:
        gauges += _replica_gauges(replica.watch)
    return gauges


def certificate_gauges(tls: ServerTls | None) -> list[ScrapedGauge]:
    """When the served certificate expires, read from its file at each scrape, so that a
    renewal shows at once (the alert XnodeCertificateExpiringSoon reads it)."""
    if tls is None:
        return []
    return [
        _single(
            "xnode_tls_certificate_expiry_timestamp_seconds",
            "notAfter of the certificate the ports serve (tls_cert_file), Unix time",
            lambda: certificate_not_after(tls.cert_file),
        )
    ]


def _replica_gauges(watch: ReplicaWatch) -> list[ScrapedGauge]:
    return [
        _single(
            "xnode_database_replica_lag_bytes",
            "WAL bytes the read replica has yet to replay (none while it does not answer)",
            lambda: watch.lag_bytes,
        ),
        _single(
            "xnode_database_replica_lag_seconds",
            "Age of the last transaction the read replica replayed while it trails; 0 caught up",
            lambda: watch.lag_seconds,
        ),
    ]


def _single(name: str, description: str, read: Callable[[], float | None]) -> ScrapedGauge:
    """A gauge of one unlabelled value; no sample while it is unknown."""

    def reading() -> list[tuple[Sequence[str], float]]:
        value = read()
        return [] if value is None else [((), float(value))]

    return ScrapedGauge(name, description, [], reading)


def _chain_gauges(chain: ChainServices) -> list[ScrapedGauge]:
    status = chain.indexer.status
    return [
        _single(
            "xnode_chain_index_lag_blocks",
            "Blocks the chain head is ahead of the last indexed block",
            lambda: status.lag_blocks,
        ),
        _single(
            "xnode_chain_indexed_block",
            "Last block indexed",
            lambda: status.tip_number,
        ),
        _single(
            "xnode_chain_index_step_age_seconds",
            "Seconds since the indexer last stepped successfully (grows while it is stalled)",
            status.since_step_s,
        ),
    ]
