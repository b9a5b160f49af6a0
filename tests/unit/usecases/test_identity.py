"""usecases.identity: the replayed association state, the publish check and GetInboxIds,
over an in-memory store (fakes for the ports)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.support.identity_signers import Inbox, Installation, Wallet
from tests.unit.usecases.fakes import MemoryStore
from xmtp.identity.associations import association_pb2 as a
from xmtp.identity.associations import signature_pb2 as s
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.associations import WalletCheck, ethereum, inbox_id_of
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    ValidPayerEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.errors import Reason, Rejected
from xnode.core.topics import Topic, TopicKind
from xnode.usecases.identity import IdentityUpdates

ORIGINATOR = 1
KEY = SigningKey.generate()


def valid(update: a.IdentityUpdate) -> ValidPayerEnvelope:
    topic = Topic(TopicKind.IDENTITY_UPDATES, bytes.fromhex(update.inbox_id)).raw
    client = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=topic), identity_update=update
    )
    return validate_payer_envelope(build_payer_envelope(client, KEY, ORIGINATOR), ORIGINATOR)


def store_of(*updates: a.IdentityUpdate) -> MemoryStore:
    store = MemoryStore()
    for seq, update in enumerate(updates, 1):
        store.rows.append(originate(valid(update), ORIGINATOR, seq, seq, KEY).stored())
    return store


class Wallets:
    chain_id = 31337

    def __init__(self, accept: bool) -> None:
        self.accept = accept
        self.asked: list[WalletCheck] = []

    async def accepts(self, check: WalletCheck) -> bool:
        self.asked.append(check)
        return self.accept


class Claims:
    def __init__(self, claims: list[list[str]]) -> None:
        self.claims = claims

    async def inbox_claims(self, identifiers: Sequence[tuple[str, int]]) -> list[list[str]]:
        return self.claims


async def test_a_stored_update_that_does_not_apply_is_skipped_and_the_rest_replayed() -> None:
    inbox, app, intruder = Inbox(), Installation(), Wallet()
    forged = inbox.add(intruder)
    forged.actions[0].add.existing_member_signature.CopyFrom(intruder.sign("not the text"))
    store = store_of(inbox.create(), forged, inbox.add(app))
    identity = IdentityUpdates(store)
    state = await identity.state(inbox.id)
    assert state is not None
    assert not state.has(ethereum(intruder.address))
    assert state.has(ethereum(inbox.owner.address))
    # A later read asks only for what follows the replayed cursor.
    await identity.state(inbox.id)
    assert store.queries[-1][0].cursor.get(ORIGINATOR) == 3


async def test_the_check_applies_a_requests_updates_in_order_and_names_the_refused_one() -> None:
    inbox, app = Inbox(), Installation()
    identity = IdentityUpdates(store_of())
    created, added = inbox.create(), inbox.add(app)
    await identity.check([valid(created), valid(added)])
    with pytest.raises(Rejected) as refused:
        await identity.check([valid(created), valid(added), valid(added)])
    assert refused.value.reason is Reason.INVALID_PAYLOAD
    assert refused.value.index == 2
    assert "replay" in refused.value.detail


def _contract_wallet(chain_id: int) -> a.IdentityUpdate:
    account = "0x" + "cd" * 20
    signature = s.Signature(
        erc_6492=s.SmartContractWalletSignature(
            account_id=f"eip155:{chain_id}:{account}", block_number=3, signature=b"x"
        )
    )
    create = a.CreateInbox(initial_identifier=account, initial_identifier_signature=signature)
    return a.IdentityUpdate(
        inbox_id=inbox_id_of(ethereum(account), 0),
        client_timestamp_ns=1,
        actions=[a.IdentityAction(create_inbox=create)],
    )


async def test_contract_wallets_are_asked_only_on_this_nodes_chain() -> None:
    wallets = Wallets(accept=True)
    identity = IdentityUpdates(store_of(), wallets)
    await identity.check([valid(_contract_wallet(31337))])
    assert [c.block_number for c in wallets.asked] == [3]
    with pytest.raises(Rejected, match="on chain 31337 only"):
        await identity.check([valid(_contract_wallet(1))])
    with pytest.raises(Rejected, match="does not accept"):
        await IdentityUpdates(store_of(), Wallets(accept=False)).check(
            [valid(_contract_wallet(31337))]
        )
    with pytest.raises(Rejected, match="need a chain"):
        await IdentityUpdates(store_of()).check([valid(_contract_wallet(31337))])


async def test_inbox_ids_answer_the_latest_claim_the_state_holds() -> None:
    mine, theirs = Inbox(), Inbox()
    claimed = theirs.add(Wallet())
    claimed.actions[0].add.new_member_identifier.ethereum_address = mine.owner.address
    store = store_of(mine.create(), theirs.create(), claimed)
    identity = IdentityUpdates(store, claims=Claims([[theirs.id, mine.id], []]))
    found = await identity.inbox_ids(
        [(mine.owner.address.upper().replace("0X", "0x"), 1), ("0x" + "00" * 20, 1)]
    )
    assert found == [mine.id, None]
