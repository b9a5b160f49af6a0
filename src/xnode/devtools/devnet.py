"""`xnode devnet`: a local network in one command.

A private Postgres cluster (one database per node), anvil with the contracts deployed and
every node registered in the NodeRegistry, and N replicating nodes, each with its own key,
ports and metrics. `--read-only-nodes M` adds M read-only nodes (XIP-49 3.4: unregistered,
they replicate and serve, and refuse publishes); `--two-chains` puts the NodeRegistry on a
second anvil apart from the payload contracts' (the XIP's L1 and app chain); `--ha` puts
node 100's database on Patroni (a primary and a synchronous standby, devtools.patroni).
Prints a table of endpoints and writes them, with node ids, keys, DSNs and contract addresses,
to `<dir>/devnet.json`. A node or the gateway that exits is reported and started again after a
backoff while the rest go on serving (devtools.supervisor; `--no-restart` leaves it down).
Ctrl-C stops everything and loses nothing: nodes drain, anvil dumps its
state to `<dir>/anvil-state.json` (loaded next time) and Postgres shuts down cleanly, so the
next run carries on where this one stopped.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2
from rich.console import Console
from rich.table import Table

from xnode.client.grpc_services import health_check
from xnode.config import write_private
from xnode.core.crypto import SigningKey
from xnode.core.fees import FeeSchedule
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.certs import devnet_ca
from xnode.devtools.devgateway import GATEWAY_HTTP_PORT, GATEWAY_PORT, spawn_gateway
from xnode.devtools.patroni import HaCluster, start_ha_cluster
from xnode.devtools.postgres import PgCluster, PostgresError, free_port, start_cluster
from xnode.devtools.processes import log_tail, spawn_xnode
from xnode.devtools.supervisor import Supervisor
from xnode.tls import ClientTls, open_blocking_channel, target_of

if TYPE_CHECKING:
    from xnode.devtools.devchain import DevChain

# Piped output (no terminal) is not cut to 80 columns: the table holds long DSNs.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

ANVIL_PORT = 8545  # what `xnode chain ...` talks to by default
METRICS_PORT = 9464
HTTP_PORT = 5150  # gRPC-web and JSON of node 100; 5151 for node 200, ...
FUND_WEI = 10**21  # 1000 ETH per node signer: chain publishes (commits, identity updates)
REGISTRY_CHAIN_ID = 31338  # --two-chains: the registry's anvil (the app chain is 31337)
# A node charges nothing by default; the devnet charges a small schedule so that the fees
# originators sign (XIP-49 3.2.1) show in every envelope, usage table and export.
DEVNET_FEES = FeeSchedule(
    envelope_picodollars=100,
    byte_day_picodollars=1,
    target_rate=1000,
    congestion_step_picodollars=1000,
    congestion_max_picodollars=10_000,
)


class DevnetError(RuntimeError):
    pass


@dataclass
class DevNode:
    node_id: int
    address: str  # host:port it listens on
    url: str  # its registry address: http:// or, with --tls, https://
    metrics: str
    http: str  # gRPC-web and JSON (/mls/v2/...)
    dsn: str
    key_file: str
    public_key: str
    private_key: str
    read_only: bool = False  # not in the registry; node_id 0

    @property
    def name(self) -> str:
        """node-100, ... or read-only-1, ...: its key, log and database are named after it."""
        return Path(self.key_file).stem


def _port_or_free(preferred: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_port()


def gateway_key_file(state: Path) -> Path:
    """The gateway's payer key, made on the first run."""
    path = state / "gateway.key"
    load_key(path)
    return path


def load_key(path: Path) -> SigningKey:
    if path.exists():
        return SigningKey.from_hex(path.read_text())
    key = SigningKey.generate()
    write_private(path, key.hex() + "\n")
    return key


