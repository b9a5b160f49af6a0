"""FeesApi (xnode.fees.v1): serves this originator's fee schedule, so peers can hold the
fees it signs to it (XIP-49 3.2.1)."""

from __future__ import annotations

from typing import Any

import grpc

from xnode.core.fees import FeeSchedule
from xnode.core.retention import DEFAULT_RETENTION_DAYS
from xnode_api.fees.v1 import fees_pb2, fees_pb2_grpc

SERVICE_NAME = fees_pb2.DESCRIPTOR.services_by_name["FeesApi"].full_name


def schedule_to_proto(schedule: FeeSchedule) -> fees_pb2.FeeSchedule:
    return fees_pb2.FeeSchedule(
        envelope_picodollars=schedule.envelope_picodollars,
        byte_day_picodollars=schedule.byte_day_picodollars,
        target_rate=schedule.target_rate,
        congestion_step_picodollars=schedule.congestion_step_picodollars,
        congestion_max_picodollars=schedule.congestion_max_picodollars,
        default_retention_days=DEFAULT_RETENTION_DAYS,
    )


class FeesService(fees_pb2_grpc.FeesApiServicer):
    def __init__(self, node_id: int, schedule: FeeSchedule) -> None:
        self._answer = fees_pb2.GetFeeScheduleResponse(
            node_id=node_id, schedule=schedule_to_proto(schedule)
        )

    async def GetFeeSchedule(
        self, request: fees_pb2.GetFeeScheduleRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> fees_pb2.GetFeeScheduleResponse:
        return self._answer
