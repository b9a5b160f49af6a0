"""A peer as anti-entropy repair sees it (replication.anti_entropy.RepairPeer), over gRPC:
LogApi for fingerprints, leaves and run proofs, QueryEnvelopes (by originator, from a
cursor) for the envelopes themselves, ForkApi for the forks it keeps (replication.fork_sync).
Counts the bytes it exchanges. A peer from before GetRunProofs (UNIMPLEMENTED) is asked
GetInclusionProof for both ends of each run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_to_proto, parse_originator_envelope
from xnode.core.forks import Fork, ForkDigest
from xnode.core.query import MAX_QUERY_LIMIT
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.wire import fields
from xnode.replication.withholding import HoldingsUnanswered
from xnode.usecases.logs import MAX_RANGES
from xnode_api.forks.v1 import forks_pb2 as forks_pb
from xnode_api.logs.v1 import logs_pb2 as pb
from xnode_api.withholding.v1 import withholding_pb2 as wh

_LOGS = "/" + pb.DESCRIPTOR.services_by_name["LogApi"].full_name
_FORKS = "/" + forks_pb.DESCRIPTOR.services_by_name["ForkApi"].full_name
_HOLDINGS = "/" + wh.DESCRIPTOR.services_by_name["HoldingsApi"].full_name
QUERY_ENVELOPES = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
TIMEOUT_S = 30.0


def _ranges(ranges: Sequence[SequenceRange]) -> list[pb.SequenceRange]:
    return [pb.SequenceRange(first=r.first, last=r.last) for r in ranges]


Metadata = Callable[[], Sequence[tuple[str, str]]]


def _no_token() -> Sequence[tuple[str, str]]:
    return ()


class GrpcRepairPeer:
    """`metadata`: this node's token for the peer (its calls get a peer's limits, not a
    client IP's: a wide repair round asks many ranges at once)."""

    def __init__(
        self, node_id: int, channel: grpc.aio.Channel, metadata: Metadata = _no_token
    ) -> None:
        self.node_id = node_id
        self._metadata = metadata
        self.bytes_exchanged = 0
        self._channel = channel
        self._run_proofs = True  # until the peer says it has no GetRunProofs

    async def _call(self, method: str, request: Any, response_type: Any) -> Any:
        call: grpc.aio.UnaryUnaryMultiCallable[Any, Any] = self._channel.unary_unary(
            method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        response = await call(request, timeout=TIMEOUT_S, metadata=self._metadata())
        self.bytes_exchanged += request.ByteSize() + response.ByteSize()
        return response

    async def _call_if_served(self, method: str, request: Any, response_type: Any) -> Any:
        """`_call`, or None when the peer does not serve `method` (an older node)."""
        try:
            return await self._call(method, request, response_type)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            return None

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        request = pb.GetFingerprintsRequest(originator_node_id=originator, ranges=_ranges(ranges))
        response = await self._call(_LOGS + "/GetFingerprints", request, pb.GetFingerprintsResponse)
        return [Fingerprint(f.count, f.xor) for f in response.fingerprints]

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        request = pb.GetLeavesRequest(originator_node_id=originator, ranges=_ranges(ranges))
        response = await self._call(_LOGS + "/GetLeaves", request, pb.GetLeavesResponse)
        return [(leaf.sequence_id, leaf.leaf_hash) for leaf in response.leaves]

    async def inclusion(self, originator: int, sequence_id: int, tree_size: int) -> list[bytes]:
        request = pb.GetInclusionProofRequest(
            originator_node_id=originator, sequence_id=sequence_id, tree_size=tree_size
        )
        response = await self._call(
            _LOGS + "/GetInclusionProof", request, pb.GetInclusionProofResponse
        )
        return list(response.proof)

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        """The inclusion proofs of each run's first and last leaf in the tree of `tree_size`."""
        if self._run_proofs:
            found = await self._run_proofs_at_once(originator, runs, tree_size)
            if found is not None:
                return found
            self._run_proofs = False

        async def ends(run: SequenceRange) -> tuple[list[bytes], list[bytes]]:
            first, last = await asyncio.gather(
                self.inclusion(originator, run.first, tree_size),
                self.inclusion(originator, run.last, tree_size),
            )
            return first, last

        return list(await asyncio.gather(*(ends(r) for r in runs)))

    async def _run_proofs_at_once(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]] | None:
        """GetRunProofs for every run (MAX_RANGES per request); None: the peer has none."""
        found: list[tuple[list[bytes], list[bytes]]] = []
        for start in range(0, len(runs), MAX_RANGES):
            request = pb.GetRunProofsRequest(
                originator_node_id=originator,
                tree_size=tree_size,
                runs=_ranges(runs[start : start + MAX_RANGES]),
            )
            response = await self._call_if_served(
                _LOGS + "/GetRunProofs", request, pb.GetRunProofsResponse
            )
            if response is None:
                return None
            found += [(list(p.first_proof), list(p.last_proof)) for p in response.proofs]
        return found

    async def fork_digest(self, originator: int) -> ForkDigest | None:
        """None: the peer has no GetForkDigest (or no ForkApi at all)."""
        request = forks_pb.GetForkDigestRequest(originator_node_id=originator)
        got = await self._call_if_served(
            _FORKS + "/GetForkDigest", request, forks_pb.GetForkDigestResponse
        )
        return None if got is None else ForkDigest(got.versions, got.digest)

    async def forks(self, originator: int, after_sequence_id: int, limit: int) -> list[Fork] | None:
        """None: the peer has no ForkApi."""
        request = forks_pb.QueryForksRequest(
            originator_node_id=originator, after_sequence_id=after_sequence_id, limit=limit
        )
        got = await self._call_if_served(
            _FORKS + "/QueryForks", request, forks_pb.QueryForksResponse
        )
        if got is None:
            return None
        return [
            Fork(originator, f.originator_sequence_id, tuple(f.versions))
            for f in got.forks
            if f.originator_node_id == originator
        ]

    async def signed_holdings(
        self, originator: int, first: int, last: int, question: wh.SignedQuestion | None = None
    ) -> wh.SignedHoldings:
        """The originator's signed account of first..last of its own log, answering
        `question` (xnode.withholding.v1); HoldingsUnanswered names how it answered
        otherwise."""
        request = wh.GetSignedHoldingsRequest(
            originator_node_id=originator, first=first, last=last, question=question
        )
        try:
            response = await self._call(
                _HOLDINGS + "/GetSignedHoldings", request, wh.GetSignedHoldingsResponse
            )
        except grpc.aio.AioRpcError as exc:
            code = exc.code().name
            raise HoldingsUnanswered(f"{code}: {exc.details()}", code) from None
        return response.holdings  # type: ignore[no-any-return]

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]:
        """The envelopes the peer still holds in `run` (expired ones are gone), in pages."""
        found: list[bytes] = []
        after = run.first - 1
        while after < run.last:
            request = api.QueryEnvelopesRequest(
                query=api.EnvelopesQuery(
                    originator_node_ids=[originator],
                    last_seen=cursor_to_proto(Cursor.of({originator: after})),
                ),
                limit=min(run.last - after, MAX_QUERY_LIMIT),
            )
            call = self._channel.unary_unary(
                QUERY_ENVELOPES,
                request_serializer=api.QueryEnvelopesRequest.SerializeToString,
                response_deserializer=lambda raw: raw,
            )
            raw = await call(request, timeout=TIMEOUT_S, metadata=self._metadata())
            self.bytes_exchanged += request.ByteSize() + len(raw)
            page = [e for n, e in fields(raw) if n == 1 and e is not None]
            if not page:
                break
            found += page
            after = parse_originator_envelope(page[-1]).sequence_id
            if len(page) < request.limit:
                break
        return found
