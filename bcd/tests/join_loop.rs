//! The two-round join loop with a scripted control plane: pending answers waited out and retried
//! with the same CSR, challenge rounds (the same attestor, at most 3, before `not_after`), the
//! total wait bounded, answers for another CSR or another node refused, nothing stored unless
//! the join verified.

use std::cell::{Cell, RefCell};

use crate::common;

use bcd::attest::{EvidenceError, EvidenceProducer, NoEvidence};
use bcd::files::identity::load;
use bcd::files::DataDir;
use bcd::join::exchange::{run_join, JoinEnv, JoinLoop, Joined, MAX_CHALLENGES};
use bcd::join::request::{
    prepare, CallError, JoinError, JoinRequestParts, JoinTransport, PreparedJoin,
};
use bcd::join::verify::{
    verify_join_response, DeferralFields, JoinExpectation, JoinRefusal, JoinResponseFields,
    SignedJoinResponse,
};
use common::*;
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::{KeySet, NodeRole, TokenSecret, VerifiedCsr};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

/// What the scripted control plane answers to one request.
#[derive(Clone)]
enum Step {
    Join(&'static str),
    Pending(&'static str, u32),
    Challenge(&'static str, Vec<u8>, i64),
    /// A join answer bound (signed and in the body) to another CSR.
    OtherCsr,
    /// A pending deferral that also carries a certificate.
    PendingWithCertificate,
}

#[derive(Serialize, Deserialize)]
enum WireDeferral {
    Pending(String, u32),
    Challenge(String, Vec<u8>, i64),
}

#[derive(Serialize, Deserialize)]
struct Body {
    csr_sha256: Vec<u8>,
    trust_domain: String,
    leaf: Vec<u8>,
    node_id: String,
    deferral: Option<WireDeferral>,
}

fn decode(body: &[u8]) -> Result<JoinResponseFields, String> {
    let b: Body = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(JoinResponseFields {
        csr_sha256: b.csr_sha256,
        trust_domain: b.trust_domain,
        leaf_der: b.leaf,
        node_id: b.node_id,
        deferral: b.deferral.map(|d| match d {
            WireDeferral::Pending(request_id, retry_after_seconds) => DeferralFields::Pending {
                request_id,
                retry_after_seconds,
            },
            WireDeferral::Challenge(attestor, payload, not_after_ms) => DeferralFields::Challenge {
                attestor,
                payload,
                not_after_ms,
            },
        }),
        ..Default::default()
    })
}

struct Seen {
    csr_sha256: [u8; 32],
    attestor: String,
    evidence: Vec<u8>,
}

struct Scripted<'a> {
    ks: &'a KeySet,
    steps: Vec<Step>,
    seen: Vec<Seen>,
}

fn signed(ks: &KeySet, bound: [u8; 32], body: &Body) -> SignedJoinResponse {
    let body = serde_json::to_vec(body).unwrap();
    let sig = sign(
        &ks.join_signing,
        &JoinResponseStatement {
            csr_sha256: bound,
            response: &body,
        },
    )
    .unwrap();
    SignedJoinResponse {
        body,
        signature: sig.as_bytes().to_vec(),
        signer_spki_der: ks.join_signing.public_key().spki_der().to_vec(),
    }
}

impl JoinTransport for Scripted<'_> {
    fn join(&mut self, request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError> {
        let csr = VerifiedCsr::verify(&request.csr_der).unwrap();
        assert_eq!(csr.sha256(), &request.csr_sha256);
        self.seen.push(Seen {
            csr_sha256: request.csr_sha256,
            attestor: request.attestor.clone(),
            evidence: request.evidence.clone(),
        });
        let step = self.steps.remove(0);
        let deferral_body = |deferral| Body {
            csr_sha256: csr.sha256().to_vec(),
            trust_domain: TD.to_owned(),
            leaf: Vec::new(),
            node_id: String::new(),
            deferral: Some(deferral),
        };
        let issue_for = |node: &str| {
            let decision = domain::pki::NodeCertificateDecision {
                spiffe_id: domain::pki::SpiffeId::parse(&format!(
                    "spiffe://{TD}/site/eu-1/node/{node}"
                ))
                .unwrap(),
                role: request.role,
                serial: domain::pki::Serial::generate().unwrap(),
                requested_lifetime: None,
                statements: vec![],
            };
            domain::pki::issue_node_certificate(&self.ks.node_ca, &csr, &decision, now())
                .unwrap()
                .der
        };
        Ok(match step {
            Step::Join(node) => signed(
                self.ks,
                *csr.sha256(),
                &Body {
                    csr_sha256: csr.sha256().to_vec(),
                    trust_domain: TD.to_owned(),
                    leaf: issue_for(node),
                    node_id: node.to_owned(),
                    deferral: None,
                },
            ),
            Step::Pending(id, retry) => signed(
                self.ks,
                *csr.sha256(),
                &deferral_body(WireDeferral::Pending(id.to_owned(), retry)),
            ),
            Step::Challenge(attestor, payload, not_after_ms) => signed(
                self.ks,
                *csr.sha256(),
                &deferral_body(WireDeferral::Challenge(
                    attestor.to_owned(),
                    payload,
                    not_after_ms,
                )),
            ),
            Step::OtherCsr => {
                let other = *common::csr(&node_key()).sha256();
                signed(
                    self.ks,
                    other,
                    &Body {
                        csr_sha256: other.to_vec(),
                        trust_domain: TD.to_owned(),
                        leaf: issue_for("n1"),
                        node_id: "n1".to_owned(),
                        deferral: None,
                    },
                )
            }
            Step::PendingWithCertificate => {
                let mut body = deferral_body(WireDeferral::Pending("jr_x".to_owned(), 1));
                body.leaf = issue_for("n1");
                signed(self.ks, *csr.sha256(), &body)
            }
        })
    }

    fn decode_body(&self, body: &[u8]) -> Result<JoinResponseFields, String> {
        decode(body)
    }
}

/// (round, CSR digest, challenge) of each ask.
type Asked = RefCell<Vec<(u32, [u8; 32], Option<Vec<u8>>)>>;

/// A producer that answers challenges: its evidence names the round and echoes the payload.
struct Answering {
    id: &'static str,
    asked: Asked,
}

impl EvidenceProducer for Answering {
    fn id(&self) -> &str {
        self.id
    }
    fn produce(
        &self,
        round: u32,
        csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        self.asked
            .borrow_mut()
            .push((round, *csr_sha256, challenge.map(<[u8]>::to_vec)));
        let mut out = format!("round {round}:").into_bytes();
        out.extend_from_slice(challenge.unwrap_or_default());
        Ok(out)
    }
}

fn answering(id: &'static str) -> Answering {
    Answering {
        id,
        asked: RefCell::new(Vec::new()),
    }
}

struct Run {
    result: Result<Joined, JoinError>,
    slept: Vec<Duration>,
    log: Vec<String>,
}

/// Runs the loop over `steps` with a clock that only moves when the loop sleeps.
fn drive(
    ks: &KeySet,
    dir: &DataDir,
    steps: Vec<Step>,
    producer: &dyn EvidenceProducer,
    node_id: Option<&str>,
    timeout: Duration,
) -> (Run, Vec<Seen>, [u8; 32]) {
    let prepared: PreparedJoin = prepare(
        Some((
            ks.join_encryption.public_key(),
            &TokenSecret::generate().unwrap(),
        )),
        producer.id(),
        NodeRole::Node,
        Default::default(),
    )
    .unwrap();
    let csr_sha256 = prepared.request.csr_sha256;
    let mut fake = Scripted {
        ks,
        steps,
        seen: Vec::new(),
    };
    let clock = Cell::new(now());
    let mut slept = Vec::new();
    let mut log = Vec::new();
    let options = JoinLoop {
        join_signing: ks.join_signing.public_key().pin(),
        trust_domain: None,
        node_id,
        approval_timeout: timeout,
    };
    let result = {
        let mut sleep = |d: Duration| {
            slept.push(d);
            clock.set(clock.get() + d);
        };
        let mut jitter = || 0.5;
        let now = || clock.get();
        let mut say = |line: &str| log.push(line.to_owned());
        let mut env = JoinEnv {
            sleep: &mut sleep,
            jitter: &mut jitter,
            now: &now,
            log: &mut say,
        };
        run_join(dir, &mut fake, prepared, producer, &options, &mut env)
    };
    (Run { result, slept, log }, fake.seen, csr_sha256)
}

fn ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn nothing_stored(dir: &DataDir) {
    assert!(!dir.exists("identity.json") && !dir.exists("node.key"));
}

#[test]
fn a_pending_answer_is_waited_out_and_retried_with_the_same_csr() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = NoEvidence::new("join-token");
    let (run, seen, csr) = drive(
        &ks,
        &dir,
        vec![
            Step::Pending("jr_1", 0),
            Step::Pending("jr_1", 5),
            Step::Join("n7"),
        ],
        &producer,
        None,
        Duration::hours(24),
    );
    let joined = run.result.unwrap();
    assert_eq!(joined.verified.leaf.spiffe_id.node.as_str(), "n7");
    // At least one second, else retry_after_seconds.
    assert_eq!(run.slept, vec![Duration::seconds(1), Duration::seconds(5)]);
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|s| s.csr_sha256 == csr && s.attestor.is_empty()));
    assert_eq!(
        run.log[0],
        "bcd join: waiting for approval of jr_1 (bcctl join-request approve jr_1); asking again in 1 s"
    );
    assert_eq!(load(&dir).unwrap().stored.node_id, "n7");
}

