"""TLS between nodes and for clients (XIP-49 3.2.3).

An address with `https://` is reached over TLS, verified against a configured CA (or the
system roots); `http://` or a bare host:port is plaintext, for local development. The node
serves TLS from a certificate and key file, and may ask clients for certificates of its CA."""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import structlog
from cryptography import x509

log = structlog.get_logger(__name__)

HTTPS = "https://"
HTTP = "http://"

ChannelOptions = Sequence[tuple[str, Any]]


class TlsConfigError(ValueError):
    """TLS settings that do not fit together, or files that cannot be read."""


def _read(path: Path | str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read the {what} {path}: {exc}") from exc


def target_of(address: str) -> tuple[str, bool]:
    """(host:port, whether it is reached over TLS) of a registry or client address."""
    if address.startswith(HTTPS):
        return address.removeprefix(HTTPS).rstrip("/"), True
    return address.removeprefix(HTTP).rstrip("/"), False


@dataclass(frozen=True)
class ClientTls:
    """How this side checks a TLS server (`root_certificates`; None: the system roots) and
    the certificate it shows when the server asks for one."""

    root_certificates: bytes | None = None
    private_key: bytes | None = None
    certificate_chain: bytes | None = None

    @classmethod
    def from_files(
        cls,
        ca_file: Path | str | None = None,
        cert_file: Path | str | None = None,
        key_file: Path | str | None = None,
    ) -> ClientTls:
        if (cert_file is None) != (key_file is None):
            raise TlsConfigError("a client certificate needs both its certificate and key file")
        return cls(
            _read(ca_file, "CA file") if ca_file is not None else None,
            _read(key_file, "key file") if key_file is not None else None,
            _read(cert_file, "certificate file") if cert_file is not None else None,
        )

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            self.root_certificates, self.private_key, self.certificate_chain
        )


def open_channel(
    address: str, tls: ClientTls | None = None, options: ChannelOptions = ()
) -> grpc.aio.Channel:
    """An asyncio channel to `address`: TLS for https:// (`tls` None: system roots, no
    client certificate), plaintext otherwise."""
    target, secure = target_of(address)
    if secure:
        credentials = (tls or ClientTls()).credentials()
        return grpc.aio.secure_channel(target, credentials, options=list(options))
    return grpc.aio.insecure_channel(target, options=list(options))


def open_blocking_channel(address: str, tls: ClientTls | None = None) -> grpc.Channel:
    """The same as `open_channel`, for code without an event loop."""
    target, secure = target_of(address)
    if secure:
        return grpc.secure_channel(target, (tls or ClientTls()).credentials())
    return grpc.insecure_channel(target)


