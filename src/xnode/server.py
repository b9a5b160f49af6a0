"""Composition root: builds the node's parts from Settings, wires them, runs until signaled."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pydantic import SecretStr

from xnode.api.auth import PROTECTED_METHODS, NodeAuthInterceptor
from xnode.api.fees import SERVICE_NAME as FEES_SERVICE
from xnode.api.fees import FeesService
from xnode.api.forks import SERVICE_NAME as FORK_SERVICE
from xnode.api.forks import ForkService, add_fork_service
from xnode.api.health import GrpcHealthBoard, health_dependencies
from xnode.api.http import NODE_JSON_ROUTES, HttpApi, health_handler, methods_of, serve_http
from xnode.api.logs import SERVICE_NAME as LOG_SERVICE
from xnode.api.logs import LogService, add_log_service
from xnode.api.misbehavior import MisbehaviorService
from xnode.api.registration import envelope_handlers, misbehavior_handlers, service_names
from xnode.api.service import EnvelopeService
from xnode.api.withholding import SERVICE_NAME as HOLDINGS_SERVICE
from xnode.api.withholding import HoldingsService, add_holdings_service
from xnode.chain.node import (
    ChainConnection,
    ChainServices,
    chain_registry,
    chain_services,
    connect_chain,
)
from xnode.chain.receipts import Transactions
from xnode.chain.verify import ChainSetupError
from xnode.chain.wallets import Erc1271Wallets
from xnode.config import Settings
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey, address_of
from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.fees import Pricing
from xnode.core.registry import Registry, RegistryError
from xnode.observability.logging import configure_logging
from xnode.observability.metrics import (
    MetricsTls,
    Reading,
    ScrapedGauge,
    observe_batch,
    resident_memory,
    serve_metrics,
)
from xnode.replication.chain_copies import PeerChainCopies
from xnode.replication.ingest import BulkVerifiers, start_bulk
from xnode.replication.ports import MisbehaviorRecorder
from xnode.replication.unfiled import UnfiledReports
from xnode.replication.worker import ReplicationConfig, ReplicationWorker
from xnode.runtime import crypto_threads
from xnode.runtime.forwarding import ForwardingOriginator, SequencerLink
from xnode.static_registry import StaticRegistrySource
from xnode.store.chain import ChainStore
from xnode.store.envelopes import EnvelopeStore
from xnode.store.forks import ForkStore
from xnode.store.identity import claim_database
from xnode.store.leader import LeaderLock
from xnode.store.limits import SharedBuckets
from xnode.store.logs import LogStore
from xnode.store.migrate import upgrade_to_head
from xnode.store.misbehavior import MisbehaviorLog, MisbehaviorStore
from xnode.store.notifications import CommitListener
from xnode.store.partitions import EnvelopePartitions
from xnode.store.primary import Connect, Database
from xnode.store.probe import PostgresProbe
from xnode.store.prune import ScheduledPlan
from xnode.store.replica import Replica, ReplicaWatch
from xnode.store.replication import ReplicationStore
from xnode.store.scrub import ScrubStore
from xnode.store.sequencer import Sequencer
from xnode.store.subscription_slots import SharedSubscriptionSlots
from xnode.tls import ClientTls, ServerTls, TlsConfigError
from xnode.usecases.admission import Admission
from xnode.usecases.concurrency import StopSteps
from xnode.usecases.health import DATABASE, HealthMonitor
from xnode.usecases.holdings import Holdings
from xnode.usecases.identity import IdentityUpdates
from xnode.usecases.limits import ApiLimits
from xnode.usecases.logs import CheckpointIntake, CheckpointIssuer, LogQueries
from xnode.usecases.node_state import NodeState
from xnode.usecases.originator import BatchStats, Originator
from xnode.usecases.ports import EnvelopeReader
from xnode.usecases.publish import Publish
from xnode.usecases.query import Query
from xnode.usecases.reads import RoutedReads, for_catch_up, for_queries
from xnode.usecases.registry_source import RegistrySource
from xnode.usecases.retention import RetentionSchedule
from xnode.usecases.subscribe import Subscribe
from xnode_api.fees.v1 import fees_pb2_grpc

log = structlog.get_logger(__name__)

# A read-only node (XIP-49 3.4) has no registry entry; it goes by this id where one is needed
# (its metrics, the audience its replication streams would need, which no peer issues).
READ_ONLY_NODE_ID = 0


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
    if settings.read_only:
        if source is None:
            raise StartupError(
                "a read-only node replicates from the registry's nodes: set XNODE_NODES_FILE "
                "or the chain (XNODE_CHAIN_RPC_URL and XNODE_CONTRACTS_FILE)"
            )
        return READ_ONLY_NODE_ID
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
    """A started node; `stop()` drains it: every part started registered its own cleanup
    in `cleanup`, which runs them in reverse start order (the drain order)."""

    node_id: int
    address: str
    state: NodeState
    pool: asyncpg.Pool
    registry: RegistrySource | None
    replication: ReplicationWorker | None
    chain: ChainServices | None
    health: HealthMonitor
    cleanup: AsyncExitStack = field(default_factory=AsyncExitStack)
    http_address: str | None = None  # gRPC-web and JSON, when http_listen_address is set
    metrics_address: str | None = None  # as bound, when metrics_address is set

    async def stop(self) -> None:
        log.info("node_stopping", node_id=self.node_id)
        await self.cleanup.aclose()
        log.info("node_stopped", node_id=self.node_id)


@dataclass
class TimedAppend:
    """The originator's Append: the sequencer stamps each batch with the wall clock."""

    sequencer: Sequencer
    clock: Clock = SYSTEM_CLOCK

    async def __call__(self, batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        return await self.sequencer.append(batch, self.clock.now_ns())


@dataclass
class CheckpointedCommit:
    """The originator's Committed: the node state, and the count the checkpoint issuer keeps."""

    state: NodeState
    issuer: CheckpointIssuer

    async def __call__(self, envelopes: list[IndexedEnvelope]) -> None:
        self.issuer.committed(len(envelopes))
        await self.state.originated(envelopes)


@dataclass(frozen=True)
class WorkerRole:
    """Which of the node's serving processes this is (xnode.workers). The first (index 0)
    runs what runs once per node: the recovery of its own log, replication (with liveness
    reports and anti-entropy) and checkpoint issuing; the chain indexer is one per database
    by its own lock. With more than one, the ports are shared (SO_REUSEPORT) and each
    process's metrics are served plainly on loopback for the supervisor to merge. The first
    also sequences every worker's publishes: the others hand it their validated batches over
    the Unix socket `sequencer_link` (xnode.runtime.forwarding)."""

    index: int = 0
    count: int = 1
    sequencer_link: str = ""

    @property
    def primary(self) -> bool:
        return self.index == 0

    @property
    def shares_ports(self) -> bool:
        return self.count > 1


SOLE = WorkerRole()


@dataclass
class OtherWorkersCommits:
    """The commit listener's callback when the node has several workers: what another worker
    appended to this node's log moves this one's sequencer to its locked path, and is counted
    by the checkpoint issuer (which runs in the first worker)."""

    state: NodeState
    issuer: CheckpointIssuer
    sequencer: Sequencer

    async def __call__(self, tops: dict[int, int]) -> None:
        own = self.state.node_id
        if own in tops:
            self.sequencer.appended_elsewhere(tops[own])
            self.issuer.committed(max(tops[own] - self.state.vector_clock().get(own), 0))
        await self.state.committed_elsewhere(tops)


_NO_REGISTRY = Registry([])


def _no_registry() -> Registry:
    return _NO_REGISTRY


@dataclass(frozen=True)
class NodeTls:
    """What the listeners serve (None: plaintext) and how peers are checked."""

    served: ServerTls | None
    peers: ClientTls

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeTls:
        try:
            served = ServerTls.from_files(
                settings.tls_cert_file,
                settings.tls_key_file,
                settings.tls_client_ca_file,
                settings.tls_client_cert == "require",
            )
            peer_ca = ClientTls.from_files(settings.tls_peer_ca_file).root_certificates
        except TlsConfigError as exc:
            raise StartupError(str(exc)) from exc
        return cls(served, served.as_client(peer_ca) if served else ClientTls(peer_ca))

    def warn_if_plaintext(self, settings: Settings, address: str) -> None:
        if self.served is None:
            log.warning(
                "plaintext_listener",
                grpc=address,
                http=settings.http_listen_address or None,
                metrics=settings.metrics_address or None,
                detail="no TLS: for local development only; set tls_cert_file and tls_key_file",
            )


async def start_node(settings: Settings, role: WorkerRole = SOLE) -> Node:
    """Starts every part of the node (or of one of its worker processes: `role`); when a step
    fails, what started before it is released (connections closed, tasks ended, ports freed)
    before the error propagates."""
    try:
        key = settings.signing_key()
    except ValueError as exc:
        configured = settings.signer_key is not None or settings.signer_key_file is not None
        if not settings.read_only or configured:
            raise StartupError(f"signer key: {exc}") from exc
        # A read-only node's key signs only its tokens to peers: any key will do.
        key = SigningKey.generate()
        settings = settings.model_copy(update={"signer_key": SecretStr(key.hex())})
        log.info("read_only_key_generated", address="0x" + address_of(key.public_key).hex())
    except OSError as exc:
        raise StartupError(f"signer key: {exc}") from exc
    tls = NodeTls.from_settings(settings)
    # Each stop step (in reverse start order) under a deadline: one that hangs is logged with
    # the stacks of the tasks it waits on and forced, so a node's stop always ends.
    deadline = settings.shutdown_grace_seconds + settings.stop_step_seconds
    async with StopSteps(deadline) as stack:
        node = await _start(settings, key, tls, stack, role)
        node.cleanup = stack.pop_all()
    tls.warn_if_plaintext(settings, node.address)
    log.info(
        "node_listening",
        node_id=node.node_id,
        address=node.address,
        metrics=settings.metrics_address or None,
        public_key="0x" + key.public_key.hex(),
        vector_clock=node.state.vector_clock().to_dict(),
    )
    return node


async def _signing_process(role: WorkerRole, stack: StopSteps) -> Executor | None:
    """The first of several workers signs every worker's batches, in a process of its own
    (runtime.crypto_threads): a process of the same kind as replication's bulk verifiers,
    started by the fork server, that dies with this one. Stopped last, after the final
    commits; without it the batches are signed in the crypto threads."""
    if not (role.shares_ports and role.primary):
        return None
    process = BulkVerifiers(1)
    stack.callback(process.shutdown)
    try:
        await asyncio.to_thread(start_bulk, process, 1)
    except Exception as exc:  # e.g. no fork server: sign in threads, as one worker does
        log.error("signing_process_unavailable", error=repr(exc), fallback="crypto threads")
        return None
    return process


async def _start(
    settings: Settings, key: SigningKey, tls: NodeTls, stack: StopSteps, role: WorkerRole
) -> Node:
    crypto_threads.configure(settings.crypto_thread_count(), await _signing_process(role, stack))
    chain = await _connect_chain(settings)
    if chain is not None:
        stack.push_async_callback(chain.close)
    registry = await open_registry(settings, chain)
    node_id = resolve_node_id(settings, key, registry)
    database = Database(settings.database_dsn, settings.database_connect_timeout_seconds)
    pool = await _open_database(settings, database, node_id, key, stack)
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
            _chain_vouchers(settings, registry, tls, stack),
        )
        await _start_chain(chain_parts, stack)
    if registry is not None:
        stack.push_async_callback(registry.stop)
        await registry.start()
    reports = MisbehaviorStore(pool, key)
    recorder: MisbehaviorRecorder = (
        UnfiledReports() if settings.read_only else MisbehaviorLog(reports)
    )
    replication = None
    if registry is not None and role.primary:
        own_store = PostgresProbe(database.connect)  # its own connection, not the monitor's
        stack.callback(own_store.close)
        replication = ReplicationWorker(
            None if settings.read_only else node_id,  # read-only: its tokens name its key
            key,
            registry,
            ReplicationStore(pool),
            recorder,
            state.stored,
            token,
            ReplicationConfig.from_settings(settings, tls.peers),
            checkpoints=CheckpointIntake(logs),
            own_store=own_store,
            logs=logs,
            forks=ForkStore(pool),
            scrub=ScrubStore(pool),
        )
        stack.push_step(replication.stop, "ReplicationWorker.stop", replication.force_stop)
    originator = None
    elsewhere = state.committed_elsewhere
    if not settings.read_only:  # a read-only node signs no envelopes and no checkpoints
        originator, sequencer, issuer = await _start_originator(
            settings, key, pool, replication, state, token, stack, role
        )
        if role.shares_ports:
            elsewhere = OtherWorkersCommits(state, issuer, sequencer)
    listener = CommitListener(database.connect, token, elsewhere)
    stack.push_async_callback(listener.stop)
    listener.start()
    replica = await _open_replica(settings, pool, stack)
    if role.primary:
        await _start_retention(settings, pool, stack)
    holdings = (
        Holdings(node_id, key, ScrubStore(pool), logs)
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
        logs,
        identity,
        database,
        replica,
        holdings,
    )
    served = await _serve(settings, node_id, parts, tls.served, stack, role)
    if replication is not None:
        await replication.start()
    # Runs first when the node stops: health says NOT_SERVING before anything drains.
    stack.push_async_callback(served.health.drain)
    return Node(
        node_id,
        served.address,
        state,
        pool,
        registry,
        replication,
        chain_parts,
        served.health.monitor,
        http_address=served.http_address,
        metrics_address=served.metrics_address,
    )


