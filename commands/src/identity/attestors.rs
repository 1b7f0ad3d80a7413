//! The attestors this control plane runs (spec 001 "Registering"): the built-ins and any
//! registered in process (pure [`domain::attest::Attestor`]s, run inside the join's transaction
//! on facts the shell loads), and out-of-process ones ([`RemoteAttestor`], called before the
//! transaction; their answer is then held to exactly the same admission step).
//!
//! [`FACTORIES`] is the one list of the built-ins, one line each (decision 0078): each is read
//! from its own table by its factory ([`domain::attest::configure`]) and built with what the
//! deployment gives it ([`AttestorRegistry::configured`]: the trust domain, the node CA, a key
//! derived for it with [`deployment_key`], the files its table names).
//!
//! An empty attestor name means `join-token`; an id not registered is
//! [`super::IdentityError::UnsupportedAttestor`] (UNIMPLEMENTED on the wire, spending nothing).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use domain::attest::{
    AnyAttestor, AttestorFactory, AttestorSetup, ConfigTable, Configured, FromDeployment, Verdict,
    X509PopConfig,
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
    /// one from the table alone: how an attestor of another crate registers
    /// (`acme_asset::FACTORY`). One that needs what the deployment gives is refused here
    /// ([`Self::configured`] registers it).
    pub fn register_factory(
        &mut self,
        factory: &AttestorFactory,
        table: Option<&ConfigTable>,
    ) -> Result<&mut Self, String> {
        match (factory.build)(&AttestorSetup { table })? {
            None => {}
            Some(Configured::Attestor(attestor)) => {
                self.register_in_process(attestor);
            }
            Some(Configured::Config(config)) => {
                return Err(format!(
                    "the {} attestor needs what the deployment gives it (its keys, its files): \
                     register it with AttestorRegistry::configured",
                    config.id()
                ))
            }
        }
        Ok(self)
    }

    /// The built-in attestors that need neither a table nor the deployment: what [`FACTORIES`]
    /// builds from no table alone (`join-token`, `provisioned`).
    pub fn builtin() -> Self {
        let mut registry = AttestorRegistry::empty();
        for factory in FACTORIES {
            // No table: a factory that needs the deployment, or refuses to run without its
            // table, registers nothing here.
            let _ = registry.register_factory(factory, None);
        }
        registry
    }

    /// The built-ins of a JoinService over `keys` with no configuration table: those of
    /// [`AttestorRegistry::builtin`], `x509pop` (its node CA and trust domain, the grace period
    /// of `config`) and `discovery` (the trust domain its site agents' certificates name, the
    /// settings of `config`). `bcctl serve` builds its attestors from its tables instead
    /// ([`Self::configured`]).
    pub fn builtin_for(keys: &KeySet, config: &IdentityConfig) -> Self {
        let mut registry = AttestorRegistry::builtin();
        let x509pop = X509PopConfig {
            grace: config.x509pop_grace,
        };
        registry.register_in_process(Arc::new(
            x509pop.attestor_for(keys.trust_domain.clone(), keys.node_ca.cert_der().to_vec()),
        ));
        registry.register_in_process(Arc::new(domain::attest::DiscoveryAttestor::new(
            keys.trust_domain.clone(),
            config.discovery.clone(),
        )));
        registry
    }

    /// Every attestor of `configured` (what [`domain::attest::configure`] read from the
    /// configuration's tables, one per factory of [`FACTORIES`] that runs), built with what the
    /// deployment of `keys` gives: its trust domain, its node CA, a key derived for each
    /// attestor ([`deployment_key`]), and the files their tables name, read by `read_file`.
    /// A refusal names the configuration key it is about.
    pub fn configured(
        configured: &[Configured],
        keys: &KeySet,
        read_file: &dyn Fn(&Path) -> Result<Vec<u8>, String>,
    ) -> Result<Self, String> {
        let derive_key = |info: &[u8]| deployment_key(keys, info);
        let from = FromDeployment {
            trust_domain: &keys.trust_domain,
            node_ca_der: keys.node_ca.cert_der(),
            derive_key: &derive_key,
            read_file,
        };
        let mut registry = AttestorRegistry::empty();
        for c in configured {
            registry.register_in_process(c.attestor(&from)?);
        }
        Ok(registry)
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
/// built from its configuration table (`[attestors.<id>]`) and what the deployment gives it.
/// Their order is that of [`BUILTIN_IDS`] and of the registry `bcctl serve` builds.
pub const FACTORIES: &[AttestorFactory] = &[
    domain::attest::join_token::FACTORY,
    domain::attest::x509pop::FACTORY,
    domain::attest::provisioned::FACTORY,
    domain::attest::tpm::FACTORY,
    domain::attest::discovery::FACTORY,
    domain::attest::cloud_iid::FACTORY,
];

/// The ids of [`FACTORIES`], in its order: the built-in attestors, which a pool's policy may
/// always name and an external attestor may not take (a new line in [`FACTORIES`] is all it
/// takes to be one).
pub const BUILTIN_IDS: [&str; FACTORIES.len()] = {
    let mut ids = [""; FACTORIES.len()];
    let mut i = 0;
    while i < FACTORIES.len() {
        ids[i] = FACTORIES[i].id;
        i += 1;
    }
    ids
};

/// The HKDF info the `tpm` attestor's challenge-state key is derived under.
pub use domain::attest::tpm::TPM_CHALLENGE_INFO;

/// The 32-byte key the deployment gives an attestor that asks under `info`: HKDF-SHA256 over the
/// private key of the deployment's JoinService encryption key (which every replica loads from
/// the one PKI bundle), no salt. Every replica derives the same; the key never leaves the
/// process and changes with that key.
pub fn deployment_key(keys: &KeySet, info: &[u8]) -> [u8; 32] {
    hkdf_sha256_32(&[], keys.join_encryption.private_key().pkcs8_der(), info)
}

/// The AES-256-GCM key that seals the `tpm` attestor's challenge states: the deployment's key
/// under [`TPM_CHALLENGE_INFO`]. A challenge one replica made is answered at any other.
pub fn tpm_challenge_key(keys: &KeySet) -> [u8; 32] {
    deployment_key(keys, TPM_CHALLENGE_INFO)
}

/// HKDF-SHA256 (RFC 5869) of 32 bytes: one HMAC block, so it cannot fail.
pub fn hkdf_sha256_32(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    use ring::hmac;
    let prk = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, salt), ikm);
    let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, prk.as_ref()));
    ctx.update(info);
    ctx.update(&[1]);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}
