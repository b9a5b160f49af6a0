"""Composition root: builds the node's parts from Settings, wires them, runs until signaled."""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import grpc
import structlog
from grpc_health.v1 import health

from xnode.api.auth import PROTECTED_METHODS, Interceptor, NodeAuthInterceptor
from xnode.api.calls import CallsPerCallerInterceptor
from xnode.api.completeness import SERVICE_NAME as COMPLETENESS_SERVICE
from xnode.api.completeness import CompletenessService, add_completeness_service
from xnode.api.fees import SERVICE_NAME as FEES_SERVICE
from xnode.api.fees import FeesService
from xnode.api.forks import SERVICE_NAME as FORK_SERVICE
from xnode.api.forks import ForkService, add_fork_service
from xnode.api.health import GrpcHealthBoard, health_dependencies
from xnode.api.http import NODE_JSON_ROUTES, HttpApi, health_handler, methods_of
from xnode.api.limited import LimitsInterceptor
from xnode.api.logs import SERVICE_NAME as LOG_SERVICE
from xnode.api.logs import LogService, add_log_service
from xnode.api.misbehavior import MisbehaviorService
from xnode.api.proxies import ClientAddresses
from xnode.api.registration import envelope_handlers, misbehavior_handlers, service_names
from xnode.api.service import EnvelopeService
from xnode.api.withholding import SERVICE_NAME as HOLDINGS_SERVICE
from xnode.api.withholding import HoldingsService, add_holdings_service
from xnode.chain.node import (
    ChainServices,
    chain_services,
)
from xnode.chain.receipts import Transactions
from xnode.chain.verify import ChainSetupError
from xnode.chain.wallets import Erc1271Wallets
from xnode.config import Settings
from xnode.core.clock import SYSTEM_CLOCK
from xnode.core.crypto import SigningKey
from xnode.core.registry import Registry
from xnode.observability.logging import configure_logging
from xnode.observability.outage import DatabaseOutage
from xnode.replication.chain_copies import PeerChainCopies
from xnode.replication.ports import MisbehaviorRecorder
from xnode.replication.scrub import ScrubRefused
from xnode.replication.unfiled import UnfiledReports
from xnode.replication.worker import ReplicationConfig, ReplicationWorker
from xnode.runtime import crypto_threads
from xnode.runtime.forwarding import ForwardingOriginator
from xnode.server.bootstrap import (
    NodeTls,
    StartupError,
    node_key,
    open_chain,
    open_database,
    open_registry,
    open_replica,
    resolve_node_id,
    settle_heap,
    signing_process,
    skip_final_collection,
)
from xnode.server.commits import OtherWorkersCommits, start_originator
from xnode.server.gauges import certificate_gauges, node_gauges
from xnode.server.replication import replication_worker
from xnode.server.roles import SOLE, WorkerRole
from xnode.server.serving import (
    GrpcServing,
    NodeHealth,
    add_health_and_reflection,
    bind,
    grpc_server,
    metrics_tls,
    serve_http_on,
    serve_metrics_on,
    until_signaled,
    warn_if_plaintext,
)
from xnode.server.stops import Phase, Stops
from xnode.store.chain import ChainStore
from xnode.store.envelopes import EnvelopeStore
from xnode.store.forks import ForkStore
from xnode.store.leader import LeaderLock
from xnode.store.limits import SharedBuckets
from xnode.store.logs import LogStore
from xnode.store.misbehavior import MisbehaviorLog, MisbehaviorStore
from xnode.store.notifications import CommitListener
from xnode.store.partitions import EnvelopePartitions
from xnode.store.primary import Database
from xnode.store.probe import PostgresProbe
from xnode.store.prune import ScheduledPlan
from xnode.store.replica import Replica
from xnode.store.scrub import ScrubStore
from xnode.store.subscription_slots import SharedSubscriptionSlots
from xnode.store.topics import TopicStore
from xnode.tls import ServerTls
from xnode.usecases.admission import Admission
from xnode.usecases.completeness import CompletenessAnswers
from xnode.usecases.health import DATABASE, HealthMonitor
from xnode.usecases.holdings import Holdings
from xnode.usecases.identity import IdentityUpdates
from xnode.usecases.limits import ApiLimits
from xnode.usecases.logs import LogQueries
from xnode.usecases.node_state import NodeState
from xnode.usecases.originator import Originator
from xnode.usecases.ports import AnswerReader
from xnode.usecases.publish import Publish
from xnode.usecases.query import Query
from xnode.usecases.reads import RoutedReads, for_catch_up, for_queries
from xnode.usecases.registry_source import RegistrySource
from xnode.usecases.retention import RetentionSchedule
from xnode.usecases.subscribe import Subscribe
from xnode_api.fees.v1 import fees_pb2_grpc

