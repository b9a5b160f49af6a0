"""Audit replay: re-checks a node's whole stored history, row by row.

Pure and streaming: an adapter feeds each originator's rows in sequence order (the envelope
and / or its leaf hash), that originator's stored checkpoints and forked sequence ids, and the
conflicts table, one group at a time; nothing here holds more than one originator's
checkpoints and the tree's O(log n) frontier. `xnode audit` (a database) and
`spark_jobs/audit.py` (an export) run the same checks:
- every envelope's signature against the registry keys its originator may have signed with
  (originator signature; for chain payloads the indexing node's blockchain proof);
- contiguity per logged originator, net of expiry: a sequence id whose envelope is gone is
  fine only when its leaf is kept and provably expired (leaf format 2, its committed expiry
  passed: xnode.core.leaves); an unexpired one is a loss; one with neither is a gap. A
  format 1 leaf (held without its envelope since before leaf format 2) commits to no
  expiry: counted apart, excused by the rule of its time (a kept leaf meant expired);
- each leaf commits to its envelope's signed content (and, format 2, its expiry);
- every stored checkpoint's signature, its previous-hash chain, and its root against the
  leaves (a root over a sequence id the originator forked is evidence of the fork, not a
  fault of this node: the log keeps the version the fork rule picks);
- every conflict is two validly signed, different envelopes for one (originator, sequence
  id), and the log holds the one `forks.log_keeps` picks;
- chain payloads against the contract events they were indexed from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core import merkle
from xnode.core.chain_payloads import ChainEvent, MalformedPayload, payer_envelope_of
from xnode.core.checkpoints import (
    Checkpoint,
    CheckpointError,
    check_follows,
    has_log,
    verify_checkpoint,
)
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SignatureError
from xnode.core.envelopes import envelope_signer
from xnode.core.forks import envelope_hash, log_keeps
from xnode.core.leaves import leaf_matches, provably_expired
from xnode.core.registry import RegistryKeys
from xnode.core.retention import NEVER

MAX_DETAILS = 200  # faults described in full; the rest are only counted


class FaultKind(StrEnum):
    MALFORMED = "malformed_envelope"
    MISFILED = "misfiled_envelope"  # stored under another (originator, sequence id)
    UNKNOWN_ORIGINATOR = "unknown_originator"
    BAD_SIGNATURE = "bad_signature"
    MISSING_LEAF = "missing_leaf"
    LEAF_MISMATCH = "leaf_mismatch"
    LOST = "lost_envelope"  # a leaf whose envelope is gone before its committed expiry
    GAP = "missing_sequence_ids"
    CHECKPOINT_SIGNATURE = "checkpoint_signature"
    CHECKPOINT_CHAIN = "checkpoint_chain"
    CHECKPOINT_ROOT = "checkpoint_root"
    CONFLICT_UNPROVEN = "conflict_unproven"
    CONFLICT_WRONG_PICK = "conflict_wrong_pick"
    CHAIN_PAYLOAD = "chain_payload_mismatch"
    CHAIN_PAYLOAD_WITHOUT_EVENT = "chain_payload_without_event"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    originator_node_id: int
    sequence_id: int  # or the checkpoint's tree size
    detail: str

    def describe(self) -> str:
        return f"{self.kind}: originator {self.originator_node_id} at {self.sequence_id}: " + (
            self.detail
        )


@dataclass
class Verdict:
    """What an audit found: counts, and the first MAX_DETAILS faults described."""

    envelopes: int = 0  # envelopes checked
    expired: int = 0  # leaves whose envelope is gone after their committed expiry
    format1_without_envelope: int = 0  # format 1 leaves held alone: no expiry to prove
    checkpoints: int = 0
    checkpoints_unchecked: int = 0  # roots beyond the contiguous leaves held
    checkpoints_over_forks: int = 0
    conflicts: int = 0
    chain_events: int = 0
    faults: Counter[FaultKind] = field(default_factory=Counter)
    details: list[Fault] = field(default_factory=list)

    def fault(self, kind: FaultKind, originator: int, sequence_id: int, detail: str) -> None:
        self.faults[kind] += 1
        if len(self.details) < MAX_DETAILS:
            self.details.append(Fault(kind, originator, sequence_id, detail))

    @property
    def clean(self) -> bool:
        return not self.faults

    def merge(self, other: Verdict) -> None:
        for name in (
            "envelopes",
            "expired",
            "format1_without_envelope",
            "checkpoints",
            "checkpoints_unchecked",
            "checkpoints_over_forks",
            "conflicts",
            "chain_events",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.faults.update(other.faults)
        room = MAX_DETAILS - len(self.details)
        self.details.extend(other.details[: max(room, 0)])

    def describe(self) -> str:
        lines = [f"  {fault.describe()}" for fault in self.details]
        if sum(self.faults.values()) > len(self.details):
            lines.append(f"  ... {sum(self.faults.values()) - len(self.details)} more")
        counts = (
            f"checked {self.envelopes} envelopes ({self.expired} sequence ids provably "
            f"expired, {self.format1_without_envelope} format 1 leaves without envelope), "
            f"{self.checkpoints} checkpoints ({self.checkpoints_unchecked} roots "
            f"beyond the leaves held, {self.checkpoints_over_forks} over forks), "
            f"{self.conflicts} conflicts, {self.chain_events} chain events"
        )
        if self.clean:
            return f"audit: CLEAN: {counts}"
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items()))
        return "\n".join([f"audit: FAULTS FOUND ({kinds}): {counts}", *lines])


def _decode(
    raw: bytes,
) -> tuple[envelopes_pb2.OriginatorEnvelope, envelopes_pb2.UnsignedOriginatorEnvelope]:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    return envelope, unsigned


def envelope_problem(
    originator: int, sequence_id: int, raw: bytes, keys: RegistryKeys
) -> tuple[FaultKind, str] | None:
    """What is wrong with the envelope stored at (originator, sequence id), or None. Chain
    payloads (no log) carry the blockchain proof of a registered node."""
    try:
        envelope, unsigned = _decode(raw)
    except DecodeError as exc:
        return FaultKind.MALFORMED, f"does not decode ({exc})"
    if (unsigned.originator_node_id, unsigned.originator_sequence_id) != (originator, sequence_id):
        return FaultKind.MISFILED, (
            f"the envelope is ({unsigned.originator_node_id}, {unsigned.originator_sequence_id})"
        )
    if has_log(originator):
        allowed: Collection[bytes] = keys.get(originator, ())
        if not allowed:
            return FaultKind.UNKNOWN_ORIGINATOR, "the originator is not in the registry"
    else:
        allowed = {key for node_keys in keys.values() for key in node_keys}
    try:
        signer = envelope_signer(envelope)
    except SignatureError as exc:
        return FaultKind.BAD_SIGNATURE, str(exc)
    if signer not in allowed:
        return FaultKind.BAD_SIGNATURE, f"signed by 0x{signer.hex()[:18]}..., not a registry key"
    return None


class OriginatorAudit:
    """One originator's history, fed in sequence order by `row`; `finish` after the last."""

    def __init__(
        self,
        originator: int,
        keys: RegistryKeys,
        checkpoints: Sequence[bytes],
        forked: Collection[int],
        verdict: Verdict,
        now_unix: int = 0,
    ) -> None:
        """`now_unix`: the time expiry is judged at (0: nothing has expired)."""
        self.originator = originator
        self._now = now_unix
        self._keys = keys
        self._verdict = verdict
        self._logged = has_log(originator)
        self._last = 0  # highest sequence id seen
        self._frontier: merkle.Frontier | None = merkle.Frontier() if self._logged else None
        self._first_fork = min(forked, default=None)
        self._pending = self._checked_chain(checkpoints) if self._logged else []

    def _fault(self, kind: FaultKind, sequence_id: int, detail: str) -> None:
        self._verdict.fault(kind, self.originator, sequence_id, detail)

    def _checked_chain(self, signed: Sequence[bytes]) -> list[Checkpoint]:
        """Signatures and the previous-hash chain; the roots wait for the leaves."""
        keys = self._keys.get(self.originator, ())
        verified: list[Checkpoint] = []
        previous: Checkpoint | None = None
        for raw in signed:
            self._verdict.checkpoints += 1
            checkpoint = _verified_checkpoint(raw, keys)
            if isinstance(checkpoint, str):
                self._fault(FaultKind.CHECKPOINT_SIGNATURE, 0, checkpoint)
                continue
            try:
                check_follows(previous, checkpoint)
            except CheckpointError as exc:
                self._fault(FaultKind.CHECKPOINT_CHAIN, checkpoint.tree_size, str(exc))
            previous = checkpoint
            verified.append(checkpoint)
        verified.reverse()  # popped from the end, smallest tree first
        return verified

    def row(
        self,
        sequence_id: int,
        leaf: bytes | None,
        raw: bytes | None,
        committed_expiry: int | None = None,
    ) -> None:
        """`committed_expiry`: the expiry the leaf commits to (format 2), None for format 1
        or when the source does not know it."""
        if sequence_id > self._last + 1 and self._logged:
            first, last = self._last + 1, sequence_id - 1
            self._fault(
                FaultKind.GAP, first, f"sequence ids {first}..{last}: neither envelope nor leaf"
            )
            self._frontier = None  # no root past a gap can be recomputed
        self._last = max(self._last, sequence_id)
        if raw is not None:
            self._envelope(sequence_id, leaf, raw)
        elif leaf is not None:
            self._without_envelope(sequence_id, committed_expiry)
        if self._logged and leaf is not None:
            self._append(leaf)

    def _without_envelope(self, sequence_id: int, committed_expiry: int | None) -> None:
        if committed_expiry is None:
            self._verdict.format1_without_envelope += 1
        elif provably_expired(committed_expiry, self._now):
            self._verdict.expired += 1
        else:
            until = "never expires" if committed_expiry == NEVER else f"expires {committed_expiry}"
            self._fault(
                FaultKind.LOST, sequence_id, f"the leaf is held, the envelope is not ({until})"
            )

    def _envelope(self, sequence_id: int, leaf: bytes | None, raw: bytes) -> None:
        self._verdict.envelopes += 1
        problem = envelope_problem(self.originator, sequence_id, raw, self._keys)
        if problem is not None:
            self._fault(problem[0], sequence_id, problem[1])
        if not self._logged:
            return
        if leaf is None:
            self._fault(FaultKind.MISSING_LEAF, sequence_id, "an envelope without its leaf hash")
            self._frontier = None
        elif not leaf_matches(leaf, raw):
            self._fault(
                FaultKind.LEAF_MISMATCH, sequence_id, "the leaf is not the envelope's content"
            )

    def _append(self, leaf: bytes) -> None:
        if self._frontier is None:
            return
        self._frontier.append(leaf)
        while self._pending and self._pending[-1].tree_size <= self._frontier.size:
            checkpoint = self._pending.pop()
            if checkpoint.tree_size == self._frontier.size:
                self._check_root(checkpoint, self._frontier.root())

    def _check_root(self, checkpoint: Checkpoint, root: bytes) -> None:
        if root == checkpoint.root:
            return
        size = checkpoint.tree_size
        if self._first_fork is not None and self._first_fork <= size:
            self._verdict.checkpoints_over_forks += 1  # the originator signed both versions
            return
        self._fault(FaultKind.CHECKPOINT_ROOT, size, f"the root at {size} differs from the leaves")

    def finish(self) -> None:
        self._verdict.checkpoints_unchecked += len(self._pending)
        self._pending = []


