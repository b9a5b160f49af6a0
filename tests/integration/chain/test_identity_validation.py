"""Identity updates validated as XIP-46 says before they reach the chain: tampered,
replayed and unauthorized updates are refused with INVALID_ARGUMENT and cost no gas;
smart contract wallets are asked of the chain (ERC-1271, a wallet compiled with the pinned
solc); GetInboxIds answers only what the validated state holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from web3 import Web3

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import (
    add_identity_update_call,
    publish,
    send_raw_event,
    signed_update_envelope,
    stored_chain_payloads,
)
from tests.support.identity_signers import Inbox, Installation, Wallet, create, signed
from tests.support.waiting import eventually_value
from xmtp.identity.associations import association_pb2 as a
from xmtp.identity.associations import signature_pb2 as s
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.chain import abi
from xnode.chain.contracts import send_transaction
from xnode.chain.rpc import ChainRpc
from xnode.chain.wallets import Erc1271Wallets
from xnode.client.node import NodeClient
from xnode.core.associations import (
    WalletCheck,
    ethereum,
    inbox_id_of,
    personal_sign_digest,
    signature_text,
)

REPO = Path(__file__).resolve().parents[3]
WALLET_SOURCE = Path(__file__).parent / "contracts" / "OwnedWallet.sol"


def _compile_wallet() -> dict[str, Any]:
    out = subprocess.run(
        ["node", str(WALLET_SOURCE.parent / "compile_one.js"), str(WALLET_SOURCE)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return dict(json.loads(out.stdout))


def _deploy_wallet(chain: ChainEnv, owner: Wallet) -> tuple[str, int]:
    artifact = _compile_wallet()
    factory = chain.w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
    tx = factory.constructor(Web3.to_checksum_address(owner.address)).build_transaction(
        {"from": chain.owner.address}
    )
    receipt = send_transaction(chain.w3, chain.owner, tx)
    return str(receipt["contractAddress"]).lower(), int(receipt["blockNumber"])


def _contract_wallet_inbox(
    account: str, chain_id: int, block: int, owner: Wallet
) -> a.IdentityUpdate:
    """Create inbox signed by a contract wallet: its owner signs the EIP-191 hash."""
    update = a.IdentityUpdate(
        inbox_id=inbox_id_of(ethereum(account), 0),
        client_timestamp_ns=1_795_466_270_000_000_000,
        actions=[
            a.IdentityAction(
                create_inbox=a.CreateInbox(
                    initial_identifier=account,
                    initial_identifier_kind=a.IDENTIFIER_KIND_ETHEREUM,
                )
            )
        ],
    )
    digest = personal_sign_digest(signature_text(update))
    update.actions[0].create_inbox.initial_identifier_signature.CopyFrom(
        s.Signature(
            erc_6492=s.SmartContractWalletSignature(
                account_id=f"eip155:{chain_id}:{account}",
                block_number=block,
                signature=owner.key.sign(digest),
            )
        )
    )
    return update


async def _refused(client: NodeClient, update: a.IdentityUpdate, why: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await publish(client, 100, [signed_update_envelope(update)])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert why in (caught.value.details() or ""), caught.value.details()


def _identity_events(chain: ChainEnv) -> int:
    return len(
        chain.w3.eth.get_logs(
            {
                "address": chain.contracts.identity_updates,
                "topics": ["0x" + abi.IDENTITY_UPDATE_CREATED.hex()],
                "fromBlock": 0,
                "toBlock": "latest",
            }
        )
    )


async def test_updates_that_do_not_apply_are_refused_before_the_chain(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    inbox, app, phone = Inbox(), Installation(), Installation()
    created = inbox.create(
        (
            a.IdentityAction(add=a.AddAssociation(new_member_identifier=app.member())),
            [inbox.owner, app],
        )
    )
    async with NodeClient(node.address) as client:
        flipped = a.IdentityUpdate()
        flipped.CopyFrom(created)
        sig = flipped.actions[1].add.new_member_signature.installation_key
        sig.bytes = bytes([sig.bytes[0] ^ 0x80]) + sig.bytes[1:]
        await _refused(client, flipped, "installation key signature is invalid")
        await publish(client, 100, [signed_update_envelope(created)])
        await _refused(client, created, "already created")
        add_phone = inbox.add(phone)
        await publish(client, 100, [signed_update_envelope(add_phone)])
        await _refused(client, add_phone, "replay")
        other = Inbox()
        wrong_inbox = signed(other.id, [(create(inbox.owner), [inbox.owner])])
        await _refused(client, wrong_inbox, "names inbox")
        await publish(client, 100, [signed_update_envelope(inbox.revoke(app))])
        friend = Wallet()
        await _refused(
            client,
            inbox.update(
                (
                    a.IdentityAction(add=a.AddAssociation(new_member_identifier=friend.member())),
                    [app, friend],
                )
            ),
            "neither a member",
        )
    # Only the three updates that apply reached the chain: the refused ones cost no gas.
    assert _identity_events(chain_env) == 3


async def test_get_inbox_ids_ignores_claims_the_state_does_not_hold(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    """An update sent to the contract directly, past every node's checks, claims an address
    it has no signature of: GetInboxIds keeps answering the inbox that holds it."""
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    victim, thief = Inbox(), Inbox()
    forged = thief.add(Wallet())
    forged.actions[0].add.new_member_identifier.ethereum_address = victim.owner.address
    async with NodeClient(node.address) as client:
        await publish(client, 100, [signed_update_envelope(victim.create())])
        await publish(client, 100, [signed_update_envelope(thief.create())])
        send_raw_event(
            chain_env.url,
            chain_env.owner,
            chain_env.contracts.identity_updates,
            add_identity_update_call(thief.key, signed_update_envelope(forged).SerializeToString()),
        )
        await eventually_value(lambda: stored_chain_payloads(client, 1), lambda p: 3 in p)
        request = api.GetInboxIdsRequest(
            requests=[api.GetInboxIdsRequest.Request(identifier=victim.owner.address)]
        )
        found = await client.replication.GetInboxIds(request)
    assert found.responses[0].inbox_id == victim.id


async def test_contract_wallets_are_asked_at_the_stated_block(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    owner, stranger = Wallet(), Wallet()
    account, block = _deploy_wallet(chain_env, owner)
    chain_id = int(chain_env.w3.eth.chain_id)
    digest = personal_sign_digest("hello")
    rpc = ChainRpc(chain_env.url)
    wallets = Erc1271Wallets(rpc, chain_id)
    try:
        assert await wallets.accepts(
            WalletCheck(chain_id, account, block, digest, owner.key.sign(digest))
        )
        assert not await wallets.accepts(
            WalletCheck(chain_id, account, block, digest, stranger.key.sign(digest))
        )
        # Before the wallet was deployed there is no code to ask: no.
        assert not await wallets.accepts(
            WalletCheck(chain_id, account, block - 1, digest, owner.key.sign(digest))
        )
    finally:
        await rpc.close()
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        await _refused(
            client,
            _contract_wallet_inbox(account, chain_id, block, stranger),
            "does not accept the signature",
        )
        await _refused(
            client,
            _contract_wallet_inbox(account, chain_id + 1, block, owner),
            f"verifies ERC-1271 signatures on chain {chain_id} only",
        )
        await publish(
            client,
            100,
            [signed_update_envelope(_contract_wallet_inbox(account, chain_id, block, owner))],
        )
