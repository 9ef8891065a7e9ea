"""A throw-away certificate authority and server certificate for the emulator's HTTPS endpoint.

Microsoft's Python SDK speaks HTTPS to the management API even with ``UseDevelopmentEmulator=true``,
so the emulator needs a certificate its clients can verify. It makes a fresh CA per run (EC P-256,
valid one day), signs a leaf for ``localhost``, ``127.0.0.1`` and ``::1`` (plus the listen host),
and writes the CA certificate where a client can pass it (``connection_verify=`` in the SDK,
``ca_file=`` in sbrules). The CA's private key never leaves memory, so nothing else can be signed.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = _dt.timedelta(days=1)


@dataclass(frozen=True)
class ServerIdentity:
    """PEM texts: the CA certificate clients trust, and the server's chain and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = b""

    def server_context(self) -> ssl.SSLContext:
        """A TLS server context presenting the leaf certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
            chain, key = Path(tmp, "chain.pem"), Path(tmp, "key.pem")
            chain.write_bytes(self.cert_pem + self.ca_pem)
            key.touch(mode=0o600)
            key.write_bytes(self.key_pem)
            context.load_cert_chain(chain, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sbrules emulator")])


def make_identity(host: str = "127.0.0.1") -> ServerIdentity:
    """A new CA and a leaf certificate for the loopback names and ``host``."""
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sbrules emulator local CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    addresses = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    try:
        addresses.add(ipaddress.ip_address(host))
    except ValueError:
        names.append(x509.DNSName(host)) if host != "localhost" else None
    names += [x509.IPAddress(a) for a in sorted(addresses, key=str)]
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost")).issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return ServerIdentity(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
