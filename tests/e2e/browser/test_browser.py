"""A real browser: Debian's headless Chromium, driven by Playwright (PyPI) with the system
browser, opens a page bundled with `@xmtp/browser-sdk@7.1.0` (page/, esbuild). The page
creates a client through gRPC-web (a node's and the gateway's HTTP port), a Python-bindings
user makes a group with it, and the page shows the group's messages, reading through the
gateway's gRPC-web port, and goes on when the group's node is killed. The screenshot is saved
to tests/e2e/browser/artifacts/."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import xmtp_bindings.xmtpv3 as xmtp
from aiohttp import web

from tests.e2e.clients.conftest import TlsGateway, _spawn_gateway
from tests.e2e.clients.xmtp_users import group_options, new_user, until
from tests.e2e.replication.conftest import ChainNetwork
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.originator_selection import preferred_node
from xnode.core.registry import NodeEntry
from xnode.core.topics import Topic, TopicKind
from xnode.devtools.devnet import GATEWAY_READ_LIMITS, wait_serving
from xnode.devtools.postgres import free_port
from xnode.tls import ClientTls

pytestmark = pytest.mark.slow
PAGE = Path(__file__).parent / "page"
ARTIFACTS = Path(__file__).parent / "artifacts"
CONTENT_TYPES = {".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html"}


def system_chromium() -> str:
    """Debian's chromium; installed here when root, never downloaded by Playwright."""
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True)
        found = shutil.which("chromium")
    if found is None:
        pytest.fail("Debian's chromium is missing and this is not root: apt-get install chromium")
    return found


def nss_trusting(home: Path, ca_file: Path) -> Path:
    """A home directory whose NSS database (where Chromium on Linux looks for certificates
    a user added) trusts `ca_file` to issue servers' certificates."""
    certutil = shutil.which("certutil")
    if certutil is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "libnss3-tools"], check=True)
        certutil = shutil.which("certutil")
    if certutil is None:
        pytest.fail("certutil is missing and this is not root: apt-get install libnss3-tools")
    database = f"sql:{home / '.pki' / 'nssdb'}"
    (home / ".pki" / "nssdb").mkdir(parents=True)
    subprocess.run([certutil, "-N", "-d", database, "--empty-password"], check=True)
    trust = [certutil, "-A", "-d", database, "-n", "xnode test CA", "-t", "C,,", "-i"]
    subprocess.run([*trust, str(ca_file)], check=True)
    return home


def build_page() -> Path:
    subprocess.run([str(PAGE / "build.sh")], check=True)
    return PAGE / "dist"


@pytest.fixture
async def page_url() -> AsyncIterator[str]:
    """dist/ over HTTP; the SDK loads its workers without an extension (./workers/client)."""
    dist = build_page()

    async def serve(request: web.Request) -> web.StreamResponse:
        path = dist / request.match_info["path"]
        if not path.is_file():
            path = path.with_name(path.name + ".js")
        if not path.is_file() or dist not in path.resolve().parents:
            raise web.HTTPNotFound()
        content_type = CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        return web.FileResponse(path, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/{path:.*}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_browser_sdk_joins_a_python_users_group_over_grpc_web(
    chain_network: ChainNetwork, page_url: str, tmp_path: Path
) -> None:
    chromium = system_chromium()
    http = {n: f"127.0.0.1:{free_port()}" for n in chain_network.addresses}
    for node_id, address in http.items():
        chain_network.start(
            node_id, http_listen_address=address, http_cors_origins="*", **GATEWAY_READ_LIMITS
        )
    gateway_http = f"127.0.0.1:{free_port()}"
    gateway = _spawn_gateway(
        chain_network.chain,
        tmp_path,
        0,
        XNODE_GATEWAY_HTTP_LISTEN_ADDRESS=gateway_http,
        XNODE_GATEWAY_HTTP_CORS_ORIGINS="*",
        XNODE_GATEWAY_HTTP_NODE_URLS=",".join(f"{n}=http://{a}" for n, a in http.items()),
    )
    try:
        assert wait_serving(gateway.address, 60), gateway.output()[-3000:]
        node = f"http://{chain_network.addresses[200]}"  # the Python user's node (gRPC)
        await _conversation(
            chromium, page_url, http[100], gateway_http, (node, gateway.url), chain_network
        )
    finally:
        gateway.proc.kill()
        gateway.proc.wait(30)


async def _conversation(
    chromium: str,
    page_url: str,
    node_http: str,
    gateway_http: str,
    python_urls: tuple[str, str],
    network: ChainNetwork,
) -> None:
    """The page reads through the gateway's HTTP port (GetNodes there names it): when the
    group's node dies, the page goes on showing what the Python user sends."""
    from playwright.async_api import async_playwright

    key = SigningKey.generate()
    query = f"key=0x{key.hex()}&node=http://{node_http}&gateway=http://{gateway_http}"
    console: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        page, inbox = await registered_page(browser, f"{page_url}/index.html?{query}", console)
        alice = new_user("alice", network.spec.directory / "users", *python_urls)
        try:
            group = await _python_side(alice, key, inbox)

            def shown(last: str) -> Callable[[], Awaitable[str | None]]:
                async def probe() -> str | None:
                    text = await page.text_content("#messages") or ""
                    return text if last in text else None

                return probe

            messages = await until("the page shows the group", shown("from python"), 120)
            assert messages.splitlines() == ["hello browser", "from python"]
            topic = Topic(TopicKind.GROUP_MESSAGES, group.id()).raw
            network.kill(_preferred(network, topic))
            await group.send_text("after the node died")
            messages = await until("the page reads on", shown("after the node died"), 120)
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "browser-group.png"))
        finally:
            alice.close()
            await browser.close()
    assert messages.splitlines() == ["hello browser", "from python", "after the node died"]


