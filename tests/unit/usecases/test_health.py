"""Serving status per service follows the dependencies it needs."""

from __future__ import annotations

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

    async def reachable(self) -> bool:
        return self.up


class Chain:
    reason: str | None = None

    def unhealthy_reason(self) -> str | None:
        return self.reason


async def test_each_service_follows_its_dependencies_and_draining_stops_all() -> None:
    board, probe, chain = Board(), Probe(), Chain()
    monitor = HealthMonitor(board, NEEDS, probe, chain, interval_s=60)
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
