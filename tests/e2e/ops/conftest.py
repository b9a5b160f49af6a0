"""The operators' tests run the replication tests' network of `xnode run` processes on a
real anvil (the fixture is shared, not copied)."""

from tests.e2e.replication.conftest import chain_network

__all__ = ["chain_network"]
