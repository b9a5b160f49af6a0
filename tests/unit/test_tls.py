"""TLS settings that fit together, addresses that say how to connect, devnet certificates."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from xnode.devtools.certs import CertAuthority, devnet_ca
from xnode.tls import ClientTls, ServerTls, TlsConfigError, is_handshake_failure, target_of


def test_the_address_scheme_says_tls_or_plaintext() -> None:
    assert target_of("https://10.0.0.1:5050/") == ("10.0.0.1:5050", True)
    assert target_of("http://10.0.0.1:5050") == ("10.0.0.1:5050", False)
    assert target_of("127.0.0.1:5050") == ("127.0.0.1:5050", False)


def test_no_certificate_is_plaintext() -> None:
    assert ServerTls.from_files(None, None) is None


def test_a_certificate_needs_its_key_and_a_client_ca_needs_both(tmp_path: Path) -> None:
    cert, _ = CertAuthority.create().issue_files(tmp_path, "node")
    with pytest.raises(TlsConfigError, match="both"):
        ServerTls.from_files(cert, None)
    with pytest.raises(TlsConfigError, match="tls_client_ca_file"):
        ServerTls.from_files(None, None, cert)
    with pytest.raises(TlsConfigError, match="both"):
        ClientTls.from_files(None, cert, None)
    with pytest.raises(TlsConfigError, match="cannot read"):
        ServerTls.from_files(cert, tmp_path / "missing.key")


def test_served_tls_checks_client_certificates_only_with_a_ca(tmp_path: Path) -> None:
    cert, key = CertAuthority.create().issue_files(tmp_path, "node")
    served = ServerTls.from_files(cert, key, cert, require_client_cert=True)
    assert served is not None and served.require_client_cert
    assert served.client_ca == cert.read_bytes()
    towards_peers = served.as_client(b"peer ca")
    assert towards_peers.root_certificates == b"peer ca"
    assert towards_peers.certificate_chain == cert.read_bytes()


def test_handshake_failures_are_told_from_a_peer_that_is_down() -> None:
    assert is_handshake_failure(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls "
        "handshake failed (TSI_PROTOCOL_FAILURE): ... CERTIFICATE_VERIFY_FAILED"
    )
    assert not is_handshake_failure(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused"
    )


def test_node_certificates_chain_to_the_ca_and_name_the_local_host(tmp_path: Path) -> None:
    ca = devnet_ca(tmp_path)
    assert devnet_ca(tmp_path).pem == ca.pem, "the CA is kept"
    cert_pem, _ = ca.issue("node-100")
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
