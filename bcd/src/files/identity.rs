//! The node identity on disk: `identity.json` and `node.key`, how they load, and how a join and a
//! renewal store them.
//!
//! Loading ([`load`]) follows spec 002 ("Loading it") exactly:
//!
//! 1. no `identity.json` is [`LoadError::NotJoined`], `this node has not joined (run bcd join)`;
//! 2. a `node.key.next` whose public key the stored leaf certifies is promoted to `node.key` (a
//!    renewal stopped after it stored the certificate); any other key in `node.key.next` is kept
//!    ([`LoadedIdentity::pending_next`]): a renewal for it may have been committed by the server
//!    with only its answer lost, and the server answers that renewal again only for the same key
//!    (issue 40; another key from the superseded leaf is a clone there). The next renewal
//!    retries with it, and it goes once the stored leaf certifies it (promoted) or the server
//!    refused it ([`RenewalBegun::abandon`]). A `node.key.next` that is no key is removed;
//! 3. `node.key` must be the leaf's key, else [`LoadError::KeyMismatch`] (for a key in the TPM
//!    [`LoadError::TpmKeyMismatch`], whose message adds the TPM hint).
//!
//! `node.key` holds a file key or a TPM key's record ([`crate::node_key`]); a record loads
//! through the [`TpmHost`] given to [`load_in`] (the TPM is opened only for one).
//!
//! A join stores with [`store_joined`]: another node's `journal.db` moved aside, a stale
//! `node.key.next` removed, then `node.key`, then `identity.json`.
//!
//! A renewal stores in the spec's order through [`RenewalStore`], one typed step at a time so a
//! test (or a crash) can stop after any of them: [`RenewalStore::begin`] writes `node.key.next`
//! before the request is sent, [`RenewalBegun::store_certificate`] writes `node.key.next` again
//! and then `identity.json`, and [`CertificateStored::promote`] renames `node.key.next` over
//! `node.key`. Whatever step a crash stops at, the next [`load`] finds a key and a certificate
//! that match.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use domain::pki::{IdentityError, NodeIdentity, PublicKey, TrustDomain};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::files::{
    DataDir, FileError, KeyFileError, IDENTITY_FILE, JOURNAL_FILE, MAX_KEY_FILE_LEN, NEXT_KEY_FILE,
    NODE_KEY_FILE,
};
use crate::node_key::{parse_key_file, KeyRecord, NodeKey, TpmHost};
use crate::tpm::TpmError;

/// The way back printed after every identity that does not load.
pub const WAY_BACK: &str = "join again: bcd join --reset --yes, then bcd join";
/// Largest `identity.json` read.
pub const MAX_IDENTITY_LEN: u64 = 1024 * 1024;

/// `identity.json`, field for field as spec 002 lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredIdentity {
    /// The node id, from the leaf's SPIFFE ID.
    pub node_id: String,
    /// The site id, from the leaf's SPIFFE ID.
    pub site_id: String,
    /// The trust domain, from the leaf's SPIFFE ID.
    pub trust_domain: String,
    /// The role, from the leaf's `OU=bc-role:<role>`.
    pub role: String,
    /// The certificate chain, leaf first, DER (base64 in the file).
    #[serde(with = "b64_list")]
    pub chain: Vec<Vec<u8>>,
    /// The leaf's notAfter, RFC 3339.
    pub not_after: String,
    /// The version of the trust bundle the node holds.
    #[serde(default)]
    pub trust_version: u64,
    /// Command-signing roots, DER (base64 in the file). Empty: signed intent is not enforced.
    #[serde(default, with = "b64_list")]
    pub trust_roots: Vec<Vec<u8>>,
    /// The whole serialized trust bundle (base64 in the file).
    #[serde(default, with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub trust_bundle: Option<Vec<u8>>,
    /// The bundle as the JoinService key signed it, from a `Welcome` (base64 in the file).
    #[serde(default, with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub signed_trust_bundle: Option<Vec<u8>>,
    /// The server time high-water mark, RFC 3339: raised only by signed times (a verified join
    /// or renewal answer's server time; verified commands' issue times, mirrored from
    /// `journal.db` at each `Welcome`), never by a `Welcome`'s own time, which is unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_time: Option<String>,
    /// The command kinds the certificate allows, from the signed join or renewal answer (exact
    /// names or `prefix.*`; empty or absent: every kind the role allows). bcd runs no other kind
    /// (issue 40 item 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_kinds: Vec<String>,
}

