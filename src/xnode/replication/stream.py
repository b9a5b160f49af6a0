"""One peer stream: SubscribeOriginators for one originator's envelopes, served by one peer
(the originator itself, or another peer as a fallback), resumed from what is stored,
reconnected with backoff. Reading, verifying and storing overlap (a small pipeline), so the
network, the verifying threads and Postgres are busy at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import grpc
import structlog

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import misbehavior
from xnode.core.backoff import Backoff
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_to_proto
from xnode.core.node_tokens import CLOCK_METADATA, TokenProvider
from xnode.core.verification import Verdict
from xnode.core.wire import FrameError, originator_envelopes
from xnode.observability.metrics import REPLICATION_RECONNECTS, REPLICATION_STREAMS
from xnode.observability.outage import DatabaseOutage
from xnode.replication.ingest import OriginatorLog
from xnode.tls import is_handshake_failure
from xnode.usecases.concurrency import end_if_cancelled
from xnode.usecases.ports import StoreUnavailable

log = structlog.get_logger(__name__)

SUBSCRIBE_ORIGINATORS = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators"
PIPELINE_DEPTH = 8  # batches read ahead while earlier ones are verified and stored
MAX_STORE_BATCH = 5000


class Mode(StrEnum):
    DIRECT = "direct"
    FALLBACK = "fallback"


@dataclass(frozen=True)
class Timeouts:
    response_s: float  # XIP's T: no first answer by then is MISBEHAVIOR_UNRESPONSIVE_NODE
    slow_s: float  # XIP's t: a first answer after this is MISBEHAVIOR_SLOW_NODE
    idle_s: float  # silence (not even a keepalive) this long on an open stream: reconnect


@dataclass
class Hooks:
    """How a stream tells its owner about the peer (direct streams only)."""

    reachable: Callable[[], None]
    unreachable: Callable[[], None]
    report: Callable[[mb.UnsignedMisbehaviorReport, str], Awaitable[None]]  # (report, detail)


class Unresponsive(Exception):
    def __init__(self, waited_s: float, what: str) -> None:
        super().__init__(what)
        self.waited_s = waited_s


class _Pipeline:
    """reader -> verify (threads) -> store. Each batch read starts verifying at once; the
    writer takes results in order and stores them, merging what is ready into one insert."""

    def __init__(self, target: OriginatorLog, source: int, direct: bool) -> None:
        self._log = target
        self._source = source
        self._direct = direct
        self._verifying: asyncio.Queue[list[asyncio.Future[list[Verdict]]] | None] = asyncio.Queue(
            PIPELINE_DEPTH
        )
        self._writer = asyncio.create_task(self._write(), name=f"store-{target.originator}")

    async def put(self, raws: list[bytes] | None) -> None:
        """Waits for room; raises what the writer failed with (e.g. the store is down)."""
        parts = None if raws is None else self._log.start_verify(raws)
        put = asyncio.ensure_future(self._verifying.put(parts))
        try:
            await asyncio.wait([put, self._writer], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            put.cancel()
            raise
        if self._writer.done() and not put.done():
            put.cancel()
            await self._writer  # raises its exception
            raise RuntimeError("the store stage ended early")
        await put

    async def finish(self) -> None:
        await self.put(None)
        await self._writer

    async def cancel(self) -> None:
        self._writer.cancel()
        # wait(), not gather(): if this caller is cancelled too, the writer must still finish
        # its cleanup (an interrupted connection release would never return to the pool).
        await asyncio.wait([self._writer])
        while not self._verifying.empty():  # results nobody will store
            for part in self._verifying.get_nowait() or []:
                part.cancel()

    async def _results(self, parts: list[asyncio.Future[list[Verdict]]]) -> list[Verdict]:
        return [v for part in parts for v in await part]

    async def _write(self) -> None:
        done = False
        while not done:
            parts = await self._verifying.get()
            if parts is None:
                return
            batch = await self._results(parts)
            # Whatever else is verified already goes into the same transaction.
            while len(batch) < MAX_STORE_BATCH and not self._verifying.empty():
                more = self._verifying.get_nowait()
                if more is None:
                    done = True
                    break
                batch += await self._results(more)
            await self._log.store(batch, self._source, self._direct)


def originators_request(originator: int, after: int) -> api.SubscribeOriginatorsRequest:
    return api.SubscribeOriginatorsRequest(
        filter=api.SubscribeOriginatorsRequest.OriginatorFilter(
            originator_node_ids=[originator], last_seen=cursor_to_proto(Cursor({originator: after}))
        )
    )


def _as_subscribe_request(originator: int, after: int) -> api.SubscribeEnvelopesRequest:
    """The stream described as the XIP's SubscribeEnvelopes query, for liveness reports."""
    return api.SubscribeEnvelopesRequest(
        query=api.EnvelopesQuery(
            originator_node_ids=[originator],
            last_seen=cursor_to_proto(Cursor({originator: after})),
        )
    )


