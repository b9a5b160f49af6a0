"""What a node (and a gateway) starts from: settings checked, identity, database, registry and
chain connection; process-wide tuning of the pool and the collector."""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import Executor
from dataclasses import dataclass

import asyncpg
import structlog
from pydantic import SecretStr

from xnode.chain.node import (
    ChainConnection,
    chain_registry,
    connect_chain,
)
from xnode.chain.verify import ChainSetupError
from xnode.config import RegistryGroup, Settings
from xnode.core.crypto import SigningKey, address_of
from xnode.core.registry import RegistryError
from xnode.replication.verifiers import BulkVerifiers, start_bulk
from xnode.server.roles import WorkerRole
from xnode.server.stops import Phase, Stops
from xnode.static_registry import StaticRegistrySource
from xnode.store.envelopes import EnvelopeStore
from xnode.store.identity import claim_database
from xnode.store.migrate import upgrade_to_head
from xnode.store.primary import Connect, Database
from xnode.store.replica import Replica, ReplicaWatch
from xnode.tls import ClientTls, PeerTls, ServerTls, TlsConfigError
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


# A read-only node (XIP-49 3.4) has no registry entry; it goes by this id where one is needed
# (its metrics, the audience its replication streams would need, which no peer issues).
READ_ONLY_NODE_ID = 0


class StartupError(RuntimeError):
    """A configuration or environment problem that stops the node before it serves."""


def registry_source(settings: RegistryGroup) -> RegistrySource | None:
    if settings.nodes_file is None:
        return None
    try:
        return StaticRegistrySource(settings.nodes_file)
    except (OSError, ValueError, KeyError) as exc:
        raise StartupError(f"cannot read nodes file {settings.nodes_file}: {exc}") from exc


async def open_chain(
    settings: RegistryGroup, stops: Stops, wanted: bool = True
) -> ChainConnection | None:
    """The chain's connection when the chain is configured (and `wanted`), closed among the
    last stop steps."""
    if bool(settings.chain_rpc_url) != (settings.contracts_file is not None):
        raise StartupError("the chain needs both chain_rpc_url and contracts_file")
    if not (settings.chain_enabled and wanted):
        return None
    try:
        chain = await connect_chain(settings)
    except ChainSetupError as exc:
        raise StartupError(str(exc)) from exc
    stops.add(Phase.CHAIN_CONNECTION, chain.close)
    return chain


async def open_registry(
    settings: RegistryGroup, chain: ChainConnection | None
) -> RegistrySource | None:
    """The chain's NodeRegistry when the chain is configured (or asked for), else the file."""
    if settings.registry_source == "file" or (settings.registry_source == "auto" and chain is None):
        return registry_source(settings)
    if chain is None:
        raise StartupError("registry_source=chain needs chain_rpc_url and contracts_file")
    try:
        return await chain_registry(chain, settings)
    except ChainSetupError as exc:
        raise StartupError(str(exc)) from exc


def resolve_node_id(settings: Settings, key: SigningKey, source: RegistrySource | None) -> int:
    if settings.read_only:
        if source is None:
            raise StartupError(
                "a read-only node replicates from the registry's nodes: set XNODE_NODES_FILE "
                "or the chain (XNODE_CHAIN_RPC_URL and XNODE_CONTRACTS_FILE)"
            )
        return READ_ONLY_NODE_ID
    if source is not None:
        try:
            return source.current().resolve_self(key.public_key, settings.node_id).node_id
        except RegistryError as exc:
            raise StartupError(str(exc)) from exc
    if settings.node_id is None:
        raise StartupError("set XNODE_NODE_ID, or XNODE_NODES_FILE to find it by signer key")
    return settings.node_id


@dataclass(frozen=True)
class NodeTls:
    """What the listeners serve (None: plaintext) and how peers are checked."""

    served: ServerTls | None
    peers: PeerTls

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeTls:
        try:
            served = ServerTls.from_files(
                settings.tls_cert_file,
                settings.tls_key_file,
                settings.tls_client_ca_file,
                settings.tls_client_cert == "require",
            )
            peer_ca = ClientTls.from_files(settings.tls_peer_ca_file).root_certificates
        except TlsConfigError as exc:
            raise StartupError(str(exc)) from exc
        return cls(served, PeerTls(peer_ca, served))


