"""A Join client written against the .proto files only (no project code): Python grpcio.

Usage: join_client.py GEN_DIR ADDRESS SERVING_CA_PEM ENCRYPTION_JWK SIGNING_JWK TRUST_DOMAIN TOKEN

Seals the token per domain/src/pki/token_seal.rs (version 1), joins, verifies the JoinResponse
signature (ES256 over lp("join-response") || lp(csr_sha256) || lp(response)), checks the SPIFFE
ID of the issued certificate, then joins with an unknown token and expects PERMISSION_DENIED
"Join refused". Prints one JSON line with what it saw; exits non-zero on any mismatch.
"""

import base64
import hashlib
import json
import os
import struct
import sys

gen, address, ca_path, enc_path, sig_path, trust_domain, token = sys.argv[1:8]
sys.path.insert(0, gen)

import grpc  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: E402

from bc.wire.v1 import join_pb2, node_pb2_grpc  # noqa: E402

LABEL = b"bc-join-token-seal-v1"


def lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jwk_point(path: str) -> bytes:
    with open(path) as f:
        jwk = json.load(f)
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256", jwk
    return b"\x04" + b64url(jwk["x"]) + b64url(jwk["y"])


def seal(recipient_point: bytes, secret: str, csr_sha256: bytes) -> bytes:
    recipient = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), recipient_point)
    eph = ec.generate_private_key(ec.SECP256R1())
    e_point = eph.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    z = eph.exchange(ec.ECDH(), recipient)
    k = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None,
        info=lp(LABEL) + lp(e_point) + lp(recipient_point),
    ).derive(z)
    nonce = os.urandom(12)
    c = AESGCM(k).encrypt(nonce, secret.encode(), lp(LABEL) + lp(csr_sha256))
    return b"\x01" + e_point + nonce + c


def new_csr():
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.DER)


def request(secret: str) -> join_pb2.JoinRequest:
    csr = new_csr()
    sha = hashlib.sha256(csr).digest()
    return join_pb2.JoinRequest(csr=csr, sealed_token=seal(jwk_point(enc_path), secret, sha), role="node"), sha


with open(ca_path, "rb") as f:
    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
channel = grpc.secure_channel(address, creds)
stub = node_pb2_grpc.NodeServiceStub(channel)

req, csr_sha = request(token)
signed = stub.Join(req, timeout=30)
resp = join_pb2.JoinResponse.FromString(signed.response)

# The signature under the pinned JoinService signing key.
signing = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), jwk_point(sig_path))
sig = signed.signature
assert len(sig) == 64, len(sig)
der_sig = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
signing.verify(der_sig, lp(b"join-response") + lp(csr_sha) + lp(signed.response), ec.ECDSA(hashes.SHA256()))
assert resp.csr_sha256 == csr_sha

leaf = x509.load_der_x509_certificate(resp.certificate_chain[0])
uris = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
    x509.UniformResourceIdentifier
)
expected = f"spiffe://{trust_domain}/site/{resp.site_id}/node/{resp.node_id}"
assert uris[0] == expected, (uris, expected)

# An unknown token: PERMISSION_DENIED "Join refused".
bad_secret = "bcjt_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
bad_req, _ = request(bad_secret)
try:
    stub.Join(bad_req, timeout=30)
    print(json.dumps({"error": "a bad token joined"}))
    sys.exit(1)
except grpc.RpcError as e:
    code, details = e.code(), e.details()

print(json.dumps({
    "spiffeId": uris[0],
    "nodeId": resp.node_id,
    "role": resp.role,
    "badTokenCode": code.name,
    "badTokenDetails": details,
}))
