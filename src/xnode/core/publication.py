"""Proof of publication: one envelope, the originator's signed checkpoint and
the inclusion proof of the envelope's leaf in that checkpoint's tree.

Anyone holding only the originator's public key (from the registry) can check it offline: the
envelope's originator signature and the checkpoint's signature recover to that key, and the
envelope's leaf (xnode.core.checkpoints.envelope_leaf) hashes up the proof's path to the
checkpoint's root. The originator then cannot deny having published the envelope as sequence
id S of its log, nor publish another sequence id S in the same log without signing a fork.

The file is JSON (`to_json` / `from_json`; documented in docs/proofs.md):
    {"version": 1, "originator_node_id": N, "sequence_id": S, "tree_size": T,
     "envelope": "0x<signed OriginatorEnvelope>", "checkpoint": "0x<signed Checkpoint>",
     "proof": ["0x<32 bytes>", ...]}"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from xnode.core import merkle
from xnode.core.checkpoints import (
    Checkpoint,
    CheckpointError,
    check_inclusion,
    envelope_leaf,
    has_log,
    parse_checkpoint,
    verify_checkpoint,
)
from xnode.core.crypto import SignatureError
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.errors import Rejected

VERSION = 1


class ProofInvalid(ValueError):
    """The proof does not hold; str() says which part failed."""


@dataclass(frozen=True, slots=True)
class PublicationProof:
    originator_node_id: int
    sequence_id: int
    envelope: bytes  # the signed OriginatorEnvelope
    checkpoint: bytes  # the signed xnode.logs.v1.Checkpoint
    proof: tuple[bytes, ...]  # RFC 9162 inclusion path, leaf to root

    @property
    def tree_size(self) -> int:
        return _checkpoint(self.checkpoint).tree_size

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": VERSION,
                "originator_node_id": self.originator_node_id,
                "sequence_id": self.sequence_id,
                "tree_size": self.tree_size,
                "envelope": "0x" + self.envelope.hex(),
                "checkpoint": "0x" + self.checkpoint.hex(),
                "proof": ["0x" + p.hex() for p in self.proof],
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> PublicationProof:
        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                raise ProofInvalid(f"unknown proof version {data.get('version')!r}")
            return cls(
                int(data["originator_node_id"]),
                int(data["sequence_id"]),
                _hex(data["envelope"]),
                _hex(data["checkpoint"]),
                tuple(_hex(p) for p in data["proof"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if isinstance(exc, ProofInvalid):
                raise
            raise ProofInvalid(f"not a proof file: {exc!r}") from None


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.removeprefix("0x"))


def _checkpoint(signed: bytes) -> Checkpoint:
    try:
        return parse_checkpoint(signed)[0]
    except CheckpointError as exc:
        raise ProofInvalid(str(exc)) from None


def build_proof(envelope: bytes, checkpoint: bytes, proof: Sequence[bytes]) -> PublicationProof:
    """A proof from what a node answers (LogApi.GetInclusionProof) for the envelope."""
    try:
        parsed = parse_originator_envelope(envelope)
    except Rejected as exc:
        raise ProofInvalid(exc.detail) from None
    return PublicationProof(
        parsed.originator_node_id, parsed.sequence_id, envelope, checkpoint, tuple(proof)
    )


def verify_publication(proof: PublicationProof, public_key: bytes) -> Checkpoint:
    """Raises ProofInvalid unless the originator with `public_key` published the envelope at
    its sequence id; returns the checkpoint it is committed by."""
    try:
        parsed = parse_originator_envelope(proof.envelope)
        signer = parsed.signer_public_key()
    except Rejected as exc:
        raise ProofInvalid(f"envelope: {exc.detail}") from None
    except SignatureError as exc:
        raise ProofInvalid(f"envelope signature: {exc}") from None
    where = (parsed.originator_node_id, parsed.sequence_id)
    if where != (proof.originator_node_id, proof.sequence_id):
        raise ProofInvalid(
            f"the envelope is {where}, the proof names "
            f"{(proof.originator_node_id, proof.sequence_id)}"
        )
    if not has_log(parsed.originator_node_id):
        raise ProofInvalid("chain payloads are proven by the chain, not by a checkpoint")
    if signer != public_key:
        raise ProofInvalid("the envelope is not signed by the given key")
    try:
        checkpoint = verify_checkpoint(proof.checkpoint, public_key)
    except CheckpointError as exc:
        raise ProofInvalid(f"checkpoint: {exc}") from None
    if checkpoint.originator_node_id != parsed.originator_node_id:
        raise ProofInvalid("the checkpoint commits another originator's log")
    try:
        leaf = envelope_leaf(proof.envelope, checkpoint.leaf_format)
        check_inclusion(checkpoint, parsed.sequence_id, leaf, proof.proof)
    except merkle.ProofError as exc:
        raise ProofInvalid(f"inclusion: {exc}") from None
    return checkpoint
