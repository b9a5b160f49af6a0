"""API limits as the use cases apply them (XIP-49 3.2.5): who is charged what, and when.

- publish: per payer address and per caller, envelopes and bytes; a whole request is
  admitted or refused before anything is stored. Allow-listed payers are not charged,
  deny-listed payers are refused;
- query: per caller, requests before answering and answer bytes after (a caller over its
  byte limit is refused its next answers);
- subscribe: per caller, new subscriptions, and concurrent subscriptions per client IP
  (counted across the node's processes when given shared SubscriptionSlots);
- misbehavior reports: per reporter.

A caller is its client IP, or its node id when it presented a valid node token: peers get
limits `peer_multiplier` times higher, in buckets of their own. A read-only node's token
(XIP-49 3.4: anyone can make one, so it proves a key, not a registered operator) is limited
as its client IP, in the IP's buckets.

A request that costs more than a bucket ever holds (1,000 envelopes against a burst of 400)
is refused at once as one that can never pass (core.limits.NeverFits), not admitted on a
full bucket nor told to retry."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from xnode.core.envelopes import ValidPayerEnvelope
from xnode.core.limits import (
    Charge,
    Kind,
    Limit,
    LimitExceeded,
    TokenBucket,
    never_fits,
    subject_of,
)
from xnode.usecases.ports import LimitBuckets, SubscriptionSlots


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the client IP from the gRPC peer string, and the node id its
    node token proved, if any."""

    ip: str
    node_id: int | None = None

    @property
    def subject(self) -> str:
        return f"node:{self.node_id}" if self.node_id is not None else f"ip:{self.ip}"

    @classmethod
    def from_peer(cls, peer: str | None, node_id: int | None = None) -> Caller:
        """`ipv4:1.2.3.4:5678`, `ipv6:[::1]:5678` or `unix:/path` -> the address alone."""
        if not peer:
            return cls("unknown", node_id)
        scheme, _, rest = peer.partition(":")
        if scheme == "ipv6" and rest.startswith("["):
            return cls(rest[1 : rest.index("]")], node_id)
        if scheme == "ipv4":
            return cls(rest.rpartition(":")[0], node_id)
        return cls(peer, node_id)


ANONYMOUS = Caller("unknown")


@dataclass(frozen=True)
class LimitPolicy:
    publish_envelopes: Limit
    publish_bytes: Limit
    publish_ip_envelopes: Limit
    publish_ip_bytes: Limit
    query_requests: Limit
    query_bytes: Limit
    subscribe_requests: Limit
    subscriptions_per_ip: int
    reports: Limit
    peer_multiplier: float = 10.0
    allowed_payers: frozenset[bytes] = field(default_factory=frozenset)
    denied_payers: frozenset[bytes] = field(default_factory=frozenset)
    enabled: bool = True


class LocalSlots:
    """Subscription slots counted in this process only (one-process tools and unit tests)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    async def hold(self, key: str, allowed: int) -> bool:
        if self._held.get(key, 0) >= allowed:
            return False
        self._held[key] = self._held.get(key, 0) + 1
        return True

    async def release(self, key: str) -> None:
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)


class LocalBuckets:
    """Token buckets in this process's memory (core.limits.TokenBucket), for a one-process
    service such as the gateway; the node's processes share theirs (store.limits)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._buckets: dict[str, TokenBucket] = {}

    def _bucket(self, charge: Charge, now_s: float) -> TokenBucket:
        bucket = self._buckets.get(charge.key)
        if bucket is None or bucket.limit != charge.limit:
            bucket = self._buckets[charge.key] = TokenBucket.full(charge.limit, now_s)
        return bucket

    async def take(self, charges: Sequence[Charge]) -> LimitExceeded | None:
        now = self._monotonic()
        taken: list[Charge] = []
        for charge in charges:
            wait_s = self._bucket(charge, now).take(charge.cost, now)
            if wait_s > 0:
                for done in taken:  # all or nothing: give back what this request took
                    self._buckets[done.key].tokens += min(done.cost, done.limit.capacity)
                return LimitExceeded(charge.kind, subject_of(charge.key), wait_s)
            taken.append(charge)
        return None

    async def spend(self, charge: Charge) -> None:
        now = self._monotonic()
        bucket = self._bucket(charge, now)
        bucket.refill(now)
        bucket.tokens -= charge.cost


# Callers and payers whose bucket names (and scaled limits) are kept, then forgotten at once.
MAX_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class _Buckets:
    """A publisher's two buckets: their names and limits, built once per caller or payer
    (most publishes carry one envelope: building them per request was a measurable share of
    a single publish's Python)."""

    envelopes: str
    bytes: str
    per_envelope: Limit
    per_byte: Limit

    def charges(self, count: int, size: int) -> tuple[Charge, Charge]:
        return (
            Charge(self.envelopes, Kind.ENVELOPES, count, self.per_envelope),
            Charge(self.bytes, Kind.BYTES, size, self.per_byte),
        )


