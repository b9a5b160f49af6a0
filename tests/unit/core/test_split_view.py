"""SPLIT_VIEW (xnode.core.withholding.why_not_split) against generated adversaries.

Guilty: an originator that signs two logs differing at some sequence ids (two contents, or
one content under two expiries) cannot talk its way out: a proof is always found and always
verifies. Liars: from an honest originator's checkpoints, over trees that differ only as
migration 0008 and restores leave them (the same contents, some leaves format 1), every
report a liar can assemble (any sequence id, either tree, openings given, withheld or
invented, leaves and proofs swapped, checkpoints of other nodes or keys) proves nothing."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.withholding_log import PAYER
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import sign_checkpoint
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.leaves import leaf_v1, leaf_v2, signed_content
from xnode.core.withholding import SPLIT_VIEW, split_view_report, why_not_split
from xnode_api.withholding.v1 import withholding_pb2 as wh

NODE, OTHER_NODE = 100, 200
KEY, OTHER_KEY = SigningKey(b"\x11" * 32), SigningKey(b"\x12" * 32)
KEYS = {NODE: (KEY.public_key,), OTHER_NODE: (OTHER_KEY.public_key,)}
T_NS = 1_800_000_000 * 10**9
ENVELOPES: dict[tuple[int, bytes], bytes] = {}


def envelope(sequence_id: int, message: bytes) -> bytes:
    """The originator's envelope at `sequence_id` (cached: signing is the slow part)."""
    key = (sequence_id, message)
    if key not in ENVELOPES:
        client = group_message_envelope(b"g" * 16, message)
        payer = build_payer_envelope(client, PAYER, NODE)
        valid = validate_payer_envelope(payer, NODE)
        ns = T_NS + sequence_id
        ENVELOPES[key] = originate(valid, NODE, sequence_id, ns, KEY).raw
    return ENVELOPES[key]


@dataclass
class SignedLog:
    """A tree of leaves, its checkpoint signed by `key` as node `node`, and the envelopes."""

    raws: list[bytes]
    leaves: list[bytes]
    node: int = NODE
    key: SigningKey = KEY
    at_ns: int = T_NS

    def __post_init__(self) -> None:
        root = merkle.root_of(self.leaves)
        size = len(self.leaves)
        self.checkpoint = sign_checkpoint(self.key, self.node, size, root, self.at_ns, None)

    def perfect(self, level: int, index: int) -> bytes:
        return merkle.root_of(self.leaves[index << level : (index + 1) << level])

    def commitment(self, sequence_id: int, opening: tuple[bytes, int] | None) -> wh.Commitment:
        out = wh.Commitment(
            checkpoint=self.checkpoint.signed,
            sequence_id=sequence_id,
            leaf_hash=self.leaves[sequence_id - 1],
            inclusion_proof=merkle.inclusion_proof(sequence_id - 1, len(self.leaves), self.perfect),
        )
        if opening is not None:
            out.opening.content_hash, out.opening.expiry_unixtime = opening
        return out

    def opening(self, sequence_id: int) -> tuple[bytes, int]:
        content, expiry = signed_content(self.raws[sequence_id - 1])
        return keccak256(content), expiry


def v2_leaves(raws: list[bytes]) -> list[bytes]:
    return [leaf_v2(*signed_content(r)) for r in raws]


def report(first: wh.Commitment, second: wh.Commitment, accused: int = NODE) -> str | None:
    """What the council's checker says of the report (None: proven)."""
    return why_unproven(split_view_report(accused, first, second, T_NS), KEYS)


def proof_of(a: SignedLog, b: SignedLog) -> tuple[wh.Commitment, wh.Commitment] | None:
    """What an honest reporter holding both logs files: the first sequence id whose leaves
    differ, both opened."""
    for s in range(1, min(len(a.leaves), len(b.leaves)) + 1):
        if a.leaves[s - 1] != b.leaves[s - 1]:
            return a.commitment(s, a.opening(s)), b.commitment(s, b.opening(s))
    return None


@st.composite
def equivocations(draw: st.DrawFn) -> tuple[SignedLog, SignedLog]:
    """Two logs the guilty originator signs: the same messages but at some sequence ids,
    where it signed another; the second may run further and be signed at any size past
    its first fork."""
    size = draw(st.integers(min_value=1, max_value=12))
    messages = [b"m%d" % s for s in range(1, size + 1)]
    first = [envelope(s, messages[s - 1]) for s in range(1, size + 1)]
    forked = draw(st.sets(st.integers(1, size), min_size=1))
    variant = draw(st.sampled_from([b"'", b" again", b"\x00"]))  # what the fork signs instead
    second = [
        envelope(s, messages[s - 1] + variant) if s in forked else first[s - 1]
        for s in range(1, size + 1)
    ]
    grown = draw(st.integers(0, 3))
    second += [envelope(s, b"later %d" % s) for s in range(size + 1, size + 1 + grown)]
    cut = draw(st.integers(min(forked), len(second)))
    return SignedLog(first, v2_leaves(first)), SignedLog(second[:cut], v2_leaves(second[:cut]))


