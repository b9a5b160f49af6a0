"""A client of the whole network (XIP-49 3.3): it publishes a topic's payloads to the topic's
preferred node and fails over to the next (3.3.6), checks everything it receives (3.3.4,
xnode.core.client_checks), delivers per topic in causal order (3.3.5) and keeps a
subscription going across nodes from its vector-clock cursor.

A node that is unreachable, or that sends something that fails a check, is excluded: the
next preferred node is tried, and excluded nodes come last until they answer again. Every
refused envelope is kept in `refusals` (the node that sent it and the failed check), and
what proves misbehavior is reported to other nodes (xnode.client.reports).

Retrying a publish elsewhere after the answer failed a check is what 3.3.4 prescribes ("clients
may publish a misbehavior report and retry against another originator"): the payload may then
be originated twice, once by the node that answered wrongly. Readers see two envelopes with
the same client bytes; MLS drops the second copy of a message it has already processed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import grpc

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, envelopes_of, group_message_envelope
from xnode.client.reports import Reporter
from xnode.core.backoff import Backoff
from xnode.core.causal_order import CausalOrder, causally_order
from xnode.core.client_checks import (
    CheckedEnvelope,
    EnvelopeCheckFailed,
    OriginatorOrder,
    check_published,
    check_received,
    check_timestamp,
)
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import Registry
from xnode.core.topics import Topic, TopicKind
from xnode.tls import ClientTls

T = TypeVar("T")

# Codes after which another node may succeed: the node is down, slow, or (ABORTED) has not
# yet replicated what the payload depends on. Anything else is the payload's own fault.
FAILOVER_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


class NoNodeAvailable(RuntimeError):
    """Every node failed until the deadline; `__cause__` is the last failure."""


@dataclass(frozen=True, slots=True)
class Refusal:
    node_id: int
    check: EnvelopeCheckFailed


class NetworkClient:
    """`registry` gives node ids, addresses (http:// or https://) and keys; `payer` signs
    the payer envelopes (a payer service does that for real clients: 3.3.1)."""

    def __init__(
        self,
        registry: Registry,
        payer: SigningKey | None = None,
        tls: ClientTls | None = None,
        deadline_s: float = 30.0,
        clock_ns: Callable[[], int] = time.time_ns,
        check_signatures: bool = True,
        trusted_payers: Collection[bytes] | None = None,
        report_misbehavior: bool = True,
    ) -> None:
        """`check_signatures` False is for a registry whose keys are not known (a tool pointed
        at one node by address): every other check still applies. `trusted_payers` (payer
        addresses) authenticates the aad of what is read; None takes any payer's.
        `report_misbehavior`: submit misbehavior reports to other nodes (xnode.client.reports)."""
        self.registry = registry
        self.payer = payer or SigningKey.generate()
        self.tls = tls
        self.deadline_s = deadline_s
        self.clock_ns = clock_ns
        self.keys: dict[int, bytes] | None = registry.public_keys() if check_signatures else None
        self.trusted_payers = trusted_payers
        self.excluded: list[int] = []
        self.refusals: list[Refusal] = []
        self.seen: dict[bytes, Cursor] = {}  # topic -> what this client saw or published on it
        self._nodes: dict[int, NodeClient] = {}
        self.reporter = (
            Reporter(registry, self.node, self.keys, clock_ns) if report_misbehavior else None
        )

    async def __aenter__(self) -> NetworkClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self.reporter is not None:
            await self.reporter.flush()
        for node in self._nodes.values():
            await node.close()
        self._nodes.clear()

    def node(self, node_id: int) -> NodeClient:
        if node_id not in self._nodes:
            entry = self.registry.nodes[node_id]
            self._nodes[node_id] = NodeClient(entry.http_address, self.tls)
        return self._nodes[node_id]

    def failover_order(self, topic: bytes) -> list[int]:
        """3.3.6: the preferred node, then each next preferred one; nodes that failed lately
        go last, in the order they failed."""
        order = failover_order(topic, available_nodes(self.registry))
        return [n for n in order if n not in self.excluded] + [
            n for n in self.excluded if n in order
        ]

    def exclude(self, node_id: int) -> None:
        if node_id in self.excluded:
            self.excluded.remove(node_id)
        self.excluded.append(node_id)

    def _answered(self, node_id: int) -> None:
        if node_id in self.excluded:
            self.excluded.remove(node_id)

    def refuse(self, node_id: int, check: EnvelopeCheckFailed) -> None:
        self.refusals.append(Refusal(node_id, check))
        self.exclude(node_id)
        if self.reporter is not None and check.envelope:
            self.reporter.invalid_payload(node_id, check.envelope)

    def failed(self, node_id: int, exc: grpc.aio.AioRpcError, waited_s: float) -> None:
        """A call to `node_id` failed in a way another node may not (FAILOVER_CODES)."""
        self.exclude(node_id)
        if self.reporter is not None:
            self.reporter.liveness(node_id, exc.code(), waited_s)

    async def with_failover(self, topic: bytes, attempt: Callable[[int], Awaitable[T]]) -> T:
        """`attempt(node_id)` on each node in failover order, round after round with
        backoff, until one succeeds or the deadline passes."""
        deadline = time.monotonic() + self.deadline_s
        backoff = Backoff(0.05, 1.0)
        last: Exception | None = None
        while True:
            for node_id in self.failover_order(topic):
                started = time.monotonic()
                try:
                    result = await attempt(node_id)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in FAILOVER_CODES:
                        raise
                    self.failed(node_id, exc, time.monotonic() - started)
                    last = exc
                except EnvelopeCheckFailed as exc:
                    self.refuse(node_id, exc)
                    last = exc
                else:
                    self._answered(node_id)
                    return result
            if time.monotonic() + 0.05 > deadline:
                raise NoNodeAvailable(f"no node answered for topic {topic.hex()}") from last
            await asyncio.sleep(backoff.next_delay())

    def check(self, raw: bytes, topics: Sequence[bytes] = ()) -> CheckedEnvelope:
        """3.3.4's checks on a received envelope (raises an EnvelopeCheckFailed)."""
        with _evidence(raw):
            env = check_received(raw, self.keys, topics, self.trusted_payers)
            check_timestamp(env, self.clock_ns(), published=False)
        return env

    def note_seen(self, env: CheckedEnvelope) -> None:
        """What later payloads on the topic depend on (aad.depends_on)."""
        cursor = self.seen.get(env.topic, Cursor())
        self.seen[env.topic] = cursor.merge({env.originator_node_id: env.sequence_id})

    # -- publish ------------------------------------------------------------------------------

    async def publish(
        self, client_envelopes: Sequence[envelopes_pb2.ClientEnvelope], retention_days: int = 0
    ) -> list[CheckedEnvelope]:
        """Publishes each topic's envelopes to the topic's preferred node (failing over) and
        answers the checked originator envelopes in request order."""
        by_topic: dict[bytes, list[int]] = {}
        for i, client in enumerate(client_envelopes):
            by_topic.setdefault(client.aad.target_topic, []).append(i)
        answers: dict[int, CheckedEnvelope] = {}
        for topic, indexes in by_topic.items():
            batch = [client_envelopes[i] for i in indexes]

            async def attempt(
                node_id: int, batch: list[envelopes_pb2.ClientEnvelope] = batch
            ) -> list[CheckedEnvelope]:
                return await self._publish_to(node_id, batch, retention_days)

            for i, env in zip(indexes, await self.with_failover(topic, attempt), strict=True):
                answers[i] = env
                self.note_seen(env)
        return [answers[i] for i in range(len(client_envelopes))]

    async def _publish_to(
        self,
        node_id: int,
        batch: Sequence[envelopes_pb2.ClientEnvelope],
        retention_days: int,
    ) -> list[CheckedEnvelope]:
        sent = []
        for client in batch:
            copy = envelopes_pb2.ClientEnvelope()
            copy.CopyFrom(client)
            copy.aad.target_originator = node_id
            sent.append(build_payer_envelope(copy, self.payer, node_id, retention_days))
        answered = await self.node(node_id).publish(sent, self.deadline_s)
        if len(answered) != len(sent):
            raise EnvelopeCheckFailed(f"node {node_id} answered {len(answered)} of {len(sent)}")
        checked = []
        for payer, answer in zip(sent, answered, strict=True):
            raw = answer.SerializeToString()
            with _evidence(raw):
                env = check_received(raw, self.keys)
                check_published(payer, env, node_id, self.clock_ns())
            checked.append(env)
        return checked

    async def publish_group_messages(
        self, group_id: bytes, payloads: Sequence[bytes], retention_days: int = 0
    ) -> list[CheckedEnvelope]:
        """Group messages whose aad.depends_on is what this client has seen on the topic
        (3.3.2), so readers order them after it (3.3.5)."""
        topic = Topic(TopicKind.GROUP_MESSAGES, group_id).raw
        depends_on = self.seen.get(topic, Cursor())
        envelopes = [group_message_envelope(group_id, data, depends_on) for data in payloads]
        return await self.publish(envelopes, retention_days)

    # -- query and subscribe ------------------------------------------------------------------

    async def query(
        self,
        topics: Sequence[bytes] = (),
        originators: Sequence[int] = (),
        cursor: Cursor | None = None,
        limit: int = 0,
        strict: bool = False,
    ) -> list[CheckedEnvelope]:
        """Checked envelopes after `cursor`, in causal order per topic (`strict`: a missing
        dependency raises MissingDependency instead of 3.3.5's smallest-timestamp fallback)."""
        start = cursor or Cursor()

        async def attempt(node_id: int) -> list[CheckedEnvelope]:
            found = await self.node(node_id).query(topics, originators, start, limit)
            order = OriginatorOrder(start)
            checked = []
            for raw in found:
                env = self.check(raw.SerializeToString(), topics)
                order.accept(env)
                checked.append(env)
            return checked

        ordered = causally_order(
            await self.with_failover(_routing_key(topics), attempt), start, strict
        )
        for env in ordered:
            self.note_seen(env)
        return ordered

    def subscribe(
        self,
        topics: Sequence[bytes] = (),
        originators: Sequence[int] = (),
        cursor: Cursor | None = None,
    ) -> Subscription:
        return Subscription(self, list(topics), list(originators), cursor or Cursor())


@contextmanager
def _evidence(raw: bytes) -> Iterator[None]:
    """A failed check carries the envelope that failed it, for a misbehavior report."""
    try:
        yield
    except EnvelopeCheckFailed as exc:
        exc.envelope = raw
        raise


def _routing_key(topics: Sequence[bytes]) -> bytes:
    """Reads go to the first topic's preferred node: where its writers publish (3.3.6)."""
    return topics[0] if topics else b""


class Subscription:
    """Checked envelopes in causal order per topic, from the preferred node; when the node
    fails (or sends something that fails a check) the subscription resumes on the next one
    from `cursor`, the vector clock of what it received, so nothing is missed or repeated."""

    def __init__(
        self,
        client: NetworkClient,
        topics: list[bytes],
        originators: list[int],
        cursor: Cursor,
    ) -> None:
        self.client = client
        self.topics = topics
        self.originators = originators
        self.order = OriginatorOrder(cursor)
        self.causal = CausalOrder(cursor)
        self.node_id: int | None = None
        self.nodes_used: list[int] = []
        self._call: grpc.aio.Call | None = None
        self._closed = False
        self._deliveries_iter: AsyncIterator[CheckedEnvelope] | None = None

    @property
    def cursor(self) -> Cursor:
        return self.order.cursor

    def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    def __aiter__(self) -> AsyncIterator[CheckedEnvelope]:
        """One stream of deliveries however many loops read it (a loop may stop and a later
        one go on where it stopped)."""
        if self._deliveries_iter is None:
            self._deliveries_iter = self._deliveries()
        return self._deliveries_iter

    async def _deliveries(self) -> AsyncIterator[CheckedEnvelope]:
        backoff = Backoff(0.05, 1.0)
        while not self._closed:
            for node_id in self.client.failover_order(_routing_key(self.topics)):
                async for env in self._from(node_id):
                    backoff.reset()
                    yield env
                if self._closed:
                    return
            await asyncio.sleep(backoff.next_delay())

    async def _from(self, node_id: int) -> AsyncIterator[CheckedEnvelope]:
        """What `node_id` streams after the cursor, until it fails or ends the stream."""
        self.node_id = node_id
        self.nodes_used.append(node_id)
        call = self.client.node(node_id).subscribe(self.topics, self.originators, self.cursor)
        self._call = call
        try:
            async for raw in envelopes_of(call):
                env = self.client.check(raw.SerializeToString(), self.topics)
                self.order.accept(env)
                for ready in self.causal.offer(env):
                    self.client.note_seen(ready)
                    yield ready
                    if self._closed:  # closed by whoever consumed `ready`
                        return
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.CANCELLED and self._closed:
                return
            if exc.code() not in FAILOVER_CODES:
                raise
            self.client.failed(node_id, exc, 0.0)
        except EnvelopeCheckFailed as exc:
            self.client.refuse(node_id, exc)
        finally:
            call.cancel()
            self._call = None
