//! The node key, wherever it lives (spec 000 "The node key in the TPM", spec 002 "Node keys in
//! the TPM"): a PKCS#8 file key or a key the host's TPM derives again from a 32-byte unique.
//!
//! [`NodeKey`] is what bcd signs with everywhere (CSRs, purpose-bound statements, the TLS client
//! identity); it implements [`NodeSigner`], so the wire does not change with the holder.
//!
//! On disk (`node.key`, `node.key.next`, mode 0600) a file key is its PKCS#8 PEM (`PRIVATE KEY`)
//! and a TPM key only its record: the PEM block `BCD TPM NODE KEY` over the 32-byte unique
//! ([`KeyRecord`]). A record loads only through the TPM that made it ([`TpmHost`]).
//!
//! Every new node key is made in the TPM when the host has one ([`new_node_key`]): at a join
//! and at every renewal's next key; when the TPM cannot hold it, bcd warns and makes a file key,
//! so a file-key node moves into the TPM at its next renewal. (A renewal of a certificate that
//! names an AK never falls back: see [`crate::renewal::request`].)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use domain::pki::{KeyRole, NodeSigner, PrivateKey, PublicKey, Signature, SignerError};

use crate::files::{pem_block, pem_encode, KeyFileError, PKCS8_PEM_LABEL};
use crate::helper::keys::HelperTpm;
use crate::tpm::{AttestationKey, CertifiedKey, Tpm, TpmError, TpmNodeKey, DEFAULT_TCTI};

/// The PEM label of a TPM key's record in `node.key`.
pub const TPM_KEY_PEM_LABEL: &str = "BCD TPM NODE KEY";
/// Environment override of `config.toml`'s `[tpm] tcti`.
pub const TPM_TCTI_ENV: &str = "BCD_TPM_TCTI";

/// Where a node key lives, as `bcd status --json` says it (`nodeKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKeyKind {
    /// A PKCS#8 file.
    File,
    /// The host's TPM.
    Tpm,
}

impl NodeKeyKind {
    /// `file` or `tpm`.
    pub fn label(self) -> &'static str {
        match self {
            NodeKeyKind::File => "file",
            NodeKeyKind::Tpm => "tpm",
        }
    }

    /// `node key a file` or `node key in the TPM`, as `bcd status` prints it.
    pub fn describe(self) -> &'static str {
        match self {
            NodeKeyKind::File => "node key a file",
            NodeKeyKind::Tpm => "node key in the TPM",
        }
    }
}

/// The node key: a file key or a TPM-held key. Cheap to clone.
#[derive(Debug, Clone)]
pub enum NodeKey {
    /// A PKCS#8 key in `node.key`.
    File(Arc<PrivateKey>),
    /// A key the TPM derives from the unique `node.key` keeps.
    Tpm(TpmNodeKey),
}

impl From<PrivateKey> for NodeKey {
    fn from(key: PrivateKey) -> NodeKey {
        NodeKey::File(Arc::new(key))
    }
}

impl From<TpmNodeKey> for NodeKey {
    fn from(key: TpmNodeKey) -> NodeKey {
        NodeKey::Tpm(key)
    }
}

impl NodeKey {
    /// A fresh file key.
    pub fn generate_file() -> Result<NodeKey, String> {
        PrivateKey::generate(KeyRole::Node)
            .map(NodeKey::from)
            .map_err(|e| e.to_string())
    }

    /// Its public half.
    pub fn public_key(&self) -> &PublicKey {
        match self {
            NodeKey::File(key) => key.public_key(),
            NodeKey::Tpm(key) => NodeSigner::public_key(key),
        }
    }

    /// Where it lives.
    pub fn kind(&self) -> NodeKeyKind {
        match self {
            NodeKey::File(_) => NodeKeyKind::File,
            NodeKey::Tpm(_) => NodeKeyKind::Tpm,
        }
    }

    /// The TPM key, when it is one.
    pub fn as_tpm(&self) -> Option<&TpmNodeKey> {
        match self {
            NodeKey::Tpm(key) => Some(key),
            NodeKey::File(_) => None,
        }
    }

