"""Signed completeness answers (docs/proofs.md, "Completeness proofs"): a node's answer
"these are all of originator O's envelopes of topic T after cursor C, up to O's checkpoint
S", with the proof against S's topic map, signed by the node.

An honest node signs only answers whose proof holds against the originator's signed
checkpoint and that serve every entry after the cursor the proof shows, but those expired
when it answered (their leaf commits to the expiry). So a signed answer that does not is
OMISSION proven by itself: `why_not_omitted` needs only the registry keys."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from xnode.core.checkpoints import Checkpoint, CheckpointError, verify_checkpoint
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import (
    SignatureError,
    SigningKey,
    completeness_digest,
    keccak256,
    recover_public_key,
)
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.errors import Rejected
from xnode.core.leaves import signed_content
from xnode.core.registry import RegistryKeys
from xnode.core.retention import is_expired
from xnode.core.topic_map import (
    TOPIC_MAP_FORMAT,
    Completeness,
    MapProof,
    Omissions,
    ProofError,
    Served,
    TopicEntry,
    TopicProof,
    compare,
    prove_topic,
    verify_topic,
)
from xnode.core.withholding import Healing
from xnode_api.completeness.v1 import completeness_pb2 as cp

MAX_TOPICS = 64  # per ProveTopics request
MAX_ENTRIES = 256  # entries after the cursor per answer; the client asks again from there


class AnswerError(ValueError):
    """An answer that is not the named node's: it does not decode or is not signed by it."""


def map_proof_message(proof: MapProof) -> cp.MapProof:
    key, value = proof.leaf if proof.leaf is not None else (b"", b"")
    return cp.MapProof(
        depth=len(proof.siblings),
        bitmap=proof.bitmap(),
        siblings=proof.non_empty(),
        leaf_key=key,
        leaf_value=value,
    )


def topic_proof_message(proof: TopicProof) -> cp.TopicProof:
    return cp.TopicProof(
        topic=proof.topic,
        map_proof=map_proof_message(proof.map_proof),
        log_size=proof.log_size,
        log_root=proof.log_root,
        start=proof.start,
        entries=[
            cp.TopicEntry(
                sequence_id=e.sequence_id, expiry_unixtime=e.expiry, content_hash=e.content_hash
            )
            for e in proof.entries
        ],
        first_path=proof.first_path,
        # A run of one entry has one path: sent once.
        last_path=proof.last_path if len(proof.entries) > 1 else (),
    )


def topic_proof(message: cp.TopicProof) -> TopicProof:
    """The proof a message holds (raises ProofError when its shapes are wrong)."""
    m = message.map_proof
    leaf = (m.leaf_key, m.leaf_value) if m.leaf_key else None
    last_path = message.last_path if len(message.entries) > 1 else message.first_path
    return TopicProof(
        message.topic,
        MapProof.from_compressed(m.depth, m.bitmap, list(m.siblings), leaf),
        message.log_size,
        message.log_root,
        message.start,
        tuple(
            TopicEntry(e.sequence_id, e.expiry_unixtime, e.content_hash) for e in message.entries
        ),
        tuple(message.first_path),
        tuple(last_path),
    )


def entry_of(raw_originator_envelope: bytes, sequence_id: int) -> TopicEntry:
    """The topic log entry of a signed envelope (raises ValueError when it does not decode)."""
    content, expiry = signed_content(raw_originator_envelope)
    return TopicEntry(sequence_id, expiry, keccak256(content))


def unsigned_answer(
    node_id: int,
    checkpoint: Checkpoint,
    topic: bytes,
    after: int,
    map_proof: MapProof,
    log: Sequence[TopicEntry],
    held: Mapping[int, bytes],
    answered_ns: int,
) -> cp.UnsignedAnswer:
    """The answer for `topic` after `after`: the proof from its whole log (`log`, as the
    checkpoint's topic map commits it) and the envelopes `held` of the proven entries.
    Raises Healing when an entry is neither held nor expired at `answered_ns` (lost, being
    repaired): an honest node does not sign an answer that proves its own omission."""
    proof = prove_topic(topic, after, map_proof, log, MAX_ENTRIES)
    now_s = answered_ns // NS_PER_SECOND
    unservable = [
        e.sequence_id
        for e in proof.entries
        if e.sequence_id > after and e.sequence_id not in held and not is_expired(e.expiry, now_s)
    ]
    if unservable:
        raise Healing(unservable)
    newer = [e.sequence_id for e in proof.entries if e.sequence_id > after]
    return cp.UnsignedAnswer(
        node_id=node_id,
        originator_node_id=checkpoint.originator_node_id,
        topic=topic,
        after_sequence_id=after,
        checkpoint=checkpoint.signed,
        proof=topic_proof_message(proof),
        envelopes=[held[i] for i in newer if i in held],
        answered_ns=answered_ns,
    )


