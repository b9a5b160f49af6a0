"""The operators' tests run the replication tests' network of `xnode run` processes on a
real anvil, and containers through podman's Docker API (the fixtures are shared, not copied)."""

from tests.e2e.podman_host import docker_api
from tests.e2e.replication.conftest import chain_network

__all__ = ["chain_network", "docker_api"]
