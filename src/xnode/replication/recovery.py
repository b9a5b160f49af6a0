"""Recovering this node's own log from its peers before it originates again.

A node whose database was restored from an older backup would sign sequence ids again that
it signed after the backup and that peers already hold: two envelopes under one (originator,
sequence id), the equivocation XIP-49 3.2.7 reports as DUPLICATE_SEQUENCE_ID. So before the
originator takes publishes, the node opens the replication stream of its OWN originator id on
every peer, resumed from its local top: the stream's initial metadata is the peer's vector
clock (how far the peer holds this node's log), and its catch-up is the envelopes beyond the
local top, verified and stored like any replicated envelope. The sequencer then resumes past
the highest sequence id any peer reported (expired envelopes included: a peer's clock counts
them even where its queries no longer return them)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc
import structlog

from xnode.core.node_tokens import TokenProvider
from xnode.core.registry import NodeEntry
from xnode.core.wire import FrameError, originator_envelopes
from xnode.replication.ingest import OriginatorLog
from xnode.replication.stream import (
    SUBSCRIBE_ORIGINATORS,
    Timeouts,
    head_from,
    identity,
    originators_request,
)

log = structlog.get_logger(__name__)


class RecoveryFailed(Exception):
    """A peer could not tell how far it holds this node's log."""


@dataclass(frozen=True)
class OwnLogRecovery:
    """What the peers said about this node's own log."""

    local_top: int  # the highest own sequence id the database held at start
    asked: tuple[int, ...]  # peers with an address
    held: dict[int, int] = field(default_factory=dict)  # peer -> highest own id it holds
    failed: dict[int, str] = field(default_factory=dict)  # peer -> why it could not answer

    @property
    def peer_top(self) -> int:
        return max(self.held.values(), default=0)

    @property
    def behind(self) -> bool:
        """Peers hold own sequence ids this database did not have: a restored backup."""
        return self.peer_top > self.local_top


class OwnLogFetch:
    """One peer's copy of this node's log beyond the local top: stored through `target`
    (the node's own OriginatorLog), answered with the highest own id the peer holds."""

    def __init__(
        self,
        peer: int,
        channel: grpc.aio.Channel,
        target: OriginatorLog,
        after: int,
        tokens: TokenProvider,
        timeouts: Timeouts,
    ) -> None:
        self._peer = peer
        self._target = target
        self._after = after
        self._tokens = tokens
        self._timeouts = timeouts
        self._call = channel.unary_stream(
            SUBSCRIBE_ORIGINATORS, request_serializer=identity, response_deserializer=identity
        )

    async def __call__(self) -> int:
        request = originators_request(self._target.originator, self._after)
        call = self._call(
            request.SerializeToString(), metadata=self._tokens.metadata_for(self._peer)
        )
        try:
            return await self._read(call)
        except grpc.aio.AioRpcError as exc:
            raise RecoveryFailed(f"{exc.code().name}: {exc.details()}") from None
        except FrameError as exc:
            raise RecoveryFailed(f"bad frame: {exc}") from None
        except TimeoutError:
            raise RecoveryFailed("no answer in time") from None
        finally:
            call.cancel()

    async def _read(self, call: grpc.aio.UnaryStreamCall[bytes, bytes]) -> int:
        frames = call.__aiter__()
        head: int | None = None
        while True:
            limit = self._timeouts.response_s if head is None else self._timeouts.idle_s
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that comes with a frame.
                async with asyncio.timeout(limit):
                    frame = await frames.__anext__()
            except StopAsyncIteration:
                raise RecoveryFailed("the stream ended before it caught up") from None
            if head is None:  # answered, so authenticated: the metadata holds its clock
                head = head_from(await call.initial_metadata(), self._target.originator)
            raws = originator_envelopes(frame)
            if not raws:
                return head  # caught up: the peer sent everything it holds past ours
            verdicts = [v for part in self._target.start_verify(raws) for v in await part]
            await self._target.store(verdicts, self._peer, direct=False)


async def recover_own_log(
    local_top: int,
    peers: Sequence[NodeEntry],
    fetch: Callable[[NodeEntry], Awaitable[int]],
) -> OwnLogRecovery:
    """Asks every peer at once; logs the outcome once."""
    asked = tuple(sorted(p.node_id for p in peers))
    outcome = OwnLogRecovery(local_top, asked)
    answers = await asyncio.gather(*(fetch(p) for p in peers), return_exceptions=True)
    for peer, answer in zip(peers, answers, strict=True):
        if isinstance(answer, RecoveryFailed):
            outcome.failed[peer.node_id] = str(answer)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            outcome.held[peer.node_id] = answer
    _report(outcome)
    return outcome


def _report(outcome: OwnLogRecovery) -> None:
    facts = {
        "local_top": outcome.local_top,
        "peer_top": outcome.peer_top,
        "answered": sorted(outcome.held),
        "failed": outcome.failed,
    }
    if not outcome.asked:
        log.info("own_log_check_skipped", reason="no peer with an address in the registry")
    elif not outcome.held:
        # Loud: if this database was restored from a backup, the next publishes may sign
        # sequence ids that peers already hold under other envelopes.
        log.warning(
            "own_log_unverified",
            detail="no peer answered; started without checking that peers hold no newer "
            "envelopes of this node (after a restore from backup this can re-sign sequence ids)",
            **facts,
        )
    elif outcome.behind:
        log.warning(
            "own_log_recovered",
            detail="peers held envelopes of this node beyond its database (restored from an "
            "older backup?); stored them, sequencing resumes after the highest",
            **facts,
        )
    else:
        log.info("own_log_checked", **facts)