def node_key(settings: Settings) -> tuple[SigningKey, Settings]:
    """The node's signer key, and the settings holding it (a read-only node without a
    configured key gets a new one)."""
    try:
        return settings.signing_key(), settings
    except ValueError as exc:
        configured = settings.signer_key is not None or settings.signer_key_file is not None
        if not settings.read_only or configured:
            raise StartupError(f"signer key: {exc}") from exc
        # A read-only node's key signs only its tokens to peers: any key will do.
        key = SigningKey.generate()
        log.info("read_only_key_generated", address="0x" + address_of(key.public_key).hex())
        return key, settings.model_copy(update={"signer_key": SecretStr(key.hex())})
    except OSError as exc:
        raise StartupError(f"signer key: {exc}") from exc


async def signing_process(role: WorkerRole, stops: Stops) -> Executor | None:
    """The first of several workers signs every worker's batches, in a process of its own
    (runtime.crypto_threads): a process of the same kind as replication's bulk verifiers,
    started by the fork server, that dies with this one. Stopped last, after the final
    commits; without it the batches are signed in the crypto threads."""
    if not (role.shares_ports and role.primary):
        return None
    process = BulkVerifiers(1)
    stops.add_sync(Phase.SIGNER, process.shutdown)
    try:
        await asyncio.to_thread(start_bulk, process, 1)
    except Exception as exc:  # e.g. no fork server: sign in threads, as one worker does
        log.error("signing_process_unavailable", error=repr(exc), fallback="crypto threads")
        return None
    return process


async def open_database(
    settings: Settings, database: Database, node_id: int, key: SigningKey, stops: Stops
) -> asyncpg.Pool:
    """Migrated, pooled and claimed for this node; with several hosts, following the primary."""
    if len(database.hosts) > 1:
        await database.find()
        database.start_watch(settings.database_primary_check_seconds)
        stops.add(Phase.DATABASE, database.stop_watch)
    if settings.migrate_on_start:
        await asyncio.to_thread(upgrade_to_head, database.primary_dsn, settings.migrations_dir)
    pool = await create_pool(settings, database.connect)
    # close() waits for every connection to be released; forced, the pool is terminated.
    stops.add(Phase.DATABASE, pool.close, "Pool.close", pool.terminate)
    if not settings.read_only:  # a read-only node's database may later serve a registered one
        await claim_database(pool, node_id, key.public_key)
    return pool


async def open_replica(settings: Settings, primary: asyncpg.Pool, stops: Stops) -> Replica | None:
    """The streaming replica's pool and watch, when database_replica_dsn is set."""
    if not settings.database_replica_dsn:
        return None
    pool = await create_pool(settings, dsn=settings.database_replica_dsn)
    stops.add(Phase.READS, pool.close, "Pool.close (replica)", pool.terminate)
    watch = ReplicaWatch(pool, primary, settings.database_replica_check_seconds)
    await watch.start()
    stops.add(Phase.READS, watch.stop)
    return Replica(EnvelopeStore(pool), watch)


async def create_pool(
    settings: Settings, connect: Connect | None = None, dsn: str | None = None
) -> asyncpg.Pool:
    """`connect`: how a connection is opened (Database.connect follows the primary); `dsn`:
    another database than the node's (its replica)."""
    return await asyncpg.create_pool(
        dsn or settings.database_dsn,
        connect=connect,
        min_size=2,
        max_size=settings.db_pool_size,
        # Our queries are short index scans; JIT compiling them costs far more than running
        # them each time the planner's estimate crosses jit_above_cost.
        server_settings={"jit": "off"},
        reset=_keep_session,
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What the pool does to a connection it takes back, after asyncpg's own rollback of an
    open transaction. asyncpg's default also sends a reset query (advisory unlocks, CLOSE ALL,
    UNLISTEN *, RESET ALL): one more round trip on the path of every query, for session
    state this node never leaves on pooled connections (listeners and session locks have
    connections of their own; settings are the connection's startup ones)."""


def settle_heap() -> None:
    """Called once the node has started: what it holds from start-up (modules, protobuf
    descriptors, web3, the registry) leaves the collector's view. Every full collection
    scanned all of it, a real share of a catch-up's and a batch's CPU (docs/benchmarks.md,
    "Measurements behind choices in the code")."""
    gc.collect()
    gc.freeze()


def skip_final_collection() -> None:
    """Called once the node has stopped and released everything it holds: the interpreter's
    exit then does not collect the heap. Its module teardown ran full collections over every
    object for seconds in each process (seen with gdb in Py_FinalizeEx), which held the
    drain's end past its grace on a loaded machine."""
    gc.freeze()
