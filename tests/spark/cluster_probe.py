"""Submitted by test_cluster.py like a job: prints, as one JSON line, where the driver's and
each task's interpreter and modules came from (the shipped zip and PEX, or not)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from spark_jobs.session import build_session

PROBED = ("spark_jobs.inputs", "xnode.core.crypto", "xmtp", "pyarrow", "coincurve", "Crypto")


def where(_: object = None) -> dict[str, Any]:
    """Runs in a Python worker (or the driver): imports as the jobs do, and says from where."""
    from importlib import import_module

    return {
        "executable": sys.executable,
        "pex": os.environ.get("PEX"),  # set by the PEX that runs this interpreter
        "cwd": os.getcwd(),
        "sys_path": [p for p in sys.path if p],
        "modules": {name: import_module(name).__file__ for name in PROBED},
    }


def main() -> None:
    spark = build_session(app_name="xnode-cluster-probe")
    try:
        # The driver's too while the session runs: stopping it deletes the driver's copies of
        # the shipped files, which pyspark put on sys.path.
        found = {
            "driver": where(),
            "tasks": spark.sparkContext.parallelize(range(4), 4).map(where).collect(),
        }
    finally:
        spark.stop()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
