"""The stop order is the one list STOP_ORDER, whatever order the parts started and
registered in; an error of one step does not keep the later ones from running."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from xnode.server.stops import STOP_ORDER, Phase, Stops


async def test_steps_run_by_phase_in_stop_order_and_last_registered_first() -> None:
    ran: list[str] = []

    def step(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            ran.append(name)

        return run

    stops = Stops(deadline_s=5.0)
    # Registered in start order, which is not the stop order.
    stops.add_sync(Phase.SIGNER, lambda: ran.append("signer"))
    stops.add(Phase.DATABASE, step("pool"))
    stops.add(Phase.COMMITS, step("originator"))
    stops.add(Phase.COMMITS, step("commit listener"))
    stops.add(Phase.LISTENERS, step("grpc"))
    stops.add(Phase.ACCEPTING, step("quiesce"))
    stops.add(Phase.HEALTH, step("not serving"))
    await stops.run()
    assert ran == [
        "not serving",
        "quiesce",
        "grpc",
        "commit listener",
        "originator",
        "pool",
        "signer",
    ]
    await stops.run()  # run once: a second stop has nothing left
    assert len(ran) == 7


async def test_a_failing_step_does_not_keep_the_later_ones_from_running() -> None:
    ran: list[Phase] = []

    async def failing() -> None:
        raise RuntimeError("step failed")

    stops = Stops(deadline_s=5.0)
    stops.add_sync(Phase.DATABASE, lambda: ran.append(Phase.DATABASE))
    stops.add(Phase.LISTENERS, failing)
    with pytest.raises(RuntimeError, match="step failed"):
        await stops.run()
    assert ran == [Phase.DATABASE]


def test_every_phase_has_its_place_in_the_stop_order() -> None:
    assert sorted(STOP_ORDER, key=lambda p: p.value) == sorted(Phase, key=lambda p: p.value)
    assert STOP_ORDER[0] is Phase.HEALTH and STOP_ORDER[-1] is Phase.SIGNER
