"""Live delivery never serves an expired envelope: fanout measures expiry against the clock it
is given, exactly as queries do (core.retention.is_expired)."""

from __future__ import annotations

from tests.unit.usecases.fakes import FixedClock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.retention import NEVER
from xnode.usecases.fanout import Fanout, Listener

TOPIC = b"\x00" + b"g" * 16
EXPIRY = 1_700_000_000


async def _nothing_stored(_node: int, _after: int, _up_to: int) -> list[StoredEnvelope]:
    return []


def _delivered(listener: Listener) -> list[int]:
    return [e.sequence_id for batch in listener.take() for e in batch.envelopes]


async def test_an_envelope_is_dropped_once_the_clock_reaches_its_expiry() -> None:
    clock = FixedClock(EXPIRY - 1)
    fanout = Fanout(_nothing_stored, Cursor(), clock)
    listener = Listener(topics=frozenset({TOPIC}))
    fanout.register(listener)

    await fanout.committed([StoredEnvelope(100, 1, TOPIC, b"a", EXPIRY)])
    assert _delivered(listener) == [1]  # one second before its expiry: still served

    clock.now = EXPIRY
    await fanout.committed([StoredEnvelope(100, 2, TOPIC, b"b", EXPIRY)])
    assert _delivered(listener) == []  # at its expiry: gone, as a query would not return it

    clock.now = EXPIRY * 2
    await fanout.committed([StoredEnvelope(100, 3, TOPIC, b"c", NEVER)])
    assert _delivered(listener) == [3]  # identity updates never expire
