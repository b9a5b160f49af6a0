"""The replication worker (XIP-49 3.2.3, 3.2.6): for every other node in the registry, a
direct stream of the envelopes it originated; when a node stops answering or is disabled,
streams of its envelopes through its delivery group instead (f+1 peers, at least
`replication_fallback_peers`, chosen by `core.delivery_groups` the same way on every node and
turned over each hour; for a disabled node, for 6 hours). Registry changes apply at once:
added nodes are connected, disabled ones disconnected. Every `replication_repair_seconds`,
anti-entropy repair (replication.anti_entropy) fills what streams missed from any peer."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from xnode.config import Settings
from xnode.core.backoff import Backoff
from xnode.core.checkpoints import has_log
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.delivery_groups import EPOCH_SECONDS, delivery_group, epoch_of
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.node_tokens import TokenProvider
from xnode.core.registry import NodeEntry, Registry
from xnode.core.verification import verify_envelope
from xnode.core.withholding import PATIENCE_S
from xnode.observability.outage import DatabaseOutage
from xnode.replication.anti_entropy import AntiEntropy, Peer
from xnode.replication.checkpoints import CheckpointFollower
from xnode.replication.fees import FeeSchedules
from xnode.replication.ingest import (
    IngestContext,
    OnStored,
    OriginatorLog,
    Watermark,
)
from xnode.replication.own_health import OwnHealthGate, StoppingGate
from xnode.replication.ports import MisbehaviorRecorder, ReplicaStore, StoreHealth
from xnode.replication.recovery import OwnLogFetch, OwnLogRecovery, recover_own_log
from xnode.replication.repair_peer import GrpcRepairPeer
from xnode.replication.scrub import Scrub
from xnode.replication.stream import Hooks, Mode, PeerStream, Timeouts
from xnode.replication.verifiers import Verifiers
from xnode.tls import ClientTls, PeerTls, open_channel
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReplicationConfig:
    timeouts: Timeouts
    backoff_initial_s: float
    backoff_max_s: float
    fallback_peers: int
    disabled_fallback_s: float
    verify_threads: int
    max_message_bytes: int
    verify_processes: int = 0  # for bulk verification (repair); 0: threads only
    peer_tls: PeerTls | None = None  # https:// peers: their CA (None: system roots)
    repair_s: float = 0.0  # anti-entropy repair interval; 0: off
    scrub_per_second: float = 0.0  # leaves the scrub checks per second; 0: off
    withholding_patience_s: float = PATIENCE_S  # before a non-answer is an accusation

    @classmethod
    def from_settings(
        cls, settings: Settings, peer_tls: PeerTls | None = None
    ) -> ReplicationConfig:
        return cls(
            timeouts=Timeouts(
                response_s=settings.replication_response_timeout_seconds,
                slow_s=settings.replication_slow_seconds,
                idle_s=settings.replication_idle_timeout_seconds,
            ),
            backoff_initial_s=settings.replication_backoff_initial_seconds,
            backoff_max_s=settings.replication_backoff_max_seconds,
            fallback_peers=settings.replication_fallback_peers,
            disabled_fallback_s=settings.replication_disabled_fallback_seconds,
            verify_threads=settings.replication_verify_threads,
            max_message_bytes=settings.max_message_mib * 1024 * 1024,
            peer_tls=peer_tls,
            repair_s=settings.replication_repair_seconds,
            scrub_per_second=settings.scrub_envelopes_per_second,
            withholding_patience_s=settings.withholding_patience_seconds,
            verify_processes=settings.replication_verify_processes,
        )


def has_address(entry: NodeEntry) -> bool:
    return bool(entry.http_address.removeprefix("https://").removeprefix("http://").strip("/"))


def peer_channel(
    address: str, config: ReplicationConfig, tls: ClientTls | None
) -> grpc.aio.Channel:
    """A channel to a registry `http_address`: https:// is TLS (checked against the peer CA,
    showing `tls`'s certificate), http:// or bare is plaintext."""
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        # gRPC's own reconnect backoff (up to 2 minutes) would hold back ours; and sharing
        # subchannels with other channels of the process would share that backoff too.
        ("grpc.initial_reconnect_backoff_ms", int(config.backoff_initial_s * 1000)),
        ("grpc.min_reconnect_backoff_ms", int(config.backoff_initial_s * 1000)),
        ("grpc.max_reconnect_backoff_ms", int(config.backoff_max_s * 1000)),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    return open_channel(address, tls, options)


