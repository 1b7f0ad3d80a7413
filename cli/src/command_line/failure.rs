//! What a failed verb tells the operator, and its exit code ([`Failure`]): what every verb's
//! error becomes, for `main` and for the admin API server alike.

use crate::output;

/// A failed subcommand: what to tell the operator and the exit code. Each subcommand's typed
/// error converts into it with exit code 1; a subcommand that documents other codes builds it
/// with [`Failure::coded`].
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) code: u8,
}

impl Failure {
    /// A usage error the verb found itself (a bad value): exit 2, as for the parser's.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure::coded(message, output::EXIT_USAGE)
    }

    /// A failure with the exit code the verb documents.
    pub(crate) fn coded(message: impl Into<String>, code: u8) -> Self {
        Failure {
            message: message.into(),
            code,
        }
    }
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            message: e.to_string(),
            code: 1,
        }
    }
}
