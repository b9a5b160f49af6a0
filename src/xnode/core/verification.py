"""Checks on envelopes received from peers (XIP-49 3.2.1, 3.2.7). Pure and thread-safe:
batches are verified in worker threads (signature recovery releases the GIL).

An envelope is stored only if it parses, its originator signature recovers to the registry
key of its originator id, and its payer envelope passes the originator's own validation
rules (payer signature, topic matching payload, target originator). Order problems
(sequence ids that skip, timestamps that go back or lie far ahead) are reported but the
envelope is stored anyway, as the XIP asks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SignatureError
from xnode.core.envelopes import IndexedEnvelope, parse_originator_envelope, received_payer
from xnode.core.errors import Rejected
from xnode.core.fees import FeeSchedule
from xnode.core.leaves import leaf_v2
from xnode.core.retention import DEFAULT_RETENTION_SECONDS

MAX_FUTURE_NS = 5 * 60 * NS_PER_SECOND
RETENTION_NS = DEFAULT_RETENTION_SECONDS * NS_PER_SECOND


class RejectReason(StrEnum):
    MALFORMED = "malformed"
    UNEXPECTED_ORIGINATOR = "unexpected_originator"
    UNKNOWN_ORIGINATOR = "unknown_originator"
    BAD_ORIGINATOR_SIGNATURE = "bad_originator_signature"
    INVALID_PAYLOAD = "invalid_payload"


@dataclass(frozen=True, slots=True)
class InvalidEnvelope:
    raw: bytes
    reason: RejectReason
    detail: str
    # True when the originator really signed it: then the originator is to blame (the proof
    # holds); otherwise whoever served it is.
    signed_by_originator: bool = False


Verdict = IndexedEnvelope | InvalidEnvelope


def verify_envelope(
    raw: bytes,
    keys: Mapping[int, bytes],
    expected_originator: int,
    schedule: FeeSchedule | None = None,
) -> Verdict:
    """`schedule` is the originator's published fee schedule, when it publishes one."""
    try:
        env = parse_originator_envelope(raw)
    except Rejected as exc:
        return InvalidEnvelope(raw, RejectReason.MALFORMED, exc.detail)
    origin = env.originator_node_id
    if origin != expected_originator:
        return InvalidEnvelope(
            raw,
            RejectReason.UNEXPECTED_ORIGINATOR,
            f"asked for originator {expected_originator}'s envelopes, got one of {origin}",
        )
    key = keys.get(origin)
    if key is None:
        return InvalidEnvelope(
            raw, RejectReason.UNKNOWN_ORIGINATOR, f"originator {origin} is not in the registry"
        )
    # Recovered and compared, not verified against the known key: ECDSA
    # verification ignores the recovery id v, and with the other v the same (r, s) recovers
    # to another key. Clients recover, so an envelope whose v a relay flipped must be refused
    # (and it would differ in bytes from the originator's: a fork nobody signed). Verifying
    # then checking v needs the nonce point R, which libsecp256k1's API does not expose:
    # recomputing it is another scalar multiplication, dearer than the recovery it would
    # replace. The recovered key also names the signer in the refusal.
    try:
        signer = env.signer_public_key()
    except SignatureError as exc:
        return InvalidEnvelope(raw, RejectReason.BAD_ORIGINATOR_SIGNATURE, str(exc))
    if signer != key:
        return InvalidEnvelope(
            raw,
            RejectReason.BAD_ORIGINATOR_SIGNATURE,
            f"sequence id {env.sequence_id}: signed by 0x{signer.hex()[:18]}..., "
            f"not by originator {origin}'s registry key",
        )
    try:
        topic, payer_address, retention_days, depends_on = received_payer(
            env.payer_envelope, origin, env.originator_ns
        )
    except Rejected as exc:
        return InvalidEnvelope(
            raw,
            RejectReason.INVALID_PAYLOAD,
            f"sequence id {env.sequence_id}: {exc.detail}",
            signed_by_originator=True,
        )
    if schedule is not None:
        problem = schedule.problem(
            env.fees.base, env.fees.congestion, env.payer_envelope_size, retention_days
        )
        if problem is not None:
            return InvalidEnvelope(
                raw,
                RejectReason.INVALID_PAYLOAD,
                f"sequence id {env.sequence_id}: fees do not follow the originator's "
                f"schedule: {problem}",
                signed_by_originator=True,
            )
    return IndexedEnvelope(
        origin,
        env.sequence_id,
        env.originator_ns,
        topic,
        env.expiry,
        payer_address,
        raw,
        leaf_v2(env.unsigned_raw, env.expiry),  # in the verifying thread, off the event loop
        base_fee=env.fees.base,
        congestion_fee=env.fees.congestion,
        depends_ahead=_own_dependency_ahead(depends_on.get(origin), env.sequence_id),
    )


def _own_dependency_ahead(named: int, sequence_id: int) -> int:
    return named if named >= sequence_id else 0


def verify_batch(
    raws: Sequence[bytes],
    keys: Mapping[int, bytes],
    expected_originator: int,
    schedule: FeeSchedule | None = None,
) -> list[Verdict]:
    return [verify_envelope(raw, keys, expected_originator, schedule) for raw in raws]


def ready() -> bool:
    """For a worker process to import this module before its first batch arrives."""
    return True


@dataclass(frozen=True, slots=True)
class Position:
    """The newest envelope stored for one originator: what the next one must follow."""

    sequence_id: int
    originator_ns: int
    raw: bytes | None


def order_problem(
    previous: Position | None,
    env: IndexedEnvelope,
    now_ns: int,
    check_sequence: bool,
    committed: int = 0,
) -> str | None:
    """Why `env` breaks its originator's log (XIP-49 3.2.7 OUT_OF_ORDER), or None.

    `check_sequence` is False for envelopes relayed by another peer: a relay with gaps of its
    own proves nothing against the originator. Timestamps are signed, so they are checked
    whoever relays them. `committed` is the originator's watermark: the tree size of its
    newest signed checkpoint known here. Sequence ids up to it were published (the originator
    signed a root over them), so a gap within them is envelopes expired or pruned, not a
    fault."""
    if env.originator_ns > now_ns + MAX_FUTURE_NS:
        ahead_s = (env.originator_ns - now_ns) / 1e9
        return f"sequence id {env.sequence_id} is timestamped {ahead_s:.0f} s in the future"
    if previous is None:
        expired_before = env.originator_ns < now_ns - RETENTION_NS
        committed_before = env.sequence_id - 1 <= committed
        if check_sequence and env.sequence_id != 1 and not (expired_before or committed_before):
            return f"the first sequence id is {env.sequence_id}, not 1"
        return None
    if env.sequence_id <= previous.sequence_id:
        return None  # filling in below the newest: checked as a possible duplicate instead
    if env.originator_ns < previous.originator_ns:
        return (
            f"sequence id {env.sequence_id} is timestamped before sequence id "
            f"{previous.sequence_id} ({env.originator_ns} < {previous.originator_ns})"
        )
    skipped = env.sequence_id != previous.sequence_id + 1
    if check_sequence and skipped and env.sequence_id - 1 > committed:
        return f"sequence id {env.sequence_id} follows {previous.sequence_id}"
    return None
