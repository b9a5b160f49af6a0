"""Publishes MLS commits and identity updates to their contract (XIP-49 3.3.4 step 4).

The payer's signed PayerEnvelope goes into the contract call unchanged (the contracts take
opaque bytes), so the envelope the indexer builds from the mined event carries exactly what
the payer signed: signature, target originator and retention (XIP-49 3.3.4.1). The publish is
answered with that envelope once the indexer has stored it; the gas its transaction cost is
recorded for the payer (payer_usage.gas_wei).

Refusals: UNAVAILABLE (the XIP's 503) while the chain is unreachable or the index is behind
its head (3.2.6); ABORTED when depends_on does not name the topic's latest chain payload
(3.3.4 rule 2.4). Rule 2.4 also holds for the group messages originated here (application
messages, proposals) that name a chain payload: `check_originated`. Publishes on one topic
are serialized from that check until indexed, so two commits racing on one group in this
process cannot both pass it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from weakref import WeakValueDictionary

import structlog

from xnode.chain import abi
from xnode.chain.contracts import DeployedContracts
from xnode.chain.index_status import IndexStatus
from xnode.chain.ports import ChainPayloadLookup, GasLedger
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable, revert_data
from xnode.chain.transactions import SentTransaction, TxSender
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR
from xnode.core.cursors import Cursor
from xnode.core.envelopes import ValidPayerEnvelope, parse_originator_envelope
from xnode.core.errors import Reason, Rejected

log = structlog.get_logger(__name__)

MAX_PAYLOAD_BYTES = 256 * 1024  # the contracts' MAX_PAYLOAD_SIZE
RECEIPT_CHECK_S = 1.0
# An application message made this many commits behind its group is still read by members:
# libxmtp keeps 3 past epochs (XIP-49 4.2.1: beyond 3, messages are unreadable).
MAX_PAST_COMMITS = 3
AVAILABLE_GRACE_S = 2.0


class _NoLedger:
    async def record_gas(
        self, payer_address: bytes, originator: int, originator_ns: int, wei: int
    ) -> None:
        return None


_NO_LEDGER = _NoLedger()


@dataclass(frozen=True, slots=True)
class _Call:
    originator: int
    topic: bytes
    to: str
    data: bytes


def chain_originator(envelope: ValidPayerEnvelope) -> int:
    if envelope.payload == "identity_update":
        return IDENTITY_UPDATES_ORIGINATOR
    return GROUP_MESSAGES_ORIGINATOR


def needs_chain(envelope: ValidPayerEnvelope) -> bool:
    """Identity updates and MLS commits need the chain's total order (XIP-49 2.1)."""
    return envelope.needs_chain


def chain_dependency(envelope: ValidPayerEnvelope) -> int:
    """The commit an originated group message says it follows (0: none, e.g. the official
    client's messages before the group's first commit is on the chain)."""
    if envelope.payload != "group_message" or envelope.is_commit:
        return 0
    return envelope.depends_on.get(GROUP_MESSAGES_ORIGINATOR, 0)