#[test]
fn the_wait_for_approval_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = NoEvidence::new("join-token");
    let (run, seen, _) = drive(
        &ks,
        &dir,
        vec![Step::Pending("jr_2", 40); 10],
        &producer,
        None,
        Duration::seconds(100),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(&err, JoinError::ApprovalTimeout { request_id, .. } if request_id == "jr_2"),
        "{err}"
    );
    assert!(
        err.to_string().contains("not approved within 100s"),
        "{err}"
    );
    // 40 + 40 + 20 (the rest of the bound), then the answer after the bound ends it.
    assert_eq!(
        run.slept,
        vec![
            Duration::seconds(40),
            Duration::seconds(40),
            Duration::seconds(20)
        ]
    );
    assert_eq!(seen.len(), 4);
    nothing_stored(&dir);
}

#[test]
fn challenges_are_answered_by_the_same_attestor_up_to_three_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let later = ms(now() + Duration::minutes(5));
    let producer = answering("acme");
    let mut steps: Vec<Step> = (0..MAX_CHALLENGES)
        .map(|i| Step::Challenge("acme", vec![b'a' + i as u8], later))
        .collect();
    steps.push(Step::Join("n9"));
    let (run, seen, csr) = drive(&ks, &dir, steps, &producer, None, Duration::hours(1));
    run.result.unwrap();
    let evidence: Vec<&[u8]> = seen.iter().map(|s| s.evidence.as_slice()).collect();
    assert_eq!(
        evidence,
        vec![
            &b"round 1:"[..],
            &b"round 2:a"[..],
            &b"round 3:b"[..],
            &b"round 4:c"[..]
        ]
    );
    assert!(seen
        .iter()
        .all(|s| s.csr_sha256 == csr && s.attestor == "acme"));
    assert!(producer.asked.borrow().iter().all(|(_, c, _)| *c == csr));
}

