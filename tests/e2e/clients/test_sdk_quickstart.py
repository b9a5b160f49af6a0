"""docs/clients.md's quickstart against a deployed gateway: TLS with a certificate of a
private CA, and an API key. The Python example (examples/first_conversation.py) and users of
the Node SDK (@xmtp/node-sdk 6.0.0, in its container: test_node_sdk.py says how) hold a
conversation through one gateway, trusting the CA through SSL_CERT_FILE (the SDKs' native TLS
reads it) and sending the key with their publishes, which are refused without it, so a
conversation proves it was sent. The browser's side is tests/e2e/browser."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from testcontainers.core.docker_client import DockerClient

from tests.e2e.clients.conftest import TlsGateway
from tests.e2e.clients.node_sdk_user import IMAGE_ENV, NodeSdk
from tests.support.docs_blocks import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
API_KEY = "quickstart-key-1"
EXAMPLE = ROOT / "examples" / "first_conversation.py"


def run_python_example(gateway: TlsGateway) -> str:
    """The example as docs/clients.md runs it: only the gateway's URL, the CA, the key."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--gateway", gateway.url],
        env={
            **os.environ,
            "SSL_CERT_FILE": str(gateway.ca_file),
            "XMTP_GATEWAY_API_KEY": API_KEY,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


async def test_python_and_node_sdks_over_tls_with_an_api_key(
    tls_gateways: Callable[[str | None], TlsGateway],
    node_sdk_image: str,
    docker_api: DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = tls_gateways(API_KEY)
    assert "bob reads: ['hello bob']" in run_python_example(gateway)

    monkeypatch.setenv(IMAGE_ENV, node_sdk_image)
    sdk = NodeSdk(ca_file=gateway.ca_file)
    ann, ben = (sdk.user(name, gateway.url, gateway.url, API_KEY) for name in ("ann", "ben"))
    try:
        await sdk.start()
        await ann.connect()
        await ben.connect()
        assert await ann.find(ben.address) == ben.inbox_id
        group_id = str((await ann.call("createGroup", inboxIds=[ben.inbox_id]))["groupId"])
        await ann.call("send", groupId=group_id, text="over tls")
        await ben.read(group_id, ["over tls"])
    finally:
        await sdk.close()
