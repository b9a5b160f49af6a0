"""Helpers for committed-log tests: a LogApi client and waiting on conditions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from tests.support.waiting import eventually
from xnode.core.checkpoints import Checkpoint, envelope_leaf, verify_checkpoint
from xnode_api.logs.v1 import logs_pb2 as pb
from xnode_api.logs.v1 import logs_pb2_grpc

# Checkpoints every few envelopes and fractions of a second, so tests see them soon.
FAST_CHECKPOINTS: dict[str, Any] = {"log_checkpoint_envelopes": 10, "log_checkpoint_seconds": 0.2}


@asynccontextmanager
async def log_api(address: str) -> AsyncIterator[logs_pb2_grpc.LogApiStub]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield logs_pb2_grpc.LogApiStub(channel)


def leaves_of(raws: list[bytes]) -> list[bytes]:
    """The leaves of signed OriginatorEnvelopes (format 2: content and expiry)."""
    return [envelope_leaf(r) for r in raws]


async def checkpoints(
    api: logs_pb2_grpc.LogApiStub, originator: int, public_key: bytes, after: int = 0
) -> list[Checkpoint]:
    response = await api.GetCheckpoints(
        pb.GetCheckpointsRequest(originator_node_id=originator, after_sequence_id=after)
    )
    return [verify_checkpoint(c.SerializeToString(), public_key) for c in response.checkpoints]


async def checkpoint_at(
    api: logs_pb2_grpc.LogApiStub, originator: int, public_key: bytes, size: int
) -> Checkpoint:
    """Waits for the originator's checkpoint of exactly `size` leaves."""
    found: list[Checkpoint] = []

    async def issued() -> bool:
        found[:] = [
            c for c in await checkpoints(api, originator, public_key) if c.tree_size == size
        ]
        return bool(found)

    await eventually(issued)
    return found[0]
