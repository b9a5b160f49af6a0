"""Every parser of client- or peer-supplied bytes, fuzzed (issue: payload rules, item 7).

Property: whatever the bytes, a parser either answers or raises its own refusal type; for the
envelope rules that refusal is `Rejected` with a reason the API maps to INVALID_ARGUMENT (never
UNAVAILABLE, never an unexpected exception the API would turn into UNKNOWN or INTERNAL).
Inputs are random bytes and mutations (flips, truncations, insertions, splices) of valid ones,
so the generator gets past the first length check. XNODE_FUZZ_EXAMPLES sets the examples per
target (CI: 200; `bench/bench_fuzz.py` runs 100,000 in all)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.api.errors import STATUS_OF
from xnode.client.node import group_message_envelope
from xnode.core import mls, wire
from xnode.core.associations import AssociationError, apply_update, wallet_checks
from xnode.core.chain_payloads import ChainEvent, MalformedPayload, client_envelope_of
from xnode.core.checkpoints import CheckpointError, sign_checkpoint, verify_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    build_payer_envelope,
    cursor_from_proto,
    originate,
    parse_originator_envelope,
    validate_payer_envelope,
)
from xnode.core.errors import Rejected
from xnode.core.identity import association_changes
from xnode.core.key_packages import parse_key_package
from xnode.core.misbehavior import check_client_report
from xnode.core.node_tokens import AuthError, issue_token, verify_token
from xnode.core.prune_plan import PlanError, parse_plan
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicError
from xnode.core.verification import verify_envelope

EXAMPLES = int(os.environ.get("XNODE_FUZZ_EXAMPLES", "200"))
NODE_ID = 100
KEY = SigningKey.generate()
PAYER = SigningKey.generate()
GROUP = bytes(range(16))
INBOX = bytes(range(32))
REGISTRY = Registry([NodeEntry(NODE_ID, KEY.public_key, "http://127.0.0.1:1")])
# Payloads of the official client (tests/e2e/clients/test_capture_payloads.py) as seeds.
OFFICIAL = Path(__file__).parents[2] / "fixtures" / "official_client"
KEY_PACKAGE_NOW_S = 1_795_470_000  # inside the captured key packages' lifetimes


def official(kind: str) -> tuple[bytes, ...]:
    """The captured client envelopes of one payload kind."""
    return tuple(bytes.fromhex(line) for line in (OFFICIAL / f"{kind}.hex").read_text().split())


M = TypeVar("M", bound=Message)


class Unparseable(Exception):
    """The bytes do not decode as the protobuf message: the API answers INVALID_ARGUMENT."""


def _decode(kind: type[M], data: bytes) -> M:
    try:
        return kind.FromString(data)
    except DecodeError:
        raise Unparseable from None


def _rejected_as_invalid(call: Callable[[], object]) -> None:
    """`Rejected` is fine when its status tells the client its input is wrong."""
    try:
        call()
    except Rejected as exc:
        status = STATUS_OF[exc.reason]
        assert status is not grpc.StatusCode.UNAVAILABLE, exc
        assert status is not grpc.StatusCode.INTERNAL, exc


def _payer_envelope(data: bytes) -> None:
    payer = _decode(envelopes_pb2.PayerEnvelope, data)
    _rejected_as_invalid(lambda: validate_payer_envelope(payer, NODE_ID))


def _client_envelope(data: bytes) -> None:
    # The payer's signature covers whatever bytes the client sent: fuzz behind a good one.
    payer = envelopes_pb2.PayerEnvelope(unsigned_client_envelope=data, target_originator=NODE_ID)
    signed = build_payer_envelope(envelopes_pb2.ClientEnvelope(), PAYER, NODE_ID)
    payer.payer_signature.CopyFrom(signed.payer_signature)
    _rejected_as_invalid(lambda: validate_payer_envelope(payer, NODE_ID))


def _originator_envelope(data: bytes) -> None:
    _rejected_as_invalid(lambda: parse_originator_envelope(data))
    verify_envelope(data, {NODE_ID: KEY.public_key}, NODE_ID)  # a verdict, never an exception


def _mls_message(data: bytes) -> None:
    with contextlib.suppress(mls.MlsError):
        mls.parse_framing(data)
    with contextlib.suppress(mls.MlsError):
        mls.parse_group_message(data)
    mls.is_commit(data)


def _key_package(data: bytes) -> None:
    with contextlib.suppress(mls.MlsError):
        parse_key_package(data, KEY_PACKAGE_NOW_S)


def _chain_event(data: bytes) -> None:
    for originator, key in ((0, GROUP), (1, INBOX)):
        event = ChainEvent(originator, 1, key, data, 1, b"\x00" * 32, b"\x01" * 32, 0)
        with contextlib.suppress(MalformedPayload):
            client_envelope_of(event)


def _identity_update(data: bytes) -> None:
    update = _decode(association_pb2.IdentityUpdate, data)
    association_changes(update)
    # XIP-46: the update applied to a fresh inbox, every signature checked (issue 12 part 2).
    with contextlib.suppress(AssociationError):
        apply_update(None, update, {check: True for check in wallet_checks(update)})
    # ...and as the payload of a client envelope on its inbox's topic (the publish path).
    try:
        inbox = bytes.fromhex(update.inbox_id)
    except ValueError:
        inbox = INBOX
    client = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=b"\x02" + inbox),
        identity_update=update,
    )
    _client_envelope(client.SerializeToString())


def _stream_frame(data: bytes) -> None:
    with contextlib.suppress(wire.FrameError):
        wire.originator_envelopes(data)
    with contextlib.suppress(wire.FrameError):
        wire.length_delimited(data, 1)
    with contextlib.suppress(wire.FrameError):
        list(wire.fields(data))


def _checkpoint(data: bytes) -> None:
    with contextlib.suppress(CheckpointError):
        verify_checkpoint(data, KEY.public_key)


def _topic(data: bytes) -> None:
    with contextlib.suppress(TopicError):
        Topic.parse(data)


def _cursor(data: bytes) -> None:
    cursor = _decode(envelopes_pb2.Cursor, data)
    _rejected_as_invalid(lambda: cursor_from_proto(cursor, "query.last_seen"))


def _misbehavior_report(data: bytes) -> None:
    report = _decode(mb.UnsignedMisbehaviorReport, data)
    _rejected_as_invalid(lambda: check_client_report(report))


def _node_token(data: bytes) -> None:
    for read_only in (False, True):  # read-only nodes' tokens name an address (XIP 3.4)
        with contextlib.suppress(AuthError):
            verify_token(data.decode("latin-1"), REGISTRY, NODE_ID, 1_800_000_000, read_only)


def _prune_plan(data: bytes) -> None:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise Unparseable from None
    with contextlib.suppress(PlanError):
        parse_plan(document)


def _valid_payer() -> bytes:
    client = group_message_envelope(GROUP, b"\x00\x01hello")
    return build_payer_envelope(client, PAYER, NODE_ID).SerializeToString()


def _valid_originator() -> bytes:
    payer = validate_payer_envelope(envelopes_pb2.PayerEnvelope.FromString(_valid_payer()), NODE_ID)
    return originate(payer, NODE_ID, 7, 1_700_000_000_000_000_000, KEY).raw


def _valid_plan() -> bytes:
    document = {
        "version": 1,
        "as_of_unixtime": 1_700_000_000,
        "ranges": [{"originator_node_id": 100, "first_sequence_id": 1, "last_sequence_id": 9}],
    }
    return json.dumps(document).encode()


def _identity_updates() -> tuple[bytes, ...]:
    """The official client's identity updates (ECDSA wallet and installation signatures)."""
    captured = (*official("identity_update"), *official("identity_lifecycle"))
    clients = [envelopes_pb2.ClientEnvelope.FromString(c) for c in captured]
    return tuple(c.identity_update.SerializeToString() for c in clients)


