"""The Grafana dashboard and the alert rules against Debian's real Prometheus (issue 13).

Three `xnode run` processes (registry, indexing and publishing on a real anvil) serve metrics
on 127.0.0.1; one Prometheus scrapes them every second. Every query of every dashboard panel
must return data through Prometheus's HTTP API, so no panel names a metric or label that no
node serves. The alert rules pass `promtool check rules`, their unit test (`promtool test
rules`, synthetic series) and load in the running Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

import xnode.observability.metrics  # noqa: F401  (registers the process-wide metrics)
from tests.e2e.replication.conftest import ChainNetwork
from tests.support.waiting import eventually
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "docker/grafana/dashboards/xnode.json"
ALERTS = ROOT / "docker/prometheus/alerts.yml"
ALERTS_TEST = ROOT / "docker/prometheus/alerts.test.yml"
NODES = (100, 200, 300)
PAYER = SigningKey.generate()
GROUP = bytes([5]) * 16


def _install_prometheus() -> None:
    """Debian's prometheus package (server and promtool); fails, never skips, when it cannot."""
    if shutil.which("prometheus") and shutil.which("promtool"):
        return
    if os.geteuid() != 0:
        pytest.fail("Prometheus is not installed and this is not root: apt-get install prometheus")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # an old or missing package list: refresh it once
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not shutil.which("prometheus"):
        pytest.fail(f"apt-get install prometheus failed:\n{done.stdout[-2000:]}{done.stderr}")


@pytest.fixture(scope="module")
def prometheus_installed() -> None:
    _install_prometheus()


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel; the `node` variable as All."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"].replace("$node", ".+")))
    return found


def test_alert_rules_pass_promtool(prometheus_installed: None) -> None:
    for command in (["check", "rules", str(ALERTS)], ["test", "rules", str(ALERTS_TEST)]):
        done = subprocess.run(
            ["promtool", *command], capture_output=True, text=True, check=False, cwd=ALERTS.parent
        )
        assert done.returncode == 0, f"promtool {' '.join(command)}:\n{done.stdout}{done.stderr}"


class Prometheus:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])


@pytest.fixture
def prometheus(
    prometheus_installed: None, tmp_path: Path, chain_network: ChainNetwork
) -> Iterator[tuple[Prometheus, dict[int, str]]]:
    """One Prometheus (1 s scrapes, the alert rules loaded) for the network's metrics ports."""
    metrics = {n: f"127.0.0.1:{free_port()}" for n in NODES}
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [
                    {"job_name": "xnode", "static_configs": [{"targets": list(metrics.values())}]}
                ],
            }
        )
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Prometheus(f"http://127.0.0.1:{port}", log), metrics
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


async def _traffic(address: str, node_id: int, stop: asyncio.Event) -> None:
    """Publishes, queries and one refused request per round, until stopped."""
    async with NodeClient(address) as client:
        i = 0
        while not stop.is_set():
            with contextlib.suppress(grpc.aio.AioRpcError):
                await client.publish_group_messages(PAYER, node_id, GROUP, [b"%d" % i])
                await client.query(topics=[b"\x00" + GROUP], limit=10)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await client.publish([])  # malformed: counted as refused
            i += 1
            await asyncio.sleep(0.2)


async def test_every_dashboard_panel_returns_data_from_a_running_network(
    chain_network: ChainNetwork, prometheus: tuple[Prometheus, dict[int, str]]
) -> None:
    server, metrics = prometheus
    # 300 starts last, so its peers report it UNRESPONSIVE_NODE first: the misbehavior panel.
    for node_id in NODES:
        # 100 runs two workers: its one metrics port serves both, labelled by worker.
        workers = "2" if node_id == 100 else "1"
        chain_network.start(node_id, metrics_address=metrics[node_id], workers=workers)
    stop = asyncio.Event()
    loads = [asyncio.create_task(_traffic(chain_network.addresses[n], n, stop)) for n in NODES]
    try:
        await _scrapes_succeed(server)
        missing = await _panels_without_data(server, within_s=60)
    finally:
        stop.set()
        await asyncio.gather(*loads)
    assert not missing, "panels whose query returns no data:\n" + "\n".join(missing)
    await _alert_rules_loaded(server)


async def _scrapes_succeed(server: Prometheus) -> None:
    async def all_up() -> bool:
        try:
            data = await asyncio.to_thread(server.get, "/api/v1/targets")
        except OSError:  # not listening yet
            return False
        targets = data["activeTargets"]
        return len(targets) == len(NODES) and all(t["health"] == "up" for t in targets)

    try:
        await eventually(all_up, within_s=60)
    except AssertionError:
        raise AssertionError(
            f"Prometheus did not scrape every node:\n{server.log.read_text()[-3000:]}"
        ) from None


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(sample["value"][1])) for sample in result)


async def _panels_without_data(server: Prometheus, within_s: float) -> list[str]:
    """Queries every panel until each has answered with a number once, or time runs out."""
    waiting = dict.fromkeys(panel_queries(), True)
    deadline = time.monotonic() + within_s
    while waiting and time.monotonic() < deadline:
        for title, expr in list(waiting):
            if _has_data(await asyncio.to_thread(server.query, expr)):
                del waiting[(title, expr)]
        await asyncio.sleep(1)
    return [f"{title}: {expr}" for title, expr in waiting]


def _served_names() -> set[str]:
    """Every sample name the node's code defines (counters with labels appear only once
    incremented, so Prometheus may not have seen them yet)."""
    names = {"up"}
    for family in REGISTRY.collect():
        names |= {family.name + suffix for suffix in ("", "_total", "_count", "_sum", "_bucket")}
    # Served only by a node with TLS (test_tls.py scrapes it) or with a read replica
    # (server/gauges.py), which the nodes of this test are not.
    return names | {
        "xnode_tls_certificate_expiry_timestamp_seconds",
        "xnode_database_replica_lag_seconds",
    }


async def _alert_rules_loaded(server: Prometheus) -> None:
    data = await asyncio.to_thread(server.get, "/api/v1/rules")
    rules = [r for group in data["groups"] for r in group["rules"]]
    expected = set(re.findall(r"^\s*- alert: (\w+)", ALERTS.read_text(), re.MULTILINE))
    assert {r["name"] for r in rules} == expected
    assert all(r["health"] in ("ok", "unknown") for r in rules), rules
    scraped = set(await asyncio.to_thread(server.get, "/api/v1/label/__name__/values"))
    named = set(re.findall(r"\b(xnode_\w+|up)\b", ALERTS.read_text()))
    assert named <= scraped | _served_names(), named - scraped - _served_names()
