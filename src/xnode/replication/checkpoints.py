"""Checkpoints travel with replication: next to each peer stream of an originator's
envelopes, a SubscribeCheckpoints stream from the same peer for that originator's checkpoints.
Each is verified and stored by xnode.usecases.logs.CheckpointIntake. A peer answering
UNIMPLEMENTED predates LogApi: its envelopes keep flowing, its checkpoints are not followed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import grpc
import structlog

from xnode.core.backoff import Backoff
from xnode.core.checkpoints import Checkpoint, CheckpointError, has_log, verify_checkpoint
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.concurrency import end_if_cancelled
from xnode.usecases.logs import CheckpointIntake
from xnode.usecases.ports import StoreUnavailable
from xnode_api.logs.v1 import logs_pb2 as pb

log = structlog.get_logger(__name__)

_SERVICE = "/" + pb.DESCRIPTOR.services_by_name["LogApi"].full_name
SUBSCRIBE_CHECKPOINTS = _SERVICE + "/SubscribeCheckpoints"
GET_CONSISTENCY_PROOF = _SERVICE + "/GetConsistencyProof"
GET_CHECKPOINTS = _SERVICE + "/GetCheckpoints"
PROOF_TIMEOUT_S = 10.0


class CheckpointFollower:
    def __init__(
        self,
        intake: CheckpointIntake,
        keys: Callable[[], Mapping[int, bytes]],
        backoff: Callable[[], Backoff],
        outage: DatabaseOutage,
        metadata: Callable[[int], Sequence[tuple[str, str]]] = lambda peer: (),
    ) -> None:
        """A lost store is told to `outage`; `metadata(peer)`: this node's token for the
        peer, so its follows count as a peer's, not as a client IP's subscriptions."""
        self._metadata = metadata
        self._intake = intake
        self._keys = keys
        self._backoff = backoff
        self._outage = outage
        self._locks: dict[int, asyncio.Lock] = {}

    async def alongside(
        self,
        stream: Callable[[], Coroutine[Any, Any, None]],
        channel: Callable[[], grpc.aio.Channel],
        peer: int,
        originator: int,
    ) -> None:
        """Runs `stream()` (a peer stream) with the checkpoint follower of the same peer and
        originator, on the stream's channel of each attempt; both end together."""
        if not has_log(originator):
            await stream()
            return
        follower = asyncio.create_task(self.run(channel, peer, originator))
        try:
            await stream()
        finally:
            follower.cancel()
            await asyncio.wait([follower])

    async def run(
        self, channel: Callable[[], grpc.aio.Channel], peer: int, originator: int
    ) -> None:
        backoff = self._backoff()
        bound = log.bind(peer=peer, originator=originator)
        while True:
            try:
                await self._follow(channel(), peer, originator)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    bound.info("peer_without_log_api")
                    return
                bound.info("checkpoint_stream_failed", code=exc.code().name)
            except StoreUnavailable as exc:  # the envelopes carry on anyway
                self._outage.failed("checkpoint_follower", exc, peer=peer, originator=originator)
            except Exception as exc:
                bound.warning("checkpoint_follow_failed", error=repr(exc))
            end_if_cancelled()
            await asyncio.sleep(backoff.next_delay())

    async def _follow(self, channel: grpc.aio.Channel, peer: int, originator: int) -> None:
        subscribe = channel.unary_stream(
            SUBSCRIBE_CHECKPOINTS,
            request_serializer=pb.SubscribeCheckpointsRequest.SerializeToString,
            response_deserializer=pb.SubscribeCheckpointsResponse.FromString,
        )
        get_proof = channel.unary_unary(
            GET_CONSISTENCY_PROOF,
            request_serializer=pb.GetConsistencyProofRequest.SerializeToString,
            response_deserializer=pb.GetConsistencyProofResponse.FromString,
        )

        async def consistency(first: int, second: int) -> list[bytes]:
            request = pb.GetConsistencyProofRequest(
                originator_node_id=originator, first_size=first, second_size=second
            )
            response = await get_proof(
                request, timeout=PROOF_TIMEOUT_S, metadata=self._metadata(peer)
            )
            return list(response.proof)

        after = await self._intake.after(originator)
        request = pb.SubscribeCheckpointsRequest(
            originator_node_id=originator, after_sequence_id=after
        )
        async for response in subscribe(request, metadata=self._metadata(peer)):
            for checkpoint in response.checkpoints:
                key = self._keys().get(originator)
                if key is None:
                    continue  # not (or no longer) in the registry: nothing to verify against
                lock = self._locks.setdefault(originator, asyncio.Lock())
                async with lock:  # direct and fallback followers of one originator
                    await self._intake.receive(
                        checkpoint.SerializeToString(), key, consistency, peer
                    )


class Watermarks:
    """An originator's watermark for the order checks (replication.ingest.Watermark): the
    tree size of its newest checkpoint stored here or, when the peer serving its envelopes
    holds a newer one, of that one (its signature checked against the registry key: the
    originator itself vouches that the ids below were published). Asked only when an order
    check fails, so a log whose early envelopes expired is judged by its checkpoints even
    before the checkpoint follower has caught up."""

    def __init__(
        self,
        intake: CheckpointIntake,
        keys: Callable[[], Mapping[int, bytes]],
        channel: Callable[[int], grpc.aio.Channel | None],
    ) -> None:
        self._intake = intake
        self._keys = keys
        self._channel = channel

    async def __call__(self, originator: int, source: int) -> int:
        stored = await self._intake.after(originator)
        channel, key = self._channel(source), self._keys().get(originator)
        if channel is None or key is None or not has_log(originator):
            return stored
        newest = await latest_checkpoint(channel, originator, key, source)
        return max(stored, newest.tree_size) if newest is not None else stored


async def latest_checkpoint(
    channel: grpc.aio.Channel, originator: int, key: bytes, peer: int
) -> Checkpoint | None:
    """The newest checkpoint of `originator` that `peer` holds, verified against the
    originator's registry `key` (None: none that verifies)."""
    get = channel.unary_unary(
        GET_CHECKPOINTS,
        request_serializer=pb.GetCheckpointsRequest.SerializeToString,
        response_deserializer=pb.GetCheckpointsResponse.FromString,
    )
    request = pb.GetCheckpointsRequest(originator_node_id=originator, latest=True)
    response = await get(request, timeout=PROOF_TIMEOUT_S)
    newest = None
    for found in response.checkpoints:
        try:
            checkpoint = verify_checkpoint(found.SerializeToString(), key)
        except CheckpointError as exc:
            log.warning("checkpoint_rejected", peer=peer, reason=str(exc))
            continue
        if checkpoint.originator_node_id != originator:
            continue
        if newest is None or checkpoint.tree_size > newest.tree_size:
            newest = checkpoint
    return newest
