"""Evidence that proves itself: whether a safety report's envelopes prove
its claim to a third party holding only the registry keys.

Used by the node (client reports that prove nothing are refused) and by the council's
aggregation job (it counts only what this says is proven). What proves what:
- DUPLICATE_SEQUENCE_ID: two envelopes of the accused originator with one sequence id and
  different signed content, both signatures recovering to the accused's registry key (a fork,
  xnode.core.forks);
- OUT_OF_ORDER: two envelopes of the accused whose signed timestamps go back while their
  sequence ids go up. A sequence gap alone proves nothing: envelopes expire and relays skip;
- INVALID_PAYLOAD: an envelope the accused signed whose payer envelope breaks a SHARED rule
  (one every XIP-49 implementation applies: framing, target originator, topic kind, payer
  signature) of the rule epoch in force at its signed timestamp (core.rule_epochs), never
  today's rules or the checker's clock: the verdict is the same on any day and with any
  code version. xnode's own payload rules (MLS, welcomes, key packages) are judged, not
  proven (docs/evidence.md);
- a timestamp further in the future than the XIP allows is judged at receipt against the
  receiver's clock: the report says what its reporter saw, but nothing in it proves that the
  envelope arrived before its time, so it proves no OUT_OF_ORDER by itself;
- CAUSAL_ORDERING: an envelope of the accused whose depends_on names the accused's own
  sequence id at or after the envelope's own: the originator validates depends_on against
  what it has seen (3.3.4 2.3) and cannot have seen its own later envelopes (the one
  dependency cycle a single originator's signatures prove). A cycle or a missing dependency
  through other originators' envelopes proves nothing against one of them: each signed its
  own claim, and any of them may be the one that lied;
- BLOCKCHAIN_INCONSISTENCY: a chain payload the accused vouched for (its BlockchainProof
  signature) whose transaction, on the chain, carried other content
  (xnode.core.chain_evidence); checked against `chain`, the looked-up transactions;
- WITHHOLDING (xnode's extension): the accused's signed checkpoint covering a sequence id and
  its signed account of its own log, answering an asker's signed question, that leaves the
  id out or names it expired against its commitment (xnode.core.withholding.judge_holdings);
- SPLIT_VIEW (xnode's extension): two of the accused's signed checkpoints committing to two
  different opened format 2 leaves at one sequence id (xnode.core.withholding.why_not_split);
- OMISSION (xnode's extension): the accused's signed completeness answer for a topic whose
  proof does not hold against the originator's signed checkpoint, or that leaves out an
  entry the proof commits to, not expired when it answered
  (xnode.core.completeness.why_not_omitted).
Every envelope in a safety report must be signed by the accused: a report padded with
someone else's envelopes is not clean evidence."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.chain_evidence import ChainFacts, why_not_inconsistent
from xnode.core.completeness import why_not_omitted
from xnode.core.crypto import SignatureError
from xnode.core.envelopes import envelope_signer
from xnode.core.misbehavior import (
    BLOCKCHAIN_INCONSISTENCY,
    CAUSAL_ORDERING,
    DUPLICATE_SEQUENCE_ID,
    OMISSION,
    OUT_OF_ORDER,
    SAFETY_TYPES,
    SPLIT_VIEW,
    WITHHOLDING,
    type_name,
)
from xnode.core.registry import RegistryKeys
from xnode.core.rule_epochs import Broken, Standing, epoch_at, rule_broken
from xnode.core.withholding import extended, why_not_split, why_not_withheld

PAYER_ENVELOPE_RULE = "payer-envelope rule (XIP-49 3.3.4)"


@dataclass(frozen=True, slots=True)
class SignedEnvelope:
    """An envelope whose originator signature recovers to the accused's registry key."""

    sequence_id: int
    originator_ns: int
    unsigned: bytes
    payer_envelope_bytes: bytes


class Unproven(Exception):
    """Why a report proves nothing; str() names what failed."""


def _signed_by(
    envelope: envelopes_pb2.OriginatorEnvelope, index: int, node_id: int, keys: Collection[bytes]
) -> SignedEnvelope:
    where = f"envelope {index}"
    try:
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
    except DecodeError as exc:
        raise Unproven(f"{where}: unsigned originator envelope does not decode ({exc})") from None
    if unsigned.originator_node_id != node_id:
        raise Unproven(
            f"{where}: originated by node {unsigned.originator_node_id}, not the accused {node_id}"
        )
    if envelope.WhichOneof("proof") != "originator_signature":
        raise Unproven(f"{where}: carries no originator signature")
    try:
        signer = envelope_signer(envelope)
    except SignatureError as exc:
        raise Unproven(f"{where}: originator signature does not recover ({exc})") from None
    if signer not in keys:
        raise Unproven(f"{where}: not signed by node {node_id}'s registry key")
    return SignedEnvelope(
        unsigned.originator_sequence_id,
        unsigned.originator_ns,
        envelope.unsigned_originator_envelope,
        unsigned.payer_envelope_bytes,
    )


def _fork(signed: Sequence[SignedEnvelope]) -> None:
    for a, b in combinations(signed, 2):
        if a.sequence_id == b.sequence_id and a.unsigned != b.unsigned:
            return
    raise Unproven("no two envelopes with one sequence id and different signed content")


def _out_of_order(signed: Sequence[SignedEnvelope]) -> None:
    for a, b in combinations(signed, 2):
        first, second = sorted((a, b), key=lambda e: e.sequence_id)
        if first.sequence_id < second.sequence_id and first.originator_ns > second.originator_ns:
            return
    raise Unproven(
        "no two envelopes whose signed timestamps go back as their sequence ids go up "
        "(a sequence gap alone proves nothing: envelopes expire and relays skip)"
    )


