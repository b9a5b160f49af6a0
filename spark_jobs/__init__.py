"""Offline Spark jobs over `xnode export` output (docs/export-format.md).

`retention_expiry` plans what may be pruned (XIP-49 3.2.4) for `xnode prune --plan`;
`misbehavior_aggregation` verifies and aggregates misbehavior reports for the security
council (3.2.7, 3.2.8). From the repository root, with the venv (pyspark==4.3.0, Java 17+):

    .venv/bin/python -m spark_jobs.retention_expiry --input EXPORTS --out plan.json
    .venv/bin/python -m spark_jobs.misbehavior_aggregation --input EXPORTS --out council/

or through spark-submit, which must be told the venv's interpreter (workers import xnode):

    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=.venv/bin/python \\
        .venv/bin/spark-submit --master 'local[2]' spark_jobs/retention_expiry.py ...

On a cluster, spark-submit ships the code instead: `make spark-dist` (spark_jobs.packaging)
builds dist/spark/ with the --py-files zip, launcher.py and a PEX of the third-party
distributions (the executors' interpreter); docs/data-pipeline.md has the command line.

Bad input exits 2 with one line on stderr and writes nothing. `gen_data` makes synthetic
exports (tests, bench/bench_spark.py).
"""
