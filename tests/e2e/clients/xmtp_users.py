"""Users of the official client library (libxmtp 1.10.0 through `xmtp-bindings`): an
Ethereum key, an inbox registered on the network, a local database."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

# The library logs through RUST_LOG, read when it first logs. Its INFO lines run to hundreds
# per test; and a client whose database is released keeps its background workers (the
# bindings cannot stop them), each logging an error every second for the rest of the session,
# into every later test's captured output.
os.environ.setdefault("RUST_LOG", "warn,xmtp_mls::worker=off")

import xmtp_bindings.xmtpv3 as xmtp

from xnode.core.crypto import SigningKey

T = TypeVar("T")
APP_VERSION = "xnode-e2e/1"


async def until(what: str, check: Callable[[], Awaitable[T | None]], within_s: float = 30.0) -> T:
    """The first truthy result of `check`, polled until a deadline."""
    deadline = time.monotonic() + within_s
    last_error: BaseException | None = None
    while True:
        try:
            value = await check()
            if value:
                return value
        except xmtp.FfiError as exc:  # the library's transient errors: retried to the deadline
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s}s (last error: {last_error})")
        await asyncio.sleep(0.1)


def list_options() -> Any:
    return xmtp.FfiListMessagesOptions(
        sent_before_ns=None,
        sent_after_ns=None,
        limit=None,
        delivery_status=None,
        direction=None,
        content_types=None,
        exclude_content_types=None,
        exclude_sender_inbox_ids=None,
        sort_by=None,
        inserted_after_ns=None,
        inserted_before_ns=None,
    )


def group_options() -> Any:
    return xmtp.FfiCreateGroupOptions(
        permissions=None,
        group_name="xnode e2e",
        group_image_url_square=None,
        group_description=None,
        custom_permission_policy_set=None,
        message_disappearing_settings=None,
        app_data=None,
    )


def texts(messages: list[Any]) -> list[str]:
    """The text bodies of application messages, in the order given."""
    out = []
    for message in messages:
        if message.kind != xmtp.FfiConversationMessageKind.APPLICATION:
            continue
        try:
            out.append(xmtp.decode_text(message.content))
        except xmtp.FfiError:
            continue  # other content types (e.g. group updates)
    return out


class MessageStream(xmtp.FfiMessageCallback):
    """Collects streamed messages; called from the library's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.messages: list[Any] = []
        self.arrival_times: list[float] = []  # time.monotonic() of each arrival
        self.errors: list[Any] = []

    def on_message(self, message: Any) -> None:
        with self._lock:
            self.messages.append(message)
            self.arrival_times.append(time.monotonic())

    def on_error(self, error: Any) -> None:
        with self._lock:
            self.errors.append(error)

    def on_close(self) -> None:
        pass

    def arrivals(self) -> list[tuple[str, float]]:
        """Each text message with when it arrived, in arrival order."""
        with self._lock:
            pairs = list(zip(self.messages, self.arrival_times, strict=True))
        return [(text, at) for message, at in pairs for text in texts([message])]


@dataclass
class User:
    name: str
    key: SigningKey
    db_path: Path
    node_url: str
    gateway_url: str
    client: Any = None
    streams: list[Any] = field(default_factory=list)
    # An xmtp.FfiAuthHandle holding the gateway's API key or JWT; None: no credential sent.
    auth: Any = None

    @property
    def identifier(self) -> Any:
        return xmtp.FfiIdentifier(
            identifier="0x" + self.key.address.hex(),
            identifier_kind=xmtp.FfiIdentifierKind.ETHEREUM,
        )

    @property
    def inbox_id(self) -> str:
        return str(self.client.inbox_id())

    async def connect(self) -> None:
        """A new API connection (GetNodes, then the fastest healthy node for reads) and a
        client on this user's database; registers the inbox the first time."""
        api = await xmtp.connect_to_backend(
            self.node_url, self.gateway_url, False, None, APP_VERSION, None, self.auth
        )
        inbox_id = xmtp.generate_inbox_id(self.identifier, 0)
        db = xmtp.DbOptions(
            db=str(self.db_path), encryption_key=None, max_db_pool_size=None, min_db_pool_size=None
        )
        self.client = await xmtp.create_client(
            api, api, db, inbox_id, self.identifier, 0, None, None, None, None
        )
        request = self.client.signature_request()
        if request is not None:
            text = await request.signature_text()
            # EIP-191 personal_sign by the account's Ethereum key.
            await request.add_ecdsa_signature(
                xmtp.ethereum_sign_recoverable(text.encode(), self.key.secret, True)
            )
            await self.client.register_identity(request)

    async def find(self, other: User) -> str:
        return await self.find_address("0x" + other.key.address.hex(), other.name)

    async def find_address(self, address: str, whose: str = "an account") -> str:
        """The inbox id registered for an Ethereum address, asked until the network knows."""
        identifier = xmtp.FfiIdentifier(
            identifier=address, identifier_kind=xmtp.FfiIdentifierKind.ETHEREUM
        )

        async def lookup() -> str | None:
            found: str | None = await self.client.find_inbox_id(identifier)
            return found

        return await until(f"{self.name} finds {whose}'s inbox", lookup)

    async def group(self, group_id: bytes) -> Any:
        async def synced() -> Any:
            await self.client.conversations().sync()
            try:
                return self.client.conversation(group_id)
            except xmtp.FfiError:
                return None

        return await until(f"{self.name} sees group {group_id.hex()}", synced)

    async def read(self, group: Any, expected: list[str]) -> list[str]:
        """Syncs the group until it holds `expected` (in that order) and returns its texts."""

        seen: list[str] = []

        async def has_all() -> list[str] | None:
            await group.sync()
            seen[:] = texts(await group.find_messages(list_options()))
            return list(seen) if seen == expected else None

        try:
            return await until(f"{self.name} reads {expected}", has_all)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last read {seen}") from None

    async def stream_all(self) -> MessageStream:
        stream = MessageStream()
        closer = await self.client.conversations().stream_all_messages(stream, None)
        await closer.wait_for_ready()
        self.streams.append(closer)
        return stream

    def another_installation(self, name: str, gateway_url: str) -> User:
        """The same account on another device: same key, its own database."""
        return User(
            name, self.key, self.db_path.with_name(f"{name}.db3"), self.node_url, gateway_url
        )

    def close(self) -> None:
        """Ends streams and drops the client, so its background workers stop with it
        instead of retrying against a network that the next test has torn down."""
        for closer in self.streams:
            closer.end()
        self.streams.clear()
        if self.client is not None:
            self.client.release_db_connection()
            self.client = None
        gc.collect()


def new_user(name: str, directory: Path, node_url: str, gateway_url: str) -> User:
    directory.mkdir(parents=True, exist_ok=True)
    return User(name, SigningKey.generate(), directory / f"{name}.db3", node_url, gateway_url)