@dataclass(frozen=True)
class ServerTls:
    """What a listener serves: its certificate chain and key; with `client_ca`, it asks
    clients for a certificate of that CA (and refuses them without one when
    `require_client_cert`)."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None
    require_client_cert: bool = False
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str | None = None

    @classmethod
    def from_files(
        cls,
        cert_file: Path | None,
        key_file: Path | None,
        client_ca_file: Path | None = None,
        require_client_cert: bool = False,
    ) -> ServerTls | None:
        """None when no certificate is configured (plaintext)."""
        if cert_file is None and key_file is None:
            if client_ca_file is not None:
                raise TlsConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file")
            return None
        if cert_file is None or key_file is None:
            raise TlsConfigError("TLS needs both tls_cert_file and tls_key_file")
        return cls(
            _read(cert_file, "certificate file"),
            _read(key_file, "key file"),
            _read(client_ca_file, "client CA file") if client_ca_file is not None else None,
            require_client_cert,
            str(cert_file),
            str(key_file),
            str(client_ca_file) if client_ca_file is not None else None,
        )

    def credentials(self) -> grpc.ServerCredentials:
        """The gRPC port's credentials, served again from the files once they change."""
        files = ServedFiles(self)

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            renewed = files.renewed()
            return renewed.certificate_configuration() if renewed is not None else None

        # gRPC takes None for "unchanged", which its stubs' type leaves out.
        fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], fetch)
        return grpc.dynamic_ssl_server_credentials(
            self.certificate_configuration(),
            fetcher,
            require_client_authentication=self.require_client_cert and self.client_ca is not None,
        )

    def certificate_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(self.private_key, self.certificate_chain)], root_certificates=self.client_ca
        )

    def files(self) -> tuple[str, ...]:
        return (self.cert_file, self.key_file, *filter(None, [self.client_ca_file]))

    def reread(self) -> ServerTls:
        """The same settings, the files read again; TlsConfigError when they do not fit."""
        client_ca = Path(self.client_ca_file) if self.client_ca_file else None
        renewed = ServerTls.from_files(
            Path(self.cert_file), Path(self.key_file), client_ca, self.require_client_cert
        )
        if renewed is None:  # not reached: both files are named
            raise TlsConfigError("TLS needs both tls_cert_file and tls_key_file")
        renewed.ssl_context()  # refuses a key that is not the certificate's
        return renewed

    def reloading_sni(self) -> Callable[[Any, str | None, ssl.SSLContext], None]:
        """For an SSLContext's `sni_callback` (called at each handshake): moves the handshake
        to a context of the renewed files once they change."""
        files = ServedFiles(self)
        current: list[ssl.SSLContext] = []

        def switch(connection: Any, _name: str | None, _context: ssl.SSLContext) -> None:
            renewed = files.renewed()
            if renewed is not None:
                current[:] = [renewed.ssl_context()]
            if current:
                connection.context = current[0]

        return switch

    def ssl_context(self) -> ssl.SSLContext:
        """The same certificate, key and client CA for an HTTP listener (gRPC-web, JSON)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca is not None:
                context.load_verify_locations(cadata=self.client_ca.decode())
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(f"cannot use {self.cert_file} and {self.key_file}: {exc}") from exc
        if self.client_ca is not None:
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
            )
        return context

    def reloading_ssl_context(self) -> ssl.SSLContext:
        """`ssl_context`, serving the renewed files once they change."""
        context = self.ssl_context()
        context.sni_callback = self.reloading_sni()
        return context

    def as_client(self, peer_ca: bytes | None) -> ClientTls:
        """What this node uses towards https:// peers: their CA, and its own certificate in
        case they ask for one."""
        return ClientTls(peer_ca, self.private_key, self.certificate_chain)


class ServedFiles:
    """The files a listener serves, watched at each TLS handshake (a few stat calls): a
    renewal written over them is served from the next handshake on, without a restart.
    Files that do not fit together (a certificate written before its key) are logged once
    and the previous ones kept until the next change."""

    def __init__(self, served: ServerTls) -> None:
        self._served = served
        self._seen = self._stamp()
        self._lock = threading.Lock()  # handshakes come from gRPC's and the HTTP threads

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for name in self._served.files():
            try:
                found = os.stat(name)
            except OSError:
                stamps.append((0, 0, 0))
                continue
            stamps.append((found.st_mtime_ns, found.st_size, found.st_ino))
        return tuple(stamps)

    def renewed(self) -> ServerTls | None:
        """The files read again when they changed since last seen; else None."""
        with self._lock:
            stamp = self._stamp()
            if stamp == self._seen:
                return None
            self._seen = stamp
            try:
                self._served = self._served.reread()
            except TlsConfigError as exc:
                log.warning("tls_reload_failed", files=self._served.files(), error=str(exc))
                return None
            log.info("tls_reloaded", cert_file=self._served.cert_file)
            return self._served


class PeerTls:
    """What this node uses towards https:// peers: their CA, and its own certificate in case
    they ask for one, read again once its files change (checked each time a channel to a
    peer is wanted), so a renewal is shown to peers from their next connection on, as the
    listeners serve it."""

    def __init__(self, peer_ca: bytes | None, served: ServerTls | None = None) -> None:
        self._peer_ca = peer_ca
        self._files = ServedFiles(served) if served is not None else None
        self._current = served.as_client(peer_ca) if served is not None else ClientTls(peer_ca)

    def current(self) -> ClientTls:
        """The same object until the files change: channels made with it stay usable."""
        renewed = self._files.renewed() if self._files is not None else None
        if renewed is not None:
            self._current = renewed.as_client(self._peer_ca)
        return self._current


def certificate_not_after(cert_file: str) -> float | None:
    """When the first certificate of a PEM chain file expires (Unix time); None when it
    cannot be read."""
    try:
        certificate = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    except (OSError, ValueError):
        return None
    return certificate.not_valid_after_utc.timestamp()


def is_handshake_failure(details: str) -> bool:
    """Whether a failed call's details say the TLS handshake failed (an unknown CA, a name
    mismatch, a plaintext server), as opposed to the peer being down."""
    lowered = details.lower()
    return "handshake" in lowered or "certificate_verify_failed" in lowered
