"""A deliberately misbehaving registered node: a small gRPC server holding a registry key,
serving its own originator's envelopes from a script (forks, payloads that break the rules,
timestamps that go back) or answering late or never. Honest nodes replicate from it as from
any peer; what they report about it is what the harness scores."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1.health_pb2 import HealthCheckResponse

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import group_message_envelope
from xnode.core import wire
from xnode.core.chain_payloads import ChainEvent, build_chain_payload
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.devtools.byzantine.committed import CommittedLog, LogService

REPLICATION = "xmtp.xmtpv4.message_api.ReplicationApi"
GROUP = bytes([0xB7]) * 16
DAY_S = 86_400
KEY_PACKAGE_LIFETIME_S = 90 * DAY_S


@dataclass
class Originator:
    """Signs envelopes as `node_id` with its registry key, paid by one payer."""

    node_id: int
    key: SigningKey
    payer: SigningKey = field(default_factory=SigningKey.generate)

    def payer_envelopes(self, count: int, tag: bytes = b"m") -> list[envelopes_pb2.PayerEnvelope]:
        """Group messages its payer signed for it."""
        return [
            build_payer_envelope(
                group_message_envelope(GROUP, tag + b"%d" % i), self.payer, self.node_id
            )
            for i in range(count)
        ]

    def message(self, seq: int, text: bytes, at_ns: int | None = None) -> bytes:
        [payer] = self.payer_envelopes(1, text)
        valid = validate_payer_envelope(payer, self.node_id)
        return originate(valid, self.node_id, seq, at_ns or time.time_ns(), self.key).raw

    def with_payer_envelope(self, raw: bytes, payer: envelopes_pb2.PayerEnvelope) -> bytes:
        """`raw` with its payer envelope replaced, signed again by this originator: an
        envelope it really signed, carrying what it should have refused."""
        outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            outer.unsigned_originator_envelope
        )
        unsigned.payer_envelope_bytes = payer.SerializeToString()
        outer.unsigned_originator_envelope = unsigned.SerializeToString()
        outer.originator_signature.bytes = self.key.sign(
            originator_digest(outer.unsigned_originator_envelope)
        )
        return outer.SerializeToString()

    def misdirected(self, seq: int) -> bytes:
        """A client's message addressed to another originator (node 100), which this one
        signs as its own: a rule every XIP-49 implementation shares (3.3.4)."""
        payer = build_payer_envelope(group_message_envelope(GROUP, b"elsewhere"), self.payer, 100)
        return self.with_payer_envelope(self.message(seq, b"placeholder"), payer)

    def forged_payer(self, seq: int) -> bytes:
        """A client's message whose payer signature is not a signature at all: forged."""
        payer = build_payer_envelope(group_message_envelope(GROUP, b"forged"), self.payer, 0)
        payer.target_originator = self.node_id
        payer.payer_signature.bytes = bytes(65)
        return self.with_payer_envelope(self.message(seq, b"placeholder"), payer)


@dataclass
class Behavior:
    """What the peer serves: `streams[i]` on the i-th stream of its own originator (the last
    stream then stays open), after `delay_s` (None: never answers); with a committed `log`,
    that log on LogApi and HoldingsApi, and its served envelopes on QueryEnvelopes."""

    streams: list[list[bytes]]
    delay_s: float | None = 0.0
    log: CommittedLog | None = None


Script = Callable[[Originator], Behavior]


