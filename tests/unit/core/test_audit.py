"""The audit replay's pure checks (xnode.core.audit), fed rows as an adapter would."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.audit import (
    ConflictVersion,
    FaultKind,
    OriginatorAudit,
    Verdict,
    audit_chain_events,
    audit_conflict,
    envelope_problem,
)
from xnode.core.chain_payloads import ChainEvent, build_chain_payload
from xnode.core.checkpoints import Checkpoint, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.forks import envelope_hash, log_keeps
from xnode.core.leaves import FORMAT_V1, envelope_leaf, signed_content
from xnode.core.mls import ContentType, WireFormat, encode_framing

KEY = SigningKey((11).to_bytes(32, "big"))
OTHER = SigningKey((12).to_bytes(32, "big"))
PAYER = SigningKey((13).to_bytes(32, "big"))
KEYS = {100: (KEY.public_key,)}
GROUP = bytes(range(16))
COMMIT = encode_framing(WireFormat.PUBLIC_MESSAGE, GROUP, 3, ContentType.COMMIT, b"c")


def envelope(sequence_id: int, data: bytes = b"m", key: SigningKey = KEY) -> bytes:
    client = group_message_envelope(
        GROUP, encode_framing(WireFormat.PRIVATE_MESSAGE, GROUP, 1, ContentType.APPLICATION, data)
    )
    payer = validate_payer_envelope(build_payer_envelope(client, PAYER, 100), 100)
    return originate(payer, 100, sequence_id, 1_000 + sequence_id, key).raw


def leaf(raw: bytes) -> bytes:
    return envelope_leaf(raw)


def expiry(raw: bytes) -> int:
    return signed_content(raw)[1]


def checkpoints(leaves: list[bytes], sizes: list[int]) -> list[Checkpoint]:
    chain: list[Checkpoint] = []
    for size in sizes:
        previous = chain[-1] if chain else None
        chain.append(sign_checkpoint(KEY, 100, size, merkle.root_of(leaves[:size]), size, previous))
    return chain


Row = tuple[int, bytes | None, bytes | None]
RowWithExpiry = tuple[int, bytes | None, bytes | None, int | None]


def replay(
    rows: Sequence[Row | RowWithExpiry],
    signed: list[bytes],
    forked: tuple[int, ...] = (),
    now: int = 0,
) -> Verdict:
    verdict = Verdict()
    audit = OriginatorAudit(100, KEYS, signed, forked, verdict, now)
    for row in rows:
        audit.row(*row)
    audit.finish()
    return verdict


RAWS = [envelope(i) for i in range(1, 9)]
LEAVES = [leaf(r) for r in RAWS]
CHAIN = checkpoints(LEAVES, [3, 8])
ROWS: list[Row] = [(i + 1, LEAVES[i], RAWS[i]) for i in range(8)]


def without_envelopes(upto: int) -> list[RowWithExpiry]:
    """ROWS with the envelopes of sequence ids 1..upto gone, their leaves' expiry kept."""
    return [
        (s, LEAVES[s - 1], None if s <= upto else RAWS[s - 1], expiry(RAWS[s - 1]))
        for s in range(1, 9)
    ]


def test_a_clean_history_with_expired_envelopes_is_clean() -> None:
    after_expiry = expiry(RAWS[1])
    verdict = replay(without_envelopes(2), [c.signed for c in CHAIN], now=after_expiry)
    assert verdict.clean, verdict.describe()
    assert (verdict.envelopes, verdict.expired, verdict.checkpoints) == (6, 2, 2)
    assert "CLEAN" in verdict.describe()


def test_a_leaf_without_its_envelope_before_its_committed_expiry_is_a_loss() -> None:
    before_expiry = expiry(RAWS[0]) - 1
    verdict = replay(without_envelopes(2), [c.signed for c in CHAIN], now=before_expiry)
    assert verdict.faults == {FaultKind.LOST: 2}
    assert verdict.expired == 0
    assert "lost_envelope" in verdict.describe() and "CLEAN" not in verdict.describe()


def test_format_1_leaves_keep_their_old_rule_and_still_match_their_envelopes() -> None:
    v1 = [envelope_leaf(raw, FORMAT_V1) for raw in RAWS]
    rows: list[RowWithExpiry] = [
        (s, v1[s - 1], None if s <= 2 else RAWS[s - 1], None) for s in range(1, 9)
    ]
    v1_chain = checkpoints(v1, [3, 8])
    verdict = replay(rows, [c.signed for c in v1_chain])
    assert verdict.clean, verdict.describe()
    assert (verdict.expired, verdict.format1_without_envelope) == (0, 2)


