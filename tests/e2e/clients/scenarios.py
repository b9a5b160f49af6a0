"""Client scenarios with the official library (libxmtp 1.10.0 via `xmtp-bindings`), each run
in its own process by test_python_bindings.py. Assertions here fail the test."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import xmtp_bindings.xmtpv3 as xmtp

from tests.e2e.clients.network_view import NetworkView
from tests.e2e.clients.node_sdk_user import NodeSdkUser
from tests.e2e.clients.xmtp_users import User, group_options, list_options, new_user, until
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.core.constants import IDENTITY_UPDATES_ORIGINATOR
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.originator_selection import available_nodes, preferred_node
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind


async def read_node(network: NetworkView, user: User) -> tuple[int, Any]:
    """The node the user's client reads from: where its live stream opens (the library
    picks the node that answered its health check fastest, and tells no one)."""
    before = network.open_client_streams()
    stream = await user.stream_all()

    async def opened() -> int | None:
        now = network.open_client_streams()
        grown = [n for n in now if now[n] > before.get(n, 0)]
        return grown[0] if len(grown) == 1 else None

    return await until(f"{user.name}'s stream opens on one node", opened), stream


def nodes_of(network: NetworkView) -> list[NodeEntry]:
    """The registry as the gateways see it (every node, killed or not, stays enabled)."""
    return available_nodes(
        Registry(
            NodeEntry(n, network.public_keys[n], network.node_url(n)) for n in network.addresses
        )
    )


async def identity_updates_on_chain(network: NetworkView, users: list[User]) -> None:
    """Each inbox's identity updates are chain payloads (reserved originator 1)."""
    address = next(iter(network.live_addresses().values()))
    async with NodeClient(address) as client:
        for user in users:
            topic = Topic(TopicKind.IDENTITY_UPDATES, bytes.fromhex(user.inbox_id)).raw
            found = [
                parse_originator_envelope(e.SerializeToString())
                for e in await client.query([topic])
            ]
            assert found, f"{user.name}'s identity update is not on the network"
            assert {e.originator_node_id for e in found} == {IDENTITY_UPDATES_ORIGINATOR}
            assert all(e.transaction_hash for e in found)


async def every_node_knows(network: NetworkView, user: User) -> None:
    """Asked right after registration, without waiting: the gateway answered the identity
    update only once every live node had indexed it from the chain (read-your-writes)."""
    await every_node_knows_inbox(network, "0x" + user.key.address.hex(), user.inbox_id)


async def every_node_knows_inbox(network: NetworkView, address: str, inbox_id: str) -> None:
    for node_id, node_address in network.live_addresses().items():
        async with NodeClient(node_address) as client:
            request = api.GetInboxIdsRequest(
                requests=[
                    api.GetInboxIdsRequest.Request(
                        identifier=address, identifier_kind=association_pb2.IDENTIFIER_KIND_ETHEREUM
                    )
                ]
            )
            reply = await client.replication.GetInboxIds(request, timeout=10)
        assert reply.responses[0].inbox_id == inbox_id, f"node {node_id}"


async def conversation_across_gateways(network: NetworkView, tmp_path: Path) -> None:
    started = time.monotonic()
    gateway_a, gateway_b = network.gateway_urls
    alice = new_user("alice", tmp_path, network.node_url(100), gateway_a)
    bob = new_user("bob", tmp_path, network.node_url(200), gateway_b)
    carol = new_user("carol", tmp_path, network.node_url(300), gateway_a)
    alice_phone = alice.another_installation("alice-phone", gateway_b)
    try:
        await alice.connect()
        await every_node_knows(network, alice)
        await bob.connect()
        await every_node_knows(network, bob)
        assert await alice.find(bob) == bob.inbox_id
        assert await bob.find(alice) == alice.inbox_id
        await identity_updates_on_chain(network, [alice, bob])

        group = await alice.client.conversations().create_group([bob.inbox_id], group_options())
        group_id = group.id()
        bobs = await bob.group(group_id)
        await group.send_text("hello bob")
        await bob.read(bobs, ["hello bob"])
        await bobs.send_text("hello alice")
        await alice.read(group, ["hello bob", "hello alice"])

        # A live stream gets a message that another node originated (and replicated): bob
        # writes in a side group whose preferred node is not the one alice reads from.
        node, stream = await read_node(network, alice)
        for _ in range(20):
            side = await alice.client.conversations().create_group([bob.inbox_id], group_options())
            topic = Topic(TopicKind.GROUP_MESSAGES, side.id()).raw
            if preferred_node(topic, nodes_of(network), ()) != node:
                break
        else:
            raise AssertionError(f"every new group's preferred node was alice's node {node}")
        await (await bob.group(side.id())).send_text("live from bob")

        async def streamed() -> Any:
            return next((m for m in list(stream.messages) if _text(m) == "live from bob"), None)

        message = await until("alice's stream delivers bob's message", streamed)
        assert message.originator_id != node, "the message should come from another node"
        assert not stream.errors

        # A third member reads what is sent after she joins, and only that.
        await carol.connect()
        assert await alice.find(carol) == carol.inbox_id
        await group.add_members([carol.inbox_id])
        carols = await carol.group(group_id)
        await group.send_text("welcome carol")
        await bob.read(bobs, ["hello bob", "hello alice", "welcome carol"])
        await bobs.send_text("hi carol")
        await carol.read(carols, ["welcome carol", "hi carol"])
        await carols.send_text("hi all")
        everything = ["hello bob", "hello alice", "welcome carol", "hi carol", "hi all"]
        await alice.read(group, everything)
        await bob.read(bobs, everything)
        await identity_updates_on_chain(network, [carol])

        # A second installation of alice's inbox: the inbox's next identity update, which
        # the client sends without depends_on, goes through the chain too.
        await alice_phone.connect()
        assert alice_phone.inbox_id == alice.inbox_id
        state = await alice.client.inbox_state(True)
        assert len(state.installations) == 2
    finally:
        for user in (alice, bob, carol, alice_phone):
            user.close()
    print(f"conversation test took {time.monotonic() - started:.1f}s")