def false_chain_payload(o: Originator, honest_raw: bytes) -> bytes:
    """A chain payload vouched for by this originator's key for the transaction of
    `honest_raw`, carrying a message that transaction never sent."""
    outer = envelopes_pb2.OriginatorEnvelope.FromString(honest_raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        outer.unsigned_originator_envelope
    )
    client = group_message_envelope(GROUP, b"never on the chain")
    event = ChainEvent(
        unsigned.originator_node_id,
        unsigned.originator_sequence_id,
        GROUP,
        client.SerializeToString(),
        0,
        bytes(32),
        outer.blockchain_proof.transaction_hash,
        0,
    )
    return build_chain_payload(event, unsigned.originator_ns // NS_PER_SECOND, o.key).raw


def equivocation(o: Originator) -> Behavior:
    """Two different envelopes signed with sequence id 1."""
    return Behavior([[o.message(1, b"one"), o.message(2, b"two")], [o.message(1, b"another")]])


def reordering(o: Originator) -> Behavior:
    """Sequence id 2 timestamped a minute before sequence id 1."""
    now = time.time_ns()
    return Behavior([[o.message(1, b"one", now), o.message(2, b"two", now - 60 * NS_PER_SECOND)]])


def future_timestamps(o: Originator) -> Behavior:
    """Stamps an hour ahead, then back to the real time: the timestamps go back."""
    now = time.time_ns()
    ahead = now + 3600 * NS_PER_SECOND
    return Behavior([[o.message(1, b"early", ahead), o.message(2, b"now", now)]])


def invalid_payload(o: Originator) -> Behavior:
    """Breaks a shared rule (the target originator): proven. A key package that had expired
    when signed breaks only xnode's reading of MLS, which is judged, not proven."""
    return Behavior([[o.message(1, b"one"), o.misdirected(2)]])


def forged_envelope(o: Originator) -> Behavior:
    return Behavior([[o.message(1, b"one"), o.forged_payer(2)]])


WITHHELD_LOG, WITHHELD = 12, 5


def committed_log(o: Originator, accounts: bool = True) -> CommittedLog:
    """Sequence ids 1..WITHHELD_LOG committed in a signed checkpoint, WITHHELD withheld:
    left out of the holdings it signs (`accounts`), or no holdings signed at all."""
    raws = [o.message(s, b"m%d" % s) for s in range(1, WITHHELD_LOG + 1)]
    return CommittedLog(o.node_id, o.key, raws, frozenset({WITHHELD}), accounts)


def withholding(o: Originator) -> Behavior:
    """Never serves WITHHELD, on its stream or when asked, and signs holdings of its log
    that leave it out."""
    log = committed_log(o)
    return Behavior([log.served], log=log)


def quiet(o: Originator) -> Behavior:
    """Nothing wrong on its replication API."""
    return Behavior([[o.message(1, b"one")]])


def unresponsive(o: Originator) -> Behavior:
    return Behavior([[o.message(1, b"one")]], delay_s=None)


def slow(delay_s: float) -> Script:
    def behavior(o: Originator) -> Behavior:
        return Behavior([[o.message(1, b"one")]], delay_s=delay_s)

    return behavior


class MisbehavingPeer:
    """The server. Streams asking for other originators end at once with nothing: it relays
    nobody, which is no misbehavior (relays are a fallback)."""

    def __init__(self, node_id: int, behavior: Behavior) -> None:
        self.node_id = node_id
        self.behavior = behavior
        self.streams = 0
        # what QueryEnvelopes answers (a watchdog asks, repair fetches)
        self.served: list[bytes] = behavior.log.served if behavior.log is not None else []
        self._server: grpc.aio.Server | None = None

    async def _query(self, request: bytes, _context: Any) -> bytes:
        """`served`, by the query's originators and cursor, up to its limit."""
        query = api.QueryEnvelopesRequest.FromString(request)
        originators = set(query.query.originator_node_ids)
        after = query.query.last_seen.node_id_to_sequence_id
        envelopes = []
        for raw in self.served:
            envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
            unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                envelope.unsigned_originator_envelope
            )
            node, seq = unsigned.originator_node_id, unsigned.originator_sequence_id
            if (not originators or node in originators) and seq > after.get(node, 0):
                envelopes.append(envelope)
        limit = query.limit or len(envelopes)
        answer: bytes = api.QueryEnvelopesResponse(envelopes=envelopes[:limit]).SerializeToString()
        return answer

    async def _subscribe(self, request: bytes, _context: Any) -> AsyncIterator[bytes]:
        parsed = api.SubscribeOriginatorsRequest.FromString(request)
        if list(parsed.filter.originator_node_ids) != [self.node_id]:
            return
        index = self.streams
        self.streams += 1
        delay_s = self.behavior.delay_s
        if delay_s is None:
            await asyncio.Event().wait()  # never answers
        else:
            await asyncio.sleep(delay_s)
        scripts = self.behavior.streams
        yield wire.field(1, wire.repeated(1, scripts[min(index, len(scripts) - 1)]))
        if index >= len(scripts) - 1:
            await asyncio.Event().wait()  # the last stream stays open

    async def _health(self, _request: bytes, _context: Any) -> bytes:
        serving = HealthCheckResponse.SERVING
        answer: bytes = HealthCheckResponse(status=serving).SerializeToString()
        return answer

    async def start(self, address: str) -> None:
        server = grpc.aio.server()
        subscribe = grpc.unary_stream_rpc_method_handler(
            self._subscribe, request_deserializer=bytes, response_serializer=bytes
        )
        check = grpc.unary_unary_rpc_method_handler(
            self._health, request_deserializer=bytes, response_serializer=bytes
        )
        query = grpc.unary_unary_rpc_method_handler(
            self._query, request_deserializer=bytes, response_serializer=bytes
        )
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    REPLICATION, {"SubscribeOriginators": subscribe, "QueryEnvelopes": query}
                ),
                grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": check}),
            ]
        )
        if self.behavior.log is not None:
            server.add_generic_rpc_handlers(LogService(self.behavior.log).handlers())
        server.add_insecure_port(address)
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
