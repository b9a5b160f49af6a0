"""Serving status per service follows the dependencies it needs."""

from __future__ import annotations

from structlog.testing import capture_logs

from tests.unit.usecases.fakes import FixedClock
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.health import CHAIN, DATABASE, HealthMonitor

NEEDS = {
    "": frozenset({DATABASE, CHAIN}),
    "publish": frozenset({DATABASE, CHAIN}),
    "query": frozenset({DATABASE}),
}


class Board:
    def __init__(self) -> None:
        self.serving: dict[str, bool] = {}

    def set_serving(self, service: str, serving: bool) -> None:
        self.serving[service] = serving


class Probe:
    up = True
    error: str | None = None

    async def reachable(self) -> bool:
        return self.up


class Chain:
    reason: str | None = None

    def unhealthy_reason(self) -> str | None:
        return self.reason


async def test_each_service_follows_its_dependencies_and_draining_stops_all() -> None:
    board, probe, chain = Board(), Probe(), Chain()
    monitor = HealthMonitor(board, NEEDS, probe, DatabaseOutage(str), chain, interval_s=60)
    await monitor.start()
    assert board.serving == {"": True, "publish": True, "query": True}
    chain.reason = "the chain indexer is 9 blocks behind the chain head"
    await monitor.check()
    assert board.serving == {"": False, "publish": False, "query": True}
    assert monitor.down == {CHAIN: chain.reason}
    chain.reason, probe.up = None, False
    await monitor.check()
    assert board.serving == {"": False, "publish": False, "query": False}
    probe.up = True
    await monitor.check()
    assert all(board.serving.values())
    await monitor.drain()
    assert not any(board.serving.values())


async def test_the_database_lost_and_back_are_the_outages_events_with_the_probes_error() -> None:
    board, probe, clock = Board(), Probe(), FixedClock(100)
    monitor = HealthMonitor(
        board, NEEDS, probe, DatabaseOutage(lambda: "db:5432", clock), Chain(), interval_s=60
    )
    with capture_logs() as logged:
        await monitor.start()
        probe.up, probe.error = False, "ConnectionRefusedError(111, 'Connect call failed')"
        await monitor.check()
        await monitor.check()
        clock.now = 103
        probe.up = True
        await monitor.check()
        await monitor.stop()
    told = [
        (e["event"], e.get("error"), e.get("down_s")) for e in logged if e["log_level"] != "debug"
    ]
    assert told == [
        ("database_lost", probe.error, None),
        ("database_back", None, 3),
    ]
