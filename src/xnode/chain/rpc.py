"""The chain's JSON-RPC, as the indexer, registry reader and publisher need it.

Calls go through web3's AsyncHTTPProvider without its retries: callers decide how to retry.
Every transport failure (refused, reset, timeout, HTTP error, garbage) is ChainUnavailable;
an error answered by the node is ChainRpcError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
from web3 import AsyncHTTPProvider
from web3.types import RPCEndpoint

from xnode.chain.abi import hex_bytes, hex_int

Log = Mapping[str, Any]


class ChainUnavailable(ConnectionError):
    """The RPC endpoint could not be reached or did not answer in time."""


class ChainRpcError(RuntimeError):
    """The RPC endpoint answered with a JSON-RPC error."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        self.code = int(error.get("code", 0))
        self.message = str(error.get("message", ""))
        self.data = error.get("data")
        super().__init__(f"{method}: {self.message} (code {self.code})")


@dataclass(frozen=True, slots=True)
class BlockHeader:
    number: int
    hash: bytes
    parent_hash: bytes
    timestamp: int
    base_fee: int

    @classmethod
    def from_rpc(cls, block: Mapping[str, Any]) -> BlockHeader:
        return cls(
            number=hex_int(block["number"]),
            hash=hex_bytes(block["hash"]),
            parent_hash=hex_bytes(block["parentHash"]),
            timestamp=hex_int(block["timestamp"]),
            base_fee=hex_int(block.get("baseFeePerGas", "0x0")),
        )


_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError, ValueError)


def _quantity(value: int) -> str:
    return hex(value)


class ChainRpc:
    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self._provider = AsyncHTTPProvider(
            url,
            request_kwargs={"timeout": aiohttp.ClientTimeout(total=timeout_s)},
            exception_retry_configuration=None,
        )

    async def close(self) -> None:
        await self._provider.disconnect()

    async def call(self, method: str, *params: Any) -> Any:
        try:
            response = await self._provider.make_request(RPCEndpoint(method), list(params))
        except _TRANSPORT_ERRORS as exc:
            raise ChainUnavailable(f"{method} on {self.url}: {exc!r}") from exc
        return _result(method, cast(Mapping[str, Any], response))

    async def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several calls in one round trip; results in call order."""
        if not calls:
            return []
        requests = [(RPCEndpoint(m), list(p)) for m, p in calls]
        try:
            responses = await self._provider.make_batch_request(requests)
        except _TRANSPORT_ERRORS as exc:
            raise ChainUnavailable(f"batch on {self.url}: {exc!r}") from exc
        if not isinstance(responses, list):
            raise ChainRpcError("batch", cast(Mapping[str, Any], responses).get("error", {}))
        pairs = zip(calls, responses, strict=True)
        return [_result(m, cast(Mapping[str, Any], r)) for (m, _), r in pairs]

    # --- typed helpers -------------------------------------------------------------------

    async def chain_id(self) -> int:
        return hex_int(await self.call("eth_chainId"))

    async def block_number(self) -> int:
        return hex_int(await self.call("eth_blockNumber"))

    async def header(self, number: int | str) -> BlockHeader | None:
        tag = _quantity(number) if isinstance(number, int) else number
        block = await self.call("eth_getBlockByNumber", tag, False)
        return BlockHeader.from_rpc(block) if block else None

    async def headers(self, numbers: Sequence[int]) -> list[BlockHeader | None]:
        calls = [("eth_getBlockByNumber", (_quantity(n), False)) for n in numbers]
        blocks = await self.batch(calls)
        return [BlockHeader.from_rpc(b) if b else None for b in blocks]

    async def logs(
        self, first: int, last: int, addresses: Sequence[str], topics: Sequence[bytes]
    ) -> list[Log]:
        query = {
            "fromBlock": _quantity(first),
            "toBlock": _quantity(last),
            "address": list(addresses),
            "topics": [["0x" + t.hex() for t in topics]],
        }
        return cast(list[Log], await self.call("eth_getLogs", query))

    async def code(self, address: str) -> bytes:
        return hex_bytes(await self.call("eth_getCode", address, "latest"))

    async def eth_call(self, to: str, data: bytes, sender: str | None = None) -> bytes:
        request: dict[str, str] = {"to": to, "data": "0x" + data.hex()}
        if sender is not None:
            request["from"] = sender
        return hex_bytes(await self.call("eth_call", request, "latest"))


def _result(method: str, response: Mapping[str, Any]) -> Any:
    if "error" in response:
        raise ChainRpcError(method, cast(Mapping[str, Any], response["error"]))
    return response.get("result")


def revert_data(error: ChainRpcError) -> bytes:
    """The revert payload of a failed eth_call or eth_estimateGas, when the node sent one."""
    data = error.data
    if isinstance(data, Mapping):
        data = data.get("data")
    if isinstance(data, str) and data.startswith("0x"):
        try:
            return hex_bytes(data)
        except ValueError:
            return b""
    return b""
