"""Reads a SPIFFE bundle endpoint as a relying party outside bc would, and prints what it found
as one JSON line.

usage: read_bundle.py URL CAFILE TRUST_DOMAIN

The https_web profile: TLS verified against CAFILE with the host name of URL checked. The
document is read as the SPIFFE X509-SVID specification (section 6.2) says: the first `x5c` value
of every `use: x509-svid` key. py-spiffe 0.3.2 has no reader for a JWKS X.509 bundle (its
X509Bundle reads PEM or DER, its JwtBundle reads JWKS keys with a `kid`, which x509-svid keys
must not have), so its X509Bundle is made from those DER certificates (parse_raw), and PyJWT's
JWK Set reader (the one py-spiffe uses) reads each key's kty/crv/x/y, which must be the
certificate's own key.
"""

import base64
import json
import ssl
import sys
import urllib.error
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt import PyJWKSet
from spiffe import TrustDomain, X509Bundle


def spki(key):
    return key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def main():
    url, cafile, trust_domain = sys.argv[1:4]
    context = ssl.create_default_context(cafile=cafile)
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as answer:
            status, content_type, body = answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": e.read().decode()}))
        return
    doc = json.loads(body)
    svid_keys = [k for k in doc["keys"] if k.get("use") == "x509-svid" and k.get("x5c")]
    ders = [base64.b64decode(k["x5c"][0]) for k in svid_keys]
    bundle = X509Bundle.parse_raw(TrustDomain(trust_domain), b"".join(ders))
    jwks = PyJWKSet.from_json(body.decode())
    keys_match = len(jwks.keys) == len(ders) and all(
        spki(jwk.key) == spki(x509.load_der_x509_certificate(der).public_key())
        for jwk, der in zip(jwks.keys, ders)
    )
    print(json.dumps({
        "status": status,
        "contentType": content_type,
        "body": body.decode(),
        "trustDomain": str(bundle.trust_domain),
        "authorities": sorted(c.public_bytes(Encoding.DER).hex() for c in bundle.x509_authorities),
        "jwkKeysMatchCertificates": keys_match,
        "jwkKids": [k.get("kid") for k in svid_keys],
        "sequence": doc.get("spiffe_sequence"),
        "refreshHint": doc.get("spiffe_refresh_hint"),
    }))


main()
