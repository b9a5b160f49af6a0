"""Subscribe responses are framed from the batches' shared bytes: everything a stream takes at
once is one response, and no response grows past the stream limit."""

from __future__ import annotations

from collections.abc import Iterable

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api import service
from xnode.core.envelopes import StoredEnvelope
from xnode.usecases.fanout import Batch
from xnode.usecases.subscription import Delivery, Phase

TOPIC = b"\x00" + b"g" * 16


def raw(seq: int, size: int = 8) -> bytes:
    signed = envelopes_pb2.OriginatorEnvelope(unsigned_originator_envelope=bytes([seq]) * size)
    return signed.SerializeToString()


def batch(*seqs: int, size: int = 8) -> Batch:
    return Batch([StoredEnvelope(100, s, TOPIC, raw(s, size)) for s in seqs])


def raws(envelopes: Iterable[envelopes_pb2.OriginatorEnvelope]) -> list[bytes]:
    return [e.SerializeToString() for e in envelopes]


def test_waiting_batches_are_one_response_of_each_kind() -> None:
    delivery = Delivery(Phase.LIVE, [batch(1, 2), batch(3), batch(4, 5)])
    expected = [raw(s) for s in range(1, 6)]
    (envelopes,) = service._envelopes_frames(delivery)
    assert raws(api.SubscribeEnvelopesResponse.FromString(envelopes).envelopes) == expected
    (originators,) = service._originators_frames(delivery)
    got = api.SubscribeOriginatorsResponse.FromString(originators).envelopes.envelopes
    assert raws(got) == expected
    (topics,) = service._topics_frames(delivery)
    assert raws(api.SubscribeTopicsResponse.FromString(topics).envelopes.envelopes) == expected


def test_responses_stay_within_the_stream_limit() -> None:
    big = service.MAX_STREAM_MESSAGE_BYTES // 3
    delivery = Delivery(Phase.LIVE, [batch(1, 2, 3, 4, size=big), batch(5, size=big)])
    frames = list(service._envelopes_frames(delivery))
    assert all(len(f) <= service.MAX_STREAM_MESSAGE_BYTES + 16 for f in frames)
    seqs = [
        e.unsigned_originator_envelope[0]
        for f in frames
        for e in api.SubscribeEnvelopesResponse.FromString(f).envelopes
    ]
    assert seqs == [1, 2, 3, 4, 5] and len(frames) == 3
