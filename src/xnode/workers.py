"""`xnode run --workers N`: N serving processes of one node, started and watched by this one.

Each worker is a whole node process (xnode.server.wiring) on the same gRPC and HTTP ports
(SO_REUSEPORT: the kernel spreads connections over them), the same database and key. Sequence
ids stay gap-free because they are claimed from the node's row in the database
(xnode.store.sequencer); the first worker runs what runs once per node (server.WorkerRole).
It starts first and alone (migrations, the recovery of its own log), the others once it
serves. A worker that dies is started again (the node exits, code 1, when they keep dying);
SIGTERM (or SIGINT) drains every worker as one node drains; a worker whose supervisor dies
drains itself. The supervisor serves the workers' metrics on the metrics port, merged with a
`worker` label (xnode.observability.worker_metrics).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType

import structlog
import uvloop

from xnode.config import Settings
from xnode.observability.logging import configure_logging
from xnode.observability.metrics import MetricsServer
from xnode.observability.worker_metrics import serve_worker_metrics
from xnode.server.bootstrap import NodeTls, StartupError, settle_heap, skip_final_collection
from xnode.server.roles import WorkerRole
from xnode.server.serving import metrics_tls, until_signaled
from xnode.server.wiring import start_node
from xnode.store.identity import WrongNodeError

log = structlog.get_logger(__name__)

# More restarts than this within RESTART_WINDOW_S: the node exits instead of trying again.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# A drained worker gets the drain grace plus this long to exit before it is killed.
EXIT_MARGIN_S = 30.0


def _worker_main(settings: Settings, role: WorkerRole, conn: Connection) -> None:
    """A worker process: serves until SIGTERM, SIGINT, or its supervisor's end of `conn`
    closes (the supervisor died); exits 2 when it cannot start."""
    structlog.contextvars.bind_contextvars(worker=role.index)
    configure_logging(settings.log_level, settings.log_format)
    try:
        uvloop.run(_serve(settings, role, conn))
    except (StartupError, WrongNodeError) as exc:
        log.error("worker_cannot_start", error=str(exc))
        raise SystemExit(2) from exc
    skip_final_collection()


async def _serve(settings: Settings, role: WorkerRole, conn: Connection) -> None:
    node = await start_node(settings, role)
    settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(conn.fileno(), stop.set)  # readable only at EOF: the supervisor is gone
    conn.send(node.metrics_address)
    await until_signaled(stop)
    loop.remove_reader(conn.fileno())
    await node.stop()


def _reserve(address: str) -> tuple[str, socket.socket | None]:
    """`address` with port 0 replaced by a free port every worker binds, held (SO_REUSEPORT,
    not listening) until they have."""
    host, _, port = address.rpartition(":")
    if not address or port != "0":
        return address, None
    bare = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((bare or "0.0.0.0", 0))
    return f"{host}:{sock.getsockname()[1]}", sock


@dataclass
class _Worker:
    role: WorkerRole
    process: BaseProcess
    conn: Connection  # the supervisor's end: the worker sends its metrics address when ready
    serving: bool = False
    metrics_address: str | None = None

    def drained_cleanly(self) -> bool:
        """Exited 0, or was stopped by the drain's SIGTERM before it served."""
        code = self.process.exitcode
        return code == 0 or (not self.serving and code == -signal.SIGTERM)