mod b64_list {
    use super::*;

    pub fn serialize<S: serde::Serializer>(list: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(|der| STANDARD.encode(der)))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| STANDARD.decode(text).map_err(serde::de::Error::custom))
            .collect()
    }
}

mod b64_opt {
    use super::*;

    pub fn serialize<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(bytes) => s.serialize_some(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| STANDARD.decode(text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The trust bundle state carried from one identity to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustState {
    /// `trustVersion`.
    pub trust_version: u64,
    /// `trustRoots`.
    pub trust_roots: Vec<Vec<u8>>,
    /// `trustBundle`.
    pub trust_bundle: Option<Vec<u8>>,
    /// `signedTrustBundle`.
    pub signed_trust_bundle: Option<Vec<u8>>,
    /// `serverTime`.
    pub server_time: Option<OffsetDateTime>,
}

fn rfc3339(t: OffsetDateTime) -> String {
    // Formatting a UTC time as RFC 3339 only fails for years outside 0..=9999.
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

impl StoredIdentity {
    /// The identity of a verified leaf (`chain[0]`) with the given trust state.
    pub fn new(leaf: &NodeIdentity, chain: Vec<Vec<u8>>, trust: TrustState) -> StoredIdentity {
        StoredIdentity {
            node_id: leaf.spiffe_id.node.to_string(),
            site_id: leaf.spiffe_id.site.to_string(),
            trust_domain: leaf.spiffe_id.trust_domain.to_string(),
            role: leaf.role.to_string(),
            chain,
            not_after: rfc3339(leaf.not_after),
            trust_version: trust.trust_version,
            trust_roots: trust.trust_roots,
            trust_bundle: trust.trust_bundle,
            signed_trust_bundle: trust.signed_trust_bundle,
            server_time: trust.server_time.map(rfc3339),
            allowed_kinds: Vec::new(),
        }
    }

    /// After a renewal: the new leaf and chain, keeping the trust version, roots, bundle and
    /// server time.
    pub fn renewed(&self, leaf: &NodeIdentity, chain: Vec<Vec<u8>>) -> StoredIdentity {
        StoredIdentity {
            node_id: leaf.spiffe_id.node.to_string(),
            site_id: leaf.spiffe_id.site.to_string(),
            trust_domain: leaf.spiffe_id.trust_domain.to_string(),
            role: leaf.role.to_string(),
            chain,
            not_after: rfc3339(leaf.not_after),
            ..self.clone()
        }
    }

    /// Raises the server time high-water mark to `seen` (never lowers it).
    pub fn observe_server_time(&mut self, seen: OffsetDateTime) {
        let current = self.server_time();
        if current.is_none_or(|c| seen > c) {
            self.server_time = Some(rfc3339(seen));
        }
    }

    /// `serverTime`, parsed (an unparsable value counts as none).
    pub fn server_time(&self) -> Option<OffsetDateTime> {
        self.server_time
            .as_deref()
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
    }

    /// The leaf, DER.
    pub fn leaf_der(&self) -> Option<&[u8]> {
        self.chain.first().map(Vec::as_slice)
    }

    /// Parses and checks the leaf against the stored fields.
    pub fn parse_leaf(&self) -> Result<NodeIdentity, String> {
        let td = TrustDomain::new(&self.trust_domain)
            .map_err(|e| format!("trustDomain {:?}: {e}", self.trust_domain))?;
        let der = self.leaf_der().ok_or("the chain is empty")?;
        let leaf = NodeIdentity::from_leaf_der(der, &td)
            .map_err(|e: IdentityError| format!("the leaf certificate: {e}"))?;
        let check = |field: &str, stored: &str, leaf: &str| {
            if stored == leaf {
                Ok(())
            } else {
                Err(format!(
                    "{field} is {stored:?} but the certificate says {leaf:?}"
                ))
            }
        };
        check("nodeId", &self.node_id, leaf.spiffe_id.node.as_str())?;
        check("siteId", &self.site_id, leaf.spiffe_id.site.as_str())?;
        check("role", &self.role, leaf.role.as_str())?;
        let not_after = OffsetDateTime::parse(&self.not_after, &Rfc3339)
            .map_err(|e| format!("notAfter {:?}: {e}", self.not_after))?;
        if not_after != leaf.not_after {
            return Err(format!(
                "notAfter is {} but the certificate says {}",
                self.not_after,
                rfc3339(leaf.not_after)
            ));
        }
        Ok(leaf)
    }

    /// The JSON written to `identity.json`.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// Why the identity did not load.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Step 1: no `identity.json`.
    #[error("this node has not joined (run bcd join)")]
    NotJoined,
    /// `identity.json` exists but is not a usable identity.
    #[error("{path}: the identity does not load: {reason}; {WAY_BACK}")]
    Corrupt {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Step 3: `node.key` is missing.
    #[error("{path}: the node key is missing; {WAY_BACK}")]
    KeyMissing {
        /// The file.
        path: String,
    },
    /// Step 3: `node.key` is not a node key.
    #[error("{path}: the node key does not load: {source}; {WAY_BACK}")]
    KeyUnreadable {
        /// The file.
        path: String,
        /// Why.
        source: KeyFileError,
    },
    /// Step 3: `node.key` is not the leaf's key (the spec's exact message).
    #[error("the node key does not match the node certificate; {WAY_BACK}")]
    KeyMismatch,
    /// Step 3 for a key in the TPM: the TPM derives another key from `node.key`'s record.
    #[error(
        "the node key does not match the node certificate: the TPM derives another key from \
         node.key (was the TPM cleared?); {WAY_BACK}"
    )]
    TpmKeyMismatch,
    /// `node.key` (or `node.key.next`) is a TPM key's record and the TPM could not derive it.
    #[error("{path}: the node key is in the TPM, which cannot load it: {source}")]
    Tpm {
        /// The file.
        path: String,
        /// The TPM's error.
        source: TpmError,
    },
    /// A file could not be read, renamed or removed (permissions, IO).
    #[error(transparent)]
    File(#[from] FileError),
}

/// What step 2 did with `node.key.next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextKeyOutcome {
    /// There was none.
    Absent,
    /// The stored leaf certifies it: it is now `node.key`.
    Promoted,
    /// A key the stored leaf does not certify: kept for the next renewal
    /// ([`LoadedIdentity::pending_next`]), since one for it may have been committed.
    Kept,
    /// It is no key (it does not parse): removed.
    Removed,
}

/// A loaded identity: the stored file, its leaf, and the key the leaf certifies.
#[derive(Debug)]
pub struct LoadedIdentity {
    /// `identity.json`.
    pub stored: StoredIdentity,
    /// The leaf, parsed.
    pub leaf: NodeIdentity,
    /// The node key (the leaf's key).
    pub key: NodeKey,
    /// What step 2 did.
    pub next_key: NextKeyOutcome,
    /// The key `node.key.next` holds when the leaf does not certify it
    /// ([`NextKeyOutcome::Kept`]): the next renewal asks for it again.
    pub pending_next: Option<NodeKey>,
    /// The TPM it was loaded with (renewals make their next key there).
    pub tpm: TpmHost,
}

impl LoadedIdentity {
    /// `<node> (site <site>, role <role>)`, as join and status print it.
    pub fn describe(&self) -> String {
        format!(
            "{} (site {}, role {})",
            self.leaf.spiffe_id.node, self.leaf.spiffe_id.site, self.leaf.role
        )
    }
}

/// Reads `identity.json` alone (no key, no step 2); `Ok(None)` when there is none.
pub fn read_stored(dir: &DataDir) -> Result<Option<StoredIdentity>, LoadError> {
    let bytes = match dir.read(IDENTITY_FILE, MAX_IDENTITY_LEN) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| LoadError::Corrupt {
            path: dir.identity().display().to_string(),
            reason: format!("not a bcd identity.json: {e}"),
        })
}

fn read_key(
    dir: &DataDir,
    name: &str,
) -> Result<Option<Result<KeyRecord, KeyFileError>>, FileError> {
    match dir.read(name, MAX_KEY_FILE_LEN) {
        Ok(bytes) => Ok(Some(parse_key_file(&bytes))),
        Err(e) if e.is_not_found() => Ok(None),
        // An oversized file is not a key bcd wrote.
        Err(FileError::TooLarge { .. }) => Ok(Some(Err(KeyFileError::NotPem))),
        Err(e) => Err(e),
    }
}

/// Loads the identity in the spec's three steps, a TPM key through the TPM of `BCD_TPM_TCTI`
/// (else `/dev/tpmrm0`); `bcd` itself uses [`load_in`] with `config.toml`'s.
pub fn load(dir: &DataDir) -> Result<LoadedIdentity, LoadError> {
    load_in(dir, &TpmHost::from_env())
}

/// Loads the identity in the spec's three steps, a TPM key through `tpm`.
pub fn load_in(dir: &DataDir, tpm: &TpmHost) -> Result<LoadedIdentity, LoadError> {
    load_with(dir, tpm, true)
}

/// Loads the identity as [`load`] does but changes no file: a `node.key.next` the leaf certifies
/// is used as the key (it would be promoted), one that is no key is left alone. For `bcd status` and
/// `bcd doctor`, which must not race a running `bcd node`'s renewal.
pub fn load_read_only(dir: &DataDir) -> Result<LoadedIdentity, LoadError> {
    load_read_only_in(dir, &TpmHost::from_env())
}

/// [`load_read_only`], a TPM key loaded through `tpm`.
pub fn load_read_only_in(dir: &DataDir, tpm: &TpmHost) -> Result<LoadedIdentity, LoadError> {
    load_with(dir, tpm, false)
}

fn open_key(
    record: KeyRecord,
    tpm: &TpmHost,
    path: impl FnOnce() -> String,
) -> Result<NodeKey, LoadError> {
    record.open(tpm).map_err(|source| LoadError::Tpm {
        path: path(),
        source,
    })
}

fn load_with(dir: &DataDir, tpm: &TpmHost, apply: bool) -> Result<LoadedIdentity, LoadError> {
    // Step 1.
    let stored = read_stored(dir)?.ok_or(LoadError::NotJoined)?;
    let leaf = stored.parse_leaf().map_err(|reason| LoadError::Corrupt {
        path: dir.identity().display().to_string(),
        reason,
    })?;

    // Step 2.
    let mut promoted = None;
    let mut pending_next = None;
    let next = match read_key(dir, NEXT_KEY_FILE)? {
        None => None,
        Some(Ok(record)) => Some(Ok(open_key(record, tpm, || {
            dir.next_key().display().to_string()
        })?)),
        Some(Err(e)) => Some(Err(e)),
    };
    let next_key = match next {
        None => NextKeyOutcome::Absent,
        Some(Ok(next)) if next.public_key() == &leaf.public_key => {
            if apply {
                dir.rename(NEXT_KEY_FILE, NODE_KEY_FILE)?;
            } else {
                promoted = Some(next);
            }
            NextKeyOutcome::Promoted
        }
        // A renewal for it may have been committed: kept for the retry (issue 40).
        Some(Ok(next)) => {
            pending_next = Some(next);
            NextKeyOutcome::Kept
        }
        Some(Err(_)) => {
            if apply {
                dir.remove(NEXT_KEY_FILE)?;
            }
            NextKeyOutcome::Removed
        }
    };

    // Step 3.
    let path = dir.node_key().display().to_string();
    let key = match promoted {
        Some(key) => key,
        None => match read_key(dir, NODE_KEY_FILE)? {
            None => return Err(LoadError::KeyMissing { path }),
            Some(Err(source)) => return Err(LoadError::KeyUnreadable { path, source }),
            Some(Ok(record)) => open_key(record, tpm, || path.clone())?,
        },
    };
    if key.public_key() != &leaf.public_key {
        return Err(match key {
            NodeKey::Tpm(_) => LoadError::TpmKeyMismatch,
            NodeKey::File(_) => LoadError::KeyMismatch,
        });
    }
    Ok(LoadedIdentity {
        stored,
        leaf,
        key,
        next_key,
        pending_next,
        tpm: tpm.clone(),
    })
}

/// Why an identity could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The identity to store does not parse (a bug in the caller: it was verified before).
    #[error("refusing to store an identity that does not parse: {0}")]
    BadIdentity(String),
    /// The leaf does not certify the key being stored with it.
    #[error("refusing to store a certificate that does not certify the node key stored with it")]
    KeyNotCertified,
    /// A file operation failed.
    #[error(transparent)]
    File(#[from] FileError),
}

fn check_certifies(identity: &StoredIdentity, key: &PublicKey) -> Result<(), StoreError> {
    let leaf = identity.parse_leaf().map_err(StoreError::BadIdentity)?;
    if &leaf.public_key == key {
        Ok(())
    } else {
        Err(StoreError::KeyNotCertified)
    }
}

/// What [`store_joined`] did besides writing the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinStored {
    /// Where another node's `journal.db` was moved, if it was.
    pub journal_moved_to: Option<String>,
}

/// Persists a verified join (spec 002, "What the join does", step 6): when the data directory
/// held another node's identity its `journal.db` moves aside as `journal.db.<oldNode>-<unix
/// time>`; the temporaries of a join killed mid-write and a stale `node.key.next` are removed;
/// then `node.key`, then `identity.json` (the commit point: killed before it, the machine has
/// not joined and the next join starts over; after it, it has).
pub fn store_joined(
    dir: &DataDir,
    key: &NodeKey,
    identity: &StoredIdentity,
    now: OffsetDateTime,
) -> Result<JoinStored, StoreError> {
    check_certifies(identity, key.public_key())?;
    dir.ensure_exists()?;
    // A join killed between a file's fsync and its rename left that file's temporary (a key
    // that never took effect): nothing else writes here on a machine that has not joined.
    dir.remove_stale_temporaries(&[NODE_KEY_FILE, IDENTITY_FILE, NEXT_KEY_FILE])?;
    let old_node = match read_stored(dir) {
        Ok(Some(old)) => Some(old.node_id),
        // An unreadable old identity names no node; its journal cannot be attributed.
        _ => None,
    };
    let mut journal_moved_to = None;
    if let Some(old) = old_node.filter(|old| *old != identity.node_id) {
        if dir.exists(JOURNAL_FILE) {
            let to = format!("{JOURNAL_FILE}.{old}-{}", now.unix_timestamp());
            dir.rename(JOURNAL_FILE, &to)?;
            journal_moved_to = Some(to);
        }
    }
    dir.remove(NEXT_KEY_FILE)?;
    crate::fault::point("store:next-removed");
    dir.write(NODE_KEY_FILE, key.to_pem().as_bytes())?;
    dir.write(IDENTITY_FILE, &identity.to_json())?;
    // The request kept until answered (`crate::join::pending`) is answered now.
    dir.remove(crate::join::pending::JOIN_PENDING_FILE)?;
    Ok(JoinStored { journal_moved_to })
}

/// Persists a verified re-join of the node this directory already holds (x509pop), in the
/// renewal's crash-safe order, since an identity is already there: `node.key.next` (the new
/// key), then `identity.json` (the new certificate: the commit point), then `node.key.next`
/// renamed over `node.key`. Killed before `identity.json`, [`load`] finds the old identity and
/// keeps `node.key.next` as a pending key (the old leaf does not certify it; the server refuses
/// a renewal of the reclaimed leaf, which drops it); killed after, it promotes it. The
/// trust state the node held is kept where the answer carried none, and the server time
/// high-water mark is kept.
pub fn store_rejoined(
    dir: &DataDir,
    key: NodeKey,
    identity: &StoredIdentity,
    previous: &StoredIdentity,
) -> Result<NodeKey, StoreError> {
    check_certifies(identity, key.public_key())?;
    let mut identity = identity.clone();
    if identity.trust_version < previous.trust_version {
        identity.trust_version = previous.trust_version;
        identity.trust_bundle = previous.trust_bundle.clone();
        identity.signed_trust_bundle = previous.signed_trust_bundle.clone();
    }
    if identity.trust_roots.is_empty() {
        identity.trust_roots = previous.trust_roots.clone();
    }
    if let Some(seen) = previous.server_time() {
        identity.observe_server_time(seen);
    }
    let begun = RenewalStore::new(dir).begin(key)?;
    crate::fault::point("rejoin:next-written");
    let stored = begun.store_certificate(&identity)?;
    crate::fault::point("rejoin:identity-written");
    stored.promote()
}

/// Stores a renewal in the spec's order, one step at a time.
#[derive(Debug)]
pub struct RenewalStore<'a> {
    dir: &'a DataDir,
}

/// After [`RenewalStore::begin`]: `node.key.next` is on disk; the request may be sent.
#[derive(Debug)]
pub struct RenewalBegun<'a> {
    dir: &'a DataDir,
    next_key: NodeKey,
}

/// After [`RenewalBegun::store_certificate`]: `identity.json` names the new key; only the rename
/// is left.
#[derive(Debug)]
pub struct CertificateStored<'a> {
    dir: &'a DataDir,
    next_key: NodeKey,
}

impl<'a> RenewalStore<'a> {
    /// A renewal store over `dir`.
    pub fn new(dir: &'a DataDir) -> RenewalStore<'a> {
        RenewalStore { dir }
    }

    /// Step "writes `node.key.next` first", before the request is built.
    pub fn begin(self, next_key: NodeKey) -> Result<RenewalBegun<'a>, StoreError> {
        self.dir
            .write(NEXT_KEY_FILE, next_key.to_pem().as_bytes())?;
        Ok(RenewalBegun {
            dir: self.dir,
            next_key,
        })
    }
}

impl<'a> RenewalBegun<'a> {
    /// The key being certified (its CSR goes into the request).
    pub fn next_key(&self) -> &NodeKey {
        &self.next_key
    }

    /// Stores the renewed identity: `node.key.next` again (in case something removed it), then
    /// `identity.json`. The identity's leaf must certify the next key.
    pub fn store_certificate(
        self,
        identity: &StoredIdentity,
    ) -> Result<CertificateStored<'a>, StoreError> {
        check_certifies(identity, self.next_key.public_key())?;
        self.dir
            .write(NEXT_KEY_FILE, self.next_key.to_pem().as_bytes())?;
        self.dir.write(IDENTITY_FILE, &identity.to_json())?;
        Ok(CertificateStored {
            dir: self.dir,
            next_key: self.next_key,
        })
    }

    /// Gives up when the server answered without renewing (a refusal, a forged answer):
    /// removes `node.key.next`. A renewal whose answer was lost keeps it instead (drop the
    /// `RenewalBegun`): the server may have committed it.
    pub fn abandon(self) -> Result<(), StoreError> {
        Ok(self.dir.remove(NEXT_KEY_FILE)?)
    }
}

impl CertificateStored<'_> {
    /// Renames `node.key.next` over `node.key`; returns the new node key.
    pub fn promote(self) -> Result<NodeKey, StoreError> {
        self.dir.rename(NEXT_KEY_FILE, NODE_KEY_FILE)?;
        Ok(self.next_key)
    }
}
