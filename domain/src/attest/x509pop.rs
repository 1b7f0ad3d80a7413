//! The `x509pop` attestor (spec 000 "x509pop"): a machine whose certificate expired while it was
//! off re-joins as itself, presenting its last chain and a proof by that certificate's key bound
//! to its new CSR. The result reclaims the node in place (identity generation + 1, every older
//! certificate revoked, the node's state kept).
//!
//! The evidence is UTF-8 JSON, base64url without padding:
//!
//! ```text
//! {"v":1,"nodeId":"node_…","chain":["<leaf DER>","<node CA DER>"],"clientTime":<unix ms>,"sig":"<r||s>"}
//! ```
//!
//! `sig` is ES256 by the leaf's key over [`X509Pop`]'s signed input
//! `lp("x509pop") || lp(csr_sha256) || lp(node_id) || lp(u64_be(clientTime))`, so neither a renew
//! proof nor a proof for another CSR verifies as one. [`build_evidence`] is the producer.
//!
//! [`Attestor::plan`] parses it (`malformed`, `unsupported-version`; a leaf that carries no node
//! identity of this trust domain is `unknown-certificate`) and asks for the nodes named, the
//! `node_certs` row of the leaf's serial and the proof's use. [`Attestor::verify`] then refuses,
//! in this order: [`X509PopRefusal::UnknownCertificate`] (root tenant), then, attributed to the
//! certificate's node's tenant, `node-mismatch`, `bad-chain`, `bad-signature`, `reused` (so that
//! a replayed proof is `reused` even once the join it admitted made its certificate stale),
//! `node-inactive`, `stale-generation`, `revoked`, `wrong-role`, `key-statement`,
//! `expired-beyond-grace` and `clock-skew`. A certificate that has not expired yet is admitted too: the spec's
//! bound is "expired at most grace ago", and a valid one is less than that.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::contract::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts, NodeKeyStatement,
    Planned, SingleUse, Verdict,
};
use super::factory::{
    configured, parse_table, AttestorConfig, AttestorFactory, ConfigTable, FromDeployment,
    SettingError,
};
use crate::identity::{CertState, NodeState, NodeStatus};
use crate::pki::statement::{verify, Statement, StatementError, X509Pop};
use crate::pki::{
    issued_by, same_ca, sign_with, NodeId, NodeIdentity, NodeRole, NodeSigner, Signature,
    TrustDomain,
};

/// The attestor id, and the `attestation_uses.attestor` of its proofs.
pub const X509POP_ATTESTOR: &str = events::schema::attestor_ids::X509POP;
/// The only evidence version.
pub const X509POP_VERSION: u64 = 1;
/// How long after its notAfter a certificate may still re-join, by default (spec: 7 days).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(7 * 86_400);
/// How far the proof's client time may be from the JoinService clock, either way.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// How much longer than the window a used proof is remembered.
pub const USE_MARGIN: Duration = Duration::from_secs(60);

/// Why an x509pop join was refused: `x509pop:<reason>`. One variant per check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum X509PopRefusal {
    /// Not UTF-8 JSON of the v1 shape (a field missing, of the wrong type, unknown, not
    /// base64url, an empty chain, a node id that is no SPIFFE path segment).
    #[error("x509pop:malformed")]
    Malformed,
    /// `v` is a number other than 1.
    #[error("x509pop:unsupported-version")]
    UnsupportedVersion,
    /// The leaf is not byte for byte a stored `node_certs` row (or carries no node identity of
    /// this trust domain at all).
    #[error("x509pop:unknown-certificate")]
    UnknownCertificate,
    /// The leaf is a stored certificate of another node than `nodeId`.
    #[error("x509pop:node-mismatch")]
    NodeMismatch,
    /// The chain is not `[leaf, this node CA]` with the leaf signed by it.
    #[error("x509pop:bad-chain")]
    BadChain,
    /// The certificate is of an older identity generation than the node's (a re-join or
    /// `node revoke` came after it).
    #[error("x509pop:stale-generation")]
    StaleGeneration,
    /// The certificate was revoked.
    #[error("x509pop:revoked")]
    Revoked,
    /// The node is retired or deleted.
    #[error("x509pop:node-inactive")]
    NodeInactive,
    /// The certificate's role is not the role asked for.
    #[error("x509pop:wrong-role")]
    WrongRole,
    /// The certificate names a `urn:bc:` key statement (a TPM-held key): that node re-joins
    /// through the attestor that can certify its next key, never by a bare proof of possession.
    #[error("x509pop:key-statement")]
    KeyStatement,
    /// The certificate expired more than the grace period ago.
    #[error("x509pop:expired-beyond-grace")]
    ExpiredBeyondGrace,
    /// `sig` is not a valid signature by the leaf's key over this CSR, node and time.
    #[error("x509pop:bad-signature")]
    BadSignature,
    /// `clientTime` is outside the window around the JoinService clock.
    #[error("x509pop:clock-skew")]
    ClockSkew,
    /// The same proof was used before.
    #[error("x509pop:reused")]
    Reused,
}

