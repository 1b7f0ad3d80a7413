//! The renewal of a certificate naming a TPM AK (spec 000 "Renewing a TPM-held key"): the new
//! key's TPM2_Certify by that AK, made by a real TPM (swtpm + tpm2-tools), admits; one refusal
//! per `renew:node-key-*` reason, each from the good request altered in one field.

use domain::attest::tpm::TpmKeyAttestation;
use domain::identity::{
    decide_renew, prepare_renew, CertState, DecideError, JoinContext, NodeState, NodeStatus,
    RenewCommand, RenewInput, RenewRefusal, RenewState,
};
use domain::pki::statement::RenewPop;
use domain::pki::{
    build_csr_with, issue_node_certificate, sign_with, KeySet, KeySetLifetimes,
    NodeCertificateDecision, NodeId, NodeIdentity, NodeKeyStatement, NodeRole, Serial, SiteId,
    SpiffeId, TrustDomain, VerifiedCsr,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::tpm_support::{EkKind, Machine, NODE_ATTRIBUTES};

struct Renewal {
    m: Machine,
    keys: KeySet,
    now: OffsetDateTime,
    /// The key the current certificate certifies.
    old: String,
    /// The key the renewal asks for.
    new: String,
    new_csr: Vec<u8>,
    ak_uri: String,
}

impl Renewal {
    fn new() -> Renewal {
        let m = Machine::new(EkKind::Rsa);
        let old = m.create_primary("o", NODE_ATTRIBUTES, Some(&[1; 32]));
        let new = m.create_primary("o", NODE_ATTRIBUTES, Some(&[2; 32]));
        let now = OffsetDateTime::now_utc();
        let td = TrustDomain::new("compute.example.com").unwrap();
        let keys = KeySet::generate(td, now, KeySetLifetimes::default()).unwrap();
        let new_csr = build_csr_with(&m.signer(&new)).unwrap();
        let name = m.name(&m.ak);
        let ak_uri = format!("urn:bc:tpm-ak:000b:{}", hex::encode(&name[2..]));
        Renewal {
            m,
            keys,
            now,
            old,
            new,
            new_csr,
            ak_uri,
        }
    }

    fn ctx(&self) -> JoinContext<'_> {
        JoinContext {
            trust_domain: &self.keys.trust_domain,
            node_ca: &self.keys.node_ca,
            join_encryption: &self.keys.join_encryption,
            leaf_lifetime: time::Duration::hours(24),
            ramdisk_lifetime: time::Duration::hours(2),
        }
    }

    fn csr_sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.new_csr).into()
    }

    /// The good attestation: the AK certifies the new key for the new CSR.
    fn attestation(&self) -> TpmKeyAttestation {
        let (certify_info, signature) = self.m.certify(&self.new, &self.csr_sha256());
        TpmKeyAttestation {
            ak_public: self.m.ak_public(),
            key_public: self.m.public(&self.new),
            certify_info,
            signature,
        }
    }

    /// Renews a certificate of the old key carrying `statements`.
    fn renew(
        &self,
        statements: &[&str],
        attestation: Option<TpmKeyAttestation>,
    ) -> Result<Vec<u8>, RenewRefusal> {
        let ctx = self.ctx();
        let spiffe = SpiffeId::new(
            self.keys.trust_domain.clone(),
            SiteId::new("site-1").unwrap(),
            NodeId::new("node_1").unwrap(),
        );
        let old_csr =
            VerifiedCsr::verify(&build_csr_with(&self.m.signer(&self.old)).unwrap()).unwrap();
        let leaf = issue_node_certificate(
            &self.keys.node_ca,
            &old_csr,
            &NodeCertificateDecision {
                spiffe_id: spiffe,
                role: NodeRole::Node,
                serial: Serial::generate().unwrap(),
                requested_lifetime: Some(time::Duration::hours(24)),
                statements: statements
                    .iter()
                    .map(|s| NodeKeyStatement::new(s).unwrap())
                    .collect(),
            },
            self.now,
        )
        .unwrap();
        let client_time_ms = u64::try_from(self.now.unix_timestamp() * 1000).unwrap();
        let pop = RenewPop {
            csr_sha256: self.csr_sha256(),
            node_id: NodeId::new("node_1").unwrap(),
            client_time_ms,
        };
        let input = RenewInput {
            csr_der: self.new_csr.clone(),
            chain: vec![leaf.der.clone(), self.keys.node_ca.cert_der().to_vec()],
            client_time_ms,
            signature: sign_with(&self.m.signer(&self.old), &pop)
                .unwrap()
                .as_bytes()
                .to_vec(),
            key_attestation: attestation,
        };
        let prepared = prepare_renew(&ctx, &input).map_err(|e| e.0)?;
        let state = RenewState {
            node: Some(NodeState {
                node_id: "node_1".into(),
                tenant_id: "t1".into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: NodeRole::Node,
                status: NodeStatus::Active,
                identity_generation: 1,
                hardware_key_sha256: None,
                product_uuid_sha256: None,
            }),
            cert: Some(CertState {
                serial: leaf.serial.to_hex(),
                node_id: "node_1".into(),
                identity_generation: 1,
                der: leaf.der.clone(),
                not_after_us: (leaf.not_after.unix_timestamp_nanos() / 1000) as i64,
                revoked: false,
                allowed_kinds: Vec::new(),
            }),
            ..RenewState::default()
        };
        let cmd = RenewCommand {
            prepared,
            serial: Serial::generate().unwrap(),
        };
        match decide_renew(&ctx, &cmd, &state, self.now + time::Duration::seconds(1)) {
            Ok(d) => Ok(d.outcome.certificate_der),
            Err(DecideError::Refused(r)) => Err(r.reason),
            Err(other) => panic!("the renewal failed: {other:?}"),
        }
    }
}

