"""PublishClientEnvelopes: sign each ClientEnvelope for its topic's preferred originator and
forward it there, failing over to the next preferred node while one is unavailable.

Envelopes are sent in request order as runs of consecutive envelopes bound for one node, one
PublishPayerEnvelopes call per run, each run after the previous one answered. So the answer
keeps the request's order, and when a run fails, everything before it is stored and nothing
after it was sent. The answer is given only after every node answered, i.e. after every
envelope is durable on its originator (or, for commits and identity updates, on the chain).
A call names the client it is made for in `x-forwarded-for` (api.proxies), so nodes that
trust the gateway limit each client apart; one that combines several clients' runs
(gateway/batching.py) names none."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
import structlog
from google.protobuf.message import DecodeError

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.errors import STATUS_OF
from xnode.api.proxies import forwarded_for
from xnode.core.crypto import SigningKey, payer_digest
from xnode.core.envelopes import validate_payer_envelope
from xnode.core.errors import Rejected
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import NodeEntry
from xnode.core.topics import Topic, TopicError
from xnode.gateway.batching import Coalescer
from xnode.gateway.channels import NodeChannels, UnusableUrl
from xnode.gateway.errors import GatewayError, NodeUnavailable, invalid, node_error, stored_note
from xnode.gateway.node_health import NodeHealth
from xnode.gateway.visibility import wait_visible
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)

PUBLISH_METHOD = "/xmtp.xmtpv4.message_api.PublishApi/PublishPayerEnvelopes"
MAX_ENVELOPES = 1000  # what one node takes in one request
# Batches this large are signed and checked in a worker thread: secp256k1 releases the GIL.
THREAD_PLANNING_MIN = 32
# Calls outstanding to one node before further runs for it wait and are combined
# (gateway/batching.py).
FORWARDS_IN_FLIGHT = 2


class AnswerMismatch(Exception):
    """The node answered a different number of envelopes than it was sent."""


@dataclass
class _Planned:
    """One client envelope: its bytes as received and the nodes it may go to, best first."""

    index: int
    raw: bytes
    candidates: list[int]
    # Commits and identity updates go on the chain path: never combined with other requests.
    needs_chain: bool
    # Payer envelopes signed so far, by target: the signature covers the target.
    signed: dict[int, envelopes_pb2.PayerEnvelope] = field(default_factory=dict)

    def target(self, excluded: set[int]) -> int | None:
        return next((n for n in self.candidates if n not in excluded), None)


def sign_for(
    raw_client_envelope: bytes, key: SigningKey, target: int, retention_days: int
) -> envelopes_pb2.PayerEnvelope:
    return envelopes_pb2.PayerEnvelope(
        unsigned_client_envelope=raw_client_envelope,
        payer_signature=signature_pb2.RecoverableEcdsaSignature(
            bytes=key.sign(payer_digest(target, raw_client_envelope))
        ),
        target_originator=target,
        message_retention_days=retention_days,
    )


def check_count(raws: Sequence[bytes]) -> None:
    """A request no node would take (INVALID_ARGUMENT), whatever the client's limits."""
    if not raws:
        raise GatewayError(grpc.StatusCode.INVALID_ARGUMENT, "envelopes is empty")
    if len(raws) > MAX_ENVELOPES:
        raise GatewayError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{len(raws)} envelopes in one request, the limit is {MAX_ENVELOPES}",
        )