async def _start_retention(settings: Settings, pool: asyncpg.Pool, stack: StopSteps) -> None:
    """The first run before serving (a node that was down a while catches up), then on the
    schedule; processes and nodes sharing the database take turns by an advisory lock."""
    plan_file = settings.retention_plan_file
    retention = RetentionSchedule(
        EnvelopePartitions(pool),
        SYSTEM_CLOCK,
        settings.retention_seconds,
        settings.retention_partitions_ahead_days,
        settings.retention_partition_days,
        None if plan_file is None else ScheduledPlan(pool, plan_file),
    )
    if settings.retention_seconds > 0:
        await retention.run_logged()
        stack.push_async_callback(retention.stop)
        retention.start()


def _forgetting(
    identity: IdentityUpdates, rewound: Callable[[dict[int, int]], Awaitable[None]]
) -> Callable[[dict[int, int]], Awaitable[None]]:
    """A chain re-org removed identity updates: replayed association states start over."""

    async def on_rewound(tops: dict[int, int]) -> None:
        identity.forget()
        await rewound(tops)

    return on_rewound


async def _start_originator(
    settings: Settings,
    key: SigningKey,
    pool: asyncpg.Pool,
    replication: ReplicationWorker | None,
    state: NodeState,
    token: str,
    stack: AsyncExitStack,
    role: WorkerRole,
) -> tuple[Originator | ForwardingOriginator, Sequencer, CheckpointIssuer]:
    """The group commit over the sequencer, with the checkpoint issuer of this node's log
    (issuing in the primary worker only); with a sequencer link, the first worker serves it
    and the others forward their batches through it."""
    node_id = state.node_id
    pricing = Pricing(settings.fee_schedule(), settings.fee_rate_window_seconds)
    sequencer = Sequencer(pool, node_id, key, token, pricing, settings.log_commit_enabled)
    issuer = CheckpointIssuer(
        LogStore(pool),
        node_id,
        key,
        settings.log_checkpoint_envelopes,
        settings.log_checkpoint_seconds,
    )
    if replication is not None:
        await _recover_own_log(settings, replication, sequencer, state)
    await sequencer.prime()
    # Two group commits in flight where the sequencer signs for other workers too: it waits
    # on their commits. A lone worker is bound by its own CPU: there the second group gained
    # nothing and the committed logs' share of batch throughput grew (docs/benchmarks.md,
    # "Measurements behind choices in the code").
    originator = Originator(
        TimedAppend(sequencer),
        CheckpointedCommit(state, issuer),
        settings.max_batch,
        BatchStats([observe_batch]),
        in_flight=2 if role.shares_ports else 1,
    )
    stack.callback(_log_appends, sequencer)  # after the drain's last commit
    link = role.sequencer_link if role.shares_ports else ""
    if link and role.primary:
        served = SequencerLink(link, originator)
        stack.push_async_callback(served.close)  # after the originator: answers what it took
        await served.start()
    stack.push_async_callback(originator.close)  # accepted publishes commit before the pool
    originator.start()
    stack.push_async_callback(issuer.stop)
    if role.primary and settings.log_commit_enabled:
        issuer.start()
    if link and not role.primary:
        forwarding = ForwardingOriginator(
            link, node_id, originator, lambda top: state.clock.merge({node_id: top})
        )
        stack.push_async_callback(forwarding.close)  # before the local originator's close
        forwarding.start()
        return forwarding, sequencer, issuer
    return originator, sequencer, issuer


