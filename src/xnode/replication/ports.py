"""What replication needs from the rest of the node, implemented by the store and wired in
xnode.server: replication never imports the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.forks import ForkResolution
from xnode.core.verification import Position


class ReplicaStore(Protocol):
    """Where envelopes received from peers are stored."""

    async def newest_per_originator(self) -> dict[int, Position]:
        """The newest stored envelope of every originator: where its streams resume."""
        ...

    async def stored_envelopes(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, bytes]:
        """The stored bytes at these sequence ids (expired or not), by sequence id."""
        ...

    async def insert_received(
        self, envelopes: Sequence[IndexedEnvelope], notice_token: str
    ) -> list[tuple[int, int]]:
        """Stores what is not stored yet, in one transaction, and tells other processes
        (their commit notices carry `notice_token`); returns the (originator, sequence id)
        keys that were new."""
        ...

    async def resolve_forks(
        self, envelopes: Sequence[IndexedEnvelope]
    ) -> list[ForkResolution | None]:
        """Each envelope differs from the stored one at its (originator, sequence id): keeps
        both as fork evidence and puts the one xnode.core.forks picks in the log, all in one
        transaction; None where nothing (or the same bytes) is stored."""
        ...


class MisbehaviorRecorder(Protocol):
    """Keeps this node's own misbehavior reports (XIP-49 3.2.8); never raises, so replication
    carries on when a report cannot be stored."""

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None: ...


class StoreHealth(Protocol):
    """Whether this node's own database answers (store.probe.PostgresProbe, its own
    connection): liveness reports are filed only while it does."""

    async def reachable(self) -> bool: ...
