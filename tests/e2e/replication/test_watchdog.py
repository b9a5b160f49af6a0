"""`xnode watchdog` beside node 100 of a three-node network on anvil and Postgres: nothing
reported while every node is up (one paused for less than the slow threshold, an honest chain
payload served); an UNRESPONSIVE_NODE report, with the query it made, once node 300 is
stopped (SIGSTOP)."""

from __future__ import annotations

import asyncio
import os
import signal

from tests.conftest import NodeProcess
from tests.e2e.replication.conftest import ChainNetwork
from tests.integration.chain.helpers import commit_envelope, publish
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core import misbehavior

NODES = (100, 200, 300)
TIMEOUT_S, SLOW_S = 4.0, 2.5
WATCHDOG = {
    "watchdog_as_node": "true",
    "watchdog_interval_seconds": "0.3",
    "watchdog_timeout_seconds": str(TIMEOUT_S),
    "watchdog_slow_seconds": str(SLOW_S),
}


def watchdog_reports(
    answer: mb.QueryMisbehaviorReportsResponse,
) -> list[mb.UnsignedMisbehaviorReport]:
    """The watchdog's: liveness reports carrying a query (replication's carry a subscribe)
    and every safety report."""
    reports = [
        mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report)
        for r in answer.reports
    ]
    return [
        r
        for r in reports
        if r.WhichOneof("failure") == "safety" or r.liveness.WhichOneof("request") == "query"
    ]


def rounds(watchdog: NodeProcess) -> int:
    return watchdog.output().count("watchdog_round")


async def test_watchdog_reports_a_stopped_node_and_nobody_while_all_are_up(
    chain_network: ChainNetwork,
) -> None:
    chain_network.start(*NODES)
    async with NodeClient(chain_network.addresses[200]) as client:
        await publish(client, 200, [commit_envelope(bytes(range(16)))])
    watchdog = chain_network.spawn(
        chain_network.dsns[100],
        chain_network.spec,
        100,
        wait=False,
        command="watchdog",
        **chain_network.env(**WATCHDOG),
    )
    stopped = chain_network.processes[300].proc.pid
    async with NodeClient(chain_network.addresses[100]) as host:

        async def filed() -> list[mb.UnsignedMisbehaviorReport]:
            answer = await host.misbehavior.QueryMisbehaviorReports(
                mb.QueryMisbehaviorReportsRequest()
            )
            return watchdog_reports(answer)

        async def ran(count: int) -> bool:
            assert watchdog.proc.poll() is None, watchdog.output()[-3000:]
            return rounds(watchdog) >= count

        await eventually(lambda: ran(3), 60)
        os.kill(stopped, signal.SIGSTOP)  # slow but live: paused well under the slow threshold
        await asyncio.sleep(0.8)
        os.kill(stopped, signal.SIGCONT)
        after = rounds(watchdog) + 3
        await eventually(lambda: ran(after), 60)
        assert await filed() == [], watchdog.output()[-3000:]

        os.kill(stopped, signal.SIGSTOP)
        try:

            async def reported() -> bool:
                return any(r.misbehaving_node_id == 300 for r in await filed())

            await eventually(reported, 60)
        finally:
            os.kill(stopped, signal.SIGCONT)
        (report,) = [r for r in await filed() if r.misbehaving_node_id == 300][:1]
    assert report.type == misbehavior.UNRESPONSIVE_NODE
    assert report.submitted_by_node
    assert report.liveness.response_time_ns >= TIMEOUT_S * 1e9 * 0.9
    assert set(report.liveness.query.query.originator_node_ids) >= {0, 1, *NODES}
    assert all(r.misbehaving_node_id == 300 for r in await _all(chain_network))
    assert '"event": "watchdog_report_filed"' in watchdog.output()


async def _all(network: ChainNetwork) -> list[mb.UnsignedMisbehaviorReport]:
    async with NodeClient(network.addresses[100]) as host:
        answer = await host.misbehavior.QueryMisbehaviorReports(mb.QueryMisbehaviorReportsRequest())
    return watchdog_reports(answer)
