"""Composition root: builds the node's parts from Settings, wires them, runs until signaled."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from xnode.api.auth import NodeAuthInterceptor
from xnode.api.misbehavior import MisbehaviorService
from xnode.api.registration import envelope_handlers, misbehavior_handlers, service_names
from xnode.api.service import EnvelopeService
from xnode.chain.node import (
    ChainConnection,
    ChainServices,
    chain_registry,
    chain_services,
    connect_chain,
)
from xnode.chain.verify import ChainSetupError
from xnode.config import Settings
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope, StoredEnvelope, ValidPayerEnvelope
from xnode.core.registry import Registry, RegistryError
from xnode.core.vector_clock import NodeClock
from xnode.observability.logging import configure_logging
from xnode.observability.metrics import observe_batch, serve_metrics
from xnode.replication.worker import ReplicationConfig, ReplicationWorker
from xnode.static_registry import StaticRegistrySource
from xnode.store.chain import ChainStore
from xnode.store.envelopes import EnvelopeStore
from xnode.store.identity import claim_database
from xnode.store.leader import LeaderLock
from xnode.store.migrate import upgrade_to_head
from xnode.store.misbehavior import MisbehaviorLog, MisbehaviorStore
from xnode.store.notifications import CommitListener
from xnode.store.replication import ReplicationStore
from xnode.store.sequencer import Sequencer
from xnode.usecases.fanout import Fanout
from xnode.usecases.originator import BatchStats, Originator
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


class StartupError(RuntimeError):
    """A configuration or environment problem that stops the node before it serves."""


def registry_source(settings: Settings) -> RegistrySource | None:
    if settings.nodes_file is None:
        return None
    try:
        return StaticRegistrySource(settings.nodes_file)
    except (OSError, ValueError, KeyError) as exc:
        raise StartupError(f"cannot read nodes file {settings.nodes_file}: {exc}") from exc


async def _connect_chain(settings: Settings) -> ChainConnection | None:
    if bool(settings.chain_rpc_url) != (settings.contracts_file is not None):
        raise StartupError("the chain needs both chain_rpc_url and contracts_file")
    if not settings.chain_enabled:
        return None
    try:
        return await connect_chain(settings)
    except ChainSetupError as exc:
        raise StartupError(str(exc)) from exc


async def open_registry(settings: Settings, chain: ChainConnection | None) -> RegistrySource | None:
    """The chain's NodeRegistry when the chain is configured (or asked for), else the file."""
    if settings.registry_source == "file" or (settings.registry_source == "auto" and chain is None):
        return registry_source(settings)
    if chain is None:
        raise StartupError("registry_source=chain needs chain_rpc_url and contracts_file")
    try:
        return await chain_registry(chain, settings)
    except ChainSetupError as exc:
        raise StartupError(str(exc)) from exc


def resolve_node_id(settings: Settings, key: SigningKey, source: RegistrySource | None) -> int:
    if source is not None:
        try:
            return source.current().resolve_self(key.public_key, settings.node_id).node_id
        except RegistryError as exc:
            raise StartupError(str(exc)) from exc
    if settings.node_id is None:
        raise StartupError("set XNODE_NODE_ID, or XNODE_NODES_FILE to find it by signer key")
    return settings.node_id


@dataclass
class Node:
    """A started node; `stop()` drains it."""

    node_id: int
    address: str
    server: grpc.aio.Server
    service: EnvelopeService
    originator: Originator
    listener: CommitListener
    pool: asyncpg.Pool
    health: health.HealthServicer
    grace_s: float
    registry: RegistrySource | None
    replication: ReplicationWorker | None = None
    chain: ChainServices | None = None

    async def stop(self) -> None:
        log.info("node_stopping", node_id=self.node_id)
        self.health.enter_graceful_shutdown()
        if self.replication is not None:
            await self.replication.stop()
        self.service.close_subscriptions()
        await self.server.stop(self.grace_s)  # in-flight publishes finish within the grace
        await self.originator.close()
        await self.listener.stop()
        if self.registry is not None:
            await self.registry.stop()
        if self.chain is not None:
            await self.chain.stop()
        await self.pool.close()
        log.info("node_stopped", node_id=self.node_id)


def _stored(envelopes: Sequence[IndexedEnvelope]) -> list[StoredEnvelope]:
    return [
        StoredEnvelope(e.originator_node_id, e.sequence_id, e.topic, e.raw, e.expiry)
        for e in envelopes
    ]


def _tops(envelopes: Sequence[StoredEnvelope]) -> dict[int, int]:
    tops: dict[int, int] = {}
    for e in envelopes:
        tops[e.originator_node_id] = max(e.sequence_id, tops.get(e.originator_node_id, 0))
    return tops


