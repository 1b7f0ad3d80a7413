//! The `tpm` attestor on evidence a real TPM made: swtpm driven by tpm2-tools (the independent
//! client, [`crate::tpm_support`]), both rounds of a join with the RSA-2048 and the ECC P-384
//! EK, and one refusal per `tpm:<reason>` reachable by altering exactly one field.

use std::collections::BTreeMap;
use std::time::Duration;

use domain::attest::tpm::{
    CertifiedKey, NodeKeyPolicy, Placement, TpmAnswer, TpmAttestation, TpmAttestor, TpmChallenge,
    TpmConfig, TpmEvidence,
};
use domain::attest::{
    AttestRequest, AttestationResult, Attestor, BindingState, EntryState, FactKey, Facts,
    NodeKeyStatement, Verdict,
};
use domain::identity::{claims_digests, ClaimsDigests, HardwareClaims, NodeState, NodeStatus};
use domain::pki::{build_csr, build_csr_with, KeyRole, NodeRole, PrivateKey, VerifiedCsr};
use sha2::{Digest, Sha256};
use swtpm_fixture::swtpm::ek_ca;
use time::OffsetDateTime;

use crate::tpm_support::{EkKind, Machine, NODE_ATTRIBUTES};

fn config() -> TpmConfig {
    TpmConfig {
        ek_roots: vec![ek_ca().root_der()],
        pcr_policy: BTreeMap::new(),
        node_key: NodeKeyPolicy::Certified,
        enrollment: None,
        challenge_key: [7; 32],
        challenge_ttl: Duration::from_secs(300),
    }
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A machine mid-join: its TPM, node key and CSR, and the evidence of round 1.
struct Join {
    m: Machine,
    node: String,
    csr: VerifiedCsr,
    claims: HardwareClaims,
    digests: ClaimsDigests,
    evidence: TpmEvidence,
    now: OffsetDateTime,
}

impl Join {
    fn new(kind: EkKind) -> Join {
        let m = Machine::new(kind);
        let node = m.create_primary("o", NODE_ATTRIBUTES, Some(&[1; 32]));
        let csr_der = build_csr_with(&m.signer(&node)).expect("a CSR signed by the TPM");
        let csr = VerifiedCsr::verify(&csr_der).expect("the TPM's CSR verifies");
        let evidence = TpmEvidence {
            ek_public: m.ek_public(),
            ek_certificate: m.ek_certificate(),
            ek_intermediates: vec![ek_ca().issuer_der()],
            ak_public: m.ak_public(),
        };
        let claims = HardwareClaims::default();
        let digests = claims_digests(&claims);
        Join {
            m,
            node,
            csr,
            claims,
            digests,
            evidence,
            now: OffsetDateTime::now_utc(),
        }
    }

    fn request<'a>(&'a self, bytes: &'a [u8]) -> AttestRequest<'a> {
        AttestRequest {
            role: NodeRole::Node,
            csr: &self.csr,
            claims: &self.claims,
            digests: &self.digests,
            evidence: bytes,
            token: None,
            now: self.now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        }
    }

    fn ek_sha256(&self) -> [u8; 32] {
        sha(&self.evidence.ek_public)
    }

    fn round1_with(&self, attestor: &TpmAttestor, evidence: &TpmEvidence) -> Verdict {
        let bytes = TpmAttestation::evidence(evidence.clone()).to_bytes();
        let request = self.request(&bytes);
        let planned = attestor.plan(&request).expect("round 1 plans");
        assert_eq!(planned.facts, Vec::new(), "round 1 reads nothing");
        attestor.verify(&request, &planned.plan, &Facts::default())
    }

    fn challenge(&self, attestor: &TpmAttestor) -> TpmChallenge {
        match self.round1_with(attestor, &self.evidence) {
            Verdict::Challenge(c) => serde_json::from_slice(&c.payload).expect("a TpmChallenge"),
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    /// Everything a good agent answers.
    fn answer(&self, challenge: &TpmChallenge) -> TpmAnswer {
        self.m.answer(challenge, &self.node, self.csr.sha256())
    }

    fn round2_at(
        &self,
        attestor: &TpmAttestor,
        answer: &TpmAnswer,
        facts: &Facts,
        csr: Option<&VerifiedCsr>,
        now: OffsetDateTime,
    ) -> (Result<Vec<FactKey>, String>, Verdict) {
        let bytes = TpmAttestation::answer(answer.clone()).to_bytes();
        let mut request = self.request(&bytes);
        request.now = now;
        if let Some(csr) = csr {
            request.csr = csr;
        }
        match attestor.plan(&request) {
            Ok(planned) => (
                Ok(planned.facts),
                attestor.verify(&request, &planned.plan, facts),
            ),
            Err(r) => (Err(r.text()), Verdict::Refuse(r)),
        }
    }

    fn round2(&self, attestor: &TpmAttestor, answer: &TpmAnswer, facts: &Facts) -> Verdict {
        self.round2_at(attestor, answer, facts, None, self.now).1
    }

    fn allowed(&self) -> Facts {
        let mut facts = Facts::default();
        facts.entries.insert(
            ("tpm-allow".into(), hex::encode(self.ek_sha256())),
            EntryState {
                entry_id: "tpma_1".into(),
                tenant_id: "t1".into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: None,
            },
        );
        facts
    }
}

fn admitted(v: Verdict) -> AttestationResult {
    match v {
        Verdict::Admit(r) => *r,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn refused(v: Verdict) -> String {
    match v {
        Verdict::Refuse(r) => r.text(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn two_rounds_admit(kind: EkKind) {
    let j = Join::new(kind);
    let attestor = TpmAttestor::new(config());
    let challenge = j.challenge(&attestor);
    assert_eq!(challenge.pcrs, vec![0, 1, 2, 3, 4, 5, 6, 7]);
    let answer = j.answer(&challenge);
    let facts = j.allowed();
    let (plan, verdict) = j.round2_at(&attestor, &answer, &facts, None, j.now);
    let ek = j.ek_sha256();
    assert_eq!(
        plan,
        Ok(vec![
            FactKey::Binding(ek),
            FactKey::Entry {
                list: "tpm-allow".into(),
                key: hex::encode(ek),
            }
        ])
    );
    let result = admitted(verdict);
    // The AK's name as the TPM computes it is the statement's digest.
    let tpm_name = j.m.name(&j.m.ak);
    assert_eq!(&tpm_name[..2], &[0x00, 0x0B]);
    assert_eq!(
        result.node_key,
        NodeKeyStatement::Statement {
            label: "tpm".into(),
            uri: format!("urn:bc:tpm-ak:000b:{}", hex::encode(&tpm_name[2..])),
        }
    );
    assert_eq!(
        (
            result.tenant_id.as_str(),
            result.site_id.as_str(),
            result.pool_id.as_str()
        ),
        ("t1", "site-1", "pool-1")
    );
    assert_eq!(result.bind, vec![ek]);
    assert_eq!(result.reclaim_node_id, None);
    assert_eq!(result.approval, None);
    assert_eq!(result.single_use.len(), 1, "the answer admits once");
}

#[test]
fn an_rsa_ek_admits_in_two_rounds() {
    two_rounds_admit(EkKind::Rsa);
}

#[test]
fn a_p384_ek_admits_in_two_rounds() {
    two_rounds_admit(EkKind::P384);
}

#[test]
fn round_one_refuses_each_bad_field() {
    let j = Join::new(EkKind::Rsa);
    let attestor = TpmAttestor::new(config());
    let r1 = |e: &TpmEvidence| refused(j.round1_with(&attestor, e));
    let mut cases: Vec<(&str, TpmEvidence)> = Vec::new();
    let mut e = j.evidence.clone();
    e.ek_public.truncate(e.ek_public.len() - 1);
    cases.push(("tpm:ek-malformed", e));
    let mut e = j.evidence.clone();
    e.ek_public = j.evidence.ak_public.clone();
    cases.push(("tpm:ek-unsupported", e));
    let mut e = j.evidence.clone();
    e.ek_certificate = b"not a certificate".to_vec();
    cases.push(("tpm:ek-malformed", e));
    let mut e = j.evidence.clone();
    e.ek_intermediates.clear();
    cases.push(("tpm:ek-untrusted", e));
    let mut e = j.evidence.clone();
    e.ek_public = j.m.public("0x81010016");
    cases.push(("tpm:ek-mismatch", e));
    let mut e = j.evidence.clone();
    e.ak_public.truncate(10);
    cases.push(("tpm:ak-malformed", e));
    let mut e = j.evidence.clone();
    e.ak_public = j.evidence.ek_public.clone();
    cases.push(("tpm:ak-unsupported", e));
    let mut e = j.evidence.clone();
    e.ak_public = j.m.public(&j.node);
    cases.push(("tpm:ak-attributes", e));
    for (want, evidence) in &cases {
        assert_eq!(&r1(evidence), want);
    }
    // Another root: untrusted.
    let mut other = config();
    other.ek_roots = vec![j.evidence.ek_certificate.clone()];
    let stranger = TpmAttestor::new(other);
    assert_eq!(
        refused(j.round1_with(&stranger, &j.evidence)),
        "tpm:ek-untrusted"
    );
    // The message itself.
    let request = |b: &'static [u8]| {
        let r = j.request(b);
        attestor.plan(&r).map(|p| p.facts).map_err(|e| e.text())
    };
    assert_eq!(request(b"not json"), Err("tpm:malformed".into()));
    assert_eq!(
        request(br#"{"v":2}"#),
        Err("tpm:unsupported-version".into())
    );
    assert_eq!(request(br#"{"v":1}"#), Err("tpm:malformed".into()));
}

#[test]
fn round_two_refuses_each_bad_field() {
    let j = Join::new(EkKind::Rsa);
    let attestor = TpmAttestor::new(config());
    let challenge = j.challenge(&attestor);
    let good = j.answer(&challenge);
    let facts = j.allowed();
    admitted(j.round2(&attestor, &good, &facts));
    let csr_sha = *j.csr.sha256();
    let other_key = j.m.create_primary("o", NODE_ATTRIBUTES, Some(&[2; 32]));
    let mut cases: Vec<(&str, TpmAnswer)> = Vec::new();
    let mut a = good.clone();
    a.state[20] ^= 1;
    cases.push(("tpm:state-invalid", a));
    let mut a = good.clone();
    a.secret[0] ^= 1;
    cases.push(("tpm:activation", a));
    let mut a = good.clone();
    a.quote.truncate(a.quote.len() - 1);
    cases.push(("tpm:quote-malformed", a));
    let node_key = good.node_key.clone().unwrap();
    let mut a = good.clone();
    a.quote_signature = node_key.signature.clone();
    cases.push(("tpm:quote-signature", a));
    let mut a = good.clone();
    (a.quote, a.quote_signature) = (node_key.certify_info.clone(), node_key.signature.clone());
    cases.push(("tpm:quote-malformed", a));
    let mut a = good.clone();
    (a.quote, a.quote_signature) = j.m.quote(&challenge.pcrs, &[0; 32]);
    cases.push(("tpm:quote-nonce", a));
    let mut a = good.clone();
    a.pcr_values[3].digest[0] ^= 1;
    cases.push(("tpm:pcr-mismatch", a));
    let mut a = good.clone();
    let extra = sha(&[&good.secret[..], &csr_sha[..]].concat());
    (a.quote, a.quote_signature) = j.m.quote(&[0, 1, 2, 3, 4, 5, 6], &extra);
    a.pcr_values.pop();
    cases.push(("tpm:pcr-mismatch", a));
    let with_key = |k: CertifiedKey| {
        let mut a = good.clone();
        a.node_key = Some(k);
        a
    };
    let mut k = node_key.clone();
    k.public.truncate(5);
    cases.push(("tpm:node-key-malformed", with_key(k)));
    let mut k = node_key.clone();
    k.signature = good.quote_signature.clone();
    cases.push(("tpm:node-key-signature", with_key(k)));
    let mut k = node_key.clone();
    (k.certify_info, k.signature) = j.m.certify(&j.node, &[0; 32]);
    cases.push(("tpm:node-key-nonce", with_key(k)));
    let mut k = node_key.clone();
    k.public = j.m.public(&other_key);
    cases.push(("tpm:node-key-name", with_key(k)));
    let ak = j.m.ak.clone();
    let (info, sig) = j.m.certify(&ak, &csr_sha);
    cases.push((
        "tpm:node-key-attributes",
        with_key(CertifiedKey {
            public: j.m.ak_public(),
            certify_info: info,
            signature: sig,
        }),
    ));
    let (info, sig) = j.m.certify(&other_key, &csr_sha);
    cases.push((
        "tpm:node-key-not-csr",
        with_key(CertifiedKey {
            public: j.m.public(&other_key),
            certify_info: info,
            signature: sig,
        }),
    ));
    let mut a = good.clone();
    a.node_key = None;
    cases.push(("tpm:node-key-not-certified", a));
    for (want, answer) in &cases {
        assert_eq!(&refused(j.round2(&attestor, answer, &facts)), want);
    }
    // The state's own checks answer in plan too.
    let (plan, _) = j.round2_at(&attestor, &cases[0].1, &facts, None, j.now);
    assert_eq!(plan, Err("tpm:state-invalid".into()));
    let stranger_csr =
        VerifiedCsr::verify(&build_csr(&PrivateKey::generate(KeyRole::Node).unwrap()).unwrap())
            .unwrap();
    let (plan, verdict) = j.round2_at(&attestor, &good, &facts, Some(&stranger_csr), j.now);
    assert_eq!(plan, Err("tpm:state-other-csr".into()));
    assert_eq!(refused(verdict), "tpm:state-other-csr");
    let late = j.now + time::Duration::seconds(301);
    let (plan, verdict) = j.round2_at(&attestor, &good, &facts, None, late);
    assert_eq!(plan, Err("tpm:state-expired".into()));
    assert_eq!(refused(verdict), "tpm:state-expired");
    // Another deployment's key opens nothing.
    let mut other = config();
    other.challenge_key = [8; 32];
    assert_eq!(
        refused(j.round2(&TpmAttestor::new(other), &good, &facts)),
        "tpm:state-invalid"
    );
}

#[test]
fn where_the_machine_goes() {
    let j = Join::new(EkKind::Rsa);
    let ek = j.ek_sha256();
    let mut any = config();
    any.node_key = NodeKeyPolicy::Any;
    let attestor = TpmAttestor::new(any.clone());
    let challenge = j.challenge(&attestor);
    let good = j.answer(&challenge);
    // Neither bound nor allowed, no enrollment.
    assert_eq!(
        refused(j.round2(&attestor, &good, &Facts::default())),
        "tpm:unknown-ek"
    );
    // With node_key = "any", no certification claims nothing.
    let mut bare = good.clone();
    bare.node_key = None;
    assert_eq!(
        admitted(j.round2(&attestor, &bare, &j.allowed())).node_key,
        NodeKeyStatement::Unattested
    );
    // Enrollment: an approval keyed by the EK.
    let mut enrolling = any.clone();
    enrolling.enrollment = Some(Placement {
        tenant_id: "t9".into(),
        site_id: "site-9".into(),
        pool_id: "pool-9".into(),
    });
    let result = admitted(j.round2(&TpmAttestor::new(enrolling), &good, &Facts::default()));
    assert_eq!(result.approval.as_ref().map(|a| a.subject), Some(ek));
    assert_eq!(
        (result.tenant_id.as_str(), result.pool_id.as_str()),
        ("t9", "pool-9")
    );
    // Bound: reclaims its node where it is, even when also allow-listed elsewhere.
    let mut facts = j.allowed();
    facts.bindings.insert(
        ek,
        BindingState {
            attestor: "tpm".into(),
            node_id: "node_1".into(),
        },
    );
    facts.nodes.insert(
        "node_1".into(),
        NodeState {
            node_id: "node_1".into(),
            tenant_id: "t2".into(),
            site_id: "site-2".into(),
            pool_id: "pool-2".into(),
            role: NodeRole::Node,
            status: NodeStatus::Active,
            identity_generation: 1,
            hardware_key_sha256: None,
            product_uuid_sha256: None,
        },
    );
    let result = admitted(j.round2(&attestor, &good, &facts));
    assert_eq!(result.reclaim_node_id.as_deref(), Some("node_1"));
    assert_eq!(
        (result.tenant_id.as_str(), result.site_id.as_str()),
        ("t2", "site-2")
    );
    // Claims bind nothing: only what the attestor proved, the EK, binds the node (issue 40,
    // item 12). A TPM claiming another machine's hardware key and product UUID (a squatter
    // that joins first) is admitted on its own EK alone, so the real machine's join is not
    // refused `join:bound-elsewhere` because of it.
    let mut claimed = j;
    claimed.claims.hardware_key = Some(b"hw".to_vec());
    claimed.claims.product_uuid = Some("4c4c4544-0042-3510-8051-b7c04f4e3232".into());
    claimed.digests = claims_digests(&claimed.claims);
    assert!(claimed.digests.hardware_key.is_some() && claimed.digests.product_uuid.is_some());
    let (plan, verdict) =
        claimed.round2_at(&attestor, &good, &claimed.allowed(), None, claimed.now);
    assert_eq!(
        plan,
        Ok(vec![
            FactKey::Binding(ek),
            FactKey::Entry {
                list: "tpm-allow".into(),
                key: hex::encode(ek),
            }
        ])
    );
    let result = admitted(verdict);
    assert_eq!(result.bind, vec![ek]);
    // The answer is single-use: its state's digest, refused `tpm:reused` a second time.
    assert_eq!(result.single_use.len(), 1);
    assert_eq!(result.single_use[0].subject, sha(&good.state));
    assert_eq!(result.single_use[0].attestor, "tpm");
    assert_eq!(result.single_use[0].reason_if_used, "reused");
}

#[test]
fn the_pcr_policy_decides_on_the_quoted_values() {
    let j = Join::new(EkKind::Rsa);
    let zero = [0u8; 32];
    let mut policy = config();
    policy.pcr_policy = BTreeMap::from([(7, vec![[9; 32], zero])]);
    let attestor = TpmAttestor::new(policy.clone());
    let challenge = j.challenge(&attestor);
    assert_eq!(challenge.pcrs, vec![7]);
    admitted(j.round2(&attestor, &j.answer(&challenge), &j.allowed()));
    // PCR 7 extended: a value the policy does not allow.
    j.m.extend(7, &[5; 32]);
    let challenge = j.challenge(&attestor);
    assert_eq!(
        refused(j.round2(&attestor, &j.answer(&challenge), &j.allowed())),
        "tpm:pcr-policy"
    );
}