    /// What `node.key` holds for it: the PKCS#8 PEM, or the TPM record's PEM.
    pub fn to_pem(&self) -> String {
        match self {
            NodeKey::File(key) => pem_encode(PKCS8_PEM_LABEL, key.pkcs8_der()),
            NodeKey::Tpm(key) => pem_encode(TPM_KEY_PEM_LABEL, key.unique()),
        }
    }
}

impl NodeSigner for NodeKey {
    fn public_key(&self) -> &PublicKey {
        NodeKey::public_key(self)
    }

    fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError> {
        match self {
            NodeKey::File(key) => key.sign_es256(message),
            NodeKey::Tpm(key) => key.sign_es256(message),
        }
    }
}

/// What a key file holds.
#[derive(Debug)]
pub enum KeyRecord {
    /// A PKCS#8 file key.
    File(Box<PrivateKey>),
    /// A TPM key's unique.
    Tpm([u8; 32]),
}

/// Parses `node.key` (or `node.key.next`): a `PRIVATE KEY` or a `BCD TPM NODE KEY` block.
pub fn parse_key_file(text: &[u8]) -> Result<KeyRecord, KeyFileError> {
    let text = std::str::from_utf8(text).map_err(|_| KeyFileError::NotPem)?;
    if let Some(body) = pem_block(text, TPM_KEY_PEM_LABEL) {
        let body = body?;
        let unique: [u8; 32] = body
            .as_slice()
            .try_into()
            .map_err(|_| KeyFileError::TpmRecordLength(body.len()))?;
        return Ok(KeyRecord::Tpm(unique));
    }
    let der = pem_block(text, PKCS8_PEM_LABEL).ok_or(KeyFileError::NotPem)??;
    Ok(KeyRecord::File(Box::new(PrivateKey::from_pkcs8_der(
        KeyRole::Node,
        &der,
    )?)))
}

impl KeyRecord {
    /// The key itself: a file key as it is, a TPM record derived again by `host`'s TPM.
    pub fn open(self, host: &TpmHost) -> Result<NodeKey, TpmError> {
        match self {
            KeyRecord::File(key) => Ok(NodeKey::File(Arc::new(*key))),
            KeyRecord::Tpm(unique) => Ok(host.load_node_key(&unique)?.into()),
        }
    }
}

/// The host's TPM as bcd reaches it: a TCTI, opened once per process (a TPM without a
/// resource manager serves one connection, and the keys' handles must stay valid together);
/// or, for an unprivileged `bcd node` under `[helper]`, `bcd helper`'s socket
/// ([`TpmHost::through_helper`]): such a host never opens the TPM ([`TpmHost::open`] is
/// [`TpmError::Unavailable`]) and reaches node keys, the AK and certifications only through
/// the helper. Clones share the connection; two hosts are equal when their TCTIs (or sockets)
/// are.
#[derive(Debug, Clone)]
pub struct TpmHost {
    tcti: Option<String>,
    opened: Arc<Mutex<Option<Tpm>>>,
    helper: Option<HelperTpm>,
}

impl PartialEq for TpmHost {
    fn eq(&self, other: &TpmHost) -> bool {
        self.tcti == other.tcti
    }
}

impl Eq for TpmHost {}

impl TpmHost {
    /// The TPM at `tcti` (`device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=N`).
    pub fn new(tcti: &str) -> TpmHost {
        TpmHost {
            tcti: Some(tcti.to_owned()),
            opened: Arc::default(),
            helper: None,
        }
    }

    /// `bcd helper` at `socket`, one connection per socket for the whole process.
    pub fn through_helper(socket: &Path) -> TpmHost {
        static HOSTS: OnceLock<Mutex<HashMap<PathBuf, TpmHost>>> = OnceLock::new();
        let mut hosts = HOSTS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        hosts
            .entry(socket.to_path_buf())
            .or_insert_with(|| TpmHost {
                tcti: Some(format!("bcd helper at {}", socket.display())),
                opened: Arc::default(),
                helper: Some(HelperTpm::new(socket)),
            })
            .clone()
    }

    /// The helper, when this host reaches the TPM through one.
    pub fn helper(&self) -> Option<&HelperTpm> {
        self.helper.as_ref()
    }

    /// No TPM at all: every open is [`TpmError::Unavailable`].
    pub fn none() -> TpmHost {
        TpmHost {
            tcti: None,
            opened: Arc::default(),
            helper: None,
        }
    }

