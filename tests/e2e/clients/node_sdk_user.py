"""Users of the official Node SDK (`@xmtp/node-sdk` from npm, Node 22), several in one
container on the host network (`NodeSdk`: a container costs seconds to start), started with
testcontainers through podman's Docker API (the session's `docker_api` fixture sets
DOCKER_HOST, which the scenario's process inherits) and driven through node_sdk/user.mjs over
HTTP: one JSON message per POST, naming its user, answered with the next JSON answer. The
accounts' keys stay here; the script asks this side to sign. Runs in the scenario's process
(runner.py), which also holds the Python-bindings users."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import xmtp_bindings.xmtpv3 as xmtp
from testcontainers.core.container import DockerContainer

from tests.support.waiting import eventually
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port

SCRIPT = Path(__file__).resolve().parent / "node_sdk" / "user.mjs"
IMAGE_ENV = "XNODE_NODE_SDK_IMAGE"  # set by the test to the image it built
CA_FILE = "/etc/xnode-test/ca.pem"  # where a private CA's certificate is mounted
COMMAND_TIMEOUT_S = 120.0
LOG_LINES = 120  # of the container's output shown with a failure (every user's lines)


class NodeSdk:
    """The container of the SDK's users. The script runs one command at a time, and a
    signing request must be answered before anything else is sent, so a command holds the
    line from its request to its answer."""

    def __init__(self, ca_file: Path | None = None) -> None:
        self._ca_file = ca_file  # trusted through SSL_CERT_FILE, read by the SDK's native TLS
        self._port = free_port()
        self._url = f"http://127.0.0.1:{self._port}/"
        self._container: DockerContainer | None = None
        self._http: aiohttp.ClientSession | None = None
        self._line = asyncio.Lock()
        self._output = ""  # what the container printed, kept for failures once it is gone

    def user(
        self, name: str, node_url: str, gateway_url: str, api_key: str | None = None
    ) -> NodeSdkUser:
        return NodeSdkUser(self, name, node_url, gateway_url, api_key)

    async def start(self) -> None:
        container = (
            DockerContainer(os.environ[IMAGE_ENV])
            .with_command("user.mjs")
            .with_env("XNODE_NODE_SDK_PORT", str(self._port))
            .with_volume_mapping(str(SCRIPT), "/opt/xnode-node-sdk/user.mjs", "ro")
            .with_kwargs(network_mode="host")
        )
        if self._ca_file is not None:
            container.with_volume_mapping(str(self._ca_file), CA_FILE, "ro")
            container.with_env("SSL_CERT_FILE", CA_FILE)
        self._container = container
        await asyncio.to_thread(container.start)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=COMMAND_TIMEOUT_S))
        try:
            await eventually(self._listening, 60, "node sdk listening")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    async def _listening(self) -> bool:
        assert self._http is not None
        try:
            async with self._http.get(self._url) as reply:
                return reply.status == 200
        except aiohttp.ClientConnectionError:
            return False

    async def call(self, user: NodeSdkUser, op: str, **args: Any) -> dict[str, Any]:
        """Sends one command of `user`'s, answers the script's signing requests with its
        key, returns the answer."""
        who = f"{user.name} {op}"
        async with self._line:
            message = await self._exchange(who, {"op": op, "user": user.name, **args})
            while "sign" in message:
                signature = xmtp.ethereum_sign_recoverable(
                    str(message["sign"]).encode(), user.key.secret, True
                )
                message = await self._exchange(who, {"signature": bytes(signature).hex()})
        if not message.get("ok"):
            raise AssertionError(f"node sdk {who}: {message.get('error')}")
        return message

    async def _exchange(self, who: str, message: dict[str, Any]) -> dict[str, Any]:
        assert self._http is not None
        try:
            async with self._http.post(self._url, json=message) as reply:
                answer: dict[str, Any] = await reply.json()
                return answer
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AssertionError(f"node sdk {who}: no answer ({exc!r})\n{self.log()}") from None

    def log(self) -> str:
        """The container's last output lines (the SDK logs there)."""
        if self._container is not None and self._container.get_wrapped_container() is not None:
            out, err = self._container.get_logs()
            self._output = (out + err).decode(errors="replace")
        return "\n".join(self._output.splitlines()[-LOG_LINES:])

    async def close(self) -> None:
        """Removes the container (killed: the SDK keeps nothing the test needs)."""
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._container is not None:
            self.log()
            await asyncio.to_thread(self._container.stop)
            self._container = None


class NodeSdkUser:
    """One account with its own client (and database) in the SDK's container."""

    def __init__(
        self, sdk: NodeSdk, name: str, node_url: str, gateway_url: str, api_key: str | None
    ) -> None:
        self.sdk = sdk
        self.api_key = api_key  # the gateway's, sent with publishes when set
        self.name = name
        self.key = SigningKey.generate()
        self.node_url = node_url
        self.gateway_url = gateway_url
        self.inbox_id = ""

    @property
    def address(self) -> str:
        return "0x" + self.key.address.hex()

    async def connect(self) -> dict[str, Any]:
        """Client.create: registers the inbox (the SDK's identity update goes through the
        gateway to the chain)."""
        reply = await self.call(
            "create",
            apiUrl=self.node_url,
            gatewayHost=self.gateway_url,
            apiKey=self.api_key,
            address=self.address,
            dbPath=f"/tmp/{self.name}.db3",
        )
        self.inbox_id = str(reply["inboxId"])
        return reply

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        return await self.sdk.call(self, op, **args)

    async def stream(self) -> None:
        """Opens the live stream of every conversation's messages (streamAllMessages)."""
        await self.call("stream")

    async def streamed(self) -> tuple[list[tuple[str, float]], list[str]]:
        """The live stream's texts with when each arrived (on time.monotonic(): the
        container shares this host's clock), and what the SDK reported going wrong on it."""
        reply = await self.call("streamed")
        offset = time.time() - time.monotonic()
        arrivals = [(str(m["text"]), m["at"] / 1000 - offset) for m in reply["messages"]]
        return arrivals, [str(t) for t in reply["trouble"]]

    async def find(self, address: str, within_s: float = 30.0) -> str:
        """The inbox id registered for `address`, asked of the network until it answers."""
        return str(await self._until("find", {"address": address}, "inboxId", None, within_s))

    async def read(self, group_id: str, expected: list[str], within_s: float = 60.0) -> None:
        """Syncs the group until its text messages are `expected`, in that order."""
        await self._until("read", {"groupId": group_id}, "texts", expected, within_s)

    async def _until(
        self, op: str, args: dict[str, Any], key: str, expected: Any, within_s: float
    ) -> Any:
        deadline = asyncio.get_running_loop().time() + within_s
        last: Any = None
        while True:
            try:
                last = (await self.call(op, **args))[key]
            except AssertionError as exc:  # the SDK's transient errors: retried to the deadline
                last = exc
            else:
                if (expected is None and last) or (expected is not None and last == expected):
                    return last
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"node sdk {self.name} {op} {args}: last {last}")
            await asyncio.sleep(0.3)
