"""Offline Spark jobs over `xnode export` output (docs/export-format.md).

`retention_expiry` plans what may be pruned (XIP-49 3.2.4); `misbehavior_aggregation`
verifies and aggregates misbehavior reports for the security council (3.2.7, 3.2.8).
"""
