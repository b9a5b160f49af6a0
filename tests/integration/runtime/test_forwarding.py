"""Workers of one node hand their batches to the one that sequences (xnode.runtime.forwarding):
two "workers" in one event loop, each with its own pool and sequencer on a real Postgres."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from tests.integration.store.test_sequencer import envelopes
from tests.support.waiting import eventually
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.errors import Reason, Rejected
from xnode.core.sequencer_wire import LENGTH
from xnode.runtime.forwarding import ForwardingOriginator, SequencerLink
from xnode.store.identity import claim_database
from xnode.store.sequencer import Sequencer
from xnode.usecases.originator import Originator

NODE = 100
KEY = SigningKey.generate()


@dataclass
class Worker:
    pool: asyncpg.Pool
    sequencer: Sequencer
    originator: Originator
    committed: list[IndexedEnvelope]


async def worker(database: str, name: str) -> Worker:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=4)
    await claim_database(pool, NODE, KEY.public_key)
    sequencer = Sequencer(pool, NODE, KEY, name)
    await sequencer.prime()
    committed: list[IndexedEnvelope] = []

    async def append(batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        return await sequencer.append(batch, time.time_ns())

    async def on_commit(done: list[IndexedEnvelope]) -> None:
        committed.extend(done)

    originator = Originator(append, on_commit)
    originator.start()
    return Worker(pool, sequencer, originator, committed)


@pytest.fixture
async def workers(database: str) -> AsyncIterator[tuple[Worker, Worker]]:
    first = await worker(database, "w0")
    second = await worker(database, "w1")
    yield first, second
    for w in (first, second):
        await w.originator.close()
        await w.pool.close()


async def stored(pool: asyncpg.Pool) -> dict[int, bytes]:
    rows = await pool.fetch(
        "SELECT originator_sequence_id, envelope FROM originator_envelopes"
        " WHERE originator_node_id = $1",
        NODE,
    )
    return {r[0]: bytes(r[1]) for r in rows}


async def test_forwarded_batches_join_the_sequencers_fast_path_gap_free(
    workers: tuple[Worker, Worker], tmp_path: Path
) -> None:
    first, second = workers
    link = SequencerLink(str(tmp_path / "s.sock"), first.originator)
    await link.start()
    tops: list[int] = []
    forwarding = ForwardingOriginator(
        str(tmp_path / "s.sock"), NODE, second.originator, tops.append
    )
    forwarding.start()
    await eventually(lambda: forwarding.linked)

    async def publish(originate: Originator | ForwardingOriginator, tag: str) -> list[bytes]:
        raws: list[bytes] = []
        for r in range(20):
            raws += [e.raw for e in await originate.publish(envelopes(1 + r % 3, f"{tag}{r}"))]
        return raws

    answers = await asyncio.gather(
        *(publish(first.originator, f"a{c}") for c in range(4)),
        *(publish(forwarding, f"b{c}") for c in range(4)),
    )
    sent = sum(len(a) for a in answers)
    rows = await stored(first.pool)
    assert sorted(rows) == list(range(1, sent + 1)), "unique and gap-free"
    assert sorted(raw for a in answers for raw in a) == sorted(rows.values())
    # One sequencer, never missing its fast path; the forwarding worker appends nothing.
    assert first.sequencer.locked_appends == 0 and first.sequencer.fast_misses == 0
    assert second.sequencer.fast_appends + second.sequencer.locked_appends == 0
    assert forwarding.forwarded == 80 and forwarding.local_batches == 0
    assert max(tops) > 0
    await forwarding.close()
    await first.originator.close()
    await link.close()


async def test_a_draining_sequencer_sends_batches_back_to_be_sequenced_locally(
    workers: tuple[Worker, Worker], tmp_path: Path
) -> None:
    first, second = workers
    link = SequencerLink(str(tmp_path / "s.sock"), first.originator)
    await link.start()
    forwarding = ForwardingOriginator(
        str(tmp_path / "s.sock"), NODE, second.originator, lambda _: None
    )
    forwarding.start()
    await eventually(lambda: forwarding.linked)
    await forwarding.publish(envelopes(2, "before"))
    await first.originator.close()  # the first worker drains; its link still answers
    await forwarding.publish(envelopes(3, "during"))  # refused as CLOSING: stored locally
    await link.close()
    await eventually(lambda: not forwarding.linked)
    await forwarding.publish(envelopes(1, "after"))  # the link is down: local
    assert (forwarding.forwarded, forwarding.local_batches) == (1, 2)
    assert second.sequencer.locked_appends == 1  # the first worker had moved the row
    assert sorted(await stored(first.pool)) == list(range(1, 7))
    await forwarding.close()


async def test_a_link_that_breaks_with_a_batch_sent_answers_unavailable(
    workers: tuple[Worker, Worker], tmp_path: Path
) -> None:
    """A deliberately broken sequencer: it reads the batch and hangs up without answering."""
    _, second = workers

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
        await reader.readexactly(length)
        writer.close()

    server = await asyncio.start_unix_server(hang_up, str(tmp_path / "s.sock"))
    forwarding = ForwardingOriginator(
        str(tmp_path / "s.sock"), NODE, second.originator, lambda _: None
    )
    forwarding.start()
    await eventually(lambda: forwarding.linked)
    with pytest.raises(Rejected) as refused:
        await forwarding.publish(envelopes(2, "lost"))
    assert refused.value.reason is Reason.UNAVAILABLE
    assert "may or may not" in refused.value.detail
    server.close()
    await forwarding.close()
    assert await stored(second.pool) == {}
