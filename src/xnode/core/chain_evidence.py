"""BLOCKCHAIN_INCONSISTENCY evidence (XIP-49 3.2.7): a chain payload (originator 0 or 1) that
a node vouched for with its BlockchainProof signature, although the transaction it names
carried other content. Pure: the transaction's outcome is looked up by the caller (the node's
chain adapter, `xnode watchdog`, the council's job) and passed in as `TxOutcome`.

What convicts is content the transaction hash itself fixes: its calldata, hence the payload
bytes its MessageSent or IdentityUpdateCreated log carries. The sequence id and the block
time are not compared: a re-org may re-include the same transaction in another block or
order, and a node that indexed the first inclusion is honest. Neither is a transaction the
chain does not know (yet, or any more) or one that reverted evidence: re-orgs explain both."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.chain_payloads import ChainEvent, MalformedPayload, payer_envelope_of
from xnode.core.constants import CHAIN_ORIGINATORS
from xnode.core.crypto import SignatureError
from xnode.core.envelopes import envelope_signer


@dataclass(frozen=True, slots=True)
class TxOutcome:
    """A mined transaction as the chain has it: whether it succeeded and the payload events
    (only the payload contracts' logs, decoded) it emitted."""

    succeeded: bool
    events: tuple[ChainEvent, ...]


# transaction hash -> its outcome; a hash the chain does not know is absent.
ChainFacts = Mapping[bytes, TxOutcome]


@dataclass(frozen=True, slots=True)
class ChainClaim:
    """A chain payload some node signed: what it says the transaction carried."""

    originator: int
    sequence_id: int
    transaction_hash: bytes
    payer_envelope_bytes: bytes
    signer: bytes


def chain_claim(envelope: envelopes_pb2.OriginatorEnvelope, where: str) -> ChainClaim:
    """The claim of a chain payload; ValueError naming what is wrong with it."""
    if envelope.WhichOneof("proof") != "blockchain_proof":
        raise ValueError(f"{where}: carries no blockchain proof")
    try:
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
    except DecodeError as exc:
        raise ValueError(f"{where}: unsigned originator envelope does not decode ({exc})") from None
    if unsigned.originator_node_id not in CHAIN_ORIGINATORS:
        raise ValueError(f"{where}: originator {unsigned.originator_node_id} is not the chain's")
    proof = envelope.blockchain_proof
    try:
        signer = envelope_signer(envelope)
    except SignatureError as exc:
        raise ValueError(f"{where}: node signature does not recover ({exc})") from None
    return ChainClaim(
        unsigned.originator_node_id,
        unsigned.originator_sequence_id,
        proof.transaction_hash,
        unsigned.payer_envelope_bytes,
        signer,
    )


def transactions_named(envelopes: Sequence[envelopes_pb2.OriginatorEnvelope]) -> list[bytes]:
    """The transaction hashes a report's chain payloads name (what to look up)."""
    return [
        e.blockchain_proof.transaction_hash
        for e in envelopes
        if e.WhichOneof("proof") == "blockchain_proof"
    ]


def _carried(event: ChainEvent) -> bytes | None:
    try:
        return payer_envelope_of(event)[0]
    except MalformedPayload:
        return None


def claim_contradicted(claim: ChainClaim, outcome: TxOutcome | None) -> str | None:
    """None when the chain contradicts the claim, else why it does not (yet)."""
    tx = "0x" + claim.transaction_hash.hex()
    if outcome is None:
        return f"transaction {tx} is not on the chain (a re-org may have dropped it)"
    if not outcome.succeeded:
        return f"transaction {tx} reverted (a re-org may have changed its outcome)"
    for event in outcome.events:
        if event.originator == claim.originator and _carried(event) == claim.payer_envelope_bytes:
            return f"transaction {tx} carries this payload"
    return None


def why_not_inconsistent(
    envelopes: Sequence[envelopes_pb2.OriginatorEnvelope],
    node_keys: Collection[bytes],
    chain: ChainFacts,
) -> str | None:
    """None when every envelope is a chain payload signed by one of `node_keys` and the chain
    contradicts at least one of them at its transaction; else what failed."""
    claims: list[tuple[str, ChainClaim]] = []
    for index, envelope in enumerate(envelopes):
        where = f"envelope {index}"
        try:
            claim = chain_claim(envelope, where)
        except ValueError as exc:
            return str(exc)
        if claim.signer not in node_keys:
            return f"{where}: not signed by the accused's registry key"
        claims.append((where, claim))
    failures = []
    for where, claim in claims:
        problem = claim_contradicted(claim, chain.get(claim.transaction_hash))
        if problem is None:
            return None
        failures.append(f"{where}: {problem}")
    return "; ".join(failures) or "the report carries no chain payload"
