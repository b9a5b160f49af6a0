"""A page of contract logs becomes chain payloads, or skipped events for malformed ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from xnode.chain import abi
from xnode.chain.rpc import Log
from xnode.core.chain_payloads import (
    ChainEvent,
    ChainPayload,
    MalformedPayload,
    SkippedEvent,
    build_chain_payload,
)
from xnode.core.crypto import SigningKey

log = structlog.get_logger(__name__)


def build_payloads(
    logs: Sequence[Log],
    timestamps: Mapping[int, int],
    key: SigningKey,
    contract_of: Mapping[str, str],
) -> tuple[list[ChainPayload], list[SkippedEvent]]:
    """`timestamps` fills in blocks whose logs lack `blockTimestamp`; `contract_of` names
    contracts by lower-case hex address (no 0x)."""
    payloads: list[ChainPayload] = []
    skipped: list[SkippedEvent] = []
    for entry in logs:
        event: ChainEvent | None = None
        try:
            event = abi.decode_payload_log(entry)
            stamp = event.block_timestamp
            if stamp is None:
                stamp = timestamps[event.block_number]
            payloads.append(build_chain_payload(event, stamp, key))
        except MalformedPayload as exc:
            skipped.append(_skipped(entry, event, str(exc), contract_of))
    return payloads, skipped


def _skipped(
    entry: Log, event: ChainEvent | None, reason: str, contract_of: Mapping[str, str]
) -> SkippedEvent:
    position = abi.LogPosition(entry)
    return SkippedEvent(
        contract=contract_of.get(str(entry.get("address", "")).lower()[2:], "unknown"),
        block_number=position.block_number,
        block_hash=position.block_hash,
        transaction_hash=position.transaction_hash,
        log_index=position.log_index,
        sequence_id=event.sequence_id if event else None,
        reason=reason,
        data=event.payload if event else None,
    )


def log_skipped(skipped: Sequence[SkippedEvent]) -> None:
    for s in skipped:
        log.warning(
            "chain_event_skipped",
            contract=s.contract,
            block=s.block_number,
            transaction="0x" + s.transaction_hash.hex(),
            log_index=s.log_index,
            sequence_id=s.sequence_id,
            reason=s.reason,
        )
