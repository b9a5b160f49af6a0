"""The replication worker and what it runs with: the checkpoint follower and watermarks of
the committed logs, anti-entropy repair with its fork sync, and the scrub."""

from __future__ import annotations

import asyncpg

from xnode.config import Settings
from xnode.core.clock import SYSTEM_CLOCK
from xnode.core.crypto import SigningKey
from xnode.observability.outage import DatabaseOutage
from xnode.replication.anti_entropy import AntiEntropy, Repair
from xnode.replication.checkpoints import CheckpointFollower, Watermarks
from xnode.replication.fork_sync import ForkSync
from xnode.replication.ports import MisbehaviorRecorder, StoreHealth
from xnode.replication.scrub import OwnKey, Scrub
from xnode.replication.verifiers import Verifiers
from xnode.replication.withholding import WithholdingCheck
from xnode.replication.worker import ReplicationConfig, ReplicationWorker
from xnode.server.bootstrap import NodeTls
from xnode.store.forks import ForkStore
from xnode.store.logs import LogStore
from xnode.store.replication import ReplicationStore
from xnode.store.scrub import ScrubStore
from xnode.usecases.logs import CheckpointIntake
from xnode.usecases.node_state import NodeState
from xnode.usecases.registry_source import RegistrySource


def replication_worker(
    settings: Settings,
    key: SigningKey,
    registry: RegistrySource,
    pool: asyncpg.Pool,
    recorder: MisbehaviorRecorder,
    state: NodeState,
    token: str,
    tls: NodeTls,
    logs: LogStore,
    own_store: StoreHealth,
    outage: DatabaseOutage,
) -> ReplicationWorker:
    """`own_store`: this node's database health, which gates its liveness reports; `outage`
    is told when the store fails under the worker's loops."""
    store = ReplicationStore(pool)
    config = ReplicationConfig.from_settings(settings, tls.peers)
    worker = ReplicationWorker(
        None if settings.read_only else state.node_id,  # read-only: its tokens name its key
        key,
        registry,
        store,
        recorder,
        state.stored,
        token,
        config,
        Verifiers(config.verify_threads, config.verify_processes),
        outage,
        own_store=own_store,
    )
    intake = CheckpointIntake(logs)
    worker.follow_checkpoints(
        CheckpointFollower(
            intake, worker.current_keys, worker.backoff, outage, worker.token_metadata
        ),
        Watermarks(intake, worker.current_keys, worker.open_channel),
        intake.settle,
    )
    if config.repair_s > 0:
        # A read-only node has no registry key to ask with: it leaves withholding to them.
        withholding = None
        if not settings.read_only:
            withholding = WithholdingCheck(
                worker.reports,
                worker.current_keys,
                (state.node_id, key),
                SYSTEM_CLOCK,
                config.withholding_patience_s,
                worker.repair_peers,
            )
        repair = Repair(
            logs, store, worker.originator_log, worker.fork_found, withholding=withholding
        )
        forks = ForkSync(ForkStore(pool), store, worker.fork_found)
        anti_entropy = AntiEntropy(
            repair,
            worker.repair_originators,
            worker.repair_peers,
            config.repair_s,
            outage,
            forks,
            own=worker.node_id,
        )
        scrub = Scrub(
            ScrubStore(pool),
            config.scrub_per_second,
            repair.losses.add,
            SYSTEM_CLOCK.now_s,
            worker.current_keys,
            None if settings.read_only else OwnKey(state.node_id, key.public_key),
        )
        worker.repair_with(anti_entropy, scrub)
    return worker
