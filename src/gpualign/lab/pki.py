"""The lab's certificates: one CA, the API server's serving cert, client certs and the service-account key.

ECDSA P-256 keys: the API server accepts them and they are generated in milliseconds, which keeps `lab up` fast.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def kubelet_serving_cert(self) -> Path:
        return self.dir / "kubelet-serving.crt"

    @property
    def kubelet_serving_key(self) -> Path:
        return self.dir / "kubelet-serving.key"

    def client_cert(self, user: str) -> Path:
        return self.dir / f"{user}.crt"

    def client_key(self, user: str) -> Path:
        return self.dir / f"{user}.key"


# user file stem -> (CN, O). Each component gets its own identity, as kubeadm does, so RBAC is exercised.
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("kubernetes-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    # The real node's kubelet (the Node authorizer knows it by this name and group), and the API server's identity
    # when it calls a kubelet (logs, exec, port-forward), bound to system:kubelet-api-admin by the lab.
    "node-lab-system": ("system:node:lab-system", "system:nodes"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", None),
}


def create(directory: Path) -> Pki:
    """Write a fresh CA, serving cert, client certs and service-account key pair into directory."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    ca_key = _key()
    ca_name = _name("gpualign-lab-ca")
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca)

    def issue(cn: str, org: str | None, usage: x509.ObjectIdentifier,
              sans: list[x509.GeneralName] | None = None) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = _key()
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        x509.DNSName("localhost"),
        *(x509.DNSName(n) for n in ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                    "kubernetes.default.svc.cluster.local")),
    ]
    key, cert = issue("kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    _write_key(pki.serving_key, key)
    _write_cert(pki.serving_cert, cert)

    key, cert = issue("system:node:lab-system", "system:nodes", ExtendedKeyUsageOID.SERVER_AUTH,
                      [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("lab-system")])
    _write_key(pki.kubelet_serving_key, key)
    _write_cert(pki.kubelet_serving_cert, cert)

    for user, (cn, org) in CLIENTS.items():
        key, cert = issue(cn, org, ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_key(pki.client_key(user), key)
        _write_cert(pki.client_cert(user), cert)

    sa = _key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def kubeconfig(pki: Pki, server: str, user: str, name: str = "gpualign-lab") -> str:
    """A kubeconfig (as YAML text) for one client identity, with absolute paths to the lab's files. Its cluster,
    user and context entries carry the lab's name, so the kubeconfigs of several labs merge in $KUBECONFIG without
    one lab's entries shadowing another's (kubectl keeps the first entry of each name). Responses are not
    compressed (`disable-compression`, read by kubectl, client-go and gpualign alike): over loopback gzip only
    costs the API server CPU."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {name}\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {pki.ca_cert}\n"
        "    disable-compression: true\n"  # loopback: gzip would only cost the API server CPU
        f"users:\n- name: {name}-{user}\n  user:\n    client-certificate: {pki.client_cert(user)}\n"
        f"    client-key: {pki.client_key(user)}\n"
        f"contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-{user}\n"
        f"current-context: {name}\n"
    )
