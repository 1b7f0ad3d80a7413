"""An external attestor in Python (grpcio), serving bc.attestor.v1 on a Unix socket.

Usage: attestor.py GEN_DIR SOCKET MACHINES_JSON

GEN_DIR holds the stubs grpc_tools.protoc generated from proto/bc/attestor/v1/attestor.proto;
MACHINES_JSON maps a machine name to {"secret": hex, "tenant": .., "site": .., "pool": ..,
"bind": true (default) or false, "challenge_ttl_ms": the challenge's life (default 60 s; a
negative one answers a deadline already past), "use_expires_in_ms": the single-use record's
expiry from now (default: the challenge's deadline; a negative one names a record already
expired)}. The last two make the attestor a careless one, for the JoinService to hold to its
contract.

Two rounds, stateless (any replica of this attestor could answer the second):

1. Evidence {"machine": NAME}: answered with a challenge whose payload is the JSON
   {"machine", "nonce", "notAfter", "mac"}, mac = HMAC-SHA256(this process's key,
   csr_sha256 || machine || nonce || notAfter): the challenge is bound to the CSR.
2. Evidence {"challenge": PAYLOAD, "response": hex(HMAC-SHA256(machine secret,
   nonce || csr_sha256))}: admitted into the machine's tenant, site and pool, binding
   sha256("py-attestor/machine:" + NAME) for good and spending sha256("py-attestor/nonce:" +
   nonce) once (until notAfter).

Refusals: malformed, unknown-machine, csr-mismatch (a challenge for another CSR, or forged),
challenge-expired, bad-response.

Prints "ready" on standard output once it serves.
"""

import hashlib
import hmac
import json
import os
import sys
import time
from concurrent import futures

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from bc.attestor.v1 import attestor_pb2 as pb  # noqa: E402
from bc.attestor.v1 import attestor_pb2_grpc as rpc  # noqa: E402

CHALLENGE_KEY = os.urandom(32)
CHALLENGE_TTL_MS = 60_000


def challenge_mac(csr_sha256, machine, nonce, not_after):
    body = csr_sha256 + machine.encode() + bytes.fromhex(nonce) + str(not_after).encode()
    return hmac.new(CHALLENGE_KEY, body, hashlib.sha256).hexdigest()


def refuse(reason):
    return pb.VerifyResponse(refuse=pb.Refuse(reason=reason))


class Attestor(rpc.AttestorServicer):
    def __init__(self, machines):
        self.machines = machines

    def Verify(self, request, context):
        try:
            evidence = json.loads(request.evidence.decode())
        except (UnicodeDecodeError, ValueError):
            return refuse("malformed")
        if not isinstance(evidence, dict):
            return refuse("malformed")
        if "machine" in evidence:
            return self.first_round(request, evidence["machine"])
        if "challenge" in evidence and "response" in evidence:
            return self.second_round(request, evidence)
        return refuse("malformed")

    def first_round(self, request, machine):
        if machine not in self.machines:
            return refuse("unknown-machine")
        nonce = os.urandom(16).hex()
        ttl = self.machines[machine].get("challenge_ttl_ms", CHALLENGE_TTL_MS)
        not_after = int(time.time() * 1000) + ttl
        payload = {
            "machine": machine,
            "nonce": nonce,
            "notAfter": not_after,
            "mac": challenge_mac(request.csr_sha256, machine, nonce, not_after),
        }
        return pb.VerifyResponse(
            challenge=pb.Challenge(
                payload=json.dumps(payload).encode(), not_after_ms=not_after
            )
        )

    def second_round(self, request, evidence):
        try:
            challenge = json.loads(evidence["challenge"])
            machine = challenge["machine"]
            nonce = challenge["nonce"]
            not_after = int(challenge["notAfter"])
            mac = challenge["mac"]
            response = bytes.fromhex(evidence["response"])
            bytes.fromhex(nonce)
        except (TypeError, ValueError, KeyError):
            return refuse("malformed")
        if machine not in self.machines:
            return refuse("unknown-machine")
        expected = challenge_mac(request.csr_sha256, machine, nonce, not_after)
        if not hmac.compare_digest(expected, mac):
            return refuse("csr-mismatch")
        if int(time.time() * 1000) > not_after:
            return refuse("challenge-expired")
        entry = self.machines[machine]
        want = hmac.new(
            bytes.fromhex(entry["secret"]),
            bytes.fromhex(nonce) + request.csr_sha256,
            hashlib.sha256,
        ).digest()
        if not hmac.compare_digest(want, response):
            return refuse("bad-response")
        bind = hashlib.sha256(("py-attestor/machine:" + machine).encode()).digest()
        once = hashlib.sha256(("py-attestor/nonce:" + nonce).encode()).digest()
        expires = not_after
        if "use_expires_in_ms" in entry:
            expires = int(time.time() * 1000) + entry["use_expires_in_ms"]
        return pb.VerifyResponse(
            admit=pb.Admit(
                tenant_id=entry["tenant"],
                site_id=entry["site"],
                pool_id=entry["pool"],
                bind=[bind] if entry.get("bind", True) else [],
                single_use=[
                    pb.SingleUse(
                        subject=once, expires_at_ms=expires, reason_if_used="reused"
                    )
                ],
            )
        )


def main():
    socket_path = sys.argv[2]
    with open(sys.argv[3]) as f:
        machines = json.load(f)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_AttestorServicer_to_server(Attestor(machines), server)
    server.add_insecure_port("unix:" + socket_path)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
