"""The harness's network: one Postgres cluster (a database per node and run), anvil with the
contracts and every node registered, and `xnode run` processes, as `xnode devnet` makes them.
Each run gets fresh databases, so its reports are its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from xnode.core.crypto import SigningKey
from xnode.devtools.devchain import DevChain
from xnode.devtools.devnet import FUND_WEI, wait_serving
from xnode.devtools.postgres import PgCluster, free_port

NODE_IDS = (100, 200, 300, 400, 500)
# Short timeouts so that a run takes seconds; slow answers are judged past SLOW_S, missing
# ones at RESPONSE_S (XIP-49 3.2.7 t and T), both well above what a loaded machine adds.
SLOW_S, RESPONSE_S = 3.0, 8.0
NODE_SETTINGS = {
    "chain_poll_seconds": "0.1",
    "replication_response_timeout_seconds": str(RESPONSE_S),
    "replication_slow_seconds": str(SLOW_S),
    "replication_backoff_initial_seconds": "0.1",
    "replication_backoff_max_seconds": "0.5",
    "keepalive_seconds": "1.0",
    "replication_idle_timeout_seconds": "5.0",
    "workers": "1",
    "metrics_address": "",
    "log_format": "json",
}


class HarnessError(RuntimeError):
    """A part of the network did not start or a run did not reach its condition in time."""


@dataclass
class Network:
    """Nodes 100..500, registered once; `cluster` and `chain` outlive the runs."""

    directory: Path
    cluster: PgCluster
    chain: DevChain
    keys: dict[int, SigningKey]
    addresses: dict[int, str]
    dsns: dict[int, str] = field(default_factory=dict)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    run_dir: Path | None = None

    @classmethod
    def register(cls, directory: Path, cluster: PgCluster, chain: DevChain) -> Network:
        keys = {n: SigningKey.generate() for n in NODE_IDS}
        addresses = {n: f"127.0.0.1:{free_port()}" for n in NODE_IDS}
        planned = [(n, keys[n].public_key, f"http://{addresses[n]}") for n in NODE_IDS]
        chain.register(planned, FUND_WEI)
        network = cls(directory, cluster, chain, keys, addresses)
        network.registry_snapshot()
        return network

    def new_run(self, name: str) -> Path:
        """Fresh databases for every node and a directory for the run's logs and exports."""
        self.run_dir = self.directory / name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        suffix = uuid.uuid4().hex[:6]
        for node_id in NODE_IDS:
            self.dsns[node_id] = self.new_database(f"{name}_{node_id}_{suffix}")
        return self.run_dir

    def new_database(self, name: str) -> str:
        self.cluster.create_database(name)
        return self.cluster.dsn(name)

    def env(self, node_id: int, dsn: str | None = None) -> dict[str, str]:
        return {
            **os.environ,
            **self.chain.node_env(),
            **{f"XNODE_{k.upper()}": v for k, v in NODE_SETTINGS.items()},
            "XNODE_LISTEN_ADDRESS": self.addresses[node_id],
            "XNODE_DATABASE_DSN": dsn or self.dsns[node_id],
            "XNODE_SIGNER_KEY": self.keys[node_id].hex(),
        }

    def start(self, *node_ids: int) -> None:
        assert self.run_dir is not None, "new_run first"
        for node_id in node_ids:
            log = (self.run_dir / f"node-{node_id}.log").open("ab")
            self.processes[node_id] = subprocess.Popen(
                [sys.executable, "-m", "xnode.cli", "run"],
                env=self.env(node_id),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for node_id in node_ids:
            if not wait_serving(self.addresses[node_id], 90):
                raise HarnessError(f"node {node_id} did not start: see {self.log(node_id)}")

    def log(self, node_id: int) -> Path:
        assert self.run_dir is not None
        return self.run_dir / f"node-{node_id}.log"

    def stop(self, *node_ids: int) -> None:
        """SIGTERM (the node drains), then waits; every node when none is named."""
        chosen = node_ids or tuple(self.processes)
        for node_id in chosen:
            self.processes[node_id].send_signal(signal.SIGTERM)
        for node_id in chosen:
            proc = self.processes.pop(node_id)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    def watchdog_once(self, node_id: int) -> None:
        """One round of `xnode watchdog` beside the node, filing as the node."""
        env = self.env(node_id) | {"XNODE_WATCHDOG_AS_NODE": "true"}
        done = subprocess.run(
            [sys.executable, "-m", "xnode.cli", "watchdog", "--once"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"xnode watchdog failed: {done.stderr[-2000:]}")

    def dump(self, node_id: int) -> Path:
        """A backup of the node's database (pg_dump), as an operator takes one."""
        assert self.run_dir is not None
        dumped = self.run_dir / f"node-{node_id}.dump"
        subprocess.run(
            ["pg_dump", "-Fc", "-f", str(dumped), self.dsns[node_id]],
            check=True,
            capture_output=True,
        )
        return dumped

    def restore(self, node_id: int, dumped: Path) -> None:
        """The node's database becomes a new one restored from `dumped`."""
        assert self.run_dir is not None
        restored = self.new_database(f"{self.run_dir.name}_{node_id}_{uuid.uuid4().hex[:6]}")
        subprocess.run(
            ["pg_restore", "--no-owner", "-d", restored, str(dumped)],
            check=True,
            capture_output=True,
        )
        self.dsns[node_id] = restored

    @property
    def registry_file(self) -> Path:
        return self.directory / "registry.json"

    def registry_snapshot(self) -> Path:
        """`xnode chain registry-snapshot` to `registry_file`: the NodeRegistry's history the
        council judges against, as its operator would take it from the chain."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "xnode.cli",
                "chain",
                "registry-snapshot",
                "--rpc-url",
                self.chain.url,
                "--contracts-file",
                str(self.chain.contracts_file),
                "--out",
                str(self.registry_file),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"xnode chain registry-snapshot failed: {done.stderr[-2000:]}")
        return self.registry_file

    def export(self, node_id: int, out: Path) -> Path:
        """`xnode export` of the node's database, as its operator would run it."""
        done = subprocess.run(
            [sys.executable, "-m", "xnode.cli", "export", "--out", str(out)],
            env=self.env(node_id),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"xnode export of node {node_id} failed: {done.stderr[-2000:]}")
        return out / f"node-{node_id}"