async def start_node(settings: Settings) -> Node:
    try:
        key = settings.signing_key()
    except (OSError, ValueError) as exc:
        raise StartupError(f"signer key: {exc}") from exc
    chain = await _connect_chain(settings)
    try:
        registry = await open_registry(settings, chain)
        node_id = resolve_node_id(settings, key, registry)
    except BaseException:
        if chain is not None:
            await chain.close()
        raise
    if settings.migrate_on_start:
        await asyncio.to_thread(upgrade_to_head, settings.database_dsn)
    pool = await asyncpg.create_pool(
        settings.database_dsn,
        min_size=2,
        max_size=settings.db_pool_size,
        # Our queries are short index scans; JIT compiling them costs ~10 ms each time the
        # planner's estimate crosses jit_above_cost.
        server_settings={"jit": "off"},
    )
    await claim_database(pool, node_id, key.public_key)
    store = EnvelopeStore(pool)
    clock = NodeClock(await store.vector_clock())
    fanout = Fanout(store.originator_range, clock.value)
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    sequencer = Sequencer(pool, node_id, key, token)
    await sequencer.prime()

    async def append(batch: Sequence[ValidPayerEnvelope]) -> list[IndexedEnvelope]:
        return await sequencer.append(batch, time.time_ns())

    async def committed(envelopes: list[IndexedEnvelope]) -> None:
        clock.merge({node_id: envelopes[-1].sequence_id})
        await fanout.committed(_stored(envelopes))

    async def foreign_commit(tops: dict[int, int]) -> None:
        clock.merge(tops)
        await fanout.caught_up_to(tops)

    async def replicated(envelopes: list[StoredEnvelope]) -> None:
        clock.merge(_tops(envelopes))
        await fanout.committed(envelopes)

    async def chain_rewound(tops: dict[int, int]) -> None:
        clock.rewind(tops)
        await fanout.rewind(tops)

    chain_parts = None
    if chain is not None:
        chain_parts = chain_services(
            chain,
            settings,
            ChainStore(pool, token),
            LeaderLock(settings.database_dsn),
            key,
            replicated,
            chain_rewound,
            lambda: clock.value,
        )
        try:
            await chain_parts.start()
        except ChainSetupError as exc:
            await chain.close()
            raise StartupError(str(exc)) from exc
    originator = Originator(
        append, committed, settings.max_batch, BatchStats(on_batch=[observe_batch])
    )
    originator.start()
    if registry is not None:
        await registry.start()
    listener = CommitListener(settings.database_dsn, token, foreign_commit)
    listener.start()
    service = EnvelopeService(
        node_id,
        store,
        originator,
        fanout,
        clock,
        keepalive_s=settings.keepalive_seconds,
        chain_publisher=chain_parts.publisher if chain_parts else None,
        inbox_resolver=chain_parts.store if chain_parts else None,
    )
    reports = MisbehaviorStore(pool, key)
    auth = NodeAuthInterceptor(
        node_id, lambda: registry.current() if registry else Registry([]), lambda: clock.value
    )
    server, health_servicer, address = _grpc_server(
        settings, service, MisbehaviorService(reports), auth
    )
    await server.start()
    replication = None
    if registry is not None:
        replication = ReplicationWorker(
            node_id,
            key,
            registry,
            ReplicationStore(pool),
            MisbehaviorLog(reports),
            replicated,
            token,
            ReplicationConfig.from_settings(settings),
        )
        await replication.start()
    if settings.metrics_address:
        serve_metrics(settings.metrics_address)
    log.info(
        "node_listening",
        node_id=node_id,
        address=address,
        metrics=settings.metrics_address or None,
        public_key="0x" + key.public_key.hex(),
        vector_clock=clock.value.to_dict(),
    )
    return Node(
        node_id,
        address,
        server,
        service,
        originator,
        listener,
        pool,
        health_servicer,
        settings.shutdown_grace_seconds,
        registry,
        replication,
        chain_parts,
    )


def _grpc_server(
    settings: Settings,
    service: EnvelopeService,
    misbehavior: MisbehaviorService,
    auth: NodeAuthInterceptor,
) -> tuple[grpc.aio.Server, health.HealthServicer, str]:
    limit = settings.max_message_mib * 1024 * 1024
    server = grpc.aio.server(
        interceptors=[auth],
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
    )
    server.add_generic_rpc_handlers(envelope_handlers(service))
    server.add_generic_rpc_handlers([misbehavior_handlers(misbehavior)])
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = service_names()
    for name in ["", *names]:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    port = server.add_insecure_port(settings.listen_address)
    if port == 0:
        raise StartupError(f"cannot listen on {settings.listen_address}")
    host = settings.listen_address.rpartition(":")[0]
    return server, health_servicer, f"{host}:{port}"


async def run(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    node = await start_node(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.stop()
