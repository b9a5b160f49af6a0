"""An outage of the node's database is logged once when it begins and once when it is over,
whoever met it and however often; on an injected clock."""

from __future__ import annotations

from structlog.testing import capture_logs

from tests.unit.usecases.fakes import FixedClock
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.ports import StoreUnavailable


def outage(clock: FixedClock) -> DatabaseOutage:
    return DatabaseOutage(lambda: "10.0.0.2:5432", clock, quiet_s=1.0)


def test_one_event_when_lost_one_when_back_with_how_long_and_how_many_refused() -> None:
    clock = FixedClock(100)
    watched = outage(clock)
    lost = StoreUnavailable("connection refused")
    lost.__cause__ = ConnectionRefusedError()
    with capture_logs() as logged:
        watched.answered()  # nothing lost: nothing to say
        watched.refused("QueryEnvelopes", lost)
        for _ in range(200):
            watched.refused("PublishPayerEnvelopes", lost)
        watched.failed("scrub", lost)
        clock.now = 105
        watched.failed("health_probe", "TimeoutError()")
        clock.now = 106
        watched.answered()
        watched.answered()
    repeats = [e for e in logged if e["log_level"] == "debug"]
    assert len(repeats) == 202 and {e["event"] for e in repeats} == {"database_still_lost"}
    assert [e for e in logged if e not in repeats] == [
        {
            "event": "database_lost",
            "log_level": "error",
            "host": "10.0.0.2:5432",
            "by": "QueryEnvelopes",
            "error": "StoreUnavailable('connection refused') (from ConnectionRefusedError)",
        },
        {
            "event": "database_back",
            "log_level": "info",
            "host": "10.0.0.2:5432",
            "down_s": 6,
            "refused": 201,
            "failures": 203,
        },
    ]
    assert not watched.lost


def test_a_failure_just_before_the_probe_answers_keeps_the_outage_open() -> None:
    """A pooled connection the outage broke fails once more after the database is back: one
    outage, not two."""
    clock = FixedClock(100)
    watched = outage(clock)
    with capture_logs() as logged:
        watched.failed("health_probe", "ConnectionRefusedError()")
        clock.now = 101
        watched.failed("commit_listener", "ConnectionResetError()")
        watched.answered()
        assert watched.lost
        clock.now = 102
        watched.answered()
        clock.now = 110
        watched.failed("GetCheckpoints", "ConnectionRefusedError()")
    assert [(e["event"], e.get("down_s")) for e in logged if e["log_level"] != "debug"] == [
        ("database_lost", None),
        ("database_back", 2),
        ("database_lost", None),
    ]