class Supervisor:
    def __init__(self, settings: Settings, count: int) -> None:
        self._settings = settings
        self._count = count
        self._context = multiprocessing.get_context("spawn")  # no inherited loop or gRPC state
        self._workers: dict[int, _Worker] = {}
        self._stopping = threading.Event()
        # SIGTERM does not cut short a wait() (it is retried, PEP 475): the handler writes
        # here, and _watch waits on it too.
        self._wake_read, self._wake_write = os.pipe()
        self._restarts: deque[float] = deque()
        # The first worker sequences every worker's publishes; the others reach it here.
        self._link_dir = tempfile.mkdtemp(prefix="xnode-") if count > 1 else ""

    def run(self) -> int:
        try:
            return self._run()
        finally:
            if self._link_dir:
                shutil.rmtree(self._link_dir, ignore_errors=True)

    def _run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if not self._start_all():
            if self._stopping.is_set():  # SIGTERM while starting: a drain, not a failure
                return self._drain()
            return max(self._drain(), 2)
        try:
            metrics = self._serve_metrics()
        except OSError as exc:
            log.error("metrics_not_served", address=self._settings.metrics_address, error=str(exc))
            return max(self._drain(), 2)
        log.info("node_workers_serving", workers=self._count, pids=self.pids())
        code = self._watch()
        code = max(code, self._drain())
        if metrics is not None:
            metrics.stop()
        log.info("node_workers_stopped", exit_code=code)
        return code

    def pids(self) -> dict[int, int | None]:
        return {i: w.process.pid for i, w in sorted(self._workers.items())}

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping.set()
        os.write(self._wake_write, b"\0")

    def _start_all(self) -> bool:
        """The first worker alone (it migrates and recovers the node's own log), then the
        others together."""
        listen, grpc_port = _reserve(self._settings.listen_address)
        http, http_port = _reserve(self._settings.http_listen_address)
        self._settings = self._settings.model_copy(
            update={"listen_address": listen, "http_listen_address": http}
        )
        try:
            if not self._ready(self._spawn(0, first_start=True)):
                return False
            others = [self._spawn(i, first_start=True) for i in range(1, self._count)]
            return all(self._ready(w) for w in others)
        finally:
            for sock in (grpc_port, http_port):
                if sock is not None:
                    sock.close()

    def _worker_settings(self, index: int, first_start: bool) -> Settings:
        update: dict[str, object] = {
            "metrics_address": "127.0.0.1:0" if self._settings.metrics_address else ""
        }
        if index > 0 or not first_start:
            update |= {"migrate_on_start": False, "recover_own_log_on_start": False}
        return self._settings.model_copy(update=update)

    def _spawn(self, index: int, first_start: bool) -> _Worker:
        ours, theirs = self._context.Pipe(duplex=False)
        link = os.path.join(self._link_dir, "sequencer.sock") if self._link_dir else ""
        role = WorkerRole(index, self._count, link)
        process = self._context.Process(
            target=_worker_main,
            args=(self._worker_settings(index, first_start), role, theirs),
            name=f"xnode-worker-{index}",
        )
        process.start()
        theirs.close()
        worker = _Worker(role, process, ours)
        self._workers[index] = worker
        log.info("worker_started", worker=index, pid=process.pid)
        return worker

    def _ready(self, worker: _Worker) -> bool:
        """Waits until the worker serves; False when it exited first or the node stops."""
        while not self._stopping.is_set():
            if worker.conn.poll(0.2):
                try:
                    worker.metrics_address = worker.conn.recv()
                except EOFError:
                    break
                worker.serving = True
                return True
            if not worker.process.is_alive():
                break
        if self._stopping.is_set():
            return False
        log.error("worker_not_serving", worker=worker.role.index, exit_code=worker.process.exitcode)
        return False

    def _watch(self) -> int:
        """Until SIGTERM: restarts a worker that exits; 1 when they keep exiting."""
        while not self._stopping.is_set():
            wait([self._wake_read, *(w.process.sentinel for w in self._workers.values())], 0.5)
            for index, worker in sorted(self._workers.items()):
                if worker.process.is_alive() or self._stopping.is_set():
                    continue
                log.error(
                    "worker_exited",
                    worker=index,
                    pid=worker.process.pid,
                    exit_code=worker.process.exitcode,
                )
                worker.conn.close()
                if not self._may_restart() or not self._ready(self._spawn(index, False)):
                    if self._stopping.is_set():  # SIGTERM while it restarted: drain
                        return 0
                    log.error("node_workers_failing", restarts=len(self._restarts))
                    return 1
        return 0

    def _may_restart(self) -> bool:
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
            self._restarts.popleft()
        self._restarts.append(now)
        return len(self._restarts) <= MAX_RESTARTS

    def _drain(self) -> int:
        """SIGTERM to every worker (each drains like a single node), then waits for all."""
        alive = [w for w in self._workers.values() if w.process.is_alive()]
        for worker in alive:
            worker.process.terminate()
        deadline = time.monotonic() + self._settings.shutdown_grace_seconds + EXIT_MARGIN_S
        code = 0
        for worker in alive:
            worker.process.join(max(deadline - time.monotonic(), 0.0))
            if worker.process.is_alive():
                log.error("worker_drain_timeout", worker=worker.role.index)
                worker.process.kill()
                worker.process.join()
            log.info("worker_drained", worker=worker.role.index, exit_code=worker.process.exitcode)
            if not worker.drained_cleanly():
                code = 1
        return code

    def _serve_metrics(self) -> MetricsServer | None:
        address = self._settings.metrics_address
        if not address:
            return None
        tls = metrics_tls(NodeTls.from_settings(self._settings).served)
        return serve_worker_metrics(address, self._metrics_addresses, tls)

    def _metrics_addresses(self) -> Sequence[tuple[int, str]]:
        return [
            (i, w.metrics_address)
            for i, w in sorted(self._workers.items())
            if w.metrics_address is not None and w.process.is_alive()
        ]


def run_workers(settings: Settings) -> int:
    """The node as `settings.worker_count()` worker processes; the exit code."""
    configure_logging(settings.log_level, settings.log_format)
    code = Supervisor(settings, settings.worker_count()).run()
    skip_final_collection()
    return code
