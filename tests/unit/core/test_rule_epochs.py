"""core.rule_epochs: an envelope is judged by the rules of the epoch in force at its signed
time, so rules added later never prove invalid what was valid under its epoch; only rules
every XIP-49 implementation shares convict (INVALID_PAYLOAD proven), xnode's own reading of
payloads (MLS, key packages) is judged, never proven."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.errors import Reason, Rejected
from xnode.core.evidence import why_unproven
from xnode.core.rule_epochs import (
    EPOCHS,
    RULES,
    Check,
    RuleEpoch,
    Standing,
    epoch_at,
    naming_epoch,
    rule_broken,
)
from xnode.core.withholding import extended

NODE = 100
KEY, PAYER = SigningKey(b"\x61" * 32), SigningKey(b"\x62" * 32)
KEYS = {NODE: [KEY.public_key]}
NS = 10**9


def _later_rule(payer: envelopes_pb2.PayerEnvelope, originator: int, ns: int) -> None:
    """A shared rule a later epoch might add: here, one every payload breaks."""
    raise Rejected(Reason.INVALID_PAYLOAD, "refused by a rule of a later epoch")


def _epochs(activation_s: int) -> tuple[RuleEpoch, ...]:
    later = {**EPOCHS[0].rules, "later-rule": Standing.SHARED}
    return (EPOCHS[0], RuleEpoch(2, activation_s, later))


RULES_WITH_LATER: dict[str, Check] = {**RULES, "later-rule": _later_rule}


def _payer(text: bytes, target: int = NODE) -> envelopes_pb2.PayerEnvelope:
    return build_payer_envelope(group_message_envelope(b"g" * 16, text), PAYER, target)


def _originated(payer: envelopes_pb2.PayerEnvelope, seq: int, ns: int) -> bytes:
    """Signed by NODE as its own, whatever the payer envelope says."""
    valid = validate_payer_envelope(_payer(b"placeholder"), NODE)
    raw = originate(valid, NODE, seq, ns, KEY).raw
    outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        outer.unsigned_originator_envelope
    )
    unsigned.payer_envelope_bytes = payer.SerializeToString()
    outer.unsigned_originator_envelope = unsigned.SerializeToString()
    outer.originator_signature.bytes = KEY.sign(
        originator_digest(outer.unsigned_originator_envelope)
    )
    return outer.SerializeToString()


@settings(max_examples=200, deadline=None)
@given(
    text=st.binary(min_size=1, max_size=64),
    activation_s=st.integers(1, 2**40),
    before_s=st.integers(1, 2**40),
)
def test_an_envelope_valid_under_its_epoch_is_never_proven_invalid_by_later_rules(
    text: bytes, activation_s: int, before_s: int
) -> None:
    """Valid under epoch 1 and signed before epoch 2 activates: whatever epoch 2 adds, it
    passes; signed after, the new shared rule applies."""
    payer = _payer(text)
    signed_at = min(before_s, activation_s - 1) * NS
    assert rule_broken(payer, NODE, signed_at, _epochs(activation_s), RULES_WITH_LATER) is None
    after = rule_broken(payer, NODE, activation_s * NS, _epochs(activation_s), RULES_WITH_LATER)
    assert after is not None and (after.rule, after.epoch) == ("later-rule", 2)
    assert epoch_at(signed_at, _epochs(activation_s)).number == 1


@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), seq=st.integers(1, 1000))
def test_a_payload_only_xnode_s_reading_refuses_is_judged_never_proven(
    data: bytes, seq: int
) -> None:
    """Another implementation's group message (any bytes in place of MLS framing, on the
    right topic, to the right originator, signed by its payer): refused by xnode's reading
    at most, never proven invalid."""
    client = group_message_envelope(b"g" * 16, b"x")
    client.group_message.v1.data = data
    payer = build_payer_envelope(client, PAYER, NODE)
    broken = rule_broken(payer, NODE, seq * NS)
    assert broken is None or broken.standing is Standing.JUDGED
    report = misbehavior.safety_report(
        misbehavior.INVALID_PAYLOAD, NODE, [_originated(payer, seq, seq * NS)], seq * NS
    )
    assert why_unproven(report, KEYS) is not None


@settings(max_examples=100, deadline=None)
@given(
    breach=st.sampled_from(["target", "signature", "empty"]),
    target=st.integers(101, 2**31),
    seq=st.integers(1, 1000),
)
def test_a_payload_breaking_a_shared_rule_is_always_proven(
    breach: str, target: int, seq: int
) -> None:
    payer = _payer(b"m")
    if breach == "target":
        payer = _payer(b"m", target)
    elif breach == "signature":
        payer.payer_signature.bytes = bytes(65)
    else:
        payer.unsigned_client_envelope = b""
    raw = _originated(payer, seq, seq * NS)
    broken = rule_broken(payer, NODE, seq * NS)
    assert broken is not None and broken.standing is Standing.SHARED
    report = misbehavior.safety_report(misbehavior.INVALID_PAYLOAD, NODE, [raw], seq * NS)
    assert why_unproven(report, KEYS) is None
    # The node's report names the epoch it judged by, upstream fields untouched.
    named = naming_epoch(report, raw)
    assert extended(named).rule_epoch == 1
    assert named.safety == report.safety and named.type == report.type
    assert why_unproven(named, KEYS) is None
