"""A read-only node's misbehavior recorder (XIP-49 3.4): it is not a registered node, so it
files no reports; what it saw is logged, and left to the registered nodes that see it too."""

from __future__ import annotations

import structlog

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.misbehavior import type_name

log = structlog.get_logger(__name__)


class UnfiledReports:
    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        log.warning(
            "misbehavior_seen_not_filed",
            type=type_name(unsigned.type),
            node_id=unsigned.misbehaving_node_id,
            detail=detail,
            reason="read-only node",
        )