def channel_key(entry: NodeEntry, config: ReplicationConfig) -> tuple[str, ClientTls | None]:
    """What a cached channel to `entry` was made for: its address and the TLS of the moment
    (a renewed certificate needs a channel of its own)."""
    return entry.http_address, config.peer_tls.current() if config.peer_tls else None


class PeerLink:
    """Everything this node does to get one peer's originated envelopes."""

    def __init__(self, worker: ReplicationWorker, entry: NodeEntry) -> None:
        self.entry = entry
        self.unreachable = False
        self._worker = worker
        self._direct: asyncio.Task[None] | None = None
        self._fallback: dict[int, asyncio.Task[None]] = {}
        self._disabled_until: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._log = log.bind(peer=entry.node_id)

    @property
    def node_id(self) -> int:
        return self.entry.node_id

    @property
    def fallback_peers(self) -> list[int]:
        return sorted(self._fallback)

    @property
    def direct_running(self) -> bool:
        return self._direct is not None

    def update(self, entry: NodeEntry) -> None:
        moved = entry.http_address != self.entry.http_address
        self.entry = entry
        if entry.enabled and not has_address(entry):
            self._stop_direct()
            self._disabled_until = None
            self.unreachable = True  # nothing to connect to: its envelopes come via others
            self._log.warning("peer_has_no_address")
        elif entry.enabled:
            self._disabled_until = None
            if self._direct is None or moved:
                self._stop_direct()
                self._direct = self._worker.spawn(self._direct_stream(), f"direct-{self.node_id}")
        else:
            self._stop_direct()
            self.unreachable = False
            if self._disabled_until is None:
                # XIP 3.2.6: fetch a disabled node's payloads through others for 6 hours.
                wait = self._worker.config.disabled_fallback_s
                loop = asyncio.get_running_loop()
                self._disabled_until = loop.time() + wait
                self._timer = loop.call_later(wait, self.sync_fallback)
                self._log.info("peer_disabled", fallback_s=wait)
        self.sync_fallback()

    def _direct_stream(self) -> PeerStream:
        hooks = Hooks(self._reachable, self._unreachable, self._worker.reports.record)
        return self._worker.stream(self.entry, self.node_id, Mode.DIRECT, hooks)

    def _reachable(self) -> None:
        if self.unreachable:
            self._log.info("peer_reachable_again")
            self.unreachable = False
            self._worker.sync_fallbacks()  # it may relay for others again

    def _unreachable(self) -> None:
        if not self.unreachable:
            self.unreachable = True
            self._worker.sync_fallbacks()  # it relays for nobody now

    def _wants_fallback(self) -> bool:
        if self.unreachable:
            return True
        until = self._disabled_until
        return until is not None and asyncio.get_running_loop().time() < until

    def sync_fallback(self) -> None:
        """Starts or stops fallback streams: one per member of the delivery group."""
        before = set(self._fallback)
        eligible = self._worker.fallback_candidates(self.node_id)
        wanted = self._wants_fallback()
        group = self._worker.delivery_group(self.node_id, eligible) if wanted else []
        for peer in [p for p in self._fallback if p not in group]:
            self._fallback.pop(peer).cancel()
        for peer in [p for p in group if p not in self._fallback]:
            stream = self._worker.stream(eligible[peer], self.node_id, Mode.FALLBACK, None)
            self._fallback[peer] = self._worker.spawn(stream, f"fallback-{self.node_id}-{peer}")
        if set(self._fallback) != before:
            self._log.info("peer_fallback", through=sorted(self._fallback))

    def _stop_direct(self) -> None:
        if self._direct is not None:
            self._direct.cancel()
            self._direct = None

    def stop(self) -> None:
        self._stop_direct()
        for task in self._fallback.values():
            task.cancel()
        self._fallback.clear()
        if self._timer is not None:
            self._timer.cancel()