impl X509PopRefusal {
    /// Every reason.
    pub const ALL: [X509PopRefusal; 14] = [
        X509PopRefusal::Malformed,
        X509PopRefusal::UnsupportedVersion,
        X509PopRefusal::UnknownCertificate,
        X509PopRefusal::NodeMismatch,
        X509PopRefusal::BadChain,
        X509PopRefusal::StaleGeneration,
        X509PopRefusal::Revoked,
        X509PopRefusal::NodeInactive,
        X509PopRefusal::WrongRole,
        X509PopRefusal::KeyStatement,
        X509PopRefusal::ExpiredBeyondGrace,
        X509PopRefusal::BadSignature,
        X509PopRefusal::ClockSkew,
        X509PopRefusal::Reused,
    ];

    /// The reason without the attestor prefix (`reused`).
    pub fn reason(self) -> &'static str {
        match self {
            X509PopRefusal::Malformed => "malformed",
            X509PopRefusal::UnsupportedVersion => "unsupported-version",
            X509PopRefusal::UnknownCertificate => "unknown-certificate",
            X509PopRefusal::NodeMismatch => "node-mismatch",
            X509PopRefusal::BadChain => "bad-chain",
            X509PopRefusal::StaleGeneration => "stale-generation",
            X509PopRefusal::Revoked => "revoked",
            X509PopRefusal::NodeInactive => "node-inactive",
            X509PopRefusal::WrongRole => "wrong-role",
            X509PopRefusal::KeyStatement => "key-statement",
            X509PopRefusal::ExpiredBeyondGrace => "expired-beyond-grace",
            X509PopRefusal::BadSignature => "bad-signature",
            X509PopRefusal::ClockSkew => "clock-skew",
            X509PopRefusal::Reused => "reused",
        }
    }

    /// The contract's refusal, attributed to nobody.
    pub fn refusal(self) -> AttestorRefusal {
        AttestorRefusal::new(X509POP_ATTESTOR, self.reason())
    }
}

/// The evidence as sent (field names and order as the spec writes them).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Wire {
    v: u64,
    node_id: String,
    chain: Vec<String>,
    client_time: u64,
    sig: String,
}

/// Only `v`, read first so that a later version is `unsupported-version`, not `malformed`.
#[derive(Deserialize)]
struct VersionOnly {
    v: serde_json::Value,
}

/// Evidence that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509PopEvidence {
    /// The node the machine says it is.
    pub node_id: NodeId,
    /// The chain, leaf first, DER.
    pub chain: Vec<Vec<u8>>,
    /// The agent's clock, unix milliseconds.
    pub client_time_ms: u64,
    /// The signature bytes as sent (`r || s` when well formed).
    pub sig: Vec<u8>,
}

