//! Operator certificates (issue 23): issue, revoke, list, and the revoked serials the admin
//! API's handshake refuses.
//!
//! Issuing: the domain checks ([`domain::operator::check_issue`]: name, role, 1 to 90 days),
//! the operator CA signs ([`domain::pki::issue_operator_certificate`]), then
//! `operator.cert.issued` ([`domain::operator::decide_issued`]) is appended to `operator/<name>` (tenant [`DEPLOYMENT_TENANT`]) with
//! the `operator_certs` projection in one transaction. Only after the commit does the caller
//! write the files, so every certificate that exists has its event. Revoking reads the row,
//! lets the domain decide ([`domain::operator::decide_revoke`]: an unknown serial is NOT_FOUND,
//! a revoked one is "already revoked" and appends nothing) and appends at the stream's version
//! read, so two concurrent revocations record one event.
//!
//! The actor of each event is the store's ([`events::store::EventStore::acting_as`]): the
//! caller passes a store acting as whoever runs the verb.

use std::collections::BTreeSet;

use async_trait::async_trait;
use domain::operator::{
    decide_issued, decide_revoke, normalize_serial, CertState, IssueDecision, OperatorRefusal,
    RevokeDecision,
};
use domain::pki::{
    issue_operator_certificate, IssuedCertificate, OperatorCa, OperatorCertError, PublicKey,
};
use events::schema::{operator_stream, OperatorCertIssued, OperatorCertRevoked};
use events::store::{EventStore, ExpectedVersion, StoreError, StoreTx};
use events::{new_event_id, EventPayload, NewEvent};
use projections::operators::OperatorCerts;
use projections::operators_read::{
    operator_cert, operator_certs_in_store, operator_stream_version, revoked_operator_serials,
    OperatorCertRow,
};
use projections::Projection;
use rand_core::CryptoRngCore;
use time::Duration;

use crate::clock::Clock;
use crate::quorum::stream::DEPLOYMENT_TENANT;
use crate::run::{append_and_project, decided, run, AsConflict, At, Command, Decided, RunError};

/// The projection the operator commands apply inline (also in [`crate::every_projection`]).
pub fn projections() -> [&'static dyn Projection; 1] {
    static OPERATOR_CERTS: OperatorCerts = OperatorCerts;
    [&OPERATOR_CERTS]
}

/// What an operator-certificate command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// Refused by the domain (a bad value, or NOT_FOUND): nothing written.
    #[error("{0}")]
    Refused(#[from] OperatorRefusal),
    /// The operator CA could not issue (expired, randomness).
    #[error("the operator CA cannot issue: {0}")]
    Certificate(#[from] OperatorCertError),
    /// A stored row the command cannot read back.
    #[error("operator_certs row {serial}: {why} (rebuild the projections with `bcctl rebuild`)")]
    Corrupt { serial: String, why: String },
    /// The store.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for OperatorError {
    fn from(e: StoreError) -> Self {
        OperatorError::Run(RunError::Store(e))
    }
}

impl AsConflict for OperatorError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            OperatorError::Run(run) => run.into_conflict().map_err(OperatorError::Run),
            other => Err(other),
        }
    }
}

impl OperatorError {
    /// Whether this is a bad value (exit 2) rather than a failure (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, OperatorError::Refused(r) if r.is_usage())
    }
}

/// An operator certificate as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorCertView {
    /// Lower-case hex.
    pub serial: String,
    pub name: String,
    pub role: String,
    pub spiffe_id: String,
    pub not_before_us: i64,
    pub not_after_us: i64,
    /// Lower-case hex of the DER's SHA-256.
    pub certificate_sha256: String,
    pub revoked: bool,
    pub revoke_reason: Option<String>,
    pub issued_at_us: i64,
    pub revoked_at_us: Option<i64>,
}

impl From<OperatorCertRow> for OperatorCertView {
    fn from(r: OperatorCertRow) -> Self {
        OperatorCertView {
            serial: r.serial,
            name: r.name,
            role: r.role,
            spiffe_id: r.spiffe_id,
            not_before_us: r.not_before_us,
            not_after_us: r.not_after_us,
            certificate_sha256: hex::encode(&r.certificate_sha256),
            revoked: r.revoked,
            revoke_reason: r.revoke_reason,
            issued_at_us: r.issued_at_us,
            revoked_at_us: r.revoked_at_us,
        }
    }
}

/// A certificate issued and recorded.
#[derive(Debug, Clone)]
pub struct IssuedOperator {
    /// The certificate (DER, serial, validity).
    pub certificate: IssuedCertificate,
    /// `spiffe://<td>/operator/<name>`.
    pub spiffe_id: String,
}

/// Issues the certificate `decision` describes from `operator_ca` for `public_key` (the
/// operator's own key) and records `operator.cert.issued` (see the module docs).
pub async fn issue_operator(
    store: &EventStore,
    clock: &dyn Clock,
    decision: &IssueDecision,
    operator_ca: &OperatorCa,
    public_key: &PublicKey,
) -> Result<IssuedOperator, OperatorError> {
    let certificate = issue_operator_certificate(
        operator_ca,
        &decision.name,
        decision.role,
        public_key,
        Duration::days(decision.days),
        clock.now(),
    )?;
    let record = RecordIssued {
        decision,
        certificate: &certificate,
        trust_domain: operator_ca.trust_domain().as_str(),
    };
    let spiffe_id = run(store, clock, &record).await?;
    Ok(IssuedOperator {
        certificate,
        spiffe_id,
    })
}

