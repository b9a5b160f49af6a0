"""The rule for a rolling upgrade (CHANGELOG.md, "Mixed versions during a rolling upgrade"):
a node of the previous release and one of this checkout replicate each other. The previous
release is its commit of main (CHANGELOG.md names it), taken with `git archive` into a
directory kept under the temporary directory by commit, and run from there with this
environment's dependencies (the release's are the same). Each node has its own fresh
database, migrated by its own code; the registry is a file. Both publish, and each ends up
holding the other's envelopes byte for byte and its signed checkpoint, with no checkpoint
kept aside as a conflict and no misbehavior report on either side once both served (before,
each may report the other unreachable while it starts)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, NodeProcess, NodeSpec
from tests.support.docs_blocks import ROOT
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port

# The previous release, 0.1.0 (CHANGELOG.md): main's commit, reachable in any full clone.
PREVIOUS_RELEASE = "55f20068016a0281fbc411738be9dab60695277c"
PREVIOUS, CURRENT = 100, 200  # the node ids, one per release
PAYER = SigningKey.generate()
GROUP = b"\x38" * 16
PUBLISHED = 20  # envelopes each node originates
SETTINGS = {
    **REPLICATION_TEST_SETTINGS,
    "log_checkpoint_seconds": 0.5,
    "replication_repair_seconds": 2.0,
}


def release_source(commit: str) -> Path:
    """The release's `src/` (and `migrations/`, which its code finds beside it), extracted
    once per machine: a directory per commit, filled elsewhere and renamed into place, so
    concurrent sessions never see it half written."""
    cache = Path(tempfile.gettempdir()) / f"xnode-release-{commit[:12]}"
    if not (cache / "src" / "xnode").is_dir():
        found = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], check=False
        )
        if found.returncode != 0:
            pytest.fail(f"commit {commit} is not in this clone: `git fetch --unshallow` first")
        partial = Path(tempfile.mkdtemp(prefix=f"{cache.name}-", dir=cache.parent))
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "src", "migrations"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
        # As a release build does (docker/Dockerfile): the commit it reports.
        (partial / "src" / "xnode" / "BUILD_COMMIT").write_text(commit + "\n")
        try:
            partial.rename(cache)
        except OSError:  # another session put it there first
            shutil.rmtree(partial, ignore_errors=True)
    return cache / "src"


@pytest.fixture
def previous_release() -> Path:
    source = release_source(PREVIOUS_RELEASE)
    version = subprocess.run(
        [sys.executable, "-m", "xnode.cli", "--version"],
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert PREVIOUS_RELEASE in version.stdout, version.stdout  # that code, not this checkout's
    return source


async def _rows(dsn: str, query: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query))
    finally:
        await conn.close()


async def test_the_previous_release_and_this_one_replicate_each_other(
    previous_release: Path,
    pg_cluster: PgCluster,
    spawn_node: Callable[..., NodeProcess],
    tmp_path: Path,
) -> None:
    spec = NodeSpec(tmp_path, {PREVIOUS: SigningKey.generate(), CURRENT: SigningKey.generate()})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in spec.keys}
    registry = Registry(
        NodeEntry(n, k.public_key, f"http://{addresses[n]}") for n, k in spec.keys.items()
    )
    spec.nodes_file.write_text(registry.to_json())
    dsns = {}
    for node_id in spec.keys:  # empty: each release migrates its own
        name = f"v_{uuid.uuid4().hex[:12]}"
        pg_cluster.create_database(name)
        dsns[node_id] = pg_cluster.dsn(name)
    settings = {k: str(v) for k, v in SETTINGS.items()}
    nodes = {
        node_id: spawn_node(
            dsns[node_id],
            spec,
            node_id,
            wait=False,
            source=source,
            listen_address=addresses[node_id],
            **settings,
        )
        for node_id, source in ((PREVIOUS, previous_release), (CURRENT, None))
    }
    for node_id, node in nodes.items():
        if not wait_serving(addresses[node_id], 60):
            pytest.fail(f"node {node_id} did not start:\n{node.output()[-3000:]}")

    sent: dict[int, list[bytes]] = {}
    for node_id in spec.keys:
        async with NodeClient(addresses[node_id]) as client:
            payloads = [b"release %d: %d" % (node_id, i) for i in range(PUBLISHED)]
            stored = await client.publish_group_messages(PAYER, node_id, GROUP, payloads)
        sent[node_id] = [e.SerializeToString() for e in stored]
    everything = sent[PREVIOUS] + sent[CURRENT]

    async def holds_everything(node_id: int) -> bool:
        async with NodeClient(addresses[node_id]) as client:
            found = await client.query(originators=[PREVIOUS, CURRENT], limit=1000)
        return [e.SerializeToString() for e in found] == everything

    async def follows_checkpoint(node_id: int, originator: int) -> bool:
        rows = await _rows(
            dsns[node_id],
            "SELECT tree_size FROM log_checkpoints WHERE conflict IS NULL"
            f" AND originator_node_id = {originator}",
        )
        return any(r["tree_size"] == PUBLISHED for r in rows)

    for node_id in spec.keys:
        await eventually(functools.partial(holds_everything, node_id), 60, f"{node_id} replicates")
    # Until both served, each may have reported the other unreachable; from here on, nothing.
    converged_ns = time.time_ns()
    for node_id, other in ((PREVIOUS, CURRENT), (CURRENT, PREVIOUS)):
        await eventually(
            functools.partial(follows_checkpoint, node_id, other),
            60,
            f"node {node_id} takes node {other}'s checkpoint",
        )

    for node_id, dsn in dsns.items():
        conflicts = await _rows(dsn, "SELECT id FROM log_checkpoints WHERE conflict IS NOT NULL")
        assert conflicts == [], f"node {node_id} kept checkpoints aside"
        async with NodeClient(addresses[node_id]) as client:
            answer = await client.misbehavior.QueryMisbehaviorReports(
                mb.QueryMisbehaviorReportsRequest(), timeout=30
            )
        reports = [
            mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report)
            for r in answer.reports
        ]
        late = [r for r in reports if r.reporter_time_ns >= converged_ns]
        assert late == [], f"node {node_id} holds reports filed once both served"
        assert all(r.type in misbehavior.LIVENESS_TYPES for r in reports), reports
