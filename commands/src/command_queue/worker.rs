//! The process's worker key (spec 003 "Signed intent"): a P-256 key certified by the
//! command-signing root for at most 24 hours (`OU=bc-role:worker`), replaced after 60% of its
//! lifetime. Each certification is a `command.worker.certified` event on `worker/<sha256 hex>`.
//!
//! Thread-safe: the held key sits behind a mutex that is never held across an await; two
//! callers that both find the key stale may each certify one (both are recorded, the later
//! replaces the earlier), which costs one extra certificate and is never unsafe.

use std::sync::{Arc, Mutex};

use domain::command::{
    decide_worker_certified, sign_command, CommandBody, SignedCommand, WORKER_REPLACE_FRACTION,
};
use domain::pki::{
    issue_worker_certificate, CommandSigningRoot, IssuedCertificate, KeyRole, PrivateKey, Serial,
    TrustDomain,
};
use events::schema::WorkerCertified;
use events::store::{EventStore, ExpectedVersion, StoreTx};
use events::NewEvent;

use crate::clock::Clock;
use crate::quorum::DEPLOYMENT_TENANT;
use crate::run::{append_and_project, At, Command, Decided, RunError};
use rand_core::CryptoRngCore;

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

struct Current {
    key: Arc<PrivateKey>,
    certificate: Arc<Vec<u8>>,
    not_before_us: i64,
    not_after_us: i64,
}

impl Current {
    /// Whether the key is still inside the first 60% of its lifetime at `now_us`.
    fn fresh_at(&self, now_us: i64) -> bool {
        let lifetime = (self.not_after_us - self.not_before_us) as f64;
        let replace_at = self.not_before_us + (lifetime * WORKER_REPLACE_FRACTION) as i64;
        now_us >= self.not_before_us && now_us < replace_at
    }
}

/// Holds the worker key of this process and signs command bodies with it.
pub struct WorkerSigner {
    root: CommandSigningRoot,
    trust_domain: TrustDomain,
    holder: String,
    lifetime: time::Duration,
    current: Mutex<Option<Current>>,
}

/// The stream of a worker certificate.
pub fn worker_stream(certificate_sha256: &[u8]) -> String {
    format!("worker/{}", hex::encode(certificate_sha256))
}

