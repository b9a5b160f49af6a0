"""Throwaway X.509 for local networks: a CA and node certificates it signs, for
`xnode devnet --tls` and the tests. Keys are P-256; certificates name 127.0.0.1 and localhost
and serve both as server and as client certificates (nodes show them to peers that ask)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30  # node certificates; the devnet issues new ones at each start
CA_VALID_DAYS = 3650  # a devnet keeps its CA (and the https:// addresses registered)
LOCAL_HOSTS = ("127.0.0.1", "localhost")


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _builder(
    subject: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int = VALID_DAYS
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


@dataclass(frozen=True)
class CertAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "xnode devnet CA") -> CertAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            _builder(common_name, _name(common_name), key.public_key(), CA_VALID_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> CertAuthority:
        key = serialization.load_pem_private_key(key_file.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_file} is not an EC private key")
        return cls(key, x509.load_pem_x509_certificate(cert_file.read_bytes()))

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write(self, cert_file: Path, key_file: Path) -> None:
        cert_file.write_bytes(self.pem)
        key_file.write_bytes(_key_pem(self.key))
        key_file.chmod(0o600)

    def issue(self, common_name: str, hosts: tuple[str, ...] = LOCAL_HOSTS) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) for a node reachable at `hosts`."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            _builder(common_name, self.certificate.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_san(hosts), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def issue_files(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Writes `<name>.pem` and `<name>.key` into `directory`; returns their paths."""
        cert_pem, key_pem = self.issue(name)
        cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        key_file.chmod(0o600)
        return cert_file, key_file


def devnet_ca(directory: Path) -> CertAuthority:
    """The CA kept in `directory` (ca.pem, ca.key), made on first use."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "ca.pem", directory / "ca.key"
    if cert_file.exists() and key_file.exists():
        return CertAuthority.load(cert_file, key_file)
    ca = CertAuthority.create()
    ca.write(cert_file, key_file)
    return ca
