"""The byzantine harness (bench/bench_byzantine.py runs every kind) on two of its runs: an
equivocating node 500 is flagged, and only it, by a report that proves itself from the
exports alone; a node that lost rows heals and nobody files a safety report. Both end with
every node's `xnode export` and the council's Spark job."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.misbehavior_aggregation import council_on
from tests.spark.jvm import local_session
from xnode.devtools.byzantine.council import Council
from xnode.devtools.byzantine.network import Network
from xnode.devtools.byzantine.runs import by_name, run
from xnode.devtools.devchain import DevChain
from xnode.devtools.postgres import PgCluster, free_port


@pytest.fixture(scope="module")
def harness(pg_cluster: PgCluster) -> Iterator[tuple[Network, Council]]:
    """Five nodes registered on a fresh anvil, their databases in the session's cluster."""
    directory = Path(tempfile.mkdtemp(prefix="xnode-byzantine-"))
    chain = DevChain.start(directory, free_port())
    spark = local_session("xnode-byzantine")
    try:
        network = Network.register(directory, pg_cluster, chain)
        yield (
            network,
            council_on(spark, network.registry_file, chain.url, str(chain.contracts_file)),
        )
    finally:
        spark.stop()
        chain.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_an_equivocating_node_is_flagged_and_no_other(
    harness: tuple[Network, Council],
) -> None:
    network, council = harness
    outcome = await run(network, by_name("equivocate"), council)
    assert outcome.flags == {500: {"safety_proof"}}, outcome.flags
    assert (outcome.precision, outcome.recall) == (1.0, 1.0)
    assert outcome.verified, "the flag's report does not prove itself from the exports"
    assert outcome.passed


async def test_a_node_that_lost_rows_heals_and_nobody_is_reported(
    harness: tuple[Network, Council],
) -> None:
    network, council = harness
    outcome = await run(network, by_name("lost rows"), council)
    assert outcome.flags == {}, outcome.flags
    assert outcome.safety_reports == 0
    assert outcome.passed