def _text(message: Any) -> str | None:
    try:
        return str(xmtp.decode_text(message.content))
    except xmtp.FfiError:
        return None


async def group_preferring(network: NetworkView, creator: User, member: User, node: int) -> Any:
    """A new group of the two whose topic's preferred node (XIP-49 3.3.6) is `node`."""
    for _ in range(20):
        group = await creator.client.conversations().create_group(
            [member.inbox_id], group_options()
        )
        topic = Topic(TopicKind.GROUP_MESSAGES, group.id()).raw
        if preferred_node(topic, nodes_of(network), ()) == node:
            return group
    raise AssertionError(f"no new group preferred node {node}")


async def read_node_killed(network: NetworkView, tmp_path: Path) -> None:
    gateway_a, gateway_b = network.gateway_urls
    alice = new_user("alice", tmp_path, network.node_url(100), gateway_a)
    bob = new_user("bob", tmp_path, network.node_url(200), gateway_b)
    try:
        await alice.connect()
        await bob.connect()
        await alice.find(bob)
        victim, _ = await read_node(network, alice)
        bobs_node, _ = await read_node(network, bob)
        # The group's messages go to the victim too, so the gateways must fail over as well.
        group = await group_preferring(network, alice, bob, victim)
        group_id = group.id()
        topic = Topic(TopicKind.GROUP_MESSAGES, group_id).raw
        next_node = preferred_node(topic, nodes_of(network), (victim,))
        bobs = await bob.group(group_id)
        await group.send_text("before")
        await bob.read(bobs, ["before"])

        network.kill(victim)

        # libxmtp 1.10.0 picks its read node once per API connection (MultiNodeClient keeps
        # it in a OnceCell, no refresh), so this client keeps calling the dead node.
        try:
            await group.sync()
        except xmtp.FfiError:
            pass
        else:
            raise AssertionError("the old connection still reads, from a dead node?")

        # A new connection on the same database: GetNodes, health checks skip the dead
        # node, reads go to a live one. Publishing never needed it: the gateway fails over.
        await alice.connect()
        group = alice.client.conversation(group_id)
        if bobs_node == victim:
            await bob.connect()
            bobs = bob.client.conversation(group_id)
        await group.sync()
        await group.send_text("after, from alice")
        await bob.read(bobs, ["before", "after, from alice"])
        await bobs.send_text("after, from bob")
        await alice.read(group, ["before", "after, from alice", "after, from bob"])
        originators = {_text(m): m.originator_id for m in await group.find_messages(list_options())}
        assert originators["before"] == victim
        assert originators["after, from alice"] == next_node
        assert originators["after, from bob"] == next_node
    finally:
        alice.close()
        bob.close()


