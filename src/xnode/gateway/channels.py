"""gRPC channels to the nodes, one per node URL, made on first use and closed when the
registry drops or moves the node."""

from __future__ import annotations

import time

import grpc
import structlog

from xnode.client.node import CHANNEL_OPTIONS
from xnode.core.registry import Registry
from xnode.tls import ClientTls

log = structlog.get_logger(__name__)


class UnusableUrl(ValueError):
    pass


def grpc_target(url: str) -> tuple[str, bool]:
    """host:port and whether TLS is on, from a registry URL ("http://h:p", "https://h:p")."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    if scheme not in ("http", "https", "grpc", "grpcs"):
        raise UnusableUrl(f"unsupported scheme {scheme!r} in node URL {url!r}")
    host = rest.rstrip("/")
    if not host:
        raise UnusableUrl(f"node URL {url!r} has no host")
    return host, scheme in ("https", "grpcs")


class NodeChannels:
    def __init__(self, max_message_bytes: int, down_s: float, tls: ClientTls | None = None) -> None:
        self._tls = tls or ClientTls()
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *[o for o in CHANNEL_OPTIONS if not o[0].startswith("grpc.max_")],
        ]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._down_until: dict[int, float] = {}
        self._down_s = down_s

    def channel(self, url: str) -> grpc.aio.Channel:
        channel = self._channels.get(url)
        if channel is None:
            target, secure = grpc_target(url)
            channel = (
                grpc.aio.secure_channel(target, self._tls.credentials(), self._options)
                if secure
                else grpc.aio.insecure_channel(target, self._options)
            )
            self._channels[url] = channel
        return channel

    def mark_down(self, node_id: int) -> None:
        """Remembers an outage for a while, so the next requests try that node last rather
        than waiting on it first."""
        self._down_until[node_id] = time.monotonic() + self._down_s

    def mark_up(self, node_id: int) -> None:
        self._down_until.pop(node_id, None)

    def recently_down(self, node_id: int) -> bool:
        return self._down_until.get(node_id, 0.0) > time.monotonic()

    async def retain(self, registry: Registry) -> None:
        """Closes channels to URLs the registry no longer names."""
        urls = {n.http_address for n in registry.nodes.values() if n.enabled}
        for url in [u for u in self._channels if u not in urls]:
            await self._channels.pop(url).close(None)
            log.info("gateway_channel_closed", url=url)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
