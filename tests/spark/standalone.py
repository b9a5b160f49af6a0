"""A Spark standalone cluster for tests: one master and N one-core workers, started with the
pyspark package's own `bin/spark-class` (no Maven, no download), each in a work directory of
its own, bound to 127.0.0.1, and jobs submitted to it with `bin/spark-submit`.

Every process runs with a scrubbed environment (no PYTHONPATH, no PATH entry in this checkout
or its venv) and a working directory outside the checkout, so what the executors can import
is what spark-submit ships them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.spark.jvm import QUICK_JVM_OPTIONS, REPO_ROOT
from tests.support.waiting import wait_until
from xnode.devtools.postgres import free_port
from xnode.devtools.processes import log_tail

LOOPBACK = "127.0.0.1"
_KEPT_VARIABLES = ("HOME", "JAVA_HOME", "LANG", "LC_ALL", "TMPDIR", "USER")


class ClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    """The Spark installation inside the pyspark package: bin/, jars/, python/lib/*.zip."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _outside_checkout(entry: str) -> bool:
    inside = (str(REPO_ROOT), sys.prefix, str(Path(sys.prefix).resolve()))
    return not any(entry == p or entry.startswith(p + os.sep) for p in inside)


def scrubbed_env(**extra: str) -> dict[str, str]:
    """What a cluster node's shell would have: Java, a PATH without this checkout or its
    venv, SPARK_HOME; no PYTHONPATH and no PYSPARK_* of the test process."""
    env = {k: os.environ[k] for k in _KEPT_VARIABLES if k in os.environ}
    path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and _outside_checkout(p))
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = LOOPBACK
    env["SPARK_DAEMON_MEMORY"] = "256m"  # master and workers; executors get their own
    env["SPARK_DAEMON_JAVA_OPTS"] = QUICK_JVM_OPTIONS
    env["SPARK_SUBMIT_OPTS"] = QUICK_JVM_OPTIONS  # spark-submit's JVM: the driver
    return env | extra


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]
    work_dir: Path

    def stop(self, within_s: float = 30.0) -> None:
        """SIGTERM to the daemon's own process group (it and the executors it started),
        SIGKILL if it has not exited in time."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=within_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=within_s)
        self.log_file.close()


@dataclass
class Cluster:
    root: Path
    port: int
    ui_port: int
    master: Daemon | None = None
    workers: list[Daemon] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's own JSON status page (its web UI)."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=5) as r:
            state: dict[str, Any] = json.load(r)
        return state

    def alive_workers(self) -> int:
        try:
            workers = self.state()["workers"]
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def logs(self) -> str:
        daemons = [d for d in [self.master, *self.workers] if d is not None]
        return "\n".join(f"--- {d.name} ({d.log})\n{log_tail(d.log, 40)}" for d in daemons)

    def _start(self, name: str, args: Sequence[str], **env: str) -> Daemon:
        work_dir = self.root / name
        work_dir.mkdir(parents=True)
        log = self.root / f"{name}.log"
        log_file = log.open("wb")
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            cwd=work_dir,
            env=scrubbed_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as one
        )
        return Daemon(name, process, log, log_file, work_dir)

    def start(self, workers: int, worker_memory: str, within_s: float) -> None:
        self.master = self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", LOOPBACK, "--port", str(self.port)),
                *("--webui-port", str(self.ui_port)),
            ],
        )
        for n in range(1, workers + 1):
            work = self.root / f"worker-{n}"
            self.workers.append(
                self._start(
                    f"worker-{n}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        *("--host", LOOPBACK, "--cores", "1", "--memory", worker_memory),
                        *("--work-dir", str(work / "apps"), "--webui-port", str(free_port())),
                        self.url,
                    ],
                    SPARK_LOCAL_DIRS=str(work / "scratch"),
                )
            )
        wait_until(
            lambda: self.alive_workers() == workers or self._any_exited(),
            within_s,
            f"{workers} workers registered with the master",
            self.logs,
        )
        if self._any_exited():
            raise ClusterError(f"a Spark daemon exited while starting\n{self.logs()}")

    def _any_exited(self) -> bool:
        daemons = [d for d in [self.master, *self.workers] if d is not None]
        return any(d.process.poll() is not None for d in daemons)

    def stop(self) -> None:
        for daemon in reversed([d for d in [self.master, *self.workers] if d is not None]):
            daemon.stop()

    def app_dirs(self, worker: Daemon) -> list[Path]:
        """The executor directories (apps/<app id>/<executor id>) a worker made."""
        return sorted((worker.work_dir / "apps").glob("app-*/*"))


def start_cluster(root: Path, workers: int = 2, worker_memory: str = "1g") -> Cluster:
    cluster = Cluster(root, free_port(), free_port())
    try:
        cluster.start(workers, worker_memory, within_s=120)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass(frozen=True)
class Shipped:
    """What `make spark-dist` built."""

    py_files: Path
    launcher: Path
    environment: Path  # the PEX: the driver's interpreter and, shipped, the executors'


def submit(
    cluster: Cluster,
    shipped: Shipped,
    primary: Path,
    args: Sequence[str],
    cwd: Path,
    timeout_s: float = 240,
) -> subprocess.CompletedProcess[str]:
    """spark-submit in client mode, as docs/data-pipeline.md has it, with small memory settings;
    the scheduler waits for an executor on every worker before it runs a task."""
    cores = len(cluster.workers)
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--master", cluster.url, "--deploy-mode", "client"),
        *("--driver-memory", "512m", "--executor-memory", "512m"),
        *("--executor-cores", "1", "--total-executor-cores", str(cores)),
        *("--conf", f"spark.pyspark.python=./{shipped.environment.name}"),
        *("--conf", f"spark.pyspark.driver.python={shipped.environment}"),
        *("--conf", "spark.sql.shuffle.partitions=2"),  # tiny inputs, two cores
        *("--conf", f"spark.executor.extraJavaOptions={QUICK_JVM_OPTIONS}"),
        *("--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"),
        *("--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s"),
        *("--py-files", str(shipped.py_files)),
        *("--files", str(shipped.environment)),
        str(primary),
        *args,
    ]
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        command,
        cwd=cwd,
        env=scrubbed_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
