"""Smart contract wallet signatures (ERC-1271), asked of the app chain for identity updates
(XIP-46): `isValidSignature(hash, signature)` on the account, at the block the signature
names, must answer the magic value 0x1626ba7e.

Only the chain this node's payload RPC serves is asked; a signature from any other chain
cannot be verified here (the use case refuses it). ERC-6492 signatures of wallets not yet
deployed at that block (a factory call wrapped around the signature) are not simulated: such
a wallet answers nothing, and the signature is refused."""

from __future__ import annotations

from eth_abi.abi import encode

from xnode.chain.rpc import ChainRpc, ChainRpcError
from xnode.core.associations import WalletCheck

IS_VALID_SIGNATURE = bytes.fromhex("1626ba7e")  # also the magic value it returns


class Erc1271Wallets:
    """The use cases' SmartContractWallets port over the app chain's RPC."""

    def __init__(self, rpc: ChainRpc, chain_id: int) -> None:
        self._rpc = rpc
        self.chain_id = chain_id

    async def accepts(self, check: WalletCheck) -> bool:
        """Raises ChainUnavailable when the chain cannot be asked; a revert is a no."""
        data = IS_VALID_SIGNATURE + encode(["bytes32", "bytes"], [check.digest, check.signature])
        request = {"to": check.account, "data": "0x" + data.hex()}
        try:
            answer = await self._rpc.call("eth_call", request, hex(check.block_number))
        except ChainRpcError:
            return False
        raw = bytes.fromhex(str(answer or "0x").removeprefix("0x"))
        return len(raw) >= 4 and raw[:4] == IS_VALID_SIGNATURE
