"""`xnode export` and `xnode prune`: commands that join adapters (the store's readers, the
Parquet writer, the node registry) on the composition level, beside xnode.server."""
