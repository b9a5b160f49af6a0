"""API limits (XIP-49 3.2.5): token buckets per payer, client IP, peer node and reporter.

A bucket holds up to `capacity` tokens and gains `rate` tokens per second; a request costs
tokens (1 per request or envelope, or its bytes) and is refused when the bucket holds fewer.
The refusal says when to retry: the time the bucket takes to hold the cost.

The node's processes share each bucket through the database (store.limits); each process
leases tokens from it a slice at a time (`lease_size`) and spends them locally, so most
requests never touch the database, and the node as a whole never spends more than the
shared bucket granted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

# A process leases this share of a bucket's capacity at a time: small enough that several
# processes do not strand much of a bucket, large enough that leases are rare.
LEASE_SHARE = 0.1


class Kind(StrEnum):
    """What a limit counts; the `kind` label of xnode_limited_total."""

    REQUESTS = "requests"
    ENVELOPES = "envelopes"
    BYTES = "bytes"
    SUBSCRIPTIONS = "subscriptions"
    REPORTS = "reports"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # tokens per second
    capacity: float  # the burst

    @classmethod
    def per_second(cls, rate: float, burst_s: float) -> Limit:
        return cls(rate, max(rate * burst_s, 1.0))

    def scaled(self, factor: float) -> Limit:
        return Limit(self.rate * factor, self.capacity * factor)

    def wait_s(self, missing: float) -> float:
        """Seconds until the bucket has gained `missing` tokens."""
        return max(missing, 0.0) / self.rate


@dataclass(slots=True)
class TokenBucket:
    limit: Limit
    tokens: float
    updated_s: float

    @classmethod
    def full(cls, limit: Limit, now_s: float) -> TokenBucket:
        return cls(limit, limit.capacity, now_s)

    def refill(self, now_s: float) -> None:
        elapsed = max(0.0, now_s - self.updated_s)
        self.tokens = min(self.limit.capacity, self.tokens + elapsed * self.limit.rate)
        self.updated_s = max(self.updated_s, now_s)

    def take(self, cost: float, now_s: float) -> float:
        """Takes `cost` tokens and returns 0, or takes nothing and returns the seconds to
        wait. A cost above the capacity waits for a full bucket and then drains it."""
        self.refill(now_s)
        need = min(cost, self.limit.capacity)
        if self.tokens >= need:
            self.tokens -= need
            return 0.0
        return self.limit.wait_s(need - self.tokens)


def lease_size(limit: Limit, cost: float) -> float:
    """How many tokens a process asks the shared bucket for when it needs `cost`."""
    return max(min(cost, limit.capacity), limit.capacity * LEASE_SHARE)


@dataclass(frozen=True, slots=True)
class Charge:
    """One bucket a request draws from: `key` names the bucket, e.g. `publish:ip:1.2.3.4`."""

    key: str
    kind: Kind
    cost: float
    limit: Limit


def subject_of(key: str) -> str:
    """`publish:payer:0xab..:bytes` -> `payer 0xab..` for the refusal message; an IPv6
    address keeps its colons (`query:ip:2001:db8::1:requests` -> `ip 2001:db8::1`)."""
    _, _, rest = key.partition(":")
    subject, _, last = rest.rpartition(":")
    if not subject or last not in _MEASURES:
        subject = rest
    kind, _, who = subject.partition(":")
    return f"{kind} {who}" if who else kind


_MEASURES = frozenset(Kind)  # what a bucket key may end with


class LimitExceeded(Exception):
    """A request over a limit; `retry_after_s` says when it may pass."""

    def __init__(self, kind: Kind, subject: str, retry_after_s: float) -> None:
        self.kind = kind
        self.subject = subject
        self.retry_after_s = max(retry_after_s, 0.1)  # nothing refills faster than asked
        # Rounded up to the tenth shown: "retry in 0.0 s" for a 40 ms wait read as "now".
        shown = math.ceil(self.retry_after_s * 10) / 10
        super().__init__(
            f"{subject} is over its {kind.value} limit; retry in {shown:.1f} s"
            if kind is not Kind.DENIED
            else f"{subject} may not publish on this node"
        )

    @property
    def retry_after_whole_s(self) -> int:
        """The `retry-after` trailer: whole seconds, at least 1."""
        return max(1, int(-(-self.retry_after_s // 1)))


class NeverFits(LimitExceeded):
    """A request costing more than its bucket ever holds: refused whatever the bucket holds
    (admitting it on a full bucket let one request exceed the burst), and not to be retried
    as it is: the message says the most one request may cost, so the caller can split it."""

    def __init__(self, kind: Kind, subject: str, cost: float, capacity: float) -> None:
        LimitExceeded.__init__(self, kind, subject, 0)
        self.cost = cost
        self.capacity = capacity
        Exception.__init__(
            self,
            f"this request costs {cost:,.0f} {kind.value}, more than {subject}'s "
            f"{kind.value} limit ever holds ({int(capacity):,}): it can never pass as it is; "
            f"split it into requests of at most {int(capacity):,} {kind.value}",
        )


def never_fits(charges: Sequence[Charge]) -> NeverFits | None:
    """The first charge costing more than its bucket's capacity, as a refusal."""
    for charge in charges:
        if charge.cost > charge.limit.capacity:
            return NeverFits(
                charge.kind, subject_of(charge.key), charge.cost, charge.limit.capacity
            )
    return None
