"""spark_jobs.packaging (`make spark-dist`): what the zip and requirements hold, found by
following imports (no Spark, no environment build; test_cluster.py runs the whole thing)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_jobs import launcher
from spark_jobs import packaging as p


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_jobs_closure_is_what_the_import_contract_allows() -> None:
    closure = p.follow_imports(p.job_modules())
    names = set(closure.modules)

    assert {"spark_jobs.retention_expiry", "spark_jobs.misbehavior_aggregation"} <= names
    assert "spark_jobs.launcher" in names and "spark_jobs.packaging" not in names
    assert {"xnode.core.crypto", "xnode.export.schema", "xmtp"} <= names
    xnode = {n for n in names if n.startswith("xnode.")}
    assert all(n.startswith(("xnode.core", "xnode.export")) for n in xnode)
    assert xnode & {"xnode.export.writer", "xnode.export.ports"} == set()
    assert not any(n.endswith("_pb2_grpc") for n in names)  # so grpc is not needed


def test_requirements_are_the_imported_distributions_without_spark_s_own() -> None:
    closure = p.follow_imports(p.job_modules())
    found = p.distributions(closure.third_party)
    assert set(found) == {
        "coincurve",
        # The council job decodes chain logs (BLOCKCHAIN_INCONSISTENCY, core.chain_logs).
        "eth-abi",
        "protobuf",
        "pyarrow",
        "pycryptodome",
        "pynacl",
        "safe-pysha3",
    }
    assert p.pins(found)[0] == f"coincurve=={found['coincurve']}"


def test_imports_are_followed_through_packages_relative_and_lazy_imports(tmp_path: Path) -> None:
    sources = write(
        tmp_path,
        {
            "spark_jobs/__init__.py": "",
            "spark_jobs/job.py": (
                "from typing import TYPE_CHECKING\n"
                "from . import helper\n"
                "from .helper import X\n"
                "if TYPE_CHECKING:\n    import xnode.store\n"
                "def later():\n    import xnode.core.rules\n    import coincurve\n"
            ),
            "spark_jobs/helper.py": "import json\nfrom google.protobuf import message\nX = 1\n",
            "xnode/__init__.py": "",
            "xnode/core/__init__.py": "",
            "xnode/core/rules.py": "",
            "xnode/store/__init__.py": "import asyncpg\n",
        },
    )
    closure = p.follow_imports(["spark_jobs.job"], [sources])
    assert set(closure.modules) == {
        "spark_jobs",
        "spark_jobs.job",
        "spark_jobs.helper",
        "xnode",
        "xnode.core",
        "xnode.core.rules",
    }
    assert closure.third_party == {"coincurve", "google.protobuf"}


def test_a_missing_first_party_module_is_an_error(tmp_path: Path) -> None:
    sources = write(tmp_path, {"spark_jobs/__init__.py": "import xnode.core.gone\n"})
    write(tmp_path, {"xnode/__init__.py": "", "xnode/core/__init__.py": ""})
    with pytest.raises(p.PackagingError, match=r"xnode\.core\.gone not found"):
        p.follow_imports(["spark_jobs"], [sources])


def test_the_zip_alone_provides_every_job(tmp_path: Path) -> None:
    first = p.build(tmp_path / "a", with_environment=False)
    second = p.build(tmp_path / "b", with_environment=False)
    archive = first.out / p.ZIP_NAME
    assert archive.read_bytes() == (second.out / p.ZIP_NAME).read_bytes()  # reproducible
    with zipfile.ZipFile(archive) as z:
        assert (
            "xnode/core/crypto.py" in z.namelist() and "xnode/store/__init__.py" not in z.namelist()
        )
    requirements = (first.out / p.REQUIREMENTS_NAME).read_text()
    assert "pyarrow==" in requirements and "pyspark" not in requirements.replace("# pyspark", "")
    assert not (first.out / p.ENVIRONMENT_NAME).exists()

    # This interpreter has pyspark and the dependencies, but no path to the checkout.
    check = (
        "import spark_jobs.retention_expiry as r, spark_jobs.misbehavior_aggregation as m, "
        "xnode.core.crypto as c; print(r.__file__, m.__file__, c.__file__)"
    )
    env = dict(os.environ, PYTHONPATH=str(archive))
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert all(f.startswith(f"{archive}/") for f in done.stdout.split())
    launched = subprocess.run(
        [sys.executable, str(first.out / p.LAUNCHER_NAME), "retention_expiry", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert launched.returncode == 0 and "--as-of" in launched.stdout, launched.stderr


@pytest.mark.parametrize("argv", [[], ["no_such_job"], ["session"], ["../x"]])
def test_launcher_refuses_what_is_not_a_job(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert launcher.main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1
