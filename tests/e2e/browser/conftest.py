"""The chain network of the replication tests (nodes 100, 200, 300 on anvil), and the TLS
gateways of the clients' tests."""

from tests.e2e.clients.conftest import tls_gateways
from tests.e2e.replication.conftest import chain_network

__all__ = ["chain_network", "tls_gateways"]
