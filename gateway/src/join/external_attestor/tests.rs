//! The answer's validation, and the client against a real `bc.attestor.v1` server on a Unix
//! socket: admit, challenge, refuse, an error status, a slow attestor, no attestor at all.

use std::sync::Arc;

use domain::identity::HardwareClaims;
use proto::attestor::attestor_server::{Attestor as AttestorService, AttestorServer};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::*;

const ROLES: &[NodeRole] = &[NodeRole::Node];

fn admit_answer() -> wire::Admit {
    wire::Admit {
        tenant_id: "acme".into(),
        role: String::new(),
        site_id: "site-1".into(),
        pool_id: "default".into(),
        reclaim_node_id: String::new(),
        bind: vec![vec![7; 32]],
        single_use: vec![wire::SingleUse {
            subject: vec![9; 32],
            expires_at_ms: 0,
            reason_if_used: "reused".into(),
        }],
        allowed_kinds: vec!["disk.wipe".into(), "diag.*".into()],
        approval: None,
        node_key_uri: String::new(),
    }
}

fn answer(v: verify_response::Verdict) -> wire::VerifyResponse {
    wire::VerifyResponse { verdict: Some(v) }
}

fn check(a: wire::Admit) -> Result<Verdict, String> {
    verdict_from_answer(
        "acme-ext",
        ROLES,
        NodeRole::Node,
        answer(verify_response::Verdict::Admit(a)),
    )
}

#[test]
fn an_admit_becomes_a_result_that_names_no_token_and_no_statement() {
    let Verdict::Admit(r) = check(admit_answer()).unwrap() else {
        panic!("not an admit")
    };
    assert_eq!(r.tenant_id, "acme");
    assert_eq!(r.role, NodeRole::Node);
    assert_eq!(r.token, None);
    assert_eq!(r.node_key, NodeKeyStatement::Unattested);
    assert_eq!(r.bind, vec![[7; 32]]);
    assert_eq!(
        r.single_use,
        vec![SingleUse {
            attestor: "acme-ext".into(),
            subject: [9; 32],
            expires_at_us: None,
            reason_if_used: "reused".into(),
        }]
    );
    let mut a = admit_answer();
    a.single_use[0].expires_at_ms = 1_700_000_000_000;
    a.reclaim_node_id = "node_01H".into();
    a.approval = Some(wire::Approval {
        subject: vec![1; 32],
        summary: "asset A-1".into(),
    });
    let Verdict::Admit(r) = check(a).unwrap() else {
        panic!("not an admit")
    };
    assert_eq!(r.single_use[0].expires_at_us, Some(1_700_000_000_000_000));
    assert_eq!(r.reclaim_node_id.as_deref(), Some("node_01H"));
    assert_eq!(r.approval.unwrap().summary, "asset A-1");
}

#[test]
fn answers_the_contract_does_not_allow_are_invalid() {
    type Edit = fn(&mut wire::Admit);
    let cases: &[(&str, Edit)] = &[
        ("short bind", |a| a.bind = vec![vec![1; 31]]),
        ("long bind", |a| a.bind = vec![vec![1; 33]]),
        ("short single use", |a| a.single_use[0].subject = vec![]),
        ("reason not kebab", |a| {
            a.single_use[0].reason_if_used = "Reused".into()
        }),
        ("reason too long", |a| {
            a.single_use[0].reason_if_used = "a".repeat(65)
        }),
        ("negative expiry", |a| a.single_use[0].expires_at_ms = -1),
        ("twice the same single use", |a| {
            let again = a.single_use[0].clone();
            a.single_use.push(again)
        }),
        ("a role it does not list", |a| a.role = "site".into()),
        ("not a role", |a| a.role = "root".into()),
        ("no tenant", |a| a.tenant_id.clear()),
        ("bad site", |a| a.site_id = "a b".into()),
        ("no pool", |a| a.pool_id.clear()),
        ("bad reclaim", |a| a.reclaim_node_id = "node/1".into()),
        ("too many binds", |a| a.bind = vec![vec![1; 32]; 17]),
        ("bad kind", |a| a.allowed_kinds = vec!["disk wipe".into()]),
        ("bad approval subject", |a| {
            a.approval = Some(wire::Approval {
                subject: vec![1; 8],
                summary: String::new(),
            })
        }),
        ("approval summary with a newline", |a| {
            a.approval = Some(wire::Approval {
                subject: vec![1; 32],
                summary: "a\nb".into(),
            })
        }),
    ];
    for (what, edit) in cases {
        let mut a = admit_answer();
        edit(&mut a);
        assert!(check(a).is_err(), "{what} accepted");
    }
    let none = verdict_from_answer(
        "acme-ext",
        ROLES,
        NodeRole::Node,
        wire::VerifyResponse { verdict: None },
    );
    assert!(none.is_err());
    for bad in ["", "Bad", "has space", "-x", &"r".repeat(65)] {
        let r = verdict_from_answer(
            "acme-ext",
            ROLES,
            NodeRole::Node,
            answer(verify_response::Verdict::Refuse(wire::Refuse {
                reason: bad.into(),
            })),
        );
        assert!(r.is_err(), "refusal reason {bad:?} accepted");
    }
    for (payload, not_after_ms) in [(vec![0; MAX_CHALLENGE_PAYLOAD + 1], 1), (vec![1], 0)] {
        let r = verdict_from_answer(
            "acme-ext",
            ROLES,
            NodeRole::Node,
            answer(verify_response::Verdict::Challenge(wire::Challenge {
                payload,
                not_after_ms,
            })),
        );
        assert!(r.is_err());
    }
}