def identity(data: bytes) -> bytes:
    return data


def head_from(metadata: Any, originator: int) -> int:
    for key, value in metadata or ():
        if key == CLOCK_METADATA and isinstance(value, bytes):
            with contextlib.suppress(Exception):
                return int(
                    envelopes_pb2.Cursor.FromString(value).node_id_to_sequence_id[originator]
                )
    return 0


class PeerStream:
    def __init__(
        self,
        peer: int,
        channel: Callable[[], grpc.aio.Channel],
        target: OriginatorLog,
        mode: Mode,
        tokens: TokenProvider,
        timeouts: Timeouts,
        backoff: Backoff,
        hooks: Hooks | None,
        outage: DatabaseOutage,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """A lost store is told to `outage`. `channel` gives the channel to the peer for each
        attempt: after a certificate renewal, the next one is made with the new certificate."""
        self.peer = peer
        self._outage = outage
        self.originator = target.originator
        self.channel = channel
        self._target = target
        self._mode = mode
        self._tokens = tokens
        self._timeouts = timeouts
        self._backoff = backoff
        self._hooks = hooks
        self._clock = clock
        self._log = log.bind(peer=peer, originator=target.originator, mode=mode.value)
        self._tls_refused = False
        self._unreachable_since: float | None = None

    async def run(self) -> None:
        """Until cancelled: stream, and after each end or failure, wait and resume."""
        while True:
            answered = await self._attempt()
            end_if_cancelled()  # don't reconnect
            if answered:
                self._backoff.reset()
                self._tls_refused = False
                self._unreachable_since = None
            delay = self._backoff.next_delay()
            REPLICATION_RECONNECTS.labels(str(self.peer), self._mode.value).inc()
            await asyncio.sleep(delay)

    async def _attempt(self) -> bool:
        """One stream; True when the peer answered at least once."""
        after = self._target.sequence_id
        started = self._clock.monotonic_s()
        subscribe = self.channel().unary_stream(
            SUBSCRIBE_ORIGINATORS, request_serializer=identity, response_deserializer=identity
        )
        call = subscribe(
            originators_request(self._target.originator, after).SerializeToString(),
            metadata=self._tokens.metadata_for(self.peer),
        )
        pipeline = _Pipeline(self._target, self.peer, self._mode is Mode.DIRECT)
        state = {"answered": False}
        gauge = REPLICATION_STREAMS.labels(self._mode.value)
        gauge.inc()
        try:
            await self._read(call, pipeline, started, state)
            await pipeline.finish()
        except Unresponsive as exc:
            await self._unresponsive(exc, state["answered"])
        except grpc.aio.AioRpcError as exc:
            await self._failed(exc, started, state["answered"])
        except FrameError as exc:
            self._log.warning("peer_stream_bad_frame", error=str(exc))
        except (StoreUnavailable, OSError) as exc:
            # The store failed: nothing past the stored position is lost; resume later.
            self._outage.failed(
                "peer_stream", exc, peer=self.peer, originator=self.originator, after=after
            )
        finally:
            gauge.dec()
            call.cancel()
            await pipeline.cancel()
        return state["answered"]

    async def _read(
        self, call: Any, pipeline: _Pipeline, started: float, state: dict[str, bool]
    ) -> None:
        frames = call.__aiter__()
        while True:
            limit = self._timeouts.idle_s if state["answered"] else self._timeouts.response_s
            try:
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that comes as a
                # frame arrives, and a healthy stream would then outlive the node's stop.
                async with asyncio.timeout(limit):
                    frame = await frames.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                waited = self._clock.monotonic_s() - started if not state["answered"] else limit
                what = "silent" if state["answered"] else "no answer"
                raise Unresponsive(waited, f"{what} for {limit:g} s") from None
            if not state["answered"]:
                state["answered"] = True
                await self._first_answer(call, self._clock.monotonic_s() - started)
            raws = originator_envelopes(frame)
            if raws:
                await pipeline.put(raws)

    async def _first_answer(self, call: Any, elapsed_s: float) -> None:
        self._target.saw_head(head_from(await call.initial_metadata(), self._target.originator))
        if self._hooks is None:
            return
        self._hooks.reachable()
        if elapsed_s > self._timeouts.slow_s:
            await self._report(
                misbehavior.SLOW_NODE, elapsed_s, f"first answer after {elapsed_s:.2f} s"
            )

    async def _report(self, kind: int, elapsed_s: float, detail: str) -> None:
        """Direct streams report the peer (the report is the log event); fallback streams
        only log, as the peer's own direct stream reports it."""
        if self._hooks is None:
            self._log.info(
                "fallback_peer_stream_failed", type=misbehavior.type_name(kind), detail=detail
            )
            return
        detail = f"peer {self.peer}, originator {self._target.originator}: {detail}"
        report = misbehavior.liveness_report(
            kind,
            self.peer,
            int(elapsed_s * 1e9),
            _as_subscribe_request(self._target.originator, self._target.sequence_id),
            self._clock.now_ns(),
        )
        await self._hooks.report(report, detail)

    async def _unresponsive(self, exc: Unresponsive, answered: bool) -> None:
        if answered:
            # Silent after answering: reconnect quietly (peers need not send keepalives);
            # the new stream's first answer, or its absence, is what gets judged.
            self._log.info("peer_stream_idle", detail=str(exc))
            return
        await self._report(misbehavior.UNRESPONSIVE_NODE, exc.waited_s, str(exc))
        if self._hooks is not None:
            self._hooks.unreachable()

    async def _failed(self, exc: grpc.aio.AioRpcError, started: float, answered: bool) -> None:
        code, details = exc.code(), exc.details() or ""
        if answered and code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED):
            # The peer restarted, or closed the stream as our token expired: just resume.
            self._log.info("peer_stream_ended", code=code.name, detail=details)
            return
        if code is grpc.StatusCode.CANCELLED:
            return
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            # A message over a size limit (this node's receive limit, or an envelope the peer
            # stored before size caps and cannot send) or the peer's rate limits: the peer
            # did not fail to serve, so no report; the stream resumes after a backoff.
            self._log.warning("peer_stream_too_large_or_limited", detail=details)
            return
        if code is grpc.StatusCode.UNAVAILABLE and is_handshake_failure(details):
            self._refused_by_tls(details)
            if self._hooks is not None:
                self._hooks.unreachable()
            return
        elapsed = self._clock.monotonic_s() - started
        unreachable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        if unreachable and not answered:
            # A refused connection is not yet a peer failing to answer within T: peers that
            # start or restart together refuse each other for a moment. Only a peer that
            # stays unreachable for T is reported, with how long it has been unreachable.
            if self._unreachable_since is None:
                self._unreachable_since = started
            elapsed = self._clock.monotonic_s() - self._unreachable_since
            if elapsed < self._timeouts.response_s:
                self._log.info("peer_unreachable", detail=f"{code.name}: {details}")
                if self._hooks is not None:
                    self._hooks.unreachable()
                return
        kind = misbehavior.UNRESPONSIVE_NODE if unreachable else misbehavior.FAILED_REQUEST
        await self._report(kind, elapsed, f"{code.name}: {details}")
        if not answered and self._hooks is not None:
            self._hooks.unreachable()

    def _refused_by_tls(self, details: str) -> None:
        """The TLS handshake failed: a certificate of another CA, a name that does not match,
        a peer without TLS. A matter of configuration, not of the peer's liveness: not
        reported as misbehavior, logged once until a stream gets through."""
        if not self._tls_refused:
            self._tls_refused = True
            self._log.error("peer_tls_refused", detail=details)
