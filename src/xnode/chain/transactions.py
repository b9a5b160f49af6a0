"""Sending one account's transactions, signed locally (eth-account), in nonce order.

Publishes run concurrently, but an account's transactions must reach the chain with nonces
n, n+1, ...: a gap stalls every later one. So nonces are handed out and transactions
broadcast one at a time under a lock (a local round trip each); waiting for them to be mined
happens outside it. The next nonce is re-read from the chain whenever it may be wrong: at the
first send, after a failed broadcast, and when the chain says "nonce too low"."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog
from eth_account.signers.local import LocalAccount

from xnode.chain.abi import hex_int
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable

log = structlog.get_logger(__name__)

BROADCAST_ATTEMPTS = 5
FEE_CACHE_S = 1.0
# Gas above the estimate: storage costs differ between estimation and inclusion.
GAS_HEADROOM = 1.25

_ALREADY_SENT = ("already known", "known transaction", "already imported")
_NONCE_TAKEN = ("nonce too low", "replacement transaction underpriced", "nonce too small")


@dataclass(frozen=True, slots=True)
class SentTransaction:
    hash: bytes
    raw: bytes
    nonce: int


class TxSender:
    def __init__(self, rpc: ChainRpc, account: LocalAccount, chain_id: int) -> None:
        self._rpc = rpc
        self._account = account
        self._chain_id = chain_id
        self._lock = asyncio.Lock()
        self._nonce: int | None = None
        self._fees: tuple[float, int, int] | None = None

    @property
    def address(self) -> str:
        return str(self._account.address)

    def forget_nonce(self) -> None:
        """The chain may have dropped or replaced a transaction (e.g. a re-org): re-read."""
        self._nonce = None

    async def estimate_gas(self, to: str, data: bytes) -> int:
        """Raises ChainRpcError with the revert data when the call would revert."""
        request = {"from": self.address, "to": to, "data": "0x" + data.hex()}
        return int(hex_int(await self._rpc.call("eth_estimateGas", request)) * GAS_HEADROOM)

    async def send(self, to: str, data: bytes, gas: int) -> SentTransaction:
        async with self._lock:
            for _ in range(3):
                if self._nonce is None:
                    self._nonce = hex_int(
                        await self._rpc.call("eth_getTransactionCount", self.address, "pending")
                    )
                sent = self._sign(to, data, gas, self._nonce, await self._fee_caps())
                if await self._broadcast(sent):
                    self._nonce += 1
                    return sent
                self._nonce = None  # someone else used it: re-read and sign again
        raise ChainUnavailable(f"could not find a free nonce for {self.address}")

    async def rebroadcast(self, sent: SentTransaction) -> None:
        """Sends a transaction again (the chain lost it); a taken nonce resets the counter."""
        try:
            if not await self._broadcast(sent):
                self.forget_nonce()
        except (ChainUnavailable, ChainRpcError) as exc:
            log.warning(
                "chain_rebroadcast_failed", transaction="0x" + sent.hash.hex(), error=str(exc)
            )

    def _sign(
        self, to: str, data: bytes, gas: int, nonce: int, fees: tuple[int, int]
    ) -> SentTransaction:
        tx: dict[str, Any] = {
            "type": 2,
            "chainId": self._chain_id,
            "nonce": nonce,
            "to": to,
            "data": data,
            "gas": gas,
            "value": 0,
            "maxFeePerGas": fees[0],
            "maxPriorityFeePerGas": fees[1],
        }
        signed = self._account.sign_transaction(tx)
        return SentTransaction(bytes(signed.hash), bytes(signed.raw_transaction), nonce)

    async def _fee_caps(self) -> tuple[int, int]:
        """(maxFeePerGas, maxPriorityFeePerGas): twice the base fee leaves room to rise."""
        now = time.monotonic()
        if self._fees is None or now - self._fees[0] > FEE_CACHE_S:
            tip, block = await self._rpc.batch(
                [("eth_maxPriorityFeePerGas", ()), ("eth_getBlockByNumber", ("latest", False))]
            )
            priority = hex_int(tip)
            base = hex_int(block.get("baseFeePerGas", "0x0"))
            self._fees = (now, 2 * base + priority, priority)
        return self._fees[1], self._fees[2]

    async def _broadcast(self, sent: SentTransaction) -> bool:
        """True once the chain has the transaction; False when its nonce is taken."""
        delay = 0.1
        for attempt in range(BROADCAST_ATTEMPTS):
            try:
                await self._rpc.call("eth_sendRawTransaction", "0x" + sent.raw.hex())
                return True
            except ChainRpcError as exc:
                text = exc.message.lower()
                if any(m in text for m in _ALREADY_SENT):
                    return True
                if any(m in text for m in _NONCE_TAKEN):
                    # After a lost answer the nonce may be "taken" by this very transaction.
                    return attempt > 0 and await self._known(sent)
                raise
            except ChainUnavailable:
                if attempt == BROADCAST_ATTEMPTS - 1:
                    self._nonce = None  # it may or may not have arrived
                    raise
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    async def _known(self, sent: SentTransaction) -> bool:
        return bool(await self._rpc.call("eth_getTransactionByHash", "0x" + sent.hash.hex()))
