"""Which payloads go to the chain, and when an indexed range is trusted."""

from __future__ import annotations

from typing import Any

from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.chain.index_status import Tip
from xnode.chain.log_stream import consistent
from xnode.chain.publisher import needs_chain
from xnode.chain.rpc import BlockHeader
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, validate_payer_envelope
from xnode.core.mls import ContentType, WireFormat, encode_framing
from xnode.core.topics import Topic, TopicKind

GROUP = bytes(range(16))
PAYER = SigningKey((3).to_bytes(32, "big"))


def _valid(client: envelopes_pb2.ClientEnvelope) -> Any:
    return validate_payer_envelope(build_payer_envelope(client, PAYER, 100), 100)


def _mls(content: ContentType, wire: WireFormat = WireFormat.PRIVATE_MESSAGE) -> bytes:
    return encode_framing(wire, GROUP, 1, content, b"x")


def test_commits_and_identity_updates_go_to_the_chain() -> None:
    handles = needs_chain
    assert handles(_valid(group_message_envelope(GROUP, _mls(ContentType.COMMIT))))
    assert handles(
        _valid(group_message_envelope(GROUP, _mls(ContentType.COMMIT, WireFormat.PUBLIC_MESSAGE)))
    )
    assert not handles(_valid(group_message_envelope(GROUP, _mls(ContentType.APPLICATION))))
    assert not handles(_valid(group_message_envelope(GROUP, _mls(ContentType.PROPOSAL))))
    assert not handles(_valid(group_message_envelope(GROUP, b"not mls")))
    welcome = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(
            target_topic=Topic(TopicKind.WELCOME_MESSAGES, b"k" * 32).raw
        ),
        welcome_message=mls_pb2.WelcomeMessageInput(
            v1=mls_pb2.WelcomeMessageInput.V1(
                installation_key=b"k" * 32, data=_mls(ContentType.COMMIT)
            )
        ),
    )
    assert not handles(_valid(welcome))


def _header(number: int, parent: bytes, block_hash: bytes) -> BlockHeader:
    return BlockHeader(number, block_hash, parent, 0, 0)


def _log(number: int, block_hash: bytes) -> dict[str, str]:
    return {"blockNumber": hex(number), "blockHash": "0x" + block_hash.hex()}


def test_a_range_is_trusted_only_when_it_extends_the_tip_and_did_not_move() -> None:
    tip = Tip(9, b"t" * 32)
    start, end = _header(10, b"t" * 32, b"s" * 32), _header(14, b"x" * 32, b"e" * 32)
    logs = [_log(10, b"s" * 32), _log(12, b"m" * 32), _log(14, b"e" * 32)]
    assert consistent(tip, end, start, end, logs)
    assert not consistent(tip, _header(14, b"x" * 32, b"E" * 32), start, end, logs)  # end moved
    assert not consistent(tip, end, _header(10, b"T" * 32, b"s" * 32), end, logs)  # forked below
    assert not consistent(tip, end, start, end, [*logs, _log(14, b"f" * 32)])  # stale log
    assert not consistent(tip, end, None, end, logs)  # the chain got shorter
    assert consistent(Tip(-1, b""), end, _header(0, b"?" * 32, b"s" * 32), end, [])
