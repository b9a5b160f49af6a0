"""One sequencer per node, whatever the number of workers (xnode.workers).

Each worker appending to the node's log itself made the sequencer's fast path (a
compare-and-set on the node's clock row, xnode.store.sequencer) miss whenever another worker
had appended in between: with 2 workers, nearly every append of the worker serving fewer
publishes signed twice and took the locked path. So the first
worker owns the sequencer: the other workers validate publishes (parsing, payer signature
recovery, limits) and hand the valid batches to it over a Unix socket; they join its group
commit and come back signed once the batch is durable.

While the link is down (the first worker restarts) a worker sequences with its own
sequencer, whose locked path keeps ids gap-free against any other appender.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable, Sequence

import structlog

from xnode.core.backoff import Backoff
from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.errors import Reason, Rejected
from xnode.core.sequencer_wire import (
    LENGTH,
    Answer,
    Status,
    WireError,
    decode_answer,
    decode_batch,
    encode_answer,
    encode_batch,
    encode_refusal,
)
from xnode.usecases.originator import Originator

log = structlog.get_logger(__name__)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    return await reader.readexactly(length)


class SequencerLink:
    """In the worker that sequences: other workers' batches join `originator`'s group commit."""

    def __init__(self, path: str, originator: Originator) -> None:
        self._path = path
        self._originator = originator
        self._server: asyncio.Server | None = None
        self._answering: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):  # left by a previous first worker
            os.unlink(self._path)
        self._server = await asyncio.start_unix_server(self._serve, self._path)

    async def close(self) -> None:
        """After the originator closed: every batch it accepted is answered, then the link
        closes (batches arriving meanwhile are refused as CLOSING, nothing stored)."""
        if self._server is not None:
            self._server.close()
        while self._answering:
            await asyncio.gather(*self._answering)
        for writer in self._writers:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request_id, batch = decode_batch(await _read_frame(reader))
                task = asyncio.create_task(self._answer(request_id, batch, writer))
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker stopped or restarts
        except WireError as exc:
            log.error("sequencer_link_bad_frame", error=str(exc))
            writer.close()
        finally:
            self._writers.discard(writer)

    async def _answer(
        self, request_id: int, batch: Sequence[Originable], writer: asyncio.StreamWriter
    ) -> None:
        if self._originator.closing:
            writer.write(encode_refusal(request_id, Status.CLOSING, "the sequencer drains"))
            return
        try:
            signed = await self._originator.publish(batch)
        except Rejected as exc:
            status = Status.ALREADY_PUBLISHED
            if exc.reason is not Reason.ALREADY_PUBLISHED:
                status = Status.FAILED
            writer.write(encode_refusal(request_id, status, exc.detail))
            return
        except Exception as exc:  # the worker answers its caller UNAVAILABLE
            writer.write(encode_refusal(request_id, Status.FAILED, str(exc)))
            return
        if not writer.is_closing():
            writer.write(encode_answer(request_id, signed))


class ForwardingOriginator:
    """In the other workers: Originate through the worker that sequences (`path`), or
    through `local` while the link is down. `sequenced(top)` learns the node's log grew to
    `top` by this worker's publishes (the live delivery follows the commit's NOTIFY)."""

    def __init__(
        self,
        path: str,
        node_id: int,
        local: Originator,
        sequenced: Callable[[int], None],
        backoff: Backoff | None = None,
    ) -> None:
        self._path = path
        self._node_id = node_id
        self._local = local
        self._sequenced = sequenced
        self._backoff = backoff or Backoff(0.05, 2.0)
        self._writer: asyncio.StreamWriter | None = None
        self._sent: dict[int, Sequence[Originable]] = {}
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._ids = itertools.count(1)
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.forwarded = 0
        self.local_batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sequencer-link")

    @property
    def linked(self) -> bool:
        """Batches go to the sequencing worker (not to the local sequencer)."""
        return self._writer is not None and not self._closing

    async def publish(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]:
        writer = self._writer
        if writer is None or self._closing:
            return await self._sequence_locally(envelopes)
        request_id = next(self._ids)
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._sent[request_id] = envelopes
        self._waiting[request_id] = answer
        writer.write(encode_batch(request_id, envelopes))
        try:
            result = await answer
        finally:
            self._sent.pop(request_id, None)
            self._waiting.pop(request_id, None)
        if result.status is Status.CLOSING:  # nothing was stored
            return await self._sequence_locally(envelopes)
        if result.status is Status.ALREADY_PUBLISHED:
            raise Rejected(Reason.ALREADY_PUBLISHED, result.detail)
        if result.status is not Status.OK:
            raise Rejected(
                Reason.UNAVAILABLE, f"the node's sequencer could not store: {result.detail}"
            )
        self.forwarded += 1
        self._sequenced(result.signed[-1].sequence_id)
        return result.signed

    async def _sequence_locally(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]:
        self.local_batches += 1
        return await self._local.publish(envelopes)

    async def close(self) -> None:
        """Forwarded batches are answered (or the link fails them); the local group commit
        drains after this (the node closes it)."""
        self._closing = True
        if self._waiting:
            await asyncio.gather(*self._waiting.values(), return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        log.info("sequencer_link_stopped", forwarded=self.forwarded, local=self.local_batches)

    async def _run(self) -> None:
        while not self._closing:
            try:
                reader, writer = await asyncio.open_unix_connection(self._path)
            except OSError as exc:
                log.warning("sequencer_link_down", path=self._path, error=str(exc))
                await asyncio.sleep(self._backoff.next_delay())
                continue
            self._backoff.reset()
            self._writer = writer
            try:
                await self._read_answers(reader)
            finally:
                self._writer = None
                writer.close()
                self._fail_waiting()

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                answer = decode_answer(await _read_frame(reader), self._node_id, self._sent)
                waiting = self._waiting.get(answer.request_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            log.warning("sequencer_link_lost", path=self._path, waiting=len(self._waiting))
        except WireError as exc:
            log.error("sequencer_link_bad_frame", error=str(exc))

    def _fail_waiting(self) -> None:
        """The link broke with batches sent: whether they were stored is unknown, so their
        callers get UNAVAILABLE (as for a lost database connection), never success."""
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(
                    Rejected(
                        Reason.UNAVAILABLE,
                        "the link to the node's sequencer broke; the publish may or may not "
                        "have been stored",
                    )
                )
