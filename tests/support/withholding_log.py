"""A committed log of one originator, signed by its key, and the withholding evidence about
it: the checkpoint's commitment to a sequence id, the originator's honest account of its
holdings, and that account edited into a withholder's lie (xnode.core.withholding)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, sign_checkpoint
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.leaves import HeldLeaf, envelope_leaf, signed_content
from xnode.core.withholding import account, sign_holdings
from xnode_api.withholding.v1 import withholding_pb2 as wh

DAY_NS = 86_400 * NS_PER_SECOND
PAYER = SigningKey((23).to_bytes(32, "big"))
Edit = Callable[[wh.UnsignedHoldings], None]


@dataclass
class CommittedLog:
    """Sequence ids 1..size, originated a day before `now_ns` (so 182 days from expiry)."""

    key: SigningKey
    node: int
    size: int
    now_ns: int
    raws: dict[int, bytes] = field(init=False)
    leaves: list[bytes] = field(init=False)
    checkpoint: Checkpoint = field(init=False)

    def __post_init__(self) -> None:
        self.raws = {s: self._envelope(s) for s in range(1, self.size + 1)}
        self.leaves = [envelope_leaf(self.raws[s]) for s in range(1, self.size + 1)]
        root = merkle.root_of(self.leaves)
        self.checkpoint = sign_checkpoint(self.key, self.node, self.size, root, self.now_ns, None)

    def _envelope(self, sequence_id: int) -> bytes:
        client = group_message_envelope(b"g" * 16, b"m%d" % sequence_id)
        payer = build_payer_envelope(client, PAYER, self.node)
        valid = validate_payer_envelope(payer, self.node)
        ns = self.now_ns - DAY_NS + sequence_id
        return originate(valid, self.node, sequence_id, ns, self.key).raw

    def checkpoint_of(self, size: int) -> Checkpoint:
        """The checkpoint its originator signed when its log was `size` long (at the time of
        that envelope)."""
        root = merkle.root_of(self.leaves[:size])
        ns = self.now_ns - DAY_NS + size
        return sign_checkpoint(self.key, self.node, size, root, ns, None)

    def expiry(self, sequence_id: int) -> int:
        return signed_content(self.raws[sequence_id])[1]

    def perfect(self, level: int, index: int) -> bytes:
        return merkle.root_of(self.leaves[index << level : (index + 1) << level])

    def commitment(self, sequence_id: int, opened: bool = True) -> wh.Commitment:
        out = wh.Commitment(
            checkpoint=self.checkpoint.signed,
            sequence_id=sequence_id,
            leaf_hash=self.leaves[sequence_id - 1],
            inclusion_proof=merkle.inclusion_proof(sequence_id - 1, self.size, self.perfect),
        )
        if opened:
            content, expiry = signed_content(self.raws[sequence_id])
            out.opening.expiry_unixtime = expiry
            out.opening.content_hash = keccak256(content)
        return out

    def content_hash(self, sequence_id: int) -> bytes:
        return keccak256(signed_content(self.raws[sequence_id])[0])

    def held(
        self, without: frozenset[int] = frozenset(), unopened: frozenset[int] = frozenset()
    ) -> list[HeldLeaf]:
        """The leaves with their envelopes, less those `without`; the content hash kept
        beside each leaf, but for those `unopened` (gone before it was kept)."""
        return [
            HeldLeaf(
                self.node,
                s,
                self.leaves[s - 1],
                self.expiry(s),
                None if s in without else raw,
                None if s in unopened else self.content_hash(s),
            )
            for s, raw in self.raws.items()
        ]

    def holdings(
        self,
        edit: Edit | None = None,
        key: SigningKey | None = None,
        at_ns: int | None = None,
        question: wh.SignedQuestion | None = None,
        span: tuple[int, int] | None = None,
    ) -> wh.SignedHoldings:
        """The honest account of the log (`span`, or all of it), answering `question`, then
        `edit`ed (a withholder's lie), signed."""
        at = at_ns or self.now_ns
        first, last = span or (1, self.size)
        unsigned = account(self.node, first, last, self.size, self.held(), at, question)
        if edit is not None:
            edit(unsigned)
        return sign_holdings(key or self.key, unsigned)


def leaving_out(log: CommittedLog, sequence_id: int) -> Edit:
    """A withholder's edit: the envelope of `sequence_id` left out of the account."""

    def edit(unsigned: wh.UnsignedHoldings) -> None:
        kept = [raw for raw in unsigned.envelopes if raw != log.raws[sequence_id]]
        del unsigned.envelopes[:]
        unsigned.envelopes.extend(kept)

    return edit