async def _recover_own_log(
    settings: Settings, replication: ReplicationWorker, sequencer: Sequencer, state: NodeState
) -> None:
    """Before the originator takes publishes: never sign again a sequence id a peer holds
    (a database restored from an older backup); see xnode.replication.recovery."""
    node_id = state.node_id
    if not settings.recover_own_log_on_start:
        log.info("own_log_check_disabled", setting="recover_own_log_on_start")
        return
    outcome = await replication.recover_own_log(state.vector_clock().get(node_id))
    if outcome.behind:
        await sequencer.resume_after(outcome.peer_top)
        state.clock.merge({node_id: outcome.peer_top})


def _log_appends(sequencer: Sequencer) -> None:
    """How often the fast path held (it fails when another process appended in between: the
    node's other workers, docs/operations.md)."""
    log.info(
        "sequencer_appends",
        fast=sequencer.fast_appends,
        locked=sequencer.locked_appends,
        fast_misses=sequencer.fast_misses,
    )


def _chain_vouchers(
    settings: Settings, registry: RegistrySource | None, tls: NodeTls, stack: AsyncExitStack
) -> PeerChainCopies | None:
    """A read-only node serves registered nodes' proofs of the chain payloads it indexes
    (its own key is in no registry, and clients check the proof's signer against it)."""
    if not settings.read_only or registry is None:
        return None
    copies = PeerChainCopies(registry, ReplicationConfig.from_settings(settings, tls.peers))
    stack.push_async_callback(copies.close)
    return copies


