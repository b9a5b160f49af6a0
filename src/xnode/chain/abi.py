"""The contracts' ABI as the node uses it: event topics, log decoding and call data.

Logs arrive as raw JSON-RPC dicts and are decoded with eth-abi directly: web3's contract
event machinery is an order of magnitude slower when backfilling thousands of events.
"""

from __future__ import annotations

from typing import Final

from eth_abi.abi import decode, encode
from eth_abi.exceptions import DecodingError

from xnode.core.chain_logs import (
    IDENTITY_UPDATE_CREATED,
    MESSAGE_SENT,
    ORIGINATOR_OF_TOPIC,
    LogPosition,
    decode_payload_log,
    hex_bytes,
    hex_int,
)
from xnode.core.crypto import keccak256
from xnode.core.registry import NodeEntry

# Log decoding lives in xnode.core.chain_logs (the council's job checks chain claims too).
__all__ = [
    "IDENTITY_UPDATE_CREATED",
    "MESSAGE_SENT",
    "ORIGINATOR_OF_TOPIC",
    "LogPosition",
    "decode_payload_log",
    "hex_bytes",
    "hex_int",
]


def _topic(signature: str) -> bytes:
    return keccak256(signature.encode())


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


NODE_ADDED: Final = _topic("NodeAdded(uint32,address,bytes,string)")
NODE_STATUS_CHANGED: Final = _topic("NodeStatusChanged(uint32,bool)")

ADD_MESSAGE: Final = _selector("addMessage(bytes16,bytes)")
ADD_IDENTITY_UPDATE: Final = _selector("addIdentityUpdate(bytes32,bytes)")
ALL_NODES: Final = _selector("allNodes()")
NODE_INCREMENT: Final = _selector("NODE_INCREMENT()")
INVALID_PAYLOAD_SIZE: Final = _selector("InvalidPayloadSize(uint256,uint256,uint256)")
ENFORCED_PAUSE: Final = _selector("EnforcedPause()")


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