impl WorkerSigner {
    /// A signer for this process (`holder` names it in the certificate's CN), certifying keys
    /// under `root` for `lifetime` (at most 24 hours; longer is cut to 24 hours).
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
            lifetime: lifetime.min(domain::command::WORKER_MAX_LIFETIME),
            current: Mutex::new(None),
        }
    }

    /// The trust domain it signs for.
    pub fn trust_domain(&self) -> &TrustDomain {
        &self.trust_domain
    }

    /// The certificate (DER) of the key held now, if any.
    pub fn current_certificate(&self) -> Option<Vec<u8>> {
        let guard = self.current.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map(|c| c.certificate.as_ref().clone())
    }

    fn held_fresh(&self, now_us: i64) -> Option<(Arc<PrivateKey>, Arc<Vec<u8>>)> {
        let guard = self.current.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .filter(|c| c.fresh_at(now_us))
            .map(|c| (c.key.clone(), c.certificate.clone()))
    }

    /// Certifies a fresh key and records it.
    async fn certify(
        &self,
        store: &EventStore,
        clock: &dyn Clock,
    ) -> Result<(Arc<PrivateKey>, Arc<Vec<u8>>), WorkerSignerError> {
        let now = clock.now();
        let key = PrivateKey::generate(KeyRole::Worker)
            .map_err(|e| WorkerSignerError::Key(e.to_string()))?;
        let serial = Serial::generate().map_err(|e| WorkerSignerError::Key(e.to_string()))?;
        let issued = issue_worker_certificate(
            &self.root,
            key.public_key(),
            &self.holder,
            &serial,
            self.lifetime,
            now,
        )
        .map_err(|e| {
            WorkerSignerError::Key(format!(
                "the command-signing root cannot certify a worker key ({e}); check the root's validity"
            ))
        })?;
        let record = RecordWorker {
            issued: &issued,
            root_der: self.root.cert_der(),
            holder: &self.holder,
        };
        crate::run::run(store, clock, &record).await?;
        let to_us = |t: time::OffsetDateTime| (t.unix_timestamp_nanos() / 1000) as i64;
        let (not_before_us, not_after_us) = (to_us(issued.not_before), to_us(issued.not_after));
        let key = Arc::new(key);
        let certificate = Arc::new(issued.der);
        let mut guard = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *guard = Some(Current {
            key: key.clone(),
            certificate: certificate.clone(),
            not_before_us,
            not_after_us,
        });
        Ok((key, certificate))
    }

    /// Makes sure a fresh key is held: certifies (and records) one when none is held or the held
    /// one is past 60% of its lifetime. Call it outside any transaction (recording it is one).
    pub async fn ensure_fresh(
        &self,
        store: &EventStore,
        clock: &dyn Clock,
    ) -> Result<(), WorkerSignerError> {
        if self.held_fresh(clock.now_us()).is_none() {
            self.certify(store, clock).await?;
        }
        Ok(())
    }

    /// Signs `body` with the held key, without certifying one: for use inside a transaction
    /// after [`WorkerSigner::ensure_fresh`]. The key must still be valid at the body's issue time.
    pub fn sign_held(&self, body: &CommandBody) -> Result<SignedCommand, WorkerSignerError> {
        let held = {
            let guard = self.current.lock().unwrap_or_else(|p| p.into_inner());
            guard.as_ref().and_then(|c| {
                let issued_us = body.issued_at_ms.saturating_mul(1000);
                (issued_us >= c.not_before_us && issued_us < c.not_after_us)
                    .then(|| (c.key.clone(), c.certificate.clone()))
            })
        };
        let (key, certificate) = held.ok_or_else(|| {
            WorkerSignerError::Key(
                "no worker key valid at the command's issue time is held; certify one first"
                    .to_string(),
            )
        })?;
        Ok(sign_command(&key, &certificate, body, &self.trust_domain)?)
    }

    /// Signs `body`, first certifying a fresh key (and recording it) when none is held or the
    /// held one is past 60% of its lifetime.
    pub async fn sign(
        &self,
        store: &EventStore,
        clock: &dyn Clock,
        body: &CommandBody,
    ) -> Result<SignedCommand, WorkerSignerError> {
        let (key, certificate) = match self.held_fresh(clock.now_us()) {
            Some(held) => held,
            None => self.certify(store, clock).await?,
        };
        Ok(sign_command(&key, &certificate, body, &self.trust_domain)?)
    }
}

/// Recording a certified worker key, as the runner drives it.
struct RecordWorker<'a> {
    issued: &'a IssuedCertificate,
    root_der: &'a [u8],
    holder: &'a str,
}

#[async_trait::async_trait]
impl Command for RecordWorker<'_> {
    type State = ();
    type Event = WorkerCertified;
    type Outcome = ();
    type Answer = ();
    type Error = RunError;

    async fn load(&self, _: &mut StoreTx, _: &At) -> Result<(), RunError> {
        Ok(())
    }

    fn decide(&self, _: &(), _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_worker_certified(self.issued, self.root_der, self.holder)
            .map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &(),
        events: Vec<WorkerCertified>,
        at: &At,
    ) -> Result<(), RunError> {
        for event in &events {
            append_and_project(
                tx,
                &super::projections(),
                &worker_stream(&self.issued.sha256),
                ExpectedVersion::NoStream,
                &[NewEvent::from_payload(
                    events::envelope::new_event_id(),
                    DEPLOYMENT_TENANT,
                    at.now_us,
                    event,
                )],
            )
            .await?;
        }
        Ok(())
    }

    async fn answer(&self, _: &mut StoreTx, _: (), _: (), _: &At) -> Result<(), RunError> {
        Ok(())
    }
}
