"""Proofs of publication (xnode.core.publication): built from a log, checked with one key."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.core.test_audit import KEY, OTHER, envelope
from xnode.core import merkle
from xnode.core.checkpoints import envelope_leaf, sign_checkpoint
from xnode.core.publication import ProofInvalid, PublicationProof, build_proof, verify_publication

RAWS = [envelope(i) for i in range(1, 8)]
LEAVES = [envelope_leaf(r) for r in RAWS]
CHECKPOINT = sign_checkpoint(KEY, 100, 7, merkle.root_of(LEAVES), 1, None)


def proof_of(sequence_id: int) -> PublicationProof:
    path = merkle.inclusion_proof(
        sequence_id - 1,
        7,
        lambda level, index: merkle.root_of(LEAVES[index << level : (index + 1) << level]),
    )
    return build_proof(RAWS[sequence_id - 1], CHECKPOINT.signed, path)


def test_every_envelope_of_the_log_proves_and_round_trips_json() -> None:
    for sequence_id in range(1, 8):
        proof = proof_of(sequence_id)
        assert verify_publication(proof, KEY.public_key) == CHECKPOINT
        assert PublicationProof.from_json(proof.to_json()) == proof


def test_altered_envelope_path_or_key_fail() -> None:
    proof = proof_of(3)
    with pytest.raises(ProofInvalid, match="not signed by the given key"):
        verify_publication(proof, OTHER.public_key)
    with pytest.raises(ProofInvalid, match="inclusion"):
        verify_publication(
            dataclasses.replace(proof, proof=(bytes(32), *proof.proof[1:])), KEY.public_key
        )
    with pytest.raises(ProofInvalid, match="proof names"):
        verify_publication(dataclasses.replace(proof, envelope=RAWS[3]), KEY.public_key)
    moved = dataclasses.replace(proof, envelope=RAWS[3], sequence_id=4)
    with pytest.raises(ProofInvalid, match="inclusion"):
        verify_publication(moved, KEY.public_key)
    forged = dataclasses.replace(proof, envelope=envelope(3, key=OTHER))
    with pytest.raises(ProofInvalid):
        verify_publication(forged, KEY.public_key)
    with pytest.raises(ProofInvalid, match="version"):
        PublicationProof.from_json('{"version": 2}')