def _verified_checkpoint(raw: bytes, keys: Collection[bytes]) -> Checkpoint | str:
    problem = "the originator is not in the registry"
    for key in keys:
        try:
            return verify_checkpoint(raw, key)
        except CheckpointError as exc:
            problem = str(exc)
    return problem


@dataclass(frozen=True, slots=True)
class ConflictVersion:
    envelope_hash: bytes
    raw: bytes


def audit_conflict(
    originator: int,
    sequence_id: int,
    versions: Sequence[ConflictVersion],
    log_raw: bytes | None,
    keys: RegistryKeys,
    verdict: Verdict,
    check_pick: bool = True,
) -> None:
    """One forked (originator, sequence id): every version validly signed by the originator
    for that sequence id, at least two different signed contents, the log's the rule's pick
    (unless `check_pick` is False: an incremental export may predate the fork's resolution)."""
    verdict.conflicts += 1
    contents: set[bytes] = set()
    for version in versions:
        problem = envelope_problem(originator, sequence_id, version.raw, keys)
        if problem is None and envelope_hash(version.raw) != version.envelope_hash:
            problem = (FaultKind.CONFLICT_UNPROVEN, "stored hash is not the envelope's")
        if problem is not None:
            verdict.fault(FaultKind.CONFLICT_UNPROVEN, originator, sequence_id, problem[1])
            return
        contents.add(_decode(version.raw)[0].unsigned_originator_envelope)
    if len(contents) < 2:
        verdict.fault(
            FaultKind.CONFLICT_UNPROVEN,
            originator,
            sequence_id,
            "no two different signed contents",
        )
        return
    if not check_pick:
        return
    pick = versions[0].raw
    for version in versions[1:]:
        pick = log_keeps(pick, version.raw)
    if log_raw != pick:
        verdict.fault(
            FaultKind.CONFLICT_WRONG_PICK,
            originator,
            sequence_id,
            "the log does not hold the version with the lowest hash",
        )