impl X509PopEvidence {
    /// Parses the UTF-8 JSON evidence.
    pub fn parse(evidence: &[u8]) -> Result<X509PopEvidence, X509PopRefusal> {
        let version: VersionOnly =
            serde_json::from_slice(evidence).map_err(|_| X509PopRefusal::Malformed)?;
        match version.v.as_u64() {
            Some(X509POP_VERSION) => {}
            _ if version.v.is_number() => return Err(X509PopRefusal::UnsupportedVersion),
            _ => return Err(X509PopRefusal::Malformed),
        }
        let wire: Wire = serde_json::from_slice(evidence).map_err(|_| X509PopRefusal::Malformed)?;
        let node_id = NodeId::new(&wire.node_id).map_err(|_| X509PopRefusal::Malformed)?;
        let chain = wire
            .chain
            .iter()
            .map(|c| URL_SAFE_NO_PAD.decode(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| X509PopRefusal::Malformed)?;
        if chain.is_empty() {
            return Err(X509PopRefusal::Malformed);
        }
        let sig = URL_SAFE_NO_PAD
            .decode(&wire.sig)
            .map_err(|_| X509PopRefusal::Malformed)?;
        Ok(X509PopEvidence {
            node_id,
            chain,
            client_time_ms: wire.client_time,
            sig,
        })
    }

    /// The leaf, DER.
    pub fn leaf(&self) -> &[u8] {
        // `parse` refuses an empty chain.
        self.chain.first().map(Vec::as_slice).unwrap_or_default()
    }

    /// The statement `sig` must sign for the CSR with this SHA-256.
    pub fn statement(&self, csr_sha256: &[u8; 32]) -> X509Pop {
        X509Pop {
            csr_sha256: *csr_sha256,
            node_id: self.node_id.clone(),
            client_time_ms: self.client_time_ms,
        }
    }
}

/// Builds x509pop evidence: `chain` (leaf first, DER) and a proof by `signer` (the leaf's
/// [`crate::pki::KeyRole::Node`] key) over `csr_sha256`, `node_id` and `client_time_ms`. The
/// producer for bcd and tests; fails only for a key that may not sign (or no randomness).
pub fn build_evidence(
    chain: &[Vec<u8>],
    signer: &dyn NodeSigner,
    csr_sha256: &[u8; 32],
    node_id: &NodeId,
    client_time_ms: u64,
) -> Result<Vec<u8>, StatementError> {
    let statement = X509Pop {
        csr_sha256: *csr_sha256,
        node_id: node_id.clone(),
        client_time_ms,
    };
    let sig = sign_with(signer, &statement)?;
    let wire = Wire {
        v: X509POP_VERSION,
        node_id: node_id.as_str().to_owned(),
        chain: chain.iter().map(|c| URL_SAFE_NO_PAD.encode(c)).collect(),
        client_time: client_time_ms,
        sig: sig.to_base64url(),
    };
    // A struct of strings and integers always serializes.
    Ok(serde_json::to_vec(&wire).unwrap_or_default())
}

/// The x509pop attestor: re-join as the node of a stored certificate of the current identity
/// generation that expired at most `grace` ago, with a fresh proof by its key.
#[derive(Debug, Clone)]
pub struct X509PopAttestor {
    /// How long after notAfter a certificate may still re-join (7 days by default).
    pub grace: Duration,
    /// How far `clientTime` may be from the JoinService clock (60 s).
    pub window: Duration,
    trust_domain: TrustDomain,
    node_ca_der: Vec<u8>,
}

/// The roles x509pop admits (a node-tenant certificate re-joins as `node`).
const ROLES: [NodeRole; 2] = [NodeRole::Node, NodeRole::Site];

fn ms(d: Duration) -> i128 {
    i128::try_from(d.as_millis()).unwrap_or(i128::MAX)
}

impl X509PopAttestor {
    /// The attestor for `trust_domain`, whose agent certificates the node CA certificate
    /// `node_ca_der` signs; grace 7 days, window 60 s.
    pub fn new(trust_domain: TrustDomain, node_ca_der: Vec<u8>) -> Self {
        X509PopAttestor {
            grace: DEFAULT_GRACE,
            window: DEFAULT_WINDOW,
            trust_domain,
            node_ca_der,
        }
    }

    /// With another grace period.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// With another clock window.
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Parses the evidence and reads the leaf's identity (the checks [`Attestor::plan`] makes).
    fn parse(
        &self,
        request: &AttestRequest<'_>,
    ) -> Result<(X509PopEvidence, NodeIdentity), X509PopRefusal> {
        let evidence = X509PopEvidence::parse(request.evidence)?;
        let identity = NodeIdentity::from_leaf_der(evidence.leaf(), &self.trust_domain)
            .map_err(|_| X509PopRefusal::UnknownCertificate)?;
        Ok((evidence, identity))
    }

    /// The stored certificate the leaf is byte for byte, and its node.
    fn stored<'f>(
        identity: &NodeIdentity,
        evidence: &X509PopEvidence,
        facts: &'f Facts,
    ) -> Option<(&'f CertState, &'f NodeState)> {
        let cert = facts.certificates.get(&identity.serial.to_hex())?;
        if cert.der != evidence.leaf() || cert.node_id != identity.spiffe_id.node.as_str() {
            return None;
        }
        Some((cert, facts.nodes.get(&cert.node_id)?))
    }

