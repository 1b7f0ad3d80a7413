//! What every `bcctl pki` verb shares: its error, the pins as text, and writing a new private
//! file (mode 0600, never overwriting). The verbs live in `verbs/pki/mod.rs` (init, show, the
//! dispatch), `trust.rs`, `lifecycle.rs`, `gateway.rs` and `operator.rs`; each uses this
//! module, none of them the dispatcher.

use std::io::Write;
use std::path::{Path, PathBuf};

use domain::pki::{BundleError, KeySetError, KeySetPins, SecretError, SpiffeError};

use crate::deployment::DeploymentError;

#[derive(Debug, thiserror::Error)]
pub enum PkiCmdError {
    #[error("{0}")]
    Secret(#[from] SecretError),
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("trust domain: {0}")]
    TrustDomain(#[from] SpiffeError),
    #[error("generating the key set failed: {0}")]
    KeySet(#[from] KeySetError),
    #[error("{path}: {source}")]
    Bundle { path: PathBuf, source: BundleError },
    #[error("{path} already exists: a PKI bundle is never overwritten (move it away first if you really mean to replace every key of the deployment)")]
    Exists { path: PathBuf },
    #[error("{0}")]
    Internal(String),
    /// `pki renew-ca` could not certify the CA.
    #[error("pki renew-ca: {0}")]
    Renew(KeySetError),
    /// A bad value the verb found itself (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The bundle is not in a state the operation accepts (spec 003's INVALID_STATE).
    #[error("{0}")]
    InvalidState(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl PkiCmdError {
    /// The exit code: 2 for a bad value, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            PkiCmdError::Usage(_) => crate::output::EXIT_USAGE,
            _ => crate::output::EXIT_FAILED,
        }
    }
}

pub fn print_pins(pins: &KeySetPins) {
    crate::outln!("pins:");
    crate::outln!("  root CA                  {}", pins.root_ca);
    crate::outln!("  node CA                  {}", pins.node_ca);
    crate::outln!(
        "  serving CA               {}  (bcd serving_ca_spki_pin)",
        pins.serving_ca
    );
    crate::outln!(
        "  JoinService signing      {}  (bcd join_signing_key_pin)",
        pins.join_signing
    );
    crate::outln!(
        "  JoinService encryption   {}  (bcd join_encryption_key_pin)",
        pins.join_encryption
    );
    crate::outln!("  audit signing            {}", pins.audit_signing);
    crate::outln!("  command-signing root     {}", pins.command_signing_root);
    match &pins.operator_ca {
        Some(pin) => crate::outln!("  operator CA              {pin}"),
        None => {
            crate::outln!("  operator CA              none (bcctl pki add-operator-ca adds one)")
        }
    }
    match &pins.ssh_ca_public_key {
        Some(line) => crate::outln!("  SSH CA                   {line}"),
        None => crate::outln!("  SSH CA                   none (bcctl pki add-ssh-ca adds one)"),
    }
}

/// Creates `path` with mode 0600, failing if it exists, and syncs it and its directory. During
/// an admin API call the file goes back to the caller (mode 0600), never onto the server's disk.
pub fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), PkiCmdError> {
    let io = |source| PkiCmdError::Io {
        path: path.to_path_buf(),
        source,
    };
    if crate::invocation::is_remote() {
        return crate::invocation::write_file(path, bytes, 0o600).map_err(io);
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(PkiCmdError::Exists {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically: a mode 0600 file beside it, synced, renamed over.
pub fn replace_private(path: &Path, bytes: &[u8]) -> Result<(), PkiCmdError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".write.tmp");
    let tmp = PathBuf::from(tmp);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| PkiCmdError::Io { path: p, source }
    };
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Writes `bytes` beside `path` with `mode`, syncs it and renames it over `path`.
pub(crate) fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PkiCmdError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| PkiCmdError::Io { path: p, source }
    };
    let mut aside = path.as_os_str().to_owned();
    aside.push(".new");
    let aside = PathBuf::from(aside);
    let _ = std::fs::remove_file(&aside);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&aside)
        .map_err(io(&aside))?;
    file.write_all(bytes).map_err(io(&aside))?;
    file.sync_all().map_err(io(&aside))?;
    std::fs::rename(&aside, path).map_err(io(path))?;
    Ok(())
}