async def _open_database(
    settings: Settings, database: Database, node_id: int, key: SigningKey, stack: StopSteps
) -> asyncpg.Pool:
    """Migrated, pooled and claimed for this node; with several hosts, following the primary."""
    if len(database.hosts) > 1:
        await database.find()
        database.start_watch(settings.database_primary_check_seconds)
        stack.push_async_callback(database.stop_watch)
    if settings.migrate_on_start:
        await asyncio.to_thread(upgrade_to_head, database.primary_dsn)
    pool = await create_pool(settings, database.connect)
    # close() waits for every connection to be released; forced, the pool is terminated.
    stack.push_step(pool.close, "Pool.close", pool.terminate)
    if not settings.read_only:  # a read-only node's database may later serve a registered one
        await claim_database(pool, node_id, key.public_key)
    return pool


async def _open_replica(
    settings: Settings, primary: asyncpg.Pool, stack: StopSteps
) -> Replica | None:
    """The streaming replica's pool and watch, when database_replica_dsn is set."""
    if not settings.database_replica_dsn:
        return None
    pool = await create_pool(settings, dsn=settings.database_replica_dsn)
    stack.push_step(pool.close, "Pool.close (replica)", pool.terminate)
    watch = ReplicaWatch(pool, primary, settings.database_replica_check_seconds)
    await watch.start()
    stack.push_async_callback(watch.stop)
    return Replica(EnvelopeStore(pool), watch)