log = structlog.get_logger(__name__)


@dataclass
class Node:
    """A started node; `stop()` drains it: every part started registered its stop step in
    `stops`, which runs them in the one stop order (xnode.server.stops.STOP_ORDER)."""

    node_id: int
    address: str
    state: NodeState
    pool: asyncpg.Pool
    registry: RegistrySource | None
    replication: ReplicationWorker | None
    chain: ChainServices | None
    health: HealthMonitor
    stops: Stops
    http_address: str | None = None  # gRPC-web and JSON, when http_listen_address is set
    metrics_address: str | None = None  # as bound, when metrics_address is set

    async def stop(self) -> None:
        log.info("node_stopping", node_id=self.node_id)
        await self.stops.run()
        log.info("node_stopped", node_id=self.node_id)


_NO_REGISTRY = Registry([])


def _no_registry() -> Registry:
    return _NO_REGISTRY


async def start_node(settings: Settings, role: WorkerRole = SOLE) -> Node:
    """Starts every part of the node (or of one of its worker processes: `role`); when a step
    fails, what started before it is released (connections closed, tasks ended, ports freed)
    before the error propagates."""
    key, settings = node_key(settings)
    tls = NodeTls.from_settings(settings)
    # Each stop step under a deadline: one that hangs is logged with the stacks of the tasks
    # it waits on and forced, so a node's stop always ends.
    stops = Stops(settings.shutdown_grace_seconds + settings.stop_step_seconds)
    try:
        node = await _start(settings, key, tls, stops, role)
    except BaseException:
        await stops.run()
        raise
    warn_if_plaintext(tls.served, node.address, node.http_address, node.metrics_address)
    log.info(
        "node_listening",
        node_id=node.node_id,
        address=node.address,
        metrics=settings.metrics_address or None,
        public_key="0x" + key.public_key.hex(),
        vector_clock=node.state.vector_clock().to_dict(),
    )
    return node


