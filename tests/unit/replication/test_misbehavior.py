"""Misbehavior reports: building, the host's signature, and what clients may submit."""

from __future__ import annotations

import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey, misbehavior_digest, recover_public_key
from xnode.core.errors import Rejected

HOST = SigningKey.generate()
ENVELOPE = envelopes_pb2.OriginatorEnvelope(unsigned_originator_envelope=b"x").SerializeToString()


def test_host_signs_keccak_of_the_unsigned_bytes_as_the_aggregation_job_checks() -> None:
    unsigned = misbehavior.safety_report(misbehavior.OUT_OF_ORDER, 200, [ENVELOPE], 5)
    report = misbehavior.sign_report(unsigned, HOST, server_time_ns=7)
    assert report.server_time_ns == 7
    digest = misbehavior_digest(report.unsigned_misbehavior_report)
    assert recover_public_key(report.signature.bytes, digest) == HOST.public_key
    assert misbehavior.report_signer(report) == HOST.public_key
    parsed = mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)
    assert parsed.submitted_by_node
    assert parsed.misbehaving_node_id == 200
    assert [e.SerializeToString() for e in parsed.safety.envelopes] == [ENVELOPE]


def test_liveness_report_carries_the_request_and_clamps_the_uint32_time() -> None:
    request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(originator_node_ids=[300]))
    report = misbehavior.liveness_report(misbehavior.UNRESPONSIVE_NODE, 300, 10**12, request, 1)
    assert report.liveness.response_time_ns == 2**32 - 1
    assert report.liveness.subscribe == request
    assert report.type == mb.MISBEHAVIOR_UNRESPONSIVE_NODE
    with pytest.raises(ValueError):
        misbehavior.liveness_report(misbehavior.OUT_OF_ORDER, 300, 1, request, 1)
    with pytest.raises(ValueError):
        misbehavior.safety_report(misbehavior.SLOW_NODE, 300, [], 1)


def client_report(**fields: object) -> mb.UnsignedMisbehaviorReport:
    base: dict[str, object] = {
        "misbehaving_node_id": 100,
        "type": mb.MISBEHAVIOR_DUPLICATE_SEQUENCE_ID,
        "safety": mb.SafetyFailure(envelopes=[envelopes_pb2.OriginatorEnvelope()] * 2),
    }
    return mb.UnsignedMisbehaviorReport(**{**base, **fields})  # type: ignore[arg-type]


def test_a_well_formed_client_report_is_accepted() -> None:
    misbehavior.check_client_report(client_report())
    misbehavior.check_client_report(
        client_report(
            type=mb.MISBEHAVIOR_SLOW_NODE,
            liveness=mb.LivenessFailure(response_time_ns=5),
        )
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"submitted_by_node": True}, "submitted_by_node must be false"),
        ({"type": mb.MISBEHAVIOR_UNSPECIFIED}, "not a known failure"),
        ({"type": mb.MISBEHAVIOR_FAILED_REQUEST}, "needs a liveness failure"),
        ({"safety": mb.SafetyFailure()}, "needs the envelopes"),
        (
            {"safety": mb.SafetyFailure(envelopes=[envelopes_pb2.OriginatorEnvelope()] * 17)},
            "the limit is 16",
        ),
    ],
)
def test_client_reports_are_refused(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(Rejected, match=reason):
        misbehavior.check_client_report(client_report(**fields))


def test_type_names_are_metric_labels() -> None:
    assert misbehavior.type_name(misbehavior.DUPLICATE_SEQUENCE_ID) == "DUPLICATE_SEQUENCE_ID"