class Publisher:
    def __init__(
        self,
        registry: RegistrySource,
        key: SigningKey,
        channels: NodeChannels,
        health: NodeHealth,
        timeout_s: float,
        retention_days: int = 0,
        visibility_s: float = 0.0,
    ) -> None:
        self._registry = registry
        self._key = key
        self._channels = channels
        self._health = health
        self._timeout_s = timeout_s
        self._retention_days = retention_days
        self._visibility_s = visibility_s
        self._coalescer = Coalescer(self._call, MAX_ENVELOPES, FORWARDS_IN_FLIGHT)

    async def publish(self, raws: Sequence[bytes], client: str) -> list[bytes]:
        """Serialized OriginatorEnvelopes, one per client envelope, in request order;
        `client`: the address the request came from, named to the nodes."""
        check_count(raws)
        registry = self._registry.current()
        nodes = available_nodes(registry)
        if len(raws) >= THREAD_PLANNING_MIN:
            planned = await asyncio.to_thread(self._plan_all, raws, nodes)
        else:
            planned = self._plan_all(raws, nodes)
        answers = await self._send_runs(planned, client)
        await wait_visible(self._channels, self._health, nodes, answers, self._visibility_s, client)
        return answers

    def _plan_all(self, raws: Sequence[bytes], nodes: list[NodeEntry]) -> list[_Planned]:
        return [self._plan(i, raw, nodes) for i, raw in enumerate(raws)]

    def _plan(self, index: int, raw: bytes, nodes: list[NodeEntry]) -> _Planned:
        client = envelopes_pb2.ClientEnvelope()
        try:
            client.ParseFromString(raw)
        except DecodeError as exc:
            raise invalid(index, f"does not decode as a ClientEnvelope: {exc}") from None
        if not client.HasField("aad"):
            raise invalid(index, "client envelope has no authenticated data (aad)")
        try:
            topic = Topic.parse(client.aad.target_topic)
        except TopicError as exc:
            raise invalid(index, f"aad.target_topic: {exc}") from None
        candidates = self._candidates(index, client.aad.target_originator, topic, nodes)
        # The node's own stateless rules, checked here so a bad envelope is refused before
        # anything of the request is sent.
        signed = self._sign(raw, candidates[0])
        try:
            valid = validate_payer_envelope(signed, candidates[0])
        except Rejected as exc:
            raise GatewayError(STATUS_OF[exc.reason], f"envelopes[{index}]: {exc.detail}") from None
        return _Planned(index, raw, candidates, valid.needs_chain, {candidates[0]: signed})

    def _candidates(
        self, index: int, pinned: int, topic: Topic, nodes: list[NodeEntry]
    ) -> list[int]:
        if pinned:
            # XIP-49 3.3.2: a payer forwards a payload to the originator its AAD names.
            if pinned not in {n.node_id for n in nodes}:
                raise invalid(
                    index, f"aad.target_originator {pinned} is not an enabled node of the registry"
                )
            return [pinned]
        order = failover_order(topic.raw, nodes)
        if not order:
            raise GatewayError(
                grpc.StatusCode.UNAVAILABLE, "the registry lists no enabled node; retry later"
            )
        # Nodes that just failed go last: they are still tried before giving up.
        return sorted(order, key=self._channels.recently_down)

    def _sign(self, raw: bytes, target: int) -> envelopes_pb2.PayerEnvelope:
        return sign_for(raw, self._key, target, self._retention_days)

    def _signed_for(self, planned: _Planned, target: int) -> envelopes_pb2.PayerEnvelope:
        if target not in planned.signed:
            planned.signed[target] = self._sign(planned.raw, target)
        return planned.signed[target]

    async def _send_runs(self, planned: list[_Planned], client: str) -> list[bytes]:
        answers: list[bytes] = []
        excluded: set[int] = set()
        unavailable: dict[int, str] = {}
        start = 0
        while start < len(planned):
            target = planned[start].target(excluded)
            if target is None:
                tried = "; ".join(f"node {n}: {d}" for n, d in unavailable.items())
                raise GatewayError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"envelopes[{start}]: no node could take it ({tried}); retry later"
                    + stored_note(start),
                )
            end = start + 1
            while end < len(planned) and planned[end].target(excluded) == target:
                end += 1
            try:
                answers += await self._send(target, client, planned[start:end], start)
            except NodeUnavailable as exc:
                log.warning("gateway_node_unavailable", node_id=target, error=exc.detail)
                self._channels.mark_down(target)
                excluded.add(target)
                unavailable[target] = exc.detail
                continue
            self._channels.mark_up(target)
            start = end
        return answers

    async def _send(
        self, node_id: int, client: str, run: list[_Planned], start: int
    ) -> list[bytes]:
        envelopes = [self._signed_for(p, node_id) for p in run]
        try:
            if any(p.needs_chain for p in run):
                return await self._call(node_id, envelopes, client)
            return await self._coalescer.send(node_id, envelopes, client)
        except grpc.aio.AioRpcError as exc:
            raise node_error(node_id, exc, start, len(run)) from None
        except AnswerMismatch as exc:
            raise GatewayError(grpc.StatusCode.INTERNAL, f"{exc}" + stored_note(start)) from None

    async def _call(
        self, node_id: int, envelopes: list[envelopes_pb2.PayerEnvelope], client: str
    ) -> list[bytes]:
        """One PublishPayerEnvelopes call to the node, which may carry several requests' runs;
        `client` names the one client they all came from ("" for several: none named)."""
        entry = self._registry.current().get(node_id)
        if entry is None:  # dropped from the registry since the run was planned
            raise NodeUnavailable(node_id, "no longer an enabled node of the registry")
        try:
            channel = self._channels.channel(entry.http_address)
        except UnusableUrl as exc:
            raise NodeUnavailable(node_id, str(exc)) from None
        call = channel.unary_unary(
            PUBLISH_METHOD,
            request_serializer=api.PublishPayerEnvelopesRequest.SerializeToString,
            response_deserializer=api.PublishPayerEnvelopesResponse.FromString,
        )
        request = api.PublishPayerEnvelopesRequest(payer_envelopes=envelopes)
        pending = call(request, timeout=self._timeout_s, metadata=forwarded_for(client))
        with self._health.cut_when_down(node_id, pending) as down:
            try:
                response = await pending
            except asyncio.CancelledError:
                if not down.is_set():
                    raise
                # Frozen or cut off: it may still store them when it wakes, and they are then
                # originated twice, which XIP-49 3.3.4 allows a payer that retries elsewhere
                # (MLS drops the second copy). Waiting would stall the conversation instead.
                raise NodeUnavailable(node_id, "failed its health check while publishing") from None
        got = [e.SerializeToString() for e in response.originator_envelopes]
        if len(got) != len(envelopes):
            log.error(
                "gateway_node_answer_mismatch", node_id=node_id, sent=len(envelopes), got=len(got)
            )
            raise AnswerMismatch(
                f"node {node_id} answered {len(got)} envelopes for {len(envelopes)} sent"
            )
        return got
