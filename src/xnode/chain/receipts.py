"""A transaction as the chain has it (eth_getTransactionReceipt): whether it succeeded and
the payload events the payload contracts emitted in it. What a BLOCKCHAIN_INCONSISTENCY
report is checked against (xnode.core.chain_evidence), by the node and by `xnode watchdog`."""

from __future__ import annotations

from collections.abc import Iterable

from xnode.chain.contracts import DeployedContracts
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable
from xnode.core.chain_evidence import ChainFacts, TxOutcome
from xnode.core.chain_logs import receipt_outcome
from xnode.core.errors import Reason, Rejected


class Transactions:
    def __init__(self, rpc: ChainRpc, contracts: DeployedContracts) -> None:
        self._rpc = rpc
        # Only the payload contracts' logs: anyone can deploy a contract emitting look-alikes.
        self._contracts = {
            a.lower() for a in (contracts.group_messages, contracts.identity_updates)
        }

    async def outcome(self, transaction_hash: bytes) -> TxOutcome | None:
        """None when the chain does not know the transaction (or has not mined it)."""
        receipt = await self._rpc.call("eth_getTransactionReceipt", "0x" + transaction_hash.hex())
        return receipt_outcome(receipt, self._contracts)

    async def facts(self, transaction_hashes: Iterable[bytes]) -> ChainFacts:
        """The outcomes of the transactions the chain knows; Rejected(UNAVAILABLE) when the
        chain cannot be asked now (the report can be sent again)."""
        found: dict[bytes, TxOutcome] = {}
        try:
            for tx in dict.fromkeys(transaction_hashes):
                outcome = await self.outcome(tx)
                if outcome is not None:
                    found[tx] = outcome
        except (ChainUnavailable, ChainRpcError) as exc:
            raise Rejected(Reason.UNAVAILABLE, f"cannot read the chain now: {exc}") from None
        return found
