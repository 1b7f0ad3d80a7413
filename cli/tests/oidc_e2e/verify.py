"""A relying party of the OIDC issuer, written with PyJWT as any OIDC-aware service would.

Usage: verify.py ISSUER LIFESPAN. Trusts the CA in SSL_CERT_FILE (the deployment's root). Reads the
discovery document at ISSUER/.well-known/openid-configuration (GET, then HEAD for the headers),
prints one JSON line describing it, then reads lines "JWT AUDIENCE" from standard input and
answers each with one JSON line: {"ok": true, "claims": {...}, "kid": ...} when PyJWT verified the
signature (key from the JWK Set through PyJWKClient), the issuer, the audience and the expiry, or
{"ok": false, "error": "<exception class>"}. A line "JWKS" prints the key ids the JWK Set holds
now (fetched anew). LIFESPAN is how long PyJWKClient keeps the JWK Set (its default is 300 s,
the documents' max-age); its refresh on an unknown key id keeps its default 30 s cooldown.
"""

import json
import sys
import urllib.request

import jwt
from jwt import PyJWKClient


def fetch(url, method="GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
        return r.status, dict(r.headers), r.read().decode()


def main():
    issuer = sys.argv[1]
    status, headers, body = fetch(issuer + "/.well-known/openid-configuration")
    document = json.loads(body)
    head_status, head_headers, head_body = fetch(
        issuer + "/.well-known/openid-configuration", "HEAD")
    jwks_status, jwks_headers, _ = fetch(document["jwks_uri"], "HEAD")
    print(json.dumps({
        "status": status,
        "document": document,
        "cacheControl": headers.get("Cache-Control"),
        "allowOrigin": headers.get("Access-Control-Allow-Origin"),
        "contentType": headers.get("Content-Type"),
        "headStatus": head_status,
        "headBody": head_body,
        "headLength": head_headers.get("Content-Length"),
        "jwksHeadStatus": jwks_status,
        "jwksCacheControl": jwks_headers.get("Cache-Control"),
        "jwksAllowOrigin": jwks_headers.get("Access-Control-Allow-Origin"),
    }), flush=True)
    client = PyJWKClient(document["jwks_uri"], lifespan=float(sys.argv[2]))
    algs = document["id_token_signing_alg_values_supported"]
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if line == "JWKS":
            _, _, body = fetch(document["jwks_uri"])
            print(json.dumps({"kids": [k["kid"] for k in json.loads(body)["keys"]]}), flush=True)
            continue
        token, audience = line.split(" ", 1)
        try:
            key = client.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token, key.key, algorithms=algs, audience=audience, issuer=document["issuer"],
                options={"require": ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"]})
            print(json.dumps({"ok": True, "claims": claims, "kid": key.key_id}), flush=True)
        except Exception as e:  # the verdict is the exception's class
            print(json.dumps({"ok": False, "error": type(e).__name__, "detail": str(e)}),
                  flush=True)


if __name__ == "__main__":
    main()
