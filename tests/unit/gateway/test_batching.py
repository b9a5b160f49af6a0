"""The gateway's per-node coalescing of forwards, against a scripted node call."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.gateway.batching import Coalescer

Envelope = envelopes_pb2.PayerEnvelope


def envelopes(*tags: int) -> list[Envelope]:
    return [Envelope(target_originator=100, message_retention_days=t) for t in tags]


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "refused", None)


class ScriptedNode:
    """Answers each envelope with its tag, once `release` is set; refuses any call that
    carries the tag in `refuse` with `code`."""

    def __init__(self, refuse: int = -1, code: grpc.StatusCode = grpc.StatusCode.OK) -> None:
        self.calls: list[list[int]] = []
        self.clients: list[str] = []
        self.release = asyncio.Event()
        self.refuse = refuse
        self.code = code

    async def __call__(self, node_id: int, sent: list[Envelope], client: str) -> list[bytes]:
        tags = [e.message_retention_days for e in sent]
        self.calls.append(tags)
        self.clients.append(client)
        await self.release.wait()
        if self.refuse in tags:
            raise rpc_error(self.code)
        return [bytes([t]) for t in tags]


async def until(condition: object, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


async def test_an_idle_node_gets_each_run_at_once() -> None:
    node = ScriptedNode()
    node.release.set()
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=2)
    assert await coalescer.send(100, envelopes(1, 2)) == [b"\x01", b"\x02"]
    assert node.calls == [[1, 2]]


async def test_runs_that_wait_for_a_busy_node_leave_together_and_get_their_own_answers() -> None:
    node = ScriptedNode()
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1)))
    await until(lambda: len(node.calls) == 1)
    waiting = [asyncio.create_task(coalescer.send(100, envelopes(t, t + 1))) for t in (10, 20, 30)]
    await asyncio.sleep(0)
    node.release.set()
    assert await first == [b"\x01"]
    answers = await asyncio.gather(*waiting)
    assert answers == [[bytes([t]), bytes([t + 1])] for t in (10, 20, 30)]
    assert node.calls == [[1], [10, 11, 20, 21, 30, 31]]


async def test_a_combined_call_never_exceeds_the_node_limit() -> None:
    node = ScriptedNode()
    coalescer = Coalescer(node, max_envelopes=4, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1)))
    await until(lambda: len(node.calls) == 1)
    waiting = [asyncio.create_task(coalescer.send(100, envelopes(t, t))) for t in (2, 3, 4)]
    await asyncio.sleep(0)
    node.release.set()
    await asyncio.gather(first, *waiting)
    assert node.calls == [[1], [2, 2, 3, 3], [4, 4]]


@pytest.mark.parametrize("code", [grpc.StatusCode.ABORTED, grpc.StatusCode.ALREADY_EXISTS])
async def test_a_refusal_of_the_whole_call_is_resent_run_by_run(code: grpc.StatusCode) -> None:
    """A stale dependency, or a replay of a stored payer envelope, refuses the call for one
    run's sake: the others are stored."""
    node = ScriptedNode(refuse=20, code=code)
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1)))
    await until(lambda: len(node.calls) == 1)
    runs = [asyncio.create_task(coalescer.send(100, envelopes(t))) for t in (10, 20, 30)]
    await asyncio.sleep(0)
    node.release.set()
    await first
    results = await asyncio.gather(*runs, return_exceptions=True)
    assert results[0] == [b"\x0a"] and results[2] == [b"\x1e"]
    assert isinstance(results[1], grpc.aio.AioRpcError)
    assert results[1].code() is code
    assert sorted(node.calls[2:]) == [[10], [20], [30]]


async def test_a_call_the_node_may_have_stored_is_never_resent() -> None:
    node = ScriptedNode(refuse=20, code=grpc.StatusCode.DEADLINE_EXCEEDED)
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1)))
    await until(lambda: len(node.calls) == 1)
    runs = [asyncio.create_task(coalescer.send(100, envelopes(t))) for t in (10, 20)]
    await asyncio.sleep(0)
    node.release.set()
    await first
    results = await asyncio.gather(*runs, return_exceptions=True)
    codes = [r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED] * 2
    assert node.calls == [[1], [10, 20]]


async def test_a_run_whose_caller_left_before_it_was_sent_is_not_sent() -> None:
    node = ScriptedNode()
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1)))
    await until(lambda: len(node.calls) == 1)
    gone = asyncio.create_task(coalescer.send(100, envelopes(2)))
    kept = asyncio.create_task(coalescer.send(100, envelopes(3)))
    await asyncio.sleep(0)
    gone.cancel()
    node.release.set()
    assert await kept == [b"\x03"]
    await first
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert node.calls == [[1], [3]]


async def test_nodes_are_batched_apart() -> None:
    node = ScriptedNode()
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    runs = [asyncio.create_task(coalescer.send(n, envelopes(n // 100))) for n in (100, 200)]
    await until(lambda: len(node.calls) == 2)
    node.release.set()
    assert await asyncio.gather(*runs) == [[b"\x01"], [b"\x02"]]


async def test_a_call_names_its_client_only_when_every_run_came_from_it() -> None:
    """A node limits the client a call names (x-forwarded-for): a call that combines runs of
    several clients names none (the node charges the gateway), and combining goes on."""
    node = ScriptedNode()
    coalescer = Coalescer(node, max_envelopes=1000, max_in_flight=1)
    first = asyncio.create_task(coalescer.send(100, envelopes(1), "10.0.0.1"))
    await until(lambda: len(node.calls) == 1)
    mixed = [
        asyncio.create_task(coalescer.send(100, envelopes(tag), client))
        for client, tag in (("10.0.0.1", 2), ("10.0.0.2", 3))
    ]
    await until(lambda: len(coalescer._queues[100].waiting) == 2)
    node.release.set()
    await asyncio.gather(first, *mixed)
    assert node.calls == [[1], [2, 3]]
    assert node.clients == ["10.0.0.1", ""]
