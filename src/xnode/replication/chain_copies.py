"""Registered nodes' copies of chain payloads, for a read-only node (XIP-49 3.4).

A read-only node indexes the chain itself, but its key is in no registry, so clients would
refuse the blockchain proofs it signs (3.3.4, query rule 2). Every node builds the same signed
content for a chain event (originator 0 or 1, the contract's sequence id, the block's time,
the event's bytes); only the proof's signature differs. So before a page of payloads is
stored, each is swapped for a registered node's copy with the same content and transaction
(core.chain_payloads.vouches_for), fetched with the public QueryEnvelopes. Until a registered
node serves one, the page waits: a read-only node serves no chain payload a client refuses."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import grpc
import structlog

from xnode.core.chain_payloads import ChainPayload, NotVouched, vouches_for
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.errors import Rejected
from xnode.core.reconciliation import SequenceRange
from xnode.core.registry import NodeEntry
from xnode.replication.repair_peer import GrpcRepairPeer
from xnode.replication.worker import ReplicationConfig, has_address, peer_channel
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


class PeerChainCopies:
    def __init__(self, source: RegistrySource, config: ReplicationConfig) -> None:
        self._source = source
        self._config = config
        self._channels: dict[int, tuple[str, grpc.aio.Channel]] = {}
        self._retired: list[grpc.aio.Channel] = []

    async def vouched(self, payloads: Sequence[ChainPayload]) -> list[ChainPayload]:
        registry = self._source.current()
        keys = {entry.public_key for entry in registry.nodes.values()}
        peers = [e for e in registry.nodes.values() if e.enabled and has_address(e)]
        random.shuffle(peers)  # no one registered node carries every read-only node's load
        found: dict[tuple[int, int], bytes] = {}
        for peer in peers:
            missing = [p for p in payloads if _key(p) not in found]
            if not missing:
                break
            await self._ask(peer, missing, keys, found)
        unvouched = [p for p in payloads if _key(p) not in found]
        if unvouched:
            first = unvouched[0].event
            raise NotVouched(
                f"{len(unvouched)} chain payload(s) from originator {first.originator} "
                f"sequence id {first.sequence_id} on: no registered node serves them yet"
            )
        return [dataclasses.replace(p, raw=found[_key(p)]) for p in payloads]

    async def _ask(
        self,
        peer: NodeEntry,
        missing: Sequence[ChainPayload],
        keys: set[bytes],
        found: dict[tuple[int, int], bytes],
    ) -> None:
        own = {_key(p): p.raw for p in missing}
        # No token: this is a read-only node, whose token (anyone can make one) is limited
        # as its client IP anyway (api.auth); QueryEnvelopes is a client API.
        client = GrpcRepairPeer(peer.node_id, self._channel(peer))
        for originator in sorted({p.event.originator for p in missing}):
            seqs = [s for o, s in own if o == originator]
            try:
                raws = await client.envelopes(originator, SequenceRange(min(seqs), max(seqs)))
            except grpc.aio.AioRpcError as exc:
                log.info("chain_copies_unavailable", peer=peer.node_id, code=exc.code().name)
                return
            for raw in raws:
                key = (originator, _sequence_id(raw))
                mine = own.get(key)
                if mine is not None and key not in found and vouches_for(mine, raw, keys):
                    found[key] = raw

    def _channel(self, entry: NodeEntry) -> grpc.aio.Channel:
        cached = self._channels.get(entry.node_id)
        if cached is not None and cached[0] == entry.http_address:
            return cached[1]
        if cached is not None:
            self._retired.append(cached[1])  # the node moved: closed with the rest
        channel = peer_channel(entry.http_address, self._config)
        self._channels[entry.node_id] = (entry.http_address, channel)
        return channel

    async def close(self) -> None:
        for channel in [*self._retired, *(c for _, c in self._channels.values())]:
            await channel.close(None)
        self._channels.clear()
        self._retired.clear()


def _key(payload: ChainPayload) -> tuple[int, int]:
    return payload.event.originator, payload.event.sequence_id


def _sequence_id(raw: bytes) -> int:
    """The envelope's sequence id, or 0 (no chain payload has it) when it does not parse."""
    try:
        return parse_originator_envelope(raw).sequence_id
    except Rejected:
        return 0