    /// `BCD_TPM_TCTI`, else [`DEFAULT_TCTI`].
    pub fn from_env() -> TpmHost {
        TpmHost::new(&tcti_from_env(None))
    }

    /// The TCTI (`none` for [`TpmHost::none`]).
    pub fn tcti(&self) -> &str {
        self.tcti.as_deref().unwrap_or("none")
    }

    /// Whether this host may have the TPM at all: not for [`TpmHost::none`], nor for a
    /// `device:` TCTI whose device file does not exist (a host without a TPM, or its driver not
    /// loaded); any other TCTI is tried.
    pub fn present(&self) -> bool {
        if self.helper.is_some() {
            return true;
        }
        match self.tcti.as_deref() {
            None => false,
            Some(tcti) => device_path(tcti).is_none_or(|path| std::path::Path::new(path).exists()),
        }
    }

    /// The TPM, opened at the first call and shared after. Through a helper: never (this
    /// process must not open the TPM).
    pub fn open(&self) -> Result<Tpm, TpmError> {
        if let Some(helper) = &self.helper {
            return Err(TpmError::Unavailable {
                tcti: self.tcti().to_owned(),
                reason: format!(
                    "under [helper] this process does not open the TPM; bcd helper ({}) \
                     holds it",
                    helper.socket().display()
                ),
            });
        }
        let Some(tcti) = &self.tcti else {
            return Err(TpmError::Unavailable {
                tcti: "none".into(),
                reason: "this bcd is configured without a TPM".into(),
            });
        };
        if !self.present() {
            // Checked here so that libtss2 does not log its own errors for a missing device.
            return Err(TpmError::Unavailable {
                tcti: tcti.clone(),
                reason: format!(
                    "{} does not exist (this host has no TPM, or its driver is not loaded)",
                    device_path(tcti).unwrap_or_default()
                ),
            });
        }
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tpm) = opened.as_ref() {
            return Ok(tpm.clone());
        }
        let tpm = Tpm::open(tcti)?;
        *opened = Some(tpm.clone());
        Ok(tpm)
    }
}

impl TpmHost {
    /// The node key of `unique`, derived again (by this process's TPM or the helper).
    pub fn load_node_key(&self, unique: &[u8; 32]) -> Result<TpmNodeKey, TpmError> {
        match &self.helper {
            Some(helper) => helper
                .load_node_key(unique)
                .map_err(|e| TpmError::Helper(e.to_string())),
            None => self.open()?.load_node_key(unique),
        }
    }

    /// A new node key in the TPM (through the helper: a unique of this machine's random
    /// generator, derived there).
    pub fn create_node_key(&self) -> Result<TpmNodeKey, TpmError> {
        match &self.helper {
            Some(helper) => helper
                .create_node_key()
                .map_err(|e| TpmError::Helper(e.to_string())),
            None => self.open()?.create_node_key(),
        }
    }

    /// The AK (through the helper: checked to be an AK).
    pub fn attestation_key(&self) -> Result<AttestationKey, TpmError> {
        match &self.helper {
            Some(helper) => helper
                .attestation_key()
                .map_err(|e| TpmError::Helper(e.to_string())),
            None => self.open()?.attestation_key(),
        }
    }

    /// The AK's certification of `key` qualified by `qualifying` (through the helper: verified
    /// under `ak`, what [`TpmHost::attestation_key`] answered).
    pub fn certify(
        &self,
        ak: &AttestationKey,
        key: &TpmNodeKey,
        qualifying: &[u8; 32],
    ) -> Result<CertifiedKey, TpmError> {
        match &self.helper {
            Some(helper) => helper
                .certify(ak, key, qualifying)
                .map_err(|e| TpmError::Helper(e.to_string())),
            None => self.open()?.certify(key, qualifying),
        }
    }
}

/// The device file of a `device:` TCTI (`/dev/tpm0` when it names none).
pub(crate) fn device_path(tcti: &str) -> Option<&str> {
    let rest = tcti.strip_prefix("device")?;
    match rest.strip_prefix(':') {
        Some(path) if !path.is_empty() => Some(path),
        _ if rest.is_empty() || rest == ":" => Some("/dev/tpm0"),
        _ => None,
    }
}

