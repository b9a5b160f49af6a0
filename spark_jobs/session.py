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
# The repository root, so Python workers can unpickle functions defined in spark_jobs.
_REPO_ROOT = Path(__file__).resolve().parent.parent

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


def _python_path() -> str:
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(_REPO_ROOT), inherited) if p)


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
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    builder = SparkSession.builder.appName(app_name)
    if master is not None or not launched_by_spark_submit():
        builder = builder.master(master or DEFAULT_MASTER)
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # Exports hold thousands of small day partitions on a local disk: listing them on the
        # driver takes milliseconds, a distributed listing job (the default above 32 paths)
        # took seconds.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.log.structuredLogging.enabled": "false",
        "spark.executorEnv.PYTHONPATH": _python_path(),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }
    if quiet:
        settings["spark.driver.extraJavaOptions"] = _quiet_log_config()
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark
