"""The committed log of a scripted originator that withholds: what node 500 serves on LogApi
and HoldingsApi in the harness's withholding run.

Its envelopes' leaves (format 2) and one checkpoint over them, signed with its registry key
as a real node signs one (core.checkpoints), so honest nodes verify and store it. LogApi
answers over that tree as a node's would (checkpoints, fingerprints, leaves, proofs), the
withheld sequence ids included: the originator committed to them. HoldingsApi answers with
the honest account core.withholding builds, less the withheld envelopes, signed: an account
that contradicts its own checkpoint, which is what convicts a withholder
(docs/evidence.md, "Withholding")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.leaves import HeldLeaf, envelope_leaf, signed_content
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.withholding import MAX_HOLDINGS_SPAN, account, sign_holdings
from xnode_api.logs.v1 import logs_pb2 as pb
from xnode_api.withholding.v1 import withholding_pb2 as wh

LOG_API = pb.DESCRIPTOR.services_by_name["LogApi"].full_name
HOLDINGS_API = wh.DESCRIPTOR.services_by_name["HoldingsApi"].full_name


@dataclass
class CommittedLog:
    """Sequence ids 1..len(raws) of `node_id`, committed; `withheld` never served. With
    `accounts` False, HoldingsApi answers UNAVAILABLE, as an honest node does while it
    heals a loss, but for ever."""

    node_id: int
    key: SigningKey
    raws: list[bytes]
    withheld: frozenset[int] = frozenset()
    accounts: bool = True
    leaves: list[bytes] = field(init=False)
    checkpoint: Checkpoint = field(init=False)

    def __post_init__(self) -> None:
        self.leaves = [envelope_leaf(raw) for raw in self.raws]
        root = merkle.root_of(self.leaves)
        self.checkpoint = sign_checkpoint(
            self.key, self.node_id, self.size, root, time.time_ns(), None
        )

    @property
    def size(self) -> int:
        return len(self.leaves)

    @property
    def served(self) -> list[bytes]:
        """What it serves of its log: every envelope but the withheld ones."""
        return [raw for s, raw in enumerate(self.raws, 1) if s not in self.withheld]

    def perfect(self, level: int, index: int) -> bytes:
        return merkle.root_of(self.leaves[index << level : (index + 1) << level])

    def listed(self, originator: int, r: SequenceRange) -> list[tuple[int, bytes]]:
        """The leaves held in `r`: none of another originator's log."""
        if originator != self.node_id:
            return []
        return [(s, self.leaves[s - 1]) for s in range(r.first, min(r.last, self.size) + 1)]

    def sized(self, tree_size: int) -> int:
        """The tree size asked for (0: the checkpoint's); ValueError beyond the log."""
        if tree_size > self.size:
            raise ValueError(f"the tree held here has {self.size} leaves")
        return tree_size or self.size

    def inclusion(self, sequence_id: int, tree_size: int) -> list[bytes]:
        if not 1 <= sequence_id <= tree_size:
            raise ValueError(f"sequence id {sequence_id} is not in a tree of {tree_size} leaves")
        return merkle.inclusion_proof(sequence_id - 1, tree_size, self.perfect)

    def holdings(
        self, first: int, last: int, question: wh.SignedQuestion | None = None
    ) -> wh.SignedHoldings:
        """The honest account of first..last (answering `question`), less the withheld
        envelopes, signed."""
        top = min(last, self.size)
        held = [
            HeldLeaf(self.node_id, s, self.leaves[s - 1], signed_content(raw)[1], raw)
            for s, raw in enumerate(self.raws[first - 1 : top], first)
        ]
        unsigned = account(self.node_id, first, last, self.size, held, time.time_ns(), question)
        hidden = {self.raws[s - 1] for s in self.withheld if s <= self.size}
        kept = [raw for raw in unsigned.envelopes if raw not in hidden]
        del unsigned.envelopes[:]
        unsigned.envelopes.extend(kept)
        return sign_holdings(self.key, unsigned)


def _ranges(ranges: Iterable[pb.SequenceRange]) -> list[SequenceRange]:
    return [SequenceRange(r.first, r.last) for r in ranges]


Unary = Callable[[Any, Any], Awaitable[Any]]