def plan_nodes(
    state: Path,
    cluster: PgCluster,
    count: int,
    base_port: int,
    known: dict[int, NodeEntry] | None = None,
    tls: bool = False,
) -> list[DevNode]:
    """Keys, databases and ports for nodes 100, 200, ...; a node already registered keeps the
    address the registry has for it (on the chain, addresses never change, nor https://)."""
    scheme = "https" if tls else "http"
    nodes = []
    for i in range(count):
        node_id = 100 * (i + 1)
        key_file = state / f"node-{node_id}.key"
        key = load_key(key_file)
        registered = (known or {}).get(node_id)
        if registered is not None and registered.public_key != key.public_key:
            raise DevnetError(
                f"node {node_id} is registered with another key than {key_file}; "
                f"remove {state} to start a fresh network"
            )
        if registered is not None:
            address, secure = target_of(registered.http_address)
            if secure != tls:
                raise DevnetError(
                    f"node {node_id} is registered at {registered.http_address}; remove "
                    f"{state} to start a fresh network {'with' if tls else 'without'} TLS"
                )
        else:
            address = f"127.0.0.1:{_port_or_free(base_port + i)}"
        database = f"xnode_{node_id}"
        cluster.create_database(database)
        nodes.append(
            DevNode(
                node_id=node_id,
                address=address,
                url=f"{scheme}://{address}",
                metrics=f"127.0.0.1:{_port_or_free(METRICS_PORT + i)}",
                http=f"127.0.0.1:{_port_or_free(HTTP_PORT + i)}",
                dsn=cluster.dsn(database),
                key_file=str(key_file),
                public_key="0x" + key.public_key.hex(),
                private_key="0x" + key.hex(),
            )
        )
    return nodes


def plan_read_only(state: Path, cluster: PgCluster, count: int) -> list[DevNode]:
    """Read-only nodes: a key each (kept, so their tokens name the same address each run),
    a database, and free ports; they are never registered."""
    nodes = []
    for i in range(1, count + 1):
        key_file = state / f"read-only-{i}.key"
        key = load_key(key_file)
        database = f"xnode_read_only_{i}"
        cluster.create_database(database)
        address = f"127.0.0.1:{free_port()}"
        nodes.append(
            DevNode(
                node_id=0,
                address=address,
                url=f"http://{address}",
                metrics=f"127.0.0.1:{free_port()}",
                http=f"127.0.0.1:{free_port()}",
                dsn=cluster.dsn(database),
                key_file=str(key_file),
                public_key="0x" + key.public_key.hex(),
                private_key="0x" + key.hex(),
                read_only=True,
            )
        )
    return nodes


def write_registry_file(state: Path, nodes: list[DevNode]) -> Path:
    """The same registry as a static file, for `--registry file`."""
    registry = Registry(NodeEntry(n.node_id, bytes.fromhex(n.public_key[2:]), n.url) for n in nodes)
    path = state / "nodes.json"
    path.write_text(registry.to_json())
    return path


def tls_env(state: Path, nodes: list[DevNode]) -> dict[int, dict[str, str]]:
    """A throwaway CA (kept in <dir>/tls) and a certificate for each node: every node serves
    TLS, checks its peers against the CA and shows its certificate to peers that ask."""
    directory = state / "tls"
    ca = devnet_ca(directory)
    ca_file = str(directory / "ca.pem")
    env = {}
    for node in nodes:
        cert_file, key_file = ca.issue_files(directory, f"node-{node.node_id}")
        env[node.node_id] = {
            "XNODE_TLS_CERT_FILE": str(cert_file),
            "XNODE_TLS_KEY_FILE": str(key_file),
            "XNODE_TLS_CLIENT_CA_FILE": ca_file,
            "XNODE_TLS_PEER_CA_FILE": ca_file,
        }
    return env


def gateway_tls_env(state: Path) -> dict[str, str]:
    """With --tls the gateway checks the nodes against the devnet's CA and serves its own
    certificate of that CA on its gRPC and HTTP ports."""
    directory = state / "tls"
    cert_file, key_file = devnet_ca(directory).issue_files(directory, "gateway")
    return {
        "XNODE_TLS_CA_FILE": str(directory / "ca.pem"),
        "XNODE_TLS_CERT_FILE": str(cert_file),
        "XNODE_TLS_KEY_FILE": str(key_file),
    }


