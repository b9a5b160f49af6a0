"""Group commit with a fake store: batching, ordering, failures, draining."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from structlog.testing import capture_logs

from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    Originable,
    ValidPayerEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.errors import Reason, Rejected
from xnode.usecases.originator import GATHER_MIN, GATHER_PATIENCE, Originator

NODE_KEY = SigningKey.generate()
PAYER = SigningKey.generate()


class FakeLog:
    def __init__(self, fail_times: int = 0) -> None:
        self.batches: list[int] = []
        self.next_seq = 1
        self.fail_times = fail_times
        self.committed: list[int] = []

    async def append(self, batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        await asyncio.sleep(0.01)  # a commit takes time, so requests pile up
        if self.fail_times:
            self.fail_times -= 1
            raise OSError("database went away")
        self.batches.append(len(batch))
        out = [
            IndexedEnvelope(100, self.next_seq + i, 0, b"t", 0, None, bytes([i % 256]))
            for i in range(len(batch))
        ]
        self.next_seq += len(batch)
        return out

    async def on_committed(self, envelopes: list[IndexedEnvelope]) -> None:
        self.committed += [e.sequence_id for e in envelopes]


class _Payer:
    """What the group commit reads of a payer envelope: the digest its payer signed."""

    def __init__(self, digest: bytes = b"") -> None:
        self.payer_digest = digest


def _envelopes(n: int) -> list[ValidPayerEnvelope]:
    return [_Payer()] * n  # type: ignore[list-item]  # the fake reads the digest only


class SigningLog:
    """Originates real envelopes (node 100's key) and keeps them by payer digest, as the
    store's payer digests (migration 0010) do."""

    def __init__(self) -> None:
        self.stored: dict[bytes, bytes] = {}
        self.committed: list[int] = []
        self.next_seq = 1

    async def append(self, batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        await asyncio.sleep(0.01)  # a commit takes time, so a replay can race it
        signed = []
        for payer in batch:
            envelope = originate(payer, 100, self.next_seq, self.next_seq, NODE_KEY)
            self.stored[payer.payer_digest] = envelope.raw
            self.next_seq += 1
            signed.append(envelope)
        return signed

    async def on_committed(self, envelopes: list[IndexedEnvelope]) -> None:
        self.committed += [e.sequence_id for e in envelopes]

    async def held(self, digests: Sequence[bytes]) -> dict[bytes, bytes]:
        return {d: self.stored[d] for d in digests if d in self.stored}


def _valid(data: bytes, retention_days: int = 30) -> ValidPayerEnvelope:
    payer = build_payer_envelope(
        group_message_envelope(b"g" * 16, data), PAYER, 100, retention_days=retention_days
    )
    return validate_payer_envelope(payer, 100)


async def test_a_replay_is_answered_with_what_was_stored_and_a_different_one_refused() -> None:
    log = SigningLog()
    originator = Originator(log.append, log.on_committed, held=log.held)
    originator.start()
    a, b, c = _valid(b"a"), _valid(b"b"), _valid(b"c")
    with pytest.raises(Rejected) as twice:  # one envelope listed twice in a request
        await originator.publish([a, a])
    assert twice.value.reason is Reason.ALREADY_PUBLISHED
    # A retry racing its first publish waits for it, and is answered the same envelope.
    first, racing = await asyncio.gather(originator.publish([b]), originator.publish([b]))
    assert racing == first and first[0].sequence_id == 1
    # Once stored, a retry finds it (nothing signed or stored again); neighbours commit.
    retry, fresh = await asyncio.gather(originator.publish([b]), originator.publish([c]))
    assert [e.raw for e in retry] == [e.raw for e in first]
    assert (retry[0].sequence_id, fresh[0].sequence_id) == (1, 2)
    # The same signature with another (unsigned) retention, or beside a new envelope: refused.
    with pytest.raises(Rejected) as other:
        await originator.publish([_valid(b"b", retention_days=3650)])
    assert other.value.reason is Reason.ALREADY_PUBLISHED
    assert "payer_envelopes[0] was published here already" in str(other.value)
    assert "message_retention_days" in str(other.value)
    with pytest.raises(Rejected) as mixed:
        await originator.publish([_valid(b"d"), b])
    assert "payer_envelopes[1] was published here already as sequence id 1" in str(mixed.value)
    await originator.close()
    assert log.committed == [1, 2]


async def test_concurrent_publishes_share_batches_and_get_their_own_ids() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed, max_batch=50)
    originator.start()
    results = await asyncio.gather(*(originator.publish(_envelopes(1)) for _ in range(120)))
    await originator.close()
    seqs = sorted(r[0].sequence_id for r in results)
    assert seqs == list(range(1, 121))
    assert max(log.batches) <= 50 and len(log.batches) < 120
    assert log.committed == list(range(1, 121))


async def test_a_request_is_never_split_across_batches() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed, max_batch=10)
    originator.start()
    big, small = await asyncio.gather(
        originator.publish(_envelopes(25)), originator.publish(_envelopes(3))
    )
    await originator.close()
    assert [e.sequence_id for e in big] == list(range(1, 26))
    assert [e.sequence_id for e in small] == [26, 27, 28]