#[test]
fn a_fourth_challenge_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let later = ms(now() + Duration::minutes(5));
    let producer = answering("acme");
    let mut steps = vec![Step::Challenge("acme", vec![1], later); 4];
    steps.push(Step::Join("n9"));
    let (run, seen, _) = drive(&ks, &dir, steps, &producer, None, Duration::hours(1));
    let err = run.result.unwrap_err();
    assert!(
        matches!(err, JoinError::TooManyChallenges { max: 3, .. }),
        "{err}"
    );
    assert_eq!(seen.len(), 4);
    nothing_stored(&dir);
}

#[test]
fn a_challenge_for_another_attestor_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let later = ms(now() + Duration::minutes(5));
    let producer = answering("acme");
    let (run, seen, _) = drive(
        &ks,
        &dir,
        vec![Step::Challenge("tpm", vec![1], later), Step::Join("n9")],
        &producer,
        None,
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(&err, JoinError::ChallengeForOther { found, ours } if found == "tpm" && ours == "acme"),
        "{err}"
    );
    assert_eq!(seen.len(), 1);
    assert_eq!(
        producer.asked.borrow().len(),
        1,
        "the challenge was not answered"
    );
    nothing_stored(&dir);

    // join-token answers no challenge at all.
    let producer = NoEvidence::new("join-token");
    let (run, _, _) = drive(
        &ks,
        &dir,
        vec![Step::Challenge("join-token", vec![1], later)],
        &producer,
        None,
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(err, JoinError::Evidence(EvidenceError::NoChallenges(_))),
        "{err}"
    );
    nothing_stored(&dir);
}