async def _start_chain(parts: ChainServices, stack: AsyncExitStack) -> None:
    stack.push_async_callback(parts.stop)
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
    logs: LogStore | None = None
    identity: IdentityUpdates | None = None
    database: Database | None = None  # how dedicated connections find the primary
    replica: Replica | None = None  # reads for queries and catch-up, when configured
    holdings: Holdings | None = None  # an originator's signed account of its own log


@dataclass(frozen=True)
class Served:
    """Where the node listens, as bound, and its health."""

    address: str
    http_address: str | None
    metrics_address: str | None
    health: NodeHealth


def _serve_metrics(
    settings: Settings,
    node_id: int,
    parts: NodeParts,
    tls: MetricsTls | None,
    stack: AsyncExitStack,
) -> str | None:
    if not settings.metrics_address:
        return None
    try:
        metrics = serve_metrics(settings.metrics_address, node_id, _node_gauges(parts), tls)
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on {settings.metrics_address}: {exc}") from exc
    stack.callback(metrics.stop)
    return metrics.address


async def _serve(
    settings: Settings,
    node_id: int,
    parts: NodeParts,
    tls: ServerTls | None,
    stack: AsyncExitStack,
    role: WorkerRole = SOLE,
) -> Served:
    """Metrics, then the gRPC server with its health following the dependencies."""
    served_tls = None if role.shares_ports else metrics_tls(tls)  # loopback, for the merge
    metrics_address = _serve_metrics(settings, node_id, parts, served_tls, stack)
    chain, store = parts.chain, parts.store
    slots = SharedSubscriptionSlots(parts.store.pool)
    stack.push_async_callback(slots.close)
    limits = ApiLimits(settings.limit_policy(), SharedBuckets(parts.store.pool), slots)
    catch_up: EnvelopeReader = store
    queried: EnvelopeReader = store
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
    )
    registry = parts.registry
    current_registry = registry.current if registry else _no_registry
    auth = NodeAuthInterceptor(
        node_id,
        current_registry,
        parts.state.vector_clock,
        read_only_peers=settings.accept_read_only_peers,
    )
    logs = None
    end_streams = [subscribe.close_all]
    if parts.logs is not None:
        queries = LogQueries(
            parts.logs, min(1.0, settings.log_checkpoint_seconds), settings.keepalive_seconds
        )
        logs = LogService(queries)
        end_streams.append(queries.close_all)
    query = Query(queried, chain.store if chain else None, limits, parts.identity)
    service = EnvelopeService(publish, query, subscribe, auth.caller)
    transactions = Transactions(chain.connection.rpc, chain.connection.contracts) if chain else None
    misbehavior = MisbehaviorService(
        parts.reports, lambda: current_registry().keys(), limits, auth.caller, transactions
    )
    server, health_servicer, address = _grpc_server(
        settings,
        service,
        misbehavior,
        auth,
        FeesService(node_id, settings.fee_schedule()),
        logs,
        tls,
        ForkService(ForkStore(parts.store.pool)),
        role.shares_ports,
        HoldingsService(parts.holdings) if parts.holdings is not None else None,
    )
    serving = GrpcServing(server, end_streams, admission, settings.shutdown_grace_seconds)
    stack.push_async_callback(serving.stop)
    handlers = [*envelope_handlers(service), misbehavior_handlers(misbehavior)]
    http_handlers = [*handlers, health_handler(health_servicer)]
    http_address = await _serve_http(settings, http_handlers, stack, tls, role.shares_ports)
    # Before the HTTP port waits on its requests: streams end, publishes are refused.
    stack.push_async_callback(serving.quiesce)
    probe = PostgresProbe((parts.database or Database(settings.database_dsn)).connect)
    stack.callback(probe.close)
    dependencies = health_dependencies(chain is not None)
    dependencies[LOG_SERVICE] = dependencies["query"]  # the database
    monitor = HealthMonitor(
        GrpcHealthBoard(health_servicer),
        {**dependencies, FORK_SERVICE: frozenset({DATABASE})},
        probe,
        chain,
    )
    stack.push_async_callback(monitor.stop)
    await monitor.start()
    await serving.start()
    return Served(address, http_address, metrics_address, NodeHealth(monitor, health_servicer))


