"""How the Spark tests start their JVMs: with options for short lives on small inputs, and the
jobs' command lines as an operator runs them from a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Every JVM of these tests lives seconds on inputs of a few rows: the optimizing compiler (C2)
# spends CPU on code that never runs long enough to pay it back, and a parallel collector's
# threads compete with the other processes for the machine's cores. The jobs' results do not
# depend on either; production runs keep the JVM's defaults.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(app_name: str) -> Any:
    """A `local[2]` SparkSession whose JVM starts with QUICK_JVM_OPTIONS. pyspark reads the
    options once, when it starts the JVM, which then serves every later session of this
    process: whichever test starts Spark first decides for the rest of the suite."""
    from spark_jobs.session import build_session

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPARK_SUBMIT_OPTS", QUICK_JVM_OPTIONS)
        return build_session(
            "local[2]", app_name=app_name, shuffle_partitions=2, driver_memory="1g"
        )


def run_job_cli(job: str, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """`python -m spark_jobs.JOB ARGS...` in its own JVM. PYTHONPATH holds the repository root
    for spark_jobs, plus the inherited path (it may name the checkout's src/ for xnode), as
    spark_jobs.session passes both on to the Python workers."""
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        SPARK_SUBMIT_OPTS=QUICK_JVM_OPTIONS,  # pyspark starts the driver's JVM with spark-submit
    )
    return subprocess.run(
        [sys.executable, "-m", f"spark_jobs.{job}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
