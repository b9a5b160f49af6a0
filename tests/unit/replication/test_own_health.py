"""Liveness reports are withheld while this node's own database is down or only just back,
and once it begins to stop; safety reports always pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import misbehavior
from xnode.replication.own_health import OwnHealthGate, StoppingGate


@dataclass
class Recorder:
    kinds: list[int] = field(default_factory=list)

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        self.kinds.append(int(unsigned.type))


@dataclass
class Probe:
    up: bool = True

    async def reachable(self) -> bool:
        return self.up


@dataclass
class Clock:
    t: float = 0.0

    def now_ns(self) -> int:
        return int(self.t * 1e9)

    def now_s(self) -> int:
        return int(self.t)

    def monotonic_s(self) -> float:
        return self.t


LIVENESS = misbehavior.liveness_report(
    misbehavior.UNRESPONSIVE_NODE, 200, 1, api.SubscribeEnvelopesRequest(), 1
)
SAFETY = misbehavior.safety_report(
    misbehavior.OUT_OF_ORDER, 200, [envelopes_pb2.OriginatorEnvelope().SerializeToString()], 1
)


async def test_liveness_reports_wait_for_the_database_to_settle() -> None:
    recorder, probe, clock = Recorder(), Probe(), Clock()
    gate = OwnHealthGate(recorder, probe, clock, settle_s=10)
    await gate.record(LIVENESS, "")
    assert recorder.kinds == [misbehavior.UNRESPONSIVE_NODE]

    probe.up = False
    await gate.record(LIVENESS, "")
    await gate.record(SAFETY, "")  # proofs do not depend on this node's health
    assert recorder.kinds == [misbehavior.UNRESPONSIVE_NODE, misbehavior.OUT_OF_ORDER]

    probe.up, clock.t = True, 9.0
    await gate.record(LIVENESS, "")  # back, but peers sharing its fate may still recover
    assert len(recorder.kinds) == 2
    clock.t = 10.0
    await gate.record(LIVENESS, "")
    assert recorder.kinds[-1] == misbehavior.UNRESPONSIVE_NODE and len(recorder.kinds) == 3


async def test_a_stopping_node_withholds_liveness_reports_but_not_proofs() -> None:
    recorder = Recorder()
    gate = StoppingGate(recorder)
    await gate.record(LIVENESS, "")
    gate.stopping = True
    await gate.record(LIVENESS, "")  # its peers may be stopping with it
    await gate.record(SAFETY, "")
    assert recorder.kinds == [misbehavior.UNRESPONSIVE_NODE, misbehavior.OUT_OF_ORDER]
