"""Signed completeness answers and OMISSION (xnode.core.completeness): an honest answer is
complete and proves nothing against its node; an answer that leaves out an entry its proof
commits to (not expired), or whose proof does not hold, proves OMISSION from the report
alone; expired entries are "expired", never "missing"; nothing is proven against a node
that did not sign, or with a checkpoint that is not the originator's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.support.withholding_log import PAYER
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, TopicCommitment, sign_checkpoint
from xnode.core.completeness import (
    AnswerError,
    entry_of,
    judge,
    open_answer,
    sign_answer,
    unsigned_answer,
    why_not_omitted,
)
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.leaves import envelope_leaf
from xnode.core.topic_map import SparseMap, TopicEntry, head_value, topic_key
from xnode.core.topics import Topic, TopicKind
from xnode.core.withholding import Healing, omission_report
from xnode_api.completeness.v1 import completeness_pb2 as cp

ORIGINATOR, NODE = 100, 200
KEY, NODE_KEY = SigningKey(b"\x21" * 32), SigningKey(b"\x22" * 32)
KEYS = {ORIGINATOR: (KEY.public_key,), NODE: (NODE_KEY.public_key,)}
T_NS = 1_800_000_000 * NS_PER_SECOND
GROUPS = {1: b"g" * 16, 2: b"h" * 16, 3: b"g" * 16, 4: b"g" * 16, 5: b"h" * 16, 6: b"g" * 16}
TOPIC = Topic(TopicKind.GROUP_MESSAGES, b"g" * 16).raw


def envelope(sequence_id: int) -> bytes:
    client = group_message_envelope(GROUPS[sequence_id], b"m%d" % sequence_id)
    payer = validate_payer_envelope(build_payer_envelope(client, PAYER, ORIGINATOR), ORIGINATOR)
    return originate(payer, ORIGINATOR, sequence_id, T_NS + sequence_id, KEY).raw


@dataclass
class Log:
    raws: dict[int, bytes]
    logs: dict[bytes, list[TopicEntry]]
    map: SparseMap
    checkpoint: Checkpoint


def committed_log(key: SigningKey = KEY) -> Log:
    raws = {i: envelope(i) for i in GROUPS}
    logs: dict[bytes, list[TopicEntry]] = {}
    for i, group in GROUPS.items():
        topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
        logs.setdefault(topic, []).append(entry_of(raws[i], i))
    m = SparseMap()
    m.set(
        {
            topic_key(t): head_value(len(log), merkle.root_of([e.hash for e in log]))
            for t, log in logs.items()
        }
    )
    root = merkle.root_of([envelope_leaf(raws[i]) for i in sorted(raws)])
    checkpoint = sign_checkpoint(
        key, ORIGINATOR, len(raws), root, T_NS + 10, None, TopicCommitment(m.root())
    )
    return Log(raws, logs, m, checkpoint)


LOG = committed_log()


def answer(after: int, held: dict[int, bytes], answered_ns: int = T_NS + 20) -> cp.UnsignedAnswer:
    return unsigned_answer(
        NODE,
        LOG.checkpoint,
        TOPIC,
        after,
        LOG.map.prove(topic_key(TOPIC)),
        LOG.logs[TOPIC],
        held,
        answered_ns,
    )


def omitting(after: int, left_out: int, answered_ns: int = T_NS + 20) -> cp.UnsignedAnswer:
    """An honest answer with one envelope taken out afterwards (what a liar signs)."""
    unsigned = answer(after, LOG.raws, answered_ns)
    kept = [raw for raw in unsigned.envelopes if raw != LOG.raws[left_out]]
    del unsigned.envelopes[:]
    unsigned.envelopes.extend(kept)
    return unsigned


def test_an_honest_answer_is_complete_and_proves_nothing() -> None:
    signed = sign_answer(NODE_KEY, answer(1, LOG.raws))
    verdict = judge(open_answer(signed, KEYS[NODE]), KEYS[ORIGINATOR])
    assert verdict.problem is None
    assert verdict.complete is not None
    assert [e.sequence_id for e in verdict.complete.entries] == [3, 4, 6]
    assert (
        why_not_omitted(signed, NODE, KEYS) == "the answer serves every entry its proof commits to"
    )


def test_an_absent_topic_is_complete_with_nothing() -> None:
    other = Topic(TopicKind.GROUP_MESSAGES, b"x" * 16).raw
    unsigned = unsigned_answer(
        NODE, LOG.checkpoint, other, 0, LOG.map.prove(topic_key(other)), [], {}, T_NS
    )
    verdict = judge(open_answer(sign_answer(NODE_KEY, unsigned), KEYS[NODE]), KEYS[ORIGINATOR])
    assert verdict.problem is None and verdict.complete is not None
    assert verdict.complete.entries == () and verdict.complete.through == 6


def test_an_answer_leaving_one_out_proves_omission_by_itself() -> None:
    signed = sign_answer(NODE_KEY, omitting(1, 4))
    assert why_not_omitted(signed, NODE, KEYS) is None
    report = omission_report(NODE, signed, T_NS + 30)
    assert why_unproven(report, KEYS) is None


def test_an_answer_whose_proof_hides_an_entry_proves_omission() -> None:
    bad = answer(1, LOG.raws)
    del bad.proof.entries[2]  # entry 4 gone from the proof as well
    del bad.envelopes[1]
    signed = sign_answer(NODE_KEY, bad)
    assert why_not_omitted(signed, NODE, KEYS) is None


def test_an_expired_entry_is_expired_not_missing() -> None:
    expiry = entry_of(LOG.raws[4], 4).expiry
    held = {i: r for i, r in LOG.raws.items() if i != 4}
    late = answer(1, held, answered_ns=expiry * NS_PER_SECOND)
    verdict = judge(open_answer(sign_answer(NODE_KEY, late), KEYS[NODE]), KEYS[ORIGINATOR])
    assert verdict.problem is None and verdict.omissions is not None
    assert [e.sequence_id for e in verdict.omissions.expired] == [4]
    early = omitting(1, 4, answered_ns=(expiry - 1) * NS_PER_SECOND)
    assert why_not_omitted(sign_answer(NODE_KEY, early), NODE, KEYS) is None


def test_an_honest_node_missing_an_unexpired_envelope_signs_nothing() -> None:
    held = {i: r for i, r in LOG.raws.items() if i != 4}
    with pytest.raises(Healing) as healing:
        answer(1, held)
    assert healing.value.sequence_ids == [4]
    assert answer(4, held).envelopes  # after the lost one: nothing to hide


def test_nothing_is_proven_against_a_node_that_did_not_sign() -> None:
    forged = sign_answer(SigningKey(b"\x23" * 32), omitting(1, 4))
    assert "not signed by node 200" in (why_not_omitted(forged, NODE, KEYS) or "")
    with pytest.raises(AnswerError):
        open_answer(forged, KEYS[NODE])
    signed = sign_answer(NODE_KEY, omitting(1, 4))
    assert why_not_omitted(signed, ORIGINATOR, KEYS) is not None  # names another node


def test_nothing_is_proven_with_a_checkpoint_not_the_originators() -> None:
    forged = committed_log(SigningKey(b"\x24" * 32))
    unsigned = unsigned_answer(
        NODE,
        forged.checkpoint,
        TOPIC,
        1,
        forged.map.prove(topic_key(TOPIC)),
        forged.logs[TOPIC],
        forged.raws,
        T_NS,
    )
    problem = why_not_omitted(sign_answer(NODE_KEY, unsigned), NODE, KEYS)
    assert problem == "the checkpoint is not the originator's"


def test_an_answer_holds_what_fits_its_budget_and_proves_that_far() -> None:
    one = len(LOG.raws[3])
    unsigned = unsigned_answer(
        NODE,
        LOG.checkpoint,
        TOPIC,
        1,
        LOG.map.prove(topic_key(TOPIC)),
        LOG.logs[TOPIC],
        LOG.raws,
        T_NS,
        budget_bytes=one + 1,
    )
    assert len(unsigned.envelopes) == 1
    verdict = judge(open_answer(sign_answer(NODE_KEY, unsigned), KEYS[NODE]), KEYS[ORIGINATOR])
    assert verdict.problem is None and verdict.complete is not None
    assert verdict.complete.through == 3  # the client asks again after 3
    nothing = unsigned_answer(
        NODE,
        LOG.checkpoint,
        TOPIC,
        1,
        LOG.map.prove(topic_key(TOPIC)),
        LOG.logs[TOPIC],
        LOG.raws,
        T_NS,
        budget_bytes=0,
    )
    assert len(nothing.envelopes) == 1  # never none: the read always moves on
