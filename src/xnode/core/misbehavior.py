"""Misbehavior reports (XIP-49 3.2.7, 3.2.8): building, signing by the hosting node, checking
client submissions. Pure: protobuf values in, protobuf values out.

The host signs keccak256(b"misbehavior|" + unsigned_misbehavior_report); that is what the
council's aggregation job verifies (docs/export-format.md)."""

from __future__ import annotations

from collections.abc import Sequence

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.crypto import SigningKey, misbehavior_digest, recover_public_key
from xnode.core.cursors import out_of_range
from xnode.core.errors import Reason, Rejected
from xnode_api.withholding.v1.withholding_pb2 import ExtendedMisbehavior

Misbehavior = mb.Misbehavior
UNRESPONSIVE_NODE = mb.MISBEHAVIOR_UNRESPONSIVE_NODE
SLOW_NODE = mb.MISBEHAVIOR_SLOW_NODE
FAILED_REQUEST = mb.MISBEHAVIOR_FAILED_REQUEST
OUT_OF_ORDER = mb.MISBEHAVIOR_OUT_OF_ORDER
DUPLICATE_SEQUENCE_ID = mb.MISBEHAVIOR_DUPLICATE_SEQUENCE_ID
CAUSAL_ORDERING = mb.MISBEHAVIOR_CAUSAL_ORDERING
INVALID_PAYLOAD = mb.MISBEHAVIOR_INVALID_PAYLOAD
BLOCKCHAIN_INCONSISTENCY = mb.MISBEHAVIOR_BLOCKCHAIN_INCONSISTENCY

WITHHOLDING = ExtendedMisbehavior.MISBEHAVIOR_WITHHOLDING
WITHHOLDING_ACCUSATION = ExtendedMisbehavior.MISBEHAVIOR_WITHHOLDING_ACCUSATION
SPLIT_VIEW = ExtendedMisbehavior.MISBEHAVIOR_SPLIT_VIEW
OMISSION = ExtendedMisbehavior.MISBEHAVIOR_OMISSION

LIVENESS_TYPES = frozenset({UNRESPONSIVE_NODE, SLOW_NODE, FAILED_REQUEST})
# Judged like liveness (a threshold of distinct reporting nodes), proven like safety.
JUDGED_TYPES = LIVENESS_TYPES | {WITHHOLDING_ACCUSATION}
SAFETY_TYPES = frozenset(
    {
        OUT_OF_ORDER,
        DUPLICATE_SEQUENCE_ID,
        CAUSAL_ORDERING,
        INVALID_PAYLOAD,
        BLOCKCHAIN_INCONSISTENCY,
    }
)
# Proven by xnode's extension fields (xnode.withholding.v1), not by envelopes.
EXTENDED_PROOF_TYPES = frozenset({WITHHOLDING, SPLIT_VIEW, OMISSION})
PROVEN_TYPES = SAFETY_TYPES | EXTENDED_PROOF_TYPES
# response_time_ns is a uint32 on the wire: about 4.29 s. Longer waits are reported as this.
MAX_RESPONSE_TIME_NS = 2**32 - 1
MAX_REPORT_ENVELOPES = 16


def type_name(kind: int) -> str:
    """`UNRESPONSIVE_NODE` for MISBEHAVIOR_UNRESPONSIVE_NODE: a metric label, a log field.
    Types of xnode's extension (xnode.withholding.v1) are named too."""
    if kind in Misbehavior.values():
        name = Misbehavior.Name(Misbehavior.ValueType(kind))
    elif kind in ExtendedMisbehavior.values():
        name = ExtendedMisbehavior.Name(ExtendedMisbehavior.ValueType(kind))
    else:
        return f"UNKNOWN_{kind}"
    return name.removeprefix("MISBEHAVIOR_")


