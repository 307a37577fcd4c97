"""The control plane's certificates: one CA that signs the apiserver's serving certificate and
every client certificate, and the key pair that signs ServiceAccount tokens.

EC P-256 keys throughout: they are made in milliseconds, and Kubernetes 1.20 accepts them for
serving, for client certificates and (as ES256) for ServiceAccount tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=7)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


class CertificateAuthority:
    """A self-signed CA in `directory` (ca.crt, ca.key) that issues certificates beside it."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name("kuberl-test-ca")
        self._cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.pair = self._write("ca", self._cert, self._key)

    def _write(self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def _issue(self, stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
               alt_names: list[x509.GeneralName] | None = None) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self._cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return self._write(stem, builder.sign(self._key, hashes.SHA256()), key)

    def serving(self, stem: str, common_name: str, dns_names: list[str], ips: list[str]) -> KeyPair:
        """A server certificate valid for `dns_names` and `ips`."""
        alt: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        return self._issue(stem, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, alt)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate: the apiserver reads the user from CN and the groups from O."""
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_signing_key(directory: Path) -> KeyPair:
    """sa.key (the controller-manager and the apiserver sign tokens with it) and sa.pub (to verify
    them); `cert` holds the public key, not a certificate."""
    key = _new_key()
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    pair.key.write_bytes(_key_pem(key))
    pair.key.chmod(0o600)
    pair.cert.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    return pair
