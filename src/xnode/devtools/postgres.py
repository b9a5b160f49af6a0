"""Private PostgreSQL clusters for development, tests and the devnet.

Postgres refuses to run as root, so when we are root the server runs as the `postgres`
OS user (runuser) on a data directory that user owns.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "300",
    "shared_buffers": "256MB",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "checkpoint_timeout": "15min",
    "max_wal_size": "4GB",
}


class PostgresError(RuntimeError):
    pass


# Ports handed out lie below the kernel's ephemeral range (32768-60999 by default, where
# port 0 binds): a port from that range, free when handed out, can meanwhile become the
# local end of any outgoing connection, and under load some did before their server bound
# them. Room is left above for the consecutive ports devnet takes from a base port.
PORTS = range(20_000, 32_000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now and not handed out before by this process."""
    for _ in range(1000):
        port = random.choice(PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free port found in {PORTS.start}-{PORTS.stop - 1}")


def as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser") is None:
        raise PostgresError("running as root needs `runuser` to start Postgres as `postgres`")
    return ["runuser", "-u", "postgres", "--", *cmd]


def _server_owner() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresError("running as root needs a `postgres` OS user") from None
    return entry.pw_uid, entry.pw_gid


def _run(cmd: list[str], what: str) -> None:
    for tool in ("initdb", "pg_ctl"):
        if cmd[0] == tool and shutil.which(tool) is None:
            raise PostgresError(f"`{tool}` is not on PATH: install the PostgreSQL server")
    done = subprocess.run(as_server_user(cmd), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PostgresError(f"{what} failed: {done.stderr.strip() or done.stdout.strip()}")


@dataclass
class PgCluster:
    data_dir: Path
    port: int

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        _run(["pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], "pg_ctl stop")

    def create_database(self, name: str, template: str = "template1") -> None:
        """Creates `name` as a copy of `template` unless it exists (psql, so no event loop is
        needed). The files are copied, not written through the WAL (Postgres 15's default):
        for small templates several times faster, and no WAL to keep."""
        exists = subprocess.run(
            ["psql", self.dsn(), "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
            capture_output=True,
            text=True,
            check=False,
        )
        if exists.returncode != 0:
            raise PostgresError(f"psql failed: {exists.stderr.strip()}")
        if exists.stdout.strip() != "1":
            subprocess.run(
                ["psql", self.dsn(), "-qc",
                 f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY'],
                check=True,
                capture_output=True,
            )  # fmt: skip

    def drop_database(self, name: str) -> None:
        """Drops `name` if it exists, ending its connections."""
        subprocess.run(
            ["psql", self.dsn(), "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
            check=True,
            capture_output=True,
        )


def _running_port(data_dir: Path) -> int | None:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return None
    lines = pid_file.read_text().splitlines()
    try:
        pid, port = int(lines[0]), int(lines[3])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return None
    return port


def _reachable_by_server_user(directory: Path) -> bool:
    """True when the `postgres` OS user can enter `directory` (and so every parent of it)."""
    if os.geteuid() != 0:
        return True
    probe = as_server_user(["test", "-x", str(directory)])
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def server_reachable(data_dir: Path) -> Path:
    """Where the cluster can live: `data_dir`, or a linked directory the server user can reach.

    Run as root, Postgres runs as `postgres`, which cannot enter a private parent (a clone
    made in `mktemp -d`, mode 0700). Rather than loosen the operator's permissions, the cluster
    goes to /var/tmp under a name derived from `data_dir`, and `data_dir` becomes a link to it,
    so later runs find the same cluster.
    """
    if data_dir.exists() or _reachable_by_server_user(data_dir.parent):
        return data_dir
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    elsewhere = Path("/var/tmp") / f"xnode-postgres-{digest}"
    elsewhere.mkdir(mode=0o700, exist_ok=True)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    data_dir.symlink_to(elsewhere, target_is_directory=True)
    print(
        f"the postgres OS user cannot enter {data_dir.parent}: the cluster lives in {elsewhere}"
        f" ({data_dir} links to it)",
        file=sys.stderr,
    )
    return elsewhere


def _initdb(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    owner = _server_owner()
    if owner is not None:
        os.chown(data_dir, *owner)  # its parents must be traversable by that user
    data_dir.chmod(0o700)
    _run(
        [
            "initdb",
            "-D",
            str(data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            # Data checksums: a page that a disk or a bit flip corrupted is refused when read
            # ("invalid page"), never served as if whole (docs/operations.md).
            "--data-checksums",
            "--no-sync",
        ],
        "initdb",
    )


def start_cluster(
    data_dir: Path,
    *,
    fsync: bool = True,
    attempts: int = 5,
    socket_dir: Path | None = None,
    port: int | None = None,
) -> PgCluster:
    """Starts (initializing if needed) a cluster on a free 127.0.0.1 port (or `port`); reuses
    a running one. `socket_dir`: where its Unix socket goes (the data directory by default; a
    filesystem that holds no sockets, FUSE, needs another)."""
    data_dir = server_reachable(data_dir.absolute()).resolve()
    running = _running_port(data_dir)
    if running is not None:
        return PgCluster(data_dir, running)
    if not (data_dir / "PG_VERSION").exists():
        _initdb(data_dir)
    settings = {
        **SERVER_SETTINGS,
        "fsync": "on" if fsync else "off",
        "unix_socket_directories": str(socket_dir or data_dir),
    }
    options = " ".join(f"-c {k}={v}" for k, v in settings.items())
    last_error = ""
    chosen = port
    for _ in range(attempts):
        port = chosen or free_port()
        try:
            _run(
                [
                    "pg_ctl",
                    "-D",
                    str(data_dir),
                    "-l",
                    str(data_dir / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    f"-p {port} {options}",
                    "start",
                ],
                "pg_ctl start",
            )
            return PgCluster(data_dir, port)
        except PostgresError as exc:  # most often: the port was taken meanwhile
            last_error = str(exc)
            time.sleep(0.2)
    log = data_dir / "server.log"
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise PostgresError(f"could not start Postgres in {data_dir}: {last_error}\n{tail}")