async def _serve_http(
    settings: Settings,
    handlers: list[grpc.GenericRpcHandler[Any, Any]],
    stack: AsyncExitStack,
    tls: ServerTls | None,
    reuse_port: bool = False,
) -> str | None:
    """gRPC-web and JSON on http_listen_address, over the gRPC server's own handlers, with
    the gRPC port's certificate (plaintext with it)."""
    if not settings.http_listen_address:
        return None
    api = HttpApi(
        methods_of(handlers, excluded=PROTECTED_METHODS),
        NODE_JSON_ROUTES,
        settings.cors_origins,
        settings.max_message_mib * 1024 * 1024,
    )
    try:
        context = tls.ssl_context() if tls is not None else None
        http = await serve_http(
            api,
            settings.http_listen_address,
            settings.shutdown_grace_seconds,
            context,
            reuse_port,
        )
    except TlsConfigError as exc:
        raise StartupError(str(exc)) from exc
    except OSError as exc:
        raise StartupError(f"cannot listen on {settings.http_listen_address}: {exc}") from exc
    stack.push_async_callback(http.stop)
    return http.address


def metrics_tls(tls: ServerTls | None) -> MetricsTls | None:
    if tls is None:
        return None
    return MetricsTls(tls.cert_file, tls.key_file, tls.client_ca_file, tls.require_client_cert)


