"""TLS for a service's own ports: the settings every service shares, checked at startup.

Each service reads ``INFERLINE_<SERVICE>_TLS_CERT``, ``_TLS_KEY`` and ``_TLS_CA`` (files, PEM),
and ``_HEALTH_PORT``:

- none set: plaintext (the default; inside a trusted network, or behind a mesh);
- cert and key: the gRPC port (and middleman's REST port) serve TLS;
- cert, key and CA: mutual TLS: a client must present a certificate the CA signed (Envoy's),
  and one without is refused in the handshake.

- a health port: a second, plaintext port answering ``grpc.health.v1`` only (what a kubelet's
  gRPC probe reaches, which presents no certificate).

A missing or unreadable file, or a key without its certificate, fails startup naming the
variable. The files are read again for the next connection whenever one of them changes (a
mounted Secret that cert-manager renews): a renewal needs no restart.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from inferline.config import ConfigError, env_name


@dataclass(frozen=True)
class Served:
    """How a service's own ports are served: every service's ``Config`` inherits these fields
    (one place for their defaults and meanings) and checks them with :func:`require_tls`."""

    # TLS (inferline.tls), PEM files: with a certificate and key the service's own ports serve
    # TLS (gRPC, and middleman's REST); with a CA too, mutual TLS (a client without a
    # certificate that CA signed, such as Envoy's, is refused); a missing or non-PEM file stops
    # start-up naming it (docs/reliability.md).
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # A second, plaintext port that answers grpc.health.v1 only, with the gRPC port's statuses:
    # for a kubelet's gRPC probe while that port asks every client for a certificate (0: none).
    health_port: int = 0


class TlsSettings(Protocol):
    """The three fields a service's config dataclass carries."""

    @property
    def tls_cert(self) -> str: ...
    @property
    def tls_key(self) -> str: ...
    @property
    def tls_ca(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def health_port(self) -> int: ...


@dataclass
class ServerTls:
    """A server's certificate chain and key, and the CA its clients must be signed by
    (``None``: no client certificate asked for)."""

    cert_file: str
    key_file: str
    ca_file: str | None
    _seen: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    @property
    def mutual(self) -> bool:
        return self.ca_file is not None

    def _files(self) -> tuple[str, ...]:
        return (self.cert_file, self.key_file, *([self.ca_file] if self.ca_file else []))

    def _signature(self) -> tuple[tuple[int, int], ...]:
        """What changes when a file is replaced: its inode and mtime, through any symlink (a
        mounted Secret swaps a directory under its files' links)."""
        stats = (Path(path).stat() for path in self._files())
        return tuple((st.st_ino, st.st_mtime_ns) for st in stats)

    def changed(self) -> bool:
        """Whether a file changed since the last call (or this is the first); a file missing
        meanwhile counts as unchanged: the old certificate stays until a whole one is there."""
        try:
            now = self._signature()
        except OSError:
            return False
        if now == self._seen:
            return False
        self._seen = now
        return True

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        ca = None if self.ca_file is None else Path(self.ca_file).read_bytes()
        pair = (Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=ca)

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials that read the files again for a new connection once they change."""
        self.changed()

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            if not self.changed():
                return None  # keep what the server holds
            try:
                return self._configuration()
            except (OSError, ValueError):  # half-written: the next connection tries again
                self._seen = ()
                return None

        return grpc.dynamic_ssl_server_credentials(
            self._configuration(), fetch, require_client_authentication=self.mutual
        )

    def client_credentials(self) -> grpc.ChannelCredentials:
        """This certificate as a client's (mTLS to another service), trusting the same CA."""
        ca = None if self.ca_file is None else Path(self.ca_file).read_bytes()
        return grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=Path(self.key_file).read_bytes(),
            certificate_chain=Path(self.cert_file).read_bytes(),
        )

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.ca_file is not None:
            context.load_verify_locations(cafile=self.ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def ssl_context(self) -> ssl.SSLContext:
        """For an HTTP server (aiohttp): TLS 1.2+, client certificates required under mTLS; a
        handshake after the files changed is served from a context that read them again."""
        current = self._context()
        self.changed()

        def renewed(connection: ssl.SSLObject, _name: str | None, _: ssl.SSLContext) -> None:
            nonlocal current
            if self.changed():
                try:
                    current = self._context()
                except (OSError, ssl.SSLError):
                    self._seen = ()
            connection.context = current

        current.sni_callback = renewed
        return current


def require_tls(settings: TlsSettings, prefix: str) -> None:
    """For ``__post_init__``: both or neither of cert and key, a CA only with them, and every
    file named readable. Raises ConfigError naming the variable."""
    cert, key, ca = settings.tls_cert, settings.tls_key, settings.tls_ca
    probe = settings.health_port
    if not 0 <= probe < 65536 or (probe and probe == settings.port):
        raise ConfigError(
            f"{env_name(prefix, 'health_port')}={probe}: must be a TCP port other than "
            f"{env_name(prefix, 'port')} (0: none)"
        )
    if bool(cert) != bool(key):
        missing = "tls_key" if cert else "tls_cert"
        raise ConfigError(
            f"{env_name(prefix, missing)}: TLS needs both {env_name(prefix, 'tls_cert')} and "
            f"{env_name(prefix, 'tls_key')}"
        )
    if ca and not cert:
        raise ConfigError(
            f"{env_name(prefix, 'tls_ca')}: client certificates (mTLS) need the server's own: "
            f"set {env_name(prefix, 'tls_cert')} and {env_name(prefix, 'tls_key')}"
        )
    for name, path in (("tls_cert", cert), ("tls_key", key), ("tls_ca", ca)):
        if path:
            try:
                Path(path).read_bytes()
            except OSError as exc:
                raise ConfigError(f"{env_name(prefix, name)}={path!r}: {exc.strerror}") from None
    if cert:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{env_name(prefix, 'tls_cert')}={cert!r} and {env_name(prefix, 'tls_key')}="
                f"{key!r}: not a PEM certificate and its key ({exc.reason or exc})"
            ) from None
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{env_name(prefix, 'tls_ca')}={ca!r}: not PEM CA certificates "
                f"({exc.reason or exc})"
            ) from None


def health_port(settings: TlsSettings) -> int | None:
    """The plaintext health-only port to open (``None``: none)."""
    return settings.health_port or None


def server_tls(settings: TlsSettings) -> ServerTls | None:
    """The TLS a service serves with, from its (validated) settings; ``None``: plaintext."""
    if not settings.tls_cert:
        return None
    return ServerTls(settings.tls_cert, settings.tls_key, settings.tls_ca or None)
