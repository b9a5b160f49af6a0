"""Which nodes answer now: every node of the registry is health-checked on a short period.

A killed node refuses connections, and its calls fail at once; a frozen or partitioned one
accepts bytes and answers nothing, so a read or a stream on it would wait without end. The
checks find both within about one period plus one timeout: the node is marked down (reads
and publishes try it last, see NodeChannels) and whatever waits on it is told to move on
(`went_down`). A check is an ordinary call, unlike HTTP/2 keepalive pings, which a node
answers with GOAWAY (too_many_pings) when they come more often than its policy allows.

A slow check is not a dead node: on a loaded host a check can miss its timeout while the
node works. A node that refuses the connection or says NOT_SERVING is down at once; one that
does not answer in time is down only after `failures_to_down` checks in a row missed. A check
that must first connect also waits for the handshakes (TCP and TLS, on a loaded host), so it
gets `connect_timeout_s`. And a call in flight is cut only while another node
answers its checks: with every node looking down, the one being tried is the best chance."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import grpc
import structlog
from grpc_health.v1 import health_pb2

from xnode.client.grpc_services import health_check
from xnode.core.originator_selection import available_nodes
from xnode.core.registry import NodeEntry
from xnode.gateway.channels import NodeChannels, UnusableUrl
from xnode.observability.metrics import GATEWAY_NODE_CHECKS
from xnode.usecases.concurrency import end_if_cancelled
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING


class NodeHealth:
    def __init__(
        self,
        registry: RegistrySource,
        channels: NodeChannels,
        period_s: float,
        timeout_s: float,
        failures_to_down: int = 2,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._registry = registry
        self._channels = channels
        self._period_s = period_s
        self._timeout_s = timeout_s
        self._failures_to_down = failures_to_down
        self._connect_timeout_s = max(connect_timeout_s, timeout_s)
        self._down: set[int] = set()
        self._missed: dict[int, int] = {}  # checks in a row that got no answer in time
        # One event per node, set when it fails a check; replaced when it answers again.
        self._outage: dict[int, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def is_down(self, node_id: int) -> bool:
        return node_id in self._down

    def went_down(self, node_id: int) -> asyncio.Event:
        """Set once `node_id` fails a check (at once if it is down now)."""
        event = self._outage.setdefault(node_id, asyncio.Event())
        if node_id in self._down:
            event.set()
        return event

    def cut_when_down(
        self, node_id: int, call: grpc.aio.Call
    ) -> contextlib.AbstractContextManager[asyncio.Event]:
        """Cancels `call` when `node_id` fails a check: a frozen node would never answer it.
        The event yielded tells a cancellation for that reason from any other. While no other
        node answers its checks the call is left to its own deadline: it is the last chance."""
        return cut_when(self.went_down(node_id), call, lambda: self.others_up(node_id))

    def others_up(self, node_id: int) -> bool:
        """Whether a node other than `node_id` answers its checks now."""
        nodes = available_nodes(self._registry.current())
        return any(n.node_id != node_id and n.node_id not in self._down for n in nodes)

    def report_failure(self, node_id: int) -> None:
        """A call failed as if the node were down: tried last until a check says otherwise."""
        self._channels.mark_down(node_id)

    async def _run(self) -> None:
        while True:
            nodes = available_nodes(self._registry.current())
            await asyncio.gather(*(self._check(node) for node in nodes))
            end_if_cancelled()
            await asyncio.sleep(self._period_s)

    async def _check(self, node: NodeEntry) -> None:
        try:
            channel = self._channels.channel(node.http_address)
            call = health_check(channel)
            connected = channel.get_state() is grpc.ChannelConnectivity.READY
            timeout = self._timeout_s if connected else self._connect_timeout_s
            reply = await call(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            failure = f"{exc.code().name}: {exc.details()}"
            if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                self._counted(node, "missed")
                self._missed_answer(node.node_id, failure)
            else:
                self._counted(node, "refused")
                self._mark(node.node_id, failure)
        except UnusableUrl as exc:
            self._counted(node, "refused")
            self._mark(node.node_id, str(exc))
        else:
            if reply.status == SERVING:
                self._counted(node, "serving")
                self._mark(node.node_id, None)
            else:
                self._counted(node, "not_serving")
                self._mark(node.node_id, f"health status {reply.status}")

    @staticmethod
    def _counted(node: NodeEntry, outcome: str) -> None:
        GATEWAY_NODE_CHECKS.labels(str(node.node_id), outcome).inc()

    def _missed_answer(self, node_id: int, failure: str) -> None:
        missed = self._missed[node_id] = self._missed.get(node_id, 0) + 1
        if missed >= self._failures_to_down:
            self._mark(node_id, f"{failure} ({missed} checks in a row)")

    def _mark(self, node_id: int, failure: str | None) -> None:
        if failure is None:
            self._missed.pop(node_id, None)
            if node_id in self._down:
                self._down.discard(node_id)
                self._outage.pop(node_id, None)
                self._channels.mark_up(node_id)
                log.info("gateway_node_up", node_id=node_id)
            return
        self._channels.mark_down(node_id)
        if node_id not in self._down:
            self._down.add(node_id)
            log.warning("gateway_node_down", node_id=node_id, error=failure)
        self.went_down(node_id).set()


@contextlib.contextmanager
def cut_when(
    event: asyncio.Event, call: grpc.aio.Call, allowed: Callable[[], bool] = lambda: True
) -> Iterator[asyncio.Event]:
    """Cancels `call` once `event` is set, while in the block, if `allowed()` then says so;
    yields the event."""
    watcher = asyncio.ensure_future(event.wait())
    watcher.add_done_callback(lambda done: done.cancelled() or (allowed() and call.cancel()))
    try:
        yield event
    finally:
        watcher.cancel()
