"""CompletenessApi (xnode.completeness.v1): signed, proven answers to "everything of these
topics after this cursor" per originator (xnode.usecases.completeness). Translates protobuf
only; errors go through api.errors."""

from __future__ import annotations

from typing import Any

import grpc

from xnode.api.errors import Statuses, errors_mapped
from xnode.core import merkle
from xnode.core.withholding import Healing
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.completeness import CompletenessAnswers
from xnode.usecases.logs import NotHeld
from xnode_api.completeness.v1 import completeness_pb2 as pb
from xnode_api.completeness.v1 import completeness_pb2_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CompletenessApi"].full_name
# Healing: an entry this node lost and is fetching back; another node may answer now.
STATUSES: Statuses = {
    Healing: grpc.StatusCode.UNAVAILABLE,
    NotHeld: grpc.StatusCode.NOT_FOUND,
    merkle.ProofError: grpc.StatusCode.FAILED_PRECONDITION,
}

Context = grpc.aio.ServicerContext[Any, Any]


class CompletenessService:
    def __init__(self, answers: CompletenessAnswers) -> None:
        self._answers = answers

    async def ProveTopics(
        self, request: pb.ProveTopicsRequest, context: Context
    ) -> pb.ProveTopicsResponse:
        topics = [(t.topic, t.after_sequence_id) for t in request.topics]
        answers = await self._answers.prove(request.originator_node_id, topics)
        return pb.ProveTopicsResponse(answers=answers)


def add_completeness_service(
    service: CompletenessService, server: grpc.aio.Server, outage: DatabaseOutage
) -> None:
    descriptor = pb.DESCRIPTOR.services_by_name["CompletenessApi"]
    mapped = errors_mapped(service, descriptor, "completeness", outage, STATUSES)
    completeness_pb2_grpc.add_CompletenessApiServicer_to_server(mapped, server)