def chain_payload_problem(event: ChainEvent, raw: bytes | None) -> str | None:
    """How the envelope stored for a contract event differs from what the event says (the
    envelope's signature is checked with the rest of the log), or None."""
    if raw is None:
        return "the event's envelope is not stored"
    try:
        envelope, unsigned = _decode(raw)
    except DecodeError as exc:
        return f"the stored envelope does not decode ({exc})"
    try:
        payer_bytes = payer_envelope_of(event)[0]
    except MalformedPayload as exc:
        return f"the event is malformed ({exc}) but an envelope is stored for it"
    if unsigned.payer_envelope_bytes != payer_bytes:
        return "the stored payer envelope is not the event's bytes"
    if envelope.blockchain_proof.transaction_hash != event.transaction_hash:
        return "the blockchain proof names another transaction"
    stamp = event.block_timestamp
    if stamp is not None and unsigned.originator_ns != stamp * NS_PER_SECOND:
        return "the stored timestamp is not the block's"
    return None


def audit_chain_events(events: Iterable[tuple[ChainEvent, bytes | None]], verdict: Verdict) -> None:
    """Contract events with the envelope stored for each (None when none is)."""
    for event, raw in events:
        verdict.chain_events += 1
        try:
            payer_envelope_of(event)
        except MalformedPayload:
            if raw is None:
                continue  # a malformed event the indexer rightly skipped
        problem = chain_payload_problem(event, raw)
        if problem is not None:
            verdict.fault(FaultKind.CHAIN_PAYLOAD, event.originator, event.sequence_id, problem)
