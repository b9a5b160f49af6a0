"""Shared fixtures: a real PostgreSQL cluster for the session, a fresh migrated database per
test, nodes started in-process, and `xnode run` subprocesses for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# A failed test prints the end of its processes' logs (tests/support/failure_logs.py).
from tests.e2e import image_builds
from tests.support.failure_logs import print_logs_if_failed, pytest_runtest_makereport  # noqa: F401
from tests.support.scratch import scratch_dir

# A timed-out test prints its event loop's pending tasks (tests/support/timeout_tasks.py).
from tests.support.timeout_tasks import pytest_timeout_set_timer  # noqa: F401
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.patroni import HaCluster, start_ha_cluster
from xnode.devtools.postgres import PgCluster, PostgresError, free_port, start_cluster
from xnode.store.migrate import upgrade_to_head

TEMPLATE = "xnode_template"


def pytest_collection_finish(session: pytest.Session) -> None:
    """The container images the collected tests need start building now, in the background
    (tests/e2e/image_builds.py)."""
    if session.config.option.collectonly:
        return
    log = scratch_dir("xnode-image-builds-") / "build.log"
    image_builds.start([item.nodeid for item in session.items], log)


# `make test` runs on two pytest-xdist workers (--dist loadgroup, scheduled by `Groups` below):
# a group runs whole, on one worker, in collection order. A module is a group, so its
# module-scoped fixtures (networks, images, clusters) start once. Some groups span modules:
# those sharing a session-scoped fixture that is costly to start twice (Spark's cluster, the
# chain tests' anvil), and those using the host's podman, whose image store and apt-get take
# turns anyway.
SHARED_GROUPS = {
    "tests/spark/": "spark",
    "tests/integration/chain/": "chain",
}
PODMAN_MODULES = {
    "tests/e2e/ops/test_container.py",
    "tests/e2e/clients/test_node_sdk.py",
    "tests/e2e/clients/test_sdk_quickstart.py",
}
PODMAN_FIXTURES = {"docker_api", "images", "node_sdk_image"}


def xdist_group(nodeid: str) -> str:
    """The group of a test, from its id alone (the scheduler sees nothing else)."""
    module = nodeid.partition("::")[0]
    if module in PODMAN_MODULES:
        return "podman"
    shared = [g for prefix, g in SHARED_GROUPS.items() if module.startswith(prefix)]
    return shared[0] if shared else module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's own loadgroup reads marks through an item attribute pytest 9 no longer
    has, so the groups are given to its scope scheduler here."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return Groups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module using podman is in PODMAN_MODULES, or two workers could run podman at once."""
    using = {
        item.nodeid.partition("::")[0]
        for item in items
        if PODMAN_FIXTURES & set(getattr(item, "fixturenames", ()))
    }
    if missing := using - PODMAN_MODULES:
        raise pytest.UsageError(f"tests/conftest.py: add {sorted(missing)} to PODMAN_MODULES")


