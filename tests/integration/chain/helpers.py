"""Building chain-bound payloads (MLS commits, identity updates) and checking what comes back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from eth_abi.abi import decode
from eth_account.signers.local import LocalAccount

from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.chain import abi
from xnode.chain.anvil import rpc_call
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey, blockchain_proof_digest, recover_public_key
from xnode.core.cursors import Cursor
from xnode.core.envelopes import ReceivedEnvelope, build_payer_envelope, parse_originator_envelope
from xnode.core.envelopes import cursor_to_proto as cursor_proto
from xnode.core.mls import ContentType, WireFormat, encode_framing
from xnode.core.topics import Topic, TopicKind

T = TypeVar("T")


def commit(
    group_id: bytes, epoch: int = 1, body: bytes = b"commit", private: bool = False
) -> bytes:
    wire = WireFormat.PRIVATE_MESSAGE if private else WireFormat.PUBLIC_MESSAGE
    return encode_framing(wire, group_id, epoch, ContentType.COMMIT, body)


def application(group_id: bytes, epoch: int = 1, body: bytes = b"hello") -> bytes:
    return encode_framing(
        WireFormat.PRIVATE_MESSAGE, group_id, epoch, ContentType.APPLICATION, body
    )


def group_topic(group_id: bytes) -> bytes:
    return Topic(TopicKind.GROUP_MESSAGES, group_id).raw


def inbox_topic(inbox_id: bytes) -> bytes:
    return Topic(TopicKind.IDENTITY_UPDATES, inbox_id).raw


def create_inbox(address: str) -> association_pb2.IdentityAction:
    return association_pb2.IdentityAction(
        create_inbox=association_pb2.CreateInbox(
            initial_identifier=address,
            nonce=1,
            initial_identifier_kind=association_pb2.IDENTIFIER_KIND_ETHEREUM,
        )
    )


def add_address(address: str) -> association_pb2.IdentityAction:
    return association_pb2.IdentityAction(
        add=association_pb2.AddAssociation(
            new_member_identifier=association_pb2.MemberIdentifier(ethereum_address=address)
        )
    )


def revoke_address(address: str) -> association_pb2.IdentityAction:
    return association_pb2.IdentityAction(
        revoke=association_pb2.RevokeAssociation(
            member_to_revoke=association_pb2.MemberIdentifier(ethereum_address=address)
        )
    )


def identity_update_envelope(
    inbox_id: bytes,
    actions: Sequence[association_pb2.IdentityAction],
    depends_on: Cursor | None = None,
) -> envelopes_pb2.ClientEnvelope:
    return envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(
            target_topic=inbox_topic(inbox_id), depends_on=cursor_proto(depends_on or Cursor())
        ),
        identity_update=association_pb2.IdentityUpdate(
            actions=actions, client_timestamp_ns=time.time_ns(), inbox_id=inbox_id.hex()
        ),
    )


def signed_update_envelope(
    update: association_pb2.IdentityUpdate, depends_on: Cursor | None = None
) -> envelopes_pb2.ClientEnvelope:
    """A client envelope for a (signed) identity update, on its inbox's topic."""
    return envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(
            target_topic=inbox_topic(bytes.fromhex(update.inbox_id)),
            depends_on=cursor_proto(depends_on or Cursor()),
        ),
        identity_update=update,
    )


def commit_envelope(
    group_id: bytes, epoch: int = 1, depends_on: Cursor | None = None, body: bytes = b"commit"
) -> envelopes_pb2.ClientEnvelope:
    return group_message_envelope(group_id, commit(group_id, epoch, body), depends_on)


async def publish(
    client: NodeClient,
    node_id: int,
    envelopes: Sequence[envelopes_pb2.ClientEnvelope],
    payer: SigningKey | None = None,
) -> list[envelopes_pb2.OriginatorEnvelope]:
    key = payer or SigningKey.generate()
    return await client.publish([build_payer_envelope(e, key, node_id) for e in envelopes])