/// The TCTI: `BCD_TPM_TCTI` when set and not empty, else `configured`, else [`DEFAULT_TCTI`].
pub fn tcti_from_env(configured: Option<&str>) -> String {
    std::env::var(TPM_TCTI_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| configured.map(str::to_owned))
        .unwrap_or_else(|| DEFAULT_TCTI.to_owned())
}

/// A new node key and, when it is a file because the TPM could not hold it, the warning to log.
#[derive(Debug)]
pub struct NewKey {
    /// The key.
    pub key: NodeKey,
    /// `the TPM (...) cannot hold the node key: ...; using a file key`.
    pub warning: Option<String>,
}

/// Makes a node key in `host`'s TPM when it opens and makes one, else a file key: with a
/// warning when the host has a TPM that failed, quietly on a host with none.
pub fn new_node_key(host: &TpmHost) -> Result<NewKey, String> {
    if !host.present() {
        return Ok(NewKey {
            key: NodeKey::generate_file()?,
            warning: None,
        });
    }
    let made = host.create_node_key();
    match made {
        Ok(key) => Ok(NewKey {
            key: key.into(),
            warning: None,
        }),
        Err(e) => Ok(NewKey {
            key: NodeKey::generate_file()?,
            warning: Some(format!(
                "the node key is a file, not in the TPM: {e} (the next renewal tries the TPM again)"
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tpm_record_is_32_bytes_under_its_own_label() {
        let text = pem_encode(TPM_KEY_PEM_LABEL, &[7u8; 32]);
        assert!(text.starts_with("-----BEGIN BCD TPM NODE KEY-----\n"));
        assert!(text.ends_with("-----END BCD TPM NODE KEY-----\n"));
        match parse_key_file(text.as_bytes()).unwrap() {
            KeyRecord::Tpm(unique) => assert_eq!(unique, [7u8; 32]),
            other => panic!("{other:?}"),
        }
        let short = pem_encode(TPM_KEY_PEM_LABEL, &[7u8; 31]);
        assert_eq!(
            parse_key_file(short.as_bytes()).unwrap_err(),
            KeyFileError::TpmRecordLength(31)
        );
    }

    #[test]
    fn a_file_key_round_trips_and_signs() {
        let key = NodeKey::generate_file().unwrap();
        assert_eq!(key.kind(), NodeKeyKind::File);
        match parse_key_file(key.to_pem().as_bytes()).unwrap() {
            KeyRecord::File(back) => assert_eq!(back.public_key(), key.public_key()),
            other => panic!("{other:?}"),
        }
        let sig = key.sign_es256(b"m").unwrap();
        assert!(key.public_key().verify_es256(b"m", &sig));
    }

    #[test]
    fn without_a_tpm_a_new_key_is_a_file_quietly() {
        for host in [TpmHost::none(), TpmHost::new("device:/dev/no-such-tpm")] {
            assert!(!host.present());
            let made = new_node_key(&host).unwrap();
            assert_eq!(made.key.kind(), NodeKeyKind::File);
            assert_eq!(made.warning, None);
        }
        assert_eq!(
            TpmHost::new("device:/dev/no-such-tpm")
                .open()
                .unwrap_err()
                .to_string(),
            "the TPM (device:/dev/no-such-tpm) is unavailable: /dev/no-such-tpm does not exist \
             (this host has no TPM, or its driver is not loaded)"
        );
        assert_eq!(device_path("device"), Some("/dev/tpm0"));
        assert_eq!(device_path("swtpm:host=127.0.0.1,port=1"), None);
        assert!(TpmHost::new("swtpm:host=127.0.0.1,port=1").present());
    }

    #[test]
    fn a_tpm_that_fails_gives_a_file_key_with_a_warning() {
        // Nothing listens on port 1: the TPM is configured but does not open.
        let made = new_node_key(&TpmHost::new("swtpm:host=127.0.0.1,port=1")).unwrap();
        assert_eq!(made.key.kind(), NodeKeyKind::File);
        let warning = made.warning.unwrap();
        assert!(
            warning.starts_with(
                "the node key is a file, not in the TPM: the TPM (swtpm:host=127.0.0.1,port=1) is \
                 unavailable: "
            ),
            "{warning}"
        );
        assert!(
            warning.ends_with(" (the next renewal tries the TPM again)"),
            "{warning}"
        );
    }
}
