"""A highly available Postgres for development and tests: etcd and two Patroni members.

Patroni (Debian `patroni`) runs a primary and a synchronous standby and keeps its leader key
in etcd (Debian `etcd-server`); when the primary's host is lost the standby is promoted, and
the old primary rejoins as a standby (pg_rewind) once it is back. Postgres refuses root, so
Patroni runs as the `postgres` OS user, like `devtools.postgres` does. The node reaches it by
a multi-host DSN (`HaCluster.dsn`, docs/ha.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from xnode.devtools.postgres import PgCluster, PostgresError, free_port, server_reachable

MEMBERS = ("pg-a", "pg-b")
DEFAULT_BIN_DIR = Path("/usr/lib/postgresql/15/bin")
SERVER_PARAMETERS = {
    "max_connections": 300,
    "shared_buffers": "128MB",
    "wal_level": "replica",
    "wal_log_hints": "on",  # pg_rewind brings a failed primary back as a standby
    "max_wal_senders": 10,
    "max_replication_slots": 10,
    "wal_keep_size": "256MB",
    "hot_standby": "on",
    "hot_standby_feedback": "on",
    "synchronous_commit": "on",  # a commit returns once the synchronous standby has flushed it
}
# Short, so a lost primary is replaced within seconds (Patroni needs
# loop_wait + 2 * retry_timeout <= ttl).
DCS: dict[str, object] = {
    "ttl": 10,
    "loop_wait": 1,
    "retry_timeout": 3,
    "maximum_lag_on_failover": 16 * 1024 * 1024,
    # Patroni names the standby in synchronous_standby_names and promotes only it.
    "synchronous_mode": True,
    "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": SERVER_PARAMETERS},
}
_SYNC_STREAMING = (
    "SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'"
)
_REPLICATION = (
    "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),"
    " (SELECT string_agg(application_name || ' ' || state || ' ' || sync_state, ', ')"
    "  FROM pg_stat_replication),"
    " (SELECT string_agg(n || ' ' || coalesce(w, '-') || ' ' || left(q, 60), '; ')"
    "  FROM (SELECT count(*) AS n, wait_event AS w, query AS q FROM pg_stat_activity"
    "        WHERE backend_type = 'client backend' AND datname <> 'postgres'"
    "        GROUP BY 2, 3) AS a)"
)
HBA = [
    "local all all trust",
    "host all all 127.0.0.1/32 trust",
    "host replication all 127.0.0.1/32 trust",
]


def bin_dir() -> Path:
    """Where every server tool is (Patroni also runs pg_controldata, pg_rewind, ...)."""
    if (DEFAULT_BIN_DIR / "pg_controldata").exists():
        return DEFAULT_BIN_DIR
    found = shutil.which("pg_controldata")
    if found is None:
        raise PostgresError("the PostgreSQL server tools (pg_controldata, ...) are missing")
    return Path(found).resolve().parent


def _require(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise PostgresError(f"`{tool}` is missing: run `make setup` (scripts/install_ha.sh)")
    return found


@dataclass
class Member:
    name: str
    pg_port: int
    rest_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


def _config(member: Member, scope: str, etcd: str) -> dict[str, object]:
    return {
        "scope": scope,
        "name": member.name,
        "restapi": {"listen": member.rest[7:], "connect_address": member.rest[7:]},
        # etcd's v2 protocol: Patroni 3.0.2 renews the leader key there by compare-and-swap.
        # Its etcd3 code puts the key unconditionally when its lease has expired, so a primary
        # thawed after a failover takes the lock back and the promoted member's commits are
        # lost (docs/ha.md).
        # use_proxies: the address given is the one used, never etcd's advertised one, so that
        # a test can put a proxy between a member and etcd and cut it.
        "etcd": {"hosts": [etcd], "use_proxies": True},
        "bootstrap": {
            "dcs": DCS,
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}, "data-checksums"],
            "pg_hba": HBA,
        },
        "postgresql": {
            "listen": f"127.0.0.1:{member.pg_port}",
            "connect_address": f"127.0.0.1:{member.pg_port}",
            "data_dir": str(member.data_dir),
            "bin_dir": str(bin_dir()),
            "pgpass": str(member.directory / "pgpass"),
            "pg_hba": HBA,
            "authentication": {
                role: {"username": "postgres"} for role in ("superuser", "replication", "rewind")
            },
            "parameters": {"unix_socket_directories": str(member.directory)},
        },
    }


def _get_json(url: str, timeout_s: float = 1.0) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            value: object = json.loads(reply.read())
            return value
    except (OSError, ValueError, urllib.error.HTTPError):
        return None


@dataclass
class HaCluster:
    """etcd and the Patroni members under `root`; `stop()` ends them all."""

    root: Path
    scope: str
    etcd_port: int
    members: dict[str, Member] = field(default_factory=dict)
    etcd: subprocess.Popen[bytes] | None = None
    # {member: host:port} where that member's Patroni reaches etcd, when not etcd itself.
    etcd_via: dict[str, str] = field(default_factory=dict)

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{m.pg_port}" for m in self.members.values())

    def dsn(self, database: str = "postgres") -> str:
        """Every member, the primary chosen at connect time (xnode.store.primary)."""
        return f"postgresql://postgres@{self.hosts}/{database}?target_session_attrs=read-write"

    def member_dsn(self, name: str, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.members[name].pg_port}/{database}"

    def describe(self) -> dict[str, object]:
        """For devnet.json: where each member's Postgres and REST API listen."""
        return {
            "etcd": f"http://127.0.0.1:{self.etcd_port}",
            "members": {
                m.name: {
                    "postgres": f"127.0.0.1:{m.pg_port}",
                    "rest": m.rest,
                    "dir": str(m.directory),
                }
                for m in self.members.values()
            },
        }

    def create_database(self, name: str) -> None:
        """Creates `name` on the primary (the standby gets it by replication)."""
        leader = self.leader()
        if leader is None:
            raise PostgresError("no Patroni member is the primary")
        PgCluster(self.members[leader].data_dir, self.members[leader].pg_port).create_database(name)

    def roles(self) -> dict[str, str]:
        """{member: leader | sync_standby | replica | ...} as Patroni's REST API says it."""
        for member in self.members.values():
            cluster = _get_json(f"{member.rest}/cluster")
            if isinstance(cluster, dict):
                return {m["name"]: m["role"] for m in cluster.get("members", [])}
        return {}

    def leader(self) -> str | None:
        """The member whose REST API answers /primary with 200 (it holds the leader key)."""
        for member in self.members.values():
            try:
                with urllib.request.urlopen(f"{member.rest}/primary", timeout=1.0):
                    return member.name
            except OSError:
                continue
        return None

    def wait_ready(self, timeout_s: float = 120.0) -> str:
        """Waits for a leader and a streaming synchronous standby; returns the leader."""
        deadline = time.monotonic() + timeout_s
        roles: dict[str, str] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            roles = self.roles()
            leader = next((n for n, r in roles.items() if r == "leader"), None)
            if leader and "sync_standby" in roles.values() and self._sync_streaming(leader):
                return leader
            if leader:
                self.clear_stale_sync_key(leader)
            time.sleep(0.2)
        raise PostgresError(
            f"Patroni did not get a primary and a sync standby: {roles}\n{self.diagnosis()}"
        )

    def sync_key(self) -> dict[str, object] | None:
        """Patroni's /sync key in etcd: {"leader": ..., "sync_standby": ...}, or None."""
        reply = _get_json(self.sync_url)
        node = reply.get("node") if isinstance(reply, dict) else None
        if not isinstance(node, dict):
            return None
        value: object = json.loads(node["value"])
        return value if isinstance(value, dict) else None

    def clear_stale_sync_key(self, leader: str) -> bool:
        """Deletes a /sync key that names another member as leader; returns whether it did.

        Patroni 3.0.2 (Debian 12) writes /sync only when the key names the leader itself, so
        after a leader change that left the key naming the former leader, no standby is made
        synchronous again. Without the key the leader writes a fresh one (docs/ha.md)."""
        key = self.sync_key()
        if key is None or key.get("leader") in (None, leader):
            return False
        request = urllib.request.Request(self.sync_url, method="DELETE")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=2.0).close()
        return True

    @property
    def sync_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}/v2/keys/service/{self.scope}/sync"

    def diagnosis(self) -> str:
        """Each member's replication as Postgres sees it and the end of its Patroni log."""
        parts = []
        for member in self.members.values():
            done = subprocess.run(
                ["psql", self.member_dsn(member.name), "-tAc", _REPLICATION],
                capture_output=True,
                text=True,
                check=False,
            )
            log = member.directory / "patroni.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            parts.append(f"--- {member.name}: {done.stdout.strip()} {done.stderr.strip()}\n{tail}")
        return "\n".join(parts)

    def _sync_streaming(self, leader: str) -> bool:
        """Whether the leader has a synchronous standby streaming from it."""
        done = subprocess.run(
            ["psql", self.member_dsn(leader), "-tAc", _SYNC_STREAMING],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() == "t"

    def _check_alive(self) -> None:
        for member in self.members.values():
            if member.process is not None and member.process.poll() is not None:
                log = member.directory / "patroni.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise PostgresError(f"Patroni {member.name} exited:\n{tail}")

    def start_member(self, name: str) -> None:
        member = self.members[name]
        config = member.directory / "patroni.yml"  # JSON is YAML
        etcd = self.etcd_via.get(name, f"127.0.0.1:{self.etcd_port}")
        config.write_text(json.dumps(_config(member, self.scope, etcd)))
        log = (member.directory / "patroni.log").open("ab")
        # Its own session: the whole member (Patroni, then Postgres in a session of its own)
        # can be killed or frozen like a host.
        member.process = subprocess.Popen(
            [_require("patroni"), str(config)],
            stdout=log,
            stderr=log,
            cwd=member.directory,
            user="postgres" if os.geteuid() == 0 else None,  # no runuser between: its pid
            group="postgres" if os.geteuid() == 0 else None,
            extra_groups=[] if os.geteuid() == 0 else None,
            start_new_session=True,
        )

    def signal_member(self, name: str, sig: signal.Signals) -> None:
        """Sends `sig` to the member's Patroni and Postgres, as if to its host."""
        member = self.members[name]
        groups = [] if member.process is None else [member.process.pid]
        postmaster = member.postmaster_pid()
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                # Patroni starts Postgres in a session of its own, led by a helper process.
                groups.append(os.getpgid(postmaster))
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)
        if sig == signal.SIGKILL and member.process is not None:
            member.process.wait(30)
            member.process = None

    def stop(self) -> None:
        for name in self.members:
            self.signal_member(name, signal.SIGCONT)
        for member in self.members.values():
            if member.process is not None and member.process.poll() is None:
                member.process.terminate()  # Patroni stops its Postgres, then itself
        for name, member in self.members.items():
            if member.process is not None:
                try:
                    member.process.wait(30)
                except subprocess.TimeoutExpired:
                    self.signal_member(name, signal.SIGKILL)
        if self.etcd is not None:
            self.etcd.terminate()
            self.etcd.wait(30)