#[test]
fn a_node_key_statement_is_refused_by_the_admission_rule() {
    let mut a = admit_answer();
    a.node_key_uri = "urn:bc:tpm-ak:00".into();
    let Verdict::Refuse(r) = check(a).unwrap() else {
        panic!("a statement was admitted")
    };
    assert_eq!(r.text(), "join:node-key-statement");
    // In the root tenant: the answer's tenant is the attestor's word, not checked yet.
    assert_eq!(r.tenant_id, None);
}

#[test]
fn refusals_and_challenges_keep_the_attestors_id_and_times() {
    let r = verdict_from_answer(
        "acme-ext",
        ROLES,
        NodeRole::Node,
        answer(verify_response::Verdict::Refuse(wire::Refuse {
            reason: "unknown-asset".into(),
        })),
    )
    .unwrap();
    assert_eq!(
        r,
        Verdict::Refuse(AttestorRefusal::new("acme-ext", "unknown-asset"))
    );
    let c = verdict_from_answer(
        "acme-ext",
        ROLES,
        NodeRole::Node,
        answer(verify_response::Verdict::Challenge(wire::Challenge {
            payload: b"nonce".to_vec(),
            not_after_ms: 5,
        })),
    )
    .unwrap();
    assert_eq!(
        c,
        Verdict::Challenge(Challenge {
            payload: b"nonce".to_vec(),
            not_after_us: 5000,
        })
    );
}

#[test]
fn configuration_is_checked() {
    let ok = ExternalAttestorConfig::new(
        "acme-ext",
        &["node".into(), "site".into(), "node".into()],
        "/run/acme.sock".into(),
        None,
    )
    .unwrap();
    assert_eq!(ok.roles, vec![NodeRole::Node, NodeRole::Site]);
    assert_eq!(ok.timeout, DEFAULT_CALL_TIMEOUT);
    let bad = |id: &str, roles: &[&str], socket: &str, t: Option<Duration>| {
        let roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
        ExternalAttestorConfig::new(id, &roles, socket.into(), t).unwrap_err()
    };
    assert!(matches!(
        bad("Acme", &["node"], "/s", None),
        ExternalConfigError::BadId(_)
    ));
    assert!(matches!(
        bad("acme--x", &["node"], "/s", None),
        ExternalConfigError::BadId(_)
    ));
    assert!(matches!(
        bad("x509pop", &["node"], "/s", None),
        ExternalConfigError::BuiltIn(_)
    ));
    assert!(matches!(
        bad("join-token", &["node"], "/s", None),
        ExternalConfigError::BuiltIn(_)
    ));
    assert!(matches!(
        bad("acme", &[], "/s", None),
        ExternalConfigError::BadRoles { .. }
    ));
    assert!(matches!(
        bad("acme", &["root"], "/s", None),
        ExternalConfigError::BadRoles { .. }
    ));
    assert!(matches!(
        bad("acme", &["node"], "rel.sock", None),
        ExternalConfigError::BadSocket { .. }
    ));
    assert!(matches!(
        bad("acme", &["node"], "/s", Some(Duration::ZERO)),
        ExternalConfigError::BadTimeout(_)
    ));
}

