"""Certificates, keys and kubeconfigs for one testbed, generated on the fly.

Why: a real kube-apiserver needs a serving certificate, a client CA for x509 authentication
and a service-account signing key; RBAC and the Node authorizer key off the client
certificate's CN (user) and O (groups). One CA signs everything (a throw-away testbed gains
nothing from envtest's three CAs); keys are ECDSA P-256 (fast to generate) except the
service-account key, which is RSA because that is what every consumer accepts.

Identities issued (``Identity`` below):

- ``admin``: ``O=system:masters`` — tests, Helm, ``kubectl``;
- ``kube-controller-manager`` / ``kube-scheduler``: the bootstrap RBAC users
  ``system:kube-controller-manager`` / ``system:kube-scheduler`` (kubeadm's setup);
- ``node``: ``system:node:<node>`` in ``system:nodes``, so the Node authorizer and the
  NodeRestriction admission plugin really confine the process kubelet;
- ``provisioner``: ``popfleet:testbed-provisioner`` in ``system:masters`` (it creates
  PersistentVolumes, which no node may do);
- ``front-proxy-client`` and ``apiserver-kubelet-client``: the apiserver's own client
  identities towards aggregated APIs and the kubelet's log endpoint (``kubelet.crt``).

Layout of ``pki_dir``: ``ca.crt``/``ca.key``, ``apiserver.crt``/``.key``, ``sa.key``/``sa.pub``,
``<identity>.crt``/``.key``; kubeconfigs are ``<identity>.kubeconfig`` beside them with the
certificates embedded. Validity is one week: a testbed lives minutes.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
# Service ClusterIP of the ``kubernetes`` Service (first address of the service range); it is
# only ever a name in the certificate: nothing connects to it.
SERVICE_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True, slots=True)
class Identity:
    """A client certificate subject: ``user`` becomes CN, ``groups`` become O entries."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


def identities(node_name: str) -> tuple[Identity, ...]:
    return (
        Identity("admin", "popfleet:testbed-admin", ("system:masters",)),
        Identity("kube-controller-manager", "system:kube-controller-manager"),
        Identity("kube-scheduler", "system:kube-scheduler"),
        Identity("node", f"system:node:{node_name}", ("system:nodes",)),
        Identity("provisioner", "popfleet:testbed-provisioner", ("system:masters",)),
        # The apiserver's client identity towards aggregated API servers (requestheader auth).
        Identity("front-proxy-client", "front-proxy-client"),
        # The apiserver's client identity towards the kubelet (``kubectl logs``).
        Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)),
    )


def _ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


@dataclass(frozen=True, slots=True)
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def new_ca(now: datetime.datetime) -> CA:
    key = _ec_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "popfleet-testbed-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CA(key=key, cert=cert)


def leaf(
    ca: CA,
    *,
    now: datetime.datetime,
    subject: x509.Name,
    usages: Sequence[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _ec_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca.key, hashes.SHA256())


def generate(pki_dir: Path, *, node_name: str, server_url: str) -> None:
    """Write a fresh CA, apiserver serving cert, SA key pair, client certs and kubeconfigs."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca = new_ca(now)
    _write(pki_dir / "ca.crt", pem_cert(ca.cert))
    _write(pki_dir / "ca.key", pem_key(ca.key), private=True)

    dns = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", KUBERNETES_SERVICE_IP)
    ]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    key, cert = leaf(
        ca, now=now, subject=subject, usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans
    )
    _write(pki_dir / "apiserver.crt", pem_cert(cert) + pem_cert(ca.cert))
    _write(pki_dir / "apiserver.key", pem_key(key), private=True)

    # The process kubelet's log endpoint (``logserver``), dialled by the apiserver at the
    # Node's InternalIP.
    kubelet_sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName(node_name),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")])
    key, cert = leaf(
        ca, now=now, subject=subject, usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=kubelet_sans
    )
    _write(pki_dir / "kubelet.crt", pem_cert(cert) + pem_cert(ca.cert))
    _write(pki_dir / "kubelet.key", pem_key(key), private=True)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki_dir / "sa.key", pem_key(sa_key), private=True)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write(pki_dir / "sa.pub", sa_pub)

    for ident in identities(node_name):
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in ident.groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, ident.user))
        key, cert = leaf(
            ca, now=now, subject=x509.Name(attrs), usages=[ExtendedKeyUsageOID.CLIENT_AUTH]
        )
        _write(pki_dir / f"{ident.name}.crt", pem_cert(cert))
        _write(pki_dir / f"{ident.name}.key", pem_key(key), private=True)
        write_kubeconfig(
            pki_dir / f"{ident.name}.kubeconfig",
            server_url=server_url,
            ca_pem=pem_cert(ca.cert),
            user=ident.name,
            cert_pem=pem_cert(cert),
            key_pem=pem_key(key),
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(
    path: Path,
    *,
    server_url: str,
    ca_pem: bytes,
    user: str,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    token: str | None = None,
    token_file: Path | None = None,
    namespace: str | None = None,
) -> None:
    """Write a single-context kubeconfig (JSON is valid YAML) with embedded credentials."""
    creds: dict[str, str] = {}
    if cert_pem is not None and key_pem is not None:
        creds["client-certificate-data"] = _b64(cert_pem)
        creds["client-key-data"] = _b64(key_pem)
    if token is not None:
        creds["token"] = token
    if token_file is not None:
        creds["tokenFile"] = str(token_file)
    context: dict[str, str] = {"cluster": "testbed", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {"server": server_url, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "testbed", "context": context}],
        "current-context": "testbed",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
