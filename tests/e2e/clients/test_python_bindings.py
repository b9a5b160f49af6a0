"""The official client library (libxmtp 1.10.0, PyPI `xmtp-bindings`) against real xnode
processes: three nodes on the chain registry (anvil), two gateways, real Postgres.

Users register inboxes (identity updates go to the chain), find each other with GetInboxIds,
talk in an MLS group, add a third member, stream live, and keep working when the node they
read from is killed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import xmtp_bindings.xmtpv3 as xmtp

from tests.e2e.clients.conftest import ClientNetwork
from tests.e2e.clients.xmtp_users import User, group_options, list_options, new_user, until
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.client import NodeClient
from xnode.envelopes import IDENTITY_UPDATES_ORIGINATOR, parse_originator_envelope
from xnode.gateway.routing import available_nodes, preferred_node
from xnode.registry import NodeEntry
from xnode.topics import Topic, TopicKind

pytestmark = pytest.mark.slow


async def read_node(network: ClientNetwork, user: User) -> tuple[int, Any]:
    """The node the user's client reads from: where its live stream opens (the library
    picks the node that answered its health check fastest, and tells no one)."""
    before = network.open_client_streams()
    stream = await user.stream_all()

    async def opened() -> int | None:
        now = network.open_client_streams()
        grown = [n for n in now if now[n] > before.get(n, 0)]
        return grown[0] if len(grown) == 1 else None

    return await until(f"{user.name}'s stream opens on one node", opened), stream


def nodes_of(network: ClientNetwork) -> list[NodeEntry]:
    from xnode.registry import Registry

    return available_nodes(
        Registry(
            NodeEntry(n, network.nodes.spec.keys[n].public_key, network.node_url(n))
            for n in network.nodes.addresses
        )
    )


async def identity_updates_on_chain(network: ClientNetwork, users: list[User]) -> None:
    """Each inbox's identity updates are chain payloads (reserved originator 1)."""
    address = network.nodes.addresses[next(iter(network.nodes.processes))]
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


async def every_node_knows(network: ClientNetwork, user: User) -> None:
    """Asked right after registration, without waiting: the gateway answered the identity
    update only once every live node had indexed it from the chain (read-your-writes)."""
    for node_id, address in network.nodes.addresses.items():
        if node_id not in network.nodes.processes:
            continue
        async with NodeClient(address) as client:
            request = api.GetInboxIdsRequest(
                requests=[
                    api.GetInboxIdsRequest.Request(
                        identifier="0x" + user.key.address.hex(), identifier_kind=1
                    )
                ]
            )
            reply = await client.replication.GetInboxIds(request, timeout=10)
        assert reply.responses[0].inbox_id == user.inbox_id, f"node {node_id}"


async def test_a_conversation_between_users_of_different_gateways(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    started = time.monotonic()
    gateway_a, gateway_b = client_network.gateways
    alice = new_user("alice", tmp_path, client_network.node_url(100), gateway_a.url)
    bob = new_user("bob", tmp_path, client_network.node_url(200), gateway_b.url)
    carol = new_user("carol", tmp_path, client_network.node_url(300), gateway_a.url)
    alice_phone = alice.another_installation("alice-phone", gateway_b.url)
    try:
        await alice.connect()
        await every_node_knows(client_network, alice)
        await bob.connect()
        await every_node_knows(client_network, bob)
        assert await alice.find(bob) == bob.inbox_id
        assert await bob.find(alice) == alice.inbox_id
        await identity_updates_on_chain(client_network, [alice, bob])

        group = await alice.client.conversations().create_group([bob.inbox_id], group_options())
        group_id = group.id()
        bobs = await bob.group(group_id)
        await group.send_text("hello bob")
        await bob.read(bobs, ["hello bob"])
        await bobs.send_text("hello alice")
        await alice.read(group, ["hello bob", "hello alice"])

        # A live stream gets a message that another node originated (and replicated): bob
        # writes in a side group whose preferred node is not the one alice reads from.
        node, stream = await read_node(client_network, alice)
        for _ in range(20):
            side = await alice.client.conversations().create_group([bob.inbox_id], group_options())
            topic = Topic(TopicKind.GROUP_MESSAGES, side.id()).raw
            if preferred_node(topic, nodes_of(client_network), ()) != node:
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
        await identity_updates_on_chain(client_network, [carol])

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


async def group_preferring(network: ClientNetwork, creator: User, member: User, node: int) -> Any:
    """A new group of the two whose topic's preferred node (XIP-49 3.3.6) is `node`."""
    for _ in range(20):
        group = await creator.client.conversations().create_group(
            [member.inbox_id], group_options()
        )
        topic = Topic(TopicKind.GROUP_MESSAGES, group.id()).raw
        if preferred_node(topic, nodes_of(network), ()) == node:
            return group
    raise AssertionError(f"no new group preferred node {node}")


async def test_a_user_keeps_talking_when_the_node_it_reads_from_is_killed(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    gateway_a, gateway_b = client_network.gateways
    alice = new_user("alice", tmp_path, client_network.node_url(100), gateway_a.url)
    bob = new_user("bob", tmp_path, client_network.node_url(200), gateway_b.url)
    try:
        await alice.connect()
        await bob.connect()
        await alice.find(bob)
        victim, _ = await read_node(client_network, alice)
        bobs_node, _ = await read_node(client_network, bob)
        # The group's messages go to the victim too, so the gateways must fail over as well.
        group = await group_preferring(client_network, alice, bob, victim)
        group_id = group.id()
        topic = Topic(TopicKind.GROUP_MESSAGES, group_id).raw
        next_node = preferred_node(topic, nodes_of(client_network), (victim,))
        bobs = await bob.group(group_id)
        await group.send_text("before")
        await bob.read(bobs, ["before"])

        client_network.nodes.kill(victim)

        # libxmtp 1.10.0 picks its read node once per API connection (MultiNodeClient keeps
        # it in a OnceCell, no refresh), so this client keeps calling the dead node.
        with pytest.raises(xmtp.FfiError):
            await group.sync()

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
