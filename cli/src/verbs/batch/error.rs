//! The batch subcommands' errors, each starting with its code, and their exit codes.

use std::path::{Path, PathBuf};

use commands::quorum::QuorumError;
use domain::quorum::{BatchId, ScopeHash};
use events::store::StoreError;

/// Exit code for bad input (INVALID_INPUT).
pub const EXIT_USAGE: u8 = 2;
/// Exit code when `approve`'s review refuses to sign.
pub const EXIT_REVIEW_REFUSED: u8 = 3;

/// Errors of the batch subcommands, each with its way out.
#[derive(Debug, thiserror::Error)]
pub enum BatchCmdError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("INVALID_STATE: {0} already exists: batch keygen never overwrites a key; choose another --out")]
    Exists(PathBuf),
    #[error("INVALID_STATE: approver key {path} is readable by others (mode {mode:o}); run chmod 600 {path}")]
    KeyReadable { path: PathBuf, mode: u32 },
    #[error("INVALID_INPUT: {path} is not a {what} PEM file: {why}")]
    BadPem {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    #[error("INVALID_INPUT: {0}")]
    Input(String),
    #[error("NOT_FOUND: batch {0} not found")]
    NotFound(BatchId),
    #[error("INVALID_STATE: {0}")]
    State(String),
    #[error("SCOPE_MISMATCH: the control plane answered two different batches: {0}")]
    ScopeMismatch(String),
    #[error("SCOPE_CHANGED: the batch's root is {actual}, not the reviewed {reviewed}")]
    ScopeChanged { actual: ScopeHash, reviewed: String },
    #[error("SCOPE_UNEXPECTED: {0}")]
    ScopeUnexpected(String),
    #[error("UNBOUND_SCOPE: {count} leaves admit any payload ({sample}); review them and pass --allow-unbound")]
    Unbound { count: usize, sample: String },
    #[error("INVALID_RESPONSE: {0}")]
    InvalidResponse(String),
    #[error("PAYLOAD_REFUSED: {0}")]
    PayloadRefused(String),
    #[error("OPAQUE_PAYLOAD: {count} leaves carry payloads of kinds this build cannot decode ({sample}); review their bytes in --operations-out and pass --allow-opaque")]
    Opaque { count: usize, sample: String },
    #[error("INVALID_STATE: approvals are checked in the deployment's own trust domain, read from its PKI bundle, which cannot be read: {0}; name the bundle with --pki, --dir, --config or BC_PKI_BUNDLE")]
    NoTrustDomain(String),
    #[error("INVALID_INPUT: --trust-domain {given} is not {whose} trust domain {actual}: an approval bound to {given} would never admit a command there")]
    TrustDomainMismatch {
        given: String,
        whose: String,
        actual: String,
    },
    /// A verb run over the admin API failed there: its message and exit code, as it printed them.
    #[error("{message}")]
    Remote { message: String, code: u8 },
    #[error("MISSING_ENV: {0}")]
    MissingEnv(String),
    #[error("PERMISSION_DENIED: approver key {} does not open with BC_APPROVER_PASSPHRASE: a wrong passphrase, or the file is damaged", .0.display())]
    Passphrase(PathBuf),
    #[error("{}", quorum_message(.0))]
    Quorum(#[from] QuorumError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    /// The admin API could not be reached or refused the call.
    #[error("{0}")]
    Client(#[from] crate::admin::client::ClientError),
}

/// A command-layer error as the CLI prints it: a refusal starts with its code.
pub(crate) fn quorum_message(error: &QuorumError) -> String {
    match error.refusal() {
        Some(refusal) => format!("{}: {refusal}", refusal.code()),
        None => error.to_string(),
    }
}

impl BatchCmdError {
    /// The process exit code (see the module docs).
    pub fn exit_code(&self) -> u8 {
        match self {
            BatchCmdError::Input(_) | BatchCmdError::BadPem { .. } => EXIT_USAGE,
            BatchCmdError::Quorum(e)
                if e.refusal().is_some_and(|r| r.code() == "INVALID_INPUT") =>
            {
                EXIT_USAGE
            }
            BatchCmdError::ScopeMismatch(_)
            | BatchCmdError::ScopeChanged { .. }
            | BatchCmdError::ScopeUnexpected(_)
            | BatchCmdError::Unbound { .. }
            | BatchCmdError::InvalidResponse(_)
            | BatchCmdError::PayloadRefused(_)
            | BatchCmdError::Opaque { .. } => EXIT_REVIEW_REFUSED,
            BatchCmdError::TrustDomainMismatch { .. } => EXIT_USAGE,
            BatchCmdError::Remote { code, .. } => *code,
            BatchCmdError::Client(e) => e.exit_code(),
            _ => 1,
        }
    }
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BatchCmdError + '_ {
    move |source| BatchCmdError::Io {
        path: path.to_path_buf(),
        source,
    }
}
