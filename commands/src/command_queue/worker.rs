//! The process's worker key (spec 003 "Signed intent"): a P-256 key certified by the
//! command-signing root for at most 24 hours (`OU=bc-role:worker`), replaced after 60% of its
//! lifetime. Each certification is a `command.worker.certified` event.

use std::sync::Mutex;

use domain::command::{sign_command, CommandBody, SignedCommand};
use domain::pki::{CommandSigningRoot, PrivateKey, TrustDomain};
use events::store::EventStore;

use crate::clock::Clock;

/// Why the worker key could not sign.
#[derive(Debug, thiserror::Error)]
pub enum WorkerSignerError {
    /// Generating or certifying the key failed.
    #[error("the worker key: {0}")]
    Key(String),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] domain::command::CommandError),
    /// Recording the certification failed.
    #[error(transparent)]
    Run(#[from] crate::run::RunError),
}

#[allow(dead_code)]
struct Current {
    key: PrivateKey,
    certificate: Vec<u8>,
    not_before_us: i64,
    not_after_us: i64,
}

/// Holds the worker key of this process and signs command bodies with it.
pub struct WorkerSigner {
    #[allow(dead_code)]
    root: CommandSigningRoot,
    trust_domain: TrustDomain,
    #[allow(dead_code)]
    holder: String,
    #[allow(dead_code)]
    lifetime: time::Duration,
    #[allow(dead_code)]
    current: Mutex<Option<Current>>,
}

impl WorkerSigner {
    /// A signer for this process (`holder` names it in the certificate's CN), certifying keys
    /// under `root` for `lifetime` (at most 24 hours).
    pub fn new(
        root: CommandSigningRoot,
        trust_domain: TrustDomain,
        holder: &str,
        lifetime: time::Duration,
    ) -> Self {
        WorkerSigner {
            root,
            trust_domain,
            holder: holder.to_owned(),
            lifetime,
            current: Mutex::new(None),
        }
    }

    /// The trust domain it signs for.
    pub fn trust_domain(&self) -> &TrustDomain {
        &self.trust_domain
    }

    /// Signs `body`, first certifying a fresh key (and recording it) when none is held or the
    /// held one is past 60% of its lifetime.
    pub async fn sign(
        &self,
        _store: &EventStore,
        _clock: &dyn Clock,
        _body: &CommandBody,
    ) -> Result<SignedCommand, WorkerSignerError> {
        let _ = sign_command;
        Err(WorkerSignerError::Key("not implemented yet".into()))
    }
}