@dataclass(frozen=True)
class Target:
    name: str
    check: Callable[[bytes], None]
    seeds: tuple[bytes, ...]


def targets() -> list[Target]:
    framed = mls.encode_framing(
        mls.WireFormat.PRIVATE_MESSAGE, GROUP, 3, mls.ContentType.APPLICATION, b"body"
    )
    public = mls.encode_framing(
        mls.WireFormat.PUBLIC_MESSAGE, GROUP, 3, mls.ContentType.COMMIT, b"body", b"aad"
    )
    originator = _valid_originator()
    frame = wire.field(1, wire.field(1, originator))
    cursor = envelopes_pb2.Cursor(node_id_to_sequence_id={100: 5}).SerializeToString()
    token = issue_token(KEY, NODE_ID, NODE_ID, 1_800_000_000).encode()
    read_only_token = issue_token(PAYER, None, NODE_ID, 1_800_000_000).encode()
    client = envelopes_pb2.PayerEnvelope.FromString(_valid_payer()).unsigned_client_envelope
    checkpoint = sign_checkpoint(KEY, NODE_ID, 7, b"\x07" * 32, 1_700_000_000_000_000_000, None)
    official_clients = tuple(
        seed
        for kind in ("group_message", "welcome_message", "upload_key_package", "identity_update")
        for seed in official(kind)[:2]
    )
    group_messages = [envelopes_pb2.ClientEnvelope.FromString(c) for c in official("group_message")]
    key_packages = [
        envelopes_pb2.ClientEnvelope.FromString(c).upload_key_package.key_package
        for c in official("upload_key_package")
    ]
    return [
        Target("payer envelope", _payer_envelope, (_valid_payer(),)),
        Target("client envelope", _client_envelope, (client, *official_clients)),
        Target("originator envelope", _originator_envelope, (originator,)),
        Target(
            "mls message",
            _mls_message,
            (framed, public, *(c.group_message.v1.data for c in group_messages[:4])),
        ),
        Target(
            "key package", _key_package, tuple(k.key_package_tls_serialized for k in key_packages)
        ),
        Target("chain event payload", _chain_event, (framed, client)),
        Target("welcome message", _client_envelope, official("welcome_message")),
        Target("identity update", _identity_update, _identity_updates()),
        Target("subscribe stream frame", _stream_frame, (frame,)),
        Target("topic", _topic, (b"\x00" + GROUP,)),
        Target(
            "cursor",
            _cursor,
            (cursor,),
        ),
        Target("misbehavior report", _misbehavior_report, (b"",)),
        Target("node token", _node_token, (token, read_only_token)),
        Target("prune plan", _prune_plan, (_valid_plan(),)),
        Target("log checkpoint", _checkpoint, (checkpoint.signed,)),
    ]


@st.composite
def mutated(draw: st.DrawFn, seeds: tuple[bytes, ...]) -> bytes:
    """A seed with a few random edits, or plain random bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=256))
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("flip", "truncate", "insert", "splice")))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            i = min(at, len(data) - 1)
            data[i] ^= draw(st.integers(1, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            end = draw(st.integers(at, len(data)))
            data[at:end] = draw(st.binary(max_size=8))
    return bytes(data)


def run(target: Target, data: bytes) -> None:
    with contextlib.suppress(Unparseable):
        target.check(data)


TARGETS = targets()


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_parser_refuses_only_with_its_own_errors(target: Target) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated(target.seeds))
    def check(data: bytes) -> None:
        run(target, data)

    check()