async def test_failed_commit_fails_its_callers_and_the_next_batch_succeeds() -> None:
    log = FakeLog(fail_times=1)
    originator = Originator(log.append, log.on_committed)
    originator.start()
    with pytest.raises(OSError):
        await originator.publish(_envelopes(2))
    ok = await originator.publish(_envelopes(1))
    await originator.close()
    assert ok[0].sequence_id == 1  # the failed batch consumed no ids


async def test_a_store_failure_meeting_cancelled_publishes_keeps_the_group_commit() -> None:
    """A database restart under load: publishes whose callers gave up (cancelled) are in the
    group when the lookup of stored payer envelopes fails; later publishes still commit."""
    log = SigningLog()
    store_down, looking_up = asyncio.Event(), asyncio.Event()

    async def held(digests: Sequence[bytes]) -> dict[bytes, bytes]:
        if not store_down.is_set():
            return await log.held(digests)
        looking_up.set()
        await asyncio.sleep(0.01)  # the statement waits on the database meanwhile
        raise OSError("database went away")

    originator = Originator(log.append, log.on_committed, held=held)
    originator.start()
    store_down.set()
    gone = asyncio.create_task(originator.publish([_valid(b"gone")]))
    await looking_up.wait()
    gone.cancel()  # its client's deadline passed while its group was looked up
    with pytest.raises(asyncio.CancelledError):
        await gone
    store_down.clear()
    stored = await asyncio.wait_for(originator.publish([_valid(b"after")]), 5)
    assert stored[0].sequence_id == 1
    await originator.close()
    assert log.committed == [1]


async def test_a_stored_envelope_that_does_not_parse_fails_only_its_replay() -> None:
    log = SigningLog()
    originator = Originator(log.append, log.on_committed, held=log.held)
    originator.start()
    first = _valid(b"first")
    await originator.publish([first])
    log.stored[first.payer_digest] = b"\xff not an envelope"
    with pytest.raises(Exception):  # noqa: B017  # whatever the parser raises
        await originator.publish([first])
    later = await asyncio.wait_for(originator.publish([_valid(b"later")]), 5)
    assert later[0].sequence_id == 2
    await originator.close()


async def test_a_group_commit_ended_by_an_error_refuses_publishes_rather_than_hold_them() -> None:
    """A safety net for a bug in the loop: nothing waits forever for a loop that is gone."""
    log = SigningLog()

    async def held(digests: Sequence[bytes]) -> dict[bytes, bytes]:
        raise asyncio.CancelledError  # not a failure of the store: it ends the loop

    originator = Originator(log.append, log.on_committed, held=held)
    originator.start()
    with capture_logs() as logged:
        for payload in (b"taken", b"after"):
            with pytest.raises(Rejected) as refused:
                await asyncio.wait_for(originator.publish([_valid(payload)]), 5)
            assert refused.value.reason is Reason.UNAVAILABLE
            assert "group commit stopped" in str(refused.value)
    assert [e["event"] for e in logged] == ["group_commit_stopped"]
    await originator.close()


async def test_close_drains_accepted_publishes_then_refuses_new_ones() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed)
    originator.start()
    pending = [asyncio.create_task(originator.publish(_envelopes(1))) for _ in range(10)]
    await asyncio.sleep(0)
    await originator.close()
    assert all(t.done() and not t.exception() for t in pending)
    with pytest.raises(Rejected) as err:
        await originator.publish(_envelopes(1))
    assert err.value.reason is Reason.UNAVAILABLE


