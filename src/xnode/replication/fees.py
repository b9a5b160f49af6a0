"""The fee schedules of the other originators (XIP-49 3.2.1), fetched from each peer's
FeesApi so replicated envelopes can be checked against them. A peer that does not serve the
API (UNIMPLEMENTED) is not checked; one that cannot be reached now is asked again later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import grpc
import structlog

from xnode.core.backoff import Backoff
from xnode.core.fees import FeeSchedule
from xnode.core.retention import DEFAULT_RETENTION_DAYS
from xnode.usecases.concurrency import end_if_cancelled
from xnode_api.fees.v1 import fees_pb2, fees_pb2_grpc

log = structlog.get_logger(__name__)

REFRESH_S = 600.0
TIMEOUT_S = 5.0


def schedule_from_proto(message: fees_pb2.FeeSchedule) -> FeeSchedule | None:
    """None for a schedule this node cannot check by (another default retention)."""
    if message.default_retention_days not in (0, DEFAULT_RETENTION_DAYS):
        return None
    return FeeSchedule(
        message.envelope_picodollars,
        message.byte_day_picodollars,
        max(1, message.target_rate),
        message.congestion_step_picodollars,
        message.congestion_max_picodollars,
    )


class FeeSchedules:
    """Schedule per originator id, kept fresh by one follower task per peer."""

    def __init__(self, backoff_initial_s: float = 0.5, backoff_max_s: float = 30.0) -> None:
        self._schedules: dict[int, FeeSchedule] = {}
        self._backoff = (backoff_initial_s, backoff_max_s)

    def current(self) -> Mapping[int, FeeSchedule]:
        return self._schedules

    async def follow(
        self,
        node_id: int,
        channel_of: Callable[[], grpc.aio.Channel | None],
        metadata: Callable[[], Sequence[tuple[str, str]]] = lambda: (),
    ) -> None:
        """Fetches `node_id`'s schedule until it says it has none or `channel_of` returns
        None (the peer left the registry); `metadata`: this node's token for the peer, so
        the calls count as a peer's, not as a client IP's."""
        backoff = Backoff(*self._backoff)
        while (channel := channel_of()) is not None:
            stub = fees_pb2_grpc.FeesApiStub(channel)
            try:
                answer = await stub.GetFeeSchedule(
                    fees_pb2.GetFeeScheduleRequest(), timeout=TIMEOUT_S, metadata=metadata()
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._schedules.pop(node_id, None)
                    log.info("peer_fees_unchecked", peer=node_id, reason="no FeesApi")
                    return
                end_if_cancelled()
                await asyncio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            schedule = schedule_from_proto(answer.schedule)
            if schedule is None or answer.node_id != node_id:
                self._schedules.pop(node_id, None)
            else:
                self._schedules[node_id] = schedule
            await asyncio.sleep(REFRESH_S)
        self._schedules.pop(node_id, None)