async def _start(
    settings: Settings, key: SigningKey, tls: NodeTls, stops: Stops, role: WorkerRole
) -> Node:
    crypto_threads.configure(settings.crypto_thread_count(), await signing_process(role, stops))
    chain = await open_chain(settings, stops)
    registry = await open_registry(settings, chain)
    node_id = resolve_node_id(settings, key, registry)
    database = Database(settings.database_dsn, settings.database_connect_timeout_seconds)
    outage = DatabaseOutage(lambda: database.primary_host)
    pool = await open_database(settings, database, node_id, key, stops)
    store = EnvelopeStore(pool)
    state = NodeState(
        node_id,
        await store.vector_clock(),
        store.originator_range,
        batch_interval_s=settings.subscription_batch_seconds,
    )
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logs = LogStore(pool)
    chain_parts = None
    chain_store = ChainStore(pool, token) if chain is not None else None
    wallets = Erc1271Wallets(chain.rpc, chain.contracts.chain_id) if chain is not None else None
    identity = IdentityUpdates(store, wallets, chain_store)
    if chain is not None and chain_store is not None:
        chain_parts = chain_services(
            chain,
            settings,
            chain_store,
            LeaderLock(database.connect),
            key,
            state.stored,
            _forgetting(identity, state.rewound),
            state.vector_clock,
            _chain_vouchers(settings, registry, tls, stops),
        )
        await _start_chain(chain_parts, stops)
    if registry is not None:
        stops.add(Phase.REGISTRY, registry.stop)
        await registry.start()
    reports = MisbehaviorStore(pool, key)
    recorder: MisbehaviorRecorder = (
        UnfiledReports() if settings.read_only else MisbehaviorLog(reports)
    )
    replication = None
    if registry is not None and role.primary:
        own_store = PostgresProbe(database.connect)  # its own connection, not the monitor's
        stops.add_sync(Phase.PEERS, own_store.close)
        replication = replication_worker(
            settings, key, registry, pool, recorder, state, token, tls, logs, own_store, outage
        )
        stops.add(Phase.PEERS, replication.stop, "ReplicationWorker.stop", replication.force_stop)
        stops.add_sync(Phase.HEALTH, replication.stop_judging)
    originator = None
    elsewhere = state.committed_elsewhere
    if not settings.read_only:  # a read-only node signs no envelopes and no checkpoints
        originator, sequencer, issuer = await start_originator(
            settings, key, pool, replication, state, token, stops, role, outage
        )
        if role.shares_ports:
            elsewhere = OtherWorkersCommits(state, issuer, sequencer)
    listener = CommitListener(database.connect, token, elsewhere, outage)
    stops.add(Phase.COMMITS, listener.stop)
    listener.start()
    replica = await open_replica(settings, pool, stops)
    if role.primary:
        await _start_retention(settings, pool, stops)
    holdings = (
        Holdings(
            node_id,
            key,
            ScrubStore(pool),
            logs,
            budget=settings.size_caps().answer_budget_bytes,
        )
        if logs is not None and not settings.read_only
        else None
    )
    parts = NodeParts(
        store,
        state,
        originator,
        reports,
        registry,
        chain_parts,
        database,
        outage,
        logs,
        identity,
        replica,
        holdings,
        CompletenessAnswers(
            node_id,
            key,
            TopicStore(pool),
            budget_bytes=settings.size_caps().answer_budget_bytes,
        )
        if logs is not None
        else None,
    )
    served = await _serve(settings, node_id, parts, tls.served, stops, role)
    if replication is not None:
        try:
            await replication.start()
        except ScrubRefused as exc:
            raise StartupError(str(exc)) from None
    stops.add(Phase.HEALTH, served.health.drain)
    return Node(
        node_id,
        served.address,
        state,
        pool,
        registry,
        replication,
        chain_parts,
        served.health.monitor,
        stops,
        http_address=served.http_address,
        metrics_address=served.metrics_address,
    )


def _forgetting(
    identity: IdentityUpdates, rewound: Callable[[dict[int, int]], Awaitable[None]]
) -> Callable[[dict[int, int]], Awaitable[None]]:
    """A chain re-org removed identity updates: replayed association states start over."""

    async def on_rewound(tops: dict[int, int]) -> None:
        identity.forget()
        await rewound(tops)

    return on_rewound


def _chain_vouchers(
    settings: Settings, registry: RegistrySource | None, tls: NodeTls, stops: Stops
) -> PeerChainCopies | None:
    """A read-only node serves registered nodes' proofs of the chain payloads it indexes
    (its own key is in no registry, and clients check the proof's signer against it)."""
    if not settings.read_only or registry is None:
        return None
    copies = PeerChainCopies(registry, ReplicationConfig.from_settings(settings, tls.peers))
    stops.add(Phase.CHAIN, copies.close)
    return copies


async def _start_chain(parts: ChainServices, stops: Stops) -> None:
    stops.add(Phase.CHAIN, parts.stop)
    try:
        await parts.start()
    except ChainSetupError as exc:
        raise StartupError(str(exc)) from exc


