//! An out-of-process attestor we did not write in Rust: `external_attestor/attestor.py`
//! (Python grpcio, stubs generated from `proto/bc/attestor/v1/attestor.proto` by
//! grpc_tools.protoc at test time) on a Unix socket, configured as `[[attestors.external]]` of a
//! real `bcctl up`. A Rust gRPC client (bcd's pinned connector) joins through the real
//! JoinService:
//!
//! - the first round defers with the attestor's challenge (signed like any answer, no node, no
//!   certificate), the answer admits: a node in the attestor's tenant, site and pool;
//! - the same answer sent again (its first answer lost) gets the identity the first admitted,
//!   nothing appended (issue 40); another key for the same machine (a fresh challenge,
//!   answered) is refused `join:bound-elsewhere` (the bind subject the attestor named is the
//!   first node's; the admission step checks bindings before single-use subjects);
//! - for a machine the attestor binds nothing for, the same answer sent again gets its identity
//!   again, and once that identity is revoked is refused `py-asset:reused` (the single-use
//!   subject the attestor named, spent by the JoinService);
//! - a challenge answered for another CSR is refused `py-asset:csr-mismatch`;
//! - an attestor whose socket nobody listens on fails the join UNAVAILABLE, not a refusal;
//! - its answers are held to what the built-ins are held to (issue 40 item 9): tenants
//!   `deployment`, `root` and one without a site or pool are refused `join:reserved-tenant` /
//!   `join:unknown-tenant` in the root tenant; a single-use record already expired and a
//!   challenge already past its deadline are invalid answers (UNAVAILABLE, nothing recorded).
//!
//! Uses the venv of `grpc_python` (same pinned requirements, so the same cached venv); set
//! `BC_SKIP_PYTHON=1` to skip it on a machine without python3 or PyPI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use domain::pki::{build_csr, KeyRole, Pin, PrivateKey};
use prost::Message;
use proto::join_response::Deferral;
use serde_json::json;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The pinned requirements `grpc_python` builds its venv from (grpcio, grpcio-tools, ...).
const REQUIREMENTS: &str = "tests/grpc_python/requirements.txt";

/// The venv of `grpc_python`'s requirements, the same directory ([`crate::support::python_venv`]).
fn venv() -> PathBuf {
    crate::support::python_venv::venv(
        "grpc-python-venv",
        REQUIREMENTS,
        "grpc, grpc_tools, cryptography",
    )
}

const MACHINE_SECRET: [u8; 32] = [0x5a; 32];

/// HMAC-SHA256(machine secret, nonce || csr_sha256): the machine's answer to a challenge.
fn answer(challenge: &[u8], csr_sha256: &[u8; 32]) -> Vec<u8> {
    let payload: serde_json::Value =
        serde_json::from_slice(challenge).expect("the attestor's challenge payload is JSON");
    let nonce = hex::decode(payload["nonce"].as_str().expect("a nonce")).expect("hex nonce");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &MACHINE_SECRET);
    let mut signed = nonce;
    signed.extend_from_slice(csr_sha256);
    let response = ring::hmac::sign(&key, &signed);
    serde_json::json!({
        "challenge": String::from_utf8(challenge.to_vec()).expect("UTF-8 payload"),
        "response": hex::encode(response.as_ref()),
    })
    .to_string()
    .into_bytes()
}

struct Agent {
    csr: Vec<u8>,
    csr_sha256: [u8; 32],
}

impl Agent {
    fn new() -> Agent {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = build_csr(&key).unwrap();
        Agent {
            csr_sha256: domain::identity::sha256(&csr),
            csr,
        }
    }

    fn request(&self, attestor: &str, evidence: &[u8]) -> proto::JoinRequest {
        proto::JoinRequest {
            csr: self.csr.clone(),
            attestor: attestor.into(),
            sealed_token: Vec::new(),
            role: "node".into(),
            claims: Some(proto::HardwareClaims::default()),
            attestation: evidence.to_vec(),
            agent_version: String::new(),
        }
    }
}

