"""A first conversation through a running `xnode devnet`, with the official client library
(libxmtp through PyPI's `xmtp-bindings`, installed by `make setup`).

Alice and Bob each get an Ethereum key and an inbox; Alice makes a group with Bob and says
hello; Bob syncs and reads it. Every publish goes through the gateway, and every read too
(its GetNodes names itself), exactly as a real application's would.

    .venv/bin/python examples/first_conversation.py [--devnet .xnode/devnet.json]

Against a deployed gateway (https://, an API key; a private CA's certificate is trusted
through SSL_CERT_FILE):

    SSL_CERT_FILE=ca.pem XMTP_GATEWAY_API_KEY=... .venv/bin/python \
        examples/first_conversation.py --gateway https://gateway.example.com:5040
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

# The library logs through RUST_LOG; at its default it prints hundreds of INFO lines around
# the conversation. RUST_LOG=info shows them again.
os.environ.setdefault("RUST_LOG", "warn")

import xmtp_bindings.xmtpv3 as xmtp

from xnode.core.crypto import SigningKey

READ_WITHIN_S = 30.0
# Every option unset: the library's defaults (its options have no defaults of their own).
LIST_ALL = dict.fromkeys(
    [
        "sent_before_ns",
        "sent_after_ns",
        "limit",
        "delivery_status",
        "direction",
        "content_types",
        "exclude_content_types",
        "exclude_sender_inbox_ids",
        "sort_by",
        "inserted_after_ns",
        "inserted_before_ns",
    ]
)
GROUP_DEFAULTS = dict.fromkeys(
    [
        "permissions",
        "group_name",
        "group_image_url_square",
        "group_description",
        "custom_permission_policy_set",
        "message_disappearing_settings",
        "app_data",
    ]
)


async def gateway_credential(api_key: str | None) -> Any:
    """The gateway's API key (or JWT), which the library sends as `authorization: Bearer ...`
    with its PayerApi calls (publishes); None when the gateway takes publishes without one."""
    if api_key is None:
        return None
    handle: Any = xmtp.FfiAuthHandle  # its constructor is untyped in the bindings
    auth = handle()
    credential = xmtp.FfiCredential(name=None, value=f"Bearer {api_key}", expires_at_seconds=2**62)
    await auth.set(credential)
    return auth


async def connect(
    name: str, urls: tuple[str, str], directory: Path, api_key: str | None = None
) -> tuple[Any, SigningKey]:
    """A client with a new key and its own database; registers its inbox on the network."""
    key = SigningKey.generate()
    identifier = xmtp.FfiIdentifier(
        identifier="0x" + key.address.hex(), identifier_kind=xmtp.FfiIdentifierKind.ETHEREUM
    )
    auth = await gateway_credential(api_key)
    secure = urls[1].startswith("https://")  # one flag for both URLs
    api = await xmtp.connect_to_backend(*urls, secure, None, "xnode-example/1", None, auth)
    db = xmtp.DbOptions(
        db=str(directory / f"{name}.db3"),
        encryption_key=None,
        max_db_pool_size=None,
        min_db_pool_size=None,
    )
    inbox_id = xmtp.generate_inbox_id(identifier, 0)
    client = await xmtp.create_client(api, api, db, inbox_id, identifier, 0, *[None] * 4)
    request = client.signature_request()
    if request is not None:  # a new inbox: the account signs its creation (EIP-191)
        text = await request.signature_text()
        await request.add_ecdsa_signature(
            xmtp.ethereum_sign_recoverable(text.encode(), key.secret, True)
        )
        await client.register_identity(request)
    return client, key


def texts(messages: list[Any]) -> list[str]:
    return [
        xmtp.decode_text(m.content)
        for m in messages
        if m.kind == xmtp.FfiConversationMessageKind.APPLICATION
    ]


async def read(client: Any, group_id: bytes) -> list[str]:
    """Bob's view of the group once its welcome and the message have reached him."""
    deadline = asyncio.get_running_loop().time() + READ_WITHIN_S
    while True:
        await client.conversations().sync()
        try:
            group = client.conversation(group_id)
            await group.sync()
            found = texts(await group.find_messages(xmtp.FfiListMessagesOptions(**LIST_ALL)))
            if found:
                return found
        except xmtp.FfiError:
            pass  # not welcomed yet
        if asyncio.get_running_loop().time() > deadline:
            raise SystemExit(f"Bob read nothing within {READ_WITHIN_S:.0f}s")
        await asyncio.sleep(0.2)


async def converse(urls: tuple[str, str], api_key: str | None, directory: Path) -> None:
    alice, _ = await connect("alice", urls, directory, api_key)
    bob, _ = await connect("bob", urls, directory, api_key)
    print(f"alice {alice.inbox_id()}\nbob   {bob.inbox_id()}")
    options = xmtp.FfiCreateGroupOptions(**GROUP_DEFAULTS)
    group = await alice.conversations().create_group([bob.inbox_id()], options)
    await group.send_text("hello bob")
    print("alice -> group:", "hello bob")
    print("bob reads:", await read(bob, group.id()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devnet", default=".xnode/devnet.json", help="written by xnode devnet")
    parser.add_argument("--gateway", help="the gateway's gRPC URL (default: the devnet's)")
    parser.add_argument(
        "--node", help="a node's gRPC URL (default: the devnet's first; with --gateway, it)"
    )
    args = parser.parse_args()
    if args.gateway:
        urls = (args.node or args.gateway, args.gateway)
    else:
        devnet = json.loads(Path(args.devnet).read_text())
        urls = (args.node or devnet["nodes"][0]["url"], devnet["gateway"]["url"])
    api_key = os.environ.get("XMTP_GATEWAY_API_KEY") or None
    with tempfile.TemporaryDirectory(prefix="xnode-example-") as directory:
        asyncio.run(converse(urls, api_key, Path(directory)))


if __name__ == "__main__":
    main()