@settings(max_examples=150, deadline=None)
@given(equivocations())
def test_every_split_view_ends_in_a_proof(views: tuple[SignedLog, SignedLog]) -> None:
    first, second = views
    found = proof_of(first, second)
    assert found is not None
    assert report(*found) is None
    assert report(found[1], found[0]) is None  # in either order


@st.composite
def honest_views(draw: st.DrawFn) -> tuple[SignedLog, SignedLog]:
    """One honest log (one envelope per sequence id), signed as two format 2 checkpoints
    over trees that differ only as migration 0008 leaves them: a leaf whose envelope was
    gone when the node migrated stays format 1; a restore of an older backup migrates again
    with other envelopes gone. Sizes may differ (one is a prefix)."""
    size = draw(st.integers(min_value=1, max_value=12))
    raws = [envelope(s, b"m%d" % s) for s in range(1, size + 1)]

    def tree(v1: set[int]) -> list[bytes]:
        v2 = v2_leaves(raws)
        return [leaf_v1(signed_content(raws[i])[0]) if i + 1 in v1 else v2[i] for i in range(size)]

    ids = st.sets(st.integers(1, size))
    cut = draw(st.integers(1, size))
    first = SignedLog(raws, tree(draw(ids)))
    second = SignedLog(raws[:cut], tree(draw(ids))[:cut], at_ns=T_NS + 1)
    return first, second


def liar_commitment(data: st.DataObject, view: SignedLog, s: int) -> wh.Commitment:
    """A commitment to `s` under `view`'s checkpoint as a liar may shape it."""
    how = data.draw(st.sampled_from(["honest", "unopened", "invented", "other leaf", "other key"]))
    if how == "unopened":
        return view.commitment(s, None)
    if how == "invented":  # an opening of some other content: it must match the leaf
        return view.commitment(
            s, (data.draw(st.binary(min_size=32, max_size=32)), data.draw(st.integers(0, 2**40)))
        )
    if how == "other leaf":  # the leaf of another content, with the real sibling path
        content, expiry = signed_content(envelope(s, b"framed"))
        out = view.commitment(s, (keccak256(content), expiry))
        out.leaf_hash = leaf_v2(content, expiry)
        return out
    if how == "other key":  # a checkpoint over a framing tree signed by someone else
        leaves = list(view.leaves)
        content, expiry = signed_content(envelope(s, b"framed"))
        leaves[s - 1] = leaf_v2(content, expiry)
        key, node = data.draw(st.sampled_from([(OTHER_KEY, NODE), (OTHER_KEY, OTHER_NODE)]))
        forged = SignedLog(view.raws, leaves, node=node, key=key)
        return forged.commitment(s, (keccak256(content), expiry))
    return view.commitment(
        s, view.opening(s) if view.leaves[s - 1] == v2_leaves(view.raws)[s - 1] else None
    )


@settings(max_examples=300, deadline=None)
@given(honest_views(), st.data())
def test_no_report_built_from_an_honest_node_s_checkpoints_proves_a_split_view(
    views: tuple[SignedLog, SignedLog], data: st.DataObject
) -> None:
    first, second = views
    s = data.draw(st.integers(1, len(second.leaves)))
    one = liar_commitment(data, data.draw(st.sampled_from(views)), s)
    two = liar_commitment(data, data.draw(st.sampled_from(views)), s)
    if data.draw(st.booleans()):
        two.sequence_id = data.draw(st.integers(1, len(first.leaves)))
    assert report(one, two) is not None
    assert why_not_split(wh.SplitView(first=one, second=two), NODE, KEYS[NODE]) is not None


def test_what_each_refusal_says() -> None:
    raws = [envelope(s, b"m%d" % s) for s in range(1, 5)]
    log = SignedLog(raws, v2_leaves(raws))
    other = [*raws[:2], envelope(3, b"m3'"), raws[3]]
    fork = SignedLog(other, v2_leaves(other), at_ns=T_NS + 1)
    proven = (log.commitment(3, log.opening(3)), fork.commitment(3, fork.opening(3)))
    assert report(*proven) is None
    assert "same leaf of sequence id 2" in str(
        report(log.commitment(2, log.opening(2)), fork.commitment(2, fork.opening(2)))
    )
    assert "both leaves must be opened" in str(report(proven[0], fork.commitment(3, None)))
    assert "sequence ids 2 and 3" in str(report(log.commitment(2, log.opening(2)), proven[1]))
    # Node 100's checkpoints do not accuse node 200.
    accused_200 = str(report(*proven, accused=OTHER_NODE))
    assert "checkpoint of node 100 at 4 is not signed by that node's registry key" in accused_200
    bare = wh.ExtendedMisbehaviorReport(misbehaving_node_id=NODE, type=SPLIT_VIEW)
    empty = mb.UnsignedMisbehaviorReport.FromString(bare.SerializeToString())
    assert "carries no split view proof" in str(why_unproven(empty, KEYS))