/// What the test server answers.
#[derive(Clone)]
enum Script {
    Answer(Box<wire::VerifyResponse>),
    Fail,
    Slow,
}

struct Server {
    script: Script,
    seen: Arc<std::sync::Mutex<Vec<wire::VerifyRequest>>>,
}

#[tonic::async_trait]
impl AttestorService for Server {
    async fn verify(
        &self,
        request: Request<wire::VerifyRequest>,
    ) -> Result<Response<wire::VerifyResponse>, Status> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(request.into_inner());
        }
        match &self.script {
            Script::Answer(a) => Ok(Response::new((**a).clone())),
            Script::Fail => Err(Status::internal("the asset database is down")),
            Script::Slow => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Err(Status::internal("late"))
            }
        }
    }
}

fn serve(
    dir: &std::path::Path,
    script: Script,
) -> (PathBuf, Arc<std::sync::Mutex<Vec<wire::VerifyRequest>>>) {
    let socket = dir.join("attestor.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = Server {
        script,
        seen: seen.clone(),
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AttestorServer::new(server))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    (socket, seen)
}

fn request() -> RemoteVerifyRequest {
    RemoteVerifyRequest {
        attestor: "acme-ext".into(),
        role: NodeRole::Node,
        csr_sha256: [3; 32],
        claims: HardwareClaims {
            product_uuid: Some("4c4c4544-0042".into()),
            macs: vec!["aa:bb".into()],
            hardware_key: None,
        },
        evidence: b"evidence".to_vec(),
    }
}

fn client(socket: PathBuf, timeout: Duration) -> ExternalAttestor {
    ExternalAttestor::new(
        ExternalAttestorConfig::new("acme-ext", &["node".into()], socket, Some(timeout)).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn the_client_asks_over_the_socket_and_validates_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, seen) = serve(
        dir.path(),
        Script::Answer(Box::new(answer(verify_response::Verdict::Admit(
            admit_answer(),
        )))),
    );
    let external = client(socket, DEFAULT_CALL_TIMEOUT);
    let verdict = external.verify(&request()).await.unwrap();
    assert!(matches!(verdict, Verdict::Admit(_)));
    let asked = seen.lock().unwrap().pop().unwrap();
    assert_eq!(asked.attestor, "acme-ext");
    assert_eq!(asked.role, "node");
    assert_eq!(asked.csr_sha256, vec![3; 32]);
    assert_eq!(asked.evidence, b"evidence");
    let claims = asked.claims.unwrap();
    assert_eq!(claims.product_uuid, "4c4c4544-0042");
    assert_eq!(claims.macs, vec!["aa:bb".to_string()]);
    assert!(claims.hardware_key.is_empty());

    let dir2 = tempfile::tempdir().unwrap();
    let mut bad = admit_answer();
    bad.bind = vec![vec![0; 5]];
    let (socket, _) = serve(
        dir2.path(),
        Script::Answer(Box::new(answer(verify_response::Verdict::Admit(bad)))),
    );
    let err = client(socket, DEFAULT_CALL_TIMEOUT)
        .verify(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteAttestorError::InvalidAnswer { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn no_answer_is_unavailable_not_a_refusal() {
    // No socket at all.
    let dir = tempfile::tempdir().unwrap();
    let err = client(dir.path().join("missing.sock"), DEFAULT_CALL_TIMEOUT)
        .verify(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteAttestorError::Unavailable { .. }),
        "{err}"
    );
    assert!(err.to_string().starts_with("UNAVAILABLE"), "{err}");

    // An error status.
    let (socket, _) = serve(dir.path(), Script::Fail);
    let err = client(socket, DEFAULT_CALL_TIMEOUT)
        .verify(&request())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the asset database is down"),
        "{err}"
    );

    // Too slow: the call timeout.
    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = serve(dir.path(), Script::Slow);
    let started = std::time::Instant::now();
    let err = client(socket, Duration::from_millis(300))
        .verify(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteAttestorError::Unavailable { .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