    /// Every check after the stored certificate matched (attributed to its node's tenant).
    fn check(
        &self,
        request: &AttestRequest<'_>,
        evidence: &X509PopEvidence,
        identity: &NodeIdentity,
        cert: &CertState,
        node: &NodeState,
        facts: &Facts,
    ) -> Result<[u8; 32], X509PopRefusal> {
        if evidence.node_id.as_str() != cert.node_id {
            return Err(X509PopRefusal::NodeMismatch);
        }
        // The node CA the machine holds may be an earlier certificate of this CA (renewed
        // while it was off, same subject and key): the leaf must verify under today's.
        let chain_ok = evidence.chain.len() == 2
            && (evidence.chain[1] == self.node_ca_der
                || same_ca(&evidence.chain[1], &self.node_ca_der))
            && issued_by(evidence.leaf(), &self.node_ca_der);
        if !chain_ok {
            return Err(X509PopRefusal::BadChain);
        }
        // The proof and its use before the node's state: a replay is `reused` even once the
        // join it admitted made the certificate stale.
        let statement = evidence.statement(request.csr.sha256());
        let signature = Signature::from_bytes(&evidence.sig).ok_or(X509PopRefusal::BadSignature)?;
        verify(&identity.public_key, &statement, &signature)
            .map_err(|_| X509PopRefusal::BadSignature)?;
        let subject = statement.replay_key();
        if facts.used(X509POP_ATTESTOR, &subject) {
            return Err(X509PopRefusal::Reused);
        }
        // Retiring or deleting a node revokes its certificates: the node's status first, so
        // that it is the reason.
        if node.status != NodeStatus::Active {
            return Err(X509PopRefusal::NodeInactive);
        }
        if cert.identity_generation < node.identity_generation {
            return Err(X509PopRefusal::StaleGeneration);
        }
        if cert.revoked {
            return Err(X509PopRefusal::Revoked);
        }
        let role_ok = identity.role == request.role
            || (identity.role == NodeRole::NodeTenant && request.role == NodeRole::Node);
        if !role_ok {
            return Err(X509PopRefusal::WrongRole);
        }
        if !identity.statements.is_empty() {
            return Err(X509PopRefusal::KeyStatement);
        }
        let now_ms = request.now.unix_timestamp_nanos() / 1_000_000;
        let not_after_ms = i128::from(cert.not_after_us) / 1000;
        if now_ms - not_after_ms > ms(self.grace) {
            return Err(X509PopRefusal::ExpiredBeyondGrace);
        }
        if (now_ms - i128::from(evidence.client_time_ms)).abs() > ms(self.window) {
            return Err(X509PopRefusal::ClockSkew);
        }
        Ok(subject)
    }

    /// When the use of a proof made at `client_time_ms` may be forgotten (µs): once the window
    /// refuses it anyway, plus a margin.
    pub fn use_expiry_us(&self, client_time_ms: u64) -> i64 {
        let ms = i128::from(client_time_ms) + ms(self.window) + ms(USE_MARGIN);
        i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX)
    }
}

/// What [`X509PopAttestor`]'s plan read: the evidence and its leaf's identity.
#[derive(Debug)]
pub struct X509PopPlan {
    evidence: X509PopEvidence,
    identity: NodeIdentity,
}

impl Attestor for X509PopAttestor {
    type Plan = X509PopPlan;

    fn id(&self) -> &str {
        X509POP_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        &ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<X509PopPlan>, AttestorRefusal> {
        let (evidence, identity) = self.parse(request).map_err(X509PopRefusal::refusal)?;
        let mut keys = vec![FactKey::Node(identity.spiffe_id.node.as_str().to_owned())];
        if evidence.node_id != identity.spiffe_id.node {
            keys.push(FactKey::Node(evidence.node_id.as_str().to_owned()));
        }
        keys.push(FactKey::Certificate(identity.serial.to_hex()));
        keys.push(FactKey::Use {
            attestor: X509POP_ATTESTOR.to_owned(),
            subject: evidence.statement(request.csr.sha256()).replay_key(),
        });
        Ok(Planned::new(keys, X509PopPlan { evidence, identity }))
    }

    fn verify(&self, request: &AttestRequest<'_>, plan: &X509PopPlan, facts: &Facts) -> Verdict {
        let X509PopPlan { evidence, identity } = plan;
        let Some((cert, node)) = Self::stored(identity, evidence, facts) else {
            return Verdict::Refuse(X509PopRefusal::UnknownCertificate.refusal());
        };
        let subject = match self.check(request, evidence, identity, cert, node, facts) {
            Ok(subject) => subject,
            Err(refusal) => {
                let mut refused = refusal
                    .refusal()
                    .in_tenant(&node.tenant_id)
                    .with_node(&node.node_id);
                if refusal == X509PopRefusal::Reused {
                    // Spent by the re-join of this very request, if its answer was lost.
                    let subject = evidence.statement(request.csr.sha256()).replay_key();
                    refused = refused.spent(X509POP_ATTESTOR, &subject);
                }
                return Verdict::Refuse(refused);
            }
        };
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: node.tenant_id.clone(),
            role: node.role,
            site_id: node.site_id.clone(),
            pool_id: node.pool_id.clone(),
            reclaim_node_id: Some(node.node_id.clone()),
            token: None,
            bind: Vec::new(),
            single_use: vec![SingleUse {
                attestor: X509POP_ATTESTOR.to_owned(),
                subject,
                expires_at_us: Some(self.use_expiry_us(evidence.client_time_ms)),
                reason_if_used: X509PopRefusal::Reused.reason().to_owned(),
            }],
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: Vec::new(),
            approval: None,
        }))
    }
}