def fee_env(fees: FeeSchedule) -> dict[str, str]:
    """The settings that make a node charge `fees`."""
    return {
        "XNODE_FEE_ENVELOPE_PICODOLLARS": str(fees.envelope_picodollars),
        "XNODE_FEE_BYTE_DAY_PICODOLLARS": str(fees.byte_day_picodollars),
        "XNODE_FEE_TARGET_RATE": str(fees.target_rate),
        "XNODE_FEE_CONGESTION_STEP_PICODOLLARS": str(fees.congestion_step_picodollars),
        "XNODE_FEE_CONGESTION_MAX_PICODOLLARS": str(fees.congestion_max_picodollars),
    }


def describe_fees(fees: FeeSchedule) -> str:
    return (
        f"Fees (picodollars): {fees.envelope_picodollars} per envelope + "
        f"{fees.byte_day_picodollars} per payer-envelope byte per retention day; congestion "
        f"{fees.congestion_step_picodollars} per 100% over {fees.target_rate} envelopes/s, "
        f"at most {fees.congestion_max_picodollars}"
    )


# The gateway calls the nodes from this address and names each client it calls for in
# x-forwarded-for, which the nodes believe of it (docs/gateway.md "Client addresses").
GATEWAY_ADDRESS = "127.0.0.1"
# On one host that address is also every client's own: every client of the gateway is still
# one caller to the nodes' per-IP limits, so the read limits are raised for it.
GATEWAY_READ_LIMITS = {
    "limit_query_requests_per_second": "1000",
    "limit_subscribe_requests_per_second": "100",
    "limit_subscriptions_per_ip": "5000",
    "grpc_calls_per_ip": "5000",
}


def _spawn(
    node: DevNode, registry_env: dict[str, str], state: Path, tls: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **fee_env(DEVNET_FEES),
        **registry_env,
        **tls,
        "XNODE_LISTEN_ADDRESS": node.address,
        "XNODE_DATABASE_DSN": node.dsn,
        "XNODE_SIGNER_KEY_FILE": node.key_file,
        "XNODE_METRICS_ADDRESS": node.metrics,
        "XNODE_HTTP_LISTEN_ADDRESS": node.http,
        "XNODE_HTTP_CORS_ORIGINS": "*",  # a development network: any page may call it
        "XNODE_WORKERS": "1",  # its nodes share one machine: one process each is enough
        **({"XNODE_READ_ONLY": "true"} if node.read_only else {}),
        **{f"XNODE_{k.upper()}": v for k, v in GATEWAY_READ_LIMITS.items()},
        "XNODE_TRUSTED_PROXIES": GATEWAY_ADDRESS,
    }
    return spawn_xnode("run", env, state / f"{node.name}.log")