def _own(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    directory.chmod(0o700)


def _start_etcd(root: Path, port: int) -> subprocess.Popen[bytes]:
    peer = f"http://127.0.0.1:{free_port()}"
    client = f"http://127.0.0.1:{port}"
    log = (root / "etcd.log").open("ab")
    return subprocess.Popen(
        [
            _require("etcd"),
            "--name=xnode-dev",
            f"--data-dir={root / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=xnode-dev={peer}",
            "--enable-v2=true",  # Patroni's `etcd` (v2) client: see _config
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def start_ha_cluster(
    root: Path,
    scope: str = "xnode",
    timeout_s: float = 120.0,
    etcd_port: int | None = None,
    etcd_via: dict[str, str] | None = None,
) -> HaCluster:
    """etcd, then the members; returns once a primary and a synchronous standby stream.

    `etcd_via` ({member: host:port}) makes a member reach etcd (on `etcd_port`) through
    another address, such as a proxy that a test can cut."""
    _require("patroni")
    root = server_reachable(root.absolute()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the `postgres` user enters its members' directories below
    cluster = HaCluster(root, scope, etcd_port or free_port(), etcd_via=dict(etcd_via or {}))
    cluster.etcd = _start_etcd(root, cluster.etcd_port)
    try:
        for name in MEMBERS:
            member = Member(name, free_port(), free_port(), root / name)
            _own(member.directory)
            cluster.members[name] = member
            cluster.start_member(name)
        cluster.wait_ready(timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster
