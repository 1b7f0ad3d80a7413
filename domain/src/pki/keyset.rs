//! The deployment's key set, as `pki init` creates it.
//!
//! Seven P-256 keys, each for one job ([`KeyRole::KEY_SET`]): the root CA (self-signed), the node
//! CA and serving CA (both certified by the root, never past its notAfter), the JoinService
//! signing key, the JoinService encryption key (join tokens are sealed to it), the audit signing
//! key and the command-signing root (self-signed). [`KeySet::generate`] draws every key from the
//! system random generator; `now` and the lifetimes are arguments.
//!
//! Beside them, the operator CA (issue 23, certified by the root, its own key): it issues the
//! certificates people and automation present to the admin API. [`KeySet::generate`] makes it; a
//! key set loaded from a bundle written before has none (`operator_ca: None`) until
//! [`KeySet::add_operator_ca`] (`pki add-operator-ca`) certifies one, which needs the root's key.
//!
//! Beside them too, the SSH CA (issue 42, Ed25519, [`SshCa`]): it signs OpenSSH certificates
//! only. [`KeySet::generate`] makes it; a set from an older bundle has none (`ssh_ca: None`)
//! until [`KeySet::add_ssh_ca`] (`pki add-ssh-ca`) makes one.
//!
//! The root's key may be kept out of the set ([`KeySet::without_root_key`], `pki init
//! --offline-root`) and brought back for the one job that needs it, renewing the node or serving
//! CA ([`KeySet::with_root_key`], [`KeySet::renew_ca`], `pki renew-ca --root-key FILE`).

use time::{Duration, OffsetDateTime};

use super::ca::{CaError, CommandSigningRoot, NodeCa, OperatorCa, ServingCa};
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey};
use super::pin::Pin;
use super::root::RootCa;
use super::spiffe::TrustDomain;
use super::ssh_ca::SshCa;
use super::token_seal::JoinEncryptionKey;

/// Lifetimes for `pki init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySetLifetimes {
    /// Root CA and command-signing root.
    pub root: Duration,
    /// Node CA and serving CA (capped at the root's notAfter).
    pub intermediate: Duration,
}

impl Default for KeySetLifetimes {
    /// Ten years for the roots, two for the node and serving CAs (renewed, same key and subject,
    /// with `bcctl pki renew-ca`).
    fn default() -> Self {
        KeySetLifetimes {
            root: Duration::days(3652),
            intermediate: Duration::days(730),
        }
    }
}

/// Every key and CA of one deployment.
#[derive(Debug)]
pub struct KeySet {
    /// The trust domain every certificate names.
    pub trust_domain: TrustDomain,
    /// Root CA.
    pub root_ca: RootCa,
    /// Node CA (agent certificates).
    pub node_ca: NodeCa,
    /// Serving CA (gateway certificates).
    pub serving_ca: ServingCa,
    /// JoinService signing key (JoinResponse, trust bundles).
    pub join_signing: PrivateKey,
    /// JoinService encryption key (sealed join tokens).
    pub join_encryption: JoinEncryptionKey,
    /// Audit signing key (checkpoints).
    pub audit_signing: PrivateKey,
    /// Command-signing root (worker keys).
    pub command_signing_root: CommandSigningRoot,
    /// Operator CA (admin API client certificates); `None` in a bundle made before issue 23.
    pub operator_ca: Option<OperatorCa>,
    /// SSH CA (OpenSSH certificates); `None` in a bundle made before issue 42.
    pub ssh_ca: Option<SshCa>,
}

/// Why a key set could not be made or assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    /// A key problem (randomness, role).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A CA problem.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// A CA of the set names another trust domain.
    #[error("the {0} certificate names another trust domain than the key set's")]
    TrustDomainMismatch(&'static str),
    /// Two jobs of the set share one key pair; every key does exactly one job.
    #[error("the {first} and the {second} are the same key; every key of the set must be its own")]
    KeyReused {
        first: &'static str,
        second: &'static str,
    },
    /// An intermediate CA certificate is not signed by the set's root CA.
    #[error("the {0} certificate is not signed by the root CA of the set")]
    NotIssuedByRoot(&'static str),
    /// An intermediate CA certificate is valid after the root CA expires.
    #[error("the {0} certificate outlives the root CA (it must expire no later than the root)")]
    OutlivesRoot(&'static str),
    /// `pki add-operator-ca` on a set that has one.
    #[error("the bundle already has an operator CA")]
    OperatorCaPresent,
    /// `pki renew-ca --ca operator` on a set without one.
    #[error("the bundle has no operator CA to renew (`bcctl pki add-operator-ca` adds one)")]
    NoOperatorCa,
    /// `pki add-ssh-ca` on a set that has one.
    #[error(
        "INVALID_STATE: the bundle already has an SSH CA (`bcctl pki show` prints its public key)"
    )]
    SshCaPresent,
}

/// A CA `pki renew-ca` renews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewableCa {
    /// The node CA (agent certificates).
    Node,
    /// The serving CA (gateway and internal serving certificates, internal client
    /// certificates).
    Serving,
    /// The operator CA (admin API client certificates).
    Operator,
}

/// The public pins of a key set, as `pki show` prints them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeySetPins {
    /// Root CA key.
    pub root_ca: Pin,
    /// Node CA key.
    pub node_ca: Pin,
    /// Serving CA key (bcd's `serving_ca_spki_pin`).
    pub serving_ca: Pin,
    /// JoinService signing key (bcd's `join_signing_key_pin`).
    pub join_signing: Pin,
    /// JoinService encryption key (bcd's `join_encryption_key_pin`).
    pub join_encryption: Pin,
    /// Audit signing key.
    pub audit_signing: Pin,
    /// Command-signing root key.
    pub command_signing_root: Pin,
    /// Operator CA key (absent in a bundle without an operator CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_ca: Option<Pin>,
    /// The SSH CA's public key as an OpenSSH line (absent in a bundle without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_ca_public_key: Option<String>,
}

impl KeySet {
    /// `pki init`: generates every key and CA certificate for `trust_domain`, valid from `now`.
    pub fn generate(
        trust_domain: TrustDomain,
        now: OffsetDateTime,
        lifetimes: KeySetLifetimes,
    ) -> Result<KeySet, KeySetError> {
        let root_ca = RootCa::generate(
            &trust_domain,
            PrivateKey::generate(KeyRole::RootCa)?,
            now,
            lifetimes.root,
        )?;
        let node_ca = root_ca.issue_node_ca(
            PrivateKey::generate(KeyRole::NodeCa)?,
            now,
            lifetimes.intermediate,
        )?;
        let serving_ca = root_ca.issue_serving_ca(
            PrivateKey::generate(KeyRole::ServingCa)?,
            now,
            lifetimes.intermediate,
        )?;
        let command_signing_root = CommandSigningRoot::generate(
            &trust_domain,
            PrivateKey::generate(KeyRole::CommandSigningRoot)?,
            now,
            lifetimes.root,
        )?;
        let operator_ca = root_ca.issue_operator_ca(
            PrivateKey::generate(KeyRole::OperatorCa)?,
            now,
            lifetimes.intermediate,
        )?;
        Ok(KeySet {
            operator_ca: Some(operator_ca),
            ssh_ca: Some(SshCa::generate()?),
            root_ca,
            node_ca,
            serving_ca,
            join_signing: PrivateKey::generate(KeyRole::JoinSigning)?,
            join_encryption: JoinEncryptionKey::new(PrivateKey::generate(
                KeyRole::JoinEncryption,
            )?)?,
            audit_signing: PrivateKey::generate(KeyRole::AuditSigning)?,
            command_signing_root,
            trust_domain,
        })
    }

    /// Assembles a key set from loaded parts, checking each key's role and that every CA names
    /// `trust_domain`. The set has no operator CA; [`KeySet::with_operator_ca`] adds a loaded one.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        trust_domain: TrustDomain,
        root_ca: RootCa,
        node_ca: NodeCa,
        serving_ca: ServingCa,
        join_signing: PrivateKey,
        join_encryption: JoinEncryptionKey,
        audit_signing: PrivateKey,
        command_signing_root: CommandSigningRoot,
    ) -> Result<KeySet, KeySetError> {
        join_signing.require_role(KeyRole::JoinSigning)?;
        audit_signing.require_role(KeyRole::AuditSigning)?;
        for (name, td) in [
            ("root CA", root_ca.trust_domain()),
            ("node CA", node_ca.trust_domain()),
            ("serving CA", serving_ca.trust_domain()),
            ("command-signing root", command_signing_root.trust_domain()),
        ] {
            if *td != trust_domain {
                return Err(KeySetError::TrustDomainMismatch(name));
            }
        }
        let keys = [
            ("root CA key", root_ca.public_key()),
            ("node CA key", node_ca.public_key()),
            ("serving CA key", serving_ca.public_key()),
            ("JoinService signing key", join_signing.public_key()),
            ("JoinService encryption key", join_encryption.public_key()),
            ("audit signing key", audit_signing.public_key()),
            (
                "command-signing root key",
                command_signing_root.public_key(),
            ),
        ];
        for (i, (first, a)) in keys.iter().enumerate() {
            if let Some((second, _)) = keys[i + 1..].iter().find(|(_, b)| b == a) {
                return Err(KeySetError::KeyReused { first, second });
            }
        }
        for (name, der, not_after) in [
            ("node CA", node_ca.cert_der(), node_ca.not_after()),
            ("serving CA", serving_ca.cert_der(), serving_ca.not_after()),
        ] {
            if !signed_by(der, root_ca.cert_der()) {
                return Err(KeySetError::NotIssuedByRoot(name));
            }
            if not_after > root_ca.not_after() {
                return Err(KeySetError::OutlivesRoot(name));
            }
        }
        Ok(KeySet {
            trust_domain,
            root_ca,
            node_ca,
            serving_ca,
            join_signing,
            join_encryption,
            audit_signing,
            command_signing_root,
            operator_ca: None,
            ssh_ca: None,
        })
    }

    /// The same set with a loaded operator CA, checked like the other intermediates: its trust
    /// domain, signed by this set's root, not outliving it, and a key no other job of the set
    /// uses.
    pub fn with_operator_ca(mut self, operator_ca: OperatorCa) -> Result<KeySet, KeySetError> {
        const NAME: &str = "operator CA";
        if *operator_ca.trust_domain() != self.trust_domain {
            return Err(KeySetError::TrustDomainMismatch(NAME));
        }
        let key = operator_ca.public_key();
        let others = [
            ("root CA key", self.root_ca.public_key()),
            ("node CA key", self.node_ca.public_key()),
            ("serving CA key", self.serving_ca.public_key()),
            ("JoinService signing key", self.join_signing.public_key()),
            (
                "JoinService encryption key",
                self.join_encryption.public_key(),
            ),
            ("audit signing key", self.audit_signing.public_key()),
            (
                "command-signing root key",
                self.command_signing_root.public_key(),
            ),
        ];
        if let Some((first, _)) = others.iter().find(|(_, other)| *other == key) {
            return Err(KeySetError::KeyReused {
                first,
                second: "operator CA key",
            });
        }
        if !signed_by(operator_ca.cert_der(), self.root_ca.cert_der()) {
            return Err(KeySetError::NotIssuedByRoot(NAME));
        }
        if operator_ca.not_after() > self.root_ca.not_after() {
            return Err(KeySetError::OutlivesRoot(NAME));
        }
        self.operator_ca = Some(operator_ca);
        Ok(self)
    }

    /// `pki add-operator-ca`: certifies a fresh operator CA key from the root, valid from `now`
    /// for `lifetime` (capped at the root's notAfter). Refuses a set that has one
    /// ([`KeySetError::OperatorCaPresent`]) and needs the root's key ([`CaError::RootOffline`]
    /// otherwise, the message `pki renew-ca` gives).
    pub fn add_operator_ca(
        &mut self,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<(), KeySetError> {
        if self.operator_ca.is_some() {
            return Err(KeySetError::OperatorCaPresent);
        }
        let ca = self.root_ca.issue_operator_ca(
            PrivateKey::generate(KeyRole::OperatorCa)?,
            now,
            lifetime,
        )?;
        self.operator_ca = Some(ca);
        Ok(())
    }

    /// The same set with a loaded SSH CA (an Ed25519 key: it cannot be any P-256 key of the
    /// set).
    pub fn with_ssh_ca(mut self, ssh_ca: SshCa) -> KeySet {
        self.ssh_ca = Some(ssh_ca);
        self
    }

    /// `pki add-ssh-ca`: makes a fresh SSH CA key. Refuses a set that has one
    /// ([`KeySetError::SshCaPresent`]).
    pub fn add_ssh_ca(&mut self) -> Result<(), KeySetError> {
        if self.ssh_ca.is_some() {
            return Err(KeySetError::SshCaPresent);
        }
        self.ssh_ca = Some(SshCa::generate()?);
        Ok(())
    }

    /// The same set with the root's key dropped (`pki init --offline-root` writes it apart first).
    pub fn without_root_key(mut self) -> KeySet {
        self.root_ca = self.root_ca.offline();
        self
    }

    /// The same set with the root's key given back (`--root-key FILE`); it must be the key the
    /// root certificate certifies.
    pub fn with_root_key(mut self, key: PrivateKey) -> Result<KeySet, KeySetError> {
        self.root_ca = self.root_ca.with_key(key)?;
        Ok(self)
    }

    /// `pki renew-ca`: a new certificate for `which` from the root, same key and subject (so the
    /// pin does not change and what it issued keeps verifying), valid from `now` (backdated as
    /// every certificate) for `lifetime`, capped at the root's notAfter. Needs the root's key
    /// ([`CaError::RootOffline`] otherwise).
    pub fn renew_ca(
        &mut self,
        which: RenewableCa,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<(), KeySetError> {
        match which {
            RenewableCa::Node => {
                self.node_ca = self.root_ca.renew_node_ca(&self.node_ca, now, lifetime)?;
            }
            RenewableCa::Serving => {
                self.serving_ca = self
                    .root_ca
                    .renew_serving_ca(&self.serving_ca, now, lifetime)?;
            }
            RenewableCa::Operator => {
                let current = self.operator_ca.as_ref().ok_or(KeySetError::NoOperatorCa)?;
                self.operator_ca = Some(self.root_ca.renew_operator_ca(current, now, lifetime)?);
            }
        }
        Ok(())
    }

    /// The public key of each role in the set.
    pub fn public_key(&self, role: KeyRole) -> Option<&PublicKey> {
        Some(match role {
            KeyRole::RootCa => self.root_ca.public_key(),
            KeyRole::NodeCa => self.node_ca.public_key(),
            KeyRole::ServingCa => self.serving_ca.public_key(),
            KeyRole::JoinSigning => self.join_signing.public_key(),
            KeyRole::JoinEncryption => self.join_encryption.public_key(),
            KeyRole::AuditSigning => self.audit_signing.public_key(),
            KeyRole::CommandSigningRoot => self.command_signing_root.public_key(),
            KeyRole::OperatorCa => return self.operator_ca.as_ref().map(|ca| ca.public_key()),
            KeyRole::Node
            | KeyRole::Serving
            | KeyRole::Worker
            | KeyRole::Operator
            | KeyRole::SshCa => return None,
        })
    }

    /// Every pin of the set.
    pub fn pins(&self) -> KeySetPins {
        KeySetPins {
            root_ca: self.root_ca.public_key().pin(),
            node_ca: self.node_ca.public_key().pin(),
            serving_ca: self.serving_ca.public_key().pin(),
            join_signing: self.join_signing.public_key().pin(),
            join_encryption: self.join_encryption.public_key().pin(),
            audit_signing: self.audit_signing.public_key().pin(),
            command_signing_root: self.command_signing_root.public_key().pin(),
            operator_ca: self.operator_ca.as_ref().map(|ca| ca.public_key().pin()),
            ssh_ca_public_key: self.ssh_ca.as_ref().map(SshCa::public_key_line),
        }
    }
}

/// Whether the certificate `der` carries a valid signature by the key of the certificate
/// `issuer_der` (both already parsed once by their CAs' loaders).
fn signed_by(der: &[u8], issuer_der: &[u8]) -> bool {
    let (Ok((_, cert)), Ok((_, issuer))) = (
        x509_parser::parse_x509_certificate(der),
        x509_parser::parse_x509_certificate(issuer_der),
    ) else {
        return false;
    };
    cert.verify_signature(Some(issuer.public_key())).is_ok()
}
