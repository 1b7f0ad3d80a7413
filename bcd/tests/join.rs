//! The join loop with a stand-in transport: retries, pushback, verification, storing.

use crate::common;

use bcd::attest::NoEvidence;
use bcd::config::JoinPins;
use bcd::files::identity::load;
use bcd::files::DataDir;
use bcd::join::exchange::{run_join, JoinEnv, JoinLoop, Joined, DEFAULT_APPROVAL_TIMEOUT};
use bcd::join::request::{
    prepare_join, CallError, JoinError, JoinRequestParts, JoinTransport, PreparedJoin,
};
use bcd::join::verify::{JoinResponseFields, SignedJoinResponse};
use bcd::renewal::schedule::Pushback;
use common::*;
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::{KeySet, NodeRole, TokenSecret, VerifiedCsr};
use time::Duration;

struct Fake<'a> {
    ks: &'a KeySet,
    failures: Vec<CallError>,
    calls: u32,
}

impl JoinTransport for Fake<'_> {
    fn join(&mut self, request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError> {
        self.calls += 1;
        if !self.failures.is_empty() {
            return Err(self.failures.remove(0));
        }
        // The server side: open the seal with this CSR, issue, sign.
        let csr = VerifiedCsr::verify(&request.csr_der).unwrap();
        let secret = self
            .ks
            .join_encryption
            .open(request.sealed_token.as_ref().unwrap(), csr.sha256())
            .unwrap();
        assert!(secret.expose().starts_with("bcjt_"));
        let decision = domain::pki::NodeCertificateDecision {
            spiffe_id: domain::pki::SpiffeId::parse(&format!("spiffe://{TD}/site/eu-1/node/n7"))
                .unwrap(),
            role: request.role,
            serial: domain::pki::Serial::generate().unwrap(),
            requested_lifetime: None,
            statements: vec![],
        };
        let leaf = domain::pki::issue_node_certificate(&self.ks.node_ca, &csr, &decision, now())
            .unwrap()
            .der;
        let body = serde_json::to_vec(&(csr.sha256().to_vec(), TD, leaf)).unwrap();
        let sig = sign(
            &self.ks.join_signing,
            &JoinResponseStatement {
                csr_sha256: *csr.sha256(),
                response: &body,
            },
        )
        .unwrap();
        Ok(SignedJoinResponse {
            body,
            signature: sig.as_bytes().to_vec(),
            signer_spki_der: self.ks.join_signing.public_key().spki_der().to_vec(),
        })
    }

    fn decode_body(&self, body: &[u8]) -> Result<JoinResponseFields, String> {
        let (csr_sha256, trust_domain, leaf_der): (Vec<u8>, String, Vec<u8>) =
            serde_json::from_slice(body).map_err(|e| e.to_string())?;
        Ok(JoinResponseFields {
            csr_sha256,
            trust_domain,
            leaf_der,
            chain_ders: vec![self.ks.node_ca.cert_der().to_vec()],
            ..Default::default()
        })
    }
}

fn pins(ks: &KeySet) -> JoinPins {
    let p = ks.pins();
    JoinPins {
        serving_ca: p.serving_ca,
        join_encryption: p.join_encryption,
        join_signing: p.join_signing,
    }
}

fn prepared(ks: &KeySet) -> PreparedJoin {
    prepare_join(
        ks.join_encryption.public_key(),
        &TokenSecret::generate().unwrap(),
        NodeRole::Node,
        Default::default(),
    )
    .unwrap()
}

fn join(
    dir: &DataDir,
    fake: &mut Fake<'_>,
    prepared: PreparedJoin,
    pins: &JoinPins,
    sleep: &mut dyn FnMut(Duration),
) -> Result<Joined, JoinError> {
    let options = JoinLoop {
        join_signing: pins.join_signing,
        trust_domain: None,
        node_id: None,
        approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
    };
    let mut jitter = || 0.5;
    let mut log = |_: &str| {};
    let mut env = JoinEnv {
        sleep,
        jitter: &mut jitter,
        now: &now,
        log: &mut log,
    };
    run_join(
        dir,
        fake,
        prepared,
        &NoEvidence::new("join-token"),
        &options,
        &mut env,
    )
}

#[test]
fn retries_then_verifies_and_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let mut fake = Fake {
        ks: &ks,
        failures: vec![
            CallError::Retryable {
                message: "unavailable".into(),
                pushback: None,
            },
            CallError::Retryable {
                message: "busy".into(),
                pushback: Some(Pushback::After(Duration::milliseconds(2500))),
            },
        ],
        calls: 0,
    };
    let mut slept = Vec::new();
    let joined = join(&dir, &mut fake, prepared(&ks), &pins(&ks), &mut |d| {
        slept.push(d)
    })
    .unwrap();
    assert_eq!(fake.calls, 3);
    assert_eq!(
        slept,
        vec![Duration::seconds(1), Duration::milliseconds(2500)]
    );
    assert!(joined
        .message()
        .starts_with("joined as n7 (site eu-1, role node); certificate valid until "));
    let loaded = load(&dir).unwrap();
    assert_eq!(loaded.stored.node_id, "n7");
    assert_eq!(loaded.stored.chain.len(), 2);
}

#[test]
fn gives_up_after_twenty_attempts_and_refusal_is_final() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let dir = DataDir::new(tmp.path().join("data"));
    let retryable = CallError::Retryable {
        message: "unavailable".into(),
        pushback: None,
    };
    let mut fake = Fake {
        ks: &ks,
        failures: vec![retryable; 25],
        calls: 0,
    };
    let mut sleeps = 0;
    let err = join(&dir, &mut fake, prepared(&ks), &pins(&ks), &mut |_| {
        sleeps += 1
    })
    .unwrap_err();
    assert!(
        matches!(err, JoinError::GaveUp { attempts: 20, .. }),
        "{err}"
    );
    assert_eq!((fake.calls, sleeps), (20, 19));

    let mut fake = Fake {
        ks: &ks,
        failures: vec![CallError::Refused],
        calls: 0,
    };
    let err = join(&dir, &mut fake, prepared(&ks), &pins(&ks), &mut |_| {}).unwrap_err();
    assert!(matches!(err, JoinError::Refused { .. }));
    assert!(err
        .to_string()
        .starts_with("Join refused (ACCESS_DENIED): check the token"));
    assert!(!dir.exists("identity.json") && !dir.exists("node.key"));
}