/// What `operator revoke` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeOutcome {
    /// The certificate as it now stands (revoked).
    pub certificate: OperatorCertView,
    /// `false`: it was revoked already and nothing was appended.
    pub recorded: bool,
}

/// Revokes the operator certificate `serial` (hex, any case; `:` separators allowed) for
/// `reason` (see the module docs).
pub async fn revoke_operator(
    store: &EventStore,
    clock: &dyn Clock,
    serial: &str,
    reason: &str,
) -> Result<RevokeOutcome, OperatorError> {
    let serial = normalize_serial(serial)?;
    let revoke = Revoke {
        serial: &serial,
        reason,
    };
    let recorded = match run(store, clock, &revoke).await? {
        RevokeDecision::Revoke { .. } => true,
        RevokeDecision::AlreadyRevoked { .. } => false,
    };
    let row = projections::operators_read::operator_cert_in_store(store, &serial)
        .await?
        .ok_or_else(|| OperatorError::Corrupt {
            serial: serial.clone(),
            why: "revoked but not found after the commit".into(),
        })?;
    Ok(RevokeOutcome {
        certificate: row.into(),
        recorded,
    })
}

/// Recording an issued certificate, as the runner drives it.
struct RecordIssued<'a> {
    decision: &'a IssueDecision,
    certificate: &'a IssuedCertificate,
    trust_domain: &'a str,
}

#[async_trait]
impl Command for RecordIssued<'_> {
    type State = ();
    type Event = OperatorCertIssued;
    type Outcome = String;
    type Answer = String;
    type Error = OperatorError;

    async fn load(&self, _: &mut StoreTx, _: &At) -> Result<(), OperatorError> {
        Ok(())
    }

    fn decide(&self, _: &(), _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_issued(self.decision, self.certificate, self.trust_domain)
            .map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &(),
        events: Vec<OperatorCertIssued>,
        at: &At,
    ) -> Result<(), OperatorError> {
        // A fresh random serial cannot collide with another issuance; Any keeps concurrent
        // issuances to one operator from retrying each other.
        let stream = operator_stream(self.decision.name.as_str());
        append_operator_events(tx, &stream, ExpectedVersion::Any, &events, at).await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: (),
        spiffe_id: String,
        _: &At,
    ) -> Result<String, OperatorError> {
        Ok(spiffe_id)
    }
}

/// `operator revoke`, as the runner drives it.
struct Revoke<'a> {
    serial: &'a str,
    reason: &'a str,
}

#[async_trait]
impl Command for Revoke<'_> {
    type State = Option<OperatorCertRow>;
    type Event = OperatorCertRevoked;
    type Outcome = RevokeDecision;
    type Answer = RevokeDecision;
    type Error = OperatorError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, OperatorError> {
        Ok(operator_cert(tx, self.serial).await?)
    }

    fn decide(&self, row: &Self::State, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let state = row.as_ref().map(|r| CertState {
            name: r.name.clone(),
            revoked: r.revoked,
        });
        decided(decide_revoke(self.serial, state.as_ref(), self.reason))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &Self::State,
        events: Vec<OperatorCertRevoked>,
        at: &At,
    ) -> Result<(), OperatorError> {
        for event in &events {
            let version = operator_stream_version(tx, &event.name).await?;
            let expected = match version.map(u64::try_from) {
                Some(Ok(v)) => ExpectedVersion::Exact(v),
                Some(Err(_)) => {
                    return Err(OperatorError::Corrupt {
                        serial: event.serial.clone(),
                        why: "a negative stream version".into(),
                    })
                }
                None => ExpectedVersion::NoStream,
            };
            let stream = operator_stream(&event.name);
            append_operator_events(tx, &stream, expected, std::slice::from_ref(event), at).await?;
        }
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        decision: RevokeDecision,
        _: &At,
    ) -> Result<RevokeDecision, OperatorError> {
        Ok(decision)
    }
}

/// Appends operator events to `stream` as events of the deployment tenant, with the projection.
async fn append_operator_events<P: EventPayload>(
    tx: &mut StoreTx,
    stream: &str,
    expected: ExpectedVersion,
    events: &[P],
    at: &At,
) -> Result<(), OperatorError> {
    let events: Vec<NewEvent> = events
        .iter()
        .map(|e| NewEvent::from_payload(new_event_id(), DEPLOYMENT_TENANT, at.now_us, e))
        .collect();
    append_and_project(tx, &projections(), stream, expected, &events).await?;
    Ok(())
}

/// Every operator certificate the log records, revoked ones too, in issue order.
pub async fn list_operators(store: &EventStore) -> Result<Vec<OperatorCertView>, OperatorError> {
    Ok(operator_certs_in_store(store)
        .await?
        .into_iter()
        .map(OperatorCertView::from)
        .collect())
}

/// The serials (minimal big-endian bytes, as the certificate carries them) of every revoked
/// operator certificate: what the admin API refuses at the handshake.
pub async fn revoked_serials(store: &EventStore) -> Result<BTreeSet<Vec<u8>>, OperatorError> {
    revoked_operator_serials(store)
        .await?
        .into_iter()
        .map(|hex_serial| {
            hex::decode(&hex_serial).map_err(|_| OperatorError::Corrupt {
                serial: hex_serial.clone(),
                why: "the serial is not hex".into(),
            })
        })
        .collect()
}
