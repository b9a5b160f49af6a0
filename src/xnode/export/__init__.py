"""`xnode export`: a node's envelope metadata and misbehavior reports as Parquet
(docs/export-format.md), for the Spark jobs in spark_jobs/."""
