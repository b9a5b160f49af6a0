"""The publish use case over fakes of its ports: validation, depends_on, routing, order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from tests.unit.usecases.fakes import (
    NODE,
    FakeChain,
    FakeOriginator,
    MemoryStore,
    payer_envelope,
)
from xnode.core.cursors import Cursor
from xnode.core.errors import Reason, Rejected
from xnode.core.vector_clock import NodeClock
from xnode.usecases.publish import MAX_PUBLISH_ENVELOPES, THREAD_VALIDATION_MIN, Publish

T = TypeVar("T")


def _publish(
    store: MemoryStore | None = None,
    chain: FakeChain | None = None,
    clock: Cursor | None = None,
) -> tuple[Publish, FakeOriginator]:
    originator = FakeOriginator()
    use_case = Publish(
        NODE, NodeClock(clock or Cursor()), store or MemoryStore(), originator, chain
    )
    return use_case, originator


async def test_answers_come_in_request_order_across_chain_and_local() -> None:
    chain = FakeChain()
    publish, originator = _publish(chain=chain)
    data = [b"m0", b"chain1", b"m2", b"chain3"]
    answers = await publish([payer_envelope(d) for d in data])
    assert answers == [b"local:m0", b"chain:chain1", b"local:m2", b"chain:chain3"]
    assert len(chain.published) == 1 and len(originator.published) == 1


async def test_a_refused_chain_part_stores_nothing_and_names_the_request_index() -> None:
    chain = FakeChain(refuse_at=1)  # the second chain-bound envelope
    publish, originator = _publish(chain=chain)
    with pytest.raises(Rejected) as refused:
        await publish([payer_envelope(d) for d in (b"m0", b"chain1", b"m2", b"chain3")])
    assert refused.value.index == 3
    assert refused.value.reason is Reason.CHAIN_DEPENDS_ON_MISMATCH
    assert originator.published == []


async def test_without_a_chain_everything_is_originated() -> None:
    publish, _ = _publish()
    answers = await publish([payer_envelope(b"chain0"), payer_envelope(b"m1")])
    assert answers == [b"local:chain0", b"local:m1"]


@pytest.mark.parametrize("count", [1, THREAD_VALIDATION_MIN + 1])
async def test_an_invalid_envelope_is_named_by_its_index(count: int) -> None:
    publish, originator = _publish()
    envelopes = [payer_envelope(b"m%d" % i) for i in range(count)]
    envelopes[-1].target_originator = NODE + 1
    with pytest.raises(Rejected) as refused:
        await publish(envelopes)
    assert refused.value.index == count - 1
    assert refused.value.reason is Reason.WRONG_ORIGINATOR
    assert originator.published == []


async def test_empty_and_oversized_requests_are_refused() -> None:
    publish, _ = _publish()
    with pytest.raises(Rejected) as empty:
        await publish([])
    assert empty.value.reason is Reason.MALFORMED
    with pytest.raises(Rejected) as big:
        await publish([payer_envelope(b"m")] * (MAX_PUBLISH_ENVELOPES + 1))
    assert big.value.reason is Reason.LIMIT_EXCEEDED


async def test_depends_on_covered_by_the_memory_clock_does_not_read_the_store() -> None:
    store = MemoryStore()
    publish, _ = _publish(store, clock=Cursor.of({200: 5}))
    await publish([payer_envelope(b"m", Cursor.of({200: 5}))])
    assert store.clock_reads == 0


async def test_a_trailing_memory_clock_asks_the_store_once() -> None:
    store = MemoryStore(clock=Cursor.of({200: 7}))  # another process committed up to 7
    publish, originator = _publish(store, clock=Cursor.of({200: 2}))
    await publish([payer_envelope(b"m", Cursor.of({200: 7}))])
    assert store.clock_reads == 1 and len(originator.published) == 1


async def test_depends_on_ahead_of_the_store_is_refused_with_the_node_cursor() -> None:
    store = MemoryStore(clock=Cursor.of({200: 3}))
    publish, originator = _publish(store)
    envelopes = [payer_envelope(b"m0"), payer_envelope(b"m1", Cursor.of({200: 9}))]
    with pytest.raises(Rejected) as refused:
        await publish(envelopes)
    assert refused.value.reason is Reason.DEPENDS_ON_AHEAD
    assert refused.value.index == 1
    assert refused.value.cursor == Cursor.of({200: 3})
    assert store.clock_reads == 1 and originator.published == []


async def test_a_read_only_node_refuses_every_publish_with_a_clear_reason() -> None:
    publish = Publish(NODE, NodeClock(Cursor()), MemoryStore(), None)
    with pytest.raises(Rejected) as refused:
        await publish([payer_envelope(b"m0")])
    assert refused.value.reason is Reason.READ_ONLY
    assert "read-only node" in str(refused.value) and "registered node" in str(refused.value)


class CountingThreads:
    """The CryptoThreads port, run inline: counts what the use case hands it."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, call: Callable[[], T]) -> T:
        self.calls += 1
        return call()


async def test_large_batches_are_validated_through_the_crypto_threads_port() -> None:
    threads = CountingThreads()
    publish = Publish(NODE, NodeClock(Cursor()), MemoryStore(), FakeOriginator(), crypto=threads)
    await publish([payer_envelope(b"m")])
    assert threads.calls == 0  # small: on the loop, a hop would cost more than it moves
    batch = [payer_envelope(b"m%d" % i) for i in range(THREAD_VALIDATION_MIN)]
    assert len(await publish(batch)) == THREAD_VALIDATION_MIN
    assert threads.calls == 1