def test_a_gap_a_bad_signature_and_a_foreign_leaf_are_named() -> None:
    forged = envelope(4, key=OTHER)
    rows = [ROWS[0], ROWS[2], (4, LEAVES[3], forged), (5, LEAVES[5], RAWS[4]), *ROWS[5:]]
    verdict = replay(rows, [c.signed for c in CHAIN])
    assert verdict.faults == {
        FaultKind.GAP: 1,
        FaultKind.BAD_SIGNATURE: 1,
        FaultKind.LEAF_MISMATCH: 1,
    }
    assert verdict.checkpoints_unchecked == 2  # no root past the gap can be recomputed
    assert "FAULTS FOUND" in verdict.describe()


def test_checkpoint_root_chain_and_signature_faults() -> None:
    wrong_root = sign_checkpoint(KEY, 100, 8, bytes(32), 8, CHAIN[0])
    assert replay(ROWS, [CHAIN[0].signed, wrong_root.signed]).faults == {
        FaultKind.CHECKPOINT_ROOT: 1
    }
    unlinked = sign_checkpoint(KEY, 100, 8, CHAIN[1].root, 8, None)
    assert replay(ROWS, [CHAIN[0].signed, unlinked.signed]).faults == {
        FaultKind.CHECKPOINT_CHAIN: 1
    }
    foreign = sign_checkpoint(OTHER, 100, 3, CHAIN[0].root, 3, None)
    verdict = replay(ROWS, [foreign.signed, CHAIN[1].signed])
    assert FaultKind.CHECKPOINT_SIGNATURE in verdict.faults
    # A root over a forked sequence id: the originator signed both versions; no fault here.
    assert replay(ROWS, [CHAIN[0].signed, wrong_root.signed], forked=(5,)).clean


def test_envelope_problems() -> None:
    assert envelope_problem(100, 1, RAWS[0], KEYS) is None
    assert envelope_problem(100, 2, RAWS[0], KEYS) is not None  # misfiled
    assert envelope_problem(100, 1, RAWS[0], {})[0] is FaultKind.UNKNOWN_ORIGINATOR  # type: ignore[index]
    assert envelope_problem(100, 1, b"\xff", KEYS)[0] is FaultKind.MALFORMED  # type: ignore[index]


def test_conflicts_are_checked_and_the_pick_is_the_rules() -> None:
    a, b = envelope(5, b"one"), envelope(5, b"two")
    versions = [ConflictVersion(envelope_hash(v), v) for v in (a, b)]
    pick = log_keeps(a, b)
    verdict = Verdict()
    audit_conflict(100, 5, versions, pick, KEYS, verdict)
    assert verdict.clean and verdict.conflicts == 1
    audit_conflict(100, 5, versions, a if pick == b else b, KEYS, verdict)
    assert verdict.faults == {FaultKind.CONFLICT_WRONG_PICK: 1}
    unproven = Verdict()
    audit_conflict(100, 5, [versions[0], ConflictVersion(b"x", b)], pick, KEYS, unproven)
    forged = envelope(5, b"two", key=OTHER)
    audit_conflict(
        100, 5, [versions[0], ConflictVersion(envelope_hash(forged), forged)], a, KEYS, unproven
    )
    audit_conflict(100, 5, [versions[0]], a, KEYS, unproven)
    assert unproven.faults == {FaultKind.CONFLICT_UNPROVEN: 3}


def test_chain_payloads_against_their_events() -> None:
    client = group_message_envelope(GROUP, COMMIT).SerializeToString()
    event = ChainEvent(0, 1, GROUP, client, 10, b"\x01" * 32, b"\x07" * 32, 0, 1_700_000_000)
    raw = build_chain_payload(event, 1_700_000_000, KEY).raw
    assert envelope_problem(0, 1, raw, KEYS) is None  # the indexing node's proof
    verdict = Verdict()
    audit_chain_events([(event, raw)], verdict)
    assert verdict.clean and verdict.chain_events == 1
    other = dataclasses.replace(
        event, payload=group_message_envelope(GROUP, COMMIT + b"x").SerializeToString()
    )
    malformed = dataclasses.replace(event, payload=b"\x00junk")
    audit_chain_events([(other, raw), (event, None), (malformed, None)], verdict)
    assert verdict.faults == {FaultKind.CHAIN_PAYLOAD: 2}