/// (tenant, refusal) of every `security.join.refused` in the store, in log order.
async fn refusals(database_url: &str) -> Vec<(String, String)> {
    use events::store::{EventStore, LogStore};
    let store = EventStore::open(database_url)
        .await
        .expect("open the store");
    let mut out = Vec::new();
    for e in store.read_batch(0, 1_000_000).await.expect("read the log") {
        if e.event_type == "security.join.refused" {
            let p: events::schema::JoinRefused = e.decode().expect("a JoinRefused");
            out.push((e.tenant_id.clone(), p.refusal));
        }
    }
    out
}

/// `bcctl ARGS` against `bcctl up`'s store and bundle (its facts, its `--dir`).
fn bcctl(facts: &serde_json::Value, dir: &Path, args: &[&str]) {
    let secret = std::fs::read_to_string(dir.join("deployment-secret")).expect("the secret");
    let out = Command::new(env!("CARGO_BIN_EXE_bcctl"))
        .args(args)
        .arg("--database-url")
        .arg(facts["databaseUrl"].as_str().expect("databaseUrl"))
        .arg("--pki")
        .arg(facts["pkiBundle"].as_str().expect("pkiBundle"))
        .env("BC_DEPLOYMENT_SECRET", secret.trim())
        .stdin(Stdio::null())
        .output()
        .expect("run bcctl");
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A machine of `tenant` (site-7, pool racks) whose attestor answers with `extra` settings.
fn careless(tenant: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut m = json!({
        "secret": hex::encode(MACHINE_SECRET),
        "tenant": tenant,
        "site": "site-7",
        "pool": "racks",
        "bind": false,
    });
    if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    m
}

#[test]
fn a_python_attestor_challenges_then_admits_once_and_binds_the_machine() {
    if std::env::var("BC_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("skipped: BC_SKIP_PYTHON=1");
        return;
    }
    let python = venv();
    let work = tempfile::tempdir().unwrap();
    let gen = work.path().join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/proto");
    run(Command::new(&python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(&protos)
        .arg(format!("--python_out={}", gen.display()))
        .arg(format!("--grpc_python_out={}", gen.display()))
        .arg("bc/attestor/v1/attestor.proto"));
    for pkg in ["bc", "bc/attestor", "bc/attestor/v1"] {
        std::fs::write(gen.join(pkg).join("__init__.py"), b"").unwrap();
    }
    let machines = work.path().join("machines.json");
    std::fs::write(
        &machines,
        serde_json::json!({
            "machine-1": {
                "secret": hex::encode(MACHINE_SECRET),
                "tenant": "acme",
                "site": "site-7",
                "pool": "racks",
            },
            "machine-2": {
                "secret": hex::encode(MACHINE_SECRET),
                "tenant": "acme",
                "site": "site-7",
                "pool": "racks",
                "bind": false,
            },
            "in-deployment": careless("deployment", json!({})),
            "in-root": careless("root", json!({})),
            "in-nobody": careless("nobody", json!({})),
            "expired-use": careless("acme", json!({ "use_expires_in_ms": -1000 })),
            "late-challenge": careless("acme", json!({ "challenge_ttl_ms": -1000 })),
        })
        .to_string(),
    )
    .unwrap();
    let socket = work.path().join("attestor.sock");
    let mut attestor = KillOnDrop(
        Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/external_attestor/attestor.py"))
            .arg(&gen)
            .arg(&socket)
            .arg(&machines)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut ready = String::new();
    BufReader::new(attestor.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");

    let config = work.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[[attestors.external]]\nid = \"py-asset\"\nroles = [\"node\"]\nsocket = {:?}\n\n\
             [[attestors.external]]\nid = \"py-down\"\nroles = [\"node\"]\nsocket = {:?}\n\
             timeout = \"2s\"\n",
            socket.display().to_string(),
            work.path().join("nobody.sock").display().to_string(),
        ),
    )
    .unwrap();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_bcctl"))
            .args(["up", "--port", "0", "--json", "--dir"])
            .arg(work.path().join(".bcctl"))
            .arg("--config")
            .arg(&config)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .env("BC_METRICS_LISTEN", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let facts: serde_json::Value =
        serde_json::from_str(&line).expect("one JSON line from bcctl up");
    let address = facts["address"].as_str().expect("address").to_owned();
    let database_url = facts["databaseUrl"]
        .as_str()
        .expect("databaseUrl")
        .to_owned();
    let pin: Pin = facts["pins"]["servingCa"]
        .as_str()
        .expect("the serving CA pin")
        .parse()
        .expect("a pin");

    // Tenant acme is one an operator created: its site.
    let dir = work.path().join(".bcctl");
    bcctl(
        &facts,
        &dir,
        &["site", "create", "--id", "site-7", "--tenant", "acme"],
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = bcd::client::connect(&address, pin, None)
            .await
            .expect("connect to the gateway");
        let body = |signed: proto::SignedJoinResponse| {
            proto::JoinResponse::decode(signed.response.as_slice()).expect("a JoinResponse")
        };
        let challenge_of = |r: &proto::JoinResponse| match &r.deferral {
            Some(Deferral::Challenge(c)) => c.clone(),
            other => panic!("expected a challenge, got {other:?} in {r:?}"),
        };

        // Round one: a challenge, bound to this CSR, issuing nothing.
        let agent = Agent::new();
        let first = body(
            client
                .join(agent.request("py-asset", br#"{"machine":"machine-1"}"#))
                .await
                .expect("the first round answers")
                .into_inner(),
        );
        assert_eq!(first.csr_sha256, agent.csr_sha256);
        assert!(first.node_id.is_empty() && first.certificate_chain.is_empty());
        let challenge = challenge_of(&first);
        assert_eq!(challenge.attestor, "py-asset");
        assert!(challenge.not_after_ms > 0);

        // Round two: the answer admits.
        let proof = answer(&challenge.payload, &agent.csr_sha256);
        let joined = body(
            client
                .join(agent.request("py-asset", &proof))
                .await
                .expect("the answer admits")
                .into_inner(),
        );
        assert!(joined.deferral.is_none(), "{joined:?}");
        assert!(!joined.node_id.is_empty());
        assert_eq!(joined.site_id, "site-7");
        assert_eq!(joined.role, "node");
        assert!(!joined.certificate_chain.is_empty());

        // The same answer again (the first answer lost) gets the identity it was issued: no
        // second node for machine-1, nothing refused.
        let refused_before = refusals(&database_url).await.len();
        let again = body(
            client
                .join(agent.request("py-asset", &proof))
                .await
                .expect("a replayed answer is answered again")
                .into_inner(),
        );
        assert_eq!(
            (&again.node_id, &again.certificate_chain),
            (&joined.node_id, &joined.certificate_chain)
        );
        assert_eq!(refusals(&database_url).await.len(), refused_before);

        // machine-2 binds nothing: its answer admits once; the same single-use answer again
        // gets that identity, and once the identity is revoked is refused with the attestor's
        // reason for its subject.
        let m2 = Agent::new();
        let first = body(
            client
                .join(m2.request("py-asset", br#"{"machine":"machine-2"}"#))
                .await
                .expect("the first round answers")
                .into_inner(),
        );
        let proof = answer(&challenge_of(&first).payload, &m2.csr_sha256);
        let joined2 = body(
            client
                .join(m2.request("py-asset", &proof))
                .await
                .expect("machine-2's answer admits")
                .into_inner(),
        );
        assert!(!joined2.node_id.is_empty() && joined2.node_id != joined.node_id);
        let again = body(
            client
                .join(m2.request("py-asset", &proof))
                .await
                .expect("answered again")
                .into_inner(),
        );
        assert_eq!(again.certificate_chain, joined2.certificate_chain);
        bcctl(
            &facts,
            &dir,
            &["node", "revoke", &joined2.node_id, "--reason", "test"],
        );
        let again = client
            .join(m2.request("py-asset", &proof))
            .await
            .expect_err("a replayed single-use answer is refused");
        assert_eq!(again.code(), tonic::Code::PermissionDenied);
        assert_eq!(again.message(), "Join refused");
        let seen = refusals(&database_url).await;
        assert_eq!(
            seen.last(),
            Some(&("acme".to_string(), "py-asset:reused".to_string())),
            "{seen:?}"
        );

        // Another key for the same machine: the bind subject is the first node's.
        let other = Agent::new();
        let first = body(
            client
                .join(other.request("py-asset", br#"{"machine":"machine-1"}"#))
                .await
                .expect("the first round answers")
                .into_inner(),
        );
        let proof = answer(&challenge_of(&first).payload, &other.csr_sha256);
        let elsewhere = client
            .join(other.request("py-asset", &proof))
            .await
            .expect_err("a machine bound to another node is refused");
        assert_eq!(elsewhere.code(), tonic::Code::PermissionDenied);
        let seen = refusals(&database_url).await;
        assert_eq!(
            seen.last(),
            Some(&("acme".to_string(), "join:bound-elsewhere".to_string())),
            "{seen:?}"
        );

        // A challenge for one key does not finish another key's join.
        let third = Agent::new();
        let mismatched = answer(&challenge_of(&first).payload, &third.csr_sha256);
        let refused = client
            .join(third.request("py-asset", &mismatched))
            .await
            .expect_err("a challenge for another CSR is refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let seen = refusals(&database_url).await;
        assert_eq!(
            seen.last().map(|(_, r)| r.as_str()),
            Some("py-asset:csr-mismatch"),
            "{seen:?}"
        );

        // Issue 40 item 9: tenants the attestor may not name, refused in the root tenant.
        for (machine, reason) in [
            ("in-deployment", "join:reserved-tenant"),
            ("in-root", "join:reserved-tenant"),
            ("in-nobody", "join:unknown-tenant"),
        ] {
            let agent = Agent::new();
            let evidence = json!({ "machine": machine }).to_string();
            let first = body(
                client
                    .join(agent.request("py-asset", evidence.as_bytes()))
                    .await
                    .expect("the first round answers")
                    .into_inner(),
            );
            let proof = answer(&challenge_of(&first).payload, &agent.csr_sha256);
            let refused = client
                .join(agent.request("py-asset", &proof))
                .await
                .expect_err("a tenant the attestor may not name is refused");
            assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{machine}");
            let seen = refusals(&database_url).await;
            assert_eq!(
                seen.last(),
                Some(&("root".to_string(), reason.to_string())),
                "{machine}: {seen:?}"
            );
        }

        // A single-use record already expired (maintenance would prune it, and the same
        // evidence would admit again) and a challenge already past its deadline: invalid
        // answers, nothing recorded.
        let before = refusals(&database_url).await.len();
        let agent = Agent::new();
        let first = body(
            client
                .join(agent.request("py-asset", br#"{"machine":"expired-use"}"#))
                .await
                .expect("the first round answers")
                .into_inner(),
        );
        let proof = answer(&challenge_of(&first).payload, &agent.csr_sha256);
        let invalid = client
            .join(agent.request("py-asset", &proof))
            .await
            .expect_err("an expired single-use record is an invalid answer");
        assert_eq!(invalid.code(), tonic::Code::Unavailable, "{invalid:?}");
        let late = client
            .join(Agent::new().request("py-asset", br#"{"machine":"late-challenge"}"#))
            .await
            .expect_err("a challenge past its deadline is not passed on");
        assert_eq!(late.code(), tonic::Code::Unavailable, "{late:?}");
        assert_eq!(refusals(&database_url).await.len(), before);

        // Nobody on the socket: UNAVAILABLE, and no refusal recorded.
        let before = refusals(&database_url).await.len();
        let down = client
            .join(Agent::new().request("py-down", br#"{"machine":"machine-1"}"#))
            .await
            .expect_err("an unreachable attestor fails the join");
        assert_eq!(down.code(), tonic::Code::Unavailable, "{down:?}");
        assert_eq!(refusals(&database_url).await.len(), before);
    });
    drop(server);
    drop(attestor);
}