def wait_serving(
    address: str,
    timeout_s: float = 60.0,
    tls: ClientTls | None = None,
    process: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Whether the node at `address` (host:port, or https://host:port checked with `tls`)
    says SERVING within `timeout_s`; False at once when its `process` exits."""
    deadline = time.monotonic() + timeout_s
    with open_blocking_channel(address, tls) as channel:
        check = health_check(channel)
        while time.monotonic() < deadline and (process is None or process.poll() is None):
            try:
                reply = check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    return False


def _tls_of(node: DevNode, client_tls: ClientTls | None) -> ClientTls | None:
    return None if node.read_only else client_tls


def _print_table(
    nodes: list[DevNode],
    cluster: PgCluster,
    chain_url: str,
    state: Path,
    gateway: tuple[str, str],
    ca_file: Path | None,
) -> None:
    table = Table(title="xnode devnet")
    scheme = "https" if ca_file else "http"
    for column in ("node id", "gRPC", "gRPC-web and JSON", "metrics", "database"):
        table.add_column(column)
    for n in nodes:
        node_scheme = "http" if n.read_only else scheme  # read-only nodes serve plaintext
        metrics = f"{node_scheme}://{n.metrics}/metrics"
        grpc_address = n.url if ca_file and not n.read_only else n.address
        name = n.name if n.read_only else str(n.node_id)
        table.add_row(name, grpc_address, f"{node_scheme}://{n.http}", metrics, n.dsn)
    table.add_row(
        "gateway",
        f"https://{gateway[0]}" if ca_file else gateway[0],
        f"{scheme}://{gateway[1]}",
        "",
        "(PayerApi: clients publish and read here)",
    )
    console.print(table)
    console.print(
        f"Postgres: {cluster.dsn()}  chain: {chain_url}  logs: {state}/node-*.log, gateway.log"
    )
    console.print(describe_fees(DEVNET_FEES))
    console.print(f"Keys, DSNs and contract addresses: {state / 'devnet.json'}")
    console.print(
        "Try: xnode publish --node-id 100 --node "
        + (f"{nodes[0].url} --ca-file {ca_file}" if ca_file else nodes[0].address)
        + " --group-id 00112233445566778899aabbccddeeff --message hi"
    )
    console.print("Ctrl-C stops the network.")


def _describe(
    nodes: list[DevNode], cluster: PgCluster, chain: dict[str, object], ca_file: Path | None
) -> str:
    return json.dumps(
        {
            "postgres": cluster.dsn(),
            "chain": chain,
            "tls_ca_file": str(ca_file) if ca_file else None,
            "fees": asdict(DEVNET_FEES),
            "nodes": [asdict(n) for n in nodes if not n.read_only],
            "read_only_nodes": [asdict(n) | {"name": n.name} for n in nodes if n.read_only],
        },
        indent=2,
    )


def _start_chains(state: Path, two_chains: bool) -> tuple[DevChain, DevChain | None]:
    """The app chain (payload contracts) on ANVIL_PORT and, with two chains, the registry's
    own anvil (chain id REGISTRY_CHAIN_ID); the caller stops them."""
    from xnode.devtools.devchain import DevChain

    app = DevChain.start(state, _port_or_free(ANVIL_PORT))
    if not two_chains:
        return app, None
    try:
        registry = DevChain.start(
            state, _port_or_free(ANVIL_PORT + 1), "registry", REGISTRY_CHAIN_ID
        )
    except BaseException:
        app.stop()
        raise
    return app, registry


def run_devnet(args: argparse.Namespace) -> int:
    from xnode.chain.anvil import AnvilError  # web3 loads only for the devnet

    state = Path(args.dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    stop_requested = False

    def request_stop(_sig: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    supervisor = Supervisor(console.print, restart=args.restart)
    ha: HaCluster | None = None
    chain: DevChain | None = None
    registry_chain: DevChain | None = None
    try:
        with console.status("starting Postgres"):
            cluster = start_cluster(state / "pg")
    except PostgresError as exc:
        console.print(f"[red]xnode devnet: {exc}")
        return 1
    try:
        try:
            with console.status("starting anvil and the contracts"):
                chain, registry_chain = _start_chains(state, args.two_chains)
            registrar = registry_chain or chain
            nodes = plan_nodes(
                state, cluster, args.nodes, args.base_port, registrar.registered(), args.tls
            )
        except (AnvilError, DevnetError) as exc:
            console.print(f"[red]xnode devnet: {exc}")
            return 1
        planned = [(n.node_id, bytes.fromhex(n.public_key[2:]), n.url) for n in nodes]
        with console.status("registering nodes"):
            registrar.register(planned, None if registry_chain else FUND_WEI)
            if registry_chain is not None:  # chain publishes are paid on the app chain
                chain.fund(planned, FUND_WEI)
        registry_env = chain.node_env(registry_chain)
        if args.registry == "file":
            registry_env |= {
                "XNODE_REGISTRY_SOURCE": "file",
                "XNODE_NODES_FILE": str(write_registry_file(state, nodes)),
            }
        certs = tls_env(state, nodes) if args.tls else {}
        ca_file = state / "tls" / "ca.pem" if args.tls else None
        client_tls = ClientTls.from_files(ca_file) if ca_file else None
        if args.ha:
            try:
                with console.status("starting Patroni and etcd (node 100's database)"):
                    ha = start_ha_cluster(state / "ha", "xnode-100")
                ha.create_database("xnode_100")
            except PostgresError as exc:
                console.print(f"[red]xnode devnet --ha: {exc}")
                return 1
            nodes[0].dsn = ha.dsn("xnode_100")
        nodes += plan_read_only(state, cluster, args.read_only_nodes)
        # Read-only nodes serve plaintext (no certificate of theirs) but check their peers'.
        peer_ca = {"XNODE_TLS_PEER_CA_FILE": str(ca_file)} if ca_file else {}
        started = [
            supervisor.start(
                n.name,
                state / f"{n.name}.log",
                functools.partial(
                    _spawn,
                    n,
                    registry_env,
                    state,
                    peer_ca if n.read_only else certs.get(n.node_id, {}),
                ),
            )
            for n in nodes
        ]
        gateway = f"127.0.0.1:{_port_or_free(GATEWAY_PORT)}"
        gateway_registry_env = registry_env | (gateway_tls_env(state) if ca_file else {})
        scheme = "https" if ca_file else "http"
        gateway_http = f"127.0.0.1:{_port_or_free(GATEWAY_HTTP_PORT)}"
        # Passed as XNODE_GATEWAY_HTTP_* (spawn_gateway renames the nodes' settings).
        http_env = {
            "XNODE_HTTP_LISTEN_ADDRESS": gateway_http,
            "XNODE_HTTP_CORS_ORIGINS": "*",
            # Browsers asking the HTTP port for nodes get the nodes' gRPC-web ports.
            "XNODE_HTTP_NODE_URLS": ",".join(
                f"{n.node_id}={scheme}://{n.http}" for n in nodes if not n.read_only
            ),
        }
        gateway_key = gateway_key_file(state)
        started.append(
            supervisor.start(
                "gateway",
                state / "gateway.log",
                functools.partial(
                    spawn_gateway, state, gateway, gateway_key, gateway_registry_env | http_env
                ),
            )
        )
        with console.status(f"starting {len(nodes)} node(s) and the gateway"):
            for address, tls, member in [
                *(
                    (n.address if n.read_only else n.url, _tls_of(n, client_tls), m)
                    for n, m in zip(nodes, started, strict=False)
                ),
                (f"{scheme}://{gateway}", client_tls, started[-1]),
            ]:
                proc = member.process
                if not wait_serving(address, tls=tls, process=proc) or proc.poll() is not None:
                    console.print(f"[red]{member.name} did not start; see its log {member.log}")
                    tail = log_tail(member.log, 15)
                    console.print(tail, markup=False, highlight=False)
                    return 1
        described_chain = chain.describe()
        if registry_chain is not None:
            described_chain["registry_chain"] = registry_chain.describe()
        description = json.loads(_describe(nodes, cluster, described_chain, ca_file))
        if ha is not None:
            description["ha"] = ha.describe()
        description["gateway"] = {
            "address": gateway,
            "url": f"{scheme}://{gateway}",
            "http": f"{scheme}://{gateway_http}",
        }
        # Every node's and the payer's private key: for its owner's eyes only.
        write_private(state / "devnet.json", json.dumps(description, indent=2))
        _print_table(nodes, cluster, chain.url, state, (gateway, gateway_http), ca_file)
        while not stop_requested:
            supervisor.watch()  # a node or the gateway that exits is started again
            time.sleep(0.5)
        return 0
    finally:
        console.print("stopping nodes, anvil and Postgres")
        supervisor.stop()
        if chain is not None:
            chain.stop()
        if registry_chain is not None:
            registry_chain.stop()
        if ha is not None:
            ha.stop()
        cluster.stop()
