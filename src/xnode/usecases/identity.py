"""Identity updates validated as XIP-46 says (XIP-49 3.3.3, 3.3.4 rule 3): the association
state of an inbox is replayed from its stored identity updates in chain order
(xnode.core.associations); a published update must apply to it, or it is refused with
INVALID_ARGUMENT before anything goes to the chain. GetInboxIds answers from the same
replayed state.

An update in the stored log that does not apply (one sent to the contract without passing a
node's checks) is skipped and logged once, so one bad payload on the chain does not freeze
its inbox here. Replayed states are kept per inbox (least recently used dropped first) with
the cursor they reached; the next read asks the store only for what came after it.

Publishes on one inbox are serialized in this process from the check until they are stored,
so two updates checked against the same state cannot both go on the chain."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from weakref import WeakValueDictionary

import structlog
from google.protobuf.message import DecodeError

from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.associations import (
    AssociationError,
    AssociationState,
    MemberId,
    MemberKind,
    WalletCheck,
    apply_update,
    ethereum,
    wallet_checks,
)
from xnode.core.cursors import Cursor
from xnode.core.envelopes import ValidPayerEnvelope, parse_originator_envelope
from xnode.core.errors import Reason, Rejected
from xnode.core.identity import IdentifierKind, normalize_identifier
from xnode.core.query import MAX_QUERY_LIMIT, EnvelopeQuery
from xnode.core.topics import Topic, TopicKind
from xnode.usecases.ports import EnvelopeReader, InboxClaims, SmartContractWallets

log = structlog.get_logger(__name__)

CACHED_INBOXES = 10_000


@dataclass(frozen=True, slots=True)
class _Replayed:
    cursor: Cursor
    state: AssociationState | None


def _update_of(raw: bytes) -> association_pb2.IdentityUpdate | None:
    try:
        payer = parse_originator_envelope(raw).payer_envelope
        client = envelopes_pb2.ClientEnvelope.FromString(payer.unsigned_client_envelope)
    except (Rejected, DecodeError):
        return None
    return client.identity_update if client.HasField("identity_update") else None


def _topic(inbox_id: str) -> bytes | None:
    try:
        inbox = bytes.fromhex(inbox_id)
    except ValueError:
        return None
    return Topic(TopicKind.IDENTITY_UPDATES, inbox).raw if len(inbox) == 32 else None


def _member(identifier: str, kind: int) -> MemberId | None:
    normalized = normalize_identifier(identifier, kind)
    if normalized is None:
        return None
    text, parsed = normalized
    if parsed is IdentifierKind.ETHEREUM:
        return ethereum(text)
    return MemberId(MemberKind.PASSKEY, text)


class IdentityUpdates:
    def __init__(
        self,
        store: EnvelopeReader,
        wallets: SmartContractWallets | None = None,
        claims: InboxClaims | None = None,
        cached_inboxes: int = CACHED_INBOXES,
    ) -> None:
        self._store = store
        self._wallets = wallets
        self._claims = claims
        self._cached = cached_inboxes
        self._replayed: OrderedDict[str, _Replayed] = OrderedDict()
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    # --- the replayed state ------------------------------------------------------------

    def forget(self) -> None:
        """Drops every replayed state: a chain re-org removed updates they include."""
        self._replayed.clear()

    async def state(self, inbox_id: str) -> AssociationState | None:
        """The inbox's association state after every stored update that applies."""
        topic = _topic(inbox_id)
        if topic is None:
            return None
        known = self._replayed.get(inbox_id) or _Replayed(Cursor(), None)
        cursor, state = known.cursor, known.state
        while True:
            page = await self._store.query(EnvelopeQuery((topic,), (), cursor), MAX_QUERY_LIMIT)
            for stored in page:
                cursor = cursor.advanced(stored.originator_node_id, stored.sequence_id)
                state = await self._replay_one(inbox_id, state, stored.raw, stored.sequence_id)
            if len(page) < MAX_QUERY_LIMIT:
                break
        self._remember(inbox_id, _Replayed(cursor, state))
        return state

    async def _replay_one(
        self, inbox_id: str, state: AssociationState | None, raw: bytes, sequence_id: int
    ) -> AssociationState | None:
        update = _update_of(raw)
        if update is None:
            return state
        try:
            return apply_update(state, update, await self._ask_wallets(update))
        except (AssociationError, Rejected) as exc:
            log.warning(
                "identity_update_skipped", inbox_id=inbox_id, sequence_id=sequence_id, why=str(exc)
            )
            return state

    def _remember(self, inbox_id: str, replayed: _Replayed) -> None:
        self._replayed[inbox_id] = replayed
        self._replayed.move_to_end(inbox_id)
        while len(self._replayed) > self._cached:
            self._replayed.popitem(last=False)

    async def _ask_wallets(self, update: association_pb2.IdentityUpdate) -> dict[WalletCheck, bool]:
        """The chain's ERC-1271 answers for the update's contract wallet signatures."""
        checks = wallet_checks(update)
        if not checks:
            return {}
        wallets = self._wallets
        if wallets is None:
            raise AssociationError("smart contract wallet signatures need a chain to verify them")
        answers = {}
        for check in checks:
            if check.chain_id != wallets.chain_id:
                raise AssociationError(
                    f"smart contract wallet {check.account} signs on chain {check.chain_id}; "
                    f"this node verifies ERC-1271 signatures on chain {wallets.chain_id} only"
                )
            try:
                answers[check] = await wallets.accepts(check)
            except ConnectionError as exc:
                raise Rejected(
                    Reason.UNAVAILABLE, f"cannot ask the chain about a contract wallet: {exc}"
                ) from None
        return answers

    # --- publishing ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serialized(self, envelopes: Sequence[ValidPayerEnvelope]) -> AsyncIterator[None]:
        """Holds the inboxes of the request's identity updates (one order: no deadlock)."""
        inboxes = sorted(
            {e.client_envelope.identity_update.inbox_id for e in envelopes if _is_update(e)}
        )
        async with contextlib.AsyncExitStack() as stack:
            for inbox in inboxes:
                lock = self._locks.get(inbox)
                if lock is None:
                    lock = self._locks[inbox] = asyncio.Lock()
                await stack.enter_async_context(lock)
            yield

    async def check(self, envelopes: Sequence[ValidPayerEnvelope]) -> None:
        """Each identity update must apply to its inbox's state (after the request's earlier
        ones); raises Rejected(INVALID_PAYLOAD) naming the envelope and the reason."""
        pending: dict[str, AssociationState | None] = {}
        for i, envelope in enumerate(envelopes):
            if not _is_update(envelope):
                continue
            update = envelope.client_envelope.identity_update
            inbox = update.inbox_id
            if inbox not in pending:
                pending[inbox] = await self.state(inbox)
            try:
                pending[inbox] = apply_update(
                    pending[inbox], update, await self._ask_wallets(update)
                )
            except AssociationError as exc:
                raise Rejected(
                    Reason.INVALID_PAYLOAD,
                    f"identity update does not apply to inbox {inbox} (XIP-46): {exc}",
                ).at(i) from None
            except Rejected as exc:
                raise exc.at(i) from None

    # --- GetInboxIds ---------------------------------------------------------------------

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        """Per identifier: the latest inbox claiming it whose replayed state holds it."""
        if self._claims is None:
            return [None] * len(identifiers)
        claims = await self._claims.inbox_claims(identifiers)
        answers: list[str | None] = []
        for (identifier, kind), inboxes in zip(identifiers, claims, strict=True):
            member = _member(identifier, kind)
            answers.append(await self._first_holding(member, inboxes) if member else None)
        return answers

    async def _first_holding(self, member: MemberId, inboxes: list[str]) -> str | None:
        for inbox in inboxes:
            state = await self.state(inbox)
            if state is not None and state.has(member):
                return inbox
        return None


def has_updates(envelopes: Sequence[ValidPayerEnvelope]) -> bool:
    """Whether a request carries identity updates (else there is nothing to hold or check)."""
    return any(_is_update(e) for e in envelopes)


def _is_update(envelope: ValidPayerEnvelope) -> bool:
    return envelope.payload == "identity_update"