class ReplicationWorker:
    def __init__(
        self,
        node_id: int | None,
        key: SigningKey,
        source: RegistrySource,
        store: ReplicaStore,
        reports: MisbehaviorRecorder,
        on_stored: OnStored,
        notice_token: str,
        config: ReplicationConfig,
        verifiers: Verifiers,
        outage: DatabaseOutage,
        clock: Clock = SYSTEM_CLOCK,
        own_store: StoreHealth | None = None,
    ) -> None:
        """`own_store`: this node's database health; when given, liveness reports are filed
        only while it answers (replication.own_health). `node_id` None: a read-only node
        (XIP-49 3.4), which follows every registered originator and sends read-only tokens.
        `verifiers`: the executors that verify what peers send, closed by `stop`. `outage`:
        told when the store fails under a stream or the scrub. The
        checkpoint follower, repair and scrub are wired in by the composition root
        (`follow_checkpoints`, `repair_with`), before `start`."""
        self.node_id = node_id
        self.config = config
        self.outage = outage
        self.reports = StoppingGate(
            OwnHealthGate(reports, own_store, clock) if own_store is not None else reports
        )
        self._source = source
        self._store = store
        self._clock = clock
        self._tokens = TokenProvider(key, node_id, clock.now_s)
        self._registry = source.current()
        self._keys: Mapping[int, bytes] = {}
        self._links: dict[int, PeerLink] = {}
        self._logs: dict[int, OriginatorLog] = {}
        self._channels: dict[int, tuple[tuple[str, ClientTls | None], grpc.aio.Channel]] = {}
        self._retired: list[grpc.aio.Channel] = []  # made with a certificate since renewed
        self._tasks: set[asyncio.Task[None]] = set()
        self._verifiers = verifiers
        self.fees = FeeSchedules(config.backoff_initial_s, config.backoff_max_s)
        self._fees_followed: set[int] = set()
        self._ctx = IngestContext(
            store,
            reports,
            on_stored,
            notice_token,
            self.current_keys,
            verifiers,
            clock,
            self.fees.current,
        )
        self._stopped = False
        self._epoch_timer: asyncio.TimerHandle | None = None
        self.anti_entropy: AntiEntropy | None = None
        self.scrub: Scrub | None = None
        self._checkpoints: CheckpointFollower | None = None

    def follow_checkpoints(
        self,
        follower: CheckpointFollower,
        watermarks: Watermark,
        fork_settled: Callable[[int, int], Awaitable[None]],
    ) -> None:
        """Peers' checkpoints followed alongside their streams; the order checks judged by
        the checkpoints' watermarks; checkpoints judged again where a fork was settled."""
        self._checkpoints = follower
        self._ctx.watermark = watermarks
        self._ctx.fork_settled = fork_settled

    def repair_with(self, anti_entropy: AntiEntropy, scrub: Scrub | None) -> None:
        """Anti-entropy repair (and the scrub handing it what it finds lost) from `start`."""
        self.anti_entropy = anti_entropy
        self.scrub = scrub

    def backoff(self) -> Backoff:
        return Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)

    def current_keys(self) -> Mapping[int, bytes]:
        return self._keys

    def keys_of_node(self, node_id: int) -> list[bytes]:
        key = self._keys.get(node_id)
        return [] if key is None else [key]

    @property
    def links(self) -> Mapping[int, PeerLink]:
        return self._links

    async def start(self) -> None:
        positions = await self._store.newest_per_originator()
        self._logs = {o: OriginatorLog(o, p, self._ctx) for o, p in positions.items()}
        self._source.on_change(self._apply)
        self._apply(self._source.current())
        self._next_epoch()
        if self.anti_entropy is not None:
            # Repairs verify in threads until the processes are up (about a second).
            self.spawn_coroutine(self._verifiers.start_bulk(), name="bulk-verifiers")
            self.anti_entropy.start()
        if self.scrub is not None:
            self.scrub.start(self.outage)
        log.info("replication_started", node_id=self.node_id, peers=sorted(self._links))

    async def recover_own_log(self, local_top: int) -> OwnLogRecovery:
        """Before this node originates: stores what peers hold of its own log beyond
        `local_top` (see xnode.replication.recovery); call before start()."""
        if self.node_id is None:
            raise ValueError("a read-only node has no log of its own to recover")
        self._keys = self._registry.public_keys()
        positions = await self._store.newest_per_originator()
        target = OriginatorLog(self.node_id, positions.get(self.node_id), self._ctx)
        peers = [
            e for e in self._registry.nodes.values() if e.node_id != self.node_id and has_address(e)
        ]

        def fetch(peer: NodeEntry) -> OwnLogFetch:
            channel = self._channel(peer)
            timeouts = self.config.timeouts
            return OwnLogFetch(peer.node_id, channel, target, local_top, self._tokens, timeouts)

        return await recover_own_log(local_top, peers, lambda peer: fetch(peer)())

    def stop_judging(self) -> None:
        """The node begins to stop: from now on its peers' failures are not reported
        (replication.own_health), though its streams run until `stop`."""
        self.reports.stopping = True

    async def stop(self) -> None:
        self._stopped = True
        try:
            if self.anti_entropy is not None:
                await self.anti_entropy.stop()
            if self.scrub is not None:
                await self.scrub.stop()
            if self._epoch_timer is not None:
                self._epoch_timer.cancel()
            for link in self._links.values():
                link.stop()
            tasks = list(self._tasks)
            for task in tasks:
                if not task.cancelling():  # cancelled once only: a second cancel cuts cleanups
                    task.cancel()
            if tasks:
                await asyncio.wait(tasks)
        finally:
            # Also when the node's stop forces this one (usecases.concurrency.StopSteps): the
            # channels, threads and processes are released either way, the pools waited for
            # in a thread so that the loop, and the stop's deadline, keep running meanwhile.
            for channel in [*self._retired, *(c for _, c in self._channels.values())]:
                await channel.close(None)
            await self._verifiers.close()

    def force_stop(self) -> None:
        """stop() overran (a task did not end on its one cancel): the tasks left are
        cancelled again, their cleanups cut short, and queued verifications dropped."""
        for task in list(self._tasks):
            task.cancel()
        self._verifiers.force_close()

    def _apply(self, registry: Registry) -> None:
        if self._stopped:
            return
        self._registry = registry
        self._keys = registry.public_keys()
        for entry in registry.nodes.values():
            if entry.node_id == self.node_id:
                continue
            link = self._links.get(entry.node_id)
            if link is None:
                link = self._links[entry.node_id] = PeerLink(self, entry)
            link.update(entry)
            self._follow_fees(entry)
        for node_id in [n for n in self._links if n not in registry.nodes]:
            self._links.pop(node_id).stop()
        self.sync_fallbacks()

    def _follow_fees(self, entry: NodeEntry) -> None:
        if entry.node_id in self._fees_followed or not has_address(entry):
            return
        self._fees_followed.add(entry.node_id)
        node_id = entry.node_id

        def channel() -> grpc.aio.Channel | None:
            link = self._links.get(node_id)
            if link is None or self._stopped or not has_address(link.entry):
                self._fees_followed.discard(node_id)
                return None
            return self._channel(link.entry)

        token = functools.partial(self._tokens.metadata_for, node_id)
        self.spawn_coroutine(self.fees.follow(node_id, channel, token), f"fees-{node_id}")

    def sync_fallbacks(self) -> None:
        if self._stopped:
            return
        for link in self._links.values():
            link.sync_fallback()

    def delivery_group(self, originator: int, eligible: Mapping[int, NodeEntry]) -> list[int]:
        """The peers that relay `originator`'s log now (core.delivery_groups)."""
        return delivery_group(
            originator,
            epoch_of(self._clock.now_s()),
            eligible,
            len(self._registry.nodes),
            self.config.fallback_peers,
        )

    def _next_epoch(self) -> None:
        """Turns delivery groups over at each epoch boundary."""
        self.sync_fallbacks()
        wait = EPOCH_SECONDS - self._clock.now_s() % EPOCH_SECONDS + 1.0
        self._epoch_timer = asyncio.get_running_loop().call_later(wait, self._next_epoch)

    def repair_originators(self) -> list[int]:
        return sorted(o for o in self._keys if has_log(o) and o != self.node_id)

    def token_metadata(self, peer: int) -> Sequence[tuple[str, str]]:
        """This node's token for `peer`, as call metadata (its calls get a peer's limits)."""
        return self._tokens.metadata_for(peer)

    def repair_peers(self) -> list[Peer]:
        """Every enabled peer with an address that answers (the originators included)."""
        found: list[Peer] = []
        for entry in self._registry.nodes.values():
            link = self._links.get(entry.node_id)
            if entry.enabled and has_address(entry) and link is not None and not link.unreachable:
                token = functools.partial(self._tokens.metadata_for, entry.node_id)
                found.append(GrpcRepairPeer(entry.node_id, self._channel(entry), token))
        return found

    async def fork_found(self, originator: int, stored: bytes, other: bytes) -> None:
        """Repair found a second version of a stored sequence id: it goes through the same
        intake as a streamed one (the fork rule settles the log, both versions are kept as
        evidence, a DUPLICATE_SEQUENCE_ID report is filed), so nodes that learn of a fork
        only by repair, e.g. after a partition heals, converge on the same log and
        conflicts. The repair verified `other` already; checking it again is cheap for a
        rare event and keeps the intake's contract."""
        verdict = verify_envelope(other, self._keys, originator)
        if isinstance(verdict, IndexedEnvelope):
            await self.originator_log(originator).store([verdict], originator, direct=False)

    def fallback_candidates(self, originator: int) -> dict[int, NodeEntry]:
        """Peers that can relay `originator`'s envelopes: enabled, and answering."""
        found = {}
        for entry in self._registry.nodes.values():
            link = self._links.get(entry.node_id)
            if entry.enabled and link is not None and not link.unreachable:
                found[entry.node_id] = entry
        found.pop(originator, None)
        return found

    def originator_log(self, originator: int) -> OriginatorLog:
        found = self._logs.get(originator)
        if found is None:
            found = self._logs[originator] = OriginatorLog(originator, None, self._ctx)
        return found

    def open_channel(self, node_id: int) -> grpc.aio.Channel | None:
        cached = self._channels.get(node_id)
        return cached[1] if cached is not None else None

    def _channel(self, entry: NodeEntry) -> grpc.aio.Channel:
        key = channel_key(entry, self.config)
        cached = self._channels.get(entry.node_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        if cached is not None and cached[0][0] != entry.http_address:
            self.spawn_coroutine(cached[1].close(1.0))
        elif cached is not None:  # a renewed certificate: calls on the old one go on
            self._retired.append(cached[1])
        channel = peer_channel(entry.http_address, self.config, key[1])
        self._channels[entry.node_id] = (key, channel)
        return channel

    def stream(
        self, server: NodeEntry, originator: int, mode: Mode, hooks: Hooks | None
    ) -> PeerStream:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        return PeerStream(
            server.node_id,
            lambda: self._channel(server),
            self.originator_log(originator),
            mode,
            self._tokens,
            self.config.timeouts,
            backoff,
            hooks,
            self.outage,
            self._clock,
        )

    def spawn(self, stream: PeerStream, name: str) -> asyncio.Task[None]:
        if self._checkpoints is None:
            return self.spawn_coroutine(stream.run(), name)
        # The peer's checkpoints of the same originator alongside. The stream's coroutine is
        # made inside the task: a task cancelled before it starts leaves none un-awaited.
        run = self._checkpoints.alongside(
            stream.run, stream.channel, stream.peer, stream.originator
        )
        return self.spawn_coroutine(run, name)

    def spawn_coroutine(
        self, coro: Coroutine[Any, Any, None], name: str | None = None
    ) -> asyncio.Task[None]:
        if self._stopped:  # a stream ending during stop() must not start others
            coro.close()
            coro = asyncio.sleep(0)
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