def _node_gauges(parts: NodeParts) -> list[ScrapedGauge]:
    """What the dashboard reads from the node itself when it scrapes (docs/operations.md)."""
    state, pool = parts.state, parts.store.pool

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
    if parts.chain is not None:
        gauges += _chain_gauges(parts.chain)
    if parts.replica is not None:
        gauges += _replica_gauges(parts.replica.watch)
    return gauges


def _replica_gauges(watch: ReplicaWatch) -> list[ScrapedGauge]:
    return [
        ScrapedGauge(
            "xnode_database_replica_lag_bytes",
            "WAL bytes the read replica has yet to replay (none while it does not answer)",
            [],
            _single(lambda: watch.lag_bytes),
        ),
        ScrapedGauge(
            "xnode_database_replica_lag_seconds",
            "Age of the last transaction the read replica replayed while it trails; 0 caught up",
            [],
            _single(lambda: watch.lag_seconds),
        ),
    ]


def _single(read: Callable[[], float | None]) -> Reading:
    """A reading of one unlabelled value; no sample while it is unknown."""

    def reading() -> list[tuple[Sequence[str], float]]:
        value = read()
        return [] if value is None else [((), float(value))]

    return reading


def _chain_gauges(chain: ChainServices) -> list[ScrapedGauge]:
    status = chain.indexer.status
    return [
        ScrapedGauge(
            "xnode_chain_index_lag_blocks",
            "Blocks the chain head is ahead of the last indexed block",
            [],
            _single(lambda: status.lag_blocks),
        ),
        ScrapedGauge(
            "xnode_chain_indexed_block",
            "Last block indexed",
            [],
            _single(lambda: status.tip_number),
        ),
        ScrapedGauge(
            "xnode_chain_index_step_age_seconds",
            "Seconds since the indexer last stepped successfully (grows while it is stalled)",
            [],
            _single(status.since_step_s),
        ),
    ]