def _unary(method: Unary, request: Any, response: Any) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler whose ValueError is INVALID_ARGUMENT, as a node answers a bad range."""

    async def handle(message: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await method(message, context)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    return grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=request.FromString,
        response_serializer=response.SerializeToString,
    )


class LogService:
    """LogApi and HoldingsApi over a CommittedLog."""

    def __init__(self, log: CommittedLog) -> None:
        self._log = log

    def _mine(self, originator: int) -> bool:
        return originator == self._log.node_id

    async def checkpoints(self, request: Any, _context: Any) -> pb.GetCheckpointsResponse:
        cp = self._log.checkpoint
        found = self._mine(request.originator_node_id) and (
            request.latest or cp.tree_size > request.after_sequence_id
        )
        signed = [pb.Checkpoint.FromString(cp.signed)] if found else []
        return pb.GetCheckpointsResponse(checkpoints=signed)

    async def subscribe(
        self, request: pb.SubscribeCheckpointsRequest, _context: Any
    ) -> AsyncIterator[pb.SubscribeCheckpointsResponse]:
        cp = self._log.checkpoint
        if self._mine(request.originator_node_id) and cp.tree_size > request.after_sequence_id:
            signed = pb.Checkpoint.FromString(cp.signed)
            yield pb.SubscribeCheckpointsResponse(checkpoints=[signed])
        await asyncio.Event().wait()  # no checkpoint after this one: the stream stays open

    async def inclusion(self, request: Any, _context: Any) -> pb.GetInclusionProofResponse:
        size = self._log.sized(request.tree_size)
        proof = self._log.inclusion(request.sequence_id, size)
        return pb.GetInclusionProofResponse(
            leaf_hash=self._log.leaves[request.sequence_id - 1], tree_size=size, proof=proof
        )

    async def run_proofs(self, request: Any, _context: Any) -> pb.GetRunProofsResponse:
        size = self._log.sized(request.tree_size)
        proofs = [
            pb.RunProof(
                first_proof=self._log.inclusion(r.first, size),
                last_proof=self._log.inclusion(r.last, size),
            )
            for r in _ranges(request.runs)
        ]
        return pb.GetRunProofsResponse(tree_size=size, proofs=proofs)

    async def consistency(self, request: Any, _context: Any) -> pb.GetConsistencyProofResponse:
        second = self._log.sized(request.second_size)
        proof = merkle.consistency_proof(request.first_size, second, self._log.perfect)
        return pb.GetConsistencyProofResponse(proof=proof)

    async def fingerprints(self, request: Any, _context: Any) -> pb.GetFingerprintsResponse:
        found = [
            Fingerprint.of(leaf for _, leaf in self._log.listed(request.originator_node_id, r))
            for r in _ranges(request.ranges)
        ]
        return pb.GetFingerprintsResponse(
            fingerprints=[pb.Fingerprint(count=f.count, xor=f.xor) for f in found]
        )

    async def leaves(self, request: Any, _context: Any) -> pb.GetLeavesResponse:
        found = [
            pb.Leaf(sequence_id=s, leaf_hash=leaf)
            for r in _ranges(request.ranges)
            for s, leaf in self._log.listed(request.originator_node_id, r)
        ]
        return pb.GetLeavesResponse(leaves=found)

    async def signed_holdings(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> wh.GetSignedHoldingsResponse:
        first, last = request.first, request.last
        if not self._log.accounts:
            hidden = sorted(self._log.withheld)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"sequence ids {hidden} are being repaired"
            )
        if not self._mine(request.originator_node_id):
            raise ValueError(f"node {self._log.node_id} accounts for its own log only")
        if not 1 <= first <= last or last - first + 1 > MAX_HOLDINGS_SPAN:
            raise ValueError(f"range {first}..{last}")
        question = request.question if request.HasField("question") else None
        return wh.GetSignedHoldingsResponse(holdings=self._log.holdings(first, last, question))

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        logs = {
            "GetCheckpoints": _unary(
                self.checkpoints, pb.GetCheckpointsRequest, pb.GetCheckpointsResponse
            ),
            "SubscribeCheckpoints": grpc.unary_stream_rpc_method_handler(
                self.subscribe,
                request_deserializer=pb.SubscribeCheckpointsRequest.FromString,
                response_serializer=pb.SubscribeCheckpointsResponse.SerializeToString,
            ),
            "GetInclusionProof": _unary(
                self.inclusion, pb.GetInclusionProofRequest, pb.GetInclusionProofResponse
            ),
            "GetRunProofs": _unary(
                self.run_proofs, pb.GetRunProofsRequest, pb.GetRunProofsResponse
            ),
            "GetConsistencyProof": _unary(
                self.consistency, pb.GetConsistencyProofRequest, pb.GetConsistencyProofResponse
            ),
            "GetFingerprints": _unary(
                self.fingerprints, pb.GetFingerprintsRequest, pb.GetFingerprintsResponse
            ),
            "GetLeaves": _unary(self.leaves, pb.GetLeavesRequest, pb.GetLeavesResponse),
        }
        holdings = {
            "GetSignedHoldings": _unary(
                self.signed_holdings, wh.GetSignedHoldingsRequest, wh.GetSignedHoldingsResponse
            )
        }
        return [
            grpc.method_handlers_generic_handler(LOG_API, logs),
            grpc.method_handlers_generic_handler(HOLDINGS_API, holdings),
        ]
