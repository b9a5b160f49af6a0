"""Payload events in the JSON-RPC form nodes read them (eth_getLogs, receipts) decoded into
ChainEvents, and a transaction receipt into its TxOutcome. Pure: used by the chain adapter,
the council's job and anyone checking a BLOCKCHAIN_INCONSISTENCY claim."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from eth_abi.abi import decode
from eth_abi.exceptions import DecodingError

from xnode.core.chain_evidence import TxOutcome
from xnode.core.chain_payloads import ChainEvent, MalformedPayload
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR
from xnode.core.crypto import keccak256

MESSAGE_SENT: Final = keccak256(b"MessageSent(bytes16,bytes,uint64)")
IDENTITY_UPDATE_CREATED: Final = keccak256(b"IdentityUpdateCreated(bytes32,bytes,uint64)")
ORIGINATOR_OF_TOPIC: Final = {
    MESSAGE_SENT: GROUP_MESSAGES_ORIGINATOR,
    IDENTITY_UPDATE_CREATED: IDENTITY_UPDATES_ORIGINATOR,
}


def hex_bytes(value: object) -> bytes:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise ValueError(f"expected 0x-prefixed hex, got {value!r}")
    return bytes.fromhex(value[2:])


def hex_int(value: object) -> int:
    if not isinstance(value, str):
        raise ValueError(f"expected a hex quantity, got {value!r}")
    return int(value, 16)


class LogPosition:
    """Where a log sits on the chain; what a skipped event is recorded with."""

    __slots__ = ("block_hash", "block_number", "log_index", "transaction_hash")

    def __init__(self, log: Mapping[str, Any]) -> None:
        self.block_number = hex_int(log["blockNumber"])
        self.block_hash = hex_bytes(log["blockHash"])
        self.transaction_hash = hex_bytes(log["transactionHash"])
        self.log_index = hex_int(log["logIndex"])


def decode_payload_log(log: Mapping[str, Any]) -> ChainEvent:
    """A MessageSent or IdentityUpdateCreated log; raises MalformedPayload when its topics or
    data do not decode."""
    position = LogPosition(log)
    topics = [hex_bytes(t) for t in log["topics"]]
    if len(topics) != 3 or topics[0] not in ORIGINATOR_OF_TOPIC:
        raise MalformedPayload(f"unexpected log topics {[t.hex() for t in topics]}")
    originator = ORIGINATOR_OF_TOPIC[topics[0]]
    key = topics[1][:16] if originator == GROUP_MESSAGES_ORIGINATOR else topics[1]
    try:
        (payload,) = decode(["bytes"], hex_bytes(log["data"]))
    except (DecodingError, ValueError) as exc:
        raise MalformedPayload(f"log data does not decode as bytes: {exc}") from None
    timestamp = log.get("blockTimestamp")
    return ChainEvent(
        originator=originator,
        sequence_id=int.from_bytes(topics[2], "big"),
        key=key,
        payload=bytes(payload),
        block_number=position.block_number,
        block_hash=position.block_hash,
        transaction_hash=position.transaction_hash,
        log_index=position.log_index,
        block_timestamp=hex_int(timestamp) if timestamp is not None else None,
    )


def receipt_outcome(
    receipt: Mapping[str, Any] | None, payload_contracts: Collection[str]
) -> TxOutcome | None:
    """The outcome of a mined transaction from its receipt (None: not mined, or unknown);
    only logs of `payload_contracts` (lower-case 0x addresses) count: anyone can deploy a
    contract that emits look-alike events."""
    if not receipt:
        return None
    events: list[ChainEvent] = []
    for entry in receipt.get("logs", []):
        if str(entry.get("address", "")).lower() not in payload_contracts:
            continue
        try:
            events.append(decode_payload_log(entry))
        except (MalformedPayload, KeyError, ValueError):
            continue  # not a payload event (or one the indexer skips too)
    return TxOutcome(hex_int(receipt.get("status", "0x1")) == 1, tuple(events))
