"""The byzantine harness (docs/evidence.md): a five-node network on anvil and Postgres where
one node at a time misbehaves, in each way XIP-49 3.2.7 names, or an honest node meets
hard conditions; each run ends with every node's `xnode export` and the council's Spark job,
and is scored on whom it flags."""
