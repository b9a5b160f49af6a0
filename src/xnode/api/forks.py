"""ForkApi (xnode.forks.v1): every signed version of each forked (originator,
sequence id) this node keeps, the log's version first, and their digest (anti-entropy compares
it before paging). Translates protobuf only; errors go through api.errors."""

from __future__ import annotations

from typing import Any

import grpc

from xnode.api.errors import errors_mapped
from xnode.core.cursors import MAX_SEQUENCE_ID
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.ports import ForkEvidence
from xnode_api.forks.v1 import forks_pb2 as pb
from xnode_api.forks.v1 import forks_pb2_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ForkApi"].full_name
MAX_FORKS = 1000

Context = grpc.aio.ServicerContext[Any, Any]


class ForkService:
    def __init__(self, forks: ForkEvidence) -> None:
        self._forks = forks

    async def QueryForks(
        self, request: pb.QueryForksRequest, context: Context
    ) -> pb.QueryForksResponse:
        limit = request.limit if 0 < request.limit <= MAX_FORKS else MAX_FORKS
        after = min(request.after_sequence_id, MAX_SEQUENCE_ID)  # nothing is stored beyond
        found = await self._forks.forks(request.originator_node_id, after, limit)
        return pb.QueryForksResponse(
            forks=[
                pb.Fork(
                    originator_node_id=f.originator_node_id,
                    originator_sequence_id=f.sequence_id,
                    versions=list(f.versions),
                )
                for f in found
            ]
        )

    async def GetForkDigest(
        self, request: pb.GetForkDigestRequest, context: Context
    ) -> pb.GetForkDigestResponse:
        found = await self._forks.digest(request.originator_node_id)
        return pb.GetForkDigestResponse(versions=found.versions, digest=found.digest)


def add_fork_service(service: ForkService, server: grpc.aio.Server, outage: DatabaseOutage) -> None:
    mapped = errors_mapped(service, pb.DESCRIPTOR.services_by_name["ForkApi"], "forks", outage)
    forks_pb2_grpc.add_ForkApiServicer_to_server(mapped, server)
