"""The Parquet side of `xnode export`: schemas, layout and watermark (docs/export-format.md),
for the Spark jobs in spark_jobs/. Imports no other adapter: rows come in through the ports in
xnode.export.ports; xnode.commands.export joins it to the store and the registry."""
