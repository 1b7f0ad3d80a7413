//! Why a TPM operation failed ([`TpmError`]).

/// Why a TPM operation failed. Messages name the operation and the TPM's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpmError {
    /// The TPM could not be opened (no device, no swtpm listening, a bad TCTI string).
    #[error("the TPM ({tcti}) is unavailable: {reason}")]
    Unavailable {
        /// The TCTI tried.
        tcti: String,
        /// Why.
        reason: String,
    },
    /// A TPM command failed.
    #[error("the TPM's {operation} failed: {reason}")]
    Command {
        /// The operation (`create_primary`, `certify`, `activate_credential`...).
        operation: &'static str,
        /// The TPM's answer or the local error.
        reason: String,
    },
    /// The TPM holds no EK certificate at a known NV index.
    #[error("the TPM holds no EK certificate (looked at NV {0})")]
    NoEkCertificate(String),
    /// A challenge this TPM cannot answer (malformed, another AK).
    #[error("the tpm challenge cannot be answered: {0}")]
    BadChallenge(String),
    /// The TPM thread is gone (it panicked or the connection broke).
    #[error("the TPM thread stopped")]
    Stopped,
    /// Under `[helper]`: `bcd helper` could not serve a key operation (its message names the
    /// socket, the refusal or the check that failed).
    #[error("{0}")]
    Helper(String),
}