@dataclass(frozen=True)
class NodeParts:
    """What the servicers are built from."""

    store: EnvelopeStore
    state: NodeState
    originator: Originator | ForwardingOriginator | None  # None: a read-only node
    reports: MisbehaviorStore
    registry: RegistrySource | None
    chain: ChainServices | None
    database: Database  # how dedicated connections find the primary
    outage: DatabaseOutage  # the database lost and back, logged once
    logs: LogStore | None = None
    identity: IdentityUpdates | None = None
    replica: Replica | None = None  # reads for queries and catch-up, when configured
    holdings: Holdings | None = None  # an originator's signed account of its own log
    completeness: CompletenessAnswers | None = None  # proven answers of topics per originator


@dataclass(frozen=True)
class Served:
    """Where the node listens, as bound, and its health."""

    address: str
    http_address: str | None
    metrics_address: str | None
    health: NodeHealth


async def _serve(
    settings: Settings,
    node_id: int,
    parts: NodeParts,
    tls: ServerTls | None,
    stops: Stops,
    role: WorkerRole,
) -> Served:
    """Metrics, then the gRPC server with its health following the dependencies."""
    chain, store = parts.chain, parts.store
    gauges = node_gauges(parts.state, store.pool, chain, parts.replica) + certificate_gauges(tls)
    served_tls = None if role.shares_ports else metrics_tls(tls)  # loopback, for the merge
    metrics_address = serve_metrics_on(settings.metrics_address, node_id, gauges, served_tls, stops)
    slots = SharedSubscriptionSlots(parts.store.pool)
    stops.add(Phase.LISTENERS, slots.close)
    limits = ApiLimits(settings.limit_policy(), SharedBuckets(parts.store.pool), slots)
    catch_up: AnswerReader = store
    queried: AnswerReader = store
    if parts.replica is not None:
        replica, watch = parts.replica.store, parts.replica.watch
        catch_up = RoutedReads(store, replica, watch, for_catch_up(parts.state.vector_clock))
        queried = RoutedReads(store, replica, watch, for_queries)
    subscribe = Subscribe(
        catch_up,
        parts.state.fanout,
        keepalive_s=settings.keepalive_seconds,
        limits=limits,
        max_lag_s=settings.subscription_max_lag_seconds,
        budget=settings.size_caps().answer_budget_bytes,
    )
    admission = Admission()
    publish = Publish(
        node_id,
        parts.state.clock,
        store,
        parts.originator,
        chain.publisher if chain else None,
        admission=admission,
        limits=limits,
        identity=parts.identity,
        crypto=crypto_threads.THREADS,
        sizes=settings.size_caps(),
    )
    registry = parts.registry
    current_registry = registry.current if registry else _no_registry
    auth = NodeAuthInterceptor(
        node_id,
        current_registry,
        parts.state.vector_clock,
        read_only_peers=settings.accept_read_only_peers,
        addresses=ClientAddresses(settings.proxies_trusted()),
    )
    logs = None
    end_streams = [subscribe.close_all]
    if parts.logs is not None:
        queries = LogQueries(
            parts.logs, min(1.0, settings.log_checkpoint_seconds), settings.keepalive_seconds
        )
        logs = LogService(queries)
        end_streams.append(queries.close_all)
    sizes = settings.size_caps()
    query = Query(
        queried, chain.store if chain else None, limits, parts.identity, sizes.answer_budget_bytes
    )
    service = EnvelopeService(publish, query, subscribe, auth.caller, sizes.message_bytes)
    transactions = Transactions(chain.connection.rpc, chain.connection.contracts) if chain else None
    misbehavior = MisbehaviorService(
        parts.reports,
        lambda: current_registry().keys(),
        limits,
        auth.caller,
        transactions,
        sizes,
    )
    extensions = [LOG_SERVICE, HOLDINGS_SERVICE, FORK_SERVICE, FEES_SERVICE, COMPLETENESS_SERVICE]
    limited = LimitsInterceptor(limits, auth.caller, extensions, parts.outage)
    connections = settings.connection_limits()
    interceptors: list[Interceptor] = [auth, limited]
    if settings.limits_enabled:  # off: nothing limits a caller (benchmarks of one client)
        calls = CallsPerCallerInterceptor(connections.grpc_calls_per_ip, auth.caller)
        interceptors.insert(0, calls)
    server = grpc_server(settings.max_message_mib, interceptors, role.shares_ports, connections)
    fees = FeesService(node_id, settings.fee_schedule())
    health_servicer = _add_node_services(server, service, misbehavior, fees, logs, parts)
    address = bind(server, settings.listen_address, tls)
    serving = GrpcServing(server, end_streams, admission, settings.shutdown_grace_seconds)
    serving.stop_with(stops)
    handlers = [
        *envelope_handlers(service, parts.outage),
        misbehavior_handlers(misbehavior, parts.outage),
    ]
    api = HttpApi(
        methods_of([*handlers, health_handler(health_servicer)], excluded=PROTECTED_METHODS),
        NODE_JSON_ROUTES,
        settings.cors_origins,
        settings.max_message_mib * 1024 * 1024,
    )
    grace_s = settings.shutdown_grace_seconds
    listen = settings.http_listen_address
    http_address = await serve_http_on(
        listen, api, grace_s, tls, stops, role.shares_ports, connections
    )
    probe = PostgresProbe(parts.database.connect)
    stops.add_sync(Phase.HEALTH, probe.close)
    dependencies = health_dependencies(chain is not None)
    dependencies[LOG_SERVICE] = dependencies["query"]  # the database
    dependencies[COMPLETENESS_SERVICE] = dependencies["query"]
    monitor = HealthMonitor(
        GrpcHealthBoard(health_servicer),
        {**dependencies, FORK_SERVICE: frozenset({DATABASE})},
        probe,
        parts.outage,
        chain,
    )
    stops.add(Phase.HEALTH, monitor.stop)
    await monitor.start()
    await serving.start()
    return Served(address, http_address, metrics_address, NodeHealth(monitor, health_servicer))


