"""The group commit's wiring: the sequencer under the originator, the checkpoint issuer,
the recovery of the node's own log and the link between worker processes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import structlog

from xnode.config import Settings
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.fees import Pricing
from xnode.observability.metrics import observe_batch
from xnode.observability.outage import DatabaseOutage
from xnode.replication.worker import ReplicationWorker
from xnode.runtime.forwarding import ForwardingOriginator, SequencerLink
from xnode.server.roles import WorkerRole
from xnode.server.stops import Phase, Stops
from xnode.store.logs import LogStore
from xnode.store.sequencer import Sequencer
from xnode.usecases.logs import CheckpointIssuer
from xnode.usecases.node_state import NodeState
from xnode.usecases.originator import BatchStats, Originator

log = structlog.get_logger(__name__)


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


async def start_originator(
    settings: Settings,
    key: SigningKey,
    pool: asyncpg.Pool,
    replication: ReplicationWorker | None,
    state: NodeState,
    token: str,
    stops: Stops,
    role: WorkerRole,
    outage: DatabaseOutage,
) -> tuple[Originator | ForwardingOriginator, Sequencer, CheckpointIssuer]:
    """The group commit over the sequencer, with the checkpoint issuer of this node's log
    (issuing in the primary worker only); with a sequencer link, the first worker serves it
    and the others forward their batches through it."""
    node_id = state.node_id
    pricing = Pricing(settings.fee_schedule(), settings.fee_rate_window_seconds)
    sequencer = Sequencer(pool, node_id, key, token, pricing, settings.log_commit_enabled)
    issuer = CheckpointIssuer(
        LogStore(pool, settings.log_topic_commitments),
        node_id,
        key,
        settings.log_checkpoint_envelopes,
        settings.log_checkpoint_seconds,
        outage,
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
        held=sequencer.held,
    )
    stops.add_sync(Phase.COMMITS, lambda: _log_appends(sequencer))  # after the last commit
    link = role.sequencer_link if role.shares_ports else ""
    if link and role.primary:
        served = SequencerLink(link, originator)
        stops.add(Phase.COMMITS, served.close)  # after the originator: answers what it took
        await served.start()
    stops.add(Phase.COMMITS, originator.close)  # accepted publishes commit before the pool
    originator.start()
    stops.add(Phase.COMMITS, issuer.stop)
    if role.primary and settings.log_commit_enabled:
        issuer.start()
    if link and not role.primary:
        forwarding = ForwardingOriginator(
            link, node_id, originator, lambda top: state.clock.merge({node_id: top})
        )
        stops.add(Phase.COMMITS, forwarding.close)  # before the local originator's close
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
