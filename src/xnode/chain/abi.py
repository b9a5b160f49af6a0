"""The contracts' ABI as the node uses it: event topics, log decoding and call data.

Logs arrive as raw JSON-RPC dicts and are decoded with eth-abi directly: web3's contract
event machinery is an order of magnitude slower when backfilling thousands of events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from eth_abi.abi import decode, encode
from eth_abi.exceptions import DecodingError

from xnode.core.chain_payloads import ChainEvent, MalformedPayload
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR
from xnode.core.crypto import keccak256
from xnode.core.registry import NodeEntry


def _topic(signature: str) -> bytes:
    return keccak256(signature.encode())


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


MESSAGE_SENT: Final = _topic("MessageSent(bytes16,bytes,uint64)")
IDENTITY_UPDATE_CREATED: Final = _topic("IdentityUpdateCreated(bytes32,bytes,uint64)")
NODE_ADDED: Final = _topic("NodeAdded(uint32,address,bytes,string)")
NODE_STATUS_CHANGED: Final = _topic("NodeStatusChanged(uint32,bool)")

ORIGINATOR_OF_TOPIC: Final = {
    MESSAGE_SENT: GROUP_MESSAGES_ORIGINATOR,
    IDENTITY_UPDATE_CREATED: IDENTITY_UPDATES_ORIGINATOR,
}

ADD_MESSAGE: Final = _selector("addMessage(bytes16,bytes)")
ADD_IDENTITY_UPDATE: Final = _selector("addIdentityUpdate(bytes32,bytes)")
ALL_NODES: Final = _selector("allNodes()")
NODE_INCREMENT: Final = _selector("NODE_INCREMENT()")
INVALID_PAYLOAD_SIZE: Final = _selector("InvalidPayloadSize(uint256,uint256,uint256)")
ENFORCED_PAUSE: Final = _selector("EnforcedPause()")


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


def add_message_data(group_id: bytes, message: bytes) -> bytes:
    return ADD_MESSAGE + encode(["bytes16", "bytes"], [group_id, message])


def add_identity_update_data(inbox_id: bytes, update: bytes) -> bytes:
    return ADD_IDENTITY_UPDATE + encode(["bytes32", "bytes"], [inbox_id, update])


def decode_all_nodes_raw(data: bytes) -> list[tuple[int, bytes, str, bool]]:
    """The return value of NodeRegistry.allNodes(): (id, public key, address, enabled)."""
    try:
        (nodes,) = decode(["(uint32,bytes,string,bool)[]"], data)
    except DecodingError as exc:
        raise ValueError(f"allNodes() returned undecodable data: {exc}") from None
    return [(int(n[0]), bytes(n[1]), str(n[2]), bool(n[3])) for n in nodes]


def decode_all_nodes(data: bytes) -> list[NodeEntry]:
    """allNodes() as registry entries; raises ValueError on an invalid public key."""
    return [NodeEntry(*raw) for raw in decode_all_nodes_raw(data)]


def decode_uint(data: bytes) -> int:
    (value,) = decode(["uint256"], data)
    return int(value)