def _add_node_services(
    server: grpc.aio.Server,
    service: EnvelopeService,
    misbehavior: MisbehaviorService,
    fees: FeesService,
    logs: LogService | None,
    parts: NodeParts,
) -> health.HealthServicer:
    outage = parts.outage
    server.add_generic_rpc_handlers(envelope_handlers(service, outage))
    server.add_generic_rpc_handlers([misbehavior_handlers(misbehavior, outage)])
    names = [*service_names(), FORK_SERVICE, FEES_SERVICE]
    if logs is not None:
        add_log_service(logs, server, outage)
        names.append(LOG_SERVICE)
    if parts.holdings is not None:
        add_holdings_service(HoldingsService(parts.holdings, outage), server)
        names.append(HOLDINGS_SERVICE)
    if parts.completeness is not None:
        add_completeness_service(CompletenessService(parts.completeness), server, outage)
        names.append(COMPLETENESS_SERVICE)
    add_fork_service(ForkService(ForkStore(parts.store.pool)), server, outage)
    fees_pb2_grpc.add_FeesApiServicer_to_server(fees, server)
    return add_health_and_reflection(server, names)


async def _start_retention(settings: Settings, pool: asyncpg.Pool, stops: Stops) -> None:
    """The first run before serving (a node that was down a while catches up), then on the
    schedule; processes and nodes sharing the database take turns by an advisory lock."""
    if settings.retention_seconds <= 0:
        return
    plan_file = settings.retention_plan_file
    retention = RetentionSchedule(
        EnvelopePartitions(pool),
        SYSTEM_CLOCK,
        settings.retention_seconds,
        settings.retention_partitions_ahead_days,
        settings.retention_partition_days,
        None if plan_file is None else ScheduledPlan(pool, plan_file),
    )
    await retention.run_logged()
    stops.add(Phase.MAINTENANCE, retention.stop)
    retention.start()


async def run(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    node = await start_node(settings)
    settle_heap()
    await until_signaled()
    await node.stop()
    skip_final_collection()
