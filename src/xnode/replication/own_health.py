"""A node whose own database is down, or that is stopping, files no liveness reports
against its peers.

When this node's database is unreachable, its peers' failures are most likely its own (a
shared Postgres stopped, a network cut on this side) or theirs for the same cause: accusing
them would flag honest nodes. So each UNRESPONSIVE / SLOW / FAILED_REQUEST report is filed
only when this node's own store answers its probe and has answered every probe for
`settle_s` before; otherwise it is withheld (logged, counted) and so deferred to the peer's
next failure, which the direct stream reports again after its backoff.

Once the node begins to stop (`StoppingGate`), its peers may be stopping with it (a host's or
a whole cluster's shutdown) while its own streams run on until replication stops, late in
the stop order: their failures are withheld too. Safety reports carry their own proof and
pass through both gates unchanged."""

from __future__ import annotations

import structlog

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.misbehavior import LIVENESS_TYPES, type_name
from xnode.observability.metrics import LIVENESS_REPORTS_WITHHELD
from xnode.replication.ports import MisbehaviorRecorder, StoreHealth

log = structlog.get_logger(__name__)

# After the database answers again, peers sharing its fate need a moment to recover too.
SETTLE_S = 10.0


class OwnHealthGate:
    """A MisbehaviorRecorder in front of another that withholds liveness reports while this
    node's own database is down or only just back."""

    def __init__(
        self,
        reports: MisbehaviorRecorder,
        store: StoreHealth,
        clock: Clock = SYSTEM_CLOCK,
        settle_s: float = SETTLE_S,
    ) -> None:
        self._reports = reports
        self._store = store
        self._clock = clock
        self._settle_s = settle_s
        self._last_down_s: float | None = None

    async def _healthy(self) -> bool:
        now = self._clock.monotonic_s()
        if not await self._store.reachable():
            self._last_down_s = now
            return False
        return self._last_down_s is None or now - self._last_down_s >= self._settle_s

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        if int(unsigned.type) in LIVENESS_TYPES and not await self._healthy():
            withhold(unsigned, detail, "this node's own database is down or only just back")
            return
        await self._reports.record(unsigned, detail)


class StoppingGate:
    """A MisbehaviorRecorder in front of another that withholds liveness reports once
    `stopping` is set."""

    def __init__(self, reports: MisbehaviorRecorder) -> None:
        self._reports = reports
        self.stopping = False

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        if self.stopping and int(unsigned.type) in LIVENESS_TYPES:
            withhold(unsigned, detail, "this node is stopping")
            return
        await self._reports.record(unsigned, detail)


def withhold(unsigned: mb.UnsignedMisbehaviorReport, detail: str, reason: str) -> None:
    kind = type_name(unsigned.type)
    LIVENESS_REPORTS_WITHHELD.labels(kind).inc()
    log.info(
        "liveness_report_withheld",
        type=kind,
        node_id=unsigned.misbehaving_node_id,
        reason=reason,
        detail=detail,
    )
