"""Payload-rule epochs: which payer-envelope rules are in force, from when, and which of them
convict.

Verdicts must not depend on the verifier's code version. So the rules come in epochs, each
with its activation time, and an envelope is judged by the epoch in force at its signed
`originator_ns`, never by the rules of the day it is checked: a rule added later never makes
an envelope valid under its own epoch invalid.

Each rule in an epoch has a standing:
- SHARED: a rule every XIP-49 implementation must apply (framing, the target originator, the
  topic's kind, the payer's signature: what XIP-49 3.3.1 and 3.3.4 state). Breaking it is
  proven (INVALID_PAYLOAD).
- JUDGED: xnode's own reading of payloads (MLS framing and group ids, welcome pointers, key
  package contents and lifetimes, identity updates, RFC 9420 details another implementation
  may read otherwise). xnode refuses to store what breaks one, but a report of it is judged,
  not proven: another implementation's valid payload must never convict its originator.

A later epoch adds to the table, with an activation time ahead of every node's upgrade; an
epoch is never changed once released."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.constants import NS_PER_SECOND
from xnode.core.envelopes import (
    received_payer,
    xip_framing,
    xip_payer_signature,
    xip_target,
    xip_topic,
)
from xnode.core.errors import Rejected
from xnode_api.withholding.v1 import withholding_pb2 as wh

Check = Callable[[envelopes_pb2.PayerEnvelope, int, int], None]  # payer, originator, ns


class Standing(StrEnum):
    SHARED = "shared"  # every XIP-49 implementation applies it: breaking it is proven
    JUDGED = "judged"  # xnode's reading: refused here, judged, never proven


def _untimed(check: Callable[[envelopes_pb2.PayerEnvelope, int], None]) -> Check:
    return lambda payer, originator, _ns: check(payer, originator)


def _xnode_payload_rules(payer: envelopes_pb2.PayerEnvelope, originator: int, ns: int) -> None:
    received_payer(payer, originator, ns)  # every rule xnode applies, at the envelope's time


# Rules by name (names are stable: reports and docs cite them).
RULES: Mapping[str, Check] = {
    "xip49-framing": _untimed(xip_framing),
    "xip49-target-originator": _untimed(xip_target),
    "xip49-topic-kind": _untimed(xip_topic),
    "xip49-payer-signature": _untimed(xip_payer_signature),
    "xnode-payloads": _xnode_payload_rules,  # MLS, welcomes, key packages, identity updates
}


@dataclass(frozen=True, slots=True)
class RuleEpoch:
    number: int
    activation_unix: int  # judged from this originator time on
    rules: Mapping[str, Standing]  # in the order they are checked


EPOCHS: tuple[RuleEpoch, ...] = (
    RuleEpoch(
        1,
        0,
        {
            "xip49-framing": Standing.SHARED,
            "xip49-target-originator": Standing.SHARED,
            "xip49-topic-kind": Standing.SHARED,
            "xip49-payer-signature": Standing.SHARED,
            "xnode-payloads": Standing.JUDGED,
        },
    ),
)


def epoch_at(originator_ns: int, epochs: Sequence[RuleEpoch] = EPOCHS) -> RuleEpoch:
    """The epoch in force at an envelope's signed time (the first one before any)."""
    starts = [e.activation_unix for e in epochs]
    index = bisect_right(starts, originator_ns // NS_PER_SECOND) - 1
    return epochs[max(index, 0)]


@dataclass(frozen=True, slots=True)
class Broken:
    """The first rule of its epoch a payer envelope breaks."""

    epoch: int
    rule: str
    standing: Standing
    detail: str

    def describe(self) -> str:
        return f"{self.rule} ({self.standing}, epoch {self.epoch}): {self.detail}"


def rule_broken(
    payer: envelopes_pb2.PayerEnvelope,
    originator: int,
    originator_ns: int,
    epochs: Sequence[RuleEpoch] = EPOCHS,
    rules: Mapping[str, Check] = RULES,
) -> Broken | None:
    """The first rule in force at `originator_ns` that the payer envelope breaks, shared
    rules first (so a payload breaking both is proven), or None."""
    epoch = epoch_at(originator_ns, epochs)
    ordered = sorted(epoch.rules.items(), key=lambda item: item[1] is not Standing.SHARED)
    for name, standing in ordered:
        try:
            rules[name](payer, originator, originator_ns)
        except Rejected as exc:
            return Broken(epoch.number, name, standing, f"{exc.reason.value}: {exc.detail}")
    return None


def naming_epoch(report: mb.UnsignedMisbehaviorReport, raw: bytes) -> mb.UnsignedMisbehaviorReport:
    """The report naming the epoch in force at the originator time of `raw` (the envelope
    it was judged on) in its extension field; upstream fields untouched."""
    try:
        envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
    except DecodeError:
        return report  # judged on nothing timed: no epoch to name
    extended = wh.ExtendedMisbehaviorReport.FromString(report.SerializeToString())
    extended.rule_epoch = epoch_at(unsigned.originator_ns).number
    return mb.UnsignedMisbehaviorReport.FromString(extended.SerializeToString(deterministic=True))