async def create_pool(
    settings: Settings, connect: Connect | None = None, dsn: str | None = None
) -> asyncpg.Pool:
    """`connect`: how a connection is opened (Database.connect follows the primary); `dsn`:
    another database than the node's (its replica)."""
    return await asyncpg.create_pool(
        dsn or settings.database_dsn,
        connect=connect,
        min_size=2,
        max_size=settings.db_pool_size,
        # Our queries are short index scans; JIT compiling them costs far more than running
        # them each time the planner's estimate crosses jit_above_cost.
        server_settings={"jit": "off"},
        reset=_keep_session,
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What the pool does to a connection it takes back, after asyncpg's own rollback of an
    open transaction. asyncpg's default also sends a reset query (advisory unlocks, CLOSE ALL,
    UNLISTEN *, RESET ALL): one more round trip on the path of every query, for session
    state this node never leaves on pooled connections (listeners and session locks have
    connections of their own; settings are the connection's startup ones)."""


@dataclass
class GrpcServing:
    """The gRPC server's start and its drain: new publishes are refused with UNAVAILABLE and
    live subscriptions end (new ones are refused) with UNAVAILABLE at once; publishes already
    accepted finish with their answers within the grace; then, once callers have gone quiet
    (xnode.usecases.admission: gRPC's stop cancels requests no handler has taken yet), the
    server stops."""

    server: grpc.aio.Server
    end_streams: Sequence[Callable[[], None]]  # subscriptions and log follows
    admission: Admission
    grace_s: float
    started: bool = False
    _deadline: float | None = None  # loop time the drain must end by, once it has begun

    async def start(self) -> None:
        await self.server.start()
        self.started = True

    async def quiesce(self) -> float:
        """The drain's first half, for both ports: refuse and end, then wait for callers to
        go quiet. Runs before the HTTP port closes, so HTTP publishes are refused with an
        answer too instead of meeting a closed connection. Returns the drain's deadline."""
        if self._deadline is not None:
            return self._deadline
        loop = asyncio.get_running_loop()
        self._deadline = deadline = loop.time() + self.grace_s
        self.admission.close()
        for end in self.end_streams:
            end()
        if self.started and not await self.admission.drained(self.grace_s):
            log.warning(
                "drain_grace_exceeded", in_flight=self.admission.in_flight, grace_s=self.grace_s
            )
        return deadline

    async def stop(self) -> None:
        deadline = await self.quiesce()
        if not self.started:
            # A grpc.aio server that bound its port but never started holds the port until
            # it has started and stopped.
            await self.server.start()
        remaining = deadline - asyncio.get_running_loop().time()
        await self.server.stop(max(remaining, 0.0))


@dataclass(frozen=True)
class NodeHealth:
    monitor: HealthMonitor
    servicer: health.HealthServicer

    async def drain(self) -> None:
        """Every service NOT_SERVING from now on."""
        await self.monitor.drain()
        self.servicer.enter_graceful_shutdown()


def _grpc_server(
    settings: Settings,
    service: EnvelopeService,
    misbehavior: MisbehaviorService,
    auth: NodeAuthInterceptor,
    fees: FeesService,
    logs: LogService | None = None,
    tls: ServerTls | None = None,
    forks: ForkService | None = None,
    reuse_port: bool = False,
    holdings: HoldingsService | None = None,
) -> tuple[grpc.aio.Server, health.HealthServicer, str]:
    limit = settings.max_message_mib * 1024 * 1024
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 1),
    ]
    if reuse_port:  # the worker processes share the port; the kernel spreads connections
        options.append(("grpc.so_reuseport", 1))
    server = grpc.aio.server(interceptors=[auth], options=options)
    server.add_generic_rpc_handlers(envelope_handlers(service))
    server.add_generic_rpc_handlers([misbehavior_handlers(misbehavior)])
    if logs is not None:
        add_log_service(logs, server)
    if forks is not None:
        add_fork_service(forks, server)
    if holdings is not None:
        add_holdings_service(holdings, server)
    fees_pb2_grpc.add_FeesApiServicer_to_server(fees, server)  # type: ignore[no-untyped-call]
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*service_names(), *([LOG_SERVICE] if logs is not None else [])]
    names += [FORK_SERVICE] if forks is not None else []
    names += [HOLDINGS_SERVICE] if holdings is not None else []
    reflection.enable_server_reflection(
        [
            *names,
            FEES_SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    if tls is None:
        port = server.add_insecure_port(settings.listen_address)
    else:
        port = server.add_secure_port(settings.listen_address, tls.credentials())
    if port == 0:
        raise StartupError(f"cannot listen on {settings.listen_address}")
    host = settings.listen_address.rpartition(":")[0]
    return server, health_servicer, f"{host}:{port}"


async def run(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    node = await start_node(settings)
    settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.stop()
    skip_final_collection()


def settle_heap() -> None:
    """Called once the node has started: what it holds from start-up (modules, protobuf
    descriptors, web3, the registry) leaves the collector's view. Every full collection
    scanned all of it, a real share of a catch-up's and a batch's CPU (docs/benchmarks.md,
    "Measurements behind choices in the code")."""
    gc.collect()
    gc.freeze()


def skip_final_collection() -> None:
    """Called once the node has stopped and released everything it holds: the interpreter's
    exit then does not collect the heap. Its module teardown ran full collections over every
    object for seconds in each process (seen with gdb in Py_FinalizeEx), which held the
    drain's end past its grace on a loaded machine."""
    gc.freeze()