def liveness_report(
    kind: int,
    node_id: int,
    response_time_ns: int,
    request: api.SubscribeEnvelopesRequest,
    reporter_time_ns: int,
) -> mb.UnsignedMisbehaviorReport:
    """A node's own report of a peer that failed, answered slowly or with an error; `request`
    is what led to it (replication streams are described as their SubscribeEnvelopes query)."""
    if kind not in LIVENESS_TYPES:
        raise ValueError(f"{type_name(kind)} is not a liveness failure")
    return mb.UnsignedMisbehaviorReport(
        reporter_time_ns=reporter_time_ns,
        misbehaving_node_id=node_id,
        type=mb.Misbehavior.ValueType(kind),
        liveness=mb.LivenessFailure(
            response_time_ns=min(max(response_time_ns, 0), MAX_RESPONSE_TIME_NS),
            subscribe=request,
        ),
        submitted_by_node=True,
    )


def safety_report(
    kind: int, node_id: int, envelopes: Sequence[bytes], reporter_time_ns: int
) -> mb.UnsignedMisbehaviorReport:
    """A node's own report with the envelopes that prove it, exactly as received."""
    if kind not in SAFETY_TYPES:
        raise ValueError(f"{type_name(kind)} is not a safety failure")
    return mb.UnsignedMisbehaviorReport(
        reporter_time_ns=reporter_time_ns,
        misbehaving_node_id=node_id,
        type=mb.Misbehavior.ValueType(kind),
        safety=mb.SafetyFailure(
            envelopes=[envelopes_pb2.OriginatorEnvelope.FromString(raw) for raw in envelopes]
        ),
        submitted_by_node=True,
    )


def sign_report(
    unsigned: mb.UnsignedMisbehaviorReport, key: SigningKey, server_time_ns: int
) -> mb.MisbehaviorReport:
    raw = unsigned.SerializeToString(deterministic=True)
    return mb.MisbehaviorReport(
        server_time_ns=server_time_ns,
        unsigned_misbehavior_report=raw,
        signature=signature_pb2.RecoverableEcdsaSignature(bytes=key.sign(misbehavior_digest(raw))),
    )


def report_signer(report: mb.MisbehaviorReport) -> bytes:
    """The public key that signed `report`; raises SignatureError when none does."""
    return recover_public_key(
        report.signature.bytes, misbehavior_digest(report.unsigned_misbehavior_report)
    )


def check_client_report(report: mb.UnsignedMisbehaviorReport) -> None:
    """What a node accepts from clients (XIP-49 3.2.8): never `submitted_by_node`, a known
    type, and the failure kind that type needs."""
    if report.submitted_by_node:
        raise Rejected(
            Reason.MALFORMED, "submitted_by_node must be false: only nodes file node reports"
        )
    problem = out_of_range(report.misbehaving_node_id)
    if problem:
        raise Rejected(Reason.MALFORMED, f"misbehaving_node_id: {problem}")
    kind = int(report.type)
    failure = report.WhichOneof("failure")
    if kind in LIVENESS_TYPES and failure != "liveness":
        raise Rejected(Reason.MALFORMED, f"a {type_name(kind)} report needs a liveness failure")
    if kind == WITHHOLDING_ACCUSATION:
        raise Rejected(
            Reason.MALFORMED, "a WITHHOLDING_ACCUSATION proves nothing: only nodes file one"
        )
    if kind in EXTENDED_PROOF_TYPES:
        return  # its proof is in xnode's extension fields, checked as evidence
    if kind in SAFETY_TYPES and failure != "safety":
        raise Rejected(Reason.MALFORMED, f"a {type_name(kind)} report needs a safety failure")
    if kind not in LIVENESS_TYPES | SAFETY_TYPES:
        raise Rejected(Reason.MALFORMED, f"misbehavior type {kind} is not a known failure")
    if failure == "safety" and not report.safety.envelopes:
        raise Rejected(Reason.MALFORMED, "a safety report needs the envelopes that prove it")
    if len(report.safety.envelopes) > MAX_REPORT_ENVELOPES:
        raise Rejected(
            Reason.LIMIT_EXCEEDED,
            f"{len(report.safety.envelopes)} envelopes, the limit is {MAX_REPORT_ENVELOPES}",
        )
