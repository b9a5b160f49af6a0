"""spark-submit's primary resource for shipped jobs (`make spark-dist` copies it to
dist/spark/launcher.py): `launcher.py JOB ARGS...` runs `spark_jobs.JOB`'s `main(ARGS)`.

spark-submit wants a Python file, not a module name; the jobs themselves come from the
`--py-files` zip, so the driver and the executors import the same shipped code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import import_module

USAGE = "usage: launcher.py JOB [ARGS...]  (JOB: a module of spark_jobs, e.g. retention_expiry)"


def find_job(name: str) -> Callable[[Sequence[str]], int] | None:
    """The job's `main`, or None when spark_jobs has no such runnable module."""
    if not name.isidentifier():
        return None
    try:
        module = import_module(f"spark_jobs.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in ("spark_jobs", f"spark_jobs.{name}"):
            raise  # the job exists but something it imports is missing: show that
        return None
    main = getattr(module, "main", None)
    return main if callable(main) else None


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    job = find_job(argv[0])
    if job is None:
        print(f"launcher: no job spark_jobs.{argv[0]} with a main()", file=sys.stderr)
        return 2
    return job(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