async def registered_page(browser: Any, url: str, console: list[str]) -> tuple[Any, str]:
    """A new page at `url`, once its client registered: the page and the inbox it shows.
    The page's console lines go to `console`."""
    page = await browser.new_page()
    page.on("console", lambda m: console.append(m.text))
    await page.goto(url)

    async def registered() -> str | None:
        status = await page.text_content("#status")
        assert status is None or not status.startswith("error"), f"{status}; {console}"
        return await page.text_content("#inbox") or None

    return page, await until("the browser registers", registered, within_s=180)


def _preferred(network: ChainNetwork, topic: bytes) -> int:
    """The node the gateway reads (and publishes) the topic at while every node is up."""
    nodes = [NodeEntry(n, k.public_key, "") for n, k in sorted(network.spec.keys.items())]
    node = preferred_node(topic, nodes, ())
    assert node is not None
    return node


async def _python_side(alice: Any, browser_key: SigningKey, inbox: str) -> Any:
    await alice.connect()
    identifier = xmtp.FfiIdentifier(
        identifier="0x" + browser_key.address.hex(),
        identifier_kind=xmtp.FfiIdentifierKind.ETHEREUM,
    )

    async def found() -> str | None:
        result: str | None = await alice.client.find_inbox_id(identifier)
        return result

    assert await until("alice finds the browser", found) == inbox
    group = await alice.client.conversations().create_group([inbox], group_options())
    await group.send_text("hello browser")
    await group.send_text("from python")
    return group


async def test_browser_sdk_registers_through_a_tls_gateway_of_a_private_ca(
    tls_gateways: Callable[[str | None], TlsGateway], page_url: str, tmp_path: Path
) -> None:
    """docs/clients.md's browser quickstart against a deployed gateway: only its HTTP port's
    https:// URL (reads go through it too), its certificate's CA trusted by the browser (here
    Chromium's NSS database), and no API key: the SDK cannot send one."""
    from playwright.async_api import async_playwright

    chromium = system_chromium()
    gateway = tls_gateways(None)
    home = nss_trusting(tmp_path / "home", gateway.ca_file)
    key = SigningKey.generate()
    query = f"key=0x{key.hex()}&node={gateway.http_url}&gateway={gateway.http_url}"
    console: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox"],
            env={**os.environ, "HOME": str(home)},
        )
        try:
            _, inbox = await registered_page(browser, f"{page_url}/index.html?{query}", console)
        finally:
            await browser.close()
    # Registered: the network, asked through the gateway's gRPC port, knows the inbox.
    request = api.GetInboxIdsRequest(
        requests=[
            api.GetInboxIdsRequest.Request(
                identifier="0x" + key.address.hex(),
                identifier_kind=association_pb2.IDENTIFIER_KIND_ETHEREUM,
            )
        ]
    )
    async with NodeClient(gateway.url, ClientTls.from_files(gateway.ca_file)) as client:
        reply = await client.replication.GetInboxIds(request, timeout=30)
    assert reply.responses[0].inbox_id == inbox