def sign_answer(key: SigningKey, unsigned: cp.UnsignedAnswer) -> cp.SignedAnswer:
    body = unsigned.SerializeToString(deterministic=True)
    return cp.SignedAnswer(unsigned_answer=body, signature=key.sign(completeness_digest(body)))


def served(raw_envelopes: Sequence[bytes], originator: int) -> list[Served]:
    """The openings of the envelopes an answer serves (those of `originator` that decode)."""
    found = []
    for raw in raw_envelopes:
        try:
            e = parse_originator_envelope(raw)
        except Rejected:
            continue
        if e.originator_node_id == originator:
            found.append(Served(e.sequence_id, e.expiry, keccak256(e.unsigned_raw)))
    return found


@dataclass(frozen=True)
class Answer:
    """A signed answer, its signer checked."""

    unsigned: cp.UnsignedAnswer
    signed: cp.SignedAnswer


def open_answer(signed: cp.SignedAnswer, keys: Collection[bytes]) -> Answer:
    """The answer, when one of `keys` (the answering node's) signed it; else AnswerError."""
    try:
        unsigned = cp.UnsignedAnswer.FromString(signed.unsigned_answer)
        signer = recover_public_key(signed.signature, completeness_digest(signed.unsigned_answer))
    except (DecodeError, SignatureError) as exc:
        raise AnswerError(f"the answer does not decode or its signature does not ({exc})") from None
    if signer not in keys:
        raise AnswerError(f"the answer is not signed by node {unsigned.node_id}'s registry key")
    return Answer(unsigned, signed)


@dataclass(frozen=True)
class Verdict:
    """What an answer proves: the checkpoint it names, what its proof says is complete,
    and what the answer left out of it. `problem` says why the answer itself is wrong
    (its node misbehaved); None when it is complete."""

    checkpoint: Checkpoint | None
    complete: Completeness | None
    omissions: Omissions | None
    problem: str | None


def judge(answer: Answer, originator_keys: Collection[bytes]) -> Verdict:
    """Checks a signed answer against the originator's keys alone."""
    a = answer.unsigned
    checkpoint = None
    for key in originator_keys:
        try:
            checkpoint = verify_checkpoint(a.checkpoint, key)
            break
        except CheckpointError:
            continue
    if checkpoint is None or checkpoint.originator_node_id != a.originator_node_id:
        return Verdict(None, None, None, "the checkpoint is not the originator's")
    if checkpoint.topics is None or checkpoint.topics.format != TOPIC_MAP_FORMAT:
        return Verdict(checkpoint, None, None, "the checkpoint commits to no topic map")
    if a.after_sequence_id + 1 < checkpoint.topics.first_sequence_id:
        return Verdict(checkpoint, None, None, "the cursor is below what the topic map covers")
    try:
        proof = topic_proof(a.proof)
        if proof.topic != a.topic:
            raise ProofError("the proof is of another topic")
        complete = verify_topic(
            checkpoint.topics.map_root, checkpoint.tree_size, a.after_sequence_id, proof
        )
    except ProofError as exc:
        return Verdict(checkpoint, None, None, f"the proof does not hold: {exc}")
    newer = [
        s for s in served(a.envelopes, a.originator_node_id) if s.sequence_id > a.after_sequence_id
    ]
    omissions = compare(complete, newer, a.answered_ns // NS_PER_SECOND)
    if omissions.omitted:
        ids = [e.sequence_id for e in omissions.omitted]
        return Verdict(
            checkpoint,
            complete,
            omissions,
            f"the answer leaves out sequence ids {ids} of originator {a.originator_node_id}, "
            "committed to the topic and not expired when it answered",
        )
    return Verdict(checkpoint, complete, omissions, None)


def why_not_omitted(proof: cp.SignedAnswer, node_id: int, keys: RegistryKeys) -> str | None:
    """None when the accused's own signed answer proves OMISSION, else what failed."""
    try:
        answer = open_answer(proof, keys.get(node_id, ()))
    except AnswerError as exc:
        return str(exc)
    if answer.unsigned.node_id != node_id:
        return f"the answer names node {answer.unsigned.node_id}, not the accused {node_id}"
    verdict = judge(answer, keys.get(answer.unsigned.originator_node_id, ()))
    if verdict.problem is None:
        return "the answer serves every entry its proof commits to"
    if verdict.checkpoint is None:
        # A checkpoint that is not the originator's may be a registry key rotated since:
        # nothing is proven against a key the registry does not name.
        return verdict.problem
    return None