class ApiLimits:
    def __init__(
        self,
        policy: LimitPolicy,
        buckets: LimitBuckets,
        slots: SubscriptionSlots | None = None,
    ) -> None:
        self.policy = policy
        self._buckets = buckets
        self._slots: SubscriptionSlots = slots if slots is not None else LocalSlots()
        self._publishers: dict[Caller | bytes, _Buckets] = {}

    def _multiplier(self, caller: Caller) -> float:
        return self.policy.peer_multiplier if caller.node_id is not None else 1.0

    def _for(self, caller: Caller, limit: Limit) -> Limit:
        multiplier = self._multiplier(caller)
        return limit.scaled(multiplier) if multiplier != 1.0 else limit

    async def _charge(self, charges: Sequence[Charge]) -> None:
        if not self.policy.enabled or not charges:
            return
        refused = never_fits(charges) or await self._buckets.take(charges)
        if refused is not None:
            raise refused

    def _publisher(self, who: Caller | bytes) -> _Buckets:
        """The publish buckets of a caller, or of a payer (its address)."""
        found = self._publishers.get(who)
        if found is None:
            if len(self._publishers) >= MAX_KEPT:
                self._publishers.clear()
            policy = self.policy
            if isinstance(who, bytes):
                name = f"publish:payer:0x{who.hex()}"
                count, size = policy.publish_envelopes, policy.publish_bytes
            else:
                name = f"publish:{who.subject}"
                count = self._for(who, policy.publish_ip_envelopes)
                size = self._for(who, policy.publish_ip_bytes)
            found = self._publishers[who] = _Buckets(
                f"{name}:envelopes", f"{name}:bytes", count, size
            )
        return found

    async def publish(self, caller: Caller, envelopes: Sequence[ValidPayerEnvelope]) -> None:
        """Charges the whole request, or raises LimitExceeded having stored nothing: the
        caller's buckets, then each payer's in address order."""
        policy = self.policy
        per_payer: dict[bytes, list[int]] = {}
        for envelope in envelopes:
            payer = envelope.payer_address
            if payer in policy.denied_payers:
                raise LimitExceeded(Kind.DENIED, f"payer 0x{payer.hex()}", 0)
            if payer not in policy.allowed_payers:
                count_size = per_payer.get(payer)
                if count_size is None:
                    count_size = per_payer[payer] = [0, 0]
                count_size[0] += 1
                count_size[1] += len(envelope.raw)
        if not per_payer or not policy.enabled:
            return
        count = sum(count for count, _ in per_payer.values())
        size = sum(size for _, size in per_payer.values())
        charges = [*self._publisher(caller).charges(count, size)]
        for payer, (count, size) in sorted(per_payer.items()):
            charges += self._publisher(payer).charges(count, size)
        await self._charge(charges)

    async def query(self, caller: Caller) -> None:
        who = caller.subject
        requests = self._for(caller, self.policy.query_requests)
        # Answers already sent past the byte limit refuse the next ones.
        answer_bytes = self._for(caller, self.policy.query_bytes)
        await self._charge(
            [
                Charge(f"query:{who}:requests", Kind.REQUESTS, 1, requests),
                Charge(f"query:{who}:bytes", Kind.BYTES, 1, answer_bytes),
            ]
        )

    async def answered(self, caller: Caller, size: int) -> None:
        """Charges an answer's bytes after it was built; never refuses it."""
        if not self.policy.enabled or size <= 1:
            return
        limit = self._for(caller, self.policy.query_bytes)
        await self._buckets.spend(Charge(f"query:{caller.subject}:bytes", Kind.BYTES, size, limit))

    @asynccontextmanager
    async def subscription(self, caller: Caller) -> AsyncIterator[None]:
        """Holds one of the caller's concurrent subscriptions while open."""
        if not self.policy.enabled:
            yield
            return
        key = f"subscriptions:{caller.ip if caller.node_id is None else caller.subject}"
        allowed = int(self.policy.subscriptions_per_ip * self._multiplier(caller))
        if not await self._slots.hold(key, allowed):
            raise LimitExceeded(Kind.SUBSCRIPTIONS, caller.subject, 1.0)
        try:
            yield
        finally:
            await self._slots.release(key)

    async def subscribe(self, caller: Caller) -> None:
        """Charges a new subscription; `subscription(caller)` then holds its place."""
        limit = self._for(caller, self.policy.subscribe_requests)
        await self._charge([Charge(f"subscribe:{caller.subject}", Kind.REQUESTS, 1, limit)])

    async def report(self, caller: Caller) -> None:
        limit = self._for(caller, self.policy.reports)
        await self._charge([Charge(f"report:{caller.subject}", Kind.REPORTS, 1, limit)])
