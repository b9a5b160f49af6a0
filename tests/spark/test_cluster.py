"""Both Spark jobs on a standalone cluster (a master and two one-core workers, see
standalone.py), submitted through `spark-submit --master spark://...` with only what
`python -m spark_jobs.packaging` (`make spark-dist`) ships: the results equal local mode's, and
the driver and the executors ran the shipped zip and PEX, nothing of this checkout or its venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_jobs.packaging import ENVIRONMENT_NAME, LAUNCHER_NAME, ZIP_NAME
from tests.spark.jvm import REPO_ROOT
from tests.spark.standalone import (
    Cluster,
    Shipped,
    spark_home,
    start_cluster,
    submit,
)
from tests.spark.test_misbehavior_aggregation import build_fixture, registry_of
from tests.spark.test_retention_expiry import AS_OF, EXPECTED_RANGES, write_fixture

COUNCIL_TABLES = ("liveness", "client_liveness", "safety", "flagged", "rejected")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    """Builds the distribution as `make spark-dist` does; its PEX is the driver's interpreter
    too."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "spark_jobs.packaging", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return Shipped(out / ZIP_NAME, out / LAUNCHER_NAME, out / ENVIRONMENT_NAME)


@pytest.fixture(scope="module")
def cluster(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # `spark` first: it fails the test loudly when pyspark or Java is missing.
    started = start_cluster(tmp_path_factory.mktemp("cluster"), workers=2)
    yield started
    started.stop()
    assert all(w.process.returncode is not None for w in started.workers)


def run_job(cluster: Cluster, shipped: Shipped, cwd: Path, *args: str) -> str:
    done = submit(cluster, shipped, shipped.launcher, args, cwd)
    assert done.returncode == 0, f"{done.stderr[-6000:]}\n{cluster.logs()}"
    return done.stdout


def test_retention_plan_equals_local_mode(
    spark: Any, retention: ModuleType, cluster: Cluster, shipped: Shipped, tmp_path: Path
) -> None:
    exports = write_fixture(tmp_path / "export")
    local = retention.run(spark, [exports], tmp_path / "local.json", as_of=AS_OF)

    plan_path = tmp_path / "cluster.json"
    args = ("--input", str(exports), "--out", str(plan_path), "--as-of", str(AS_OF))
    stdout = run_job(cluster, shipped, tmp_path / "submit", "retention_expiry", *args)

    assert "12 expired envelopes in 6 ranges" in stdout
    plan = json.loads(plan_path.read_text())
    for document in (plan, local):
        document.pop("generated_at_unixtime")
    assert plan == local
    ranges = [
        (r["originator_node_id"], r["first_sequence_id"], r["last_sequence_id"])
        for r in plan["ranges"]
    ]
    assert ranges == EXPECTED_RANGES


def test_misbehavior_aggregation_equals_local_mode(
    spark: Any, aggregation: ModuleType, cluster: Cluster, shipped: Shipped, tmp_path: Path
) -> None:
    exports = build_fixture(tmp_path / "reports")
    local = tmp_path / "local"
    registry = registry_of(exports)
    aggregation.run(spark, [exports], local, registry, window_minutes=60)

    out = tmp_path / "council"
    args = ("--input", str(exports), "--out", str(out), "--registry", str(registry))
    stdout = run_job(
        cluster,
        shipped,
        tmp_path / "submit",
        "misbehavior_aggregation",
        *args,
        "--window-minutes",
        "60",
    )

    assert "10 accepted, 6 rejected (1 forged), flagged nodes [500, 600]" in stdout
    for name in COUNCIL_TABLES:
        expected = pq.read_table(local / f"{name}.parquet")
        got = pq.read_table(out / f"{name}.parquet")
        assert got.schema == expected.schema, name
        assert got.to_pylist() == expected.to_pylist(), name
    assert pq.read_table(out / "flagged.parquet").num_rows > 0
    for report in ("report.md", "report.html"):
        assert (out / report).read_text() == (local / report).read_text()


def _inside(path: str, root: Path) -> bool:
    return Path(os.path.normpath(path)).is_relative_to(root)


def test_executors_run_the_shipped_code_and_environment(
    cluster: Cluster, shipped: Shipped, tmp_path: Path
) -> None:
    probe = Path(__file__).with_name("cluster_probe.py")
    done = submit(cluster, shipped, probe, [], tmp_path / "submit")
    assert done.returncode == 0, f"{done.stderr[-6000:]}\n{cluster.logs()}"
    found = json.loads(done.stdout.strip().splitlines()[-1])

    venv = Path(sys.prefix).resolve()
    spark_install = spark_home()  # its python/lib/*.zip and jars hold pyspark and py4j
    driver = found["driver"]
    for name in ("spark_jobs.inputs", "xnode.core.crypto", "xmtp"):
        # The dist's zip, or pyspark's copy of it (SparkFiles); never the checkout.
        assert f"/{ZIP_NAME}/" in driver["modules"][name], name
        assert not _inside(driver["modules"][name], REPO_ROOT), name
    assert driver["pex"] == str(shipped.environment)
    for name in ("pyarrow", "coincurve", "Crypto"):
        assert not _inside(driver["modules"][name], venv), name

    workers = {w.name: w.work_dir / "apps" for w in cluster.workers}
    seen = set()
    for task in found["tasks"]:
        cwd = Path(task["cwd"])
        worker = next(name for name, apps in workers.items() if _inside(str(cwd), apps))
        seen.add(worker)
        assert task["pex"] == str(cwd / ENVIRONMENT_NAME)  # the executor's copy
        modules = {name: os.path.join(cwd, file) for name, file in task["modules"].items()}
        for name in ("spark_jobs.inputs", "xnode.core.crypto", "xmtp"):
            assert _inside(modules[name], cwd / ZIP_NAME), name  # the executor's copy
        for name in ("pyarrow", "coincurve", "Crypto"):
            # Unpacked from the PEX into its cache (PEX_ROOT), outside the checkout and venv.
            assert not _inside(modules[name], venv) and not _inside(modules[name], REPO_ROOT)
        for entry in task["sys_path"]:
            # Spark's own scripts (its python/lib zips) may live in a venv inside the
            # repository (a fresh clone's .venv); nothing else may come from there.
            if _inside(entry, spark_install):
                continue
            assert not _inside(entry, REPO_ROOT), entry
            assert not _inside(entry, venv), entry
    assert seen == set(workers)  # an executor on each worker ran tasks
    for daemon in cluster.workers:
        executors = cluster.app_dirs(daemon)
        assert executors, daemon.name
        assert all((e / ENVIRONMENT_NAME).exists() for e in executors)
