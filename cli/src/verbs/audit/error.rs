//! The errors of `bcctl audit` with their exit codes, and the file read its subcommands share.

use std::path::PathBuf;

use commands::audit::AuditError;
use events::store::StoreError;

use crate::deployment::DeploymentError;

/// The trail or proof does not verify.
pub const EXIT_TAMPERED: u8 = 3;
/// The command was used wrongly.
pub const EXIT_USAGE: u8 = 2;
/// The trail verifies, but leaves after its last checkpoint are covered by no signature.
pub const EXIT_UNSEALED: u8 = 4;
/// The trail has no checkpoint: nothing in it is signed.
pub const EXIT_NO_CHECKPOINT: u8 = 5;
/// The trail's last checkpoint is smaller than one the auditor saw before (truncated).
pub const EXIT_TRUNCATED: u8 = 6;

/// Errors of `bcctl audit`, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum AuditCmdError {
    #[error("{0}")]
    Usage(String),
    #[error("TAMPERED: {0}")]
    Tampered(String),
    #[error("NOT COVERED: {0}")]
    Unsealed(String),
    #[error("NOT COVERED: {0}")]
    NoCheckpoint(String),
    #[error("CUT BACK: {0}")]
    Truncated(String),
    #[error("{0}")]
    Audit(#[from] AuditError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl AuditCmdError {
    pub fn exit_code(&self) -> u8 {
        match self {
            AuditCmdError::Usage(_) => EXIT_USAGE,
            AuditCmdError::Tampered(_) => EXIT_TAMPERED,
            AuditCmdError::Unsealed(_) => EXIT_UNSEALED,
            AuditCmdError::NoCheckpoint(_) => EXIT_NO_CHECKPOINT,
            AuditCmdError::Truncated(_) => EXIT_TRUNCATED,
            _ => 1,
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Reads a whole file, naming it in the error.
pub(super) fn read_file(path: &PathBuf) -> Result<Vec<u8>, AuditCmdError> {
    std::fs::read(path).map_err(|source| AuditCmdError::Io {
        what: "cannot read",
        path: path.clone(),
        source,
    })
}

/// A `--pki` bundle that cannot be opened: a usage error naming the flag.
pub(super) fn pki_usage(e: DeploymentError) -> AuditCmdError {
    AuditCmdError::Usage(format!("--pki: {e}"))
}