/// `[attestors.x509pop]`: the `x509pop` attestor's configuration. The attestor is a built-in
/// and runs without the table; `bcctl serve` merges `BC_X509POP_GRACE` into the table before
/// handing it over.
///
/// ```toml
/// [attestors.x509pop]
/// grace = "7d"   # how long after its notAfter a certificate may still re-join (default 7d)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct X509PopConfig {
    /// How long after its notAfter a certificate may still re-join.
    pub grace: Duration,
}

impl Default for X509PopConfig {
    /// A grace of [`DEFAULT_GRACE`].
    fn default() -> Self {
        X509PopConfig {
            grace: DEFAULT_GRACE,
        }
    }
}

/// `[attestors.x509pop]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct X509PopTable {
    grace: Option<String>,
}

impl X509PopConfig {
    /// Reads `[attestors.x509pop]` (the defaults without it).
    pub fn from_table(table: Option<&ConfigTable>) -> Result<Self, String> {
        let written: X509PopTable = parse_table(X509POP_ATTESTOR, table)?;
        let mut config = X509PopConfig::default();
        if let Some(text) = &written.grace {
            config.grace = crate::duration::parse_duration(text)
                .map_err(|m| SettingError::new("attestors.x509pop.grace", m))?;
        }
        Ok(config)
    }

    /// The attestor for `trust_domain`, whose agent certificates `node_ca_der` signs.
    pub fn attestor_for(&self, trust_domain: TrustDomain, node_ca_der: Vec<u8>) -> X509PopAttestor {
        X509PopAttestor::new(trust_domain, node_ca_der).with_grace(self.grace)
    }
}

impl AttestorConfig for X509PopConfig {
    fn id(&self) -> &str {
        X509POP_ATTESTOR
    }

    fn attestor(
        &self,
        from: &FromDeployment<'_>,
    ) -> Result<Arc<dyn super::contract::AnyAttestor>, String> {
        let attestor = self.attestor_for(from.trust_domain.clone(), from.node_ca_der.to_vec());
        Ok(Arc::new(attestor))
    }
}

/// How `x509pop` registers: no list; its configuration from `[attestors.x509pop]` (or the
/// defaults), built with the deployment's trust domain and node CA.
pub const FACTORY: AttestorFactory = AttestorFactory {
    id: X509POP_ATTESTOR,
    lists: &[],
    build: |setup| configured(X509PopConfig::from_table(setup.table)?),
};

#[cfg(test)]
mod config_tests {
    use super::X509PopConfig;

    #[test]
    fn the_grace_defaults_to_seven_days_and_its_table_is_checked() {
        let read = |text: &str| {
            let table = crate::attest::factory::toml_table(text, "x509pop")?;
            X509PopConfig::from_table(table.as_ref()).map(|c| c.grace)
        };
        assert_eq!(read(""), Ok(std::time::Duration::from_secs(7 * 86_400)));
        assert_eq!(
            read("[x509pop]\ngrace = \"2d\"\n"),
            Ok(std::time::Duration::from_secs(2 * 86_400))
        );
        let soon = read("[x509pop]\ngrace = \"soon\"\n").unwrap_err();
        assert!(soon.starts_with("attestors.x509pop.grace: "), "{soon}");
        assert!(read("[x509pop]\ngrase = \"2d\"\n").is_err());
    }
}

#[cfg(test)]
#[path = "x509pop_tests.rs"]
mod tests;