class ChainPublisher:
    def __init__(
        self,
        rpc: ChainRpc,
        store: ChainPayloadLookup,
        index: IndexStatus,
        contracts: DeployedContracts,
        sender: TxSender,
        node_cursor: Callable[[], Cursor],
        timeout_s: float = 30.0,
        usage: GasLedger | None = None,
    ) -> None:
        self._usage: GasLedger = usage or _NO_LEDGER
        self._rpc = rpc
        self._store = store
        self._index = index
        self._contracts = contracts
        self._sender = sender
        self._node_cursor = node_cursor
        self._timeout_s = timeout_s
        self._topic_locks: WeakValueDictionary[bytes, asyncio.Lock] = WeakValueDictionary()

    def handles(self, envelope: ValidPayerEnvelope) -> bool:
        return needs_chain(envelope)

    async def publish(self, envelopes: Sequence[ValidPayerEnvelope]) -> list[bytes]:
        # A poll or two of grace: right after start-up, or a block the indexer is about to see.
        reason = await self._index.wait_available(AVAILABLE_GRACE_S)
        if reason is not None:
            raise Rejected(Reason.UNAVAILABLE, f"cannot publish to the chain now: {reason}")
        calls = [self._call(i, e) for i, e in enumerate(envelopes)]
        async with self._locked({c.topic for c in calls}):
            await self._check_depends_on(envelopes, calls)
            try:
                indexed = await asyncio.wait_for(self._send_all(calls), self._timeout_s)
            except TimeoutError:
                raise Rejected(
                    Reason.UNAVAILABLE,
                    f"the chain did not mine and index the payload within {self._timeout_s:g} s;"
                    " it may still appear on its topic",
                ) from None
            except ChainUnavailable as exc:
                log.warning("chain_publish_unavailable", error=str(exc))
                raise Rejected(Reason.UNAVAILABLE, f"the chain is unreachable: {exc}") from None
        await self._record_gas(envelopes, calls, indexed)
        return [raw for _, raw in indexed]

    async def check_originated(self, envelopes: Sequence[ValidPayerEnvelope]) -> None:
        """XIP-49 3.3.4 rule 2.4 for group messages this node originates, as far as the
        official client allows: one that names a chain payload more than MAX_PAST_COMMITS
        commits behind the topic's latest was made for an epoch its group no longer reads
        (ABORTED, with the node's cursor). libxmtp 1.10.0 sends a message right after its own
        commit still naming the one before, so a dependency that is merely not the latest is
        accepted. An empty dependency is not a stale one. When the index is behind, or has
        not reached the named payload, the ones that name a chain payload are UNAVAILABLE."""
        named = [(i, e, chain_dependency(e)) for i, e in enumerate(envelopes)]
        named = [(i, e, claimed) for i, e, claimed in named if claimed]
        if not named:
            return
        reason = await self._index.wait_available(AVAILABLE_GRACE_S)
        if reason is not None:
            raise Rejected(
                Reason.UNAVAILABLE, f"cannot check depends_on against the chain now: {reason}"
            ).at(named[0][0])
        keys = [(e.topic.raw, GROUP_MESSAGES_ORIGINATOR, claimed) for _, e, claimed in named]
        later = await self._store.count_after(keys)
        for (i, envelope, claimed), behind in zip(named, later, strict=True):
            if claimed > self._node_cursor().get(GROUP_MESSAGES_ORIGINATOR, 0):
                raise Rejected(
                    Reason.UNAVAILABLE,
                    f"depends_on[{GROUP_MESSAGES_ORIGINATOR}] is {claimed}, which this node's "
                    "chain index has not reached yet; retry",
                ).at(i)
            if behind > MAX_PAST_COMMITS:
                raise Rejected(
                    Reason.CHAIN_DEPENDS_ON_MISMATCH,
                    f"depends_on[{GROUP_MESSAGES_ORIGINATOR}] is {claimed}, {behind} commits "
                    f"behind the latest on topic {envelope.topic} (at most {MAX_PAST_COMMITS}"
                    " are still read by the group)",
                    cursor=self._node_cursor(),
                ).at(i)

    # --- building and checking -----------------------------------------------------------

    def _call(self, index: int, envelope: ValidPayerEnvelope) -> _Call:
        payload = envelope.raw
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise Rejected(
                Reason.INVALID_PAYLOAD,
                f"chain payloads are at most {MAX_PAYLOAD_BYTES} bytes, this one is {len(payload)}",
            ).at(index)
        key = envelope.topic.identifier
        originator = chain_originator(envelope)
        size = 32 if originator == IDENTITY_UPDATES_ORIGINATOR else 16
        if len(key) != size:
            raise Rejected(
                Reason.INVALID_PAYLOAD,
                f"a chain payload's topic identifier must be {size} bytes, got {len(key)}",
            ).at(index)
        if originator == IDENTITY_UPDATES_ORIGINATOR:
            to, data = self._contracts.identity_updates, abi.add_identity_update_data(key, payload)
        else:
            to, data = self._contracts.group_messages, abi.add_message_data(key, payload)
        return _Call(originator, envelope.topic.raw, to, data)

    @contextlib.asynccontextmanager
    async def _locked(self, topics: set[bytes]) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for topic in sorted(topics):  # one order everywhere: no deadlock
                lock = self._topic_locks.get(topic)
                if lock is None:
                    lock = self._topic_locks[topic] = asyncio.Lock()
                await stack.enter_async_context(lock)
            yield

    async def _check_depends_on(
        self, envelopes: Sequence[ValidPayerEnvelope], calls: Sequence[_Call]
    ) -> None:
        """XIP-49 3.3.4 rule 2.4: depends_on names the latest chain payload on the topic.

        A commit must: it is valid for one MLS epoch only, and the check keeps a stale one off
        the chain. An identity update is held to it only when it names one: the XIP-46 inbox
        log is validated by readers in chain order, so an update that names none cannot fork
        it, and the official client (libxmtp 1.10.0) never names one for identity updates."""
        latest = await self._store.latest_sequence_ids([(c.topic, c.originator) for c in calls])
        for i, (envelope, call, top) in enumerate(zip(envelopes, calls, latest, strict=True)):
            claimed = envelope.depends_on.get(call.originator, 0)
            if call.originator == IDENTITY_UPDATES_ORIGINATOR and not claimed:
                continue
            if claimed != top:
                raise Rejected(
                    Reason.CHAIN_DEPENDS_ON_MISMATCH,
                    f"depends_on[{call.originator}] is {claimed}, but the latest chain payload "
                    f"on topic {envelope.topic} is {call.originator}:{top}",
                    cursor=self._node_cursor(),
                ).at(i)

    # --- sending and waiting -------------------------------------------------------------

    async def _send_all(self, calls: Sequence[_Call]) -> list[tuple[SentTransaction, bytes]]:
        gas = await asyncio.gather(*(self._estimate(i, c) for i, c in enumerate(calls)))
        sent = [await self._sender.send(c.to, c.data, g) for c, g in zip(calls, gas, strict=True)]
        with self._index.awaited():
            raws = await asyncio.gather(*(self._indexed(tx) for tx in sent))
        return list(zip(sent, raws, strict=True))

    async def _record_gas(
        self,
        envelopes: Sequence[ValidPayerEnvelope],
        calls: Sequence[_Call],
        indexed: Sequence[tuple[SentTransaction, bytes]],
    ) -> None:
        """What each payer's transaction cost this node (gas used x effective price). The
        publish has succeeded: a receipt that cannot be read now is logged, not an error."""
        for envelope, call, (tx, raw) in zip(envelopes, calls, indexed, strict=True):
            tx_hex = "0x" + tx.hash.hex()
            try:
                receipt = await self._rpc.call("eth_getTransactionReceipt", tx_hex)
            except (ChainUnavailable, ChainRpcError) as exc:
                log.warning("chain_gas_unrecorded", transaction=tx_hex, error=str(exc))
                continue
            if not receipt:
                continue
            price = receipt.get("effectiveGasPrice") or receipt.get("gasPrice") or "0x0"
            wei = abi.hex_int(receipt["gasUsed"]) * abi.hex_int(price)
            originator_ns = parse_originator_envelope(raw).originator_ns
            await self._usage.record_gas(
                envelope.payer_address, call.originator, originator_ns, wei
            )

    async def _estimate(self, index: int, call: _Call) -> int:
        try:
            return await self._sender.estimate_gas(call.to, call.data)
        except ChainRpcError as exc:
            selector = revert_data(exc)[:4]
            if selector == abi.ENFORCED_PAUSE:
                raise Rejected(Reason.UNAVAILABLE, "the contract is paused; retry later").at(
                    index
                ) from None
            if selector == abi.INVALID_PAYLOAD_SIZE:
                raise Rejected(Reason.INVALID_PAYLOAD, "the contract refuses the payload size").at(
                    index
                ) from None
            raise Rejected(Reason.UNAVAILABLE, f"the chain refuses the transaction: {exc}").at(
                index
            ) from None

    async def _indexed(self, tx: SentTransaction) -> bytes:
        """The envelope the indexer stored for `tx`; meanwhile watches the transaction."""
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while True:
            found = await self._store.envelopes_by_transaction([tx.hash])
            if found:
                return found[min(found)]
            if loop.time() - checked >= RECEIPT_CHECK_S:
                checked = loop.time()
                await self._watch(tx)
            await self._index.wait_progress(0.5)

    async def _watch(self, tx: SentTransaction) -> None:
        """Fails on a reverted transaction; sends again one the chain lost."""
        tx_hex = "0x" + tx.hash.hex()
        try:
            receipt = await self._rpc.call("eth_getTransactionReceipt", tx_hex)
            if receipt is None and not await self._rpc.call("eth_getTransactionByHash", tx_hex):
                log.warning("chain_transaction_lost", transaction=tx_hex, nonce=tx.nonce)
                await self._sender.rebroadcast(tx)
        except (ChainUnavailable, ChainRpcError):
            return  # the indexer reports outages; keep waiting until the deadline
        if receipt is not None and abi.hex_int(receipt.get("status", "0x1")) == 0:
            raise Rejected(Reason.UNAVAILABLE, f"transaction {tx_hex} reverted on the chain")
