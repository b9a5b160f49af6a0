"""LogApi's answers hold no envelopes: their counts' caps bound their bytes, and each, built
at its caps with every field at its widest, stays far below the answer budget (core.sizes),
so no LogApi request can make the node build an answer the send limit would refuse."""

from __future__ import annotations

from xnode.api.logs import MAX_ID
from xnode.core.sizes import DEFAULT_ANSWER_BUDGET_BYTES
from xnode.usecases.logs import MAX_CHECKPOINTS, MAX_LEAVES, MAX_RANGES
from xnode_api.logs.v1 import logs_pb2 as pb

HASH = b"\xff" * 32
PROOF = [HASH] * 64  # an inclusion path in a tree of up to 2**63 leaves


def widest_checkpoint() -> pb.Checkpoint:
    unsigned = pb.UnsignedCheckpoint(
        originator_node_id=2**32 - 1,
        tree_size=MAX_ID,
        root=HASH,
        originator_ns=2**64 - 1,
        previous_hash=HASH,
        leaf_format=2**32 - 1,
    )
    return pb.Checkpoint(unsigned_checkpoint=unsigned.SerializeToString(), signature=b"\xff" * 65)


def test_every_log_answer_at_its_caps_fits_the_answer_budget() -> None:
    answers = {
        "GetCheckpoints": pb.GetCheckpointsResponse(
            checkpoints=[widest_checkpoint()] * MAX_CHECKPOINTS
        ),
        "SubscribeCheckpoints": pb.SubscribeCheckpointsResponse(
            checkpoints=[widest_checkpoint()] * MAX_CHECKPOINTS
        ),
        "GetRunProofs": pb.GetRunProofsResponse(
            tree_size=MAX_ID,
            proofs=[pb.RunProof(first_proof=PROOF, last_proof=PROOF)] * MAX_RANGES,
        ),
        "GetFingerprints": pb.GetFingerprintsResponse(
            fingerprints=[pb.Fingerprint(count=MAX_ID, xor=-1)] * MAX_RANGES
        ),
        "GetLeaves": pb.GetLeavesResponse(
            leaves=[pb.Leaf(sequence_id=MAX_ID, leaf_hash=HASH)] * MAX_LEAVES
        ),
        "GetInclusionProof": pb.GetInclusionProofResponse(
            leaf_hash=HASH, tree_size=MAX_ID, proof=PROOF, checkpoint=widest_checkpoint()
        ),
        "GetConsistencyProof": pb.GetConsistencyProofResponse(proof=PROOF * 2),
    }
    sizes = {name: answer.ByteSize() for name, answer in answers.items()}
    assert max(sizes.values()) < DEFAULT_ANSWER_BUDGET_BYTES // 2, sizes
