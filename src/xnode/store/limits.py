"""The API limits' token buckets, shared by the node's processes (usecases.ports.LimitBuckets).

Each bucket is a row of the UNLOGGED table `limit_buckets`, refilled by the database's clock.
A process leases tokens from a row a slice at a time (core.limits.lease_size) and spends them
from memory, so the hot path does not touch the database; a refused key is refused from
memory until the time its bucket needs to refill, so a flood does not either."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import asyncpg

from xnode.core.limits import Charge, Limit, LimitExceeded, lease_size, subject_of
from xnode.store.errors import driver_errors_translated

_NOW = "extract(epoch FROM statement_timestamp())::float8"
_REFILLED = f"LEAST($2::float8, b.tokens + $3::float8 * GREATEST(0, {_NOW} - b.updated_s))"
_GRANT = "CASE WHEN {available} >= $4::float8 THEN LEAST({available}, $5::float8) ELSE 0 END"

# One statement, one row lock: refill by the elapsed time, then grant the lease (all or none
# of what is needed; the grant is kept in the row so the statement can return it). Returns
# the tokens left and the grant.
_LEASE = f"""
INSERT INTO limit_buckets AS b (key, tokens, updated_s, granted)
VALUES ($1, $2::float8 - {_GRANT.format(available="$2::float8")}, {_NOW},
        {_GRANT.format(available="$2::float8")})
ON CONFLICT (key) DO UPDATE SET
    tokens = {_REFILLED} - {_GRANT.format(available=_REFILLED)},
    granted = {_GRANT.format(available=_REFILLED)},
    updated_s = GREATEST(b.updated_s, {_NOW})
RETURNING tokens, granted
"""


@driver_errors_translated
class SharedBuckets:
    def __init__(self, pool: asyncpg.Pool, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._monotonic = monotonic
        self._leased: dict[str, float] = {}  # tokens this process holds per bucket
        self._blocked: dict[str, float] = {}  # refused until (monotonic seconds)
        self._locks: dict[str, asyncio.Lock] = {}
        self.leases = 0  # database round trips, for the benchmark

    async def take(self, charges: Sequence[Charge]) -> LimitExceeded | None:
        for i, charge in enumerate(charges):
            # Tokens already leased are spent here, without a coroutine (the common case).
            if self._spend_held(charge):
                continue
            refused = await self._take(charge)
            if refused is not None:
                for done in charges[:i]:  # all or nothing: give back what this request took
                    self._leased[done.key] += done.cost
                return refused
        return None

    async def spend(self, charge: Charge) -> None:
        self._leased[charge.key] = self._leased.get(charge.key, 0.0) - charge.cost

    def _spend_held(self, charge: Charge) -> bool:
        held = self._leased.get(charge.key, 0.0)
        if held >= charge.cost:
            self._leased[charge.key] = held - charge.cost
            return True
        return False

    async def _take(self, charge: Charge) -> LimitExceeded | None:
        if self._spend_held(charge):
            return None
        # One lease per bucket at a time in this process: concurrent requests wait for it
        # rather than each draining the shared bucket.
        lock = self._locks.setdefault(charge.key, asyncio.Lock())
        async with lock:
            if self._spend_held(charge):
                return None
            now = self._monotonic()
            until = self._blocked.get(charge.key)
            if until is not None:
                if now < until:
                    return LimitExceeded(charge.kind, subject_of(charge.key), until - now)
                del self._blocked[charge.key]
            held = self._leased.get(charge.key, 0.0)
            need = min(charge.cost - held, charge.limit.capacity)
            granted, left = await self._lease(charge.key, charge.limit, need)
            if granted < need:
                wait = charge.limit.wait_s(need - left)
                self._blocked[charge.key] = now + wait
                return LimitExceeded(charge.kind, subject_of(charge.key), wait)
            # A cost above the capacity is admitted on a full bucket (and drains it).
            after = self._leased.get(charge.key, 0.0) + granted - charge.cost
            self._leased[charge.key] = max(after, 0.0) if charge.cost > held + granted else after
        return None

    async def _lease(self, key: str, limit: Limit, need: float) -> tuple[float, float]:
        """(granted, tokens left in the shared bucket)."""
        want = lease_size(limit, need)
        self.leases += 1
        row = await self._pool.fetchrow(_LEASE, key, limit.capacity, limit.rate, need, want)
        assert row is not None
        return float(row[1]), float(row[0])