#[test]
fn a_certified_new_key_renews_and_keeps_the_statement() {
    let r = Renewal::new();
    let der = r
        .renew(&[&r.ak_uri], Some(r.attestation()))
        .expect("the renewal admits");
    let identity = NodeIdentity::from_leaf_der(&der, &r.keys.trust_domain).unwrap();
    let uris: Vec<&str> = identity.statements.iter().map(|s| s.as_str()).collect();
    assert_eq!(uris, vec![r.ak_uri.as_str()]);
    let csr = VerifiedCsr::verify(&r.new_csr).unwrap();
    assert_eq!(&identity.public_key, csr.public_key());
    // A leaf without statements still renews without any attestation.
    assert!(r.renew(&[], None).is_ok());
}

#[test]
fn each_node_key_reason_refuses() {
    let r = Renewal::new();
    let good = r.attestation();
    let csr_sha = r.csr_sha256();
    let ak = r.m.ak.clone();
    let other_ak_uri = format!("urn:bc:tpm-ak:000b:{}", "ab".repeat(32));
    assert_eq!(
        r.renew(&[&r.ak_uri], None),
        Err(RenewRefusal::NodeKeyMissing)
    );
    assert_eq!(
        r.renew(&[&other_ak_uri], Some(good.clone())),
        Err(RenewRefusal::NodeKeyAk)
    );
    assert_eq!(
        r.renew(&["urn:bc:other:thing"], Some(good.clone())),
        Err(RenewRefusal::KeyStatementUnknown)
    );
    let mut cases: Vec<(RenewRefusal, TpmKeyAttestation)> = Vec::new();
    let mut a = good.clone();
    a.ak_public = r.m.public(&r.new);
    cases.push((RenewRefusal::NodeKeyAk, a));
    let mut a = good.clone();
    a.certify_info.truncate(a.certify_info.len() - 1);
    cases.push((RenewRefusal::NodeKeyMalformed, a));
    let mut a = good.clone();
    (a.certify_info, a.signature) = r.m.certify_with(&r.new, &r.old, &csr_sha);
    cases.push((RenewRefusal::NodeKeySignature, a));
    let mut a = good.clone();
    (a.certify_info, a.signature) = r.m.certify(&r.new, &[0; 32]);
    cases.push((RenewRefusal::NodeKeyNonce, a));
    let mut a = good.clone();
    a.key_public = r.m.public(&r.old);
    cases.push((RenewRefusal::NodeKeyName, a));
    let mut a = good.clone();
    (a.certify_info, a.signature) = r.m.certify(&ak, &csr_sha);
    a.key_public = r.m.ak_public();
    cases.push((RenewRefusal::NodeKeyAttributes, a));
    let mut a = good.clone();
    (a.certify_info, a.signature) = r.m.certify(&r.old, &csr_sha);
    a.key_public = r.m.public(&r.old);
    cases.push((RenewRefusal::NodeKeyNotCsr, a));
    for (want, attestation) in cases {
        assert_eq!(r.renew(&[&r.ak_uri], Some(attestation)), Err(want));
    }
}

#[test]
fn the_admission_step_lets_a_tpm_ak_statement_through() {
    use domain::attest::{renewal_can_prove, NodeKeyStatement as Claim};
    let claim = |uri: String| Claim::Statement {
        label: "tpm".into(),
        uri,
    };
    assert!(renewal_can_prove(&Claim::Unattested));
    assert!(renewal_can_prove(&claim(format!(
        "urn:bc:tpm-ak:000b:{}",
        "0f".repeat(32)
    ))));
    for bad in [
        format!("urn:bc:tpm-ak:000c:{}", "0f".repeat(32)),
        format!("urn:bc:tpm-ak:000b:{}", "0F".repeat(32)),
        format!("urn:bc:tpm-ak:000b:{}", "0f".repeat(33)),
        "urn:bc:other-key:1".to_owned(),
    ] {
        assert!(!renewal_can_prove(&claim(bad.clone())), "{bad}");
    }
}
