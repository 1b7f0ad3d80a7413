//! The attestors this control plane runs (spec 001 "Registering"): the built-ins and any
//! registered in process (pure [`domain::attest::Attestor`]s, run inside the join's transaction
//! on facts the shell loads), and out-of-process ones ([`RemoteAttestor`], called before the
//! transaction; their answer is then held to exactly the same admission step).
//!
//! An empty attestor name means `join-token`; an id not registered is
//! [`super::IdentityError::UnsupportedAttestor`] (UNIMPLEMENTED on the wire, spending nothing).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use domain::attest::{
    AnyAttestor, AttestorFactory, AttestorSetup, ConfigTable, Verdict, X509PopAttestor,
};
use domain::identity::{HardwareClaims, JOIN_TOKEN_ATTESTOR};
use domain::pki::{KeySet, NodeRole};

use super::config::IdentityConfig;

/// What an out-of-process attestor is asked: never the database, only the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteVerifyRequest {
    /// The attestor id.
    pub attestor: String,
    /// The role asked for.
    pub role: NodeRole,
    /// SHA-256 of the CSR: bind proofs to it.
    pub csr_sha256: [u8; 32],
    /// The machine's claims.
    pub claims: HardwareClaims,
    /// `JoinRequest.attestation`.
    pub evidence: Vec<u8>,
}

/// Why a remote attestor gave no verdict (not a refusal: the join fails as an error, and the
/// agent retries later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteAttestorError {
    /// The attestor's socket could not be reached or answered an error.
    #[error("UNAVAILABLE: attestor {attestor} at {endpoint}: {why}")]
    Unavailable {
        /// The attestor id.
        attestor: String,
        /// Where it was called.
        endpoint: String,
        /// What went wrong.
        why: String,
    },
    /// It answered something the contract does not allow.
    #[error("attestor {attestor} answered an invalid verdict: {why}")]
    InvalidAnswer {
        /// The attestor id.
        attestor: String,
        /// What was wrong.
        why: String,
    },
}

/// The boxed future a [`RemoteAttestor`] answers.
pub type RemoteVerdict<'a> =
    Pin<Box<dyn Future<Output = Result<Verdict, RemoteAttestorError>> + Send + 'a>>;

/// An attestor that runs outside this process (the `external` attestor over `bc.attestor.v1`).
/// Its [`Verdict`] may name single-use subjects, bindings, a reclaim and an approval; it may not
/// name a token (it cannot read one).
pub trait RemoteAttestor: Send + Sync {
    /// The id agents name.
    fn id(&self) -> &str;
    /// The roles it may admit.
    fn roles(&self) -> &[NodeRole];
    /// Verifies, remotely.
    fn verify<'a>(&'a self, request: &'a RemoteVerifyRequest) -> RemoteVerdict<'a>;
}

/// One registered attestor.
#[derive(Clone)]
pub enum RegisteredAttestor {
    /// Pure, in process (built-in or custom Rust).
    InProcess(Arc<dyn AnyAttestor>),
    /// Out of process.
    Remote(Arc<dyn RemoteAttestor>),
}

impl RegisteredAttestor {
    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            RegisteredAttestor::InProcess(a) => a.id(),
            RegisteredAttestor::Remote(a) => a.id(),
        }
    }

    /// The roles it may admit.
    pub fn roles(&self) -> &[NodeRole] {
        match self {
            RegisteredAttestor::InProcess(a) => a.roles(),
            RegisteredAttestor::Remote(a) => a.roles(),
        }
    }
}

/// The attestors of this control plane, by id. Later registrations of an id replace earlier
/// ones (one with id `join-token` replaces the built-in).
#[derive(Clone, Default)]
pub struct AttestorRegistry {
    entries: Vec<RegisteredAttestor>,
}

impl AttestorRegistry {
    /// An empty registry (see the built-ins' constructor for the default set).
    pub fn empty() -> Self {
        AttestorRegistry::default()
    }

    /// Registers `attestor`, replacing one with the same id.
    pub fn register(&mut self, attestor: RegisteredAttestor) -> &mut Self {
        self.entries.retain(|e| e.id() != attestor.id());
        self.entries.push(attestor);
        self
    }

    /// Registers a pure attestor.
    pub fn register_in_process(&mut self, attestor: Arc<dyn AnyAttestor>) -> &mut Self {
        self.register(RegisteredAttestor::InProcess(attestor))
    }

    /// Registers a remote attestor.
    pub fn register_remote(&mut self, attestor: Arc<dyn RemoteAttestor>) -> &mut Self {
        self.register(RegisteredAttestor::Remote(attestor))
    }