async def every_payload_kind(network: NetworkView, tmp_path: Path) -> None:
    """Each payload the client publishes, once or more: key packages and identity updates
    (three inboxes, a second installation), a group's commits (create, add a member),
    welcomes, application messages. test_capture_payloads.py keeps them as fixtures."""
    gateway_a, gateway_b = network.gateway_urls
    alice = new_user("alice", tmp_path, network.node_url(100), gateway_a)
    bob = new_user("bob", tmp_path, network.node_url(200), gateway_b)
    carol = new_user("carol", tmp_path, network.node_url(300), gateway_a)
    alice_phone = alice.another_installation("alice-phone", gateway_b)
    try:
        for user in (alice, bob, carol):
            await user.connect()
        assert await alice.find(bob) == bob.inbox_id
        group = await alice.client.conversations().create_group([bob.inbox_id], group_options())
        bobs = await bob.group(group.id())
        await group.send_text("hello bob")
        await bob.read(bobs, ["hello bob"])
        await bobs.send_text("hello alice")
        await alice.read(group, ["hello bob", "hello alice"])
        assert await alice.find(carol) == carol.inbox_id
        await group.add_members([carol.inbox_id])
        carols = await carol.group(group.id())
        await group.send_text("welcome carol")
        await carol.read(carols, ["welcome carol"])
        await carols.send_text("hi all")
        await alice.read(group, ["hello bob", "hello alice", "welcome carol", "hi all"])
        await alice_phone.connect()
        assert alice_phone.inbox_id == alice.inbox_id
    finally:
        for user in (alice, bob, carol, alice_phone):
            user.close()


async def conversation_with_node_sdk(network: NetworkView, tmp_path: Path) -> None:
    """A user of the official Node SDK (in a container, node_sdk_user.py) and a user of the
    Python bindings, each through its own gateway and node: both register, find each other,
    the Node SDK user makes a group, both send and both read every message."""
    gateway_a, gateway_b = network.gateway_urls
    alice = new_user("alice", tmp_path, network.node_url(100), gateway_a)
    nora = NodeSdkUser("nora", network.node_url(200), gateway_b)
    try:
        await nora.start()
        created = await nora.connect()
        assert str(created["version"]).startswith("v22."), created
        await every_node_knows_inbox(network, nora.address, nora.inbox_id)
        await alice.connect()
        assert await nora.find("0x" + alice.key.address.hex()) == alice.inbox_id
        assert await alice.find_address(nora.address, "nora") == nora.inbox_id

        group_id = str((await nora.call("createGroup", inboxIds=[alice.inbox_id]))["groupId"])
        alices = await alice.group(bytes.fromhex(group_id))
        await nora.call("send", groupId=group_id, text="hello from node")
        await alice.read(alices, ["hello from node"])
        await alices.send_text("hello from python")
        await nora.read(group_id, ["hello from node", "hello from python"])
        await nora.call("send", groupId=group_id, text="bye from node")
        everything = ["hello from node", "hello from python", "bye from node"]
        await alice.read(alices, everything)
        await nora.read(group_id, everything)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nnode sdk output:\n{nora.log()}") from None
    finally:
        alice.close()
        await nora.close()


async def _signed_by(request: Any, *keys: Any) -> Any:
    """Adds each account's EIP-191 signature over the request's text, as a wallet would."""
    text = await request.signature_text()
    for key in keys:
        await request.add_ecdsa_signature(
            xmtp.ethereum_sign_recoverable(text.encode(), key.secret, True)
        )
    return request


async def identity_lifecycle(network: NetworkView, tmp_path: Path) -> None:
    """Every kind of identity update the client makes, each validated by a node (XIP-46)
    before it goes to the chain: create inbox with its first installation, a second
    installation, link a second wallet (vouched by the installation), change the recovery address,
    revoke an installation and unlink a wallet (signed by the recovery address).
    GetInboxIds follows the validated state."""
    gateway_a, gateway_b = network.gateway_urls
    alice = new_user("alice", tmp_path, network.node_url(100), gateway_a)
    phone = alice.another_installation("alice-phone", gateway_b)
    bob = new_user("bob", tmp_path, network.node_url(200), gateway_b)
    wallet = new_user("alice-wallet", tmp_path, network.node_url(300), gateway_a)  # never connects
    try:
        for user in (alice, phone, bob):
            await user.connect()
        client = alice.client
        # The installation signs as the existing member itself; the new wallet signs too.
        await client.apply_signature_request(
            await _signed_by(await client.add_identity(wallet.identifier), wallet.key)
        )
        assert await bob.find(wallet) == alice.inbox_id
        await client.apply_signature_request(
            await _signed_by(await client.change_recovery_identifier(wallet.identifier), alice.key)
        )
        revoke = await client.revoke_installations([phone.client.installation_id()])
        await client.apply_signature_request(await _signed_by(revoke, wallet.key))
        state = await client.inbox_state(True)
        assert [i.id for i in state.installations] == [client.installation_id()]
        assert state.recovery_identity.identifier == wallet.identifier.identifier
        unlink = await client.revoke_identity(wallet.identifier)
        await client.apply_signature_request(await _signed_by(unlink, wallet.key))

        async def unlinked() -> bool | None:
            found = await bob.client.find_inbox_id(wallet.identifier)
            return True if found is None else None

        await until("the unlinked wallet resolves to no inbox", unlinked)
        assert await bob.find(alice) == alice.inbox_id
        await identity_updates_on_chain(network, [alice])
    finally:
        for user in (alice, phone, bob):
            user.close()
