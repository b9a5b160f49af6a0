"""The byzantine harness: one way to misbehave per run, scored by the council's Spark job.

A five-node network (Postgres, anvil, `xnode run`) where node 500 misbehaves in one way per
run, or every node is honest under conditions that must convict nobody; each run ends with
every node's `xnode export` and the council's Spark job, and the table says whom it flagged
(docs/evidence.md, "Byzantine harness").

    .venv/bin/python bench/bench_byzantine.py [--runs equivocate,"lost rows"] [--dir DIR]"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # spark_jobs

from spark_jobs.chain_facts import fetch_chain_facts, payload_contracts
from spark_jobs.misbehavior_aggregation import council_on
from spark_jobs.session import build_session
from xnode.core.chain_evidence import ChainFacts
from xnode.devtools.byzantine.network import HarnessError, Network
from xnode.devtools.byzantine.runs import KINDS, Outcome, by_name, run, table
from xnode.devtools.devchain import DevChain
from xnode.devtools.postgres import free_port, start_cluster


async def run_all(directory: Path, names: list[str]) -> list[Outcome]:
    cluster = start_cluster(directory / "pg", fsync=False)
    chain = DevChain.start(directory, free_port())
    spark = build_session("local[2]", "xnode-byzantine", shuffle_partitions=2, driver_memory="1g")
    outcomes: list[Outcome] = []
    failed: list[str] = []
    try:
        network = Network.register(directory, cluster, chain)
        council = council_on(spark, network.registry_file, chain.url, str(chain.contracts_file))
        contracts = payload_contracts(chain.contracts_file)

        def lookup(txs: list[bytes]) -> ChainFacts:
            return fetch_chain_facts(chain.url, contracts, txs)

        for name in names:
            kind = by_name(name)
            try:
                outcome = await run(network, kind, council, lookup)
            except HarnessError as exc:
                failed.append(name)
                print(f"{name}: FAILED: {exc}", flush=True)
                continue
            phases = ", ".join(f"{k} {v:.0f} s" for k, v in outcome.phases.items())
            print(f"{table([outcome]).splitlines()[-1]} ({phases})", flush=True)
            outcomes.append(outcome)
    finally:
        spark.stop()
        chain.stop()
        cluster.stop()
    if failed:
        print(f"runs that did not complete: {', '.join(failed)}")
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--runs",
        default=",".join(k.name for k in KINDS),
        help="comma-separated run names (default: all)",
    )
    parser.add_argument("--dir", default=None, help="keep logs and exports here")
    args = parser.parse_args()
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    known = [k.name for k in KINDS]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown runs {unknown}; known: {known}")
    directory = Path(args.dir or tempfile.mkdtemp(prefix="xnode-byzantine-"))
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # Postgres runs as `postgres` when we are root
    print(f"load average {os.getloadavg()[0]:.2f}; logs and exports in {directory}", flush=True)
    outcomes = asyncio.run(run_all(directory, names))
    print(table(outcomes))
    passed = len(outcomes) == len(names) and all(o.passed for o in outcomes)
    if args.dir is None and passed:
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
