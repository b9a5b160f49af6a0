"""LogApi (xnode.logs.v1): checkpoints, inclusion and consistency proofs, range
fingerprints and leaves of the committed logs this node holds. Translates protobuf only
(errors go through api.errors); the answers come from xnode.usecases.logs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from xnode.api.errors import Statuses, errors_mapped
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint
from xnode.core.reconciliation import SequenceRange
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.logs import LogQueries, NotHeld
from xnode_api.logs.v1 import logs_pb2 as pb
from xnode_api.logs.v1 import logs_pb2_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LogApi"].full_name
MAX_ID = 2**63 - 1  # the store keeps sequence ids and sizes as bigint
MAX_NODE_ID = 2**31 - 1  # and node ids as integer

Context = grpc.aio.ServicerContext[Any, Any]


def _proto(checkpoints: Sequence[Checkpoint]) -> list[pb.Checkpoint]:
    return [pb.Checkpoint.FromString(c.signed) for c in checkpoints]


def _ranges(ranges: Sequence[pb.SequenceRange]) -> list[SequenceRange]:
    out = []
    for r in ranges:
        if r.last > MAX_ID:
            raise ValueError(f"range {r.first}..{r.last} is beyond the largest sequence id")
        out.append(SequenceRange(r.first, r.last))
    return out


def _bounded(*values: int) -> None:
    if any(v > MAX_ID for v in values):
        raise ValueError(f"sequence ids and tree sizes are at most {MAX_ID}")


def _node(originator: int) -> int:
    if originator > MAX_NODE_ID:
        raise ValueError(f"originator_node_id {originator}: node ids are at most {MAX_NODE_ID}")
    return originator


# The LogApi's own errors (the first that matches wins).
LOG_STATUSES: Statuses = {
    NotHeld: grpc.StatusCode.NOT_FOUND,
    merkle.ProofError: grpc.StatusCode.FAILED_PRECONDITION,
    ValueError: grpc.StatusCode.INVALID_ARGUMENT,
}


class LogService:
    def __init__(self, queries: LogQueries) -> None:
        self._queries = queries

    async def GetCheckpoints(
        self, request: pb.GetCheckpointsRequest, context: Context
    ) -> pb.GetCheckpointsResponse:
        _bounded(request.after_sequence_id)
        found = await self._queries.checkpoints(
            _node(request.originator_node_id),
            request.after_sequence_id,
            request.latest,
            request.limit,
        )
        return pb.GetCheckpointsResponse(checkpoints=_proto(found))

    async def SubscribeCheckpoints(
        self, request: pb.SubscribeCheckpointsRequest, context: Context
    ) -> AsyncIterator[pb.SubscribeCheckpointsResponse]:
        _bounded(request.after_sequence_id)
        async for found in self._queries.follow(  # Rejected(UNAVAILABLE) as the node drains
            _node(request.originator_node_id), request.after_sequence_id
        ):
            yield pb.SubscribeCheckpointsResponse(checkpoints=_proto(found))

    async def GetInclusionProof(
        self, request: pb.GetInclusionProofRequest, context: Context
    ) -> pb.GetInclusionProofResponse:
        _bounded(request.sequence_id, request.tree_size)
        found = await self._queries.inclusion(
            _node(request.originator_node_id), request.sequence_id, request.tree_size
        )
        response = pb.GetInclusionProofResponse(
            leaf_hash=found.leaf, tree_size=found.tree_size, proof=found.proof
        )
        if found.checkpoint is not None:
            response.checkpoint.CopyFrom(pb.Checkpoint.FromString(found.checkpoint.signed))
        return response

    async def GetRunProofs(
        self, request: pb.GetRunProofsRequest, context: Context
    ) -> pb.GetRunProofsResponse:
        _bounded(request.tree_size)
        size, proofs = await self._queries.run_proofs(
            _node(request.originator_node_id), request.tree_size, _ranges(request.runs)
        )
        return pb.GetRunProofsResponse(
            tree_size=size,
            proofs=[pb.RunProof(first_proof=p.first, last_proof=p.last) for p in proofs],
        )

    async def GetConsistencyProof(
        self, request: pb.GetConsistencyProofRequest, context: Context
    ) -> pb.GetConsistencyProofResponse:
        _bounded(request.first_size, request.second_size)
        proof = await self._queries.consistency(
            _node(request.originator_node_id), request.first_size, request.second_size
        )
        return pb.GetConsistencyProofResponse(proof=proof)

    async def GetFingerprints(
        self, request: pb.GetFingerprintsRequest, context: Context
    ) -> pb.GetFingerprintsResponse:
        found = await self._queries.fingerprints(
            _node(request.originator_node_id), _ranges(request.ranges)
        )
        return pb.GetFingerprintsResponse(
            fingerprints=[pb.Fingerprint(count=f.count, xor=f.xor) for f in found]
        )

    async def GetLeaves(
        self, request: pb.GetLeavesRequest, context: Context
    ) -> pb.GetLeavesResponse:
        found = await self._queries.leaves(
            _node(request.originator_node_id), _ranges(request.ranges)
        )
        return pb.GetLeavesResponse(leaves=[pb.Leaf(sequence_id=s, leaf_hash=h) for s, h in found])


def add_log_service(service: LogService, server: grpc.aio.Server, outage: DatabaseOutage) -> None:
    descriptor = pb.DESCRIPTOR.services_by_name["LogApi"]
    mapped = errors_mapped(service, descriptor, "logs", outage, LOG_STATUSES)
    logs_pb2_grpc.add_LogApiServicer_to_server(mapped, server)
