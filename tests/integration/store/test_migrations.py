"""Migrations: only through alembic, repeatable, safe when processes start together."""

from __future__ import annotations

import os
import subprocess
import sys


def _psql(dsn: str, sql: str) -> set[str]:
    out = subprocess.run(["psql", dsn, "-tAc", sql], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_concurrent_migrate_processes_on_an_empty_database(empty_database: str) -> None:
    env = {**os.environ, "XNODE_DATABASE_DSN": empty_database}
    migrate = [sys.executable, "-m", "xnode.cli", "migrate"]
    procs = [
        subprocess.Popen(migrate, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    again = subprocess.run(migrate, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "latest schema" in again.stdout
    tables = _psql(empty_database, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    indexes = _psql(empty_database, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
    assert {"originator_envelopes", "vector_clock", "node_info", "misbehavior_reports"} <= tables
    assert "originator_envelopes_topic" in indexes