async def test_two_batches_are_appended_at_once_and_reported_in_stored_order() -> None:
    """The second batch's append starts before the first returns (the sequencer signs it
    meanwhile); it may return first, but commits are reported in the order ids were given."""
    running: list[int] = []
    overlap = 0
    committed: list[int] = []
    next_seq = 1

    async def append(batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        nonlocal next_seq, overlap
        first, next_seq = next_seq, next_seq + len(batch)
        running.append(first)
        overlap = max(overlap, len(running))
        await asyncio.sleep(0.02 if first == 1 else 0.001)  # the first returns last
        running.remove(first)
        return [IndexedEnvelope(100, first + i, 0, b"t", 0, None, b"x") for i in range(len(batch))]

    async def on_committed(envelopes: list[IndexedEnvelope]) -> None:
        committed.extend(e.sequence_id for e in envelopes)

    originator = Originator(append, on_committed, max_batch=1, pipeline_min=1)
    originator.start()
    results = await asyncio.gather(*(originator.publish(_envelopes(1)) for _ in range(6)))
    await originator.close()
    assert [r[0].sequence_id for r in results] == [1, 2, 3, 4, 5, 6]
    assert overlap == 2
    assert committed == [1, 2, 3, 4, 5, 6]


async def test_few_waiting_envelopes_wait_for_the_batch_in_flight() -> None:
    """Fewer than pipeline_min waiting: no second append starts while one runs, and what
    waited is taken as one group once it returns."""
    running = 0
    overlap = 0
    sizes: list[int] = []
    next_seq = 1

    async def append(batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        nonlocal next_seq, overlap, running
        first, next_seq = next_seq, next_seq + len(batch)
        running += 1
        overlap = max(overlap, running)
        sizes.append(len(batch))
        await asyncio.sleep(0.02)
        running -= 1
        return [IndexedEnvelope(100, first + i, 0, b"t", 0, None, b"x") for i in range(len(batch))]

    async def on_committed(envelopes: list[IndexedEnvelope]) -> None:
        return None

    originator = Originator(append, on_committed, pipeline_min=10, gather_turns=0)
    originator.start()
    first = asyncio.ensure_future(originator.publish(_envelopes(1)))
    await asyncio.sleep(0)  # the first batch starts alone
    rest = [asyncio.ensure_future(originator.publish(_envelopes(1))) for _ in range(5)]
    await asyncio.gather(first, *rest)
    await originator.close()
    assert overlap == 1
    assert sizes == [1, 5]


async def _one_per_turn(originator: Originator, count: int) -> list[asyncio.Future[object]]:
    """Publishes arriving as grpc hands them over: one more each loop turn."""
    published: list[asyncio.Future[object]] = []
    for _ in range(count):
        published.append(asyncio.ensure_future(originator.publish(_envelopes(1))))
        await asyncio.sleep(0)
    return published


async def test_publishes_arriving_turn_by_turn_are_gathered_into_one_group() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed)
    originator.start()
    await asyncio.gather(*await _one_per_turn(originator, GATHER_MIN - 2))
    await originator.close()
    assert log.batches == [GATHER_MIN - 2]


async def test_gathering_stops_once_gather_min_envelopes_wait() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed)
    originator.start()
    await asyncio.gather(*await _one_per_turn(originator, 3 * GATHER_MIN))
    await originator.close()
    assert GATHER_MIN <= log.batches[0] <= GATHER_MIN + 1
    assert sum(log.batches) == 3 * GATHER_MIN


async def test_gathering_ends_after_gather_turns_however_many_arrive() -> None:
    log = FakeLog()
    originator = Originator(log.append, log.on_committed, gather_turns=5)
    originator.start()
    await asyncio.gather(*await _one_per_turn(originator, GATHER_MIN - 2))
    await originator.close()
    assert log.batches[0] <= 7


async def test_gathering_ends_after_gather_seconds_when_turns_are_slow() -> None:
    """A loop busy with other calls: each turn takes 1 ms, a publish arrives every turn."""
    log = FakeLog()
    originator = Originator(log.append, log.on_committed, gather_seconds=0.005)
    originator.start()
    published: list[asyncio.Future[object]] = []
    for _ in range(GATHER_MIN - 2):
        published.append(asyncio.ensure_future(originator.publish(_envelopes(1))))
        await asyncio.sleep(0)
        time.sleep(0.001)  # noqa: ASYNC251 (deliberate: the rest of a busy turn blocks)
    await asyncio.gather(*published)
    await originator.close()
    assert log.batches[0] <= 8
    assert sum(log.batches) == GATHER_MIN - 2


async def test_a_lone_publish_waits_only_a_few_idle_turns() -> None:
    turns = 0
    appended_at: list[int] = []

    async def tick() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def append(batch: Sequence[Originable]) -> list[IndexedEnvelope]:
        appended_at.append(turns)
        return [IndexedEnvelope(100, 1, 0, b"t", 0, None, b"x")]

    async def on_committed(envelopes: list[IndexedEnvelope]) -> None:
        return None

    ticker = asyncio.create_task(tick())
    originator = Originator(append, on_committed)
    originator.start()
    await asyncio.sleep(0)
    published_at = turns
    await originator.publish(_envelopes(1))
    await originator.close()
    ticker.cancel()
    assert GATHER_PATIENCE <= appended_at[0] - published_at <= GATHER_PATIENCE + 3
