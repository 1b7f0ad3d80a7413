//! Shared test fixtures: a real key set, real node certificates, real identity files.

#![allow(dead_code)]

use std::path::Path;

use bcd::files::identity::{store_joined, StoredIdentity, TrustState};
use bcd::files::DataDir;
use domain::pki::{
    build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision,
    NodeId, NodeIdentity, NodeRole, PrivateKey, Serial, SiteId, SpiffeId, TrustDomain, VerifiedCsr,
};
use time::{Duration, OffsetDateTime};

pub const TD: &str = "compute.example.com";

pub fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(0).unwrap()
}

pub fn keyset() -> KeySet {
    KeySet::generate(
        TrustDomain::new(TD).unwrap(),
        now() - Duration::hours(1),
        KeySetLifetimes::default(),
    )
    .unwrap()
}

pub fn node_key() -> PrivateKey {
    PrivateKey::generate(KeyRole::Node).unwrap()
}

/// The same file key as a [`bcd::node_key::NodeKey`].
pub fn as_node_key(key: &PrivateKey) -> bcd::node_key::NodeKey {
    PrivateKey::from_pkcs8_der(KeyRole::Node, key.pkcs8_der())
        .unwrap()
        .into()
}

pub fn csr(key: &PrivateKey) -> VerifiedCsr {
    VerifiedCsr::verify(&build_csr(key).unwrap()).unwrap()
}

/// A real node certificate for `key`, issued now by the key set's node CA.
pub fn issue(ks: &KeySet, key: &PrivateKey, node: &str, role: NodeRole) -> Vec<u8> {
    issue_at(ks, key, node, role, now(), None)
}

pub fn issue_at(
    ks: &KeySet,
    key: &PrivateKey,
    node: &str,
    role: NodeRole,
    at: OffsetDateTime,
    lifetime: Option<Duration>,
) -> Vec<u8> {
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId {
            trust_domain: ks.trust_domain.clone(),
            site: SiteId::new("eu-1").unwrap(),
            node: NodeId::new(node).unwrap(),
        },
        role,
        serial: Serial::generate().unwrap(),
        requested_lifetime: lifetime,
        statements: vec![],
    };
    issue_node_certificate(&ks.node_ca, &csr(key), &decision, at)
        .unwrap()
        .der
}

pub fn identity_for(ks: &KeySet, leaf_der: Vec<u8>) -> StoredIdentity {
    let leaf = NodeIdentity::from_leaf_der(&leaf_der, &ks.trust_domain).unwrap();
    StoredIdentity::new(
        &leaf,
        vec![leaf_der, ks.node_ca.cert_der().to_vec()],
        TrustState::default(),
    )
}

/// A joined data directory: `node.key` and `identity.json` for node `node`.
pub fn joined(dir: &Path, ks: &KeySet, node: &str) -> (DataDir, PrivateKey, StoredIdentity) {
    let data = DataDir::new(dir);
    let key = node_key();
    let identity = identity_for(ks, issue(ks, &key, node, NodeRole::Node));
    store_joined(&data, &as_node_key(&key), &identity, now()).unwrap();
    (data, key, identity)
}

/// A real node certificate for any node key (a file or the TPM), carrying `statements`
/// (`urn:bc:…` URIs) after the SPIFFE ID.
pub fn issue_for(
    ks: &KeySet,
    key: &bcd::node_key::NodeKey,
    node: &str,
    statements: &[&str],
) -> Vec<u8> {
    let csr = VerifiedCsr::verify(&domain::pki::build_csr_with(key).unwrap()).unwrap();
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId {
            trust_domain: ks.trust_domain.clone(),
            site: SiteId::new("eu-1").unwrap(),
            node: NodeId::new(node).unwrap(),
        },
        role: NodeRole::Node,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements: statements
            .iter()
            .map(|s| domain::pki::NodeKeyStatement::new(s).unwrap())
            .collect(),
    };
    issue_node_certificate(&ks.node_ca, &csr, &decision, now())
        .unwrap()
        .der
}

/// A joined data directory whose node key is `key` and whose leaf carries `statements`.
pub fn joined_with(
    dir: &Path,
    ks: &KeySet,
    node: &str,
    key: &bcd::node_key::NodeKey,
    statements: &[&str],
) -> (DataDir, StoredIdentity) {
    let data = DataDir::new(dir);
    let identity = identity_for(ks, issue_for(ks, key, node, statements));
    store_joined(&data, key, &identity, now()).unwrap();
    (data, identity)
}

/// The real `bcd` binary with `--config config` and `args`, bcd's environment variables removed
/// so that only what the test gives counts.
pub fn bcd_command(config: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"));
    cmd.arg("--config").arg(config).args(args);
    for var in [
        "BCD_JOIN_TOKEN",
        "BCD_DATA_DIR",
        "BCD_SERVER",
        "BCD_CONFIG",
        "BCD_TPM_TCTI",
    ] {
        cmd.env_remove(var);
    }
    cmd
}
