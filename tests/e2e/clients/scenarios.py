"""Client scenarios with the official libraries (libxmtp 1.10.0 via `xmtp-bindings`, and the
Node SDK through node_sdk_user.py), each run in its own process by run_scenario
(test_python_bindings.py). Assertions here fail the test."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import xmtp_bindings.xmtpv3 as xmtp

from tests.e2e.clients.network_view import NetworkView
from tests.e2e.clients.node_sdk_user import NodeSdk, NodeSdkUser
from tests.e2e.clients.xmtp_users import (
    MessageStream,
    User,
    group_options,
    list_options,
    new_user,
    until,
)
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.core.constants import IDENTITY_UPDATES_ORIGINATOR
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.originator_selection import available_nodes, failover_order, preferred_node
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind

# New groups until one's topic prefers a wanted node. Group ids are random, so each try hits a
# given node one time in three: 60 tries all miss once in 3e10 (20 did miss in one CI run).
GROUP_TRIES = 60


async def read_nodes(network: NetworkView, user: User) -> tuple[set[int], Any]:
    """The nodes the user's live streams opened on, and the stream. The client reads
    through the gateway, which opens each SubscribeEnvelopes on the preferred node of its
    first topic (the library opens one for welcomes and one for its groups)."""
    before = network.open_client_streams()
    stream = await user.stream_all()

    last: list[set[int]] = [set()]

    async def opened() -> set[int] | None:
        """The nodes once two polls in a row agree: a second stream may open a moment later."""
        now = network.open_client_streams()
        grown = {n for n in now if now[n] > before.get(n, 0)}
        settled = grown if grown and grown == last[0] else None
        last[0] = grown
        return settled

    return await until(f"{user.name}'s streams open", opened), stream


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
        nodes, stream = await read_nodes(network, alice)
        for _ in range(GROUP_TRIES):
            side = await alice.client.conversations().create_group([bob.inbox_id], group_options())
            topic = Topic(TopicKind.GROUP_MESSAGES, side.id()).raw
            if preferred_node(topic, nodes_of(network), ()) not in nodes:
                break
        else:
            raise AssertionError(f"every new group's preferred node was one of alice's {nodes}")
        await (await bob.group(side.id())).send_text("live from bob")

        async def streamed() -> Any:
            return next((m for m in list(stream.messages) if _text(m) == "live from bob"), None)

        message = await until("alice's stream delivers bob's message", streamed)
        assert message.originator_id not in nodes, "the message should come from another node"
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
    for _ in range(GROUP_TRIES):
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
        # The gateway reads a group's topic from its preferred node, where its messages go
        # too: the gateways must fail over reads and publishes alike.
        victim = 100
        group = await group_preferring(network, alice, bob, victim)
        group_id = group.id()
        topic = Topic(TopicKind.GROUP_MESSAGES, group_id).raw
        next_node = preferred_node(topic, nodes_of(network), (victim,))
        bobs = await bob.group(group_id)
        await group.send_text("before")
        await bob.read(bobs, ["before"])

        network.kill(victim)

        # libxmtp 1.10.0 reads from the one URL GetNodes gave it for as long as the
        # connection lives: that URL is the gateway's, which reads from live nodes, so the
        # same connection goes on, and so does publishing (the gateway fails over).
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


# A message on every other member's live stream within this long of its send being answered.
STREAM_GAP_S = 5.0
FREEZE_S = 30.0


@dataclass
class Live:
    """A member's live stream so far: each text with when it arrived (time.monotonic()), in
    arrival order, and whatever went wrong on the stream."""

    arrivals: list[tuple[str, float]]
    trouble: list[Any]

    def arrival_of(self, text: str) -> float | None:
        return next((at for t, at in self.arrivals if t == text), None)


class Member(Protocol):
    """One member of the group, with a live stream open, whichever client it uses."""

    @property
    def name(self) -> str: ...

    async def send(self, text: str) -> None: ...

    async def live(self) -> Live: ...

    async def read(self, expected: list[str]) -> None: ...


@dataclass
class BindingsMember:
    user: User
    group: Any
    stream: MessageStream

    @property
    def name(self) -> str:
        return self.user.name

    async def send(self, text: str) -> None:
        await self.group.send_text(text)

    async def live(self) -> Live:
        return Live(self.stream.arrivals(), list(self.stream.errors))

    async def read(self, expected: list[str]) -> None:
        await self.user.read(self.group, expected)


@dataclass
class NodeSdkMember:
    user: NodeSdkUser
    group_id: str

    @property
    def name(self) -> str:
        return self.user.name

    async def send(self, text: str) -> None:
        await self.user.call("send", groupId=self.group_id, text=text)

    async def live(self) -> Live:
        return Live(*await self.user.streamed())

    async def read(self, expected: list[str]) -> None:
        await self.user.read(self.group_id, expected)


@dataclass
class Conversation:
    """Members of one group, each with a live stream, none ever reconnecting; every send is
    timed, and each message awaited on the others' streams."""

    members: list[Member]
    sent: list[str] = field(default_factory=list)
    slowest_send_s: float = 0.0
    widest_gap_s: float = 0.0
    widest_gap: str = ""  # which message, on whose stream

    async def say(self, member: Member, label: str) -> None:
        text = f"{label}: {member.name}"
        started = time.monotonic()
        await member.send(text)
        answered = time.monotonic()
        self.slowest_send_s = max(self.slowest_send_s, answered - started)
        self.sent.append(text)
        for other in self.members:
            if other is not member:

                async def arrived(other: Member = other) -> float | None:
                    return (await other.live()).arrival_of(text)

                at = await until(f"{other.name}'s stream delivers {text!r}", arrived, 15.0)
                if at - answered > self.widest_gap_s:
                    self.widest_gap_s = at - answered
                    self.widest_gap = f"{text!r} on {other.name}'s stream"

    async def round(self, label: str) -> None:
        for member in self.members:
            await self.say(member, label)

    async def through_kill(self, network: NetworkView, node: int) -> None:
        """A round with `node` killed (kill -9), then one after it is started again."""
        network.kill(node)
        await self.round(f"{node} killed")
        network.restart(node)
        await self.round(f"{node} restarted")

    async def through_freeze(self, network: NetworkView, node: int) -> None:
        """The members take turns while `node` is frozen (SIGSTOP) for FREEZE_S, then one
        round after it thaws."""
        network.freeze(node)
        frozen_until = time.monotonic() + FREEZE_S
        turn = 0
        while time.monotonic() < frozen_until:
            await self.say(self.members[turn % len(self.members)], f"{node} frozen #{turn}")
            turn += 1
        network.thaw(node)
        await self.round(f"{node} thawed")

    async def check(self) -> None:
        """Every message in every member's history; on every other member's live stream
        once, with nothing gone wrong there; the widest gap within STREAM_GAP_S."""
        for member in self.members:
            await member.read(self.sent)
            live = await member.live()
            others = [t for t in self.sent if not t.endswith(member.name)]
            streamed = [t for t, _ in live.arrivals if t in others]
            assert sorted(streamed) == sorted(set(streamed)), f"{member.name}: a duplicate"
            assert set(others) <= set(streamed), f"{member.name}: {set(others) - set(streamed)}"
            assert not live.trouble, f"{member.name}: {live.trouble}"
        print(
            f"{len(self.sent)} messages; slowest send {self.slowest_send_s:.1f}s; "
            f"widest stream gap {self.widest_gap_s:.1f}s ({self.widest_gap})"
        )
        assert self.widest_gap_s <= STREAM_GAP_S, f"{self.widest_gap_s}: {self.widest_gap}"