# Property tests check what holds, not how fast: on a loaded CI machine an example may take
# longer than hypothesis' default 200 ms deadline without anything being wrong.
settings.register_profile("xnode", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("xnode")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    root = scratch_dir("xnode-pg-")
    try:
        cluster = start_cluster(root / "data", fsync=False)
    except PostgresError as exc:
        pytest.fail(f"PostgreSQL could not start, so database tests cannot run: {exc}")
    cluster.create_database(TEMPLATE)
    upgrade_to_head(cluster.dsn(TEMPLATE))
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def ha_root() -> Iterator[Path]:
    """A directory for a Patroni cluster, removed after."""
    root = scratch_dir("xnode-ha-")
    try:
        yield root / "ha"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_ha(root: Path, **options: Any) -> HaCluster:
    """start_ha_cluster, failing the test (never skipping) when it cannot start."""
    try:
        return start_ha_cluster(root, **options)
    except PostgresError as exc:
        pytest.fail(f"Patroni and etcd could not start (`make setup` installs them): {exc}")


@pytest.fixture
def ha_cluster() -> Iterator[HaCluster]:
    """etcd and two Patroni members (a primary and a synchronous standby), new for each test,
    so that no test meets the members another test left frozen, killed or rewound."""
    with ha_root() as root:
        cluster = start_ha(root)
        yield cluster
        cluster.stop()


@pytest.fixture
def database(pg_cluster: PgCluster) -> str:
    """A new database with the schema applied (copied from a migrated template)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_cluster.create_database(name, template=TEMPLATE)
    return pg_cluster.dsn(name)


def _databases(cluster: PgCluster) -> set[str]:
    listed = subprocess.run(
        ["psql", cluster.dsn(), "-tAc", "SELECT datname FROM pg_database"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(listed.stdout.split())


@pytest.fixture(autouse=True)
def _drop_the_tests_databases(request: pytest.FixtureRequest) -> Iterator[None]:
    """The databases a test created in the session's cluster are dropped after it: kept,
    a suite's databases and their WAL grew to many gigabytes, in memory (tests/support/scratch.py).
    Taken after the fixtures of wider scope are set up, so theirs are kept."""
    if "pg_cluster" not in request.fixturenames:
        yield
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    before = _databases(cluster)
    yield
    for name in sorted(_databases(cluster) - before):
        cluster.drop_database(name)


@asynccontextmanager
async def database_refusing(pg_cluster: PgCluster, dsn: str) -> AsyncIterator[None]:
    """The database of `dsn` takes no connection and those open are ended, as when its host is
    lost; it takes them again on exit."""
    import asyncpg

    name = dsn.rpartition("/")[2].partition("?")[0]
    admin = await asyncpg.connect(pg_cluster.dsn())
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
        )
        yield
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()


@pytest.fixture
def empty_database(pg_cluster: PgCluster) -> str:
    """A new database without the schema."""
    name = f"e_{uuid.uuid4().hex[:12]}"
    pg_cluster.create_database(name)
    return pg_cluster.dsn(name)


@dataclass
class NodeSpec:
    """Keys and a registry file for a set of nodes (ids 100, 200, ...)."""

    directory: Path
    keys: dict[int, SigningKey] = field(default_factory=dict)

    @property
    def nodes_file(self) -> Path:
        return self.directory / "nodes.json"

    def write(self, addresses: dict[int, str] | None = None) -> Path:
        registry = Registry(
            NodeEntry(n, k.public_key, f"http://{(addresses or {}).get(n, '')}")
            for n, k in self.keys.items()
        )
        self.nodes_file.write_text(registry.to_json())
        return self.nodes_file


@pytest.fixture
def node_spec(tmp_path: Path) -> NodeSpec:
    spec = NodeSpec(tmp_path, {100 * (i + 1): SigningKey.generate() for i in range(3)})
    spec.write()
    return spec


def node_settings(dsn: str, spec: NodeSpec, node_id: int = 100, **extra: Any) -> dict[str, Any]:
    return {
        "listen_address": "127.0.0.1:0",
        "database_dsn": dsn,
        "signer_key": spec.keys[node_id].hex(),
        "nodes_file": str(spec.nodes_file),
        "metrics_address": "",
        "keepalive_seconds": 30.0,
        **extra,
    }


@pytest.fixture
async def start_node() -> AsyncIterator[Callable[..., Any]]:
    """Starts nodes in this process (`await start_node(**settings)`); stops them after."""
    from xnode.config import Settings
    from xnode.server.wiring import Node
    from xnode.server.wiring import start_node as start

    started: list[Node] = []

    async def _start(**settings: Any) -> Node:
        node = await start(Settings(**settings))
        started.append(node)
        return node

    yield _start
    failed: list[BaseException] = []
    for node in started:  # every one, even after one failed: none is left running
        try:
            await node.stop()
        except Exception as exc:
            failed.append(exc)
    if failed:
        raise failed[0]


@dataclass
class NodeProcess:
    """An `xnode run` subprocess."""

    proc: subprocess.Popen[bytes]
    address: str
    log: Path

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def spawn_node(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., NodeProcess]]:
    processes: list[NodeProcess] = []

    def _spawn(
        dsn: str,
        spec: NodeSpec,
        node_id: int = 100,
        wait: bool = True,
        command: str = "run",
        source: Path | None = None,
        **extra: str,
    ) -> NodeProcess:
        """`command`: the xnode command run with the node's settings (`run`, `watchdog`).
        `source`: a directory of another release's packages (xnode, xmtp, xnode_api) run
        instead of this checkout's, with this environment's dependencies."""
        address = f"127.0.0.1:{free_port()}"
        env = {
            **os.environ,
            "XNODE_LISTEN_ADDRESS": address,
            "XNODE_DATABASE_DSN": dsn,
            "XNODE_SIGNER_KEY": spec.keys[node_id].hex(),
            "XNODE_NODES_FILE": str(spec.nodes_file),
            "XNODE_METRICS_ADDRESS": "",
            "XNODE_LOG_FORMAT": "json",
            "XNODE_WORKERS": "1",  # one process (tests/e2e/ops/test_workers.py runs more)
            **{f"XNODE_{k.upper()}": v for k, v in extra.items()},
            **({"PYTHONPATH": str(source)} if source is not None else {}),
        }
        name = "node" if command == "run" else command
        log = tmp_path / f"{name}-{node_id}-{len(processes)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "xnode.cli", command],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        node = NodeProcess(proc, address, log)
        processes.append(node)
        if wait and not wait_serving(address, 60):
            proc.kill()
            pytest.fail(f"xnode run did not start serving:\n{node.output()[-3000:]}")
        return node

    yield _spawn
    for node in processes:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(30)
    print_logs_if_failed(request, [node.log for node in processes])


# --- chain (issue 3): a fresh anvil with the contracts deployed, per test -----------------


@dataclass
class ChainEnv:
    """A fresh anvil (automine) with NodeRegistry, GroupMessages and IdentityUpdates deployed;
    the owner is anvil's first dev account."""

    anvil: Any
    contracts: Any
    contracts_file: Path
    w3: Any
    owner: Any

    @property
    def url(self) -> str:
        return str(self.anvil.url)

    def rpc(self, method: str, *params: Any) -> Any:
        from xnode.chain.anvil import rpc_call

        return rpc_call(self.url, method, list(params))

    def register(
        self, spec: NodeSpec, addresses: dict[int, str] | None = None, fund_wei: int = 10**21
    ) -> None:
        """Adds every node of `spec` (ids 100, 200, ... in order) and funds its signer's
        account, which pays for its chain publishes."""
        from xnode.chain.admin import add_node, node_address

        for node_id in sorted(spec.keys):
            key = spec.keys[node_id]
            http = f"http://{(addresses or {}).get(node_id, f'127.0.0.1:{free_port()}')}"
            got = add_node(self.w3, self.owner, self.contracts_file, key.public_key, http)
            assert got == node_id, f"registry gave id {got}, the spec expects {node_id}"
            self.rpc("anvil_setBalance", node_address(key.public_key), hex(fund_wei))

    def settings(self, **extra: Any) -> dict[str, Any]:
        """Node settings that use this chain for the registry, indexing and publishing."""
        return {
            "chain_rpc_url": self.url,
            "contracts_file": str(self.contracts_file),
            "registry_source": "chain",
            "chain_poll_seconds": 0.05,
            **extra,
        }


@pytest.fixture
def chain_env(tmp_path: Path) -> Iterator[ChainEnv]:
    """Fails (never skips) when anvil is missing: run `npm ci`."""
    from eth_account import Account
    from web3 import Web3

    from xnode.chain.anvil import AnvilNotInstalledError, find_anvil_binary, start_anvil
    from xnode.chain.contracts import deploy_all
    from xnode.chain.deployment import write_contracts_file
    from xnode.config import Settings

    root = Path(__file__).resolve().parents[1]
    try:
        binary = find_anvil_binary(root, Settings().anvil_bin)
    except AnvilNotInstalledError as exc:
        pytest.fail(f"{exc}\nThe chain tests need the pinned anvil: run `npm ci` in {root}.")
    anvil = start_anvil(binary=binary)
    try:
        w3 = Web3(Web3.HTTPProvider(anvil.url, request_kwargs={"timeout": 30}))
        owner = Account.from_key(anvil.private_keys[0])
        contracts = deploy_all(w3, owner)
        contracts_file = tmp_path / "contracts.json"
        write_contracts_file(contracts_file, contracts)
        yield ChainEnv(anvil, contracts, contracts_file, w3, owner)
    finally:
        anvil.stop()


# --- replication (issue 4): several databases and a network of nodes that know each other ----


@pytest.fixture
def new_database(pg_cluster: PgCluster) -> Callable[[], str]:
    """Makes databases like `database` on demand: one per node of a network."""

    def _make() -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        subprocess.run(
            ["psql", pg_cluster.dsn(), "-qc", f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}'],
            check=True,
            capture_output=True,
        )
        return pg_cluster.dsn(name)

    return _make


@dataclass
class Network:
    """Nodes 100, 200, 300 with fixed addresses in the registry file, a database each."""

    spec: NodeSpec
    addresses: dict[int, str]
    dsns: dict[int, str]

    def settings(self, node_id: int, **extra: Any) -> dict[str, Any]:
        """In-process node settings (`start_node(**network.settings(100))`)."""
        return node_settings(
            self.dsns[node_id],
            self.spec,
            node_id,
            listen_address=self.addresses[node_id],
            **{**REPLICATION_TEST_SETTINGS, **extra},
        )

    def set_enabled(self, node_id: int, enabled: bool) -> None:
        """Rewrites the registry file; nodes notice within their poll interval."""
        from xnode.core.registry import Registry

        registry = Registry.from_json(self.spec.nodes_file.read_text())
        entry = registry.nodes[node_id]
        registry.nodes[node_id] = NodeEntry(
            entry.node_id, entry.public_key, entry.http_address, enabled
        )
        self.spec.nodes_file.write_text(registry.to_json())


# Short timeouts so failures and fallbacks show within a test's patience.
REPLICATION_TEST_SETTINGS: dict[str, Any] = {
    "replication_response_timeout_seconds": 2.0,
    "replication_backoff_initial_seconds": 0.1,
    "replication_backoff_max_seconds": 0.5,
    "keepalive_seconds": 1.0,
    "replication_idle_timeout_seconds": 5.0,
}


@pytest.fixture
def network(node_spec: NodeSpec, new_database: Callable[[], str]) -> Network:
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    node_spec.write(addresses)
    return Network(node_spec, addresses, {n: new_database() for n in node_spec.keys})
