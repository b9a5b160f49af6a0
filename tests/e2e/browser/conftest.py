"""The chain network of the replication tests (nodes 100, 200, 300 on anvil)."""

from tests.e2e.replication.conftest import chain_network

__all__ = ["chain_network"]
