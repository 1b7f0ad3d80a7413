"""Builds x509pop evidence from the format in docs/ATTESTORS.md ("x509pop"), with nothing of
the Rust code: Python's `cryptography` signs, the standard library encodes.

    python x509pop_evidence.py INPUT.json

INPUT.json: {"leaf": "<path to the leaf DER>", "issuer": "<path to the node CA DER>",
"key": "<path to the leaf key, PKCS#8 DER>", "csr": "<path to the new CSR, DER>",
"nodeId": "node_...", "clientTime": <unix ms>}. Prints the evidence (UTF-8 JSON) on stdout.
"""

import base64
import hashlib
import json
import struct
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def lp(field: bytes) -> bytes:
    """A length-prefixed field: u32 big-endian length, then the bytes."""
    return struct.pack(">I", len(field)) + field


def signed_input(csr_sha256: bytes, node_id: str, client_time_ms: int) -> bytes:
    """lp("x509pop") || lp(csr_sha256) || lp(node_id) || lp(u64_be(clientTime))."""
    return (
        lp(b"x509pop")
        + lp(csr_sha256)
        + lp(node_id.encode("utf-8"))
        + lp(struct.pack(">Q", client_time_ms))
    )


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        params = json.load(f)

    def read(name: str) -> bytes:
        with open(params[name], "rb") as f:
            return f.read()

    key = serialization.load_der_private_key(read("key"), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    csr_sha256 = hashlib.sha256(read("csr")).digest()
    node_id = params["nodeId"]
    client_time = int(params["clientTime"])

    der = key.sign(signed_input(csr_sha256, node_id, client_time), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")

    evidence = {
        "v": 1,
        "nodeId": node_id,
        "chain": [b64url(read("leaf")), b64url(read("issuer"))],
        "clientTime": client_time,
        "sig": b64url(sig),
    }
    sys.stdout.write(json.dumps(evidence, separators=(",", ":")))


if __name__ == "__main__":
    main()