async def connect_sdk_users(network: NetworkView, users: list[NodeSdkUser]) -> None:
    """Each registers its inbox, which every live node knows by the time it is answered."""
    for user in users:
        created = await user.connect()
        assert str(created["version"]).startswith("v22."), created
        await every_node_knows_inbox(network, user.address, user.inbox_id)


async def streams_leave(network: NetworkView, node: int) -> None:
    """Every client stream the node held before its freeze has left it: the node sees them
    cancelled once it runs again, and a stream moves only when its node fails, so none
    comes back while the others serve."""

    async def left() -> bool:
        return network.open_client_streams()[node] == 0

    await until(f"the client streams leave node {node}", left)


async def conversation_survives_node_failures(network: NetworkView, tmp_path: Path) -> None:
    """Three users of the Python bindings and three of the Node SDK (in one container), on
    every node and both gateways, in one group; none ever reconnects. Each node is killed
    (kill -9, then started again) once and frozen (SIGSTOP for FREEZE_S) once,
    mid-conversation. Every send is answered, every message reaches the other members' live
    streams within STREAM_GAP_S, once, and is in history.

    The order makes each failure hit what the members use (a stream that leaves a node
    never comes back to it): the group's preferred node is killed first, so its publishes
    and streams move to the next node; that one is frozen next, holding every member's
    group stream; then the third node is killed, the first frozen, the second killed, the
    third frozen."""
    gateway_a, gateway_b = network.gateway_urls
    users = [
        new_user("alice", tmp_path, network.node_url(100), gateway_a),
        new_user("bob", tmp_path, network.node_url(200), gateway_b),
        new_user("carol", tmp_path, network.node_url(300), gateway_a),
    ]
    sdk = NodeSdk()
    sdk_users = [
        sdk.user("nora", network.node_url(100), gateway_b),
        sdk.user("olga", network.node_url(200), gateway_a),
        sdk.user("pete", network.node_url(300), gateway_b),
    ]
    alice, nora, olga, pete = users[0], *sdk_users
    try:
        await sdk.start()
        await asyncio.gather(
            connect_sdk_users(network, sdk_users), *(user.connect() for user in users)
        )
        assert await alice.find_address(olga.address, olga.name) == olga.inbox_id
        addresses = ["0x" + u.key.address.hex() for u in users] + [olga.address, pete.address]
        found = [await nora.find(address) for address in addresses]
        inbox_ids = [u.inbox_id for u in users] + [olga.inbox_id, pete.inbox_id]
        assert found == inbox_ids, found
        group_id = str((await nora.call("createGroup", inboxIds=found))["groupId"])
        bindings = []
        for user in users:
            group = await user.group(bytes.fromhex(group_id))
            bindings.append(BindingsMember(user, group, await user.stream_all()))
        for sdk_user in sdk_users:
            await sdk_user.read(group_id, [])  # the group, from its welcome, before streaming
            await sdk_user.stream()
        sdks = [NodeSdkMember(u, group_id) for u in sdk_users]
        members: list[Member] = [m for pair in zip(bindings, sdks, strict=True) for m in pair]
        talk = Conversation(members)
        await talk.round("hello")

        topic = Topic(TopicKind.GROUP_MESSAGES, bytes.fromhex(group_id)).raw
        first, second, third = failover_order(topic, nodes_of(network))
        await talk.through_kill(network, first)
        held = network.open_client_streams()[second]
        assert held >= len(members), f"node {second} holds {held} client streams"
        await talk.through_freeze(network, second)
        await streams_leave(network, second)
        await talk.through_kill(network, third)
        await talk.through_freeze(network, first)
        await streams_leave(network, first)
        await talk.through_kill(network, second)
        await talk.through_freeze(network, third)
        await streams_leave(network, third)
        await talk.check()

        # The gateways published to the group's preferred node, then to the next one.
        messages = await bindings[0].group.find_messages(list_options())
        originators = {_text(m): m.originator_id for m in messages}
        for member in members:
            assert originators[f"hello: {member.name}"] == first, member.name
            assert originators[f"{first} killed: {member.name}"] == second, member.name
    except Exception as exc:
        raise AssertionError(f"{exc}\nnode sdk output:\n{sdk.log()}") from exc
    finally:
        for user in users:
            user.close()
        await sdk.close()