    /// Registers what `factory` builds from `table` (its `[attestors.<id>]`), when it builds
    /// one: how an attestor of another crate registers (`acme_asset::FACTORY`).
    pub fn register_factory(
        &mut self,
        factory: &AttestorFactory,
        table: Option<&ConfigTable>,
    ) -> Result<&mut Self, String> {
        if let Some(attestor) = (factory.build)(&AttestorSetup { table })? {
            self.register_in_process(attestor);
        }
        Ok(self)
    }

    /// The built-in attestors that need no configuration: what [`FACTORIES`] builds without a
    /// table (`join-token`, `provisioned`).
    pub fn builtin() -> Self {
        let mut registry = AttestorRegistry::empty();
        for factory in FACTORIES {
            // A factory refusing no table at all is a bug of its own: it registers nothing.
            let _ = registry.register_factory(factory, None);
        }
        registry
    }

    /// The built-ins of a JoinService over `keys` ([`AttestorRegistry::builtin`]), and those that
    /// need the deployment's keys: `x509pop` (its node CA and trust domain, the grace period of
    /// `config`) and `discovery` (the trust domain its site agents' certificates name, the
    /// settings of `config`).
    pub fn builtin_for(keys: &KeySet, config: &IdentityConfig) -> Self {
        let mut registry = AttestorRegistry::builtin();
        registry.register_in_process(Arc::new(
            X509PopAttestor::new(keys.trust_domain.clone(), keys.node_ca.cert_der().to_vec())
                .with_grace(config.x509pop_grace),
        ));
        registry.register_in_process(Arc::new(domain::attest::DiscoveryAttestor::new(
            keys.trust_domain.clone(),
            config.discovery.clone(),
        )));
        registry
    }

    /// Registers the `tpm` attestor with `config` (whose challenge key the shell derived with
    /// [`tpm_challenge_key`], so every replica of the deployment opens every other's states).
    pub fn register_tpm(&mut self, config: domain::attest::tpm::TpmConfig) -> &mut Self {
        self.register_in_process(Arc::new(domain::attest::tpm::TpmAttestor::new(config)))
    }

    /// The attestor a JoinRequest names (empty: `join-token`).
    pub fn get(&self, requested: &str) -> Option<&RegisteredAttestor> {
        let id = if requested.is_empty() {
            JOIN_TOKEN_ATTESTOR
        } else {
            requested
        };
        self.entries.iter().find(|e| e.id() == id)
    }

    /// The registered ids, in registration order (pool policies must name only these).
    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.id().to_owned()).collect()
    }
}

/// Every attestor this control plane is built with, one line each: its id, the operator-managed
/// lists it reads (`bcctl attestor entry --list <name>` finds their rules here), and how it is
/// built from its configuration table. `tpm`, `cloud-iid`, `x509pop` and `discovery` are built
/// by the server from the deployment's keys and files (`register_tpm`, [`Self::builtin_for`]),
/// so their factories build nothing from a table yet.
pub const FACTORIES: &[AttestorFactory] = &[
    domain::attest::join_token::FACTORY,
    domain::attest::provisioned::FACTORY,
    domain::attest::tpm::allow_list::FACTORY,
    domain::attest::cloud_iid::accounts::FACTORY,
];

/// The HKDF info the `tpm` attestor's challenge-state key is derived under.
pub const TPM_CHALLENGE_INFO: &[u8] = b"bc tpm challenge state v1";

/// The AES-256-GCM key that seals the `tpm` attestor's challenge states: HKDF-SHA256 over the
/// private key of the deployment's JoinService encryption key (which every replica loads from
/// the one PKI bundle), info [`TPM_CHALLENGE_INFO`]. A challenge one replica made is answered at
/// any other; the key never leaves the process and changes with that key.
pub fn tpm_challenge_key(keys: &KeySet) -> [u8; 32] {
    hkdf_sha256_32(
        &[],
        keys.join_encryption.private_key().pkcs8_der(),
        TPM_CHALLENGE_INFO,
    )
}

/// HKDF-SHA256 (RFC 5869) of 32 bytes: one HMAC block, so it cannot fail.
fn hkdf_sha256_32(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    use ring::hmac;
    let prk = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, salt), ikm);
    let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, prk.as_ref()));
    ctx.update(info);
    ctx.update(&[1]);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn hkdf_matches_rfc_5869_test_case_1() {
        // RFC 5869 A.1, the first 32 bytes of its OKM.
        let ikm = [0x0b; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        assert_eq!(
            hex::encode(super::hkdf_sha256_32(&salt, &ikm, &info)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        );
    }
}
