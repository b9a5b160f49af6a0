"""Sizes and byte budgets: every envelope a node stores fits one gRPC message when sent,
and every answer stops adding rows at a byte budget below the message limit.

The originator envelope a node signs around a payer envelope is larger than it (the
unsigned envelope's fields, the signature, the answer's own framing), so a payer envelope
that just fits a publish request would be stored and then never be sent: not in the publish
answer, not to a peer's SubscribeOriginators (which would stall replication from that node
for good). Caps are set well below the message limit, with ENVELOPE_FRAMING_OVERHEAD
accounted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xnode.core.errors import Reason, Rejected

MIB = 1024 * 1024

# The most an originator envelope, framed in any answer, adds to its payer envelope's bytes:
# the unsigned envelope's six integer fields and the payer bytes' tag and length (67), the
# outer envelope's field with its length (6), the proof (a signature 69, a blockchain proof
# 105) and two levels of answer framing (SubscribeOriginatorsResponse.envelopes.envelopes,
# GetNewestEnvelopeResponse.results.originator_envelope: 12). Rounded up;
# tests/unit/core/test_sizes.py checks it on envelopes with every field at its widest.
ENVELOPE_FRAMING_OVERHEAD = 256

# A liveness report (UNRESPONSIVE_NODE, SLOW_NODE, FAILED_REQUEST) carries one request, no
# envelope: a SubscribeOriginators request with a full cursor (1,024 entries) is about 16 KiB.
MAX_LIVENESS_REPORT_BYTES = 64 * 1024

DEFAULT_MAX_PAYER_ENVELOPE_BYTES = 4 * MIB
DEFAULT_ANSWER_BUDGET_BYTES = 16 * MIB
# Two envelopes as evidence (a DUPLICATE_SEQUENCE_ID report) at the payer cap, and the rest.
DEFAULT_MAX_REPORT_BYTES = 9 * MIB
DEFAULT_MAX_RETENTION_DAYS = 3650


@dataclass(frozen=True, slots=True)
class Sizes:
    """The node's size caps (settings group "sizes", docs/operations.md "Sizes and
    budgets"). `message_bytes`: the gRPC message limit both ways."""

    message_bytes: int = 25 * MIB
    payer_envelope_bytes: int = DEFAULT_MAX_PAYER_ENVELOPE_BYTES
    answer_budget_bytes: int = DEFAULT_ANSWER_BUDGET_BYTES
    report_bytes: int = DEFAULT_MAX_REPORT_BYTES
    retention_days: int = DEFAULT_MAX_RETENTION_DAYS

    def problem(self) -> str | None:
        """Why these caps cannot hold together, or None: a payer envelope at its cap must fit
        an answer's budget once signed, and a budget must fit a message."""
        signed = self.payer_envelope_bytes + ENVELOPE_FRAMING_OVERHEAD
        if signed > self.answer_budget_bytes:
            return (
                f"max_payer_envelope_bytes ({self.payer_envelope_bytes}) plus the originator "
                f"envelope's framing ({ENVELOPE_FRAMING_OVERHEAD}) exceeds answer_budget_bytes "
                f"({self.answer_budget_bytes})"
            )
        for name, value in (
            ("answer_budget_bytes", self.answer_budget_bytes),
            ("max_report_bytes", self.report_bytes + ENVELOPE_FRAMING_OVERHEAD),
        ):
            if value > self.message_bytes:
                return f"{name} ({value}) exceeds the message limit ({self.message_bytes} bytes)"
        return None

    def check_payer_envelope(self, size: int, retention_days: int) -> None:
        """Refuses (INVALID_ARGUMENT) what could be stored but never sent, or billed for a
        retention beyond the cap."""
        if size > self.payer_envelope_bytes:
            raise Rejected(
                Reason.MALFORMED,
                f"payer envelope is {size} bytes, the limit is {self.payer_envelope_bytes} "
                "(the originator envelope around it must fit one message when sent to peers "
                "and readers)",
            )
        if retention_days > self.retention_days:
            raise Rejected(
                Reason.MALFORMED,
                f"message_retention_days is {retention_days}, the limit is {self.retention_days}",
            )

    def check_publish_answer(self, payer_sizes: Iterable[int]) -> None:
        """Refuses, before anything is stored, a publish whose answer (one originator
        envelope per payer envelope) could not be sent."""
        answer = sum(size + ENVELOPE_FRAMING_OVERHEAD for size in payer_sizes)
        if answer > self.message_bytes:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"the answer to this publish would be up to {answer} bytes, over the "
                f"{self.message_bytes}-byte message limit: publish these envelopes in several "
                "requests",
            )

    def fits_message(self, framed_bytes: int) -> bool:
        return framed_bytes <= self.message_bytes

    def check_report(self, size: int, liveness: bool) -> None:
        """Refuses (INVALID_ARGUMENT) a misbehavior report larger than it can need to be:
        reports are kept, and answered to anyone who queries them."""
        cap = min(self.report_bytes, MAX_LIVENESS_REPORT_BYTES) if liveness else self.report_bytes
        if size > cap:
            kind = "a liveness report (it carries one request)" if liveness else "a report"
            raise Rejected(
                Reason.MALFORMED, f"the report is {size} bytes, the limit for {kind} is {cap}"
            )


def within_budget(sizes: Iterable[int], budget: int) -> int:
    """How many of the rows, in order, an answer holds: as many as fit `budget` bytes, and
    always the first (each row alone fits a message, ENVELOPE_FRAMING_OVERHEAD)."""
    total = 0
    count = 0
    for size in sizes:
        total += size
        if count and total > budget:
            break
        count += 1
    return count


def repeated_topic(topics: Iterable[bytes]) -> tuple[int, int] | None:
    """(later, first) positions of the first topic listed twice, or None."""
    seen: dict[bytes, int] = {}
    for i, topic in enumerate(topics):
        first = seen.setdefault(bytes(topic), i)
        if first != i:
            return i, first
    return None
