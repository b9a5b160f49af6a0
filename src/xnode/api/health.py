"""The gRPC health service (grpc.health.v1) as the board the health monitor writes to."""

from __future__ import annotations

from grpc_health.v1 import health, health_pb2

from xnode.api.registration import MISBEHAVIOR_SERVICE, PACKAGE, SHORT_NAMES
from xnode.usecases.health import CHAIN, DATABASE

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class GrpcHealthBoard:
    def __init__(self, servicer: health.HealthServicer) -> None:
        self.servicer = servicer

    def set_serving(self, service: str, serving: bool) -> None:
        self.servicer.set(service, _SERVING if serving else _NOT_SERVING)


def health_dependencies(chain_enabled: bool) -> dict[str, frozenset[str]]:
    """What each health service name needs: publish the database and, when enabled, the
    chain; "" (the node overall), query, replication and misbehavior reports the database.
    The official clients health-check "" and drop a node that is not SERVING for reads too,
    while a chain index that trails only holds back chain-bound publishes (answered
    UNAVAILABLE meanwhile): so "" follows the reads. Services answer to their full name
    (xmtp.xmtpv4.message_api.PublishApi) and their short one (publish)."""
    database = frozenset({DATABASE})
    publish = database | {CHAIN} if chain_enabled else database
    needs = {"publish": publish, "query": database, "replication": database}
    by_name: dict[str, frozenset[str]] = {"": database}
    for full, short in SHORT_NAMES.items():
        by_name[f"{PACKAGE}.{full}"] = needs[short]
        by_name[short] = needs[short]
    by_name[MISBEHAVIOR_SERVICE] = database
    return by_name
