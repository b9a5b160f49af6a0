"""A user of the official Node SDK (`@xmtp/node-sdk` from npm, Node 22) in a podman container
on the host network, driven through node_sdk/user.mjs: one JSON command per line. The
account's key stays here; the script asks this side to sign. Runs in the scenario's process
(runner.py), which also holds the Python-bindings users."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import xmtp_bindings.xmtpv3 as xmtp

from xnode.core.crypto import SigningKey

SCRIPT = Path(__file__).resolve().parent / "node_sdk" / "user.mjs"
IMAGE_ENV = "XNODE_NODE_SDK_IMAGE"  # set by the test to the image it built
PREFIX = "XNODE "
COMMAND_TIMEOUT_S = 120.0


class NodeSdkUser:
    def __init__(self, name: str, node_url: str, gateway_url: str) -> None:
        self.name = name
        self.key = SigningKey.generate()
        self.node_url = node_url
        self.gateway_url = gateway_url
        self.container = f"xnode-node-sdk-{name}-{uuid.uuid4().hex[:8]}"
        self.inbox_id = ""
        self._proc: asyncio.subprocess.Process | None = None
        self._output: list[str] = []  # everything the container printed, for failures

    @property
    def address(self) -> str:
        return "0x" + self.key.address.hex()

    async def start(self) -> None:
        image = os.environ[IMAGE_ENV]
        self._proc = await asyncio.create_subprocess_exec(
            "podman", "run", "--rm", "-i", "--name", self.container, "--ulimit", "host",
            "--network", "host", "-v", f"{SCRIPT}:/opt/xnode-node-sdk/user.mjs:ro",
            image, "user.mjs",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    async def connect(self) -> dict[str, Any]:
        """Client.create: registers the inbox (the SDK's identity update goes through the
        gateway to the chain)."""
        reply = await self.call(
            "create",
            apiUrl=self.node_url,
            gatewayHost=self.gateway_url,
            address=self.address,
            dbPath=f"/tmp/{self.name}.db3",
        )
        self.inbox_id = str(reply["inboxId"])
        return reply

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Sends one command, answers the script's signing requests, returns its answer."""
        await self._send({"op": op, **args})
        while True:
            message = await self._receive(op)
            if "sign" in message:
                signature = xmtp.ethereum_sign_recoverable(
                    str(message["sign"]).encode(), self.key.secret, True
                )
                await self._send({"signature": bytes(signature).hex()})
                continue
            if not message.get("ok"):
                raise AssertionError(f"node sdk {self.name} {op}: {message.get('error')}")
            return message

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self._proc.stdin.drain()

    async def _receive(self, op: str) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            try:
                line = await asyncio.wait_for(self._proc.stdout.readline(), COMMAND_TIMEOUT_S)
            except TimeoutError:
                raise AssertionError(
                    f"node sdk {self.name} {op}: no answer\n{self.log()}"
                ) from None
            if not line:
                raise AssertionError(f"node sdk {self.name} exited during {op}:\n{self.log()}")
            text = line.decode(errors="replace").rstrip("\n")
            if text.startswith(PREFIX):
                parsed: dict[str, Any] = json.loads(text[len(PREFIX) :])
                return parsed
            self._output.append(text)

    def log(self) -> str:
        return "\n".join(self._output[-60:])

    async def close(self) -> None:
        if self._proc is None:
            return
        if self._proc.returncode is None:
            try:
                await self._send({"op": "exit"})
                await asyncio.wait_for(self._proc.wait(), 30)
            except (TimeoutError, ConnectionError):
                remove = await asyncio.create_subprocess_exec(
                    "podman", "rm", "-f", "-t", "0", self.container
                )  # fmt: skip
                await remove.wait()
                await self._proc.wait()
        self._proc = None

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
