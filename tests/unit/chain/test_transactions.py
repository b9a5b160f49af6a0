"""Nonce management of the chain publisher's account, against a scripted RPC."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import rlp
from eth_account import Account

from xnode.chain.rpc import ChainRpcError, ChainUnavailable
from xnode.chain.transactions import TxSender

ACCOUNT = Account.from_key("0x" + "01" * 32)
TO = "0x" + "22" * 20


class FakeRpc:
    """Answers like a chain that holds `pending` transactions of one account."""

    url = "fake://"

    def __init__(self, start_nonce: int = 5) -> None:
        self.chain_nonce = start_nonce
        self.received: list[int] = []
        self.fail_next: list[Exception] = []

    async def call(self, method: str, *params: Any) -> Any:
        await asyncio.sleep(0)  # let concurrent senders interleave
        if method == "eth_getTransactionCount":
            return hex(self.chain_nonce)
        if method == "eth_sendRawTransaction":
            if self.fail_next:
                raise self.fail_next.pop(0)
            nonce = _nonce_of(params[0])
            if nonce < self.chain_nonce:
                raise ChainRpcError(method, {"code": -32000, "message": "nonce too low"})
            assert nonce == self.chain_nonce, f"gap: got nonce {nonce}, chain at {self.chain_nonce}"
            self.chain_nonce += 1
            self.received.append(nonce)
            return "0x" + "00" * 32
        if method == "eth_getTransactionByHash":
            return None
        raise AssertionError(method)

    async def batch(self, calls: list[tuple[str, Any]]) -> list[Any]:
        return ["0x3b9aca00", {"baseFeePerGas": "0x7"}]


def _nonce_of(raw_hex: str) -> int:
    raw = bytes.fromhex(raw_hex[2:])
    fields = rlp.decode(raw[1:])  # type 2: chain id, nonce, ...
    return int.from_bytes(fields[1], "big")


async def test_concurrent_sends_get_consecutive_nonces_in_order() -> None:
    rpc = FakeRpc()
    sender = TxSender(rpc, ACCOUNT, 31337)  # type: ignore[arg-type]
    sent = await asyncio.gather(*(sender.send(TO, bytes([i]), 100_000) for i in range(30)))
    assert sorted(s.nonce for s in sent) == list(range(5, 35))
    assert rpc.received == list(range(5, 35))  # broadcast in nonce order


async def test_transport_failures_are_retried_and_a_taken_nonce_is_re_read() -> None:
    rpc = FakeRpc()
    sender = TxSender(rpc, ACCOUNT, 31337)  # type: ignore[arg-type]
    await sender.send(TO, b"a", 100_000)
    rpc.fail_next = [ChainUnavailable("reset"), ChainUnavailable("reset")]
    assert (await sender.send(TO, b"b", 100_000)).nonce == 6
    rpc.chain_nonce = 10  # another process used the account meanwhile
    assert (await sender.send(TO, b"c", 100_000)).nonce == 10


async def test_an_unreachable_chain_raises_and_the_nonce_is_re_read_next_time() -> None:
    rpc = FakeRpc()
    sender = TxSender(rpc, ACCOUNT, 31337)  # type: ignore[arg-type]
    rpc.fail_next = [ChainUnavailable("down")] * 5
    with pytest.raises(ChainUnavailable):
        await sender.send(TO, b"a", 100_000)
    assert (await sender.send(TO, b"b", 100_000)).nonce == 5
