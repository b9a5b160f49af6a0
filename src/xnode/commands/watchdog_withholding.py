"""The watchdog's withholding check: a node that serves its own log with sequence ids skipped
(xnode.core.watchdog.skipped) that its own latest checkpoint covers is asked for its signed
holdings of them, as repair asks an originator (replication.withholding.WithholdingCheck,
the same check). Holdings that contradict its checkpoint are a WITHHOLDING report, which
proves itself. Holdings that name them expired prove nothing; nor does a non-answer (an
honest node healing a loss answers UNAVAILABLE and signs nothing): the ids are asked again
each round, and a non-answer that lasts `withholding_patience_seconds` is filed as a
WITHHOLDING_ACCUSATION, as a node only (nodes take none from clients)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import grpc
import structlog

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.registry import NodeEntry
from xnode.core.withholding import MAX_HOLDINGS_SPAN
from xnode.replication.checkpoints import latest_checkpoint
from xnode.replication.repair_peer import GrpcRepairPeer
from xnode.replication.withholding import WithholdingCheck

log = structlog.get_logger(__name__)


class Found:
    """What the check files, kept for the watchdog's round (replication.ports'
    MisbehaviorRecorder)."""

    def __init__(self) -> None:
        self.reports: list[mb.UnsignedMisbehaviorReport] = []

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        log.info("watchdog_withholding_found", node_id=unsigned.misbehaving_node_id, detail=detail)
        self.reports.append(unsigned)


class OwnLogs:
    """Per node, the sequence ids of its own log it skipped and has not accounted for."""

    def __init__(
        self,
        keys: Callable[[int], Collection[bytes]],
        channel: Callable[[int], grpc.aio.Channel],
        patience_s: float | None,
    ) -> None:
        """`patience_s` None: non-answers are never filed (the watchdog runs as a client)."""
        self._found = Found()
        self._check = WithholdingCheck(self._found, keys, patience_s=patience_s)
        self._channel = channel
        self._pending: dict[int, list[int]] = {}

    async def look(self, node: NodeEntry, skipped: list[int]) -> list[mb.UnsignedMisbehaviorReport]:
        """The reports this node's `skipped` ids (and those of earlier rounds still
        unaccounted for) prove or, past the patience, accuse it of."""
        node_id = node.node_id
        wanted = self._check.unsettled(node_id, {*self._pending.get(node_id, ()), *skipped})
        if not wanted:
            return []
        channel = self._channel(node_id)
        try:
            checkpoint = await latest_checkpoint(channel, node_id, node.public_key, node_id)
            if checkpoint is not None:
                # No node token: the watchdog asks as any client would, so that a node
                # cannot serve it apart from its clients.
                peer = GrpcRepairPeer(node_id, channel)
                await self._check.check(peer, node_id, checkpoint, wanted, {})
        except grpc.aio.AioRpcError as exc:  # no LogApi, or down: asked again next round
            log.info("watchdog_withholding_unchecked", node_id=node_id, status=exc.code().name)
        except Exception as exc:  # nonsense answers (proofs that do not fit) stop no round
            log.info("watchdog_withholding_unchecked", node_id=node_id, status=repr(exc)[:300])
        self._pending[node_id] = self._check.unsettled(node_id, wanted)[:MAX_HOLDINGS_SPAN]
        found, self._found.reports = self._found.reports, []
        return found
