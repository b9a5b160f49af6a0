"""In-memory fakes of the use cases' ports (xnode.usecases.ports)."""

from __future__ import annotations

from collections.abc import Sequence

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import (
    IndexedEnvelope,
    Originable,
    StoredEnvelope,
    ValidPayerEnvelope,
    build_payer_envelope,
)
from xnode.core.errors import Reason, Rejected
from xnode.core.mls import Reader
from xnode.core.query import EnvelopeQuery
from xnode.core.sizes import within_budget

NODE = 100
PAYER = SigningKey.generate()
GROUP = b"g" * 16


class FixedClock:
    """A clock that moves only when a test sets `now` (whole seconds)."""

    def __init__(self, now_s: int) -> None:
        self.now = now_s

    def now_ns(self) -> int:
        return self.now * 1_000_000_000

    def now_s(self) -> int:
        return self.now

    def monotonic_s(self) -> float:
        return float(self.now)


def payer_envelope(
    data: bytes, depends_on: Cursor | None = None, target: int = NODE
) -> envelopes_pb2.PayerEnvelope:
    return build_payer_envelope(group_message_envelope(GROUP, data, depends_on), PAYER, target)


def budgeted(found: list[StoredEnvelope], budget: int) -> tuple[list[StoredEnvelope], bool]:
    """What a store's query_within answers of `found`: the rows within `budget` bytes, and
    whether that cut any."""
    held = within_budget((len(e.raw) for e in found), budget)
    return found[:held], held < len(found)


class MemoryStore:
    """EnvelopeReader over a list; `clock` is what other processes have committed."""

    def __init__(self, clock: Cursor | None = None) -> None:
        self.rows: list[StoredEnvelope] = []
        self.clock = clock or Cursor()
        self.clock_reads = 0
        self.newest_asked: list[list[bytes]] = []
        self.queries: list[tuple[EnvelopeQuery, int]] = []

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        self.queries.append((query, limit))
        hits = [
            e
            for e in self.rows
            if (e.topic in query.topics or e.originator_node_id in query.originators)
            and e.sequence_id > query.cursor[e.originator_node_id]
        ]
        return sorted(hits, key=lambda e: (e.originator_node_id, e.sequence_id))[:limit]

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        return budgeted(await self.query(query, limit), budget)

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        self.newest_asked.append(list(topics))
        return [None for _ in topics]

    async def vector_clock(self) -> Cursor:
        self.clock_reads += 1
        return self.clock

    async def originator_range(self, node: int, after: int, up_to: int) -> list[StoredEnvelope]:
        return [
            e for e in self.rows if e.originator_node_id == node and after < e.sequence_id <= up_to
        ]


class FakeOriginator:
    """Originate: numbers envelopes 1, 2, ... and answers b"local:<payload bytes>"."""

    def __init__(self) -> None:
        self.published: list[list[ValidPayerEnvelope]] = []
        self.next_seq = 1

    async def publish(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]:
        valid = [e for e in envelopes if isinstance(e, ValidPayerEnvelope)]
        assert len(valid) == len(envelopes), "Publish hands over the envelopes it validated"
        self.published.append(valid)
        out = []
        for e in valid:
            raw = b"local:" + body(e)
            out.append(IndexedEnvelope(NODE, self.next_seq, 0, e.topic.raw, 0, None, raw))
            self.next_seq += 1
        return out


def body(envelope: ValidPayerEnvelope) -> bytes:
    """The bytes given to payer_envelope: the ciphertext of the PrivateMessage they became."""
    reader = Reader(envelope.client_envelope.group_message.v1.data)
    reader.take(4)  # version, wire format
    reader.vector()  # group_id
    reader.take(9)  # epoch, content type
    reader.vector()  # authenticated_data
    reader.vector()  # encrypted_sender_data
    return reader.vector()


class FakeChain:
    """ChainPublisher taking the payloads whose data starts with b"chain"."""

    def __init__(self, refuse_at: int | None = None) -> None:
        self.published: list[list[ValidPayerEnvelope]] = []
        self.refuse_at = refuse_at

    def handles(self, envelope: ValidPayerEnvelope) -> bool:
        return body(envelope).startswith(b"chain")

    async def publish(self, envelopes: Sequence[ValidPayerEnvelope]) -> list[bytes]:
        if self.refuse_at is not None:
            raise Rejected(Reason.CHAIN_DEPENDS_ON_MISMATCH, "stale", index=self.refuse_at)
        self.published.append(list(envelopes))
        return [b"chain:" + body(e) for e in envelopes]

    async def check_originated(self, envelopes: Sequence[ValidPayerEnvelope]) -> None:
        pass


class FakeResolver:
    def __init__(self, known: dict[str, str]) -> None:
        self.known = known

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        return [self.known.get(i) for i, _ in identifiers]
