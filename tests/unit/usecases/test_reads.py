"""Which database a read goes to: the replica only when it holds what the read needs (a
query: its cursor; a catch-up page: everything the node has committed), else the primary."""

from __future__ import annotations

from collections.abc import Sequence

from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.usecases.reads import RoutedReads, for_catch_up, for_queries


class Named:
    """An AnswerReader that answers with one envelope naming it (originator 1 or 2)."""

    def __init__(self, originator: int) -> None:
        self.originator = originator

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        return [StoredEnvelope(self.originator, 1, b"t", b"", 0)]

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        return await self.query(query, limit), False

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        return [bytes([self.originator])]

    async def vector_clock(self) -> Cursor:
        return Cursor({self.originator: 1})


PRIMARY, REPLICA = Named(1), Named(2)


class Held:
    def __init__(self, held: Cursor | None) -> None:
        self.value = held

    def held(self) -> Cursor | None:
        return self.value


async def served_by(reads: RoutedReads, cursor: Cursor) -> int:
    found = await reads.query(EnvelopeQuery(topics=(b"t",), cursor=cursor), 10)
    return found[0].originator_node_id


async def test_a_query_goes_to_the_replica_unless_its_cursor_is_ahead() -> None:
    reads = RoutedReads(PRIMARY, REPLICA, Held(Cursor({100: 5, 200: 3})), for_queries)
    assert await served_by(reads, Cursor()) == 2
    assert await served_by(reads, Cursor({100: 5, 200: 3})) == 2
    assert await served_by(reads, Cursor({100: 6})) == 1  # the client saw its own write
    assert await served_by(reads, Cursor({300: 1})) == 1  # an originator it lacks
    assert await reads.newest([b"t"], 100) == [b"\x01"]
    assert await reads.vector_clock() == Cursor({1: 1})


async def test_catch_up_needs_all_the_node_committed() -> None:
    committed = Cursor({100: 7})
    held = Held(Cursor({100: 6}))
    reads = RoutedReads(PRIMARY, REPLICA, held, for_catch_up(lambda: committed))
    assert await served_by(reads, Cursor()) == 1  # a page could stop short of live delivery
    held.value = Cursor({100: 7})
    assert await served_by(reads, Cursor()) == 2


async def test_an_unanswering_replica_serves_nothing() -> None:
    reads = RoutedReads(PRIMARY, REPLICA, Held(None), for_queries)
    assert await served_by(reads, Cursor()) == 1