def payer_rule_broken(
    payer_envelope_bytes: bytes, originator: int, originator_ns: int
) -> Broken | None:
    """The first rule of the epoch in force at `originator_ns` (core.rule_epochs) these bytes
    break, shared rules first, or None if they pass every one."""
    try:
        payer = envelopes_pb2.PayerEnvelope.FromString(payer_envelope_bytes)
    except DecodeError as exc:
        epoch = epoch_at(originator_ns).number
        return Broken(epoch, "xip49-framing", Standing.SHARED, f"does not decode ({exc})")
    return rule_broken(payer, originator, originator_ns)


def _invalid_payload(signed: Sequence[SignedEnvelope], node_id: int) -> None:
    judged: list[str] = []
    for envelope in signed:
        broken = payer_rule_broken(envelope.payer_envelope_bytes, node_id, envelope.originator_ns)
        if broken is not None and broken.standing is Standing.SHARED:
            return
        if broken is not None:
            judged.append(broken.describe())
    if judged:
        raise Unproven(
            f"judged, not proven: only rules of xnode's own reading are broken ({judged[0]}); "
            f"what convicts is a rule every XIP-49 implementation shares"
        )
    raise Unproven(f"every envelope passes the {PAYER_ENVELOPE_RULE} of its epoch")


def own_dependency_ahead(
    sequence_id: int, payer_envelope_bytes: bytes, originator: int
) -> int | None:
    """The sequence id of `originator` that an envelope's depends_on names at or after the
    envelope's own (a dependency its originator cannot have seen), or None."""
    try:
        payer = envelopes_pb2.PayerEnvelope.FromString(payer_envelope_bytes)
        client = envelopes_pb2.ClientEnvelope.FromString(payer.unsigned_client_envelope)
    except DecodeError:
        return None
    named = client.aad.depends_on.node_id_to_sequence_id.get(originator, 0)
    return named if named >= sequence_id else None


def _causal_ordering(signed: Sequence[SignedEnvelope], node_id: int) -> None:
    for e in signed:
        if own_dependency_ahead(e.sequence_id, e.payer_envelope_bytes, node_id) is not None:
            return
    raise Unproven(
        "no envelope depends on the accused's own sequence id at or after its own (a cycle "
        "or a missing dependency through other originators does not show which one lied)"
    )


# xnode's extension kinds: the field of ExtendedMisbehaviorReport holding the proof, and
# what says why it proves nothing (None: it proves the claim).
# An omission names two nodes (the answering one and the originator), and a withholding proof
# the asker too (its question): their checks get every key.
_ProofCheck = Callable[[Any, int, RegistryKeys], str | None]
_EXTENSION_PROOFS: dict[
    int, tuple[Literal["withholding", "split_view", "omission"], _ProofCheck]
] = {
    WITHHOLDING: ("withholding", why_not_withheld),
    SPLIT_VIEW: ("split_view", lambda p, n, keys: why_not_split(p, n, keys[n])),
    OMISSION: ("omission", why_not_omitted),
}


def _extension_proof(report: mb.UnsignedMisbehaviorReport, keys: RegistryKeys) -> None:
    node_id, kind = report.misbehaving_node_id, int(report.type)
    field, why_not = _EXTENSION_PROOFS[kind]
    what = field.replace("_", " ")
    try:
        proof = extended(report)
    except DecodeError as exc:
        raise Unproven(f"the {what} proof does not decode ({exc})") from None
    if not proof.HasField(field):
        raise Unproven(f"a {type_name(kind)} report carries no {what} proof")
    if not keys.get(node_id):
        raise Unproven(f"checkpoint: misbehaving node {node_id} has no registry key")
    failure = why_not(getattr(proof, field), node_id, keys)
    if failure is not None:
        raise Unproven(failure)


def check_claim(
    report: mb.UnsignedMisbehaviorReport, keys: RegistryKeys, chain: ChainFacts | None = None
) -> None:
    """Raises Unproven, naming what failed, unless the report's own envelopes prove that its
    misbehaving node did what its type says. `chain`: the transactions a
    BLOCKCHAIN_INCONSISTENCY report names, as the chain has them (None: not looked up)."""
    kind, node_id = int(report.type), report.misbehaving_node_id
    if kind in _EXTENSION_PROOFS:
        _extension_proof(report, keys)
        return
    if kind not in SAFETY_TYPES or report.WhichOneof("failure") != "safety":
        raise Unproven(f"a {type_name(kind)} report carries no proof: only safety reports do")
    node_keys = keys.get(node_id)
    if not node_keys:
        raise Unproven(f"misbehaving node {node_id} has no registry key")
    envelopes = report.safety.envelopes
    if not envelopes:
        raise Unproven("the report carries no envelopes")
    if kind == BLOCKCHAIN_INCONSISTENCY:
        if chain is None:
            raise Unproven("a BLOCKCHAIN_INCONSISTENCY claim is checked against the chain")
        failure = why_not_inconsistent(envelopes, node_keys, chain)
        if failure is not None:
            raise Unproven(failure)
        return
    signed = [_signed_by(e, i, node_id, node_keys) for i, e in enumerate(envelopes)]
    if kind == DUPLICATE_SEQUENCE_ID:
        _fork(signed)
    elif kind == OUT_OF_ORDER:
        _out_of_order(signed)
    elif kind == CAUSAL_ORDERING:
        _causal_ordering(signed, node_id)
    else:
        _invalid_payload(signed, node_id)


def why_unproven(
    report: mb.UnsignedMisbehaviorReport, keys: RegistryKeys, chain: ChainFacts | None = None
) -> str | None:
    """None when the report proves its claim, else what failed."""
    try:
        check_claim(report, keys, chain)
    except Unproven as exc:
        return str(exc)
    return None