#[test]
fn a_challenge_past_its_not_after_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = answering("acme");
    let past = ms(now() - Duration::seconds(1));
    let (run, seen, _) = drive(
        &ks,
        &dir,
        vec![Step::Challenge("acme", vec![1], past), Step::Join("n9")],
        &producer,
        None,
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(matches!(err, JoinError::ChallengeExpired { .. }), "{err}");
    assert_eq!((seen.len(), producer.asked.borrow().len()), (1, 1));
    nothing_stored(&dir);
}

#[test]
fn an_answer_bound_to_another_csr_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = NoEvidence::new("join-token");
    let (run, _, _) = drive(
        &ks,
        &dir,
        vec![Step::OtherCsr],
        &producer,
        None,
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(err, JoinError::Verify(JoinRefusal::CsrMismatch)),
        "{err}"
    );
    nothing_stored(&dir);
}

#[test]
fn a_deferral_carrying_a_certificate_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = NoEvidence::new("join-token");
    let (run, _, _) = drive(
        &ks,
        &dir,
        vec![Step::PendingWithCertificate],
        &producer,
        None,
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(err, JoinError::Verify(JoinRefusal::MalformedDeferral)),
        "{err}"
    );
    nothing_stored(&dir);
}

#[test]
fn node_id_refuses_another_node_and_stores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let producer = NoEvidence::new("provisioned");
    let (run, seen, _) = drive(
        &ks,
        &dir,
        vec![Step::Join("n2")],
        &producer,
        Some("n1"),
        Duration::hours(1),
    );
    let err = run.result.unwrap_err();
    assert!(
        matches!(&err, JoinError::NotThatNode { found, expected } if found == "n2" && expected == "n1"),
        "{err}"
    );
    assert_eq!(seen[0].attestor, "provisioned");
    nothing_stored(&dir);

    let (run, _, _) = drive(
        &ks,
        &dir,
        vec![Step::Join("n1")],
        &producer,
        Some("n1"),
        Duration::hours(1),
    );
    run.result.unwrap();
    assert_eq!(load(&dir).unwrap().stored.node_id, "n1");
}

#[test]
fn a_deferral_is_never_taken_for_a_join() {
    let ks = keyset();
    let key = node_key();
    let csr = *common::csr(&key).sha256();
    let expect = JoinExpectation {
        join_signing_pin: ks.join_signing.public_key().pin(),
        csr_sha256: csr,
        node_key: key.public_key(),
        role: NodeRole::Node,
        trust_domain: None,
        node_id: None,
    };
    for (deferral, kind) in [
        (WireDeferral::Pending("jr_1".into(), 1), "pending"),
        (
            WireDeferral::Challenge("acme".into(), vec![1], i64::MAX),
            "challenge",
        ),
    ] {
        let body = Body {
            csr_sha256: csr.to_vec(),
            trust_domain: TD.to_owned(),
            leaf: Vec::new(),
            node_id: String::new(),
            deferral: Some(deferral),
        };
        let answer = signed(&ks, csr, &body);
        assert_eq!(
            verify_join_response(&answer, decode, &expect).unwrap_err(),
            JoinRefusal::Deferral(kind)
        );
    }
    // Not even one that carries a certificate for this key.
    let leaf = issue(&ks, &key, "n1", NodeRole::Node);
    let body = Body {
        csr_sha256: csr.to_vec(),
        trust_domain: TD.to_owned(),
        leaf,
        node_id: "n1".into(),
        deferral: Some(WireDeferral::Pending("jr_1".into(), 1)),
    };
    assert_eq!(
        verify_join_response(&signed(&ks, csr, &body), decode, &expect).unwrap_err(),
        JoinRefusal::Deferral("pending")
    );
}
