"""Forwards for one node, from concurrent client requests, go out together.

A node pays most of a publish per request (the gRPC call, a transaction, a commit), not per
envelope, so the gateway sends what its clients' requests hold for one node as one
PublishPayerEnvelopes call. Nothing waits to fill a batch: with fewer than `max_in_flight`
calls to the node outstanding, a run is sent at once; runs that arrive while the node is busy
queue and leave together in the next call. Each run still gets its own answer, in order.
A call names its runs' client to the node's limits (`x-forwarded-for`) when they all came
from one; a call that combines several clients' runs names none, and the node charges it to
the gateway, which limits its own clients (combining is what keeps a busy gateway's calls
few; its publishes are limited by the node per payer, the gateway, anyway).

Only runs the node originates itself are combined. It stores such a request whole or not at
all, so when the node refuses a combined call for one run's sake (bad input, a stale
dependency, a limit, a replay of what it stored), each run is sent again alone and gets its
own verdict. When the node may have stored the call (no answer in time), every run gets that
verdict: sending them again could publish them twice. Chain-bound runs (commits, identity
updates) are never combined: the chain stores them one transaction at a time, so a refusal
may follow a partial success.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from xmtp.xmtpv4.envelopes import envelopes_pb2

# (node id, envelopes, the client every run came from, or "" for several)
NodeCall = Callable[[int, list[envelopes_pb2.PayerEnvelope], str], Awaitable[list[bytes]]]

# The node refuses these before it stores anything of a request.
REFUSED_WHOLE = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.OUT_OF_RANGE,
        # A payer envelope the node stored already (a replay): the other runs are not.
        grpc.StatusCode.ALREADY_EXISTS,
    }
)


@dataclass
class _Run:
    envelopes: list[envelopes_pb2.PayerEnvelope]
    answer: asyncio.Future[list[bytes]]
    client: str


@dataclass
class _NodeQueue:
    waiting: deque[_Run] = field(default_factory=deque)
    in_flight: int = 0


class Coalescer:
    """`call(node_id, envelopes, client)` sends one request and returns the node's answers
    in order (or raises grpc.aio.AioRpcError, or anything else for every run it carried)."""

    def __init__(self, call: NodeCall, max_envelopes: int, max_in_flight: int) -> None:
        self._call = call
        self._max_envelopes = max_envelopes
        self._max_in_flight = max_in_flight
        self._queues: dict[int, _NodeQueue] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    async def send(
        self, node_id: int, envelopes: list[envelopes_pb2.PayerEnvelope], client: str = ""
    ) -> list[bytes]:
        """`client`: the address the run came from ("" when unknown)."""
        run = _Run(envelopes, asyncio.get_running_loop().create_future(), client)
        queue = self._queues.setdefault(node_id, _NodeQueue())
        queue.waiting.append(run)
        self._pump(node_id, queue)
        return await run.answer

    def _pump(self, node_id: int, queue: _NodeQueue) -> None:
        while queue.in_flight < self._max_in_flight:
            batch = self._take(queue)
            if not batch:
                return
            queue.in_flight += 1
            flush = asyncio.create_task(self._flush(node_id, queue, batch))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)

    def _take(self, queue: _NodeQueue) -> list[_Run]:
        batch: list[_Run] = []
        size = 0
        while queue.waiting:
            run = queue.waiting[0]
            if run.answer.done():  # its caller went away before it was sent
                queue.waiting.popleft()
                continue
            if batch and size + len(run.envelopes) > self._max_envelopes:
                break
            batch.append(queue.waiting.popleft())
            size += len(run.envelopes)
        return batch

    async def _flush(self, node_id: int, queue: _NodeQueue, batch: list[_Run]) -> None:
        try:
            await self._deliver(node_id, batch)
        finally:
            for run in batch:  # cancelled (the gateway stops): callers must not hang
                if not run.answer.done():
                    run.answer.cancel()
            queue.in_flight -= 1
            self._pump(node_id, queue)

    async def _deliver(self, node_id: int, batch: Sequence[_Run]) -> None:
        try:
            clients = {run.client for run in batch}
            client = clients.pop() if len(clients) == 1 else ""
            got = await self._call(node_id, [e for run in batch for e in run.envelopes], client)
        except grpc.aio.AioRpcError as exc:
            if len(batch) > 1 and exc.code() in REFUSED_WHOLE:
                await asyncio.gather(*(self._deliver(node_id, [run]) for run in batch))
                return
            _fail(batch, exc)
            return
        except Exception as exc:  # each caller raises it as its own
            _fail(batch, exc)
            return
        start = 0
        for run in batch:
            end = start + len(run.envelopes)
            if not run.answer.done():
                run.answer.set_result(got[start:end])
            start = end


def _fail(batch: Sequence[_Run], exc: BaseException) -> None:
    for run in batch:
        if not run.answer.done():
            run.answer.set_exception(exc)
