"""`xnode health`: whether the node this host runs serves, read from its own settings (the
XNODE_* variables or flags `xnode run` takes), for the image's HEALTHCHECK, a service
manager's smoke check and an operator's first look.

It dials the gRPC port on loopback: over TLS when the node serves TLS, checked against the
CA given (or the node's peer CA, else the system roots) under the name the node's certificate
is issued for, showing the node's own certificate when the node asks clients for one."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from grpc_health.v1 import health_pb2

from xnode.client.grpc_services import health_check
from xnode.config import Settings
from xnode.tls import ClientTls, TlsConfigError

_ANY_HOST = {"", "0.0.0.0", "[::]", "::"}


def loopback_target(listen_address: str) -> str:
    """Where this host reaches a node bound to `listen_address` (0.0.0.0 -> 127.0.0.1)."""
    host, _, port = listen_address.rpartition(":")
    return f"{'127.0.0.1' if host in _ANY_HOST else host}:{port}"


def certificate_name(cert_file: Path) -> str | None:
    """The first DNS name the certificate is issued for; None when it names only IPs (the
    loopback address then has to be among them)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound) as exc:
        raise TlsConfigError(f"cannot read the names of {cert_file}: {exc}") from exc
    dns = names.get_values_for_type(x509.DNSName)
    return dns[0] if dns else None


@dataclass(frozen=True)
class Answer:
    serving: bool
    said: str


def check(settings: Settings, ca_file: Path | None = None, timeout_s: float = 3.0) -> Answer:
    """The node's overall health ("" service) as its gRPC port answers it."""
    target = loopback_target(settings.listen_address)
    channel = _channel(settings, target, ca_file)
    try:
        answer = health_check(channel)(health_pb2.HealthCheckRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        return Answer(False, f"{target}: {exc.code().name} {exc.details()}")
    finally:
        channel.close()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    return Answer(answer.status == health_pb2.HealthCheckResponse.SERVING, f"{target}: {status}")


def _channel(settings: Settings, target: str, ca_file: Path | None) -> grpc.Channel:
    cert_file, key_file = settings.tls_cert_file, settings.tls_key_file
    if cert_file is None or key_file is None:
        return grpc.insecure_channel(target)
    tls = ClientTls.from_files(
        ca_file or settings.tls_peer_ca_file,
        cert_file if settings.tls_client_ca_file else None,
        key_file if settings.tls_client_ca_file else None,
    )
    options: list[tuple[str, str]] = []
    name = certificate_name(cert_file)
    host = target.rpartition(":")[0]
    if name is not None and not _is_ip(name) and name != host:
        options.append(("grpc.ssl_target_name_override", name))
    return grpc.secure_channel(target, tls.credentials(), options)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
