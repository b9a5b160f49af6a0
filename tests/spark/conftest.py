"""One SparkSession (local[2]) for every Spark test. Missing pyspark or Java fails loudly:
these tests guard what `xnode prune` deletes, so they must never be silently skipped."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.spark.jvm import local_session

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # spark_jobs lives at the repository root, not in src/
    sys.path.insert(0, str(REPO_ROOT))


def _missing_requirement() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed: .venv/bin/pip install pyspark==4.3.0"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "java is not on PATH and JAVA_HOME is unset: Spark needs a JDK (17+)"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    problem = _missing_requirement()
    if problem is not None:
        pytest.fail(f"Spark tests cannot run: {problem}", pytrace=False)

    def start() -> Any:
        return local_session("xnode-spark-tests")

    try:
        session = start()
    except Exception as exc:  # said, then tried once more; a second failure fails the tests
        # A fork of this process while gRPC threads of earlier tests were busy once left
        # the driver's child broken (JAVA_GATEWAY_EXITED): one more start, saying why.
        print(f"Spark did not start ({exc!r}); starting it once more", file=sys.stderr)
        session = start()
    yield session
    session.stop()


def _job(name: str) -> ModuleType:
    problem = _missing_requirement()
    if problem is not None:
        pytest.fail(f"Spark tests cannot run: {problem}", pytrace=False)
    return importlib.import_module(f"spark_jobs.{name}")


@pytest.fixture(scope="session")
def retention() -> ModuleType:
    """spark_jobs.retention_expiry, imported only once pyspark is known to be there."""
    return _job("retention_expiry")


@pytest.fixture(scope="session")
def aggregation() -> ModuleType:
    return _job("misbehavior_aggregation")


@pytest.fixture(scope="session")
def inputs() -> ModuleType:
    return _job("inputs")


@pytest.fixture(scope="session")
def payer_usage() -> ModuleType:
    return _job("payer_usage")
