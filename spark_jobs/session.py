"""One way to build a SparkSession: loopback only, UTC, small shuffles, quiet logs, no Maven."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
DEFAULT_SHUFFLE_PARTITIONS = 8
LOOPBACK = "127.0.0.1"
_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# Where spark_jobs was imported from: the repository root, or the zip that `make spark-dist`
# builds and spark-submit ships with --py-files (then this is the zip's path).
_CODE_ROOT = Path(__file__).resolve().parent.parent

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands its gateway port to the Python driver."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _quiet_log_config() -> str:
    path = Path(tempfile.gettempdir()) / "xnode-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return f"-Dlog4j2.configurationFile=file:{path}"


def shipped() -> bool:
    """spark_jobs runs from the --py-files zip: spark-submit ships it, and the interpreter
    (spark.pyspark.python), to every executor, so nothing of this machine's paths may be
    handed on to them."""
    return not _CODE_ROOT.is_dir()


def _python_path() -> str:
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(_CODE_ROOT), inherited) if p)


def _is_local(master: str | None) -> bool:
    """Driver and executors in one JVM on this machine (None: spark-submit chose the master)."""
    return master is not None and master.startswith("local")


def _machine_settings(master: str | None) -> dict[str, str]:
    """Settings that name this machine: loopback addresses for local runs without
    spark-submit, and, for a checkout, its path and interpreter for the Python workers (they
    unpickle functions defined in spark_jobs). A cluster's executors must reach the driver,
    which they cannot at 127.0.0.1: there the address is SPARK_LOCAL_IP's or
    spark.driver.host's, as it is under spark-submit."""
    settings = {}
    if _is_local(master):
        settings["spark.driver.host"] = LOOPBACK
        settings["spark.driver.bindAddress"] = LOOPBACK
    if not shipped():
        settings["spark.executorEnv.PYTHONPATH"] = _python_path()
        settings["spark.executorEnv.PYSPARK_PYTHON"] = sys.executable
    return settings


def build_session(
    master: str | None = None,
    app_name: str = "xnode-spark",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    driver_memory: str = "4g",
    quiet: bool = True,
) -> SparkSession:
    """`master=None` means local[*], unless spark-submit already chose one.

    Deliberately sets no spark.jars.packages: everything comes from the pyspark wheel.
    """
    # Workers must run this interpreter: it is the one with xnode, coincurve and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and not launched_by_spark_submit():
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    settings = {
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Exports hold thousands of small day partitions on a local disk: listing them on the
        # driver takes milliseconds, a distributed listing job (the default above 32 paths)
        # took seconds.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.log.structuredLogging.enabled": "false",
        **_machine_settings(master),
    }
    if quiet:
        settings["spark.driver.extraJavaOptions"] = _quiet_log_config()
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # A default only: a cluster's own `spark-submit --conf spark.sql.shuffle.partitions=N` wins.
    if not spark.sparkContext.getConf().contains(_SHUFFLE_PARTITIONS):
        spark.conf.set(_SHUFFLE_PARTITIONS, str(shuffle_partitions))
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark
