"""Per-client limits on PublishClientEnvelopes (XIP-49 3.3.1: the gateway is the payer's first
line of defense): envelopes and bytes per second for each client, on the node's token-bucket
rules (core.limits) in this process's memory (usecases.limits.LocalBuckets). A request is
admitted whole or refused whole, before anything is signed or sent; one costing more than a
bucket holds is refused as one that never fits. The spending caps (envelopes and bytes a
day, per client) are buckets holding a day's amount, refilled over the day: kept in memory,
so a restart gives every client a full day again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xnode.core.limits import Charge, Kind, Limit, never_fits
from xnode.usecases.ports import LimitBuckets


@dataclass(frozen=True)
class ClientLimitPolicy:
    """Rates per client, and its spending caps per day (None: no cap)."""

    envelopes: Limit
    bytes: Limit
    enabled: bool = True
    daily_envelopes: Limit | None = None
    daily_bytes: Limit | None = None


class ClientLimits:
    def __init__(self, policy: ClientLimitPolicy, buckets: LimitBuckets) -> None:
        self.policy = policy
        self._buckets = buckets

    async def publish(self, client: str, raws: Sequence[bytes]) -> None:
        """Charges the request to `client`, or raises LimitExceeded having taken nothing."""
        if not self.policy.enabled or not raws:
            return
        name = f"gateway:client:{client}"
        count, size = len(raws), sum(map(len, raws))
        charges = [
            Charge(f"{name}:envelopes", Kind.ENVELOPES, count, self.policy.envelopes),
            Charge(f"{name}:bytes", Kind.BYTES, size, self.policy.bytes),
        ]
        # The spending caps: what the payer pays for on this client's behalf in a day.
        daily = f"gateway:daily-cap:{client}"
        if self.policy.daily_envelopes is not None:
            charges.append(
                Charge(f"{daily}:envelopes", Kind.ENVELOPES, count, self.policy.daily_envelopes)
            )
        if self.policy.daily_bytes is not None:
            charges.append(Charge(f"{daily}:bytes", Kind.BYTES, size, self.policy.daily_bytes))
        refused = never_fits(charges) or await self._buckets.take(charges)
        if refused is not None:
            raise refused