def chain_proof(envelope: envelopes_pb2.OriginatorEnvelope, node_key: bytes) -> ReceivedEnvelope:
    """Parses a chain envelope and checks its BlockchainProof was signed by `node_key`."""
    assert envelope.WhichOneof("proof") == "blockchain_proof"
    proof = envelope.blockchain_proof
    assert len(proof.transaction_hash) == 32
    digest = blockchain_proof_digest(envelope.unsigned_originator_envelope, proof.transaction_hash)
    assert recover_public_key(proof.node_signature.bytes, digest) == node_key
    parsed = parse_originator_envelope(envelope.SerializeToString())
    assert parsed.expiry == 0
    return parsed


def client_bytes(envelope: envelopes_pb2.OriginatorEnvelope) -> bytes:
    return parse_originator_envelope(
        envelope.SerializeToString()
    ).payer_envelope.unsigned_client_envelope


def canonical_payloads(url: str, contract: str, topic0: bytes) -> dict[int, tuple[bytes, bytes]]:
    """{sequence id: (payload bytes, tx hash)} for every event on the chain right now."""
    logs: Any = rpc_call(
        url,
        "eth_getLogs",
        [
            {
                "fromBlock": "0x0",
                "toBlock": "latest",
                "address": contract,
                "topics": ["0x" + topic0.hex()],
            }
        ],
    )
    out = {}
    for entry in logs:
        seq = int(entry["topics"][2], 16)
        (payload,) = decode(["bytes"], bytes.fromhex(entry["data"][2:]))
        out[seq] = (bytes(payload), bytes.fromhex(entry["transactionHash"][2:]))
    return out


def send_raw_event(
    url: str, account: LocalAccount, to: str, data: bytes, chain_id: int = 31337
) -> bytes:
    """A contract call straight to the chain (not through a node); returns the tx hash."""
    nonce = int(str(rpc_call(url, "eth_getTransactionCount", [account.address, "pending"])), 16)
    tx: dict[str, Any] = {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "to": to,
        "data": data,
        "gas": 1_000_000,
        "value": 0,
        "maxFeePerGas": 10**11,
        "maxPriorityFeePerGas": 10**9,
    }
    signed = account.sign_transaction(tx)
    rpc_call(url, "eth_sendRawTransaction", ["0x" + bytes(signed.raw_transaction).hex()])
    return bytes(signed.hash)


def add_message_call(group_id: bytes, payload: bytes) -> bytes:
    return abi.add_message_data(group_id, payload)


def add_identity_update_call(inbox_id: bytes, payload: bytes) -> bytes:
    return abi.add_identity_update_data(inbox_id, payload)


class TcpProxy:
    """A TCP proxy in front of the chain RPC that tests can break: `cut()` drops every
    connection and refuses new ones, `hang()` accepts but never answers (timeouts),
    `restore()` forwards again."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self.mode = "up"
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._drop_all()
        if self._server is not None:
            self._server.close()

    def cut(self) -> None:
        self.mode = "down"
        self._drop_all()

    def hang(self) -> None:
        self.mode = "hang"
        self._drop_all()

    def restore(self) -> None:
        self.mode = "up"

    def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "down":
            writer.close()
            return
        self._writers.add(writer)
        if self.mode == "hang":
            while await reader.read(65536):
                pass
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._writers.add(up_writer)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.mode != "up":
                    break
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def stored_chain_payloads(
    client: NodeClient, originator: int
) -> dict[int, tuple[bytes, bytes]]:
    """{sequence id: (client envelope bytes, tx hash)} as the node serves originator 0 or 1."""
    found = await client.query(originators=[originator], limit=1000)
    out = {}
    for envelope in found:
        parsed = parse_originator_envelope(envelope.SerializeToString())
        out[parsed.sequence_id] = (
            parsed.payer_envelope.unsigned_client_envelope,
            envelope.blockchain_proof.transaction_hash,
        )
    return out


def message_payload(group_id: bytes, text: str) -> bytes:
    """A serialized ClientEnvelope carrying a commit: what a node's publisher puts on chain."""
    return commit_envelope(group_id, body=text.encode()).SerializeToString()
